"""Named crash points for tests: a file operation calls ``crash_point("log.roll.after_new_segment")``
where a crash would leave the most to recover, and a broker started with
``kafkatw.test.crash.point=<name>`` (or ``<name>:<n>``, the n-th time; ``<name>/<detail>`` only
where the code passes that detail, e.g. a checkpoint's file name) kills itself there with
SIGKILL, as ``kill -9`` would, so a test can restart it and check what survived.

It owns the names and the kill; it does not know the operations. Imports nothing of the broker,
so every layer may mark its points. Unarmed (the default), a point costs one comparison.
"""

import os
import signal

#: Every point the code marks; arming another name is a configuration error.
POINTS = {
    "log.roll.before_new_segment": "the old active segment is inactive, the new one not created",
    "log.roll.after_new_segment": "the new segment's files exist, before the older ones are flushed",
    "cleaner.swap.after_swap_files": "a cleaned segment is renamed to .swap, the old ones not yet",
    "cleaner.swap.after_old_deleted": "old segments renamed to .deleted, the .swap not yet final",
    "checkpoint.after_tmp_written": "a checkpoint's .tmp is written and synced, not renamed",
    "topic.delete.after_metadata": "the deletion is durable in the metadata, the logs untouched",
    "topic.delete.after_rename": "the partition dirs are renamed to -delete, not yet removed",
    "offsets.commit.after_append": "a commit is in __consumer_offsets, not yet answered",
    "txn.end.after_prepare": "a PrepareCommit/PrepareAbort is in __transaction_state (detail: the "
                             "transactional id), no marker sent and EndTxn not answered",
}

_armed = None  # the point's name
_remaining = 0  # hits left before the kill


def parse(value):
    """``name[/detail]`` or ``name[/detail]:n`` -> (name[/detail], n); raises ValueError naming
    what is wrong."""
    name, _, count = value.partition(":")
    name = name.strip()
    if name.partition("/")[0] not in POINTS:
        raise ValueError("unknown crash point %r (known: %s)" % (name, ", ".join(sorted(POINTS))))
    n = 1
    if count:
        try:
            n = int(count)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError("crash point count must be a positive integer, got %r" % (count,))
    return name, n


def arm(value):
    """Arm ``name[:n]`` (None or "" disarms)."""
    global _armed, _remaining
    if not value:
        _armed, _remaining = None, 0
        return
    _armed, _remaining = parse(value)


def crash_point(name, detail=None):
    """Kill this process with SIGKILL if ``name`` (or ``name/detail``) is armed and this is its
    n-th hit."""
    global _remaining
    if _armed is None or (name != _armed and (detail is None or _armed != name + "/" + detail)):
        return
    _remaining -= 1
    if _remaining <= 0:
        os.kill(os.getpid(), signal.SIGKILL)
