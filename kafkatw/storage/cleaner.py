"""LogCleaner: compaction of logs whose cleanup.policy includes compact (Kafka's LogCleaner,
Cleaner and LogCleanerManager): picks the filthiest log, rewrites [log start, first uncleanable
offset) in size-bounded segment groups in a thread, swaps them in on the reactor only if no
source segment changed, and keeps the cleaner-offset-checkpoint. Retention stays in LogManager.
"""

import os
import struct
import time

import attr
from twisted.internet import defer
from twisted.logger import Logger

from kafkatw.config.types import LONG_MAX
from kafkatw.protocol import records

from . import checkpoint
from .segment import CLEANED_SUFFIX, LogSegment

log = Logger()

_INT32_MAX = 2 ** 31 - 1
_ATTRIBUTES = struct.Struct(">h")
_UINT32 = struct.Struct(">I")


class CleanerStats:
    def __init__(self):
        self.segments = 0  # source segments rewritten
        self.groups = 0  # cleaned segments written
        self.records_read = 0
        self.records_kept = 0
        self.invalid_records = 0  # keyless records dropped (Kafka's invalidMessage)
        self.bytes_read = 0
        self.bytes_written = 0
        self.map_records = 0
        self.elapsed_s = 0.0


@attr.s(slots=True, frozen=True)
class LogToClean:
    """Kafka's LogToClean: the dirty section [first_dirty, first_uncleanable) and its ratio."""

    log = attr.ib()
    first_dirty_offset = attr.ib()
    first_uncleanable_offset = attr.ib()
    clean_bytes = attr.ib()
    cleanable_bytes = attr.ib()
    need_compaction_now = attr.ib(default=False)

    @property
    def total_bytes(self):
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self):
        total = self.total_bytes
        return self.cleanable_bytes / total if total else 0.0


def group_segments_by_size(segments, max_size, max_index_size, first_uncleanable_offset):
    """Kafka's groupSegmentsBySize: consecutive segments whose log and index sizes together fit
    ``segment.bytes`` / ``segment.index.bytes`` and whose offsets fit one relative offset range.
    ``segments`` lists ``(segment, log size)``; returns a list of such lists."""
    groups = []
    i = 0
    n = len(segments)
    while i < n:
        seg, size = segments[i]
        group = [(seg, size)]
        log_size = size
        index_size = seg.offset_index.size_in_bytes
        time_index_size = seg.time_index.size_in_bytes
        i += 1
        while i < n:
            nxt, nsize = segments[i]
            last_offset = (segments[i + 1][0].base_offset if i + 1 < n
                           else first_uncleanable_offset) - 1
            if (log_size + nsize > max_size
                    or index_size + nxt.offset_index.size_in_bytes > max_index_size
                    or time_index_size + nxt.time_index.size_in_bytes > max_index_size
                    or (nsize > 0 and last_offset - seg.base_offset > _INT32_MAX)):
                break
            group.append((nxt, nsize))
            log_size += nsize
            index_size += nxt.offset_index.size_in_bytes
            time_index_size += nxt.time_index.size_in_bytes
            i += 1
        groups.append(group)
    return groups


def _with_delete_horizon(buf):
    """Set attribute bit 6 (has delete horizon) of a batch and recompute its CRC."""
    buf = bytearray(buf)
    attrs, = _ATTRIBUTES.unpack_from(buf, records.ATTRIBUTES_OFFSET)
    _ATTRIBUTES.pack_into(buf, records.ATTRIBUTES_OFFSET,
                          attrs | records.DELETE_HORIZON_FLAG_MASK)
    _UINT32.pack_into(buf, records.CRC_OFFSET,
                      records.compute_crc(buf, 0, len(buf) - records.LOG_OVERHEAD))
    return bytes(buf)


