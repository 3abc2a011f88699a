"""Rack-aware reads (KIP-392): Kafka's RackAwareReplicaSelector rules on crafted replicas, the
leader's preferred read replica, ``replica.selector.class`` through the registry (Kafka's class
name, a dotted Python name, a bad one in one line), and with three brokers and ZooKeeper a
confluent-kafka consumer with ``client.rack`` reading from the follower in its rack: the
leader's request log shows no fetch of that consumer after the redirect. The cluster part
skips without ZooKeeper unless KAFKATW_REQUIRE_ZOOKEEPER=1."""

import json
import os
import time

import attr
from twisted.trial import unittest
from zope.interface import implementer

from kafkatw.cluster.state import BrokerInfo
from kafkatw.config import ConfigError
from kafkatw.server import replica_selector as rs
from kafkatw.server.interfaces import IReplicaSelector
from tests.support import unique_name

KAFKA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


@implementer(IReplicaSelector)
class LastReplicaSelector:
    """A Python plug-in for the registry test: the highest broker id."""

    def select(self, topic_partition, client_metadata, partition_view):
        return max(partition_view.replicas, key=lambda r: r.broker_id)


class RackAwareSelectorTests(unittest.SynchronousTestCase):
    def view(self, leader_rack="r1"):
        leader = rs.ReplicaView(1, leader_rack, 100, 0)
        replicas = [leader, rs.ReplicaView(2, "r2", 90, 50), rs.ReplicaView(3, "r2", 95, 80),
                    rs.ReplicaView(4, "r3", 100, 0)]
        return rs.PartitionView(replicas, leader)

    def test_rules(self):
        sel = rs.RackAwareReplicaSelector()
        tp = ("t", 0)
        self.assertEqual(sel.select(tp, rs.ClientMetadata(rack_id="r2"), self.view()).broker_id, 3)  # furthest
        self.assertEqual(sel.select(tp, rs.ClientMetadata(rack_id="r3"), self.view()).broker_id, 4)
        self.assertEqual(sel.select(tp, rs.ClientMetadata(rack_id="r9"), self.view()).broker_id, 1)
        self.assertEqual(sel.select(tp, rs.ClientMetadata(rack_id=""), self.view()).broker_id, 1)
        self.assertEqual(sel.select(tp, rs.ClientMetadata(rack_id="r2"), self.view("r2")).broker_id, 1)
        tie = rs.PartitionView([rs.ReplicaView(1, "r1", 9), rs.ReplicaView(2, "r2", 9, 70),
                                rs.ReplicaView(3, "r2", 9, 20)], rs.ReplicaView(1, "r1", 9))
        self.assertEqual(sel.select(tp, rs.ClientMetadata(rack_id="r2"), tie).broker_id, 3)  # caught up last

    def test_leader_picks_among_live_caught_up_followers(self):
        @attr.s
        class Replica:
            log_end_offset = attr.ib()
            log_start_offset = attr.ib(default=0)
            last_caught_up_time_ms = attr.ib(default=1000)

        @attr.s
        class Log:
            high_watermark = attr.ib(default=50)
            log_end_offset = attr.ib(default=60)

        @attr.s
        class Partition:
            remote_replicas = attr.ib()
            topic = attr.ib(default="t")
            partition = attr.ib(default=0)
            local_broker_id = attr.ib(default=1)
            log = attr.ib(factory=Log)

        class Metadata:
            racks = {1: "r1", 2: "r2", 3: "r2"}
            live = {1, 2, 3}

            def live_broker(self, node_id):
                return BrokerInfo(node_id=node_id, rack=self.racks[node_id]) if node_id in self.live else None

        md = Metadata()
        client = rs.ClientMetadata(rack_id="r2")
        sel = rs.RackAwareReplicaSelector()
        part = Partition({2: Replica(55), 3: Replica(49)})  # 3 is behind the HW: not a candidate
        self.assertEqual(rs.preferred_read_replica(sel, md, part, client, 10, 2000), 2)
        self.assertEqual(rs.preferred_read_replica(None, md, part, client, 10, 2000), -1)
        self.assertEqual(rs.preferred_read_replica(sel, md, part, None, 10, 2000), -1)
        self.assertEqual(rs.preferred_read_replica(sel, md, part, rs.ClientMetadata(rack_id="r1"), 10, 2000), -1)
        md.live = {1, 3}
        self.assertEqual(rs.preferred_read_replica(sel, md, part, client, 10, 2000), -1)  # 2 is gone
        md.live = {1, 2, 3}
        part = Partition({2: Replica(55, log_start_offset=20)})  # its log starts after the fetch offset
        self.assertEqual(rs.preferred_read_replica(sel, md, part, client, 10, 2000), -1)

    def test_loading_through_the_registry(self):
        load = rs.load_replica_selector
        self.assertIsNone(load({}))
        self.assertIsInstance(load({"replica.selector.class": KAFKA_SELECTOR}), rs.RackAwareReplicaSelector)
        self.assertIsInstance(load({"replica.selector.class": "rack-aware"}), rs.RackAwareReplicaSelector)
        self.assertIsInstance(load({"replica.selector.class": "org.apache.kafka.common.replica.LeaderSelector"}),
                              rs.LeaderSelector)
        self.assertIsInstance(load({"replica.selector.class": __name__ + ".LastReplicaSelector"}),
                              LastReplicaSelector)
        with self.assertRaises(ConfigError) as e:
            load({"replica.selector.class": "no.such.Selector"})
        self.assertIn("replica.selector.class", str(e.exception))
        self.assertEqual(len(str(e.exception).splitlines()), 1)


