"""UnifiedLog and its parts: validation error codes, offset assignment, indexes, rolls,
recovery of a torn tail and of deleted indexes, timestamps, leader epochs, partition.metadata."""

import base64
import os
import uuid

from twisted.trial import unittest

from kafkatw.protocol import errors, records
from kafkatw.protocol.errors import KafkaError
from kafkatw.storage import FetchIsolation, LogConfig, LogOffsetMetadata, UnifiedLog
from kafkatw.storage.index import OffsetIndex, TimeIndex

from .test_storage_helpers import MsClock, make_batch


class Base(unittest.TestCase):
    def open_log(self, overrides=None, path=None, **kw):
        self.path = path or os.path.join(self.mktemp(), "t-0")
        self.clock = kw.pop("clock", None) or MsClock()
        self.config = LogConfig.from_props({}, overrides or {})
        lg = UnifiedLog(self.path, self.config, clock=self.clock, **kw)
        self.addCleanup(lg.close)
        return lg


class IndexTest(unittest.TestCase):
    def test_offset_index_lookup_truncate_reopen(self):
        path = self.mktemp()
        idx = OffsetIndex(path, 100, 80)
        for i in range(5):
            idx.append(100 + i * 10, i * 1000 + 50)
        self.assertEqual(idx.lookup(99), (100, 0))
        self.assertEqual(idx.lookup(100), (100, 50))
        self.assertEqual(idx.lookup(125), (120, 2050))
        self.assertEqual(idx.lookup(1000), (140, 4050))
        self.assertEqual(os.path.getsize(path), 80)  # preallocated
        idx.truncate_to(130)
        self.assertEqual(idx.entries, 3)
        idx.close()
        self.assertEqual(os.path.getsize(path), 24)  # trimmed
        again = OffsetIndex(path, 100, 80)
        self.assertEqual(again.entries, 3)
        self.assertEqual(again.lookup(1000), (120, 2050))
        again.append(150, 9000)
        self.assertEqual(again.entries, 4)
        again.close_handler()  # unclean: file stays at full size, zero tail
        third = OffsetIndex(path, 100, 80)
        self.assertEqual(third.entries, 4)
        third.close()

    def test_index_full_and_time_index(self):
        idx = OffsetIndex(self.mktemp(), 0, 16)
        idx.append(1, 10)
        idx.append(2, 20)
        self.assertTrue(idx.is_full())
        t = TimeIndex(self.mktemp(), 0, 120)
        t.maybe_append(1000, 3)
        t.maybe_append(1000, 5)  # not larger: ignored
        t.maybe_append(2000, 7)
        self.assertEqual(t.entries, 2)
        self.assertEqual(t.lookup(1500), (1000, 3))
        self.assertEqual(t.lookup(999), (-1, 0))
        idx.close()
        t.close()