class _CleanJob:
    """One cleaning pass over a snapshot of a log; ``run`` is the part done in a thread."""

    def __init__(self, directory, groups, tail, first_dirty, end, now_ms, delete_retention_ms,
                 index_interval_bytes, max_index_size, producers):
        self.directory = directory
        self.groups = groups  # [[(segment, size)]], the segments below ``end``
        self.tail = tail  # [(segment, size)] from ``end`` on (scanned for markers only)
        self.first_dirty = first_dirty
        self.end = end
        self.now_ms = now_ms
        self.delete_retention_ms = delete_retention_ms
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.producers = producers  # pid -> (last data offset or -1, epoch); None: from the log
        self.outputs = []
        self.stats = CleanerStats()

    # -- helpers ------------------------------------------------------------------------

    def _batches(self, pairs):
        for seg, size in pairs:
            for pos, header in seg.log.batches_from(0, size):
                yield seg, pos, header

    def _scan_transactions(self):
        """Markers per producer (offset, is_abort) and, without producer state, each
        producer's last entry; the tail after ``end`` is read only when needed."""
        markers = {}
        last = {}  # pid -> (last data offset or -1 after a marker, epoch)
        open_txn = set()
        need_last = self.producers is None

        def visit(seg, pos, header):
            pid = header.producer_id
            if pid < 0:
                return
            if header.is_control:
                raw = seg.log.read(pos, header.size_in_bytes)
                _, recs = records.decode_batch(raw, 0, verify=False)
                if recs:
                    try:
                        ctl = records.decode_control_record(recs[0])
                    except records.InvalidRecordError:
                        ctl = None
                    if ctl is not None and ctl.type in (records.ABORT, records.COMMIT):
                        markers.setdefault(pid, []).append((header.base_offset, ctl.is_abort))
                        open_txn.discard(pid)
                last[pid] = (-1, header.producer_epoch)
            else:
                if header.is_transactional:
                    open_txn.add(pid)
                last[pid] = (header.last_offset, header.producer_epoch)

        for seg, pos, header in self._batches(p for g in self.groups for p in g):
            visit(seg, pos, header)
        if open_txn or need_last:
            for seg, pos, header in self._batches(self.tail):
                if not (open_txn or need_last):
                    break
                visit(seg, pos, header)
        if need_last:
            self.producers = last
        return markers

    @staticmethod
    def _is_aborted(markers, header):
        if not header.is_transactional or header.is_control:
            return False
        for offset, is_abort in markers.get(header.producer_id, ()):
            if offset > header.last_offset:
                return is_abort
        return False  # still open: beyond the last stable offset, never cleaned

    def _retain_empty(self, header):
        """Kafka keeps the last batch of an active producer (empty if need be), so its last
        sequence and epoch survive: the data batch at its last data offset, or its marker."""
        entry = self.producers.get(header.producer_id) if header.producer_id >= 0 else None
        if entry is None:
            return False
        last_data_offset, epoch = entry
        if header.is_control:
            return (header.producer_epoch == epoch
                    and (last_data_offset < 0 or last_data_offset < header.base_offset))
        return header.last_offset == last_data_offset

    def _build_offset_map(self, markers):
        offset_map = {}
        first_dirty = self.first_dirty
        for seg, pos, header in self._batches(p for g in self.groups for p in g):
            if header.last_offset < first_dirty or header.is_control:
                continue
            if self._is_aborted(markers, header):
                continue
            _, recs = records.decode_batch(seg.log.read(pos, header.size_in_bytes), 0,
                                           verify=False)
            for rec in recs:
                if rec.key is not None and rec.offset >= first_dirty:
                    offset_map[bytes(rec.key)] = rec.offset
            self.stats.map_records += len(recs)
        return offset_map

    @staticmethod
    def _rebuild(header, kept, base_timestamp, is_control=False):
        return records.build_batch(
            [records.Record(attributes=r.attributes, key=r.key, value=r.value,
                            headers=r.headers, offset=r.offset, timestamp=r.timestamp)
             for r in kept],
            base_offset=header.base_offset,
            compression=header.compression if kept else 0,
            producer_id=header.producer_id, producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence, is_transactional=header.is_transactional,
            is_control=is_control, timestamp_type=header.timestamp_type,
            base_timestamp=base_timestamp,
            partition_leader_epoch=header.partition_leader_epoch,
            max_timestamp=header.max_timestamp, last_offset_delta=header.last_offset_delta)

    def _filter_batch(self, raw, header, offset_map, markers, txn_retained):
        """The batch bytes to write (the original, a rebuilt or an empty batch) or None."""
        now = self.now_ms
        horizon = header.delete_horizon_ms if header.has_delete_horizon else None
        retain_empty = self._retain_empty(header)
        pid = header.producer_id
        if header.is_control:
            can_discard = not txn_retained.pop(pid, False)
            if can_discard and horizon is not None and horizon <= now:
                self.stats.records_read += header.records_count
                return self._rebuild(header, [], records.NO_TIMESTAMP, True) \
                    if retain_empty else None
            if can_discard and horizon is None:
                _, recs = records.decode_batch(raw, 0, verify=False)
                out = self._rebuild(header, recs, now + self.delete_retention_ms, True)
                return _with_delete_horizon(out)
            return raw
        if self._is_aborted(markers, header):
            kept, recs = [], ()
            self.stats.records_read += header.records_count
        else:
            _, recs = records.decode_batch(raw, 0, verify=False)
            self.stats.records_read += len(recs)
            kept = []
            for rec in recs:
                if rec.key is None:
                    self.stats.invalid_records += 1
                    continue
                latest = offset_map.get(bytes(rec.key), -1)
                if rec.offset < latest:
                    continue
                if rec.value is None and horizon is not None and now >= horizon:
                    continue
                kept.append(rec)
        self.stats.records_kept += len(kept)
        if kept and header.is_transactional:
            txn_retained[pid] = True
        tombstones = any(r.value is None for r in kept)
        set_horizon = tombstones and horizon is None
        if kept and len(kept) == len(recs) and not set_horizon:
            return raw
        if kept:
            if set_horizon:
                return _with_delete_horizon(
                    self._rebuild(header, kept, now + self.delete_retention_ms))
            out = self._rebuild(header, kept, header.base_timestamp)
            return _with_delete_horizon(out) if horizon is not None else out
        if retain_empty:
            return self._rebuild(header, [], records.NO_TIMESTAMP)
        return None

    # -- in the thread ------------------------------------------------------------------

    def run(self):
        started = time.monotonic()
        try:
            markers = self._scan_transactions()
            offset_map = self._build_offset_map(markers)
            txn_retained = {}
            for group in self.groups:
                self._clean_group(group, offset_map, markers, txn_retained)
        except BaseException:
            self.discard()
            raise
        self.stats.elapsed_s = time.monotonic() - started
        return self

    def _clean_group(self, group, offset_map, markers, txn_retained):
        first = group[0][0]
        out = LogSegment(self.directory, first.base_offset, self.index_interval_bytes,
                         self.max_index_size, suffix=CLEANED_SUFFIX)
        self.outputs.append(out)  # removed by discard() if anything fails
        out.log.truncate_to(0)
        out.offset_index.reset()
        out.time_index.reset()
        out.txn_index.reset()
        for seg, size in group:
            self.stats.segments += 1
            # Kafka's cleaner keeps the aborted-transaction entries of the cleaned segments: a
            # retained ABORT marker still needs its entry for READ_COMMITTED fetches.
            for txn in list(seg.txn_index.entries):
                out.txn_index.append(txn)
            for pos, header in seg.log.batches_from(0, size):
                raw = seg.log.read(pos, header.size_in_bytes)
                self.stats.bytes_read += len(raw)
                kept = self._filter_batch(raw, header, offset_map, markers, txn_retained)
                if kept is None:
                    continue
                out.append(kept, [(0, len(kept), header.last_offset, header.max_timestamp)])
                self.stats.bytes_written += len(kept)
        out.on_become_inactive_segment()
        out.flush()
        mtime = os.stat(group[-1][0].log.path).st_mtime
        os.utime(out.log.path, (mtime, mtime))  # Kafka keeps the last segment's modified time
        self.stats.groups += 1

    def discard(self):
        for out in self.outputs:
            try:
                out.delete_if_exists()
            except OSError:
                pass
        self.outputs = []


