"""PartitionOwnership: leadership of an internal topic's partitions turned into elections and
resignations, in cluster mode (from the replica manager's leadership listener) and on a single
node (every partition, from the metadata's topic events)."""

import os

from twisted.trial import unittest

from kafkatw.cluster.metadata import ClusterMetadata
from kafkatw.coordinator.partition_ownership import PartitionOwnership

TOPIC = "__consumer_offsets"


class FakePartition:
    def __init__(self, leader, epoch):
        self.is_leader = leader
        self.leader_epoch = epoch
        self.log = object()


class FakeReplicaManager:
    cluster_mode = True

    def __init__(self):
        self.listeners = []
        self.partitions = {}

    def add_leadership_listener(self, listener):
        self.listeners.append(listener)

    def get_partition(self, topic, partition):
        return self.partitions.get((topic, partition))

    def tell(self, leaders, followers):
        for listener in self.listeners:
            listener(leaders, followers)


class FakeMetadata:
    def __init__(self, counts):
        self.counts = counts

    def partition_count(self, topic):
        return self.counts.get(topic)


class Recorder:
    def __init__(self):
        self.calls = []

    def elected(self, partition, epoch):
        self.calls.append(("elected", partition, epoch))

    def resigned(self, partition, epoch):
        self.calls.append(("resigned", partition, epoch))


class ClusterModeTests(unittest.TestCase):
    def setUp(self):
        self.rm = FakeReplicaManager()
        self.rec = Recorder()
        self.own = PartitionOwnership(TOPIC, self.rm, FakeMetadata({}), self.rec.elected,
                                      self.rec.resigned)
        self.own.start()

    def test_elected_and_resigned_for_its_topic_only(self):
        self.rm.tell([(TOPIC, 3, 5), ("other", 3, 7), (TOPIC, 1, 2)], [(TOPIC, 4, 9)])
        self.assertEqual(self.rec.calls, [("elected", 3, 5), ("elected", 1, 2)])
        self.assertEqual(self.own.leaders, {3: 5, 1: 2})
        self.assertEqual(self.own.leader_epoch(3), 5)
        self.assertIsNone(self.own.leader_epoch(4))
        self.rm.tell([], [(TOPIC, 3, 6), ("other", 1, 8)])
        self.assertEqual(self.rec.calls[2:], [("resigned", 3, 6)])
        self.assertEqual(self.own.leaders, {1: 2})
        self.assertFalse(self.own.is_leader(3))
        self.assertTrue(self.own.is_leader(1))

    def test_newer_epoch_elects_again_older_or_same_does_not(self):
        self.rm.tell([(TOPIC, 0, 1)], [])
        self.rm.tell([(TOPIC, 0, 1)], [])
        self.rm.tell([(TOPIC, 0, 3)], [])
        self.rm.tell([(TOPIC, 0, 2)], [])
        self.assertEqual(self.rec.calls, [("elected", 0, 1), ("elected", 0, 3)])
        self.assertEqual(self.own.leader_epoch(0), 3)

    def test_stopped_replica_resigns_with_minus_one_once(self):
        self.rm.tell([(TOPIC, 2, 4)], [])
        self.rm.tell([], [(TOPIC, 2, -1)])
        self.rm.tell([], [(TOPIC, 2, -1)])
        self.assertEqual(self.rec.calls, [("elected", 2, 4), ("resigned", 2, -1)])

    def test_follower_never_led_is_not_resigned(self):
        self.rm.tell([], [(TOPIC, 7, 3)])
        self.assertEqual(self.rec.calls, [])

    def test_stopped_seam_hears_nothing(self):
        self.rm.tell([(TOPIC, 0, 1)], [])
        self.own.stop()
        self.assertEqual(self.own.leaders, {})
        self.rm.tell([(TOPIC, 1, 1)], [(TOPIC, 0, 2)])
        self.assertEqual(self.rec.calls, [("elected", 0, 1)])

    def test_failing_callback_is_logged_and_state_kept(self):
        def boom(partition, epoch):
            raise RuntimeError("load failed")
        self.own.on_elected = boom
        self.rm.tell([(TOPIC, 0, 1), (TOPIC, 1, 1)], [])
        self.assertEqual(self.own.leaders, {0: 1, 1: 1})
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 2)

    def test_start_elects_partitions_led_already(self):
        rm = FakeReplicaManager()
        rm.partitions = {(TOPIC, 0): FakePartition(True, 4), (TOPIC, 1): FakePartition(False, 2),
                         (TOPIC, 2): FakePartition(True, 1)}
        rec = Recorder()
        own = PartitionOwnership(TOPIC, rm, FakeMetadata({TOPIC: 3}), rec.elected, rec.resigned)
        own.start()
        self.assertEqual(rec.calls, [("elected", 0, 4), ("elected", 2, 1)])
        self.assertEqual(len(rm.listeners), 1)


class SingleNodeTests(unittest.TestCase):
    def setUp(self):
        self.metadata = ClusterMetadata.load([os.path.abspath(self.mktemp())], 1)
        self.rm = FakeReplicaManager()
        self.rm.cluster_mode = False
        self.rec = Recorder()

    def ownership(self):
        own = PartitionOwnership(TOPIC, self.rm, self.metadata, self.rec.elected, self.rec.resigned)
        self.addCleanup(own.stop)
        return own

    def test_existing_topic_elected_at_start(self):
        self.successResultOf(self.metadata.create_topic(TOPIC, 3))
        own = self.ownership()
        own.start()
        self.assertEqual(self.rec.calls, [("elected", 0, 0), ("elected", 1, 0), ("elected", 2, 0)])
        self.assertEqual(self.rm.listeners, [])  # no leadership listener on a single node

    def test_created_grown_and_deleted_topic(self):
        own = self.ownership()
        own.start()
        self.assertEqual(self.rec.calls, [])
        self.successResultOf(self.metadata.create_topic("t", 2))
        self.successResultOf(self.metadata.create_topic(TOPIC, 2))
        self.assertEqual(self.rec.calls, [("elected", 0, 0), ("elected", 1, 0)])
        self.successResultOf(self.metadata.create_partitions(TOPIC, 3))
        self.assertEqual(self.rec.calls[2:], [("elected", 2, 0)])
        self.successResultOf(self.metadata.delete_topic(TOPIC))
        self.assertEqual(self.rec.calls[3:], [("resigned", 0, -1), ("resigned", 1, -1),
                                              ("resigned", 2, -1)])
        self.assertEqual(own.leaders, {})

    def test_stop_removes_the_metadata_listener(self):
        own = self.ownership()
        own.start()
        own.stop()
        self.successResultOf(self.metadata.create_topic(TOPIC, 1))
        self.assertEqual(self.rec.calls, [])
