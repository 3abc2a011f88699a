"""Kafka's text checkpoint files: per-partition offsets (recovery point, log start offset,
replication offset, cleaner offset) and leader-epoch entries, written atomically
(tmp file, fsync, rename). Only the file format lives here.
"""

import os
import threading

from kafkatw.crash_points import crash_point

CURRENT_VERSION = 0

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"

#: The checkpoints a log manager writes at the top of a log dir (a dir with none of them and
#: no partition has never held data).
LOG_DIR_CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
                       REPLICATION_OFFSET_CHECKPOINT, CLEANER_OFFSET_CHECKPOINT)


class CheckpointError(Exception):
    pass


_locks_guard = threading.Lock()
_locks = {}  # path -> Lock


def lock_for(path):
    """The lock every writer of ``path`` holds (a thread fsyncing it holds it too)."""
    with _locks_guard:
        lock = _locks.get(path)
        if lock is None:
            lock = _locks[path] = threading.Lock()
        return lock


def write_lines(path, lines, sync=True, version=CURRENT_VERSION):
    """Kafka's checkpoint layout (version, count, one entry a line), atomically."""
    # One writer per file at a time: the flush thread and the reactor both write a log's
    # leader-epoch checkpoint, and two writers sharing the tmp file made os.replace fail.
    tmp = path + ".tmp"
    with lock_for(path):
        with open(tmp, "w") as f:
            f.write("%d\n%d\n" % (version, len(lines)))
            for line in lines:
                f.write(line + "\n")
            f.flush()
            if sync:
                os.fsync(f.fileno())
        crash_point("checkpoint.after_tmp_written", os.path.basename(path))
        os.replace(tmp, path)


def _read_checked(path, version):
    """``(text, count)`` of a :func:`write_lines` file whose header (version, entry count) is
    well formed, or None if there is no file."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    head = text.split("\n", 2)
    try:
        found, count = int(head[0]), int(head[1])
    except (IndexError, ValueError):
        raise CheckpointError("malformed checkpoint file %s" % (path,))
    if found != version:
        raise CheckpointError("unrecognised version %d in %s" % (found, path))
    return text, count


def read_lines(path, version=CURRENT_VERSION):
    """The entries of a :func:`write_lines` file split at spaces ([] if there is none)."""
    checked = _read_checked(path, version)
    if checked is None:
        return []
    text, count = checked
    entries = text.split("\n")[2:2 + count]
    if len(entries) != count or any(not e.strip() for e in entries):
        raise CheckpointError("expected %d entries in %s" % (count, path))
    return [e.split() for e in entries]


def write_offsets(path, offsets, sync=True):
    """``offsets``: {(topic, partition): offset}."""
    lines = ["%s %d %d" % (t, p, o) for (t, p), o in sorted(offsets.items())]
    write_lines(path, lines, sync)


def read_offsets_of(path, wanted):
    """:func:`read_offsets` for the entries of ``wanted`` ((topic, partition)s) only, each
    found in the text instead of every line parsed: a start after a clean shutdown wants a
    few logs' offsets (those its summary leaves out) from files of 50,000 lines. The header
    is checked as :func:`read_lines` does; a wanted entry's line must be well formed."""
    checked = _read_checked(path, CURRENT_VERSION)
    if checked is None:
        return {}
    text, count = checked
    if text.count("\n") - 2 + (not text.endswith("\n")) != count:  # (a last line's newline)
        raise CheckpointError("expected %d entries in %s" % (count, path))
    out = {}
    for topic, partition in wanted:
        key = "\n%s %d " % (topic, partition)  # (names hold no spaces: one line matches)
        at = text.find(key)
        if at < 0:
            continue
        end = text.find("\n", at + 1)
        value = text[at + len(key):end if end >= 0 else len(text)]
        try:
            out[(topic, partition)] = int(value)
        except ValueError:
            raise CheckpointError("malformed line %r in %s" % (key[1:] + value, path))
    return out


def read_offsets(path):
    out = {}
    for fields in read_lines(path):
        if len(fields) != 3:
            raise CheckpointError("malformed line %r in %s" % (" ".join(fields), path))
        out[(fields[0], int(fields[1]))] = int(fields[2])
    return out


def write_epochs(path, entries, sync=True):
    """``entries``: [(epoch, start_offset)]."""
    write_lines(path, ["%d %d" % (e, o) for e, o in entries], sync)


def read_epochs(path):
    out = []
    for fields in read_lines(path):
        if len(fields) != 2:
            raise CheckpointError("malformed line %r in %s" % (" ".join(fields), path))
        out.append((int(fields[0]), int(fields[1])))
    return out
