"""AlterReplicaLogDirs on a real single broker with two log dirs: a partition holding committed
and aborted transactions and plain records moves to the other dir while an idempotent producer
writes; read_committed consumers then see exactly the committed records (the aborted-transaction
index was rebuilt in the copy), DescribeLogDirs reports the new dir, and a restart loads it
from there."""

import os

from twisted.trial import unittest

from kafkatw.protocol import errors
from kafkatw.protocol import messages as m
from kafkatw.testing import KafkaBroker
from tests.support import RawClient, create_topic, poll_until, unique_name

ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS = 34, 35


def read_committed(bootstrap, topic, expected_count, timeout=60.0):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("g"), "log_level": 2,
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values = []
        poll_until(lambda: values.extend(m_.value() for m_ in consumer.consume(500, 0.2) if not m_.error())
                   or len(values) >= expected_count, timeout, message="%d records" % expected_count)
        values.extend(m_.value() for m_ in consumer.consume(500, 0.5) if not m_.error())
        return values
    finally:
        consumer.close()


class AlterReplicaLogDirsTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.broker = KafkaBroker()
        self.dirs = [self.broker.data_dir, self.broker.data_dir + "-2"]
        self.broker.overrides["log.dirs"] = ",".join(self.dirs)
        self.broker.start()
        self.addCleanup(self.broker.close)

    def where(self, topic):
        """``[(log dir, is future)]`` of the topic's partition 0 (DescribeLogDirs)."""
        c = RawClient(self.broker)
        try:
            resp = c.request(DESCRIBE_LOG_DIRS, 4, m.DescribeLogDirsRequest(topics=[
                m.DescribeLogDirsRequest.DescribableLogDirTopic(topic=topic, partitions=[0])]))
        finally:
            c.close()
        return [(r.log_dir, p.is_future_key) for r in resp.results for t in r.topics for p in t.partitions]

    def alter(self, path, topic):
        R = m.AlterReplicaLogDirsRequest
        c = RawClient(self.broker)
        try:
            resp = c.request(ALTER_REPLICA_LOG_DIRS, 2, R(dirs=[R.AlterReplicaLogDir(path=path, topics=[
                R.AlterReplicaLogDirTopic(name=topic, partitions=[0])])]))
        finally:
            c.close()
        return [(t.topic_name, p.partition_index, p.error_code) for t in resp.results for p in t.partitions]

    def test_transactions_and_records_survive_a_move_and_a_restart(self):
        from confluent_kafka import Producer

        topic = unique_name("move-dir")
        create_topic(self.broker, topic, 1)
        bootstrap = self.broker.bootstrap_servers
        txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name("t"), "log_level": 2})
        txn.init_transactions(30)
        expected = []
        for i, commit in enumerate((True, False, True, False, True)):
            txn.begin_transaction()
            values = [b"txn-%d-%d" % (i, j) for j in range(100)]
            for v in values:
                txn.produce(topic, value=v, partition=0)
            self.assertEqual(txn.flush(30), 0)  # in the log before the marker (an abort purges the unsent)
            if commit:
                txn.commit_transaction(30)
                expected += values
            else:
                txn.abort_transaction(30)
        plain = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                          "log_level": 2, "linger.ms": 5})
        filler = os.urandom(8192)
        for i in range(400):  # ~3 MiB: several copy steps
            plain.produce(topic, value=b"plain-%d-" % i + filler, partition=0)
            expected.append(b"plain-%d-" % i + filler)
            if i % 100 == 0:
                plain.poll(0)
        self.assertEqual(plain.flush(30), 0)
        ((source, future),) = self.where(topic)
        self.assertFalse(future)
        (target,) = [d for d in self.dirs if d != source]
        self.assertEqual(self.alter(os.path.join(target, "elsewhere"), topic), [(topic, 0, errors.LOG_DIR_NOT_FOUND)])
        self.assertEqual(self.alter(target, topic), [(topic, 0, errors.NONE)])
        # records keep arriving while it moves
        for i in range(100):
            plain.produce(topic, value=b"during-%d" % i, partition=0)
            expected.append(b"during-%d" % i)
        self.assertEqual(plain.flush(30), 0)
        poll_until(lambda: self.where(topic) == [(target, False)], 60, message="the replica in %s only" % target)
        self.assertFalse(os.path.exists(os.path.join(source, "%s-0" % topic)))
        # a transaction after the move: the producer state followed the log
        txn.begin_transaction()
        txn.produce(topic, value=b"after", partition=0)
        txn.commit_transaction(30)
        expected.append(b"after")
        self.assertEqual(read_committed(bootstrap, topic, len(expected)), expected)
        self.broker.stop()
        self.broker.start()
        self.assertEqual(self.where(topic), [(target, False)])
        self.assertEqual(read_committed(self.broker.bootstrap_servers, topic, len(expected)), expected)
