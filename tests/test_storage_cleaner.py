"""LogCleaner on task.Clock with the work inline (or in a real thread where concurrency is the
point): last record per key at its offset, reads at every offset against a model, segment
groups bounded by segment.bytes and index size, dirty ratio and compaction lags, the active
segment, KIP-534 delete horizons, compact+delete, producers' last batches kept empty, the swap
refused when a segment changed, an interrupted swap completed on load, the checkpoint across a
restart, and keyless records refused on compacted topics."""

import os
import random
import threading

from twisted.internet import defer, task
from twisted.trial import unittest

from kafkatw.protocol import errors, records
from kafkatw.protocol.errors import KafkaError
from kafkatw.protocol.records import Record, build_batch, build_control_batch
from kafkatw.storage import LogConfig, LogManager, UnifiedLog, checkpoint
from kafkatw.storage.cleaner import LogCleaner, group_segments_by_size
from kafkatw.storage.producer_state import ProducerStateManager
from kafkatw.storage.segment import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX


def batch(keys, values=None, ts=0, compression=0, producer_id=-1, producer_epoch=-1,
          base_sequence=-1, transactional=False):
    values = values if values is not None else [b"v-" + (k or b"") for k in keys]
    recs = [Record(key=k, value=v, timestamp=ts) for k, v in zip(keys, values)]
    return bytearray(build_batch(recs, compression=compression, producer_id=producer_id,
                                 producer_epoch=producer_epoch, base_sequence=base_sequence,
                                 is_transactional=transactional))


def log_records(lg):
    """(offset, key, value) of every record, and the batch headers, in log order."""
    out, headers = [], []
    for seg in lg.segments:
        data = seg.log.read(0, seg.size)
        for pos, h in records.iter_batch_headers(data):
            headers.append(h)
            _, recs = records.decode_batch(data, pos)
            out.extend((r.offset, None if r.key is None else bytes(r.key),
                        None if r.value is None else bytes(r.value)) for r in recs)
    return out, headers


def expected_after_clean(written, end, drop_tombstones=False):
    latest = {}
    for off, key, _ in written:
        if off < end:
            latest[key] = off
    return [(o, k, v) for o, k, v in written
            if o >= end or (latest.get(k) == o and not (drop_tombstones and v is None))]


class CleanerBase(unittest.TestCase):
    props = {"log.cleaner.enable": "false", "log.segment.delete.delay.ms": "0"}

    def setUp(self):
        self.clock = task.Clock()
        self.clock.advance(1_000_000)
        self.dir = os.path.join(self.mktemp(), "d")
        self.mgr = self.make_manager()

    def make_manager(self):
        mgr = LogManager([self.dir], dict(self.props), reactor=self.clock)
        mgr.load_logs()
        return mgr

    def now(self):
        return int(self.clock.seconds() * 1000)

    def make_log(self, topic="c", **overrides):
        configs = {"cleanup.policy": "compact", "segment.bytes": "1000",
                   "min.cleanable.dirty.ratio": "0.01"}
        configs.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
        return self.mgr.get_or_create_log(topic, 0, overrides=configs)

    def append(self, lg, keys, values=None, written=None, **kw):
        info = lg.append_as_leader(batch(keys, values, ts=kw.pop("ts", self.now()), **kw), 0)
        lg.update_high_watermark(lg.log_end_offset)
        if written is not None:
            values = values if values is not None else [b"v-" + (k or b"") for k in keys]
            written.extend((info.first_offset + i, k, v) for i, (k, v) in
                           enumerate(zip(keys, values)))
        return info

    def assert_reads_match(self, lg, expected):
        """A read at every offset returns, first, the model's first record at/after it."""
        by_offset = sorted(expected)
        for start in range(lg.log_start_offset, lg.log_end_offset):
            want = next(((o, k, v) for o, k, v in by_offset if o >= start), None)
            info = lg.read(start, 1 << 20)
            data = info.records.read() if hasattr(info.records, "read") else bytes(info.records)
            got = None
            for pos, _h in records.iter_batch_headers(data):
                _, recs = records.decode_batch(data, pos)
                got = next(((r.offset, bytes(r.key), None if r.value is None else bytes(r.value))
                            for r in recs if r.offset >= start), None)
                if got is not None:
                    break
            self.assertEqual(got, want, "read from offset %d" % start)


