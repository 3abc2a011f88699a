"""Tests for kafkatw.server.replica_manager and delayed_fetch against an in-memory fake log
with the storage contract's names: fetch logic (limitBytes, minOneMessage, immediate vs delayed,
wake on append, expiry), errors and leader epochs, idempotent produce, ListOffsets."""

import os
import struct

import attr
from twisted.internet import defer, task
from twisted.trial import unittest
from zope.interface import implementer

from kafkatw.cluster.interfaces import IPartitionMetadata
from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError
from kafkatw.protocol.records import iter_batch_headers, set_base_offset
from kafkatw.purgatory import TopicPartitionOperationKey
from kafkatw.server.delayed_fetch import DelayedFetch
from kafkatw.server.replica_manager import (
    FetchParams,
    PartitionData,
    ReplicaManager,
    fetch_isolation_of,
)
from kafkatw.storage.config import LogConfig
from kafkatw.storage.interfaces import ILog
from kafkatw.storage.offsets import FetchDataInfo, FetchIsolation, LogAppendInfo, LogOffsetMetadata

_HEADER = struct.Struct(">qiibIhiqqqhii")


def batch(count=1, payload=20, pid=-1, epoch=-1, seq=-1, ts=1000):
    """A v2 batch whose records section is ``payload`` opaque bytes (the fake log never decodes)."""
    body_len = 49 + payload
    head = _HEADER.pack(0, body_len, -1, 2, 0, 0, count - 1, ts, ts, pid, epoch, seq, count)
    return bytearray(head + b"r" * payload)


