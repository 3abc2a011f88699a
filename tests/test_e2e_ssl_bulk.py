"""Bulk data over an SSL listener with real clients: 50 MiB in 1 MiB messages produced by
confluent-kafka and read back by two consumers at once, every byte and the order compared. It
drives the TLS bulk paths (region chunks encrypted in one go, records decrypted together)."""

import random
import time
import uuid

from twisted.trial import unittest

from kafkatw.testing import KafkaBrokerMixin

MIB = 1024 * 1024
COUNT = 50


def _value(i):
    # distinct, incompressible, reproducible: a misplaced chunk cannot compare equal
    return random.Random(i).randbytes(MIB)


class SslBulkTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_options = {"listeners": ("PLAINTEXT", "SSL")}
    broker_overrides = {"message.max.bytes": 2 * MIB}

    def conf(self):
        return {"bootstrap.servers": self.broker.ssl_bootstrap_servers, "security.protocol": "SSL",
                "ssl.ca.location": self.broker.ssl_ca_path}

    def test_fifty_mib_in_1_mib_messages_arrive_whole_and_in_order(self):
        import confluent_kafka

        topic = "ssl-bulk-" + uuid.uuid4().hex[:8]
        producer = confluent_kafka.Producer(dict(self.conf(), **{
            "linger.ms": 5, "batch.size": 2 * MIB, "message.max.bytes": 2 * MIB, "acks": "all",
            "compression.type": "none"}))
        delivered = []
        for i in range(COUNT):
            producer.produce(topic, _value(i), key=b"%d" % i, partition=0,
                             on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
            producer.poll(0)
        self.assertEqual(producer.flush(60), 0)
        self.assertEqual(delivered, [(None, i) for i in range(COUNT)])

        # two consumers at once: two TLS connections sending regions side by side
        consumers = []
        for fetch_max in (64 * MIB, 3 * MIB):
            c = confluent_kafka.Consumer(dict(self.conf(), **{
                "group.id": "g-" + uuid.uuid4().hex[:8], "enable.auto.commit": False,
                "fetch.max.bytes": fetch_max, "max.partition.fetch.bytes": fetch_max,
                "receive.message.max.bytes": fetch_max + MIB}))
            c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
            consumers.append(c)
        got = [[], []]
        deadline = time.monotonic() + 60
        try:
            while any(len(g) < COUNT for g in got) and time.monotonic() < deadline:
                for c, g in zip(consumers, got):
                    if len(g) < COUNT:
                        msg = c.poll(0.2)
                        if msg is not None:
                            self.assertIsNone(msg.error())
                            g.append((msg.offset(), msg.key(), msg.value()))
        finally:
            for c in consumers:
                c.close()
        for g in got:
            self.assertEqual(len(g), COUNT)
            for i, (offset, key, value) in enumerate(g):
                self.assertEqual((offset, key), (i, b"%d" % i))
                self.assertTrue(value == _value(i), "message %d differs" % i)
