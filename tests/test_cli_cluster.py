"""``kafkatw cluster describe`` and ``kafkatw topics describe``'s kafka-topics filters
(--under-replicated-partitions, --unavailable-partitions, --under-min-isr-partitions,
--at-min-isr-partitions) run as a subprocess against three brokers and ZooKeeper, before and
after a broker stops. Skips without ZooKeeper unless KAFKATW_REQUIRE_ZOOKEEPER=1."""

import json
import subprocess
import sys

from twisted.trial import unittest

from tests.support import unique_name
from tests.test_cluster_e2e import RACKS, controller_epoch, create_topic, require_zookeeper, zk_read


def run_cli(bootstrap, *args):
    r = subprocess.run([sys.executable, "-m", "kafkatw.cli", "--bootstrap-server", bootstrap] + list(args),
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


class ClusterCliTests(unittest.SynchronousTestCase):
    def setUp(self):
        from kafkatw import testing

        require_zookeeper()
        self.cluster = testing.KafkaCluster(brokers=3, racks=RACKS, session_timeout_ms=4000).start()
        self.addCleanup(self.cluster.close)

    def cli_json(self, broker_id, *args):
        rc, out, err = run_cli(self.cluster.broker(broker_id).bootstrap_servers, "--output", "json", *args)
        self.assertEqual(rc, 0, "kafkatw %s failed: %s" % (" ".join(args), err))
        return json.loads(out)

    def partitions(self, topic, broker_id=1):
        return self.cluster.metadata(broker_id, [topic])[2][topic]

    def test_describe_and_filters_with_a_broker_stopped(self):
        c = self.cluster
        rf3, rf3_min3, rf1 = unique_name("rf3"), unique_name("min3"), unique_name("rf1")
        create_topic(c.broker(1).bootstrap_servers, rf3, 2, 3, {"min.insync.replicas": "2"})
        create_topic(c.broker(1).bootstrap_servers, rf3_min3, 1, 3, {"min.insync.replicas": "3"})
        create_topic(c.broker(1).bootstrap_servers, rf1, 3, 1)
        topics = [rf3, rf3_min3, rf1]
        c.wait_for(lambda: all(isinstance(c.metadata(1, [t])[2].get(t), dict) for t in topics), 30, "the topics")

        doc = self.cli_json(2, "cluster", "describe", "--zookeeper", c.zookeeper_connect)
        controller = c.controller_id()
        self.assertEqual(doc["controller"], controller)
        self.assertEqual(doc["controllerEpoch"], controller_epoch(c))
        self.assertEqual([(b["id"], b["port"], b["rack"], b["controller"]) for b in doc["brokers"]],
                         [(i, c.broker(i).port, RACKS[i - 1], i == controller) for i in (1, 2, 3)])
        for b in doc["brokers"]:
            self.assertEqual(b["brokerEpoch"], zk_read(c, "/brokers/ids/%d" % b["id"])[1].czxid)
        self.assertTrue(doc["clusterId"])
        rc, out, err = run_cli(c.broker(1).bootstrap_servers, "cluster", "describe")
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.splitlines()[0], "ClusterId: %s\tController: %d" % (doc["clusterId"], controller))
        self.assertEqual(len(out.splitlines()), 5)

        flags = ("--under-replicated-partitions", "--unavailable-partitions", "--under-min-isr-partitions",
                 "--at-min-isr-partitions")
        filtered = {f: self.cli_json(1, "topics", "describe", *sum((["--topic", t] for t in topics), []), f)
                    for f in flags}
        at_min = sorted((e["topic"], e["partition"]) for e in filtered.pop("--at-min-isr-partitions"))
        self.assertEqual(filtered, {f: [] for f in flags[:3]})
        self.assertEqual(at_min, sorted([(rf3_min3, 0)] + [(rf1, p) for p in range(3)]))  # ISR 3 == 3, 1 == 1

        c.broker(3).stop()
        c.wait_for_brokers([1, 2])
        c.wait_for(lambda: all(3 not in p[4] for p in self.partitions(rf3).values())
                   and 3 not in self.partitions(rf3_min3)[0][4], 30, "broker 3 to leave the ISRs")
        rf1_on_3 = [p for p, state in self.partitions(rf1).items() if state[3] == [3]]
        self.assertEqual(len(rf1_on_3), 1)  # rack-aware: one partition per broker

        def listed(flag):
            return sorted((e["topic"], e["partition"]) for e in self.cli_json(
                1, "topics", "describe", *sum((["--topic", t] for t in topics), []), flag))
        self.assertEqual(listed("--under-replicated-partitions"),
                         sorted([(rf3, 0), (rf3, 1), (rf3_min3, 0)]))
        self.assertEqual(listed("--unavailable-partitions"), [(rf1, rf1_on_3[0])])
        self.assertEqual(listed("--under-min-isr-partitions"), sorted([(rf3_min3, 0), (rf1, rf1_on_3[0])]))
        # every rf1 partition has ISR 1 == min.insync.replicas 1, the offline one too (its last ISR
        # member stays): kafka-topics counts them all
        self.assertEqual(listed("--at-min-isr-partitions"),
                         sorted([(rf3, 0), (rf3, 1)] + [(rf1, p) for p in range(3)]))
        rc, out, err = run_cli(c.broker(2).bootstrap_servers, "topics", "describe", "--topic", rf1,
                               "--unavailable-partitions")
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.split(), ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "OFFLINE",
                                       rf1, str(rf1_on_3[0]), "none", "3", "3", "3"])
        doc = self.cli_json(2, "cluster", "describe")
        self.assertEqual([b["id"] for b in doc["brokers"]], [1, 2])


class PartitionReportsTests(unittest.SynchronousTestCase):
    """kafka-topics' rules for each filter, partition by partition."""

    def partition(self, leader, replicas, isr):
        from kafkatw.protocol import messages

        return messages.MetadataResponse.MetadataResponsePartition(
            partition_index=0, leader_id=leader, replica_nodes=replicas, isr_nodes=isr)

    def test_rules(self):
        from kafkatw.cli.topics import partition_reports

        live = {1, 2}
        self.assertEqual(partition_reports(self.partition(1, [1, 2, 3], [1, 2, 3]), live, 2), set())
        self.assertEqual(partition_reports(self.partition(1, [1, 2, 3], [1, 2]), live, 2),
                         {"under_replicated_partitions", "at_min_isr_partitions"})
        self.assertEqual(partition_reports(self.partition(1, [1, 2, 3], [1]), live, 2),
                         {"under_replicated_partitions", "under_min_isr_partitions"})
        self.assertEqual(partition_reports(self.partition(-1, [3], [3]), live, 1),
                         {"unavailable_partitions", "under_min_isr_partitions", "at_min_isr_partitions"})
        self.assertEqual(partition_reports(self.partition(3, [3, 1], [3, 1]), live, 1),
                         {"unavailable_partitions"})  # a leader the cluster no longer lists
