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
    their files). A line whose offsets do not describe a log (see :func:`usable`) is left
    out: that partition is loaded from its files."""
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
    new = tuple.__new__
    line = None
    try:
        for line in rows:  # (50,000 lines at a start: one pass, no per-field Python calls)
            t, p, a, b, c, d, e, f, g, h, i, j, encoded, snap = line.split(" ")
            topic_id = ids.get(encoded, ids)
            if topic_id is ids:
                topic_id = ids[encoded] = _decode_id(encoded)
            summ = new(LogSummary, (int(a), int(b), int(c), int(d), int(e), int(f), int(g),
                                    int(h), int(i), int(j), topic_id, snap == "1"))
            if usable(summ):
                out[t + "-" + p] = (t, int(p), summ)
    except (ValueError, TypeError):
        raise SummaryError("malformed line %r in %s" % (line, path))
    return out


def usable(s):
    """Whether a log can be made from ``s`` with its files left closed: its offsets are in
    order (first segment, active segment, log end; log start within the log; sizes)."""
    return (s.first_base <= s.active_base <= s.log_end_offset
            and s.log_start_offset <= s.log_end_offset and s.active_size <= s.size
            and s.segment_count >= 1)


def remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
