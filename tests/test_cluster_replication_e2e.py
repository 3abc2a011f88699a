"""Issue 19's checks on three brokers and ZooKeeper with confluent-kafka: RF 3, min ISR 2,
acks=all with idempotence while the partition leader is SIGKILLed and restarted ten times
(every acknowledged record consumed once, in order, every replica's batches byte-identical); a
SIGSTOPped follower leaves the ISR and rejoins after SIGCONT while producing goes on; with two of
three replicas down acks=all is refused with NOT_ENOUGH_REPLICAS, acks=1 succeeds and consumers
read up to the high watermark. Skips without ZooKeeper unless KAFKATW_REQUIRE_ZOOKEEPER=1."""

import glob
import os
import threading
import time

from twisted.trial import unittest

from kafkatw import testing
from kafkatw.protocol import records
from tests.support import unique_name
from tests.test_cluster_e2e import create_topic, known_partitions, require_zookeeper

LEADER_KILLS = int(os.environ.get("KAFKATW_CLUSTER_LEADER_KILLS", "10"))


def replica_batches(broker, topic, partition):
    """``[(base offset, batch bytes)]`` of every batch in a replica's segment files."""
    out = []
    for path in sorted(glob.glob(os.path.join(broker.data_dir, "%s-%d" % (topic, partition), "*.log"))):
        with open(path, "rb") as f:
            data = f.read()
        for pos, header in records.iter_batch_headers(data):
            out.append((header.base_offset, data[pos:pos + header.size_in_bytes]))
    return out


def consume_all(bootstrap, topic, partition, expected, timeout=60):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("g"),
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    got = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None or m.error():
                continue
            got.append((m.offset(), m.value()))
    finally:
        consumer.close()
    return got


