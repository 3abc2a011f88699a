"""A broker under a low ``ulimit -n`` (issue 21, scaled down for the suite; the 50,000
partition runs are ``make bench-scale``): 600 partitions written and read back by
confluent-kafka with 128 descriptors, across a clean restart and a kill -9; and running out
of descriptors fails a CreateTopics while the log dir stays online and produce goes on; a
broker with a failed log dir starts and serves the healthy one."""

import os
import shutil
import socket
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from twisted.trial import unittest

from kafkatw.protocol import errors
from kafkatw.protocol import messages as m
from kafkatw.testing import KafkaBroker

from .support import RawClient, api_versions_body, poll_until, produce, produce_body, read_all

LIMIT = 128
TOPICS = 2
PARTITIONS = 300


def consume_all(broker, topics, partitions, timeout=60):
    """{(topic, partition): [values]} read from offset 0 by a confluent-kafka consumer."""
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "scale",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(t, p, 0) for t in topics for p in range(partitions)])
        got = {}
        count = 0
        deadline = time.monotonic() + timeout
        while count < len(topics) * partitions and time.monotonic() < deadline:
            for msg in c.consume(1000, 0.5):
                if msg.error():
                    raise AssertionError(msg.error())
                got.setdefault((msg.topic(), msg.partition()), []).append(msg.value())
                count += 1
        return got
    finally:
        c.close()


