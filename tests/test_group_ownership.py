"""The group coordinator following ownership of ``__consumer_offsets`` partitions (Kafka's
onElection/onResignation), in process on a task.Clock: resigning a partition drops its groups
(waiting joins and syncs answer NOT_COORDINATOR, classic and KIP-848 groups alike), electing
it again loads them back (COORDINATOR_LOAD_IN_PROGRESS meanwhile), a resignation mid-load
leaves the partition unloaded and the other loads going on; in cluster mode the offsets
topic is created with offsets.topic.replication.factor replicas, or not while too few brokers
are alive."""

from twisted.trial import unittest

from kafkatw.protocol import errors
from kafkatw.protocol import messages as m
from tests.test_consumer_group_coordinator import ConsumerFixture
from tests.test_group_coordinator import GroupFixture


class ClassicGroupOwnershipTests(GroupFixture, unittest.TestCase):
    def partition(self, group="g"):
        return self.coordinator.partition_for(group)

    def test_resignation_answers_waiting_members_not_coordinator(self):
        leader, follower, generation = self.stable_pair()
        # a third member's join starts a rebalance: the others' joins wait
        d3 = self.join_new()
        self.assertNoResult(d3)
        d1 = self.join(member_id=leader)
        self.assertNoResult(d1)
        self.coordinator.on_resignation(self.partition(), 5)
        self.assertEqual(self.successResultOf(d1).body.error_code, errors.NOT_COORDINATOR)
        self.assertEqual(self.successResultOf(d3).body.error_code, errors.NOT_COORDINATOR)
        self.assertNotIn("g", self.coordinator.groups)
        self.assertEqual(self.heartbeat(follower, generation), errors.NOT_COORDINATOR)
        self.assertEqual(self.fetch_offsets()[0], errors.NOT_COORDINATOR)
        self.assertEqual(self.commit({("t", 0): (5, "")}), {("t", 0): errors.NOT_COORDINATOR})
        # the session timers of the dropped members expire without effect
        self.clock.advance(60)
        self.assertNotIn("g", self.coordinator.groups)

    def test_pending_sync_answers_not_coordinator(self):
        d = self.join_new()
        self.clock.advance(0)
        j = self.successResultOf(d).body
        # the leader's sync has not come; a follower's would wait: use a second member
        d2 = self.join_new()
        d1 = self.join(member_id=j.member_id)
        r1, r2 = self.successResultOf(d1).body, self.successResultOf(d2).body
        s2 = self.sync(r2.member_id, r2.generation_id)
        self.assertNoResult(s2)
        self.coordinator.on_resignation(self.partition(), 5)
        self.assertEqual(self.successResultOf(s2).body.error_code, errors.NOT_COORDINATOR)
        self.assertEqual(r1.generation_id, 2)

    def test_election_loads_groups_and_offsets_back(self):
        leader, follower, generation = self.stable_pair()
        self.assertEqual(self.commit({("t", 0): (7, "a"), ("t", 3): (11, "b")}, member_id=leader,
                                     generation=generation),
                         {("t", 0): errors.NONE, ("t", 3): errors.NONE})
        p = self.partition()
        self.coordinator.on_resignation(p, 5)
        self.assertEqual(self.fetch_offsets()[0], errors.NOT_COORDINATOR)
        self.coordinator.on_election(p, 6)
        self.assertEqual(self.fetch_offsets()[0], errors.COORDINATOR_LOAD_IN_PROGRESS)
        self.clock.advance(0)
        self.clock.advance(0)
        code, offsets = self.fetch_offsets(topics=[("t", [0, 3])])
        self.assertEqual(code, errors.NONE)
        self.assertEqual(offsets, {("t", 0): (7, "a", 0), ("t", 3): (11, "b", 0)})
        group = self.coordinator.groups["g"]
        self.assertEqual((group.state, group.generation_id, sorted(group.members)),
                         ("Stable", generation, sorted([leader, follower])))
        # a newer leader epoch while owning changes nothing
        self.coordinator.on_election(p, 7)
        self.assertEqual(self.fetch_offsets()[0], errors.NONE)

    def test_resignation_mid_load(self):
        for group in ("g", "h"):
            self.find(group)
            self.assertEqual(self.commit({("t", 1): (3, "")}, group=group), {("t", 1): errors.NONE})
        pg, ph = self.partition("g"), self.partition("h")
        self.assertNotEqual(pg, ph)
        self.restart()
        self.assertEqual(self.coordinator.loading_partitions, {pg, ph})
        # start the first partition's load without running its steps (advance would run all)
        self.coordinator._load_call.cancel()
        self.coordinator._load_call = None
        self.coordinator._load_next()
        self.assertIsNotNone(self.coordinator._load_task)
        self.assertEqual(self.coordinator._load_partition_id, min(pg, ph))
        self.coordinator.on_resignation(min(pg, ph), 4)
        self.assertIsNone(self.coordinator._load_task)
        for _ in range(5):
            self.clock.advance(0)
        self.assertEqual(self.coordinator.loading_partitions, set())
        self.assertNotIn(min(pg, ph), self.coordinator.owned_partitions)
        self.assertIn(max(pg, ph), self.coordinator.owned_partitions)
        first, second = ("g", "h") if pg < ph else ("h", "g")
        self.assertEqual(self.fetch_offsets(group=first)[0], errors.NOT_COORDINATOR)
        self.assertEqual(self.fetch_offsets(group=second, topics=[("t", [1])]),
                         (errors.NONE, {("t", 1): (3, "", 0)}))


