"""``--output text|json`` of the ``kafkatw`` listings: whether a command writes JSON, and how.

A listing writes one JSON document (an array of objects with camelCase keys, as Kafka's
``--output json`` tools and admin APIs name them) so scripts need no column parsing. Tables and
other text stay with the commands.
"""

import json
import os
import sys

FORMATS = ("text", "json")


def wants_json(args):
    return getattr(args, "output", "text") == "json"


def write_json(out, value):
    out.write(json.dumps(value, sort_keys=False) + "\n")


def json_rows(headers, rows):
    """A table's rows as objects keyed by its headers in lowerCamelCase (``ProducerId`` ->
    ``producerId``, ``Duration(min)`` -> ``durationMin``); Kafka's "None" cells become null."""
    keys = []
    for header in headers:
        words = header.replace("(", " ").replace(")", " ").replace("-", " ").split()
        key = "".join(w[:1].upper() + w[1:] for w in words)
        keys.append(key[:1].lower() + key[1:])
    return [{k: (None if v == "None" else v) for k, v in zip(keys, row)} for row in rows]


def progress_wanted(writes_records, stdout=None, stderr=None):
    """Whether long work shows a progress bar (on stderr): only on a terminal, and not on the
    terminal where records are being printed (``consume`` into a file shows one, on screen not)."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    if not _isatty(stderr):
        return False
    if writes_records and _isatty(stdout):
        return not os.path.samestat(os.fstat(stdout.fileno()), os.fstat(stderr.fileno()))
    return True


def _isatty(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
