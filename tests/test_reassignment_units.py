"""Unit tests of partition reassignment's pure parts: KIP-455's ReplicaAssignment arithmetic,
Kafka's target validation, the topic znode and legacy znode JSON, the throttled-replica lists
and the replication quota's token bucket (on a fake clock), and the CLI's plan parsing and
--generate spread."""

from twisted.trial import unittest

from kafkatw.cli import partitions as cli
from kafkatw.cli.client import UsageError
from kafkatw.cluster import zk_layout as L
from kafkatw.config.topic import validate_topic_config
from kafkatw.config.types import ConfigError
from kafkatw.controller.reassignment import ReplicaAssignment, validate_target
from kafkatw.protocol import errors
from kafkatw.server.replication_quota import ALL, ReplicationQuotaManager, parse_throttled_replicas


class ReplicaAssignmentTests(unittest.SynchronousTestCase):
    def test_move_is_target_then_origin(self):
        a = ReplicaAssignment([1, 2, 3]).reassign_to([2, 3, 4])
        self.assertEqual((list(a.replicas), list(a.adding), list(a.removing)), ([2, 3, 4, 1], [4], [1]))
        self.assertEqual((a.origin, a.target, a.is_being_reassigned), ([2, 3, 1], [2, 3, 4], True))

    def test_cancel_goes_back_to_origin_without_the_added(self):
        running = ReplicaAssignment([2, 3, 4, 1], [4], [1])
        cancelled = running.reassign_to(running.origin)
        self.assertEqual((list(cancelled.replicas), cancelled.adding, cancelled.removing), ([2, 3, 1], (), ()))
        self.assertFalse(cancelled.is_being_reassigned)

    def test_a_new_target_during_a_reassignment_starts_from_the_origin(self):
        running = ReplicaAssignment([2, 3, 4, 1], [4], [1])
        again = running.reassign_to([5, 6])
        self.assertEqual((list(again.replicas), list(again.adding), list(again.removing)),
                         ([5, 6, 2, 3, 1], [5, 6], [2, 3, 1]))

    def test_reorder_only_is_complete_at_once(self):
        a = ReplicaAssignment([1, 2]).reassign_to([2, 1])
        self.assertEqual((list(a.replicas), a.adding, a.removing), ([2, 1], (), ()))

    def test_validation_as_kafka(self):
        live = {1: None, 2: None}
        self.assertEqual(validate_target([], live)[0], errors.INVALID_REPLICA_ASSIGNMENT)
        self.assertIn("Duplicate replica ids", validate_target([1, 1], live)[1])
        self.assertIn("Invalid broker id", validate_target([-1, 2], live)[1])
        self.assertEqual(validate_target([1, 3], live),
                         (errors.INVALID_REPLICA_ASSIGNMENT, "Replica assignment has brokers that are not alive. "
                          "Replica list: [1, 3], live broker list: [1, 2]"))
        self.assertIsNone(validate_target([2, 1], live))


class ReassignLeaderTests(unittest.SynchronousTestCase):
    """The leader a completed reassignment keeps or elects, as Kafka's: only an online replica
    (live, not in a controlled shutdown, not on a failed log dir) and, if elected, in the ISR."""

    def leader(self, leader, isr, target, shutting_down=(), offline=None):
        from types import SimpleNamespace

        from kafkatw.cluster.state import LeaderAndIsr
        from kafkatw.controller.reassignment import PartitionReassignments

        offline = offline or {}
        ctl = SimpleNamespace(live={1: None, 2: None, 3: None, 4: None}, shutting_down=set(shutting_down),
                              _offline_replicas_of=lambda tp: {b for b, tps in offline.items() if tp in tps})
        state = LeaderAndIsr(leader=leader, leader_epoch=3, isr=isr, controller_epoch=1)
        return PartitionReassignments(ctl)._leader_in(("t", 0), state, target)

    def test_online_leader_in_the_target_stays(self):
        self.assertEqual(self.leader(2, [1, 2, 3], [3, 2]), 2)

    def test_leader_shutting_down_or_on_a_failed_dir_is_replaced(self):
        self.assertEqual(self.leader(2, [1, 2, 3], [2, 3], shutting_down=[2]), 3)
        self.assertEqual(self.leader(2, [1, 2, 3], [2, 3], offline={2: {("t", 0)}}), 3)
        self.assertEqual(self.leader(2, [1, 2, 3], [2, 3], offline={2: {("t", 1)}}), 2)

    def test_elected_replica_must_be_online_and_in_the_isr(self):
        self.assertEqual(self.leader(1, [1, 2, 3, 4], [2, 3, 4], shutting_down=[2],
                                     offline={3: {("t", 0)}}), 4)
        self.assertEqual(self.leader(1, [1, 2, 3], [2, 3, 4], shutting_down=[2],
                                     offline={3: {("t", 0)}}), None)


