"""``--output text|json`` of the ``kafkatw`` listings: whether a command writes JSON, and how.

A listing writes one JSON document (an array of objects with camelCase keys, as Kafka's
``--output json`` tools and admin APIs name them) so scripts need no column parsing. Tables and
other text stay with the commands.
"""

import json

FORMATS = ("text", "json")


def wants_json(args):
    return getattr(args, "output", "text") == "json"


def write_json(out, value):
    out.write(json.dumps(value, sort_keys=False) + "\n")