def fetches_by(log_path, client_id):
    """How many FETCH requests of ``client_id`` a broker's request log holds (whole lines)."""
    count = 0
    if not os.path.exists(log_path):
        return 0
    with open(log_path, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break  # being written
            _, sep, payload = line.partition("Completed request:")
            if not sep:
                continue
            header = json.loads(payload)["requestHeader"]
            if header["requestApiKey"] == 1 and header["clientId"] == client_id:
                count += 1
    return count


class RackReadsClusterTests(unittest.SynchronousTestCase):
    def test_consumer_reads_from_the_follower_in_its_rack(self):
        from confluent_kafka import Consumer, Producer, TopicPartition

        from kafkatw import testing
        from tests.test_cluster_e2e import create_topic, require_zookeeper

        require_zookeeper()
        racks = ["r1", "r2", "r3"]
        logs = {}
        per_broker = {}
        cluster = testing.KafkaCluster(brokers=3, racks=racks, session_timeout_ms=4000,
                                       overrides={"replica.selector.class": KAFKA_SELECTOR})
        for i in (1, 2, 3):
            logs[i] = os.path.join(cluster.work_dir, "requests-%d.log" % i)
            per_broker[i] = {"kafkatw.request.log.enable": "true", "kafkatw.request.log.file": logs[i]}
            cluster.broker(i).overrides.update(per_broker[i])
        cluster.start()
        self.addCleanup(cluster.close)
        topic = unique_name("racks")
        create_topic(cluster.broker(1).bootstrap_servers, topic, 1, 3)
        state = cluster.wait_for(lambda: [s for s in [cluster.metadata(1, [topic])[2].get(topic, {}).get(0)]
                                          if s and s[0] == 0 and s[1] >= 0], 30, "the topic's leader")[0]
        leader, replicas = state[1], state[3]
        follower = [r for r in replicas if r != leader][0]
        rack = racks[follower - 1]
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
        for i in range(200):
            producer.produce(topic, value=b"%d" % i, partition=0)
        self.assertEqual(producer.flush(30), 0)
        # The leader only redirects to a follower holding everything up to its HW, that is one in
        # the ISR as the leader knows it: on a slow machine the ISR may still be catching up here.
        cluster.wait_for(lambda: sorted(cluster.metadata(leader, [topic])[2][topic][0][4]) == sorted(replicas),
                         30, "the full ISR at the leader")
        client_id = unique_name("rack-reader")
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": unique_name("g"),
                             "client.id": client_id, "client.rack": rack, "enable.auto.commit": False})
        self.addCleanup(consumer.close)
        consumer.assign([TopicPartition(topic, 0, 0)])

        def consume(n):
            got = []
            deadline = time.monotonic() + 30
            while len(got) < n and time.monotonic() < deadline:
                for m in consumer.consume(100, 0.2):
                    if not m.error():
                        got.append(m.value())
            return got

        def logged_fetches(broker, more_than):
            # a request's line is written once its response has gone out: the consumer may have
            # the records before the broker wrote it, so the log is read until it has the line
            return cluster.wait_for(lambda: fetches_by(logs[broker], client_id) > more_than, 10,
                                    "a FETCH of %s in broker %d's request log" % (client_id, broker))
        self.assertEqual(consume(200), [b"%d" % i for i in range(200)])
        logged_fetches(leader, 0)  # the first fetch is the leader's
        # The leader names the follower once it knows that follower holds everything up to the
        # HW; if its first answer carried the records instead, the consumer's next fetch (at the
        # log end, waiting there) is the one redirected. Keep it fetching until it reads there.
        deadline = time.monotonic() + 30
        while fetches_by(logs[follower], client_id) < 1 and time.monotonic() < deadline:
            self.assertEqual(consumer.consume(100, 0.2), [])
        at_follower = fetches_by(logs[follower], client_id)
        self.assertGreaterEqual(at_follower, 1)
        at_leader = fetches_by(logs[leader], client_id)
        for i in range(200, 300):
            producer.produce(topic, value=b"%d" % i, partition=0)
        self.assertEqual(producer.flush(30), 0)
        self.assertEqual(consume(100), [b"%d" % i for i in range(200, 300)])
        logged_fetches(follower, at_follower)
        self.assertEqual(fetches_by(logs[leader], client_id), at_leader)  # none since the redirect
        other = [r for r in replicas if r not in (leader, follower)][0]
        self.assertEqual(fetches_by(logs[other], client_id), 0)