class LogCleaner:
    def __init__(self, manager, backoff_ms=15000):
        self._manager = manager
        self.backoff_ms = backoff_ms
        self._in_progress = set()
        self._aborted = set()
        self._checkpoints = {}  # (topic, partition) -> first dirty offset
        self.last_stats = None
        for d in manager.online_dirs:
            try:
                self._checkpoints.update(checkpoint.read_offsets(
                    os.path.join(d, checkpoint.CLEANER_OFFSET_CHECKPOINT)))
            except (OSError, checkpoint.CheckpointError) as e:
                log.warn("ignoring the cleaner checkpoint of {dir}: {e}", dir=d, e=e)

    def abort(self, lg):
        """Forget ``lg`` (deleted): a running pass is not swapped in, its checkpoint goes. Only
        a running pass is marked (the mark goes with it: deleted logs must not pile up)."""
        if id(lg) in self._in_progress:
            self._aborted.add(id(lg))
        self._checkpoints.pop((lg.topic, lg.partition), None)

    def shutdown(self):
        self._handle_checkpoint_failures(self._write_checkpoints_now(self._checkpoint_snapshot()))

    # -- what to clean (LogCleanerManager) ----------------------------------------------

    def first_dirty_offset(self, lg):
        offset = self._checkpoints.get((lg.topic, lg.partition))
        if offset is None or offset < lg.log_start_offset or offset > lg.log_end_offset:
            return lg.log_start_offset
        return offset

    def cleanable_offsets(self, lg, now_ms):
        """(first dirty offset, first uncleanable offset): the latter is the base of the segment
        holding the last stable offset, the active segment, or the first dirty segment newer
        than min.compaction.lag.ms, whichever comes first."""
        first_dirty = self.first_dirty_offset(lg)
        segments = lg.segments
        active = segments[-1]
        uncleanable = min(lg.last_stable_offset, active.base_offset)
        lag = lg.config.min_compaction_lag_ms
        if lag > 0:
            for i, seg in enumerate(segments[:-1]):
                if segments[i + 1].base_offset <= first_dirty:
                    continue
                if seg.base_offset >= uncleanable:
                    break
                if seg.largest_timestamp() > now_ms - lag:
                    uncleanable = seg.base_offset
                    break
        floor = lg.floor_segment(uncleanable)
        first_uncleanable = floor.base_offset if floor is not None else uncleanable
        return first_dirty, first_uncleanable

    def _max_compaction_delay(self, lg, first_dirty, now_ms):
        max_lag = lg.config.max_compaction_lag_ms
        if max_lag >= LONG_MAX:
            return 0
        segments = lg.segments
        earliest = None
        for i, seg in enumerate(segments[:-1]):
            if segments[i + 1].base_offset <= first_dirty or seg.size == 0:
                continue
            header = seg.log.read_header(0)
            if header is not None and header.max_timestamp > 0:
                ts = header.max_timestamp
                earliest = ts if earliest is None else min(earliest, ts)
        until = now_ms - max(max_lag, 0)
        return until - earliest if earliest is not None and earliest < until else 0

    def log_to_clean(self, lg, now_ms):
        first_dirty, first_uncleanable = self.cleanable_offsets(lg, now_ms)
        segments = lg.segments
        clean = cleanable = 0
        for i, seg in enumerate(segments):
            nxt = segments[i + 1].base_offset if i + 1 < len(segments) else lg.log_end_offset
            if seg.base_offset < first_dirty:
                clean += seg.size
            if seg.base_offset < first_uncleanable and nxt > first_dirty:
                cleanable += seg.size
        return LogToClean(lg, first_dirty, first_uncleanable, clean, cleanable,
                          self._max_compaction_delay(lg, first_dirty, now_ms) > 0)

    def grab_filthiest_log(self, now_ms):
        best = None
        for lg in self._manager.compacted_logs():
            if lg.is_offline or id(lg) in self._in_progress:
                continue
            ltc = self.log_to_clean(lg, now_ms)
            if ltc.total_bytes == 0:
                continue
            if not ((ltc.need_compaction_now and ltc.cleanable_bytes > 0)
                    or ltc.cleanable_ratio > lg.config.min_cleanable_dirty_ratio):
                continue
            if best is None or ltc.cleanable_ratio > best.cleanable_ratio:
                best = ltc
        return best

    def run_once(self):
        """Clean the filthiest eligible log (one per run, like one cleaner thread)."""
        now = self._manager.now_ms()
        ltc = self.grab_filthiest_log(now)
        if ltc is None:
            return defer.succeed(None)
        return self.clean(ltc.log, now, ltc)

    # -- cleaning -----------------------------------------------------------------------

    def clean(self, lg, now_ms=None, rng=None):
        """Clean ``lg`` now whatever its dirty ratio (``rng``: a LogToClean already computed).
        A Deferred firing with CleanerStats, or None if nothing was cleanable or swapped."""
        now_ms = self._manager.now_ms() if now_ms is None else now_ms
        ltc = rng if isinstance(rng, LogToClean) else self.log_to_clean(lg, now_ms)
        end = ltc.first_uncleanable_offset
        if id(lg) in self._in_progress or lg.is_offline or ltc.cleanable_bytes == 0:
            return defer.succeed(None)
        segments = lg.segments
        below = [(s, s.size) for s in segments if s.base_offset < end]
        tail = [(s, s.size) for s in segments if s.base_offset >= end]
        if not below:
            return defer.succeed(None)
        config = lg.config
        groups = group_segments_by_size(below, config.segment_bytes, config.segment_index_bytes,
                                        end)
        psm = lg.producer_state_manager
        producers = None
        if psm is not None:
            producers = {pid: (e.last_data_offset, e.producer_epoch)
                         for pid, e in psm.producers.items()}
        job = _CleanJob(lg.dir, groups, tail, ltc.first_dirty_offset, end, now_ms,
                        config.delete_retention_ms, config.index_interval_bytes,
                        config.segment_index_bytes, producers)
        self._in_progress.add(id(lg))
        self._aborted.discard(id(lg))
        d = self._manager.run_blocking(job.run)
        d.addCallback(self._swap, lg)
        d.addErrback(self._failed, lg, job)
        d.addBoth(self._done, lg)
        return d

    def _done(self, result, lg):
        self._in_progress.discard(id(lg))
        self._aborted.discard(id(lg))
        return result

    def _failed(self, failure, lg, job):
        job.discard()
        if failure.check(ValueError, FileNotFoundError):
            # A source segment was deleted (retention, truncation) and closed under the thread.
            log.info("cleaning of {tp} abandoned: {e}", tp="%s-%d" % (lg.topic, lg.partition),
                     e=failure.value)
            return None
        if failure.check(OSError):
            # A disk error (ENOSPC writing the cleaned segment...) takes the dir offline, as
            # Kafka's cleaner does, instead of failing again every backoff.
            lg._io_failed(failure.value)
            return None
        log.failure("cleaning of {tp} failed", failure, tp="%s-%d" % (lg.topic, lg.partition))
        return None

    # -- back on the reactor ------------------------------------------------------------

    def _swap(self, job, lg):
        """Replace each group by its cleaned segment (Kafka's replaceSegments: .cleaned ->
        .swap, old -> .deleted, .swap -> final), only if every source segment is unchanged."""
        current = {s.base_offset: s for s in lg.segments}
        valid = (id(lg) not in self._aborted and not lg.is_offline and
                 all(current.get(seg.base_offset) is seg and seg.size == size
                     for group in job.groups for seg, size in group))
        if not valid:
            log.info("cleaning of {tp} discarded: its segments changed meanwhile",
                     tp="%s-%d" % (lg.topic, lg.partition))
            job.discard()
            return None
        outputs, job.outputs = job.outputs, []  # from here on they are the log's files
        if not lg.replace_segments([(out, [seg for seg, _size in group])
                                    for out, group in zip(outputs, job.groups)]):
            return None  # the dir went offline; loading completes the swap
        self._checkpoints[(lg.topic, lg.partition)] = job.end
        stats = job.stats
        self.last_stats = stats
        log.info("cleaned {tp} up to offset {end} in {t:.3f} s: {segs} segment(s) into {groups}, "
                 "{rr} records read, {rk} kept, {br} -> {bw} bytes",
                 tp="%s-%d" % (lg.topic, lg.partition), end=job.end, t=stats.elapsed_s,
                 segs=stats.segments, groups=stats.groups, rr=stats.records_read,
                 rk=stats.records_kept, br=stats.bytes_read, bw=stats.bytes_written)
        d = self._manager.run_blocking(self._write_checkpoints_now, self._checkpoint_snapshot())
        d.addCallback(self._handle_checkpoint_failures)
        d.addCallback(lambda _: stats)
        return d

    def _handle_checkpoint_failures(self, failed):
        for d, e in failed:
            self._manager.handle_dir_failure(d, e)

    def _checkpoint_snapshot(self):
        by_dir = {d: {} for d in self._manager.online_dirs}
        for key, offset in self._checkpoints.items():
            d = self._manager.log_dir_of(*key)  # (None: no log, or offline)
            if d in by_dir:
                by_dir[d][key] = offset
        return by_dir

    @staticmethod
    def _write_checkpoints_now(by_dir):
        """Write each dir's cleaner-offset-checkpoint (in a thread); returns [(dir, error)]."""
        failed = []
        for d, offsets in by_dir.items():
            path = os.path.join(d, checkpoint.CLEANER_OFFSET_CHECKPOINT)
            if not offsets and not os.path.exists(path):
                continue
            try:
                checkpoint.write_offsets(path, offsets)
            except OSError as e:
                failed.append((d, e))
        return failed
