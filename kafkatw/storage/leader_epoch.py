"""LeaderEpochFileCache: (leader epoch -> start offset) entries of one partition, persisted in
its leader-epoch-checkpoint; answers OffsetForLeaderEpoch. No log access of its own.
"""

import bisect
import os

from . import checkpoint
from .lazy import loaded_on_use

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochFileCache:
    """Every change is written at once (fsynced when ``sync``, unless the caller says the
    change need not be durable yet); ``lazy``: the file is read on first use, not now (a log
    loaded from a clean-shutdown summary may never need it)."""

    # the entries of a lazy cache, read when first used (not __getattr__: a class with one
    # has every attribute read take the slow path)
    _epochs = loaded_on_use(lambda cache, name: cache._read())
    _offsets = loaded_on_use(lambda cache, name: cache._read())

    def __init__(self, path, sync=True, lazy=False, new=False):
        """``new``: there is no file yet (a partition being created)."""
        self.path = path
        self._sync = sync
        self._unsynced = False  # changed without an fsynced write since the last flush
        self._writes = 0   # writes left to the page cache (counted, see unsynced_writes)
        self._synced = 0   # of those, the ones known durable (a later fsync covers them)
        if new:
            self._epochs, self._offsets = [], []
        elif not lazy:
            self._read()

    def _read(self):
        epochs, offsets = [], []
        if self.path is not None and os.path.exists(self.path):
            for epoch, offset in checkpoint.read_epochs(self.path):
                epochs.append(epoch)
                offsets.append(offset)
        self._epochs = epochs      # ascending
        self._offsets = offsets    # start offsets, same order

    def entries(self):
        return list(zip(self._epochs, self._offsets))

    def _write(self, durable=True):
        if self.path is not None:
            sync = durable and self._sync
            checkpoint.write_epochs(self.path, self.entries(), sync)
            if sync:
                self._synced = self._writes
            else:
                self._writes += 1
            self._unsynced = not self._sync

    def flush(self):
        """Make the entries durable: a write of each change was fsynced already unless the
        cache was made with ``sync=False`` or the change was assigned with ``durable=False``
        (a clean shutdown of 2,000 logs rewrote and fsynced 2,000 unchanged files)."""
        if self.path is None:
            return
        if self._unsynced:
            checkpoint.write_epochs(self.path, self.entries(), True)
            self._unsynced = False
            self._synced = self._writes
        elif self._synced < self._writes:
            self.mark_synced(self.sync_file(self.path, self._writes))

    def unsynced_writes(self):
        """None when the file is durable, else a count to hand to :meth:`sync_file` (in any
        thread) and then to :meth:`mark_synced` (on the thread that owns the cache)."""
        return self._writes if self._synced < self._writes and not self._unsynced else None

    @staticmethod
    def sync_file(path, writes):
        """fsync the checkpoint at ``path`` as it is now and its directory (the rename that
        put it there); safe in a thread: the file is not replaced meanwhile (a change
        written then waits for this). Returns ``writes``."""
        with checkpoint.lock_for(path):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return writes

    def mark_synced(self, writes):
        self._synced = max(self._synced, writes)

    def latest_epoch(self):
        return self._epochs[-1] if self._epochs else None

    def earliest_entry(self):
        return (self._epochs[0], self._offsets[0]) if self._epochs else None

    def assign(self, epoch, start_offset, flush=True, durable=True):
        """Record that ``epoch`` starts at ``start_offset`` if it is new (Kafka's assign).

        ``durable=False`` (an epoch first seen in a batch being appended at ``start_offset``):
        the file is written but not fsynced; the log's next flush fsyncs it before its
        recovery point passes ``start_offset``, and recovery after a crash assigns the epochs
        of batches above the recovery point again. The first append to each of 50,000 new
        partitions cost a ~10 ms fsync on the reactor."""
        if epoch < 0:
            return False
        epochs = self._epochs  # (loaded on use: a read of it is never specialised, so once)
        if epochs and (epoch <= epochs[-1]):
            if epoch == epochs[-1] or start_offset >= self._offsets[-1]:
                return False
        # Remove entries that conflict (higher epoch or offset >= start_offset).
        while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
            self._epochs.pop()
            self._offsets.pop()
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        if flush:
            self._write(durable)
        else:
            self._unsynced = True  # written by the next flush
        return True

    def epoch_for_offset(self, offset):
        i = bisect.bisect_right(self._offsets, offset) - 1
        return self._epochs[i] if i >= 0 else None

    def end_offset_for(self, requested_epoch, log_end_offset):
        """(epoch, end offset) as Kafka's LeaderEpochFileCache.endOffsetFor: the latest epoch
        ends at the log end; an older one at the start of the next epoch we know, reported
        with the newest epoch at or below it, or with itself when it is older than every
        epoch we know (a follower truncates to where our first epoch starts); an epoch newer
        than all we know is undefined."""
        if not self._epochs or requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        i = bisect.bisect_right(self._epochs, requested_epoch)  # the first epoch above it
        if i == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if i == 0:
            return requested_epoch, self._offsets[0]
        return self._epochs[i - 1], self._offsets[i]

    def truncate_from_end(self, end_offset):
        """Drop entries starting at or after ``end_offset``."""
        changed = False
        while self._offsets and self._offsets[-1] >= end_offset:
            self._epochs.pop()
            self._offsets.pop()
            changed = True
        if changed:
            self._write()

    def truncate_from_start(self, start_offset):
        """Entries wholly below ``start_offset`` go; the one spanning it starts there."""
        i = bisect.bisect_right(self._offsets, start_offset) - 1
        if i < 0:
            return
        if i > 0 or self._offsets[0] < start_offset:
            del self._epochs[:i]
            del self._offsets[:i]
            self._offsets[0] = start_offset
            self._write()

    def clear(self):
        self._epochs = []
        self._offsets = []
        self._write()
