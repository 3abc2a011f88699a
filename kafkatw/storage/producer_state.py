"""Idempotent-producer state of one partition (Kafka's ProducerStateManager, ProducerStateEntry,
BatchMetadata): producer id -> epoch and the last 5 batches' sequences/offsets, duplicate and
sequence checks, snapshots ``<20-digit offset>.snapshot`` and rebuilding from batch headers.

Kafka keeps this object inside UnifiedLog and updates it under the log lock during the append.
Here it stands beside the log: the replica manager checks a request's batches before calling
``UnifiedLog.append_as_leader`` and records them after, which is race-free because everything
runs on the reactor thread. Open transactions (producer id -> first offset) give the log its
first unstable offset; a marker returns the CompletedTxn it ends, and the replica manager puts an
aborted one into the log's ``.txnindex``. It reads only BatchHeader attributes.
"""

import os
import struct

import attr
import crc32c
from twisted.logger import Logger

from kafkatw.protocol import errors

log = Logger()

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86400000  # producer.id.expiration.ms
SNAPSHOT_SUFFIX = ".snapshot"
INT31 = 0x80000000

_SNAP_MAGIC = b"KTPS"
_SNAP_VERSION = 1
_SNAP_HEAD = struct.Struct(">4sHI")  # magic, version, crc32c of everything after
_SNAP_COUNT = struct.Struct(">I")
_SNAP_ENTRY = struct.Struct(">qhiqqB")  # pid, epoch, coordinator epoch, last ts, txn first offset, n
_SNAP_BATCH = struct.Struct(">iiqqq")  # first seq, last seq, first offset, last offset, timestamp


def snapshot_file_name(offset):
    return "%020d%s" % (offset, SNAPSHOT_SUFFIX)


def in_sequence(last_seq, next_seq):
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT31 - 1)


@attr.s(slots=True, frozen=True)
class BatchMetadata:
    first_seq = attr.ib()
    last_seq = attr.ib()
    first_offset = attr.ib()
    last_offset = attr.ib()
    timestamp = attr.ib()


class ProducerStateEntry:
    __slots__ = ("producer_id", "producer_epoch", "batches", "coordinator_epoch",
                 "last_timestamp", "current_txn_first_offset")

    def __init__(self, producer_id, producer_epoch=NO_PRODUCER_EPOCH, coordinator_epoch=-1,
                 last_timestamp=-1, current_txn_first_offset=-1):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.batches = []  # oldest first, at most NUM_BATCHES_TO_RETAIN
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset

    @property
    def last_seq(self):
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self):
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate_batch(self, header):
        if header.producer_epoch != self.producer_epoch:
            return None
        first, last = header.base_sequence, header.last_sequence
        for b in self.batches:
            if b.first_seq == first and b.last_seq == last:
                return b
        return None

    def add_batch(self, epoch, first_seq, last_seq, first_offset, last_offset, timestamp):
        if epoch != self.producer_epoch:
            self.batches = []
            self.producer_epoch = epoch
        self.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp))
        if len(self.batches) > NUM_BATCHES_TO_RETAIN:
            del self.batches[0]
        self.last_timestamp = timestamp

    def __repr__(self):
        return "ProducerStateEntry(pid=%d, epoch=%d, batches=%r)" % (
            self.producer_id, self.producer_epoch, self.batches)


@attr.s(slots=True, frozen=True)
class CheckResult:
    """``error`` is NONE for a batch to append; ``duplicate`` is the original BatchMetadata
    when the batch was already written (answer with its offsets, append nothing)."""

    error = attr.ib(default=errors.NONE)
    duplicate = attr.ib(default=None)
    message = attr.ib(default=None)


OK = CheckResult()


@attr.s(slots=True, frozen=True)
class CompletedTxn:
    """A transaction a COMMIT/ABORT marker ended at ``last_offset`` (Kafka's CompletedTxn)."""

    producer_id = attr.ib()
    first_offset = attr.ib()
    last_offset = attr.ib()
    is_aborted = attr.ib()


