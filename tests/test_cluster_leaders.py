"""Preferred leaders on three brokers and ZooKeeper: ElectLeaders (preferred and unclean) through
confluent-kafka's AdminClient, the wire and ``kafkatw leaders elect``; the controller's auto
leader rebalance after a broker returns; deleting a topic while a replica's broker is down,
completed when it returns. Skips without ZooKeeper unless KAFKATW_REQUIRE_ZOOKEEPER=1."""

import json
import os
import subprocess
import sys

from twisted.trial import unittest

from kafkatw.protocol import messages as m
from tests.support import RawClient, unique_name
from tests.test_cluster_e2e import admin, create_topic, shared_cluster, zk_read_children

ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE = 84, 80, 83
UNKNOWN_TOPIC_OR_PARTITION, NOT_CONTROLLER, TOPIC_ALREADY_EXISTS = 3, 41, 36


def run_cli(bootstrap, *args):
    r = subprocess.run([sys.executable, "-m", "kafkatw.cli", "--bootstrap-server", bootstrap] + list(args),
                       capture_output=True, text=True, timeout=90)
    return r.returncode, r.stdout, r.stderr


class _Leaders:
    def partitions(self, topic, broker_id):
        """{partition: (leader, replicas, sorted ISR)} in ``broker_id``'s metadata (raises while
        it answers an error for the topic)."""
        found = self.cluster.metadata(broker_id, [topic])[2][topic]
        if not isinstance(found, dict) or not found:
            raise ValueError("broker %d: %r" % (broker_id, found))
        return {p: (s[1], list(s[3]), sorted(s[4])) for p, s in found.items()}

    def wait_full_isr(self, topic, brokers=(1, 2, 3)):
        for b in brokers:
            self.cluster.wait_for(lambda: all(isr == sorted(replicas) for _, replicas, isr
                                              in self.partitions(topic, b).values()), 60,
                                  "the full ISR of %s at broker %d" % (topic, b))

    def leaders(self, topic, broker_id):
        return {p: s[0] for p, s in self.partitions(topic, broker_id).items()}

    def wait_leaders(self, topic, expected, brokers=(1, 2, 3)):
        for b in brokers:
            self.cluster.wait_for(lambda: self.leaders(topic, b) == expected, 60,
                                  "leaders %s of %s at broker %d" % (expected, topic, b))

    def bounce(self, broker_id, topics):
        """Stop ``broker_id`` (its leaderships move), start it, wait until it is in every ISR."""
        c = self.cluster
        others = [b for b in (1, 2, 3) if b != broker_id]
        c.broker(broker_id).stop()
        for topic in topics:
            c.wait_for(lambda: broker_id not in self.leaders(topic, others[0]).values(), 60,
                       "broker %d to lead nothing of %s" % (broker_id, topic))
        c.broker(broker_id).start()
        c.wait_for_brokers([1, 2, 3])
        for topic in topics:
            self.wait_full_isr(topic)

    def raw_elect(self, broker_id, election_type, partitions):
        client = RawClient(self.cluster.broker(broker_id), timeout=60)
        self.addCleanup(client.close)
        R = m.ElectLeadersRequest
        by_topic = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        resp = client.request(43, 2, R(election_type=election_type, timeout_ms=30000, topic_partitions=[
            R.TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()]))
        self.assertEqual(resp.error_code, 0)
        return [(r.topic, p.partition_id, p.error_code, p.error_message)
                for r in resp.replica_election_results for p in r.partition_result]


def admin_elect(bootstrap, election_type, partitions):
    """{(topic, partition): error code or None} from confluent-kafka's elect_leaders."""
    from confluent_kafka import ElectionType, TopicPartition

    client = admin(bootstrap)  # kept while waiting: a collected client fails its futures
    kind = ElectionType.PREFERRED if election_type == "preferred" else ElectionType.UNCLEAN
    result = client.elect_leaders(kind, [TopicPartition(t, p) for t, p in partitions]).result(60)
    return {(tp.topic, tp.partition): (None if err is None else err.code()) for tp, err in result.items()}