class ConsumerGroupOwnershipTests(ConsumerFixture, unittest.TestCase):
    def test_resignation_drops_the_group_and_its_timers(self):
        r = self.cjoin("a")
        self.assertEqual((r.error_code, r.member_epoch), (errors.NONE, 1))
        self.assertEqual(len(self.coordinator.consumer._session_timers), 1)
        p = self.coordinator.partition_for("g")
        self.coordinator.on_resignation(p, 3)
        self.assertNotIn("g", self.coordinator.consumer.groups)
        self.assertEqual(self.coordinator.consumer._session_timers, {})
        self.assertEqual(self.hb("a", 1).error_code, errors.NOT_COORDINATOR)
        self.coordinator.on_election(p, 4)
        self.clock.advance(0)
        self.clock.advance(0)
        group = self.group()
        self.assertEqual((sorted(group.members), group.group_epoch), (["a"], 1))
        r = self.hb("a", 1)
        self.assertEqual((r.error_code, r.member_epoch), (errors.NONE, 1))


class FakeClusterMetadata:
    """Just what ensure_offsets_topic asks of a cluster-mode metadata cache."""

    def __init__(self, live):
        self.live = live
        self.created = []

    def contains_topic(self, name):
        return False

    def live_brokers(self):
        return list(range(1, self.live + 1))

    def assign_replicas(self, num_partitions, replication_factor, start_partition=0):
        return {p: [(p + i) % self.live + 1 for i in range(replication_factor)]
                for p in range(num_partitions)}

    def create_topic(self, name, num_partitions, configs=None, topic_id=None, assignment=None):
        from twisted.internet import defer

        self.created.append((name, num_partitions, configs, assignment))
        return defer.Deferred()  # the controller publishes it later


class FakeClusterReplicaManager:
    cluster_mode = True


class ClusterModeCreationTests(unittest.TestCase):
    def coordinator(self, live, rf=None):
        from twisted.internet import task

        from kafkatw.coordinator.group.coordinator import GroupCoordinator

        config = {"offsets.topic.num.partitions": 4, "offsets.topic.segment.bytes": 1048576}
        if rf is not None:
            config["offsets.topic.replication.factor"] = rf
        metadata = FakeClusterMetadata(live)
        return GroupCoordinator(config, metadata, FakeClusterReplicaManager(), None,
                                task.Clock()), metadata

    def test_fewer_live_brokers_than_the_replication_factor(self):
        coordinator, metadata = self.coordinator(live=2)
        self.assertEqual(coordinator.ensure_offsets_topic(), errors.COORDINATOR_NOT_AVAILABLE)
        self.assertEqual(metadata.created, [])

    def test_created_with_the_replication_factor(self):
        coordinator, metadata = self.coordinator(live=3)
        self.assertEqual(coordinator.ensure_offsets_topic(), errors.COORDINATOR_NOT_AVAILABLE)
        [(name, n, configs, assignment)] = metadata.created
        self.assertEqual((name, n), ("__consumer_offsets", 4))
        self.assertEqual(configs, {"cleanup.policy": "compact", "segment.bytes": "1048576",
                                   "compression.type": "producer"})
        self.assertEqual({p: len(set(r)) for p, r in assignment.items()}, {0: 3, 1: 3, 2: 3, 3: 3})
        coordinator, metadata = self.coordinator(live=2, rf=2)
        coordinator.ensure_offsets_topic()
        self.assertEqual([len(r) for r in metadata.created[0][3].values()], [2, 2, 2, 2])