class AppendTest(Base):
    def test_offsets_assigned_in_place_and_epoch(self):
        lg = self.open_log()
        buf = make_batch(3) + make_batch(2)
        info = lg.append_as_leader(buf, 7)
        self.assertEqual((info.first_offset, info.last_offset, info.record_count), (0, 4, 5))
        headers = [h for _, h in records.iter_batch_headers(bytes(buf))]
        self.assertEqual([h.base_offset for h in headers], [0, 3])
        self.assertEqual([h.partition_leader_epoch for h in headers], [7, 7])
        self.assertEqual(lg.log_end_offset, 5)
        self.assertEqual(lg.read(0, 10000).records.read(), bytes(buf))
        self.assertEqual(lg.latest_epoch(), 7)
        lg.append_as_leader(make_batch(1), 9)
        self.assertEqual(lg.end_offset_for_epoch(7), (7, 5))
        self.assertEqual(lg.end_offset_for_epoch(9), (9, 6))
        # older than every epoch known: it ends where the first known one starts (Kafka's
        # floorEntry == null case); newer than all: undefined
        self.assertEqual(lg.end_offset_for_epoch(3), (3, 0))
        self.assertEqual(lg.end_offset_for_epoch(8), (7, 5))
        self.assertEqual(lg.end_offset_for_epoch(12), (-1, -1))
        self.assertEqual(lg.end_offset_for_epoch(-1), (-1, -1))

    def test_truncating_at_the_log_end_drops_an_empty_epoch_at_its_end(self):
        """A leader elected at its log end 5 (epoch 9 starts at 5), deposed before appending:
        the new leader has no epoch 9 and names the divergence (7, 5). Truncating to 5 cuts
        no record but must drop epoch 9, else the follower's next fetch names it again."""
        lg = self.open_log()
        lg.append_as_leader(make_batch(5), 7)
        lg.leader_epoch_cache.assign(9, 5)
        self.assertEqual(lg.latest_epoch(), 9)
        self.assertFalse(lg.truncate_to(5))
        self.assertEqual((lg.log_end_offset, lg.latest_epoch()), (5, 7))
        self.assertEqual(lg.leader_epoch_cache.entries(), [(7, 0)])
        self.assertFalse(lg.truncate_to(6))  # past the end: nothing to drop
        self.assertEqual(lg.leader_epoch_cache.entries(), [(7, 0)])
        lg.close()
        self.assertEqual(self.open_log(path=self.path).leader_epoch_cache.entries(), [(7, 0)])

    def test_batch_headers_from_the_caller(self):
        lg = self.open_log()
        buf = make_batch(3) + make_batch(2)
        info = lg.append_as_leader(buf, 7, list(records.iter_batch_headers(bytes(buf))))
        self.assertEqual((info.first_offset, info.last_offset, info.record_count), (0, 4, 5))
        # a header listed at its position is used as given; a batch at a position not listed is read
        buf = make_batch(2) + make_batch(1)
        first = records.read_batch_header(bytes(buf))
        info = lg.append_as_leader(buf, 7, [(0, first._replace(max_timestamp=1234)), (999, first)])
        self.assertEqual((info.first_offset, info.last_offset, info.max_timestamp), (5, 7, 1234))
        self.assertEqual([h.base_offset for _, h in records.iter_batch_headers(bytes(buf))], [5, 7])
        bad = make_batch(1)
        bad[-1] ^= 1
        e = self.assertRaises(KafkaError, lg.append_as_leader, bad, 7,
                              list(records.iter_batch_headers(bytes(bad))))
        self.assertEqual(e.code, errors.CORRUPT_MESSAGE)

    def test_append_info_has_every_field(self):
        """The validator fills its LogAppendInfo field by field: every one is set, and it is
        the constructor's with the same values."""
        from kafkatw.storage.offsets import LogAppendInfo

        lg = self.open_log()
        lg.append_as_leader(make_batch(2), 3)
        buf = make_batch(3)
        info = lg.append_as_leader(buf, 4)
        self.assertEqual(info, LogAppendInfo(2, 4, info.max_timestamp, 4, -1, 0, 3, len(buf), 4))
        self.assertNotEqual(info, LogAppendInfo(2, 4, info.max_timestamp, 4, -1, 0, 3, len(buf)))
        self.assertIn("record_count=3", repr(info))

    def test_log_append_time(self):
        lg = self.open_log({"message.timestamp.type": "LogAppendTime"})
        self.clock.now = 5_000_000
        buf = make_batch(2, timestamp=1)
        info = lg.append_as_leader(buf, 0)
        self.assertEqual(info.log_append_time, 5_000_000)
        header = records.read_batch_header(bytes(buf))
        self.assertEqual(header.max_timestamp, 5_000_000)
        self.assertEqual(header.timestamp_type, records.LOG_APPEND_TIME)
        self.assertTrue(records.verify_crc(bytes(buf), 0, header))

    def assertCode(self, code, fn, *args):
        with self.assertRaises(KafkaError) as cm:
            fn(*args)
        self.assertEqual(cm.exception.code, code)

    def test_errors(self):
        lg = self.open_log({"max.message.bytes": 500, "segment.bytes": 2000,
                            "message.timestamp.after.max.ms": 1000})
        self.assertCode(errors.MESSAGE_TOO_LARGE, lg.append_as_leader, make_batch(1, 600), 0)
        bad = make_batch(2)
        bad[-1] ^= 0xFF
        self.assertCode(errors.CORRUPT_MESSAGE, lg.append_as_leader, bad, 0)
        self.assertCode(errors.INVALID_TIMESTAMP, lg.append_as_leader,
                        make_batch(1, timestamp=self.clock.now + 5000), 0)
        big = bytearray()
        for _ in range(6):
            big += make_batch(1, 400)
        self.assertCode(errors.RECORD_LIST_TOO_LARGE, lg.append_as_leader, big, 0)
        self.assertCode(errors.CORRUPT_MESSAGE, lg.append_as_leader, make_batch(1)[:-3], 0)
        self.assertEqual(lg.log_end_offset, 0)
        self.assertEqual(lg.segments[0].size, 0)

    def test_roll_by_size_time_and_index_full(self):
        lg = self.open_log({"segment.bytes": 1000, "segment.ms": 10000,
                            "index.interval.bytes": 1, "segment.index.bytes": 24})
        for _ in range(3):
            lg.append_as_leader(make_batch(1, 400, timestamp=self.clock.now), 0)
        self.assertEqual([s.base_offset for s in lg.segments], [0, 2])
        self.clock.now += 20000
        lg.append_as_leader(make_batch(1, 10, timestamp=self.clock.now), 0)
        self.assertEqual([s.base_offset for s in lg.segments], [0, 2, 3])
        for _ in range(5):
            lg.append_as_leader(make_batch(1, 10, timestamp=self.clock.now), 0)
        # 24 bytes: 2 time-index slots, one kept spare; each segment takes one indexed batch
        # (the first batch of a segment is never indexed), then rolls because the index is full.
        self.assertEqual([s.base_offset for s in lg.segments], [0, 2, 3, 5, 7])
        self.assertEqual(os.path.getsize(lg.segments[0].offset_index.path), 8)  # trimmed
        self.assertEqual(lg.read(3, 100000).records.count, lg.segments[2].size)