class ProducerStateManager:
    def __init__(self, log_dir, producer_id_expiration_ms=DEFAULT_PRODUCER_ID_EXPIRATION_MS):
        self.log_dir = log_dir
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers = {}
        self.ongoing_txns = {}  # producer id -> first offset of its open transaction
        self.map_end_offset = 0  # the state reflects the log below this offset

    # -- checks (before append) ------------------------------------------------------------

    def last_entry(self, producer_id):
        return self.producers.get(producer_id)

    def check(self, header):
        """Check one client batch against the stored state."""
        return self.check_batches([header])

    def check_batches(self, headers):
        """Check the batches of one produce request for a partition, in order, each against
        the state left by the ones before it. The first problem decides the answer; a
        duplicate is reported only for the first batch of a producer (as Kafka does)."""
        pending = {}  # pid -> (epoch, last_seq) from earlier batches of this request
        for h in headers:
            if h.producer_id < 0:
                continue
            pid = h.producer_id
            entry = self.producers.get(pid)
            if pid in pending:
                epoch, last_seq = pending[pid]
                has_state = True
            else:
                if entry is not None:
                    dup = entry.find_duplicate_batch(h)
                    if dup is not None:
                        return CheckResult(duplicate=dup)
                epoch = entry.producer_epoch if entry is not None else NO_PRODUCER_EPOCH
                last_seq = entry.last_seq if entry is not None else NO_SEQUENCE
                has_state = entry is not None and epoch != NO_PRODUCER_EPOCH
            res = self._check_one(h, epoch, last_seq, has_state)
            if res is not OK:
                return res
            pending[pid] = (h.producer_epoch, h.last_sequence)
        return OK

    def _check_one(self, h, epoch, last_seq, has_state):
        if has_state and h.producer_epoch < epoch:
            return CheckResult(errors.INVALID_PRODUCER_EPOCH, message=(
                "Epoch of producer %d is %d, which is smaller than the last seen epoch %d"
                % (h.producer_id, h.producer_epoch, epoch)))
        first_seq = h.base_sequence
        if not has_state:
            # Unknown producer (new, or its records were removed by retention / DeleteRecords):
            # Kafka 4.0 accepts any sequence (KIP-360); UNKNOWN_PRODUCER_ID is no longer sent.
            return OK
        if h.producer_epoch != epoch:
            if first_seq != 0:
                return CheckResult(errors.OUT_OF_ORDER_SEQUENCE_NUMBER, message=(
                    "Invalid sequence number for new epoch of producer %d: %d (request epoch), "
                    "%d (seq. number), %d (current producer epoch)"
                    % (h.producer_id, h.producer_epoch, first_seq, epoch)))
            return OK
        if last_seq == NO_SEQUENCE:
            # epoch bumped by a control record: the sequence restarts anywhere is not allowed
            if first_seq != 0:
                return CheckResult(errors.OUT_OF_ORDER_SEQUENCE_NUMBER, message=(
                    "Out of order sequence number for producer %d: found %d, expected 0"
                    % (h.producer_id, first_seq)))
            return OK
        if not in_sequence(last_seq, first_seq):
            return CheckResult(errors.OUT_OF_ORDER_SEQUENCE_NUMBER, message=(
                "Out of order sequence number for producer %d: %d (incoming seq. number), "
                "%d (current end sequence number)" % (h.producer_id, first_seq, last_seq)))
        return OK

    # -- updates (after append, and when rebuilding) ----------------------------------------

    def update(self, header, first_offset, last_offset, timestamp=None, is_abort=None,
               coordinator_epoch=None):
        """Record an appended batch at [first_offset, last_offset]. For a transaction marker
        (``is_abort`` says which kind) the :class:`CompletedTxn` it ends, if one was open."""
        if last_offset + 1 > self.map_end_offset:
            self.map_end_offset = last_offset + 1
        pid = header.producer_id
        if pid < 0:
            return
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid)
        ts = header.max_timestamp if timestamp is None else timestamp
        if header.is_control:
            # A transaction marker ends the transaction; no data sequence.
            if header.producer_epoch != entry.producer_epoch:
                entry.batches = []
                entry.producer_epoch = header.producer_epoch
            txn_first = entry.current_txn_first_offset
            entry.current_txn_first_offset = -1
            if coordinator_epoch is not None:
                entry.coordinator_epoch = coordinator_epoch
            entry.last_timestamp = ts
            self.ongoing_txns.pop(pid, None)
            if txn_first < 0:
                return None
            return CompletedTxn(pid, txn_first, first_offset, bool(is_abort))
        entry.add_batch(header.producer_epoch, header.base_sequence, header.last_sequence,
                        first_offset, last_offset, ts)
        if header.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self.ongoing_txns[pid] = first_offset
        return None

    # -- transactions -----------------------------------------------------------------------

    def first_unstable_offset(self):
        """The first offset of the earliest open transaction, or None (the LSO is the HW)."""
        ongoing = self.ongoing_txns
        return min(ongoing.values()) if ongoing else None

    def last_stable_offset(self, completed):
        """The LSO right after ``completed`` ended (Kafka's lastStableOffset(completedTxn)),
        stored with an aborted transaction in the ``.txnindex``."""
        others = [o for p, o in self.ongoing_txns.items() if p != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def rebuild(self, headers):
        """Replay batch headers read from the log (e.g. ``iter_batch_headers`` of each segment
        from :attr:`map_end_offset` on), skipping those already reflected."""
        n = 0
        for h in headers:
            if type(h) is tuple:  # (pos, header) pairs from iter_batch_headers
                h = h[1]
            if h.next_offset <= self.map_end_offset:
                continue
            self.update(h, h.base_offset, h.last_offset)
            n += 1
        return n

    def truncate_fully(self, offset=0):
        self.producers.clear()
        self.ongoing_txns.clear()
        self.map_end_offset = offset

    def remove_expired_producers(self, now_ms):
        """Forget producers idle for producer.id.expiration.ms with no open transaction."""
        expired = [pid for pid, e in self.producers.items()
                   if e.current_txn_first_offset < 0
                   and now_ms - e.last_timestamp >= self.producer_id_expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return expired

    # -- snapshots --------------------------------------------------------------------------

    def snapshot_offsets(self):
        out = []
        try:
            names = os.listdir(self.log_dir)
        except FileNotFoundError:
            return out
        for name in names:
            if name.endswith(SNAPSHOT_SUFFIX):
                stem = name[: -len(SNAPSHOT_SUFFIX)]
                if stem.isdigit():
                    out.append(int(stem))
        return sorted(out)

    def latest_snapshot_offset(self):
        offsets = self.snapshot_offsets()
        return offsets[-1] if offsets else None

    def encode_snapshot(self):
        body = bytearray(_SNAP_COUNT.pack(len(self.producers)))
        for e in self.producers.values():
            body += _SNAP_ENTRY.pack(e.producer_id, e.producer_epoch, e.coordinator_epoch,
                                     e.last_timestamp, e.current_txn_first_offset, len(e.batches))
            for b in e.batches:
                body += _SNAP_BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset,
                                         b.timestamp)
        return _SNAP_HEAD.pack(_SNAP_MAGIC, _SNAP_VERSION, crc32c.crc32c(bytes(body))) + bytes(body)

    @staticmethod
    def decode_snapshot(data):
        """Producers from snapshot bytes; ValueError if corrupt."""
        if len(data) < _SNAP_HEAD.size + _SNAP_COUNT.size:
            raise ValueError("snapshot too short")
        magic, version, crc = _SNAP_HEAD.unpack_from(data, 0)
        if magic != _SNAP_MAGIC or version != _SNAP_VERSION:
            raise ValueError("not a producer snapshot (magic %r version %d)" % (magic, version))
        body = memoryview(data)[_SNAP_HEAD.size:]
        if crc32c.crc32c(bytes(body)) != crc:
            raise ValueError("snapshot CRC mismatch")
        pos = _SNAP_HEAD.size
        (count,) = _SNAP_COUNT.unpack_from(data, pos)
        pos += _SNAP_COUNT.size
        producers = {}
        try:
            for _ in range(count):
                pid, epoch, coord, last_ts, txn_first, n = _SNAP_ENTRY.unpack_from(data, pos)
                pos += _SNAP_ENTRY.size
                e = ProducerStateEntry(pid, epoch, coord, last_ts, txn_first)
                for _ in range(n):
                    e.batches.append(BatchMetadata(*_SNAP_BATCH.unpack_from(data, pos)))
                    pos += _SNAP_BATCH.size
                producers[pid] = e
        except struct.error as exc:
            raise ValueError("truncated snapshot: %s" % exc)
        if pos != len(data):
            raise ValueError("trailing bytes in snapshot")
        return producers

    def take_snapshot(self, offset=None):
        """Write the state as of :attr:`map_end_offset` (or ``offset``) atomically; the path."""
        offset = self.map_end_offset if offset is None else offset
        return write_snapshot(self.log_dir, offset, self.encode_snapshot())

    def delete_snapshots_before(self, offset):
        delete_snapshots_before(self.log_dir, offset)

    def load(self, log_start_offset=0, log_end_offset=None):
        """Load the newest valid snapshot at or below ``log_end_offset`` (corrupt or too new
        ones are deleted). Returns the offset from which the caller must replay batch headers
        with :meth:`rebuild` (``log_start_offset`` when no snapshot is usable)."""
        self.truncate_fully(log_start_offset)
        for off in reversed(self.snapshot_offsets()):
            path = os.path.join(self.log_dir, snapshot_file_name(off))
            if log_end_offset is not None and off > log_end_offset:
                _unlink(path)
                continue
            try:
                with open(path, "rb") as f:
                    producers = self.decode_snapshot(f.read())
            except (OSError, ValueError) as exc:
                log.warn("Deleting unreadable producer snapshot {path}: {exc}", path=path, exc=exc)
                _unlink(path)
                continue
            # Producers whose last write is gone (retention) are forgotten, as in Kafka.
            self.producers = {pid: e for pid, e in producers.items()
                              if e.current_txn_first_offset >= 0
                              or (e.batches and e.last_data_offset >= log_start_offset)}
            self.ongoing_txns = {pid: e.current_txn_first_offset
                                 for pid, e in self.producers.items()
                                 if e.current_txn_first_offset >= 0}
            self.map_end_offset = max(off, log_start_offset)
            return self.map_end_offset
        return log_start_offset


def write_snapshot(log_dir, offset, data):
    """Write snapshot bytes (:meth:`ProducerStateManager.encode_snapshot`) for ``offset``
    atomically (fsync, rename); the path. Only files: a pool thread may call it."""
    path = os.path.join(log_dir, snapshot_file_name(offset))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def delete_snapshots_before(log_dir, offset):
    """Remove the snapshots of ``log_dir`` below ``offset`` (only files, as above)."""
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return
    for name in names:
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if name.endswith(SNAPSHOT_SUFFIX) and stem.isdigit() and int(stem) < offset:
            _unlink(os.path.join(log_dir, name))


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