class ZnodeTests(unittest.SynchronousTestCase):
    def test_topic_znode_keeps_adding_and_removing(self):
        tid = bytes(range(16))
        data = L.encode_topic_assignment(tid, {0: [2, 3, 4, 1], 1: [1, 2]}, {0: [4], 1: []}, {0: [1]})
        self.assertEqual(L.decode_topic_assignment(data), (tid, {0: [2, 3, 4, 1], 1: [1, 2]}))
        self.assertEqual(L.decode_topic_reassignments(data), ({0: [4]}, {0: [1]}))
        self.assertEqual(L.decode_topic_reassignments(b'{"version":1,"partitions":{"0":[5]}}'), ({}, {}))

    def test_legacy_znode_round_trip(self):
        targets = {("b", 1): [3, 4], ("a", 0): [1]}
        data = L.encode_reassign_partitions(targets)
        self.assertEqual(data, b'{"partitions":[{"partition":0,"replicas":[1],"topic":"a"},'
                               b'{"partition":1,"replicas":[3,4],"topic":"b"}],"version":1}')
        self.assertEqual(L.decode_reassign_partitions(data), targets)


class Clock:
    def __init__(self):
        self.ms = 0

    def __call__(self):
        return self.ms


class ReplicationQuotaTests(unittest.SynchronousTestCase):
    def test_throttled_replica_lists(self):
        self.assertEqual(parse_throttled_replicas("0:1, 1:2,2:1", 1), frozenset([0, 2]))
        self.assertEqual(parse_throttled_replicas(["0:1", "3:1"], 1), frozenset([0, 3]))
        self.assertIs(parse_throttled_replicas("*", 7), ALL)
        self.assertEqual(parse_throttled_replicas("", 1), frozenset())

    def test_topic_config_refuses_a_bad_list_in_one_line(self):
        self.assertEqual(validate_topic_config({"follower.replication.throttled.replicas": "0:4,1:4"}),
                         {"follower.replication.throttled.replicas": ["0:4", "1:4"]})
        e = self.assertRaises(ConfigError, validate_topic_config,
                              {"leader.replication.throttled.replicas": "0:1,2"})
        self.assertNotIn("\n", str(e))
        self.assertIn("[partitionId]:[brokerId]", str(e))

    def test_only_named_out_of_sync_replicas_count_and_the_rate_holds(self):
        clock = Clock()
        configs = {"t": {"leader.replication.throttled.replicas": "0:1,1:2"}}
        q = ReplicationQuotaManager(1, lambda t: configs.get(t, {}), "leader.replication.throttled.replicas",
                                    clock, rate=1000)
        self.assertTrue(q.throttles("t", 0, in_sync=False))
        self.assertFalse(q.throttles("t", 0, in_sync=True))
        self.assertFalse(q.throttles("t", 1, in_sync=False))  # 1:2 names broker 2
        self.assertFalse(q.throttles("other", 0, in_sync=False))
        self.assertFalse(q.is_quota_exceeded())  # an empty bucket is not yet negative
        q.record(500)
        self.assertTrue(q.is_quota_exceeded())
        clock.ms += 400
        self.assertTrue(q.is_quota_exceeded())  # -500 + 400
        clock.ms += 200
        self.assertFalse(q.is_quota_exceeded())
        # over a long run, no more than the rate (and the one record that went negative)
        q.update_quota(1000)
        sent = 0
        for _ in range(1000):
            clock.ms += 10
            if not q.is_quota_exceeded():
                q.record(300)
                sent += 300
        self.assertLessEqual(sent, 1000 * 10 + 300)
        self.assertGreaterEqual(sent, 1000 * 10 - 300)

    def test_unlimited_by_default_and_a_config_change_is_seen(self):
        clock = Clock()
        configs = {}
        q = ReplicationQuotaManager(1, lambda t: configs.get(t, {}), "follower.replication.throttled.replicas",
                                    clock)
        configs["t"] = {"follower.replication.throttled.replicas": "*"}
        self.assertFalse(q.throttles("t", 0, in_sync=False))  # no rate set
        q.record(10 ** 12)
        self.assertFalse(q.is_quota_exceeded())
        q.update_quota(100)
        self.assertTrue(q.throttles("t", 5, in_sync=False))
        configs["t"] = {"follower.replication.throttled.replicas": "1:1"}
        self.assertFalse(q.throttles("t", 5, in_sync=False))
        self.assertTrue(q.throttles("t", 1, in_sync=False))


