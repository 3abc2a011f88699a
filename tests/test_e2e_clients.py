"""Real clients against a real broker process: metadata, topics, produce, consume, offsets.

Each client (confluent-kafka/librdkafka, kafka-python, aiokafka, kcat) produces 1,000 keyed
records with headers at every acks level and compression codec, then consumes them back and
the test compares keys, values, headers, order and offsets exactly.
"""

import asyncio
import itertools
import shutil
import subprocess
import time

from twisted.trial import unittest

from kafkatw.testing import KafkaBrokerMixin
from tests.support import poll_until, unique_name

N = 1000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
ACKS = [0, 1, -1]


def expected_records(n=N, tag=""):
    return [
        (
            ("key-%d" % (i % 37)).encode(),
            ("value-%s-%d-" % (tag, i)).encode() + b"x" * (i % 50),
            [("h1", ("hv-%d" % i).encode()), ("h2", b"")],
        )
        for i in range(n)
    ]


class ConfluentKafkaTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    """librdkafka through confluent-kafka."""

    def admin(self):
        # keep the client alive: a destroyed AdminClient fails its pending futures
        from confluent_kafka.admin import AdminClient

        if getattr(self, "_admin", None) is None:
            self._admin = AdminClient({"bootstrap.servers": self.broker.bootstrap_servers})
        return self._admin

    def create_topic(self, name, partitions=1):
        from confluent_kafka.admin import NewTopic

        futures = self.admin().create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        futures[name].result(timeout=10)

    def produce(self, topic, records, acks, codec):
        from confluent_kafka import Producer

        p = Producer({
            "bootstrap.servers": self.broker.bootstrap_servers,
            "acks": str(acks),
            "compression.type": codec,
            "linger.ms": 5,
        })
        delivered = []

        def on_delivery(err, msg):
            delivered.append((err, msg.offset() if err is None else None))

        for key, value, headers in records:
            p.produce(topic, value=value, key=key, headers=headers, on_delivery=on_delivery)
            p.poll(0)
        remaining = p.flush(30)
        self.assertEqual(remaining, 0)
        self.assertEqual([e for e, _ in delivered if e is not None], [])
        return [o for _, o in delivered]

    def consume(self, topic, count, partition=0, offset=0):
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({
            "bootstrap.servers": self.broker.bootstrap_servers,
            "group.id": "unused-" + topic,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        })
        c.assign([TopicPartition(topic, partition, offset)])
        out = []
        deadline = time.monotonic() + 30
        try:
            while len(out) < count and time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is None:
                    continue
                self.assertIsNone(msg.error(), msg.error())
                out.append((msg.key(), msg.value(), [(k, v) for k, v in (msg.headers() or [])], msg.offset()))
            # nothing beyond what was produced
            extra = c.poll(0.3)
            self.assertTrue(extra is None or extra.error() is not None, "unexpected extra record")
        finally:
            c.close()
        return out

    def test_metadata_lists_broker_and_topic(self):
        name = unique_name("meta")
        self.create_topic(name, partitions=3)
        md = self.admin().list_topics(timeout=10)
        self.assertEqual(list(md.brokers), [1])
        self.assertEqual(md.brokers[1].port, self.broker.port)
        self.assertIn(name, md.topics)
        self.assertEqual(sorted(md.topics[name].partitions), [0, 1, 2])
        self.assertEqual(md.topics[name].partitions[0].leader, 1)

    def test_delete_topic(self):
        name = unique_name("del")
        self.create_topic(name)
        self.admin().delete_topics([name])[name].result(timeout=10)
        poll_until(lambda: name not in self.admin().list_topics(timeout=10).topics, message="topic gone")

    def test_produce_consume_every_codec_and_acks(self):
        for codec, acks in itertools.product(CODECS, ACKS):
            name = unique_name("cfk-%s" % codec)
            self.create_topic(name)
            records = expected_records(tag=codec)
            offsets = self.produce(name, records, acks, codec)
            if acks != 0:
                self.assertEqual(offsets, list(range(N)), (codec, acks))
            got = self.consume(name, N)
            self.assertEqual(len(got), N, (codec, acks))
            self.assertEqual([g[3] for g in got], list(range(N)))
            self.assertEqual([(k, v, h) for k, v, h, _ in got], records, (codec, acks))

    def test_list_offsets_earliest_latest_and_by_timestamp(self):
        from confluent_kafka import Consumer, TopicPartition

        name = unique_name("offs")
        self.create_topic(name)
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.broker.bootstrap_servers})
        base = 1_700_000_000_000
        for i in range(10):
            p.produce(name, value=b"v%d" % i, timestamp=base + i * 1000)
        self.assertEqual(p.flush(10), 0)
        c = Consumer({"bootstrap.servers": self.broker.bootstrap_servers, "group.id": "g-" + name})
        try:
            low, high = c.get_watermark_offsets(TopicPartition(name, 0), timeout=10)
            self.assertEqual((low, high), (0, 10))
            found = c.offsets_for_times([TopicPartition(name, 0, base + 4500)], timeout=10)
            self.assertEqual(found[0].offset, 5)
            found = c.offsets_for_times([TopicPartition(name, 0, base + 99_000)], timeout=10)
            self.assertEqual(found[0].offset, -1)
        finally:
            c.close()


class KafkaPythonTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    """kafka-python (pure Python client)."""

    def test_produce_consume_every_codec_and_acks(self):
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.broker.bootstrap_servers)
        self.addCleanup(admin.close)
        for codec, acks in itertools.product(CODECS, ACKS):
            name = unique_name("kp-%s" % codec)
            admin.create_topics([NewTopic(name, 1, 1)])
            records = expected_records(tag=codec)
            producer = KafkaProducer(
                bootstrap_servers=self.broker.bootstrap_servers,
                acks="all" if acks == -1 else acks,
                compression_type=None if codec == "none" else codec,
                linger_ms=5,
            )
            futures = [producer.send(name, key=k, value=v, headers=h) for k, v, h in records]
            producer.flush(30)
            metas = [f.get(timeout=30) for f in futures]
            producer.close()
            if acks != 0:
                self.assertEqual([m.offset for m in metas], list(range(N)), (codec, acks))
            consumer = KafkaConsumer(bootstrap_servers=self.broker.bootstrap_servers,
                                     enable_auto_commit=False, fetch_max_wait_ms=100)
            tp = TopicPartition(name, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            got = []
            deadline = time.monotonic() + 30
            while len(got) < N and time.monotonic() < deadline:
                for msgs in consumer.poll(timeout_ms=500).values():
                    got.extend(msgs)
            consumer.close()
            self.assertEqual([m.offset for m in got], list(range(N)), (codec, acks))
            self.assertEqual([(m.key, m.value, list(m.headers)) for m in got], records, (codec, acks))


class AIOKafkaTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    """aiokafka (asyncio client)."""

    def test_produce_consume_every_codec_and_acks(self):
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        bootstrap = self.broker.bootstrap_servers

        async def scenario(codec, acks):
            name = unique_name("aio-%s" % codec)
            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
            await admin.start()
            try:
                await admin.create_topics([NewTopic(name, 1, 1)])
            finally:
                await admin.close()
            records = expected_records(tag=codec)
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all" if acks == -1 else acks,
                                        compression_type=None if codec == "none" else codec, linger_ms=5)
            await producer.start()
            try:
                futs = [await producer.send(name, key=k, value=v, headers=h) for k, v, h in records]
                metas = await asyncio.gather(*futs)
            finally:
                await producer.stop()
            if acks != 0:
                self.assertEqual([m.offset for m in metas], list(range(N)), (codec, acks))
            consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                        fetch_max_wait_ms=100)
            await consumer.start()
            try:
                tp = TopicPartition(name, 0)
                consumer.assign([tp])
                await consumer.seek_to_beginning(tp)
                got = []
                while len(got) < N:
                    batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
                    for msgs in batch.values():
                        got.extend(msgs)
            finally:
                await consumer.stop()
            self.assertEqual([m.offset for m in got], list(range(N)), (codec, acks))
            self.assertEqual([(m.key, m.value, list(m.headers)) for m in got], records, (codec, acks))

        for codec, acks in itertools.product(CODECS, ACKS):
            asyncio.run(scenario(codec, acks))


class KcatTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    """Debian's kcat (librdkafka 2.0.2): the oldest client we promise to serve."""

    def setUp(self):
        if shutil.which("kcat") is None:
            raise unittest.SkipTest("kcat is not installed (apt-get install kcat)")
        super().setUp()

    def kcat(self, *args, input=None, timeout=60):
        proc = subprocess.run(["kcat", "-b", self.broker.bootstrap_servers] + list(args),
                              input=input, capture_output=True, timeout=timeout)
        self.assertEqual(proc.returncode, 0, proc.stderr.decode(errors="replace"))
        return proc.stdout

    def test_metadata(self):
        out = self.kcat("-L").decode()
        self.assertIn("1 brokers:", out)
        self.assertIn("broker 1 at 127.0.0.1:%d" % self.broker.port, out)

    def test_produce_consume_every_codec(self):
        for codec, acks in itertools.product(CODECS, ACKS):
            name = unique_name("kcat-%s" % codec)
            lines = ["k%d:v-%s-%d" % (i % 37, codec, i) for i in range(N)]
            self.kcat("-P", "-t", name, "-K", ":", "-z", codec, "-X", "request.required.acks=%d" % acks,
                      "-H", "h1=x", "-X", "topic.metadata.refresh.interval.ms=100",
                      input=("\n".join(lines) + "\n").encode())
            out = self.kcat("-C", "-t", name, "-o", "beginning", "-e", "-c", str(N),
                            "-f", "%o|%k|%s|%h\n").decode().splitlines()
            self.assertEqual(len(out), N, (codec, acks))
            expected = ["%d|%s|%s|h1=x" % (i, line.split(":", 1)[0], line.split(":", 1)[1])
                        for i, line in enumerate(lines)]
            self.assertEqual(out, expected, (codec, acks))
