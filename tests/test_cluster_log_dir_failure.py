"""A failed log dir in a cluster (issue 26, Kafka's log dir failure notification): broker 1
leads a partition from a log dir on a small tmpfs that an acks=all producer fills. The dir
goes offline, broker 1 tells the controller through ``/log_dir_event_notification``, the
controller moves the leadership and takes broker 1 out of the ISR, and the idempotent producer
carries on against the new leader: every record it was told was delivered is read back, once
and in order. Broker 1 stays up serving its healthy dir, and the metadata of every broker lists
its replica offline until it registers again.

Needs ZooKeeper (skipped without it unless KAFKATW_REQUIRE_ZOOKEEPER=1) and a tmpfs mount
(root), as tests/test_e2e_disk_full.py."""

import os

from twisted.trial import unittest

from tests.support import unique_name


class LogDirFailureClusterTests(unittest.SynchronousTestCase):
    def test_a_failed_dir_moves_leadership_and_loses_nothing(self):
        from confluent_kafka import Consumer, Producer, TopicPartition
        from confluent_kafka.admin import NewTopic

        from kafkatw import testing
        from tests.test_cluster_e2e import admin, require_zookeeper, zk_read
        from tests.test_e2e_disk_full import SmallFilesystem

        require_zookeeper()
        small = SmallFilesystem(1024)
        self.addCleanup(small.close)
        cluster = testing.KafkaCluster(brokers=3, session_timeout_ms=6000)
        healthy = os.path.join(cluster.work_dir, "broker-1", "healthy")
        os.makedirs(healthy)
        # the first dir takes the first partition (the least loaded dir, ties in listed order)
        cluster.broker(1).overrides["log.dirs"] = "%s,%s" % (small.path, healthy)
        cluster.start()
        self.addCleanup(cluster.close)
        bootstrap = cluster.bootstrap_servers
        topic = unique_name("dirfail")
        client = admin(bootstrap)
        client.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2, 3]],
                                       config={"min.insync.replicas": "2"})],
                             operation_timeout=30)[topic].result(60)
        cluster.wait_for(lambda: cluster.metadata(1, [topic])[2][topic][0][4] == [1, 2, 3], 60,
                         "broker 1 leading with the full ISR")
        self.assertTrue(any(name.startswith(topic) for name in os.listdir(small.path)))

        delivered, failed = [], []

        def report(err, msg):
            (failed if err is not None else delivered).append(err or msg.value())

        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 120000})
        value = b"x" * 1000
        count = 3000  # 3 MB: three times the small dir
        for i in range(count):
            producer.produce(topic, value=b"%05d" % i + value, partition=0, on_delivery=report)
            producer.poll(0)
        self.assertEqual(producer.flush(120), 0)
        self.assertEqual(failed, [])
        self.assertEqual(len(delivered), count)

        state = cluster.wait_for(lambda: cluster.metadata(2, [topic])[2][topic][0], 30, "the partition")
        _, leader, _, replicas, isr, offline = state
        self.assertIn(leader, (2, 3))
        self.assertEqual(sorted(isr), [2, 3])
        self.assertEqual(offline, [1])
        for b in (1, 3):  # every broker's metadata says the same
            self.assertEqual(cluster.metadata(b, [topic])[2][topic][0][1:], state[1:])
        self.assertTrue(cluster.broker(1).running)
        self.assertEqual(zk_read(cluster, "/log_dir_event_notification")[1].children_count, 0)

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("g"),
                             "enable.auto.commit": False})
        self.addCleanup(consumer.close)
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = []

        def read_all():
            for msg in consumer.consume(500, 0.5):
                if not msg.error():
                    got.append(msg.value())
            return len(got) >= count
        cluster.wait_for(read_all, 60, "every delivered record")
        self.assertEqual(got, [b"%05d" % i + value for i in range(count)])

        # broker 1 still serves a partition on its healthy dir
        other = unique_name("healthy")
        client.create_topics([NewTopic(other, num_partitions=1, replica_assignment=[[1]])], operation_timeout=30)[other].result(60)
        cluster.wait_for(lambda: cluster.metadata(1, [other])[2][other][0][1] == 1, 30, "broker 1 leading")
        p2 = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        p2.produce(other, value=b"still here", partition=0)
        self.assertEqual(p2.flush(30), 0)
        self.assertTrue(any(name.startswith(other) for name in os.listdir(healthy)))
