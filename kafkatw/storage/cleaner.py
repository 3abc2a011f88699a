"""LogCleaner: compaction of logs whose cleanup.policy includes compact. Keeps the last record
per key, drops tombstones older than delete.retention.ms, honours min.cleanable.dirty.ratio and
min.compaction.lag.ms, preserves offsets. Rewrites segments in a thread; swaps on the reactor.
"""

import os

from twisted.internet import defer
from twisted.logger import Logger

from kafkatw.protocol import records

from . import checkpoint
from .segment import CLEANED_SUFFIX, DELETED_SUFFIX, LogSegment

log = Logger()


class CleanerStats:
    def __init__(self):
        self.segments = 0
        self.records_read = 0
        self.records_kept = 0
        self.bytes_read = 0
        self.bytes_written = 0


class LogCleaner:
    def __init__(self, manager, backoff_ms=15000):
        self._manager = manager
        self.backoff_ms = backoff_ms
        self._in_progress = set()
        self._aborted = set()
        self._checkpoints = {}  # (topic, partition) -> first dirty offset
        for d in manager.online_dirs:
            try:
                self._checkpoints.update(checkpoint.read_offsets(
                    os.path.join(d, checkpoint.CLEANER_OFFSET_CHECKPOINT)))
            except (OSError, checkpoint.CheckpointError):
                pass

    def abort(self, lg):
        self._aborted.add(id(lg))

    def shutdown(self):
        self._write_checkpoints()

    def first_dirty_offset(self, lg):
        offset = self._checkpoints.get((lg.topic, lg.partition), lg.log_start_offset)
        return max(offset, lg.log_start_offset)

    def cleanable_range(self, lg, now_ms):
        """(first dirty, first uncleanable offset, cleanable segments, dirty ratio)."""
        segments = lg.segments
        upper = segments[-1].base_offset  # the active segment is never cleaned
        upper = min(upper, lg.last_stable_offset)
        lag = lg.config.min_compaction_lag_ms
        cleanable = []
        for i, seg in enumerate(segments[:-1]):
            next_base = segments[i + 1].base_offset
            if next_base > upper:
                break
            if lag > 0 and seg.largest_timestamp() > now_ms - lag:
                break
            cleanable.append(seg)
        if not cleanable:
            return None
        end = segments[len(cleanable)].base_offset
        first_dirty = min(self.first_dirty_offset(lg), end)
        total = sum(s.size for s in cleanable)
        dirty = sum(s.size for s in cleanable if s.base_offset >= first_dirty or
                    segments[segments.index(s) + 1].base_offset > first_dirty)
        ratio = dirty / total if total else 0.0
        return first_dirty, end, cleanable, ratio

    def run_once(self):
        """Clean the dirtiest eligible log (one per run, like a single cleaner thread)."""
        now = self._manager.now_ms()
        best = None
        for lg in self._manager.all_logs():
            if lg.is_offline or not lg.config.compact or id(lg) in self._in_progress:
                continue
            rng = self.cleanable_range(lg, now)
            if rng is None or rng[3] < lg.config.min_cleanable_dirty_ratio or rng[3] == 0:
                continue
            if best is None or rng[3] > best[1][3]:
                best = (lg, rng)
        if best is None:
            return defer.succeed(None)
        return self.clean(best[0], now, best[1])

    def clean(self, lg, now_ms=None, rng=None):
        now_ms = self._manager.now_ms() if now_ms is None else now_ms
        rng = rng or self.cleanable_range(lg, now_ms)
        if rng is None:
            return defer.succeed(None)
        first_dirty, end, cleanable, _ratio = rng
        self._in_progress.add(id(lg))
        self._aborted.discard(id(lg))
        snapshot = [(seg, seg.size) for seg in cleanable]
        horizon = now_ms - lg.config.delete_retention_ms
        d = self._manager.run_blocking(self._do_clean, lg, snapshot, first_dirty, end, horizon)
        d.addCallback(self._swap, lg, snapshot, end)
        d.addBoth(self._done, lg)
        return d

    def _done(self, result, lg):
        self._in_progress.discard(id(lg))
        return result

    # -- in the thread ------------------------------------------------------------------

    def _do_clean(self, lg, snapshot, first_dirty, end, horizon):
        stats = CleanerStats()
        offset_map = {}
        for seg, size in snapshot:
            nxt_ok = True
            for pos, header in seg.log.batches_from(0, size):
                if header.last_offset < first_dirty or header.base_offset >= end:
                    continue
                if header.is_control:
                    continue
                _, recs = records.decode_batch(seg.log.read(pos, header.size_in_bytes), 0)
                for rec in recs:
                    if rec.key is not None and rec.offset < end:
                        offset_map[bytes(rec.key)] = rec.offset
            del nxt_ok
        cleaned = []
        for seg, size in snapshot:
            out = LogSegment(os.path.dirname(seg.log.path), seg.base_offset,
                             seg.index_interval_bytes, seg.offset_index._max_size,
                             suffix=CLEANED_SUFFIX)
            out.offset_index.reset()
            out.time_index.reset()
            out.log.truncate_to(0)
            drop_tombstones = seg.largest_timestamp() < horizon
            for pos, header in seg.log.batches_from(0, size):
                raw = seg.log.read(pos, header.size_in_bytes)
                stats.bytes_read += len(raw)
                if header.is_control:
                    kept_buf = raw
                else:
                    _, recs = records.decode_batch(raw, 0)
                    stats.records_read += len(recs)
                    kept = [r for r in recs if self._keep(r, offset_map, drop_tombstones)]
                    if not kept:
                        continue
                    stats.records_kept += len(kept)
                    if len(kept) == len(recs):
                        kept_buf = raw
                    else:
                        kept_buf = records.build_batch(
                            kept, base_offset=header.base_offset,
                            compression=header.compression, producer_id=header.producer_id,
                            producer_epoch=header.producer_epoch,
                            base_sequence=header.base_sequence,
                            is_transactional=header.is_transactional,
                            timestamp_type=header.timestamp_type,
                            partition_leader_epoch=header.partition_leader_epoch,
                            max_timestamp=header.max_timestamp,
                            last_offset_delta=header.last_offset_delta)
                out.append(kept_buf, [(0, len(kept_buf), header.last_offset,
                                       header.max_timestamp)])
                stats.bytes_written += len(kept_buf)
            out.on_become_inactive_segment()
            out.flush()
            cleaned.append(out)
            stats.segments += 1
        return cleaned, stats

    @staticmethod
    def _keep(rec, offset_map, drop_tombstones):
        if rec.key is None:
            return True
        latest = offset_map.get(bytes(rec.key))
        if latest is not None and rec.offset < latest:
            return False
        if rec.value is None and drop_tombstones:
            return False
        return True

    # -- back on the reactor ------------------------------------------------------------

    def _swap(self, result, lg, snapshot, end):
        cleaned, stats = result
        current = {s.base_offset: s for s in lg.segments}
        valid = (id(lg) not in self._aborted and not lg.is_offline and
                 all(current.get(seg.base_offset) is seg and seg.size == size
                     for seg, size in snapshot))
        if not valid:
            for c in cleaned:
                c.delete_if_exists()
            return None
        old = []
        for new, (seg, _size) in zip(cleaned, snapshot):
            new.close_handlers()
            seg.change_file_suffixes("", DELETED_SUFFIX)
            for obj, ref in ((new.log, seg.log), (new.offset_index, seg.offset_index),
                             (new.time_index, seg.time_index)):
                target = ref.path[:-len(DELETED_SUFFIX)]
                os.replace(obj.path, target)
            fresh = LogSegment.open(lg.dir, seg.base_offset, lg.config)
            lg._segments[seg.base_offset] = fresh
            old.append(seg)
        lg._async_delete_renamed(old)
        lg._reset_cached_metadata()
        self._checkpoints[(lg.topic, lg.partition)] = end
        self._write_checkpoints()
        log.info("cleaned {tp}: {segs} segment(s), {rr} records read, {rk} kept, "
                 "{br} -> {bw} bytes", tp="%s-%d" % (lg.topic, lg.partition),
                 segs=stats.segments, rr=stats.records_read, rk=stats.records_kept,
                 br=stats.bytes_read, bw=stats.bytes_written)
        return stats

    def _write_checkpoints(self):
        by_dir = {}
        for lg in self._manager.all_logs():
            key = (lg.topic, lg.partition)
            if key in self._checkpoints and not lg.is_offline:
                by_dir.setdefault(os.path.dirname(lg.dir), {})[key] = self._checkpoints[key]
        for d, offsets in by_dir.items():
            try:
                checkpoint.write_offsets(os.path.join(d, checkpoint.CLEANER_OFFSET_CHECKPOINT),
                                         offsets)
            except OSError as e:
                self._manager.handle_dir_failure(d, e)