class ReplicationTests(unittest.SynchronousTestCase):
    #: how long a killed broker stays registered; the pause test outlives replica.lag.time.max.ms
    #: with it, so the leader's lag check (not the controller) shrinks the ISR
    session_timeout_ms = {"test_paused_follower_leaves_and_rejoins_the_isr": 10000}

    def setUp(self):
        require_zookeeper()
        self.cluster = testing.KafkaCluster(
            brokers=3, racks=["rack-a", "rack-b", "rack-c"],
            session_timeout_ms=self.session_timeout_ms.get(self._testMethodName, 6000),
            overrides={"min.insync.replicas": 2, "replica.lag.time.max.ms": 2000,
                       "default.replication.factor": 3},
            keep_data=os.environ.get("KAFKATW_KEEP_CLUSTER") == "1").start()
        self.addCleanup(self.cluster.close)

    def leader(self, topic, via=None):
        running = [b for b in (1, 2, 3) if self.cluster.broker(b).running]
        state = known_partitions(self.cluster, via or running[0], topic)
        return state[0][1], state[0][4]

    def test_acks_all_through_leader_kills_loses_and_duplicates_nothing(self):
        from confluent_kafka import Producer

        cluster, topic = self.cluster, unique_name("kills")
        create_topic(cluster.broker(1).bootstrap_servers, topic, 1, 3)
        cluster.wait_for(lambda: all(known_partitions(cluster, b, topic) for b in (1, 2, 3)), 30, "the topic")
        acked, failed, stop = [], [], threading.Event()
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 120000,
                             "error_cb": lambda err: failed.append(err) if err.fatal() else None})

        def delivered(err, msg):
            (acked if err is None else failed).append((msg.offset(), msg.value()) if err is None else err)

        def produce():
            i = 0
            while not stop.is_set():
                try:
                    producer.produce(topic, value=b"%d" % i, partition=0, on_delivery=delivered)
                    i += 1
                except BufferError:
                    pass
                producer.poll(0.002)
            producer.flush(120)
        thread = threading.Thread(target=produce)
        thread.start()
        try:
            for _ in range(LEADER_KILLS):
                before = len(acked)
                cluster.wait_for(lambda: len(acked) > before + 100 or failed, 60,
                                 "records acknowledged (%d so far; partition %s)"
                                 % (before, known_partitions(cluster, self.leader(topic)[0], topic)))
                self.assertEqual(failed, [])
                leader, _ = self.leader(topic)
                cluster.broker(leader).kill()
                cluster.broker(leader).start()
                cluster.wait_for_brokers([1, 2, 3])
        finally:
            stop.set()
            thread.join(180)
        self.assertEqual(failed, [])
        # all replicas back in the ISR: every log ends at the same offset
        cluster.wait_for(lambda: sorted(self.leader(topic)[1]) == [1, 2, 3], 60, "all replicas in the ISR")
        got = consume_all(cluster.bootstrap_servers, topic, 0, len(acked))
        self.assertEqual(len(got), len(acked))
        self.assertEqual(sorted(acked), got)  # each acknowledged record once, at its offset
        self.assertEqual([int(v) for _, v in got], sorted(int(v) for _, v in got))  # in send order

        def identical():
            logs = [replica_batches(cluster.broker(b), topic, 0) for b in (1, 2, 3)]
            return logs[0] == logs[1] == logs[2] and logs[0]
        batches = cluster.wait_for(identical, 30, "identical replicas")
        self.assertEqual(sum(records.read_batch_header(b).records_count for _, b in batches), len(acked))

    def test_paused_follower_leaves_and_rejoins_the_isr(self):
        from confluent_kafka import Producer

        cluster, topic = self.cluster, unique_name("lag")
        create_topic(cluster.broker(1).bootstrap_servers, topic, 1, 3)
        cluster.wait_for(lambda: all(known_partitions(cluster, b, topic) for b in (1, 2, 3)), 30, "the topic")
        leader, isr = self.leader(topic)
        follower = [b for b in isr if b != leader][0]
        producer = Producer({"bootstrap.servers": cluster.broker(leader).bootstrap_servers, "acks": "all"})
        acked = []
        cluster.broker(follower).pause()
        try:
            cluster.wait_for(lambda: follower not in self.leader(topic, leader)[1], 30, "the ISR to shrink")
            for i in range(100):
                producer.produce(topic, value=b"%d" % i, partition=0,
                                 on_delivery=lambda err, msg: acked.append(err))
            self.assertEqual(producer.flush(30), 0)
            self.assertEqual(acked, [None] * 100)  # two of three in the ISR: min.insync.replicas holds
        finally:
            cluster.broker(follower).resume()
        cluster.wait_for(lambda: follower in self.leader(topic, leader)[1], 30, "the follower to rejoin")

    def test_two_replicas_down(self):
        from confluent_kafka import KafkaError, Producer

        cluster, topic = self.cluster, unique_name("down")
        create_topic(cluster.broker(1).bootstrap_servers, topic, 1, 3)
        cluster.wait_for(lambda: all(known_partitions(cluster, b, topic) for b in (1, 2, 3)), 30, "the topic")
        leader, isr = self.leader(topic)
        warm = Producer({"bootstrap.servers": cluster.broker(leader).bootstrap_servers, "acks": "all"})
        for i in range(10):
            warm.produce(topic, value=b"before-%d" % i, partition=0)
        self.assertEqual(warm.flush(30), 0)
        for b in isr:
            if b != leader:
                cluster.broker(b).kill()
        cluster.wait_for(lambda: self.leader(topic, leader)[1] == [leader], 60, "the ISR to shrink to the leader")
        outcome = []
        strict = Producer({"bootstrap.servers": cluster.broker(leader).bootstrap_servers, "acks": "all",
                           "retries": 0, "message.timeout.ms": 10000})
        strict.produce(topic, value=b"refused", partition=0, on_delivery=lambda err, msg: outcome.append(err))
        strict.flush(30)
        self.assertEqual([e.code() for e in outcome], [KafkaError.NOT_ENOUGH_REPLICAS])
        one = Producer({"bootstrap.servers": cluster.broker(leader).bootstrap_servers, "acks": 1})
        done = []
        for i in range(5):
            one.produce(topic, value=b"acks1-%d" % i, partition=0, on_delivery=lambda err, msg: done.append(err))
        self.assertEqual(one.flush(30), 0)
        self.assertEqual(done, [None] * 5)
        # the HW stays where the ISR of two left it: consumers read the acks=all records only
        got = consume_all(cluster.broker(leader).bootstrap_servers, topic, 0, 15, timeout=8)
        self.assertEqual([v for _, v in got], [b"before-%d" % i for i in range(10)])