def create_and_produce(broker, topics):
    """Create ``topics`` and write one record to each partition (clients gone after)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics],
                                 operation_timeout=30).values():
        f.result()
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
    for t in topics:
        for p in range(PARTITIONS):
            producer.produce(t, b"%s/%d" % (t.encode(), p), partition=p)
    assert producer.flush(60) == 0


class ManyPartitionsLowLimitTest(unittest.TestCase):
    def test_six_hundred_partitions_with_128_descriptors(self):
        broker = KafkaBroker(open_file_limit=LIMIT).start()
        self.addCleanup(broker.close)
        topics = ["scale-%d" % i for i in range(TOPICS)]
        create_and_produce(broker, topics)
        expected = {(t, p): [b"%s/%d" % (t.encode(), p)] for t in topics for p in range(PARTITIONS)}
        self.assertEqual(consume_all(broker, topics, PARTITIONS), expected)
        self.assertLess(broker.open_descriptors(), LIMIT)
        broker.restart()  # clean: each log is opened on first use, from the dir's summary
        broker.restart()  # clean again: logs never opened are summarised again
        with open(broker.log_path) as f:
            deferred = [line for line in f if "after a clean shutdown" in line]
        self.assertEqual(len(deferred), 2)
        self.assertTrue(all("(%d to be opened on first use)" % (TOPICS * PARTITIONS) in line
                            for line in deferred), deferred)
        self.assertEqual(consume_all(broker, topics, PARTITIONS), expected)
        self.assertLess(broker.open_descriptors(), LIMIT)
        broker.kill()
        broker.start()  # recovery after kill -9
        self.assertEqual(consume_all(broker, topics, PARTITIONS), expected)
        self.assertLess(broker.open_descriptors(), LIMIT)
        with open(broker.log_path) as f:
            self.assertIn("open file limit %d" % LIMIT, f.read())


class OutOfDescriptorsTest(unittest.TestCase):
    def create(self, client, name):
        body = m.CreateTopicsRequest(topics=[m.CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=3, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=10000, validate_only=False)
        return client.request(19, 5, body).topics[0]

    def log_dir_errors(self, client):
        resp = client.request(35, 1, m.DescribeLogDirsRequest(topics=None))
        return [(d.error_code, len(d.topics)) for d in resp.results]

    def test_create_topic_fails_and_the_dir_stays_online(self):
        broker = KafkaBroker(open_file_limit=LIMIT, topics=[("t", 1)]).start()
        self.addCleanup(broker.close)
        client = RawClient(broker, timeout=30)
        self.addCleanup(client.close)
        client.request(18, 3, api_versions_body())
        self.assertEqual(produce(client, "t", 0, [b"before"]), 0)
        # Connections the broker accepts until it has no descriptor left.
        sockets = []
        self.addCleanup(lambda: [s.close() for s in sockets])
        for _ in range(LIMIT):
            sockets.append(socket.create_connection((broker.host, broker.port)))
        poll_until(lambda: broker.open_descriptors() >= LIMIT, timeout=20)

        created = self.create(client, "one-more")
        self.assertNotEqual(created.error_code, errors.NONE)
        self.assertIn("Too many open files", created.error_message)
        self.assertEqual(produce(client, "t", 0, [b"during"]), 1)
        self.assertEqual(self.log_dir_errors(client), [(errors.NONE, 1)])

        for s in sockets:
            s.close()
        del sockets[:]
        poll_until(lambda: broker.open_descriptors() < LIMIT // 2, timeout=20)
        self.assertEqual(self.create(client, "one-more").error_code, errors.NONE)
        self.assertEqual(produce(client, "one-more", 2, [b"after"]), 0)
        self.assertEqual(self.log_dir_errors(client), [(errors.NONE, 2)])


class OfflineDirAtStartTest(unittest.TestCase):
    def test_a_broker_with_a_failed_dir_serves_the_healthy_one(self):
        base = os.path.abspath(self.mktemp())
        good, bad = os.path.join(base, "good"), os.path.join(base, "bad")
        broker = KafkaBroker(overrides={"log.dirs": good + "," + bad}, topics=[("t", 4)])
        self.addCleanup(broker.close)
        broker.start()
        client = RawClient(broker)
        for p in range(4):
            self.assertEqual(produce(client, "t", p, [b"p%d" % p]), 0)
        client.close()
        broker.stop()
        on_good = sorted(int(n.rsplit("-", 1)[1]) for n in os.listdir(good) if n.startswith("t-"))
        on_bad = sorted(int(n.rsplit("-", 1)[1]) for n in os.listdir(bad) if n.startswith("t-"))
        self.assertEqual((len(on_good), len(on_bad)), (2, 2))
        shutil.rmtree(bad)
        with open(bad, "w") as f:
            f.write("a disk that failed")  # mkdir fails there: EEXIST
        broker.start()
        client = RawClient(broker)
        self.addCleanup(client.close)
        for p in on_good:
            self.assertEqual(read_all(broker, "t", p), [(0, None, b"p%d" % p)])
            self.assertEqual(produce(client, "t", p, [b"again"]), 1)
        for p in on_bad:  # not created afresh, empty, in the healthy dir
            resp = client.request(0, 9, produce_body("t", p, [b"lost?"]))
            self.assertEqual(resp.responses[0].partition_responses[0].error_code,
                             errors.KAFKA_STORAGE_ERROR)
        self.assertEqual(sorted(n for n in os.listdir(good) if n.startswith("t-")),
                         ["t-%d" % p for p in on_good])


class CreateTopicsAnsweredBeforeItsFilesTest(unittest.TestCase):
    def test_a_kill_right_after_the_answer_keeps_the_topic(self):
        """CreateTopics answers once the topic is durable in the metadata; its partitions'
        files are made in the thread pool after (or when first used). A kill -9 right after
        the answer finds the topic with its id and configs, and every partition works."""
        broker = KafkaBroker().start()
        self.addCleanup(broker.close)
        client = RawClient(broker, timeout=30)
        n = 500
        body = m.CreateTopicsRequest(topics=[m.CreateTopicsRequest.CreatableTopic(
            name="big", num_partitions=n, replication_factor=1, assignments=[],
            configs=[m.CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(
                name="retention.ms", value="123456789")])], timeout_ms=30000, validate_only=False)
        created = client.request(19, 7, body).topics[0]
        self.assertEqual(created.error_code, errors.NONE)
        # used at once: made here (or taken from the thread) before its batch is attached
        self.assertEqual(produce(client, "big", n - 1, [b"at once"]), 0)
        client.close()
        broker.kill()
        with open(broker.log_path) as f:
            said = [x for x in f if "created topic big " in x or " log(s) for big" in x]
        # answered before the logs were attached (their line, if the kill let it come, after)
        self.assertIn("created topic big ", said[0])
        broker.start()
        client = RawClient(broker, timeout=30)
        self.addCleanup(client.close)
        md = client.request(3, 12, m.MetadataRequest(
            topics=[m.MetadataRequest.MetadataRequestTopic(name="big")],
            allow_auto_topic_creation=False)).topics[0]
        self.assertEqual((md.error_code, md.topic_id, len(md.partitions)),
                         (errors.NONE, created.topic_id, n))
        R = m.DescribeConfigsRequest
        configs = client.request(32, 4, R(resources=[R.DescribeConfigsResource(
            resource_type=2, resource_name="big", configuration_keys=["retention.ms"])],
            include_synonyms=False, include_documentation=False)).results[0].configs
        self.assertEqual([(c.name, c.value) for c in configs], [("retention.ms", "123456789")])
        self.assertEqual(read_all(broker, "big", n - 1), [(0, None, b"at once")])
        for p in (0, n // 2, n - 2):
            self.assertEqual(produce(client, "big", p, [b"after"]), 0)
        poll_until(lambda: sum(1 for name in os.listdir(broker.data_dir)
                               if name.startswith("big-")) == n, timeout=60,
                   message="a directory for each partition")