class ReadTest(Base):
    def test_hw_cut_and_min_one_message(self):
        lg = self.open_log()
        sizes = []
        for n in (2, 3, 4):
            b = make_batch(n, 100)
            sizes.append(len(b))
            lg.append_as_leader(b, 0)
        lg.update_high_watermark(5)  # the start of the third batch
        hw = lg.high_watermark_metadata
        self.assertEqual((hw.message_offset, hw.segment_base_offset,
                          hw.relative_position_in_segment), (5, 0, sizes[0] + sizes[1]))
        info = lg.read(0, 100000, FetchIsolation.HIGH_WATERMARK, False)
        self.assertEqual(info.records.count, sizes[0] + sizes[1])
        info = lg.read(0, 100000, FetchIsolation.LOG_END, False)
        self.assertEqual(info.records.count, sum(sizes))
        info = lg.read(0, 10, FetchIsolation.HIGH_WATERMARK, False)
        self.assertEqual((info.records.count, info.first_entry_incomplete), (10, True))
        info = lg.read(0, 10, FetchIsolation.HIGH_WATERMARK, True)
        self.assertEqual((info.records.count, info.first_entry_incomplete), (sizes[0], False))
        info = lg.read(5, 100, FetchIsolation.HIGH_WATERMARK, True)
        self.assertEqual(info.records.count, 0)
        self.assertEqual(info.fetch_offset_metadata, hw)
        with self.assertRaises(KafkaError) as cm:
            lg.read(10, 100)
        self.assertEqual(cm.exception.code, errors.OFFSET_OUT_OF_RANGE)
        leo = lg.read(9, 100).fetch_offset_metadata
        self.assertEqual(leo, lg.log_end_offset_metadata)
        self.assertTrue(hw.on_same_segment(leo))
        self.assertEqual(leo.position_diff(hw), sizes[2])
        self.assertTrue(LogOffsetMetadata(5).message_offset_only)

    def test_tail_read_after_an_append_reads_no_header(self):
        """A reader at the log end woken by an append finds the appended batch without reading
        a header (the append says where it starts and its size); after a truncation below it,
        a read finds the right batch again."""
        lg = self.open_log()
        sizes = []
        for n in (2, 3):
            sizes.append(len(make_batch(n, 100)))
            lg.append_as_leader(make_batch(n, 100), 0)
        lg.read(0, 100000, FetchIsolation.LOG_END, True)  # the search hint at the first batch
        lg.append_as_leader(make_batch(4, 100), 0)  # offsets 5-8
        headers = []
        file_records = lg.active_segment.log
        real = file_records.read_header
        file_records.read_header = lambda *a: headers.append(a[0]) or real(*a)
        info = lg.read(5, 100000, FetchIsolation.LOG_END, True)
        self.assertEqual(headers, [])
        self.assertEqual((info.fetch_offset_metadata.message_offset,
                          info.fetch_offset_metadata.relative_position_in_segment, info.records.count),
                         (5, sizes[0] + sizes[1], len(make_batch(4, 100))))
        # the hint's size bounds the batch as its header would: whole with minOneMessage, cut
        # (and said so) without
        whole = lg.read(5, 10, FetchIsolation.LOG_END, True)
        cut = lg.read(5, 10, FetchIsolation.LOG_END, False)
        self.assertEqual(headers, [])
        self.assertEqual((whole.records.count, whole.first_entry_incomplete, cut.records.count,
                          cut.first_entry_incomplete), (len(make_batch(4, 100)), False, 10, True))
        lg.truncate_to(2)
        lg.append_as_leader(make_batch(1, 100), 0)  # offset 2, where the second batch was
        info = lg.read(2, 100000, FetchIsolation.LOG_END, True)
        self.assertEqual((info.fetch_offset_metadata.relative_position_in_segment, info.records.count),
                         (sizes[0], len(make_batch(1, 100))))

    def test_end_if_read_empty_is_what_read_answers(self):
        """end_if_read_empty (what a consumer's fetch parking at the end asks instead of a
        read) names the end metadata exactly when read() is an empty read at that end, for
        every isolation: below the log start, past the log end, between the LSO, HW and log
        end, across a roll and offline."""
        lg = self.open_log({"segment.bytes": 1000})
        for n in (2, 3, 4, 2):
            lg.append_as_leader(make_batch(n, 100), 0)
        self.assertGreater(len(lg.segments), 1)
        lg.update_high_watermark(9)
        lg.first_unstable_offset = 5
        lg.maybe_increment_log_start_offset(1)
        ends = {FetchIsolation.LOG_END: 11, FetchIsolation.HIGH_WATERMARK: 9,
                FetchIsolation.TXN_COMMITTED: 5}

        def check():
            answered = []
            for isolation, end_offset in ends.items():
                for offset in range(-1, 13):
                    end = lg.end_if_read_empty(offset, isolation)
                    try:
                        info = lg.read(offset, 100000, isolation, True)
                    except KafkaError:
                        self.assertIsNone(end)
                        continue
                    at_end = offset == end_offset and info.records.count == 0
                    self.assertEqual(end is not None, at_end, (isolation, offset))
                    if end is not None:
                        answered.append((isolation, offset))
                        self.assertEqual(info.fetch_offset_metadata, end)
                        self.assertEqual(info.aborted_transactions,
                                         [] if isolation is FetchIsolation.TXN_COMMITTED else None)
                        self.assertFalse(info.first_entry_incomplete)
            return answered

        self.assertEqual(sorted(check(), key=str), sorted(ends.items(), key=str))
        lg.mark_offline()
        self.assertEqual(check(), [])

    def test_lso_hook(self):
        lg = self.open_log()
        lg.append_as_leader(make_batch(2), 0)
        first = len(make_batch(2))
        lg.append_as_leader(make_batch(2), 0)
        lg.update_high_watermark(4)
        lg.first_unstable_offset = 2
        self.assertEqual(lg.last_stable_offset, 2)
        info = lg.read(0, 10000, FetchIsolation.TXN_COMMITTED)
        self.assertEqual(info.records.count, first)

    def test_offset_by_timestamp(self):
        lg = self.open_log({"index.interval.bytes": 1})
        for i in range(10):
            lg.append_as_leader(make_batch(2, timestamp=1000 + i * 10), 0)
        self.assertEqual(lg.fetch_offset_by_timestamp(1035), (8, 1040, 0))
        self.assertEqual(lg.fetch_offset_by_timestamp(1000), (0, 1000, 0))
        self.assertIsNone(lg.fetch_offset_by_timestamp(5000))
        self.assertEqual(lg.fetch_offset_by_timestamp(-2), (0, -1, 0))
        self.assertEqual(lg.fetch_offset_by_timestamp(-1), (20, -1, 0))
        self.assertEqual(lg.fetch_offset_by_timestamp(-3), (18, 1090, 0))