@implementer(ILog)
class FakeLog:
    """In-memory UnifiedLog stand-in: segments of concatenated batches, HW set from outside."""

    is_offline = False
    first_unstable_offset = None
    producer_state_manager = None
    roll_listener = None

    def __init__(self, topic, partition, directory):
        self.topic, self.partition, self.dir = topic, partition, directory
        self.topic_id = b"\x07" * 16
        self.config = LogConfig()
        self.segments = [[0, bytearray(), []]]  # [base offset, bytes, [(base, last, pos, size)]]
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0
        self.epochs = [(0, 0)]  # (epoch, start offset)
        self.leader_epoch_cache = None  # never read on a single node
        self.appends = 0

    @property
    def last_stable_offset(self):
        return self.high_watermark

    def may_have_producer_snapshot(self):
        try:
            return any(n.endswith(".snapshot") for n in os.listdir(self.dir))
        except OSError:
            return False

    @property
    def last_stable_offset_metadata(self):
        return self.high_watermark_metadata

    def fetch_offset_snapshot(self):
        return self.log_start_offset, self.high_watermark, self.last_stable_offset

    @property
    def size(self):
        return sum(len(data) for _, data, _ in self.segments)

    def floor_segment(self, offset):
        return next((s for s in reversed(self.segments) if s[0] <= offset), None)

    def replace_segments(self, replacements):
        raise NotImplementedError("the fake log is never cleaned")

    def append_aborted_txn(self, producer_id, first_offset, last_offset, last_stable_offset):
        raise NotImplementedError("no transactions on the fake log")

    def maybe_increment_high_watermark(self, offset):
        if offset > self.high_watermark:
            self.update_high_watermark(offset)
            return True
        return False

    def delete_records_before(self, offset):
        if offset > self.high_watermark:
            raise KafkaError(errors.OFFSET_OUT_OF_RANGE, "offset %d" % offset)
        self.log_start_offset = max(self.log_start_offset, offset)
        return self.log_start_offset

    def roll(self):
        self.segments.append([self.log_end_offset, bytearray(), []])

    def _metadata(self, offset):
        for base, data, batches in reversed(self.segments):
            if offset >= base:
                for b0, last, pos, size in batches:
                    if b0 <= offset <= last:
                        return LogOffsetMetadata(offset, base, pos)
                return LogOffsetMetadata(offset, base, len(data))
        return LogOffsetMetadata(offset)

    @property
    def log_end_offset_metadata(self):
        return self._metadata(self.log_end_offset)

    @property
    def high_watermark_metadata(self):
        return self._metadata(self.high_watermark)

    def update_high_watermark(self, offset):
        self.high_watermark = min(offset, self.log_end_offset)

    # a single node's leader log: the follower calls are never made on it
    def append_as_follower(self, buf, batch_headers=None):
        raise NotImplementedError

    def truncate_to(self, offset):
        raise NotImplementedError

    def truncate_fully_and_start_at(self, offset):
        raise NotImplementedError

    def maybe_increment_log_start_offset(self, offset):
        raise NotImplementedError

    def append_as_leader(self, buf, leader_epoch, batch_headers=None):
        self.appends += 1
        self.batch_headers = batch_headers
        base, data, batches = self.segments[-1]
        first = self.log_end_offset
        headers = list(iter_batch_headers(buf))
        count = 0
        for pos, h in headers:
            set_base_offset(buf, pos, self.log_end_offset)
            batches.append((self.log_end_offset, self.log_end_offset + h.last_offset_delta,
                            len(data) + pos, h.size_in_bytes))
            self.log_end_offset += h.last_offset_delta + 1
            count += h.records_count
        data += buf
        return LogAppendInfo(first, self.log_end_offset - 1, 1000, first, -1, self.log_start_offset,
                             count, len(buf))

    def read(self, start_offset, max_length, isolation, min_one_message):
        if start_offset > self.log_end_offset or start_offset < self.log_start_offset:
            raise KafkaError(errors.OFFSET_OUT_OF_RANGE, "offset %d" % start_offset)
        end = {FetchIsolation.LOG_END: self.log_end_offset}.get(isolation, self.high_watermark)
        meta = self._metadata(start_offset)
        if start_offset >= end:
            return FetchDataInfo(meta, b"")
        for base, data, batches in self.segments:
            for b0, last, pos, size in batches:
                if b0 <= start_offset <= last:
                    end_meta = self._metadata(end)
                    max_pos = end_meta.relative_position_in_segment if end_meta.segment_base_offset == base else len(data)
                    limit = max(max_length, size) if min_one_message else max_length
                    n = min(max_pos - pos, limit)
                    return FetchDataInfo(meta, bytes(data[pos:pos + n]), limit < size)
        return FetchDataInfo(meta, b"")

    def end_if_read_empty(self, start_offset, isolation):
        """Log's: the metadata read() answers when it is empty at the end it may read to."""
        if start_offset > self.log_end_offset or start_offset < self.log_start_offset:
            return None
        end = {FetchIsolation.LOG_END: self.log_end_offset}.get(isolation, self.high_watermark)
        return self._metadata(start_offset) if start_offset == end else None

    def fetch_offset_by_timestamp(self, ts):
        if ts == -2:
            return (self.log_start_offset, -1, 0)
        if ts == -3:
            return (self.log_end_offset - 1, 5000, 0) if self.log_end_offset else None
        return (ts // 1000, ts, 0) if ts // 1000 < self.log_end_offset else None

    def latest_epoch(self):
        return self.epochs[-1][0]

    def end_offset_for_epoch(self, epoch):
        for i, (e, start) in enumerate(self.epochs):
            if e > epoch:
                return (self.epochs[i - 1][0], start) if i else None
        return (self.epochs[-1][0], self.log_end_offset)


class FakeLogManager:
    def __init__(self, base_dir):
        self.base_dir = base_dir
        self.logs = {}

    def get_log(self, topic, partition):
        return self.logs.get((topic, partition))

    @property
    def attached_version(self):
        """Moves whenever a log joins, leaves or is replaced, as LogManager's counter does."""
        return sorted((key, id(lg)) for key, lg in self.logs.items())

    def all_logs(self):
        return list(self.logs.values())

    def opened_logs(self):
        return list(self.logs.values())

    def unopened_summaries(self):
        return []  # (every fake log is an object)

    def run_blocking(self, fn, *args):
        return defer.maybeDeferred(fn, *args)  # inline, as LogManager without a thread pool

    def get_or_create_log(self, topic, partition, topic_id=None, overrides=None, is_new=True):
        import os

        key = (topic, partition)
        if key not in self.logs:
            d = os.path.join(self.base_dir, "%s-%d" % key)
            os.makedirs(d, exist_ok=True)
            self.logs[key] = FakeLog(topic, partition, d)
        return self.logs[key]


@implementer(IPartitionMetadata)
@attr.s
class FakeMetadata:
    topics = attr.ib(factory=dict)  # name -> partitions
    node_id = attr.ib(default=1)
    epochs = attr.ib(factory=dict)
    leaders = attr.ib(factory=dict)

    @property
    def published_version(self):
        """Every published fact a look-up reads, as ClusterMetadata's counter moves with them."""
        return (sorted(self.topics.items()), sorted(self.epochs.items()), sorted(self.leaders.items()))

    def contains_partition(self, topic, p):
        return topic in self.topics and 0 <= p < self.topics[topic]

    def topic_id(self, topic):
        return b"\x07" * 16 if topic in self.topics else bytes(16)

    def leader(self, topic, p):
        return self.leaders.get((topic, p), self.node_id) if self.contains_partition(topic, p) else None

    def leader_epoch(self, topic, p):
        return self.epochs.get((topic, p), 0) if self.contains_partition(topic, p) else None

    def leader_state(self, topic, p):
        if not self.contains_partition(topic, p):
            return None
        return (self.topic_id(topic), self.leader(topic, p), self.leader_epoch(topic, p),
                self.is_internal(topic))

    def topic_configs(self, topic):
        return {}

    def partition_configs(self, topic, p):
        return self.topic_configs(topic) if self.contains_partition(topic, p) else None

    def is_internal(self, topic):
        return topic.startswith("__")


BATCH = len(batch())  # 81 bytes


class Base(unittest.TestCase):
    def setUp(self):
        self.clock = task.Clock()
        self.md = FakeMetadata({"t": 3, "__consumer_offsets": 1})
        self.lm = FakeLogManager(self.mktemp())
        self.rm = ReplicaManager(self.lm, self.md, self.clock)

    def produce(self, tp, *batches, acks=-1):
        buf = bytearray(b"".join(batches))
        d = self.rm.append_records(1000, acks, {tp: buf})
        self.clock.advance(0)  # a producer state rebuild runs in slices, a reactor turn apart
        return self.successResultOf(d)[tp]

    def fetch(self, parts, max_wait=500, min_bytes=1, max_bytes=1 << 20, replica_id=-1, isolation=0):
        params = FetchParams(replica_id=replica_id, max_wait_ms=max_wait, min_bytes=min_bytes,
                             max_bytes=max_bytes, isolation_level=isolation)
        return self.rm.fetch_messages(params, parts)


class IsolationTests(unittest.SynchronousTestCase):
    def test_of(self):
        self.assertEqual(fetch_isolation_of(1, 0), FetchIsolation.LOG_END)
        self.assertEqual(fetch_isolation_of(-3, 0), FetchIsolation.LOG_END)
        self.assertEqual(fetch_isolation_of(-1, 0), FetchIsolation.HIGH_WATERMARK)
        self.assertEqual(fetch_isolation_of(-1, 1), FetchIsolation.TXN_COMMITTED)
        self.assertEqual(fetch_isolation_of(-2, 1), FetchIsolation.TXN_COMMITTED)


class ProduceTests(Base):
    def test_append_advances_hw(self):
        r = self.produce(("t", 0), batch(count=3), batch(count=2))
        self.assertEqual((r.error_code, r.base_offset, r.log_append_time, r.log_start_offset),
                         (errors.NONE, 0, -1, 0))
        log_ = self.lm.get_log("t", 0)
        self.assertEqual((log_.log_end_offset, log_.high_watermark), (5, 5))
        self.assertEqual(self.produce(("t", 0), batch(), acks=1).base_offset, 5)
        self.assertEqual(self.produce(("t", 0), batch(), acks=0).base_offset, 6)

    def test_batch_headers_read_once(self):
        tp = ("t", 0)
        buf = bytearray(batch(count=2)) + batch(count=1)
        expected = list(iter_batch_headers(bytes(buf)))
        self.rm.append_records_now(1000, 1, {tp: buf})
        log_ = self.lm.get_log(*tp)
        self.assertEqual(log_.batch_headers, expected)  # read here, handed to the log
        buf = bytearray(batch(count=2))
        given = list(iter_batch_headers(bytes(buf)))
        r = self.rm.append_records_now(1000, 1, {tp: buf}, batch_headers={tp: given})[tp]
        self.assertEqual((r.error_code, r.base_offset), (errors.NONE, 3))
        self.assertIs(log_.batch_headers, given)  # the caller's, not read again

    def test_unknown_partition_and_invalid_acks_and_internal(self):
        self.assertEqual(self.produce(("t", 3), batch()).error_code, errors.UNKNOWN_TOPIC_OR_PARTITION)
        self.assertEqual(self.produce(("nope", 0), batch()).error_code, errors.UNKNOWN_TOPIC_OR_PARTITION)
        self.assertEqual(self.produce(("t", 0), batch(), acks=2).error_code, errors.INVALID_REQUIRED_ACKS)
        r = self.produce(("__consumer_offsets", 0), batch())
        self.assertEqual((r.error_code, r.error_message), (errors.INVALID_TOPIC_EXCEPTION,
                                                           "Cannot append to internal topic __consumer_offsets"))
        # the internal topic's refusal comes before an unknown partition's, known topic or not
        self.assertEqual(self.produce(("__consumer_offsets", 5), batch()).error_code,
                         errors.INVALID_TOPIC_EXCEPTION)
        self.assertEqual(self.produce(("__transaction_state", 0), batch()).error_code,
                         errors.INVALID_TOPIC_EXCEPTION)
        self.md.leaders[("t", 1)] = 2
        self.assertEqual(self.produce(("t", 1), batch()).error_code, errors.NOT_LEADER_OR_FOLLOWER)

    def test_storage_error_code_passes_through(self):
        log_ = self.lm.get_or_create_log("t", 0)

        def boom(buf, epoch, batch_headers=None):
            raise KafkaError(errors.RECORD_LIST_TOO_LARGE, "too big")

        log_.append_as_leader = boom
        r = self.produce(("t", 0), batch())
        self.assertEqual((r.error_code, r.error_message), (errors.RECORD_LIST_TOO_LARGE, "too big"))

    def test_idempotent_append_waits_for_the_producer_state_rebuild(self):
        tp, other = ("t", 0), ("t", 1)
        self.produce(tp, batch(), batch())  # offsets 0-1, not idempotent: no producer state yet
        d = self.rm.append_records(1000, -1, {tp: bytearray(batch(pid=5, epoch=0, seq=0)),
                                              other: bytearray(batch(pid=6, epoch=0, seq=0))})
        self.assertNoResult(d)  # the rebuild of t-0 runs in slices, a reactor turn apart
        self.assertEqual(self.lm.get_log(*other).log_end_offset, 1)  # t-1 (empty) went at once
        plain = self.produce(tp, batch())  # not idempotent: need not wait
        self.assertEqual(plain.base_offset, 2)
        results = self.successResultOf(d)
        self.assertEqual((results[tp].error_code, results[tp].base_offset), (errors.NONE, 3))
        self.assertEqual(results[other].base_offset, 0)
        self.assertEqual(self.rm.producer_state(*tp).last_entry(5).last_seq, 0)

    def test_a_rebuild_goes_on_from_a_log_start_moved_under_it(self):
        """DeleteRecords (or retention) moving the log start past a rebuild's next read: the
        rebuild goes on from the new start. It used to stop there and the state, missing every
        producer after that point, was installed as complete (no deduplication for them)."""
        tp = ("t", 0)
        big = 600 * 1024  # two batches do not fit in one of the rebuild's 1 MiB reads
        for pid in (5, 6, 7):
            self.produce(tp, batch(payload=big, pid=pid, epoch=0, seq=0))
        log_ = self.lm.get_log(*tp)
        ps, start = self.rm._new_producer_state(log_)
        self.assertEqual(start, 0)
        steps = self.rm._rebuild_steps(ps, log_, start)
        next(steps)  # the first read held batch 0 whole and batch 1 in part: pid 5 known
        self.assertEqual(sorted(ps.producers), [5])
        log_.log_start_offset = 2  # batches 0 and 1 deleted before the next read
        for _ in steps:
            pass
        self.assertEqual(sorted(ps.producers), [5, 7])
        self.assertEqual(ps.last_entry(7).last_seq, 0)

    def test_deleting_a_partition_answers_appends_waiting_for_its_rebuild(self):
        tp = ("t", 0)
        self.produce(tp, batch())
        d = self.rm.append_records(1000, -1, {tp: bytearray(batch(pid=5, epoch=0, seq=0))})
        del self.md.topics["t"]
        self.rm.forget_partition(*tp)
        self.assertEqual(self.successResultOf(d)[tp].error_code, errors.UNKNOWN_TOPIC_OR_PARTITION)

    def test_idempotent_duplicate_answers_original_offset(self):
        tp = ("t", 0)
        self.produce(tp, batch())  # offset 0, non-idempotent
        r1 = self.produce(tp, batch(count=2, pid=5, epoch=0, seq=0))
        r2 = self.produce(tp, batch(count=2, pid=5, epoch=0, seq=2))
        self.assertEqual((r1.base_offset, r2.base_offset), (1, 3))
        appends = self.lm.get_log(*tp).appends
        dup = self.produce(tp, batch(count=2, pid=5, epoch=0, seq=0))
        self.assertEqual((dup.error_code, dup.base_offset), (errors.NONE, 1))
        self.assertEqual(self.lm.get_log(*tp).appends, appends)  # nothing written
        self.assertEqual(self.lm.get_log(*tp).log_end_offset, 5)

    def test_idempotent_errors(self):
        tp = ("t", 0)
        self.produce(tp, batch(pid=5, epoch=1, seq=0))
        self.assertEqual(self.produce(tp, batch(pid=5, epoch=1, seq=5)).error_code,
                         errors.OUT_OF_ORDER_SEQUENCE_NUMBER)
        self.assertEqual(self.produce(tp, batch(pid=5, epoch=0, seq=1)).error_code,
                         errors.INVALID_PRODUCER_EPOCH)
        self.assertEqual(self.lm.get_log(*tp).log_end_offset, 1)
        self.assertEqual(self.produce(tp, batch(pid=5, epoch=1, seq=1)).base_offset, 1)

    def test_producer_expiry_loop(self):
        rm = ReplicaManager(self.lm, self.md, self.clock, {"producer.id.expiration.ms": 1000,
                                                          "producer.id.expiration.check.interval.ms": 500})
        rm.start()
        self.clock.advance(1)  # now = 1000 ms
        d = rm.append_records(1000, -1, {("t", 0): batch(pid=5, epoch=0, seq=0, ts=1000)})
        self.successResultOf(d)
        self.clock.advance(0.5)
        self.assertIn(5, rm.producer_state("t", 0).producers)
        self.clock.advance(0.5)  # now = 2000: idle for 1000 ms
        self.assertNotIn(5, rm.producer_state("t", 0).producers)
        rm.shutdown()
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_producer_state_snapshot_and_rebuild(self):
        tp = ("t", 0)
        self.produce(tp, batch(pid=5, epoch=0, seq=0))
        self.produce(tp, batch(pid=5, epoch=0, seq=1))
        self.rm.shutdown()
        # restart on the same logs: state comes back from the snapshot
        rm2 = ReplicaManager(self.lm, self.md, self.clock)
        ps = rm2.producer_state(*tp)
        self.assertEqual(ps.last_entry(5).last_seq, 1)
        # and without a snapshot it is rebuilt from the log's batch headers
        rm3 = ReplicaManager(self.lm, self.md, self.clock)
        import os

        log_ = self.lm.get_log(*tp)
        for name in os.listdir(log_.dir):
            os.unlink(os.path.join(log_.dir, name))
        ps = rm3.producer_state(*tp)
        self.assertEqual(ps.last_entry(5).last_seq, 1)
        d = rm3.append_records(1000, -1, {tp: batch(pid=5, epoch=0, seq=1)})
        self.assertEqual(self.successResultOf(d)[tp].base_offset, 1)


class FetchTests(Base):
    def setUp(self):
        super().setUp()
        for p in range(3):
            self.lm.get_or_create_log("t", p)

    def pd(self, offset, max_bytes=1 << 20, **kw):
        return PartitionData(offset, max_bytes=max_bytes, **kw)

    def test_immediate_when_data(self):
        self.produce(("t", 0), batch(), batch())
        res = self.successResultOf(self.fetch([(("t", 0), self.pd(0))]))
        (tp, data), = res
        self.assertEqual(tp, ("t", 0))
        self.assertEqual((data.error, data.high_watermark, data.log_start_offset, data.last_stable_offset),
                         (errors.NONE, 2, 0, 2))
        self.assertEqual(len(data.records), 2 * BATCH)
        self.assertEqual(data.preferred_read_replica, -1)

    def test_consumer_reads_only_below_hw_follower_to_leo(self):
        self.produce(("t", 0), batch(), batch())
        log_ = self.lm.get_log("t", 0)
        log_.high_watermark = 1
        data = self.successResultOf(self.fetch([(("t", 0), self.pd(0))], max_wait=0))[0][1]
        self.assertEqual(len(data.records), BATCH)
        data = self.successResultOf(self.fetch([(("t", 0), self.pd(0))], max_wait=0, replica_id=2))[0][1]
        self.assertEqual(len(data.records), 2 * BATCH)

    def test_limit_bytes_shrinks_in_request_order_and_min_one_message(self):
        for p in range(3):
            self.produce(("t", p), batch(), batch())
        parts = [(("t", 2), self.pd(0, max_bytes=10)), (("t", 0), self.pd(0)), (("t", 1), self.pd(0))]
        res = self.successResultOf(self.fetch(parts, max_bytes=BATCH + 10, max_wait=0))
        sizes = [(tp, len(d.records)) for tp, d in res]
        # t-2 first: partition max 10 < batch, but minOneMessage gives one whole batch (81);
        # t-0 then has 10 bytes of budget and minOneMessage is off: a cut batch -> nothing;
        # t-1: budget still 10 -> nothing
        self.assertEqual(sizes, [(("t", 2), BATCH), (("t", 0), 0), (("t", 1), 0)])

    def test_min_one_message_stays_on_until_first_non_empty(self):
        self.produce(("t", 1), batch(payload=200))
        parts = [(("t", 0), self.pd(0)), (("t", 1), self.pd(0, max_bytes=50))]
        res = self.successResultOf(self.fetch(parts, max_wait=0))
        self.assertEqual([len(d.records) for _, d in res], [0, 261])

    def test_partial_tail_batch_is_returned_cut(self):
        self.produce(("t", 0), batch(), batch())
        res = self.successResultOf(self.fetch([(("t", 0), self.pd(0, max_bytes=BATCH + 30))], max_wait=0))
        self.assertEqual(len(res[0][1].records), BATCH + 30)

    def test_errors_answer_immediately(self):
        self.produce(("t", 0), batch())
        self.md.epochs[("t", 0)] = 3
        parts = [(("t", 0), self.pd(1)), (("t", 7), self.pd(0)), (("t", 0), self.pd(5)),
                 (("t", 0), self.pd(0, current_leader_epoch=2)),
                 (("t", 0), self.pd(0, current_leader_epoch=4)),
                 (("t", 0), self.pd(0, topic_id=b"\x09" * 16))]
        res = self.successResultOf(self.fetch(parts, min_bytes=1000))
        self.assertEqual([d.error for _, d in res], [
            errors.NONE, errors.UNKNOWN_TOPIC_OR_PARTITION, errors.OFFSET_OUT_OF_RANGE,
            errors.FENCED_LEADER_EPOCH, errors.UNKNOWN_LEADER_EPOCH, errors.INCONSISTENT_TOPIC_ID])
        self.assertEqual((res[2][1].high_watermark, res[2][1].log_start_offset), (-1, -1))
        self.assertEqual(res[2][1].records, b"")

    def test_nothing_requested_or_no_wait(self):
        self.successResultOf(self.fetch([], min_bytes=10))
        res = self.successResultOf(self.fetch([(("t", 0), self.pd(0))], max_wait=0))
        self.assertEqual(len(res[0][1].records), 0)

    def test_waits_then_wakes_on_append_same_turn(self):
        d = self.fetch([(("t", 0), self.pd(0)), (("t", 1), self.pd(0))], max_wait=10000)
        self.assertNoResult(d)
        self.assertEqual(self.rm.fetch_purgatory.num_delayed(), 1)
        self.assertEqual(self.rm.fetch_purgatory.watched(), 2)
        self.produce(("t", 1), batch())
        res = self.successResultOf(d)
        self.assertEqual([(tp, len(x.records), x.high_watermark) for tp, x in res],
                         [(("t", 0), 0, 0), (("t", 1), BATCH, 1)])
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(self.rm.fetch_purgatory.num_delayed(), 0)

    def test_a_consumer_parked_at_the_end_is_not_read_nor_tried(self):
        """A consumer's fetch at the end of every partition parks without the reads and the
        parking check: its starts are what the reads answer (their fetch offset metadata),
        and it wakes as a read-and-checked one does; a partition not at its end, or a
        follower, reads and checks as before."""
        self.produce(("t", 0), batch())
        self.produce(("t", 1), batch())
        reads, tries = [], []
        real_read, real_try = self.rm.read_from_log, DelayedFetch.try_complete

        def counting_read(params, infos, found=None):
            reads.append([tp for tp, _ in infos])
            return real_read(params, infos, found)

        def counting_try(op):
            tries.append(op)
            return real_try(op)

        self.rm.read_from_log = counting_read
        self.patch(DelayedFetch, "try_complete", counting_try)
        parts = [(("t", 0), self.pd(1)), (("t", 1), self.pd(1))]
        params = FetchParams(replica_id=-1, max_wait_ms=10000, min_bytes=1, max_bytes=1 << 20)
        op = self.rm.fetch_messages_now(params, parts)
        self.assertIsInstance(op, DelayedFetch)
        self.assertEqual((reads, tries), ([], []))
        self.assertEqual(op.start_offsets,
                         [r.fetch_offset_metadata for _, r in real_read(params, parts)])
        got = []
        op.when_complete(got.append, None)
        self.produce(("t", 1), batch())
        self.assertEqual([(tp, len(x.records)) for tp, x in got[0]], [(("t", 0), 0), (("t", 1), BATCH)])
        self.assertEqual((reads, len(tries)), ([[("t", 0), ("t", 1)]], 1))
        # one partition behind its end: read (and answered at once), then checked as before
        del reads[:], tries[:]
        d = self.fetch([(("t", 0), self.pd(1)), (("t", 1), self.pd(1))], max_wait=10000)
        self.assertEqual([len(x.records) for _, x in self.successResultOf(d)], [0, BATCH])
        self.assertEqual((len(reads), tries), (1, []))
        d = self.fetch([(("t", 0), self.pd(1)), (("t", 1), self.pd(1))], max_wait=10000,
                       min_bytes=1 << 20)
        self.assertNoResult(d)
        self.assertEqual((len(reads), len(tries)), (2, 1))

    def test_min_bytes_accumulates_across_partitions(self):
        d = self.fetch([(("t", 0), self.pd(0)), (("t", 1), self.pd(0))], min_bytes=2 * BATCH)
        self.produce(("t", 0), batch())
        self.assertNoResult(d)
        self.produce(("t", 1), batch())
        res = self.successResultOf(d)
        self.assertEqual([len(x.records) for _, x in res], [BATCH, BATCH])

    def test_accumulation_capped_by_partition_max_bytes(self):
        d = self.fetch([(("t", 0), self.pd(0, max_bytes=50))], min_bytes=100)
        self.produce(("t", 0), batch(), batch())  # 162 new bytes, but at most 50 count
        self.assertNoResult(d)
        self.clock.advance(0.5)
        self.assertEqual(len(self.successResultOf(d)[0][1].records), BATCH)  # minOneMessage

    def test_expiry_answers_with_what_is_there(self):
        self.produce(("t", 0), batch())
        d = self.fetch([(("t", 0), self.pd(0))], min_bytes=1 << 20, max_wait=3000)
        self.clock.advance(2.999)
        self.assertNoResult(d)
        self.clock.advance(0.001)
        self.assertEqual(len(self.successResultOf(d)[0][1].records), BATCH)

    def test_expiry_with_nothing(self):
        d = self.fetch([(("t", 0), self.pd(0))], max_wait=500)
        self.clock.advance(0.5)
        (tp, data), = self.successResultOf(d)
        self.assertEqual((data.error, len(data.records), data.high_watermark), (errors.NONE, 0, 0))

    def test_segment_roll_completes(self):
        self.produce(("t", 0), batch())
        d = self.fetch([(("t", 0), self.pd(0))], min_bytes=1 << 20)
        self.lm.get_log("t", 0).roll()
        self.produce(("t", 0), batch())
        self.assertEqual(len(self.successResultOf(d)[0][1].records), BATCH)

    def test_leader_epoch_change_completes(self):
        d = self.fetch([(("t", 0), self.pd(0, current_leader_epoch=0))], min_bytes=1 << 20)
        self.md.epochs[("t", 0)] = 1
        self.assertEqual(self.rm.fetch_purgatory.check_and_complete(TopicPartitionOperationKey("t", 0)), 1)
        self.assertEqual(self.successResultOf(d)[0][1].error, errors.FENCED_LEADER_EPOCH)

    def test_partition_gone_completes(self):
        d = self.fetch([(("t", 2), self.pd(0))], min_bytes=1 << 20)
        self.md.topics["t"] = 2
        self.rm.forget_partition("t", 2)
        self.assertEqual(self.successResultOf(d)[0][1].error, errors.UNKNOWN_TOPIC_OR_PARTITION)

    def test_truncated_below_fetch_offset_completes(self):
        self.produce(("t", 0), batch(), batch())
        d = self.fetch([(("t", 0), self.pd(2))], min_bytes=1 << 20)
        log_ = self.lm.get_log("t", 0)
        log_.high_watermark = 1
        self.rm.fetch_purgatory.check_and_complete(TopicPartitionOperationKey("t", 0))
        self.successResultOf(d)

    def test_cancel_waiting_fetch(self):
        d = self.fetch([(("t", 0), self.pd(0))])
        d.cancel()
        self.failureResultOf(d)
        self.produce(("t", 0), batch())
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_diverging_epoch_answers_immediately(self):
        log_ = self.lm.get_log("t", 0)
        self.produce(("t", 0), batch(count=5))
        log_.epochs = [(0, 0), (2, 3)]
        res = self.successResultOf(self.fetch(
            [(("t", 0), self.pd(5, last_fetched_epoch=1))], replica_id=2, min_bytes=1000))
        self.assertEqual(res[0][1].diverging_epoch, (0, 3))
        self.assertEqual(len(res[0][1].records), 0)

    def test_fetch_below_log_start_is_out_of_range_even_if_diverging(self):
        """Kafka's Partition.readFromLocalLog: a fetch offset below the log start fails with
        OFFSET_OUT_OF_RANGE whether or not the last fetched epoch diverges (the follower
        then starts again at the log start, instead of truncating first)."""
        log_ = self.lm.get_log("t", 0)
        self.produce(("t", 0), batch(count=5))
        log_.epochs = [(0, 0), (2, 1)]  # epoch 0 ends at 1, below the fetch offset: diverging
        log_.delete_records_before(3)
        res = self.successResultOf(self.fetch(
            [(("t", 0), self.pd(2, last_fetched_epoch=0))], replica_id=2, min_bytes=1000))
        self.assertEqual((res[0][1].error, res[0][1].diverging_epoch), (errors.OFFSET_OUT_OF_RANGE, None))
        # at or above the log start the divergence is reported
        res = self.successResultOf(self.fetch(
            [(("t", 0), self.pd(3, last_fetched_epoch=0))], replica_id=2, min_bytes=1000))
        self.assertEqual((res[0][1].error, res[0][1].diverging_epoch), (errors.NONE, (0, 1)))

    def test_divergence_completes_a_parked_follower_fetch(self):
        """Case H: a parked follower's fetch completes once its last fetched epoch ends
        before its fetch offset (asked when no bytes complete it), with the diverging epoch;
        until then a check leaves it parked."""
        log_ = self.lm.get_log("t", 0)
        self.produce(("t", 0), batch(count=5))
        d = self.fetch([(("t", 0), self.pd(5, last_fetched_epoch=0))], replica_id=2, min_bytes=1000)
        key = TopicPartitionOperationKey("t", 0)
        self.assertEqual(self.rm.fetch_purgatory.check_and_complete(key), 0)
        self.assertNoResult(d)
        log_.epochs = [(0, 0), (2, 3)]
        self.assertEqual(self.rm.fetch_purgatory.check_and_complete(key), 1)
        (_, data), = self.successResultOf(d)
        self.assertEqual((data.error, data.diverging_epoch, len(data.records)), (errors.NONE, (0, 3), 0))


    def _throttle_followers(self):
        """The leader's replication quota used up for every follower of every partition."""

        class Exceeded:
            unlimited = False

            def is_quota_exceeded(self):
                return True

            def record(self, nbytes):
                pass

        self.rm.leader_quota = Exceeded()
        self.rm._leader_throttles = lambda topic, partition, replica_id: True

    def test_throttled_follower_behind_a_roll_waits(self):
        """Kafka's DelayedFetch case F for a fetch on an older segment than the log end: a
        follower the leader throttles is not answered at once (its read would be empty, and
        it would ask again at once, over and over while the quota stays used up); it waits
        max wait as a throttled partition on the same segment does."""
        log_ = self.lm.get_log("t", 0)
        self.produce(("t", 0), batch())
        log_.roll()
        self.produce(("t", 0), batch())
        self._throttle_followers()
        d = self.fetch([(("t", 0), self.pd(0))], replica_id=2, max_wait=500)
        self.assertNoResult(d)
        self.produce(("t", 0), batch())  # a check on the append: still throttled
        self.assertNoResult(d)
        self.clock.advance(0.5)
        (_, data), = self.successResultOf(d)
        self.assertEqual((data.error, len(data.records)), (errors.NONE, 0))

    def test_unthrottled_follower_behind_a_roll_is_answered_at_once(self):
        self.produce(("t", 0), batch())
        d = self.fetch([(("t", 0), self.pd(1))], replica_id=2, min_bytes=1 << 20)
        self.assertNoResult(d)
        self.lm.get_log("t", 0).roll()
        self.produce(("t", 0), batch())
        (_, data), = self.successResultOf(d)
        self.assertEqual(len(data.records), BATCH)

    # -- a parked fetch's look-ups (versioned sources, as the embedded broker's) ----------

    def count_look_ups(self):
        calls = []
        real = self.rm.fetch_log_or_error

        def counting(params, topic, partition, *rest):
            calls.append((topic, partition))
            return real(params, topic, partition, *rest)

        self.rm.fetch_log_or_error = counting
        return calls

    def test_one_look_up_to_park_and_one_to_wake(self):
        """One look-up parks the fetch; its wake and read reuse it (versions unchanged)."""
        calls = self.count_look_ups()
        d = self.fetch([(("t", 0), self.pd(0))], max_wait=10000)
        self.assertNoResult(d)
        self.assertEqual(calls, [("t", 0)])
        self.produce(("t", 0), batch())
        (tp, data), = self.successResultOf(d)
        self.assertEqual((tp, len(data.records), data.high_watermark), (("t", 0), BATCH, 1))
        self.assertEqual(calls, [("t", 0)])

    def test_a_replaced_log_is_looked_up_and_read_on_wake(self):
        """A log replaced while the fetch waits (as by a move to another log dir) moves the
        log manager's version: the wake looks the partition up again and reads the new log."""
        calls = self.count_look_ups()
        d = self.fetch([(("t", 0), self.pd(0))], max_wait=10000)
        self.assertNoResult(d)
        del self.lm.logs[("t", 0)]
        self.lm.get_or_create_log("t", 0)  # a new log object
        self.produce(("t", 0), batch())
        (tp, data), = self.successResultOf(d)
        self.assertEqual((tp, len(data.records), data.high_watermark), (("t", 0), BATCH, 1))
        self.assertEqual(calls, [("t", 0), ("t", 0)])


class ListOffsetsTests(Base):
    def setUp(self):
        super().setUp()
        self.produce(("t", 0), batch(count=4))
        self.log = self.lm.get_log("t", 0)
        self.log.high_watermark = 3

    def lo(self, ts, iso=0, **kw):
        return self.rm.fetch_offset_for_timestamp(("t", 0), ts, iso, **kw)

    def lo_error(self, ts, iso=0, tp=("t", 0), **kw):
        e = self.assertRaises(KafkaError, self.rm.fetch_offset_for_timestamp, tp, ts, iso, **kw)
        return e.code

    def test_special_timestamps(self):
        self.md.epochs[("t", 0)] = 4
        r = self.lo(-1)
        self.assertEqual((r.error, r.offset, r.timestamp, r.leader_epoch), (errors.NONE, 3, -1, 4))
        self.assertEqual(self.lo(-1, None).offset, 4)  # replica: log end
        self.assertEqual(self.lo(-2).offset, 0)
        self.assertEqual(self.lo(-3).offset, -1)  # max-ts at offset 3 is not below the HW
        self.assertEqual(self.lo(-3, None).offset, 3)

    def test_by_timestamp(self):
        r = self.lo(2000)
        self.assertEqual((r.offset, r.timestamp), (2, 2000))
        self.assertEqual(self.lo(9000).offset, -1)

    def test_errors(self):
        self.md.epochs[("t", 0)] = 2
        self.assertEqual(self.lo_error(-1, current_leader_epoch=1), errors.FENCED_LEADER_EPOCH)
        self.assertEqual(self.lo_error(-1, current_leader_epoch=3), errors.UNKNOWN_LEADER_EPOCH)
        self.assertEqual(self.lo_error(-1, tp=("x", 0)), errors.UNKNOWN_TOPIC_OR_PARTITION)
        self.assertEqual(self.lo(-1, current_leader_epoch=2).offset, 3)


class RealStorageTests(unittest.TestCase):
    """The same paths against kafkatw.storage's UnifiedLog/LogManager and real batches."""

    def setUp(self):
        from kafkatw.storage.manager import LogManager

        self.clock = task.Clock()
        self.clock.advance(1700000000)
        self.md = FakeMetadata({"t": 2})
        self.lm = LogManager([self.mktemp()], {}, reactor=self.clock)
        self.rm = ReplicaManager(self.lm, self.md, self.clock)

    def batch(self, n=1, **kw):
        from kafkatw.protocol.records import Record, build_batch

        recs = [Record(key=b"k%d" % i, value=b"v" * 50) for i in range(n)]
        return bytearray(build_batch(recs, base_timestamp=1700000000000, **kw))

    def test_produce_fetch_wake_and_idempotence(self):
        tp = ("t", 0)
        d = self.rm.fetch_messages(FetchParams(max_wait_ms=10000, min_bytes=1),
                                   [(tp, PartitionData(0))])
        self.assertNoResult(d)
        b = self.batch(3, producer_id=9, producer_epoch=0, base_sequence=0)
        size = len(b)
        r = self.successResultOf(self.rm.append_records(1000, -1, {tp: b}))[tp]
        self.assertEqual((r.error_code, r.base_offset), (errors.NONE, 0))
        (_, data), = self.successResultOf(d)
        self.assertEqual((data.error, data.high_watermark, len(data.records)), (errors.NONE, 3, size))
        # duplicate retry answers offset 0, writes nothing
        dup = self.batch(3, producer_id=9, producer_epoch=0, base_sequence=0)
        r = self.successResultOf(self.rm.append_records(1000, -1, {tp: dup}))[tp]
        self.assertEqual((r.error_code, r.base_offset), (errors.NONE, 0))
        self.assertEqual(self.lm.get_log(*tp).log_end_offset, 3)
        bad = self.batch(1, producer_id=9, producer_epoch=0, base_sequence=7)
        r = self.successResultOf(self.rm.append_records(1000, -1, {tp: bad}))[tp]
        self.assertEqual(r.error_code, errors.OUT_OF_ORDER_SEQUENCE_NUMBER)
        # ListOffsets
        self.assertEqual(self.rm.fetch_offset_for_timestamp(("t", 0), -1, 0).offset, 3)
        self.assertEqual(self.rm.fetch_offset_for_timestamp(("t", 0), -2, 0).offset, 0)
        # fetch at the end waits, expiry answers empty with the HW
        d = self.rm.fetch_messages(FetchParams(max_wait_ms=500, min_bytes=1), [(tp, PartitionData(3))])
        self.assertNoResult(d)
        self.clock.advance(0.5)
        (_, data), = self.successResultOf(d)
        self.assertEqual((data.error, len(data.records), data.high_watermark), (errors.NONE, 0, 3))
        # out of range
        d = self.rm.fetch_messages(FetchParams(max_wait_ms=500), [(tp, PartitionData(4))])
        self.assertEqual(self.successResultOf(d)[0][1].error, errors.OFFSET_OUT_OF_RANGE)
        # clean shutdown writes a snapshot at the log end
        self.rm.shutdown()
        import os

        self.assertIn("%020d.snapshot" % 3, os.listdir(self.lm.get_log(*tp).dir))


class LeaderLogOrErrorTests(unittest.TestCase):
    """leader_log_or_error answers what get_partition_or_error + check_leader_epoch answer."""

    def test_same_answers_as_the_two_checks(self):
        cases = [
            (("t", 0, None, -1), errors.NONE),
            (("t", 0, b"\x07" * 16, 0), errors.NONE),
            (("t", 0, bytes(16), 0), errors.NONE),
            (("t", 3, None, -1), errors.UNKNOWN_TOPIC_OR_PARTITION),
            (("nope", 0, None, -1), errors.UNKNOWN_TOPIC_OR_PARTITION),
            (("t", 0, b"\x08" * 16, -1), errors.INCONSISTENT_TOPIC_ID),
            (("t", 1, None, -1), errors.NOT_LEADER_OR_FOLLOWER),
            (("t", 1, None, 9), errors.NOT_LEADER_OR_FOLLOWER),
            (("t", 2, None, 4), errors.FENCED_LEADER_EPOCH),
            (("t", 2, None, 6), errors.UNKNOWN_LEADER_EPOCH),
            (("t", 2, None, 5), errors.NONE),
            (("t", 2, b"\x08" * 16, 4), errors.INCONSISTENT_TOPIC_ID),
        ]
        md = FakeMetadata({"t": 3}, epochs={("t", 2): 5}, leaders={("t", 1): 2})
        lm = FakeLogManager(self.mktemp())
        rm = ReplicaManager(lm, md, task.Clock())
        for (topic, p, topic_id, epoch), code in cases:
            log_, error = rm.leader_log_or_error(topic, p, topic_id, epoch)
            self.assertEqual(error, code, (topic, p, topic_id, epoch))
            if code == errors.NONE:
                self.assertIs(log_, lm.logs[(topic, p)])
            else:
                self.assertIsNone(log_)
                expected = rm.get_partition_or_error(topic, p, topic_id)[1]
                if expected == errors.NONE:
                    expected = rm.check_leader_epoch(topic, p, epoch)
                self.assertEqual(error, expected)


class SnapshotOnRollTests(unittest.TestCase):
    """The producer snapshot a roll takes is encoded on the reactor, written in the pool."""

    def test_snapshot_written_by_the_blocking_work_only(self):
        import os

        from kafkatw.storage.manager import LogManager
        from kafkatw.storage.producer_state import snapshot_file_name

        clock = task.Clock()
        clock.advance(1700000000)
        lm = LogManager([self.mktemp()], {}, reactor=clock)
        work = []
        lm.run_blocking = lambda fn, *args: work.append((fn, args)) or defer.Deferred()
        rm = ReplicaManager(lm, FakeMetadata({"t": 1}), clock)
        from kafkatw.protocol.records import Record, build_batch

        b = bytearray(build_batch([Record(value=b"v")], base_timestamp=1700000000000, producer_id=9,
                                  producer_epoch=0, base_sequence=0))
        self.successResultOf(rm.append_records(1000, -1, {("t", 0): b}))
        lg = lm.get_log("t", 0)
        lg.roll()  # queues the flush of the old segment and the snapshot
        path = os.path.join(lg.dir, snapshot_file_name(1))
        self.assertFalse(os.path.exists(path))
        snapshot_work = [fn for fn, _ in work if fn.__name__ == "write"]
        # the first one is the snapshot every new producer state gets (at offset 0), then the roll's
        self.assertEqual(len(snapshot_work), 2)
        snapshot_work[1]()  # what the pool thread does
        self.assertTrue(os.path.exists(path))
        again = rm._new_producer_state(lg)[0]
        self.assertEqual(again.last_entry(9).last_seq, 0)