class CompactionTest(CleanerBase):
    def test_last_record_per_key_offsets_and_reads_at_every_offset(self):
        rnd = random.Random(7)
        lg = self.make_log(segment_bytes=700)
        cleaner = LogCleaner(self.mgr)
        written = []
        for i in range(120):
            keys = [b"k%d" % rnd.randrange(12) for _ in range(rnd.randrange(1, 4))]
            values = [None if rnd.random() < 0.1 else b"x" * rnd.randrange(1, 30) for _ in keys]
            self.append(lg, keys, values, written, compression=rnd.choice([0, 0, 1, 3, 4]))
        active = lg.active_segment
        end = active.base_offset
        before = lg.number_of_segments
        stats = self.successResultOf(cleaner.clean(lg))
        self.assertIs(lg.active_segment, active)
        got, _ = log_records(lg)
        expected = expected_after_clean(written, end)
        self.assertEqual(got, expected)
        self.assertEqual(stats.records_read, sum(1 for o, _, _ in written if o < end))
        self.assertEqual(stats.records_kept, sum(1 for o, _, _ in expected if o < end))
        self.assertEqual(lg.number_of_segments, before)  # groups count sizes before cleaning
        self.assertEqual(lg.log_end_offset, len(written))
        self.assert_reads_match(lg, expected)
        # A second pass merges the now small cleaned segments.
        self.append(lg, [b"k1"], [b"last"], written)
        lg.roll()
        end = lg.active_segment.base_offset
        self.successResultOf(cleaner.clean(lg))
        expected = expected_after_clean(written, end)
        self.assertEqual(log_records(lg)[0], expected)
        self.assertLess(lg.number_of_segments, before / 2)
        self.assert_reads_match(lg, expected)
        for seg in lg.segments[:-1]:
            self.assertLessEqual(seg.size, 700)
            seg.sanity_check()
        # Reopened from disk (indexes as written by the cleaner), reads still land right.
        lg.close()
        again = UnifiedLog(lg.dir, lg.config, "c", 0, clock=self.now)
        again.update_high_watermark(again.log_end_offset)
        self.assertEqual(log_records(again)[0], expected)
        self.assert_reads_match(again, expected)
        self.assertEqual([n for n in os.listdir(lg.dir)
                          if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))], [])

    def test_small_segments_merge_bounded_by_segment_and_index_size(self):
        lg = self.make_log(segment_bytes=1000, index_interval_bytes=1)
        cleaner = LogCleaner(self.mgr)
        written = []
        for i in range(30):
            self.append(lg, [b"k%d" % i], [b"v" * 40], written)
            lg.roll()
        self.assertEqual(lg.number_of_segments, 31)
        size = lg.segments[0].size
        self.successResultOf(cleaner.clean(lg))
        per_group = 1000 // size
        self.assertEqual(lg.number_of_segments, -(-30 // per_group) + 1)
        self.assertEqual([s.base_offset for s in lg.segments[:-1]],
                         list(range(0, 30, per_group)))
        self.assertEqual(log_records(lg)[0], written)
        self.assert_reads_match(lg, written)
        # The index bound alone: 8-byte offset index entries, at most 3 per group.
        segs = [(s, s.size) for s in lg.segments[:-1]]
        self.assertTrue(all(s.offset_index.entries >= 1 for s, _ in segs))
        groups = group_segments_by_size(segs, 10 ** 9, 24, 30)
        self.assertGreater(len(groups), 1)
        for g in groups:
            if len(g) > 1:
                self.assertLessEqual(sum(s.offset_index.size_in_bytes for s, _ in g), 24)
        self.assertEqual(sum(len(g) for g in groups), len(segs))
        self.assertEqual(group_segments_by_size(segs, 10 ** 9, 10 ** 9, 30), [segs])

    def test_active_segment_is_never_cleaned(self):
        lg = self.make_log()
        cleaner = LogCleaner(self.mgr)
        for _ in range(5):
            self.append(lg, [b"same"])
        self.assertEqual(lg.number_of_segments, 1)
        self.assertIsNone(self.successResultOf(cleaner.run_once()))
        self.assertIsNone(self.successResultOf(cleaner.clean(lg)))
        self.assertEqual(len(log_records(lg)[0]), 5)

    def test_min_cleanable_dirty_ratio(self):
        lg = self.make_log(min_cleanable_dirty_ratio=0.5)
        cleaner = LogCleaner(self.mgr)
        for i in range(4):
            self.append(lg, [b"k%d" % i], [b"x" * 100])
        lg.roll()
        self.append(lg, [b"k0"])
        self.successResultOf(cleaner.run_once())  # 100% dirty: cleaned
        self.assertEqual(cleaner.first_dirty_offset(lg), 4)
        clean_bytes = lg.segments[0].size
        # Dirty bytes equal to the clean bytes: ratio 0.5 is not above 0.5.
        self.append(lg, [b"k1"], [b"x" * 100])
        lg.roll()
        ltc = cleaner.log_to_clean(lg, self.now())
        self.assertEqual((ltc.first_dirty_offset, ltc.first_uncleanable_offset), (4, 6))
        self.assertEqual(ltc.clean_bytes, clean_bytes)
        self.assertLess(ltc.cleanable_ratio, 0.5)
        self.assertIsNone(self.successResultOf(cleaner.run_once()))
        self.assertEqual(len(log_records(lg)[0]), 6)
        for i in range(3):
            self.append(lg, [b"k2"], [b"x" * 100])
        lg.roll()
        self.assertGreater(cleaner.log_to_clean(lg, self.now()).cleanable_ratio, 0.5)
        self.assertIsNotNone(self.successResultOf(cleaner.run_once()))
        self.assertEqual(cleaner.first_dirty_offset(lg), 9)
        got = dict((k, o) for o, k, _ in log_records(lg)[0])
        self.assertEqual(got, {b"k0": 4, b"k1": 5, b"k2": 8, b"k3": 3})

    def test_min_compaction_lag(self):
        lg = self.make_log(min_compaction_lag_ms=10000)
        cleaner = LogCleaner(self.mgr)
        self.append(lg, [b"a", b"a"])
        lg.roll()
        self.clock.advance(6)
        self.append(lg, [b"a", b"a"])
        lg.roll()
        self.append(lg, [b"z"])
        # The first segment is 6 s old, the second new: nothing may be cleaned yet.
        self.assertEqual(cleaner.cleanable_offsets(lg, self.now()), (0, 0))
        self.assertIsNone(self.successResultOf(cleaner.run_once()))
        self.clock.advance(5)  # first segment 11 s old, second 5 s
        self.assertEqual(cleaner.cleanable_offsets(lg, self.now()), (0, 2))
        self.successResultOf(cleaner.run_once())
        self.assertEqual([o for o, _, _ in log_records(lg)[0]], [1, 2, 3, 4])
        self.clock.advance(5)
        self.successResultOf(cleaner.run_once())
        self.assertEqual([o for o, _, _ in log_records(lg)[0]], [3, 4])

    def test_max_compaction_lag_forces_cleaning_below_the_ratio(self):
        lg = self.make_log(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=5000)
        cleaner = LogCleaner(self.mgr)
        self.append(lg, [b"a"])
        lg.roll()
        self.append(lg, [b"a"])
        lg.roll()
        self.append(lg, [b"z"])
        self.successResultOf(cleaner.clean(lg))
        for i in range(3):
            self.append(lg, [b"k%d" % i], [b"x" * 200])
        lg.roll()
        self.append(lg, [b"a"])  # one duplicate among much clean data
        lg.roll()
        self.assertLess(cleaner.log_to_clean(lg, self.now()).cleanable_ratio, 0.99)
        self.assertIsNone(self.successResultOf(cleaner.run_once()))
        self.clock.advance(6)
        self.assertTrue(cleaner.log_to_clean(lg, self.now()).need_compaction_now)
        self.assertIsNotNone(self.successResultOf(cleaner.run_once()))
        self.assertEqual([k for _, k, _ in log_records(lg)[0]], [b"z", b"k0", b"k1", b"k2", b"a"])

    def test_tombstones_kept_for_delete_retention_after_the_pass_that_saw_them(self):
        lg = self.make_log(delete_retention_ms=10000)
        cleaner = LogCleaner(self.mgr)
        self.append(lg, [b"gone", b"stay"])
        self.append(lg, [b"gone"], [None])  # tombstone at offset 2
        lg.roll()
        self.append(lg, [b"x"])
        lg.roll()
        first_pass = self.now()
        self.successResultOf(cleaner.clean(lg))
        got, headers = log_records(lg)
        self.assertEqual(got, [(1, b"stay", b"v-stay"), (2, b"gone", None), (3, b"x", b"v-x")])
        tomb = [h for h in headers if h.base_offset <= 2 <= h.last_offset][0]
        self.assertTrue(tomb.has_delete_horizon)
        self.assertEqual(tomb.delete_horizon_ms, first_pass + 10000)
        plain = [h for h in headers if h.base_offset == 3][0]
        self.assertFalse(plain.has_delete_horizon)
        # A pass before the horizon keeps it (and does not move the horizon).
        self.clock.advance(9.999)
        self.append(lg, [b"x"])
        lg.roll()
        self.successResultOf(cleaner.run_once())
        got, headers = log_records(lg)
        self.assertIn((2, b"gone", None), got)
        self.assertEqual([h.delete_horizon_ms for h in headers if h.has_delete_horizon],
                         [first_pass + 10000])
        # The first pass after the horizon removes it: the key is gone entirely.
        self.clock.advance(0.002)
        self.append(lg, [b"x"])
        lg.roll()
        self.successResultOf(cleaner.run_once())
        got, headers = log_records(lg)
        self.assertEqual(got, [(1, b"stay", b"v-stay"), (5, b"x", b"v-x")])
        self.assertNotIn(b"gone", [k for _, k, _ in got])

    def test_compact_delete_applies_both(self):
        lg = self.make_log(cleanup_policy="compact,delete", retention_ms=60000)
        cleaner = LogCleaner(self.mgr)
        self.append(lg, [b"old"])
        lg.roll()
        self.clock.advance(120)
        self.append(lg, [b"a", b"a", b"b"])
        lg.roll()
        self.append(lg, [b"z"])
        self.assertEqual(self.mgr.cleanup_logs(), 1)  # retention: the 2-minute-old segment
        self.assertEqual(lg.log_start_offset, 1)
        self.successResultOf(cleaner.run_once())  # compaction: the duplicate
        self.assertEqual([o for o, _, _ in log_records(lg)[0]], [2, 3, 4])
        self.assertEqual(cleaner.first_dirty_offset(lg), 4)

    def test_keyless_records_are_dropped_by_the_cleaner(self):
        lg = self.make_log(cleanup_policy="delete")
        self.append(lg, [None, b"k"], [b"a", b"b"])
        lg.roll()
        self.append(lg, [b"z"])
        self.mgr.update_log_config("c", {"cleanup.policy": "compact",
                                         "min.cleanable.dirty.ratio": "0.01"})
        stats = self.successResultOf(LogCleaner(self.mgr).clean(lg))
        self.assertEqual(stats.invalid_records, 1)
        self.assertEqual(log_records(lg)[0], [(1, b"k", b"b"), (2, b"z", b"v-z")])


class ProducerStateTest(CleanerBase):
    def test_last_batch_of_a_producer_is_kept_empty(self):
        lg = self.make_log()
        cleaner = LogCleaner(self.mgr)
        self.append(lg, [b"k", b"j"], producer_id=7, producer_epoch=2, base_sequence=10)
        self.append(lg, [b"k", b"j"])  # shadows both of producer 7's records
        self.append(lg, [b"m"], producer_id=8, producer_epoch=0, base_sequence=0)
        self.append(lg, [b"m"], producer_id=8, producer_epoch=0, base_sequence=1)
        lg.roll()
        self.append(lg, [b"z"])
        self.successResultOf(cleaner.clean(lg))  # no producer state: last batches from the log
        got, headers = log_records(lg)
        self.assertEqual([o for o, _, _ in got], [2, 3, 5, 6])
        empty = [h for h in headers if h.records_count == 0]
        self.assertEqual(len(empty), 1)
        h = empty[0]
        self.assertEqual((h.base_offset, h.last_offset, h.producer_id, h.producer_epoch,
                          h.base_sequence, h.compression), (0, 1, 7, 2, 10, 0))
        records.ensure_valid(lg.segments[0].log.read(0, h.size_in_bytes), 0, h)  # size, CRC
        # Producer 8's earlier batch is not its last: dropped. Rebuilding the producer state
        # from the cleaned log finds producer 7's last sequence.
        ps = ProducerStateManager(self.mktemp())
        os.makedirs(ps.log_dir)
        for hh in headers:
            ps.update(hh, hh.base_offset, hh.last_offset)
        self.assertEqual(ps.last_entry(7).last_seq, 11)
        self.assertEqual(ps.last_entry(8).last_seq, 1)

    def test_expired_producer_batch_is_dropped(self):
        lg = self.make_log()
        cleaner = LogCleaner(self.mgr)
        self.append(lg, [b"k"], producer_id=7, producer_epoch=0, base_sequence=0)
        self.append(lg, [b"k"])
        lg.roll()
        self.append(lg, [b"z"])
        lg.producer_state_manager = ProducerStateManager(lg.dir)  # producer 7 expired
        self.successResultOf(cleaner.clean(lg))
        got, headers = log_records(lg)
        self.assertEqual([h.base_offset for h in headers], [1, 2])

    def test_aborted_data_removed_and_markers_kept_until_their_horizon(self):
        lg = self.make_log(delete_retention_ms=1000)
        cleaner = LogCleaner(self.mgr)
        self.append(lg, [b"a"], [b"committed"])
        self.append(lg, [b"a"], [b"aborted"], producer_id=5, producer_epoch=0,
                    base_sequence=0, transactional=True)
        lg.append_as_leader(bytearray(build_control_batch(records.ABORT, 0, 5, 0)), 0)
        lg.append_aborted_txn(5, 1, 2, 3)  # what the replica manager records for the marker
        self.append(lg, [b"b"])  # producer 5's marker is not its last entry
        self.append(lg, [b"c"], producer_id=5, producer_epoch=0, base_sequence=1)
        lg.roll()
        self.append(lg, [b"z"])
        lg.update_high_watermark(lg.log_end_offset)
        self.successResultOf(cleaner.clean(lg))
        got, headers = log_records(lg)
        data = [(o, k, v) for o, k, v in got if not any(
            h.is_control and h.base_offset == o for h in headers)]
        self.assertEqual(data, [(0, b"a", b"committed"), (3, b"b", b"v-b"),
                                (4, b"c", b"v-c"), (5, b"z", b"v-z")])
        marker = [h for h in headers if h.is_control][0]
        self.assertEqual(marker.base_offset, 2)
        self.assertTrue(marker.has_delete_horizon)
        # the cleaned segment keeps the aborted-transaction entry (Kafka's cleaner copies it)
        from kafkatw.storage.txn_index import AbortedTxn

        seg = lg.segments[0]
        self.assertEqual(seg.txn_index.entries, [AbortedTxn(5, 1, 2, 3)])
        self.assertEqual(os.path.getsize(seg.txn_index.path), 34)
        self.assertEqual(lg.collect_aborted_transactions(0, 6), [AbortedTxn(5, 1, 2, 3)])
        self.clock.advance(2)
        self.append(lg, [b"z"])
        lg.roll()
        self.successResultOf(cleaner.run_once())
        got, headers = log_records(lg)
        self.assertEqual([h for h in headers if h.is_control], [])
        self.assertEqual([o for o, _, _ in got], [0, 3, 4, 6])


class ConcurrencyTest(CleanerBase):
    def capture_blocking(self):
        calls = []

        def run_blocking(fn, *args):
            d = defer.Deferred()
            calls.append((fn, args, d))
            return d
        self.mgr.run_blocking = run_blocking
        return calls

    def test_clean_in_a_thread_while_appending_and_reading(self):
        lg = self.make_log(segment_bytes=2000)
        cleaner = LogCleaner(self.mgr)
        written = []
        for i in range(200):
            self.append(lg, [b"k%d" % (i % 10)], written=written)
        end = lg.active_segment.base_offset
        calls = self.capture_blocking()
        d = cleaner.clean(lg)
        (fn, args, waiting), = calls
        result = {}
        thread = threading.Thread(target=lambda: result.setdefault("job", fn(*args)))
        thread.start()
        n = 0
        while thread.is_alive() or n < 50:
            self.append(lg, [b"k%d" % (n % 10)], written=written)
            info = lg.read(n % lg.log_end_offset, 1 << 16)
            self.assertGreaterEqual(info.records.count, 0)
            n += 1
        thread.join()
        self.assertLess(end, lg.active_segment.base_offset + 1)
        calls[:] = []
        waiting.callback(result["job"])
        (fn, args, ckpt), = calls  # the checkpoint write
        ckpt.callback(fn(*args))
        stats = self.successResultOf(d)
        self.assertIsNotNone(stats)
        got, _ = log_records(lg)
        self.assertEqual(got, expected_after_clean(written, end))
        self.assertEqual(cleaner.first_dirty_offset(lg), end)

    def test_swap_refused_when_a_segment_changed_meanwhile(self):
        lg = self.make_log(segment_bytes=300)
        cleaner = LogCleaner(self.mgr)
        for i in range(30):
            self.append(lg, [b"k%d" % (i % 3)])
        before = log_records(lg)[0]
        bases = [s.base_offset for s in lg.segments]
        calls = self.capture_blocking()
        d = cleaner.clean(lg)
        (fn, args, waiting), = calls
        job = fn(*args)  # the thread's work, done
        self.assertTrue(any(n.endswith(CLEANED_SUFFIX) for n in os.listdir(lg.dir)))
        lg.delete_records_before(bases[1])
        self.assertEqual(self.mgr.cleanup_logs(), 1)  # retention deletes the first segment
        waiting.callback(job)
        self.assertIsNone(self.successResultOf(d))
        self.assertEqual(log_records(lg)[0], [r for r in before if r[0] >= bases[1]])
        self.assertEqual([n for n in os.listdir(lg.dir) if n.endswith(CLEANED_SUFFIX)], [])
        self.assertEqual(cleaner.first_dirty_offset(lg), bases[1])

    def test_abort_during_a_pass_discards_it_and_leaves_no_mark(self):
        """A log deleted while its pass runs is not swapped in; the mark goes with the pass,
        and deleting logs no pass runs on marks nothing (the marks of every deleted log
        piled up for the broker's lifetime)."""
        lg = self.make_log(segment_bytes=300)
        cleaner = LogCleaner(self.mgr)
        for i in range(30):
            self.append(lg, [b"k%d" % (i % 3)])
        before = log_records(lg)[0]
        calls = self.capture_blocking()
        d = cleaner.clean(lg)
        (fn, args, waiting), = calls
        job = fn(*args)
        cleaner.abort(lg)
        waiting.callback(job)
        self.assertIsNone(self.successResultOf(d))
        self.assertEqual(log_records(lg)[0], before)
        self.assertEqual(cleaner._aborted, set())
        for i in range(5):
            cleaner.abort(self.make_log(topic="idle-%d" % i))
        self.assertEqual(cleaner._aborted, set())


class RestartTest(CleanerBase):
    def test_checkpoint_persists_across_restart(self):
        lg = self.make_log()
        cleaner = LogCleaner(self.mgr)
        for _ in range(3):
            self.append(lg, [b"a"])
        lg.roll()
        self.append(lg, [b"z"])
        self.successResultOf(cleaner.clean(lg))
        path = os.path.join(self.dir, checkpoint.CLEANER_OFFSET_CHECKPOINT)
        self.assertEqual(checkpoint.read_offsets(path), {("c", 0): 3})
        self.mgr.shutdown()
        mgr = self.mgr = self.make_manager()
        cleaner = LogCleaner(mgr)
        lg = mgr.get_log("c", 0)
        self.assertEqual(cleaner.first_dirty_offset(lg), 3)
        self.assertEqual(cleaner.log_to_clean(lg, self.now()).cleanable_bytes, 0)
        self.assertIsNone(self.successResultOf(cleaner.run_once()))
        mgr.shutdown()

    def test_interrupted_swap_is_completed_on_load(self):
        lg = self.make_log(segment_bytes=1000)
        cleaner = LogCleaner(self.mgr)
        written = []
        for i in range(12):
            self.append(lg, [b"k%d" % (i % 4)], written=written)
            lg.roll()
        end = lg.active_segment.base_offset
        calls = []
        self.mgr.run_blocking = lambda fn, *a: calls.append((fn, a)) or defer.Deferred()
        cleaner.clean(lg)
        (fn, args), = calls
        job = fn(*args)
        # Crash in the middle of the swap: the cleaned segment renamed to .swap, the first
        # old segment renamed to .deleted, the others still in place.
        out = job.outputs[0]
        out.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
        out.close_handlers()
        lg.segments[0].change_file_suffixes("", DELETED_SUFFIX)
        lg.close_handlers()
        again = UnifiedLog(lg.dir, lg.config, "c", 0, clock=self.now, needs_recovery=True)
        again.update_high_watermark(again.log_end_offset)
        expected = expected_after_clean(written, end)
        self.assertEqual(log_records(again)[0], expected)
        self.assertEqual(again.segments[0].base_offset, 0)
        self.assertEqual(again.number_of_segments, 2)
        self.assert_reads_match(again, expected)
        self.assertEqual([n for n in os.listdir(lg.dir)
                          if n.endswith((SWAP_SUFFIX, DELETED_SUFFIX, CLEANED_SUFFIX))], [])
        again.close()


class KeylessProduceTest(unittest.TestCase):
    def make(self, policy):
        directory = os.path.join(self.mktemp(), "t-0")
        return UnifiedLog(directory, LogConfig({"cleanup.policy": policy}), "t", 0,
                          clock=lambda: 1000)

    def test_compacted_topic_refuses_keyless_records(self):
        for policy in ("compact", "compact,delete"):
            lg = self.make(policy)
            for compression in (0, 1):
                with self.assertRaises(KafkaError) as cm:
                    lg.append_as_leader(batch([b"k", None, None], ts=1000,
                                              compression=compression), 0)
                e = cm.exception
                self.assertEqual(e.code, errors.INVALID_RECORD)
                msg = "Compacted topic cannot accept message without key in topic partition t-0"
                self.assertEqual(e.record_errors, [(1, msg), (2, msg)])
                self.assertEqual(
                    e.message, "One or more records have been rejected due to 2 record errors in "
                    "total, and only showing the first three errors at most: [RecordError("
                    "batchIndex=1, message='%s'), RecordError(batchIndex=2, message='%s')]"
                    % (msg, msg))
            self.assertEqual(lg.log_end_offset, 0)
            lg.append_as_leader(batch([b"k"], ts=1000), 0)
            self.assertEqual(lg.log_end_offset, 1)
            lg.close()

    def test_other_topics_accept_keyless_records(self):
        lg = self.make("delete")
        lg.append_as_leader(batch([None, None], ts=1000), 0)
        self.assertEqual(lg.log_end_offset, 2)
        lg.close()
