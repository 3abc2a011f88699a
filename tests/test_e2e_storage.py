"""The storage engine against a real broker process: crash recovery, a torn tail, retention and
compaction observed through real clients.

A confluent-kafka producer (acks=1) writes while the broker is SIGKILLed; after restart every
acknowledged record is at its offset, in order, without duplicates. Half a batch appended to the
active segment of a stopped broker is truncated at start-up. Retention moves the log start
offset (OFFSET_OUT_OF_RANGE below it, a consumer resets to it) and compaction keeps the last
value per key at its original offset. After a clean restart, partitions not used since (their
logs made on first use) answer every request and keep their records through a kill -9.
"""

import os
import threading
import time

from twisted.trial import unittest

from kafkatw.protocol import messages as m
from kafkatw.protocol import records as rec
from kafkatw.testing import KafkaBrokerMixin
from tests.support import (
    FETCH,
    FETCH_V,
    LIST_OFFSETS,
    RawClient,
    create_topic,
    fetch_body,
    poll_until,
    produce,
    read_all,
    unique_name,
)

OFFSET_OUT_OF_RANGE = 1


def list_offset(broker, topic, partition, timestamp):
    c = RawClient(broker, "e2e-list-offsets")
    try:
        body = m.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
            m.ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
                m.ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1,
                                                          timestamp=timestamp)])])
        p = c.request(LIST_OFFSETS, 4, body).topics[0].partitions[0]
    finally:
        c.close()
    assert p.error_code == 0, p
    return p.offset


def segment_files(broker, topic, partition):
    d = os.path.join(broker.data_dir, "%s-%d" % (topic, partition))
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".log"))


class CrashRecoveryTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    def produce_until_killed(self, topic, partitions, kill_after):
        """Produce (acks=1) from a thread; SIGKILL the broker once ``kill_after`` are acked.

        Returns {partition: {offset: value}} of every acknowledged record.
        """
        from confluent_kafka import Producer

        acked = {p: {} for p in range(partitions)}
        count = [0]
        killed = threading.Event()
        done = threading.Event()

        def run():
            p = Producer({"bootstrap.servers": self.broker.bootstrap_servers, "acks": "1",
                          "linger.ms": 1, "enable.idempotence": False, "retries": 0,
                          "message.timeout.ms": 3000, "reconnect.backoff.max.ms": 100})

            def cb(err, msg):
                if err is None:
                    acked[msg.partition()][msg.offset()] = msg.value()
                    count[0] += 1

            i = 0
            while not killed.is_set():
                try:
                    p.produce(topic, value=b"seq-%07d" % i, partition=i % partitions, on_delivery=cb)
                    i += 1
                except BufferError:
                    p.poll(0.01)
                p.poll(0)
                if i % 50 == 0:
                    time.sleep(0.001)
            p.purge()
            p.flush(5)
            done.set()

        t = threading.Thread(target=run, daemon=True)
        t.start()
        poll_until(lambda: count[0] >= kill_after, 30, message="%d acknowledged records" % kill_after)
        self.broker.kill()  # SIGKILL mid-stream: the producer is still sending
        killed.set()
        t.join(30)
        self.assertTrue(done.is_set())
        return acked

    def check_after_restart(self, topic, partitions, acked):
        for p in range(partitions):
            got = read_all(self.broker, topic, p)
            offsets = [o for o, _, _ in got]
            values = [v for _, _, v in got]
            self.assertEqual(offsets, list(range(len(got))))
            self.assertEqual(len(set(values)), len(values), "duplicates in partition %d" % p)
            self.assertEqual(values, sorted(values), "order in partition %d" % p)
            for offset, value in acked[p].items():
                self.assertLess(offset, len(got), "acknowledged offset %d lost" % offset)
                self.assertEqual(got[offset][2], value)
            yield p, got

    def test_kill_mid_stream_then_torn_tail(self):
        partitions = 3
        topic = create_topic(self.broker, unique_name("crash"), partitions=partitions)
        acked = self.produce_until_killed(topic, partitions, kill_after=3000)
        total_acked = sum(len(a) for a in acked.values())
        self.broker.start()
        lengths = {}
        for p, got in self.check_after_restart(topic, partitions, acked):
            lengths[p] = len(got)
        print("\n  %d records acknowledged before SIGKILL, %d on disk after restart"
              % (total_acked, sum(lengths.values())))
        self.assertGreaterEqual(sum(lengths.values()), total_acked)

        # a torn tail: half of a valid batch appended to the active segment of a crashed broker
        self.broker.kill()
        active = segment_files(self.broker, topic, 0)[-1]
        size_before = os.path.getsize(active)
        batch = rec.build_batch([rec.Record(value=b"torn-%d" % i) for i in range(20)],
                                base_offset=lengths[0], base_timestamp=int(time.time() * 1000))
        with open(active, "ab") as f:
            f.write(batch[:len(batch) // 2])
        self.broker.start()
        self.assertEqual(os.path.getsize(active), size_before)  # truncated at start-up
        self.assertEqual(list_offset(self.broker, topic, 0, -1), lengths[0])
        c = RawClient(self.broker, "after-torn")
        self.addCleanup(c.close)
        self.assertEqual(produce(c, topic, 0, [b"seq-9999999"]), lengths[0])
        got = read_all(self.broker, topic, 0)
        self.assertEqual(len(got), lengths[0] + 1)
        self.assertEqual(got[-1], (lengths[0], None, b"seq-9999999"))
        self.assertIn("recover", self.broker.log_tail(400).lower())


    def test_first_append_epoch_checkpoint_after_kill(self):
        """The first append to a partition writes its leader-epoch checkpoint (fsynced later by
        the flush, not on the reactor); after a kill -9 the checkpoint is there, the epoch's end
        offset is the log end, and the next append follows on."""
        partitions = 3
        topic = create_topic(self.broker, unique_name("epoch"), partitions=partitions)
        c = RawClient(self.broker, "first-append")
        for p in range(partitions):
            self.assertEqual(produce(c, topic, p, [b"first-%d" % p, b"second-%d" % p]), 0)
        c.close()
        self.broker.kill()
        for p in range(partitions):
            path = os.path.join(self.broker.data_dir, "%s-%d" % (topic, p), "leader-epoch-checkpoint")
            with open(path) as f:
                self.assertEqual(f.read(), "0\n1\n0 0\n")
        self.broker.start()
        c = RawClient(self.broker, "after-kill")
        self.addCleanup(c.close)
        R = m.OffsetForLeaderEpochRequest
        resp = c.request(23, 3, R(replica_id=-1, topics=[R.OffsetForLeaderTopic(topic=topic, partitions=[
            R.OffsetForLeaderPartition(partition=p, current_leader_epoch=0, leader_epoch=0)
            for p in range(partitions)])]))
        self.assertEqual([(p.partition, p.error_code, p.leader_epoch, p.end_offset)
                          for p in resp.topics[0].partitions],
                         [(p, 0, 0, 2) for p in range(partitions)])
        for p in range(partitions):
            self.assertEqual(produce(c, topic, p, [b"third-%d" % p]), 2)
            self.assertEqual([v for _, _, v in read_all(self.broker, topic, p)],
                             [b"first-%d" % p, b"second-%d" % p, b"third-%d" % p])


class UnopenedAfterCleanRestartTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_scope = "test"

    def test_never_used_partitions_answer_every_request_and_survive_a_kill(self):
        """After a clean restart each log is made on first use (issue 21): ListOffsets,
        OffsetForLeaderEpoch, DeleteRecords, Produce and Fetch on partitions not used since
        answer as before; a kill -9 then keeps every acknowledged record of every partition,
        used or not."""
        import re

        partitions = 5
        topic = create_topic(self.broker, unique_name("lazy"), partitions=partitions)
        c = RawClient(self.broker, "lazy-before")
        for p in range(partitions):
            self.assertEqual(produce(c, topic, p, [b"%d/%d" % (p, i) for i in range(3)]), 0)
        c.close()
        self.broker.restart()
        with open(self.broker.log_path) as f:
            unopened = [int(n) for n in re.findall(r"\((\d+) to be opened on first use\)", f.read())]
        self.assertGreaterEqual(unopened[-1], partitions)
        c = RawClient(self.broker, "lazy-after")
        self.addCleanup(c.close)
        self.assertEqual((list_offset(self.broker, topic, 0, -2),
                          list_offset(self.broker, topic, 0, -1)), (0, 3))
        E = m.OffsetForLeaderEpochRequest
        oe = c.request(23, 4, E(replica_id=-1, topics=[E.OffsetForLeaderTopic(topic=topic, partitions=[
            E.OffsetForLeaderPartition(partition=1, current_leader_epoch=-1, leader_epoch=0)])]))
        self.assertEqual([(p.error_code, p.leader_epoch, p.end_offset) for p in oe.topics[0].partitions],
                         [(0, 0, 3)])
        D = m.DeleteRecordsRequest
        dr = c.request(21, 2, D(timeout_ms=10000, topics=[D.DeleteRecordsTopic(name=topic, partitions=[
            D.DeleteRecordsPartition(partition_index=2, offset=2)])]))
        self.assertEqual([(p.error_code, p.low_watermark) for p in dr.topics[0].partitions], [(0, 2)])
        self.assertEqual(read_all(self.broker, topic, 2, start=2), [(2, None, b"2/2")])
        self.assertEqual(produce(c, topic, 3, [b"3/3"]), 3)
        self.assertEqual([v for _, _, v in read_all(self.broker, topic, 4)],
                         [b"4/%d" % i for i in range(3)])
        self.broker.kill()
        self.broker.start()
        for p in range(partitions):
            expected = [(i, None, b"%d/%d" % (p, i)) for i in range(4 if p == 3 else 3)]
            start = list_offset(self.broker, topic, p, -2)
            # (DeleteRecords' log start is checkpointed periodically: a kill may undo it)
            self.assertIn(start, (0, 2) if p == 2 else (0,))
            self.assertEqual(read_all(self.broker, topic, p, start=start), expected[start:])


class RetentionAndCompactionTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_overrides = {
        "log.retention.check.interval.ms": 200,
        "log.segment.delete.delay.ms": 100,
        "log.cleaner.backoff.ms": 200,
    }

    def test_retention_moves_the_log_start_offset(self):
        from kafka import KafkaConsumer, TopicPartition

        topic = create_topic(self.broker, unique_name("retention"),
                             configs={"retention.ms": 1500, "segment.ms": 300})
        c = RawClient(self.broker, "retention-producer")
        self.addCleanup(c.close)
        # old records carry timestamps 10 minutes back, new ones a minute ahead: retention
        # (1.5 s, by the largest timestamp of a segment) removes exactly the old segments
        past, future = int(time.time() * 1000) - 600000, int(time.time() * 1000) + 60000
        produce(c, topic, 0, [b"old-%d" % i for i in range(10)], base_timestamp=past)
        time.sleep(0.35)
        produce(c, topic, 0, [b"old-%d" % i for i in range(10, 20)], base_timestamp=past)  # rolls
        time.sleep(0.35)
        produce(c, topic, 0, [b"new-%d" % i for i in range(20, 30)], base_timestamp=future)  # rolls
        start = poll_until(lambda: list_offset(self.broker, topic, 0, -2) >= 20 and
                           list_offset(self.broker, topic, 0, -2), 10, interval=0.1,
                           message="retention to move the log start offset")
        self.assertEqual(start, 20)
        self.assertEqual(list_offset(self.broker, topic, 0, -1), 30)
        resp = c.request(FETCH, FETCH_V, fetch_body([(topic, 0, 5)]))
        p = resp.responses[0].partitions[0]
        # as Kafka's createLogReadResult(e): the offsets of an errored partition are unknown (-1)
        self.assertEqual((p.error_code, p.high_watermark, p.log_start_offset), (OFFSET_OUT_OF_RANGE, -1, -1))
        # a real consumer asked for offset 0 gets OFFSET_OUT_OF_RANGE and resets to the earliest
        consumer = KafkaConsumer(bootstrap_servers=self.broker.bootstrap_servers, group_id=None,
                                 enable_auto_commit=False, auto_offset_reset="earliest")
        self.addCleanup(consumer.close)
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 10 and time.monotonic() < deadline:
            got.extend(consumer.poll(timeout_ms=200).get(tp, []))
        self.assertEqual([(r.offset, r.value) for r in got], [(i, b"new-%d" % i) for i in range(20, 30)])

    def test_compaction_keeps_the_last_value_per_key(self):
        from kafka import KafkaConsumer, TopicPartition

        topic = create_topic(self.broker, unique_name("compact"), configs={
            "cleanup.policy": "compact", "segment.ms": 250, "min.cleanable.dirty.ratio": 0.01,
            "delete.retention.ms": 60000})
        c = RawClient(self.broker, "compact-producer")
        self.addCleanup(c.close)
        produced = []  # (offset, key, value)
        rounds = [range(10)] * 4 + [range(5)]
        for r, keys in enumerate(rounds):
            keys = list(keys)
            base = produce(c, topic, 0, [b"v%d-k%d" % (r, k) for k in keys],
                           keys=[b"k%d" % k for k in keys])
            produced.extend((base + i, b"k%d" % k, b"v%d-k%d" % (r, k)) for i, k in enumerate(keys))
            time.sleep(0.3)
        base = produce(c, topic, 0, [b"roll"], keys=[b"z"])  # rolls: every keyed round is cleanable
        produced.append((base, b"z", b"roll"))
        latest = {}
        for offset, key, value in produced:
            latest[key] = (offset, key, value)
        expected = sorted(latest.values())
        self.assertEqual(len(produced), 46)

        def compacted():
            got = read_all(self.broker, topic, 0)
            return got if got == expected else None

        got = poll_until(compacted, 20, interval=0.2, message="compaction")
        print("\n  compaction: %d records -> %d (offsets %s)" % (len(produced), len(got), [o for o, _, _ in got]))
        self.assertEqual(len(got), 11)
        by_offset = {o: (k, v) for o, k, v in produced}
        for offset, key, value in got:  # offsets preserved
            self.assertEqual(by_offset[offset], (key, value))
        # a real consumer from the beginning sees exactly the compacted log
        consumer = KafkaConsumer(bootstrap_servers=self.broker.bootstrap_servers, group_id=None,
                                 enable_auto_commit=False, auto_offset_reset="earliest")
        self.addCleanup(consumer.close)
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        seen = []
        deadline = time.monotonic() + 15
        while len(seen) < len(expected) and time.monotonic() < deadline:
            seen.extend(consumer.poll(timeout_ms=200).get(tp, []))
        self.assertEqual([(r.offset, r.key, r.value) for r in seen], expected)
        self.assertEqual(list_offset(self.broker, topic, 0, -1), 46)
