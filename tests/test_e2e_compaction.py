"""Compaction on a real broker through real clients: a topic switched to cleanup.policy=compact
ends with the last value per key at its original offset in fewer, merged segments; a tombstone
stays visible to a consumer, then after delete.retention.ms a later cleaning pass removes the
key entirely. A keyless record is refused on a compacted topic (INVALID_RECORD, error 87, with
Kafka's record error) through confluent-kafka and kafka-python, and accepted elsewhere.
"""

import os
import time
import uuid

from twisted.trial import unittest

from kafkatw.testing import KafkaBrokerMixin, create_topics

INVALID_RECORD = 87


def unique(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def poll_until(fn, timeout, interval=0.2, message="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %s s waiting for %s" % (timeout, message))
        time.sleep(interval)


class CompactionE2ETests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_overrides = {"log.cleaner.backoff.ms": 100, "log.segment.delete.delay.ms": 0}

    def producer(self):
        from confluent_kafka import Producer

        return Producer({"bootstrap.servers": self.broker.bootstrap_servers, "linger.ms": 0,
                         "enable.idempotence": False})

    def produce(self, producer, topic, pairs, produced):
        acked = []
        for key, value in pairs:
            producer.produce(topic, key=key, value=value,
                             on_delivery=lambda err, msg: acked.append((err, msg)))
            producer.flush(10)
        for err, msg in acked:
            self.assertIsNone(err)
            produced[msg.offset()] = (msg.key(), msg.value())

    def read_all(self, topic):
        """(offset, key, value) of every record up to the high watermark, by a real consumer."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.broker.bootstrap_servers,
                             "group.id": "compaction-reader", "enable.auto.commit": False})
        try:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
            consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
            out = []
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and (not out or out[-1][0] < high - 1):
                msg = consumer.poll(0.2)
                if msg is None or msg.error():
                    continue
                out.append((msg.offset(), msg.key(), msg.value()))
            return out
        finally:
            consumer.close()

    def segment_count(self, topic):
        d = os.path.join(self.broker.data_dir, "%s-0" % topic)
        return sum(1 for name in os.listdir(d) if name.endswith(".log"))

    def test_last_value_per_key_then_the_tombstone_goes(self):
        from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                           ConfigResource)

        topic = unique("compacted")
        create_topics(self.broker.host, self.broker.port, [(topic, 1, {
            "cleanup.policy": "delete", "segment.ms": 200, "min.cleanable.dirty.ratio": 0.01,
            "delete.retention.ms": 1500})])
        producer = self.producer()
        produced = {}  # offset -> (key, value)
        for r in range(6):  # one segment per round (segment.ms)
            self.produce(producer, topic, [(b"k%d" % k, b"r%d-k%d" % (r, k)) for k in range(10)],
                         produced)
            time.sleep(0.25)
        self.produce(producer, topic, [(b"k3", None), (b"k5", b"last-k5")], produced)
        time.sleep(0.25)
        self.produce(producer, topic, [(b"z", b"roll")], produced)  # tombstone leaves active
        self.assertEqual(len(produced), 63)
        before = self.segment_count(topic)
        self.assertGreaterEqual(before, 8)
        self.assertEqual([o for o, _, _ in self.read_all(topic)], list(range(63)))

        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap_servers})
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry("cleanup.policy", "compact",
                        incremental_operation=AlterConfigOpType.SET)])
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(10)

        latest = {}
        for offset in sorted(produced):
            latest[produced[offset][0]] = offset
        expected = sorted((o, k, v) for k, o in latest.items() for v in [produced[o][1]])
        self.assertIn((60, b"k3", None), expected)

        got = poll_until(lambda: (lambda g: g if g == expected else None)(self.read_all(topic)),
                         20, message="compaction to the last value per key")
        for offset, key, value in got:  # offsets preserved
            self.assertEqual(produced[offset], (key, value))
        after = self.segment_count(topic)
        print("\n  compaction: 63 records in %d segments -> %d records in %d segments"
              % (before, len(got), after))
        self.assertLessEqual(after, 3)  # one cleaned group, the active segment, maybe a roll

        # After delete.retention.ms a later pass (new dirty data) removes the key entirely.
        time.sleep(1.6)
        extra = [0]

        def tombstone_gone():
            extra[0] += 1
            self.produce(producer, topic, [(b"z", b"again-%d" % extra[0])], produced)
            time.sleep(0.25)  # the next record rolls the segment: the last one is cleanable
            self.produce(producer, topic, [(b"z", b"again-%d-b" % extra[0])], produced)
            records = self.read_all(topic)
            return records if b"k3" not in [k for _, k, _ in records] else None

        final = poll_until(tombstone_gone, 20, interval=0.1, message="the tombstone to go")
        keys = {k: (o, v) for o, k, v in final}
        self.assertEqual(sorted(keys), sorted({b"k%d" % k for k in range(10) if k != 3} | {b"z"}))
        for k in range(10):
            if k != 3:
                o = latest[b"k%d" % k]
                self.assertEqual(keys[b"k%d" % k], (o, produced[o][1]))
        for offset, key, value in final:
            self.assertEqual(produced[offset], (key, value))

    def test_keyless_record_refused_on_compacted_topic_only(self):
        from kafka import KafkaProducer
        from kafka.errors import InvalidRecordError

        compacted, plain = unique("keyless-compacted"), unique("keyless-plain")
        create_topics(self.broker.host, self.broker.port, [
            (compacted, 1, {"cleanup.policy": "compact,delete"}), (plain, 1, {})])
        producer = self.producer()
        acked = []
        for topic in (compacted, plain):
            producer.produce(topic, value=b"no key",
                             on_delivery=lambda err, msg: acked.append((msg.topic(), err, msg)))
        producer.flush(10)
        by_topic = {t: (err, msg) for t, err, msg in acked}
        err, _ = by_topic[compacted]
        self.assertIsNotNone(err)
        self.assertEqual(err.code(), INVALID_RECORD)
        err, msg = by_topic[plain]
        self.assertIsNone(err)
        self.assertEqual(msg.offset(), 0)

        kp = KafkaProducer(bootstrap_servers=self.broker.bootstrap_servers, retries=0)
        self.addCleanup(kp.close)
        with self.assertRaises(InvalidRecordError) as cm:
            kp.send(compacted, value=b"no key").get(10)
        self.assertIn("Compacted topic cannot accept message without key in topic partition "
                      "%s-0" % compacted, str(cm.exception))
        self.assertEqual(kp.send(plain, value=b"no key").get(10).offset, 1)
        self.assertEqual(kp.send(compacted, key=b"k", value=b"keyed").get(10).offset, 0)
