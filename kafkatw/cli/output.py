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