class ElectLeadersTests(_Leaders, unittest.SynchronousTestCase):
    """auto.leader.rebalance.enable=false: leaders move only when asked."""

    def setUp(self):
        # no auto-creation: a client still asking for a deleted topic must not bring it back
        self.cluster = shared_cluster("leaders", overrides={"auto.leader.rebalance.enable": "false",
                                                            "log.segment.delete.delay.ms": "200",
                                                            "auto.create.topics.enable": "false"})

    def test_preferred_election_through_the_admin_client_and_the_cli(self):
        c = self.cluster
        viaadmin, viacli = unique_name("pref"), unique_name("prefcli")
        for topic in (viaadmin, viacli):
            create_topic(c.broker(1).bootstrap_servers, topic, 3, 3)
            self.wait_full_isr(topic)
        preferred = {t: {p: s[1][0] for p, s in self.partitions(t, 1).items()} for t in (viaadmin, viacli)}
        controller = c.controller_id()
        bounced = next(b for b in (1, 2, 3) if b != controller)
        self.bounce(bounced, [viaadmin, viacli])
        moved = {t: [p for p, b in preferred[t].items() if b == bounced] for t in preferred}
        self.assertEqual([len(moved[t]) for t in (viaadmin, viacli)], [1, 1])  # one preferred per broker
        for t in (viaadmin, viacli):  # nothing moves them back on its own here
            self.assertNotIn(bounced, [self.leaders(t, b)[moved[t][0]] for b in (1, 2, 3)])

        results = admin_elect(c.broker(bounced).bootstrap_servers, "preferred", [(viaadmin, p) for p in range(3)])
        self.assertEqual(results, {(viaadmin, p): None if p in moved[viaadmin] else ELECTION_NOT_NEEDED
                                   for p in range(3)})
        self.assertEqual(self.leaders(viaadmin, controller), preferred[viaadmin])  # published when answered
        self.wait_leaders(viaadmin, preferred[viaadmin])
        self.assertEqual(admin_elect(c.broker(1).bootstrap_servers, "preferred", [(viaadmin, p) for p in range(3)]),
                         {(viaadmin, p): ELECTION_NOT_NEEDED for p in range(3)})

        path = os.path.join(c.work_dir, "elect.json")
        with open(path, "w") as f:
            json.dump({"partitions": [{"topic": viacli, "partition": p} for p in range(3)]}, f)
        config = os.path.join(c.work_dir, "admin.properties")
        with open(config, "w") as f:
            f.write("client.id=leader-election\n")
        rc, out, err = run_cli(c.broker(1).bootstrap_servers, "leaders", "elect", "--election-type", "preferred",
                               "--path-to-json-file", path, "--admin.config", config)
        self.assertEqual(rc, 0, err)
        others = [p for p in range(3) if p not in moved[viacli]]
        self.assertEqual(out.splitlines(), [
            "Successfully completed leader election (PREFERRED) for partitions %s-%d" % (viacli, moved[viacli][0]),
            "Valid replica already elected for partitions %s" % ", ".join("%s-%d" % (viacli, p) for p in others)])
        self.wait_leaders(viacli, preferred[viacli])
        rc, out, err = run_cli(c.broker(2).bootstrap_servers, "leaders", "elect", "--election-type", "PREFERRED",
                               "--topic", viacli, "--partition", str(moved[viacli][0]))
        self.assertEqual((rc, out), (0, "Valid replica already elected for partitions %s-%d\n"
                                     % (viacli, moved[viacli][0])), err)
        rc, out, err = run_cli(c.broker(2).bootstrap_servers, "--output", "json", "leaders", "elect",
                               "--election-type", "preferred", "--topic", viacli, "--partition", "7")
        self.assertEqual((rc, json.loads(out)), (4, [{"topic": viacli, "partition": 7,
                                                      "error": "UNKNOWN_TOPIC_OR_PARTITION",
                                                      "message": "The partition does not exist."}]), err)
        rc, out, err = run_cli(c.broker(2).bootstrap_servers, "leaders", "elect", "--election-type", "preferred",
                               "--all-topic-partitions")
        self.assertEqual(rc, 0, err)
        # only partitions that needed an election are listed (other tests' topics may)
        self.assertTrue(all(line.startswith("Successfully completed leader election (PREFERRED) for partitions ")
                            for line in out.splitlines()), out)
        self.assertNotIn(viacli, out)
        self.assertNotIn(viaadmin, out)
        rc, out, err = run_cli(c.broker(2).bootstrap_servers, "leaders", "elect", "--election-type", "preferred",
                               "--topic", viacli)
        self.assertEqual((rc, out, err.strip()), (2, "", "Error: Missing required option(s): partition"))

    def test_unclean_election_of_an_offline_partition(self):
        c = self.cluster
        controller = c.controller_id()
        a, b = [x for x in (1, 2, 3) if x != controller]
        topic, lone = unique_name("unclean"), unique_name("lone")
        from confluent_kafka.admin import NewTopic

        client = admin(c.broker(controller).bootstrap_servers)
        futures = client.create_topics([NewTopic(topic, 1, replica_assignment=[[a, b]]),
                                        NewTopic(lone, 1, replica_assignment=[[a]])],
                                       operation_timeout=30)
        for f in futures.values():
            f.result(60)
        self.wait_full_isr(topic)
        c.broker(b).stop()  # out of the ISR
        c.wait_for(lambda: self.partitions(topic, controller)[0] == (a, [a, b], [a]), 60, "ISR [a]")
        c.broker(a).stop()  # the last ISR member: offline, a stays in the ISR
        c.wait_for(lambda: self.partitions(topic, controller)[0] == (-1, [a, b], [a]), 60, "no leader")
        c.broker(b).start()  # a stale replica returns; unclean.leader.election.enable is false
        c.wait_for_brokers(sorted([controller, b]))
        c.wait_for(lambda: self.partitions(topic, b)[0] == (-1, [a, b], [a]), 30, "b to know the offline partition")

        self.assertEqual(self.raw_elect(controller, 0, [(topic, 0), (topic, 7)]), [
            (topic, 0, PREFERRED_LEADER_NOT_AVAILABLE, "Failed to elect leader for partition %s-0 under strategy "
             "PreferredReplicaPartitionLeaderElectionStrategy" % topic),
            (topic, 7, UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")])
        self.assertEqual(self.raw_elect(b, 1, [(topic, 0)]), [(topic, 0, NOT_CONTROLLER, None)])
        self.assertEqual(admin_elect(c.broker(b).bootstrap_servers, "unclean", [(topic, 0), (lone, 0)]),
                         {(topic, 0): None, (lone, 0): ELIGIBLE_LEADERS_NOT_AVAILABLE})
        self.wait_leaders(topic, {0: b}, brokers=(controller, b))
        self.assertEqual(self.partitions(topic, b)[0], (b, [a, b], [b]))
        self.assertEqual(admin_elect(c.broker(b).bootstrap_servers, "unclean", [(topic, 0)]),
                         {(topic, 0): ELECTION_NOT_NEEDED})
        rc, out, err = run_cli(c.broker(b).bootstrap_servers, "leaders", "elect", "--election-type", "unclean",
                               "--topic", lone, "--partition", "0")
        self.assertEqual((rc, out), (4, "Error completing leader election (UNCLEAN) for partition: %s-0: "
                                        "ELIGIBLE_LEADERS_NOT_AVAILABLE: Failed to elect leader for partition "
                                        "%s-0 under strategy OfflinePartitionLeaderElectionStrategy(true)\n"
                                     % (lone, lone)), err)
        self.assertIn("1 replica(s) could not be elected", err)

    def test_deletion_with_a_broker_down_completes_when_it_returns(self):
        self.delete_with_a_broker_down(killed=False)

    def test_deletion_right_after_a_broker_is_killed_completes_when_it_returns(self):
        # the controller still counts the broker live: its StopReplica waits for the session to
        # expire, without holding up the controller's other events
        self.delete_with_a_broker_down(killed=True)

    def delete_with_a_broker_down(self, killed):
        c = self.cluster
        topic = unique_name("deldown")
        create_topic(c.broker(1).bootstrap_servers, topic, 3, 3)
        self.wait_full_isr(topic)
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all"})
        for p in range(3):
            producer.produce(topic, value=b"v%d" % p, partition=p)
        self.assertEqual(producer.flush(30), 0)
        controller = c.controller_id()
        down = next(b for b in (1, 2, 3) if b != controller)
        live = [b for b in (1, 2, 3) if b != down]

        def dirs(broker_id):
            return sorted(d for d in os.listdir(c.broker(broker_id).data_dir) if d.startswith(topic + "-"))
        if killed:
            c.broker(down).kill()
        else:
            c.broker(down).stop()
            c.wait_for(lambda: down not in c.metadata(controller)[0], 60, "the controller to see the broker gone")
        self.assertEqual(dirs(down), ["%s-%d" % (topic, p) for p in range(3)])

        client = admin(c.broker(controller).bootstrap_servers)  # kept while waiting
        client.delete_topics([topic], operation_timeout=30)[topic].result(60)
        for b in live:
            c.wait_for(lambda: topic not in c.metadata(b)[2], 30, "broker %d to forget %s" % (b, topic))
            c.wait_for(lambda: dirs(b) == [], 30, "the logs of %s on broker %d to go" % (topic, b))
        # the deletion waits for the broker that is down: still marked, still assigned
        self.assertIn(topic, zk_read_children(c, "/admin/delete_topics"))
        self.assertIn(topic, zk_read_children(c, "/brokers/topics"))
        self.assertEqual(dirs(down), ["%s-%d" % (topic, p) for p in range(3)])
        from confluent_kafka.admin import NewTopic

        futures = client.create_topics([NewTopic(topic, 1, 1)])
        with self.assertRaises(Exception) as caught:
            futures[topic].result(60)
        error = caught.exception.args[0]
        self.assertEqual((error.code(), error.str()), (TOPIC_ALREADY_EXISTS, 'Topic "%s" is marked for deletion.'
                                                       % topic))

        def logged():
            with open(c.broker(controller).log_path) as f:
                return "deletion of topic %s waits for brokers [%d]" % (topic, down) in f.read()
        c.wait_for(logged, 30, "the controller to say the deletion waits")

        c.broker(down).start()
        c.wait_for_brokers([1, 2, 3])
        c.wait_for(lambda: topic not in zk_read_children(c, "/admin/delete_topics"), 60, "the deletion to complete")
        self.assertNotIn(topic, zk_read_children(c, "/brokers/topics"))
        c.wait_for(lambda: dirs(down) == [], 30, "the returned broker to delete its logs")
        for b in (1, 2, 3):
            self.assertNotIn(topic, c.metadata(b)[2])
            self.assertEqual(dirs(b), [])

        create_topic(c.broker(down).bootstrap_servers, topic, 2, 3)  # the name is free again
        self.wait_full_isr(topic)
        self.assertEqual(sorted(self.partitions(topic, down)), [0, 1])
        for b in (1, 2, 3):
            self.assertEqual(dirs(b), ["%s-%d" % (topic, p) for p in range(2)])


class AutoRebalanceTests(_Leaders, unittest.SynchronousTestCase):
    def setUp(self):
        self.cluster = shared_cluster("rebalance", overrides={"auto.leader.rebalance.enable": "true",
                                                              "leader.imbalance.check.interval.seconds": "2"})

    def test_preferred_leaders_come_back_after_a_broker_returns(self):
        c = self.cluster
        topic = unique_name("rebal")
        create_topic(c.broker(1).bootstrap_servers, topic, 3, 3)
        self.wait_full_isr(topic)
        preferred = {p: s[1][0] for p, s in self.partitions(topic, 1).items()}
        controller = c.controller_id()
        bounced = next(b for b in (1, 2, 3) if b != controller)
        [moved] = [p for p, b in preferred.items() if b == bounced]
        c.broker(bounced).stop()
        c.wait_for(lambda: self.leaders(topic, controller)[moved] != bounced, 60, "leadership to move")
        c.broker(bounced).start()
        c.wait_for_brokers([1, 2, 3])
        # 1 of 1 partitions preferring the returned broker led elsewhere: 100% > 10%
        self.wait_leaders(topic, preferred)
        with open(c.broker(controller).log_path) as f:
            self.assertIn("AutoTriggered preferred election moved the leaders of %s-%d:%d"
                          % (topic, moved, bounced), f.read())
