"""The aborted-transaction index of one segment (Kafka's TransactionIndex, ``.txnindex``): one
34-byte entry per transaction aborted by a marker in that segment, read by READ_COMMITTED
fetches to tell the client which producers' batches to drop. It owns the file, not the decision
of what was aborted (producer state decides; the log appends).
"""

import os
import struct

import attr

TXN_INDEX_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")  # version, producer id, first offset, last offset, LSO
ENTRY_SIZE = _ENTRY.size  # 34, as Kafka's AbortedTxn


class CorruptTxnIndexError(Exception):
    pass


@attr.s(slots=True, frozen=True)
class AbortedTxn:
    producer_id = attr.ib()
    first_offset = attr.ib()
    last_offset = attr.ib()  # the offset of the ABORT marker
    last_stable_offset = attr.ib()


class TransactionIndex:
    """Entries are kept in memory (an index holds few) and appended to the file as they come;
    the file is created by the first entry, as Kafka does."""

    def __init__(self, path, base_offset, new=False):
        """``new``: the segment is being created, so there is no file to read."""
        self.path = path
        self.base_offset = base_offset
        self.corrupt = None  # why the file could not be read: its segment must be recovered
        self.entries = []
        if not new and os.path.exists(path):
            try:
                self.entries = self._read()
            except CorruptTxnIndexError as e:
                self.corrupt = str(e)

    def _read(self):
        with open(self.path, "rb") as f:
            data = f.read()
        if len(data) % ENTRY_SIZE:
            raise CorruptTxnIndexError("%s: size %d is not a multiple of %d"
                                       % (self.path, len(data), ENTRY_SIZE))
        out = []
        for pos in range(0, len(data), ENTRY_SIZE):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
            if version != TXN_INDEX_VERSION:
                raise CorruptTxnIndexError("%s: entry version %d" % (self.path, version))
            out.append(AbortedTxn(pid, first, last, lso))
        return out

    def append(self, txn):
        if self.entries and txn.last_offset <= self.entries[-1].last_offset:
            raise ValueError("the last offset of appended aborted transaction %r is not above "
                             "the previous one %r" % (txn, self.entries[-1]))
        with open(self.path, "ab") as f:
            f.write(_ENTRY.pack(TXN_INDEX_VERSION, txn.producer_id, txn.first_offset,
                                txn.last_offset, txn.last_stable_offset))
        self.entries.append(txn)

    def collect(self, fetch_offset, upper_bound_offset):
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset); and whether the
        search must go on to the next segment (no entry here reached the upper bound)."""
        found = []
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset:
                found.append(e)
            if e.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def truncate_to(self, offset):
        """Drop entries whose marker is at or after ``offset``."""
        keep = [e for e in self.entries if e.last_offset < offset]
        if len(keep) != len(self.entries):
            self.entries = keep
            self._rewrite()

    def reset(self):
        self.entries = []
        self.corrupt = None
        self._unlink()

    def _rewrite(self):
        if not self.entries:
            self._unlink()
            return
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            for e in self.entries:
                f.write(_ENTRY.pack(TXN_INDEX_VERSION, e.producer_id, e.first_offset,
                                    e.last_offset, e.last_stable_offset))
        os.replace(tmp, self.path)

    def _unlink(self):
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def flush(self):
        if self.entries and os.path.exists(self.path):
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def rename_to(self, path):
        if os.path.exists(self.path):
            os.replace(self.path, path)
        self.path = path

    def delete_if_exists(self):
        self._unlink()

    def sanity_check(self):
        if self.corrupt is not None:
            raise CorruptTxnIndexError(self.corrupt)
        if os.path.exists(self.path) and os.path.getsize(self.path) % ENTRY_SIZE:
            raise CorruptTxnIndexError("%s: size is not a multiple of %d" % (self.path, ENTRY_SIZE))