class RecoveryTest(Base):
    def fill(self, lg, n=30):
        for i in range(n):
            lg.append_as_leader(make_batch(3, 50, timestamp=self.clock.now), 1)

    def test_torn_tail_truncated(self):
        lg = self.open_log({"segment.bytes": 3000, "index.interval.bytes": 200})
        self.fill(lg)
        leo, size = lg.log_end_offset, lg.active_segment.size
        active = lg.active_segment.log.path
        lg.close()
        whole = make_batch(3, 50)
        records.set_base_offset(whole, 0, leo)
        with open(active, "ab") as f:
            f.write(bytes(whole[:len(whole) // 2]))
        lg2 = self.open_log({"segment.bytes": 3000, "index.interval.bytes": 200},
                            path=self.path, needs_recovery=True)
        self.assertEqual(lg2.log_end_offset, leo)
        self.assertEqual(lg2.active_segment.size, size)
        self.assertTrue(any("truncated %d bytes" % (len(whole) // 2) in line
                            for line in lg2.recovery_log))
        info = lg2.append_as_leader(make_batch(1), 2)
        self.assertEqual(info.first_offset, leo)

    def test_corrupt_middle_drops_later_segments(self):
        lg = self.open_log({"segment.bytes": 3000})
        self.fill(lg)
        segs = [(s.base_offset, s.log.path) for s in lg.segments]
        lg.close()
        with open(segs[1][1], "r+b") as f:
            f.seek(400)
            f.write(b"\xff" * 4)
        lg2 = self.open_log({"segment.bytes": 3000}, path=self.path, needs_recovery=True)
        self.assertEqual([s.base_offset for s in lg2.segments], [segs[0][0], segs[1][0]])
        self.assertLess(lg2.log_end_offset, segs[2][0])
        self.assertEqual(lg2.read(0, 10 ** 6).records.count,
                         sum(s.size for s in lg2.segments[:1]))

    def test_deleted_index_rebuilt(self):
        overrides = {"segment.bytes": 3000, "index.interval.bytes": 200}
        lg = self.open_log(overrides)
        self.fill(lg)
        seg = lg.segments[1]
        entries = seg.offset_index.entries
        expected = [lg.read(o, 10 ** 6).fetch_offset_metadata for o in range(0, 90, 7)]
        index_path, time_path = seg.offset_index.path, seg.time_index.path
        lg.close()
        os.unlink(index_path)
        os.unlink(time_path)
        lg2 = self.open_log(overrides, path=self.path, recovery_point=90)
        self.assertEqual(lg2.segments[1].offset_index.entries, entries)
        self.assertTrue(entries > 0)
        self.assertTrue(os.path.exists(time_path))
        self.assertEqual([lg2.read(o, 10 ** 6).fetch_offset_metadata for o in range(0, 90, 7)],
                         expected)

    def test_one_missing_index_file_recovers_its_segment_only(self):
        overrides = {"segment.bytes": 3000, "index.interval.bytes": 200}
        lg = self.open_log(overrides)
        self.fill(lg)
        bases = [s.base_offset for s in lg.segments]
        leo = lg.log_end_offset
        time_path = lg.segments[1].time_index.path
        lg.close()
        os.unlink(time_path)
        lg2 = self.open_log(overrides, path=self.path, recovery_point=leo)
        self.assertEqual([line.split(":")[0] for line in lg2.recovery_log],
                         ["segment %d" % bases[1]])
        self.assertTrue(os.path.exists(time_path))
        self.assertEqual(([s.base_offset for s in lg2.segments], lg2.log_end_offset),
                         (bases, leo))

    def test_leftovers_removed_on_load(self):
        """.deleted/.cleaned/.tmp files and indexes without a .log go; the rest loads as it was,
        and a second load of the tidied directory changes nothing."""
        overrides = {"segment.bytes": 3000, "index.interval.bytes": 200}
        lg = self.open_log(overrides)
        self.fill(lg)
        bases = [s.base_offset for s in lg.segments]
        leo = lg.log_end_offset
        lg.close()
        before = sorted(os.listdir(self.path))
        leftovers = ["%020d.log.deleted" % bases[0], "%020d.index.deleted" % bases[0],
                     "%020d.log.cleaned" % bases[1], "x.tmp", "%020d.index" % 999999,
                     "%020d.timeindex" % 999999]
        for name in leftovers:
            with open(os.path.join(self.path, name), "wb") as f:
                f.write(b"junk")
        lg2 = self.open_log(overrides, path=self.path, recovery_point=leo)
        self.assertEqual(sorted(os.listdir(self.path)), before)
        self.assertEqual(([s.base_offset for s in lg2.segments], lg2.log_end_offset),
                         (bases, leo))
        self.assertEqual(lg2.recovery_log, [])
        lg2.close()
        lg3 = self.open_log(overrides, path=self.path, recovery_point=leo)
        self.assertEqual(sorted(os.listdir(self.path)), before)
        self.assertEqual(lg3.log_end_offset, leo)


class MetadataTest(Base):
    def test_partition_metadata(self):
        tid = uuid.uuid4().bytes
        lg = self.open_log(topic_id=tid)
        with open(os.path.join(self.path, "partition.metadata")) as f:
            text = f.read()
        self.assertTrue(text.startswith("version: 0\ntopic_id: "))
        lg.close()
        lg2 = self.open_log(path=self.path)
        self.assertEqual(lg2.topic_id, tid)
        with self.assertRaises(KafkaError):
            self.open_log(path=self.path, topic_id=uuid.uuid4().bytes)

    def test_partition_metadata_line_ends_and_errors(self):
        """\r\n line ends read as \n; a file without a topic id reads as none; a directory in
        its place is an error, as it was with open()."""
        from kafkatw.storage.log import read_partition_metadata
        tid = uuid.uuid4().bytes
        path = self.mktemp()
        text = "version: 0\r\ntopic_id: %s\r\n" % (
            base64.urlsafe_b64encode(tid).decode("ascii").rstrip("="),)
        with open(path, "wb") as f:
            f.write(text.encode("ascii"))
        self.assertEqual(read_partition_metadata(path), tid)
        with open(path, "wb") as f:
            f.write(b"version: 0\n")
        self.assertIsNone(read_partition_metadata(path))
        self.assertIsNone(read_partition_metadata(path + ".missing"))
        os.makedirs(path + ".dir")
        self.assertRaises(IsADirectoryError, read_partition_metadata, path + ".dir")


class ThreadFlushTest(Base):
    """A background flush: planned on the reactor, fsynced by a thread that reads no log
    state, finished on the reactor."""

    def test_plan_runs_without_the_log_and_finish_moves_the_recovery_point(self):
        failed_dirs = []
        lg = self.open_log(dir_failure_handler=lambda d, e: failed_dirs.append(d))
        for _ in range(3):
            lg.append_as_leader(make_batch(2), 0)
        plan = lg.plan_flush()
        self.assertEqual((plan.offset, [s.base_offset for s in plan.segments]), (6, [0]))
        lg.append_as_leader(make_batch(2), 0)  # the reactor appends while the thread fsyncs
        self.assertEqual(plan.run(), [])
        self.assertEqual(lg.recovery_point, 0)  # the thread changed nothing
        lg.finish_flush(plan, [])
        self.assertEqual((lg.recovery_point, lg.unflushed_messages, failed_dirs), (6, 2, []))
        self.assertIsNone(lg.plan_flush(6))

    def test_io_error_reaches_the_dir_handler_on_finish_only(self):
        failed_dirs = []
        lg = self.open_log(dir_failure_handler=lambda d, e: failed_dirs.append(d))
        lg.append_as_leader(make_batch(1), 0)
        plan = lg.plan_flush()

        def fail():
            raise OSError(5, "Input/output error")
        lg.active_segment.flush = fail
        failures = plan.run()
        self.assertEqual((len(failures), failed_dirs), (1, []))
        with self.assertRaises(KafkaError) as cm:
            lg.finish_flush(plan, failures)
        self.assertEqual(cm.exception.code, errors.KAFKA_STORAGE_ERROR)
        self.assertEqual((failed_dirs, lg.recovery_point), ([os.path.dirname(lg.dir)], 0))

    def test_truncation_meanwhile_caps_the_recovery_point(self):
        lg = self.open_log()
        for _ in range(4):
            lg.append_as_leader(make_batch(1), 0)
        plan = lg.plan_flush()
        lg.truncate_to(2)
        lg.finish_flush(plan, plan.run())
        self.assertEqual(lg.recovery_point, 2)


class FirstAppendEpochTest(Base):
    """A new epoch seen by an append is written to the leader-epoch checkpoint at once but
    fsynced by the next flush (in its thread), before the recovery point passes it."""

    def epoch_file(self, lg):
        with open(os.path.join(lg.dir, "leader-epoch-checkpoint")) as f:
            return f.read()

    def count_fsyncs(self):
        calls = []
        real = os.fsync

        def fsync(fd):
            calls.append(fd)
            return real(fd)
        self.patch(os, "fsync", fsync)
        return calls

    def test_first_append_writes_without_fsync_and_the_flush_plan_syncs(self):
        lg = self.open_log()
        fsyncs = self.count_fsyncs()
        lg.append_as_leader(make_batch(2), 3)
        lg.append_as_leader(make_batch(1), 3)
        self.assertEqual(self.epoch_file(lg), "0\n1\n3 0\n")
        self.assertEqual(fsyncs, [])
        plan = lg.plan_flush()
        self.assertEqual(plan.epochs, (os.path.join(lg.dir, "leader-epoch-checkpoint"), 1))
        lg.append_as_leader(make_batch(1), 4)  # while the thread runs: left to the next flush
        self.assertEqual(lg.finish_flush(plan, plan.run()), None)
        self.assertEqual(len(fsyncs), 3)  # the checkpoint, its directory, the segment
        self.assertEqual(lg.recovery_point, 3)
        self.assertEqual(self.epoch_file(lg), "0\n2\n3 0\n4 3\n")
        plan = lg.plan_flush()
        self.assertEqual(plan.epochs[1], 2)
        lg.finish_flush(plan, plan.run())
        self.assertIsNone(lg.leader_epoch_cache.unsynced_writes())
        lg.append_as_leader(make_batch(1), 4)  # no new epoch: nothing for the checkpoint
        self.assertIsNone(lg.plan_flush().epochs)

    def test_flush_on_the_calling_thread_syncs_the_checkpoint_once(self):
        lg = self.open_log()
        lg.append_as_leader(make_batch(1), 2)
        fsyncs = self.count_fsyncs()
        lg.flush()
        self.assertEqual(len(fsyncs), 3)
        self.assertIsNone(lg.leader_epoch_cache.unsynced_writes())
        self.assertEqual(lg.recovery_point, 1)

    def test_a_failed_checkpoint_sync_takes_the_log_offline_and_keeps_the_recovery_point(self):
        failed_dirs = []
        lg = self.open_log(dir_failure_handler=lambda d, e: failed_dirs.append(d))
        lg.append_as_leader(make_batch(1), 0)
        plan = lg.plan_flush()
        plan.epochs = (plan.epochs[0] + "-gone", plan.epochs[1])
        failures = plan.run()
        self.assertIsInstance(plan.epochs_error, FileNotFoundError)
        lg.leader_epoch_cache.path = plan.epochs[0]  # (as if the file went missing)
        with self.assertRaises(KafkaError) as cm:
            lg.finish_flush(plan, failures)
        self.assertEqual(cm.exception.code, errors.KAFKA_STORAGE_ERROR)
        self.assertEqual((failed_dirs, lg.recovery_point), ([os.path.dirname(lg.dir)], 0))

    def test_an_unsynced_entry_lost_with_the_page_cache_is_recovered_from_the_batches(self):
        lg = self.open_log()
        lg.append_as_leader(make_batch(2), 5)
        lg.append_as_leader(make_batch(2), 6)
        lg.close()
        # A power loss before the flush: the unsynced checkpoint may be empty or missing;
        # the recovery point (0) is below both epochs, so recovery scans their batches.
        os.unlink(os.path.join(self.path, "leader-epoch-checkpoint"))
        lg2 = self.open_log(path=self.path, needs_recovery=True, recovery_point=0)
        self.assertEqual(lg2.leader_epoch_cache.entries(), [(5, 0), (6, 2)])
        self.assertEqual(lg2.end_offset_for_epoch(5), (5, 2))
