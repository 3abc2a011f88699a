"""The clean-shutdown summary of a log dir: per partition what serving it needs before its files
are opened (log start and end, high watermark, active segment, size and segment count, what
retention looks at, topic id). Written just before the clean-shutdown marker, read and removed at the next start;
one line per partition, parsed faster than the three offset checkpoints it stands in for. Only
the file format and the value type live here; loading a log from it is the log's, deciding when
is the manager's.
"""

import base64
import collections
import os


from . import checkpoint

LOG_SUMMARY_FILE = "clean-shutdown-log-summary"
SUMMARY_VERSION = 0


class SummaryError(Exception):
    pass


class LogSummary(collections.namedtuple("LogSummary", (
        "log_start_offset", "recovery_point", "high_watermark", "log_end_offset",
        "active_base",        # base offset of the active (last) segment
        "active_size",        # bytes in it
        "size",               # bytes in all segments
        "segment_count",
        "first_base",         # base offset of the first segment
        "first_largest_ts",   # its largest timestamp (retention.ms looks at it)
        "topic_id",           # 16 bytes or None
        "producer_snapshot",  # a .snapshot file is in the partition dir
        ))):
    """One partition's log as a clean shutdown left it (a tuple: 50,000 are made at start)."""

    __slots__ = ()


def _encode_id(topic_id):
    if topic_id is None:
        return "-"
    return base64.urlsafe_b64encode(topic_id).decode("ascii").rstrip("=")


def _decode_id(text):
    if text == "-":
        return None
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def write_summaries(path, summaries):
    """``summaries``: {(topic, partition): LogSummary}; written atomically with an fsync."""
    ids = {}
    lines = []
    for (t, p), s in sorted(summaries.items()):
        encoded = ids.get(s.topic_id)
        if encoded is None:
            encoded = ids[s.topic_id] = _encode_id(s.topic_id)
        lines.append("%s %d %d %d %d %d %d %d %d %d %d %d %s %d" % (
            t, p, s.log_start_offset, s.recovery_point, s.high_watermark, s.log_end_offset,
            s.active_base, s.active_size, s.size, s.segment_count, s.first_base,
            s.first_largest_ts, encoded, 1 if s.producer_snapshot else 0))
    checkpoint.write_lines(path, lines, version=SUMMARY_VERSION)


def read_summaries(path):
    """{partition directory name: (topic, partition, LogSummary)}; {} when there is no file.
    SummaryError when the file is not one this version wrote (the logs are then loaded from
    their files)."""
    try:
        with open(path) as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return {}
    try:
        version, count = int(lines[0]), int(lines[1])
    except (IndexError, ValueError):
        raise SummaryError("malformed summary file %s" % (path,))
    if version != SUMMARY_VERSION:
        raise SummaryError("unrecognised version %d in %s" % (version, path))
    rows = lines[2:2 + count]
    if len(rows) != count or lines[2 + count:] not in ([], [""]):
        raise SummaryError("expected %d entries in %s" % (count, path))
    out = {}
    ids = {}
    make = LogSummary._make
    line = None
    try:
        for line in rows:
            fields = line.split(" ")
            if len(fields) != 14:
                raise ValueError(line)
            encoded = fields[12]
            topic_id = ids.get(encoded, ids)
            if topic_id is ids:
                topic_id = ids[encoded] = _decode_id(encoded)
            values = list(map(int, fields[2:12]))
            values.append(topic_id)
            values.append(fields[13] == "1")
            out[fields[0] + "-" + fields[1]] = (fields[0], int(fields[1]), make(values))
    except (ValueError, TypeError):
        raise SummaryError("malformed line %r in %s" % (line, path))
    return out


def remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