class CliPlanTests(unittest.SynchronousTestCase):
    def test_kafka_reassignment_json(self):
        plan = cli.parse_reassignment({"version": 1, "partitions": [
            {"topic": "a", "partition": 1, "replicas": [3, 1], "log_dirs": ["any", "any"]},
            {"topic": "a", "partition": 0, "replicas": [2]}]})
        self.assertEqual(plan, {("a", 1): [3, 1], ("a", 0): [2]})
        self.assertEqual(cli.format_reassignment(plan),
                         '{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[2],"log_dirs":["any"]},'
                         '{"topic":"a","partition":1,"replicas":[3,1],"log_dirs":["any","any"]}]}')

    def test_bad_plans_are_usage_errors(self):
        for doc in ({}, {"partitions": []}, {"partitions": [{"topic": "a", "partition": 0}]},
                    {"partitions": [{"topic": "a", "partition": 0, "replicas": [1, 1]}]},
                    {"partitions": [{"topic": "a", "partition": 0, "replicas": [1]},
                                    {"topic": "a", "partition": 0, "replicas": [2]}]},
                    {"partitions": [{"topic": "a", "partition": 0, "replicas": [1], "log_dirs": ["/d"]}]}):
            self.assertRaises(UsageError, cli.parse_reassignment, doc)

    def test_spread_is_kafkas_rack_unaware_assignment(self):
        self.assertEqual(cli.spread(4, 3, [1, 2, 3, 4], 1), {0: [2, 4, 1], 1: [3, 1, 2], 2: [4, 2, 3], 3: [1, 3, 4]})
        for replicas in cli.spread(12, 2, [2, 4, 6], 0).values():
            self.assertEqual(len(set(replicas)), 2)


class AuthorizationTests(unittest.SynchronousTestCase):
    def test_cluster_alter_and_describe_as_kafka(self):
        from kafkatw.security.authorizer import CLUSTER_NAME, AclOperation as Op, ResourceType as RT
        from kafkatw.server import authz

        for key, op in ((45, Op.ALTER), (46, Op.DESCRIBE), (34, Op.ALTER)):
            (action,) = authz.ACTIONS[key](None, None)
            self.assertEqual((action.operation, action.resource.resource_type, action.resource.name),
                             (op, RT.CLUSTER, CLUSTER_NAME))
            asked = []
            code = authz.GATES[key](None, None, lambda *a: asked.append(a) or False)
            self.assertEqual((code, asked), (errors.CLUSTER_AUTHORIZATION_FAILED, [(op, RT.CLUSTER, CLUSTER_NAME)]))
            self.assertIsNone(authz.GATES[key](None, None, lambda *a: True))


class AutoRebalanceTests(unittest.SynchronousTestCase):
    """The controller double of the ElectLeaders tests: a partition being reassigned is left
    out of the auto leader rebalance (Kafka's checkAndTriggerAutoLeaderRebalance)."""

    def setUp(self):
        from tests.test_cluster_controller_logic import ReplicaElectionTests

        self.base = ReplicaElectionTests("test_not_controller")
        self.base.setUp()

    def test_a_partition_being_reassigned_waits(self):
        c = self.base.controller
        c.reassignments.ongoing[("t", 0)] = ReplicaAssignment([1, 2, 3], [3], [])
        self.successResultOf(c.auto_rebalance(10))
        self.assertEqual(self.base.writes, [])
        del c.reassignments.ongoing[("t", 0)]
        self.successResultOf(c.auto_rebalance(10))
        self.assertEqual([(w[1], sorted(w[2])) for w in self.base.writes], [("t", [0])])
