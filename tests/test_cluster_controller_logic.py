"""The controller's pure parts: Kafka's replica assignment (rack-aware and not), leader
elections and offline replicas, preferred elections and the leader imbalance check, and the
znode JSON of Kafka's ZooKeeper layout; ElectLeaders and the auto rebalance in the controller's
queue with a store double and task.Clock. No ZooKeeper."""

import json

import attr
from twisted.trial import unittest

from kafkatw.cluster import zk_layout as L
from kafkatw.cluster.assignment import assign_replicas, rack_alternated_brokers
from kafkatw.cluster.state import LeaderAndIsr
from kafkatw.cluster.zk import parse_connect
from kafkatw.config import ConfigError
from kafkatw.controller import election, preferred
from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError


class AssignmentTests(unittest.SynchronousTestCase):
    RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}

    def test_rack_alternated_order(self):
        self.assertEqual(rack_alternated_brokers(self.RACKS), [0, 3, 1, 5, 4, 2])

    def test_rack_aware_fixed_start(self):
        self.assertEqual(assign_replicas(7, 3, self.RACKS, fixed_start_index=0), {
            0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0], 5: [2, 0, 3], 6: [0, 4, 2]})

    def test_rack_aware_spreads_racks_and_leaders(self):
        racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
        for start in range(6):
            out = assign_replicas(12, 3, racks, fixed_start_index=start)
            self.assertEqual(sorted(out), list(range(12)))
            for replicas in out.values():
                self.assertEqual(len({racks[b] for b in replicas}), 3, replicas)
            leaders = [r[0] for r in out.values()]
            self.assertEqual(sorted(leaders.count(b) for b in racks), [2] * 6)

    def test_rack_unaware_round_robin_with_shift(self):
        self.assertEqual(assign_replicas(6, 2, {1: None, 2: None, 3: None}, fixed_start_index=0),
                         {0: [1, 2], 1: [2, 3], 2: [3, 1], 3: [1, 3], 4: [2, 1], 5: [3, 2]})

    def test_start_partition_continues_numbering(self):
        out = assign_replicas(2, 1, {1: None, 2: None}, start_partition=3, fixed_start_index=0)
        self.assertEqual(sorted(out), [3, 4])

    def test_too_few_brokers(self):
        with self.assertRaises(KafkaError) as e:
            assign_replicas(1, 3, {1: None})
        self.assertEqual(e.exception.code, errors.INVALID_REPLICATION_FACTOR)
        self.assertIn("only 1 broker(s) are registered", e.exception.message)

    def test_some_brokers_without_rack(self):
        with self.assertRaises(KafkaError) as e:
            assign_replicas(1, 2, {1: "a", 2: None})
        self.assertEqual(e.exception.code, errors.INVALID_REPLICA_ASSIGNMENT)


class ElectionTests(unittest.SynchronousTestCase):
    def state(self, leader, isr, epoch=5, partition_epoch=7):
        return LeaderAndIsr(leader=leader, leader_epoch=epoch, isr=isr, controller_epoch=1,
                            partition_epoch=partition_epoch)

    def test_new_partition_first_live_replica(self):
        s = election.new_partition_state([3, 1, 2], {1, 2}, controller_epoch=4)
        self.assertEqual((s.leader, s.isr, s.leader_epoch, s.controller_epoch), (1, (1, 2), 0, 4))
        self.assertIsNone(election.new_partition_state([3], {1}, 4))

    def test_first_live_isr_member_in_assignment_order(self):
        new = election.elect(self.state(-1, [3, 2, 1]), [1, 2, 3], live={2, 3}, unclean=False, controller_epoch=9)
        self.assertEqual((new.leader, new.isr, new.leader_epoch, new.controller_epoch, new.partition_epoch),
                         (2, (3, 2), 6, 9, 7))

    def test_no_live_isr_member_stays_offline(self):
        self.assertIsNone(election.elect(self.state(-1, [1]), [1, 2, 3], live={2, 3}, unclean=False,
                                         controller_epoch=9))

    def test_unclean_takes_a_live_replica(self):
        new = election.elect(self.state(-1, [1]), [1, 3, 2], live={2, 3}, unclean=True, controller_epoch=9)
        self.assertEqual((new.leader, new.isr), (3, (3,)))

    def test_dead_follower_leaves_isr(self):
        new = election.without_replicas(self.state(1, [1, 2, 3]), {3}, controller_epoch=2)
        self.assertEqual((new.leader, new.isr, new.leader_epoch), (1, (1, 2), 6))

    def test_dead_leader_means_no_leader_and_last_isr_member_stays(self):
        new = election.without_replicas(self.state(1, [1]), {1}, controller_epoch=2)
        self.assertEqual((new.leader, new.isr), (-1, (1,)))
        new = election.without_replicas(self.state(1, [1, 2]), {1, 2}, controller_epoch=2)
        self.assertEqual((new.leader, len(new.isr)), (-1, 1))

    def test_unrelated_death_changes_nothing(self):
        self.assertIsNone(election.without_replicas(self.state(1, [1, 2]), {3}, controller_epoch=2))


class PreferredTests(unittest.SynchronousTestCase):
    """controller/preferred.py: Kafka's preferred replica election and leader imbalance check."""

    def test_preferred_leader_must_be_alive_and_in_the_isr(self):
        self.assertEqual(preferred.preferred_leader([2, 1, 3], [1, 2], {1, 2, 3}), 2)
        self.assertIsNone(preferred.preferred_leader([2, 1, 3], [1, 3], {1, 2, 3}))  # not in the ISR
        self.assertIsNone(preferred.preferred_leader([2, 1, 3], [1, 2], {1, 3}))  # not alive
        self.assertIsNone(preferred.preferred_leader([], [1], {1}))

    def test_election_needed(self):
        self.assertTrue(preferred.election_needed(preferred.PREFERRED, [2, 1], 1, {1, 2}))
        self.assertFalse(preferred.election_needed(preferred.PREFERRED, [2, 1], 2, {1, 2}))
        self.assertFalse(preferred.election_needed(preferred.UNCLEAN, [2, 1], 1, {1, 2}))
        self.assertTrue(preferred.election_needed(preferred.UNCLEAN, [2, 1], -1, {1, 2}))
        self.assertTrue(preferred.election_needed(preferred.UNCLEAN, [2, 1], 1, {2}))

    def test_imbalance_above_the_percentage_per_preferred_broker(self):
        assignments = {("t", p): [1 + p % 2, 2 - p % 2] for p in range(20)}  # 1 and 2 preferred for 10 each
        leaders = {tp: r[0] for tp, r in assignments.items()}
        leaders[("t", 0)] = 2  # broker 1: 1 of 10 elsewhere = 10%, not above 10%
        self.assertEqual(preferred.imbalanced_partitions(assignments, leaders, 10), [])
        leaders[("t", 2)] = 2  # 20%
        self.assertEqual(preferred.imbalanced_partitions(assignments, leaders, 10), [("t", 0), ("t", 2)])
        self.assertEqual(preferred.imbalanced_partitions(assignments, leaders, 20), [])
        leaders[("t", 1)] = 1  # broker 2: 10% only, its partition stays
        self.assertEqual(preferred.imbalanced_partitions(assignments, leaders, 10), [("t", 0), ("t", 2)])
        self.assertEqual(preferred.imbalanced_partitions(assignments, leaders, 0), [("t", 0), ("t", 1), ("t", 2)])


class ZkLayoutTests(unittest.SynchronousTestCase):
    def test_broker_registration_as_kafka_writes_it(self):
        data = L.encode_broker(2, [("PLAINTEXT", "h", 9092), ("INTERNAL", "i", 9093)],
                               {"PLAINTEXT": "PLAINTEXT", "INTERNAL": "PLAINTEXT"}, rack="r1", now_ms=5)
        value = json.loads(data)
        self.assertEqual(value, {"version": 5, "host": "h", "port": 9092, "jmx_port": -1, "timestamp": "5",
                                 "endpoints": ["PLAINTEXT://h:9092", "INTERNAL://i:9093"],
                                 "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT",
                                                                    "INTERNAL": "PLAINTEXT"},
                                 "rack": "r1", "features": {}})
        info = L.decode_broker(2, data, epoch=77)
        self.assertEqual((info.node_id, info.rack, info.epoch, info.endpoints),
                         (2, "r1", 77, {"PLAINTEXT": ("h", 9092), "INTERNAL": ("i", 9093)}))

    def test_topic_and_partition_state(self):
        tid = bytes(range(1, 17))
        data = L.encode_topic_assignment(tid, {1: [2, 3], 0: [1, 2]})
        self.assertEqual(json.loads(data)["partitions"], {"0": [1, 2], "1": [2, 3]})
        self.assertEqual(L.decode_topic_assignment(data), (tid, {0: [1, 2], 1: [2, 3]}))
        # a topic znode of Kafka 2.x (version 1, no topic id)
        self.assertEqual(L.decode_topic_assignment(b'{"version":1,"partitions":{"0":[5]}}'), (None, {0: [5]}))
        state = LeaderAndIsr(leader=2, leader_epoch=4, isr=[2, 3], controller_epoch=7)
        self.assertEqual(json.loads(L.encode_partition_state(state)),
                         {"version": 1, "leader": 2, "leader_epoch": 4, "isr": [2, 3], "controller_epoch": 7,
                          "leader_recovery_state": 0})
        self.assertEqual(L.decode_partition_state(L.encode_partition_state(state), 12),
                         LeaderAndIsr(leader=2, leader_epoch=4, isr=[2, 3], controller_epoch=7, partition_epoch=12))

    def test_controller_and_epoch(self):
        self.assertEqual(L.decode_controller(L.encode_controller(3)), 3)
        self.assertEqual(L.decode_controller(b"3"), 3)
        self.assertEqual(L.decode_controller_epoch(L.encode_controller_epoch(12)), 12)

    def test_log_dir_event_as_kafka_writes_it(self):
        import json

        self.assertEqual(json.loads(L.encode_log_dir_event(4)), {"version": 1, "broker": 4, "event": 1})
        self.assertEqual(L.decode_log_dir_event(L.encode_log_dir_event(4)), 4)
        self.assertIsNone(L.decode_log_dir_event(b'{"version": 1, "broker": 4, "event": 2}'))
        self.assertIn(L.LOG_DIR_EVENT_NOTIFICATION, L.PERSISTENT_PATHS)

    def test_connect_string(self):
        self.assertEqual(parse_connect("a:1,b:2/kafka/x"), ("a:1,b:2", "/kafka/x"))
        self.assertEqual(parse_connect("a:1"), ("a:1", ""))
        for bad in ("", "a", "a:x", "a:1//b"):
            with self.assertRaises(ConfigError) as e:
                parse_connect(bad)
            self.assertIn("zookeeper.connect", str(e.exception))
            self.assertNotIn("\n", str(e.exception))


class UpdateMetadataTests(unittest.SynchronousTestCase):
    """The controller's UpdateMetadata: one request's content to every live broker, each
    copy carrying that broker's own epoch."""

    def test_each_live_broker_gets_its_epoch_and_the_same_partitions(self):
        from twisted.internet import defer
        from twisted.internet.task import Clock

        from kafkatw.cluster.state import LEADER_DURING_DELETE, BrokerInfo
        from kafkatw.controller.controller import KafkaController

        sent = []

        class Channel:
            def send(self, broker_id, request, version):
                sent.append((broker_id, request))
                return defer.Deferred()

        controller = KafkaController(Clock(), None, 1, Channel(), "PLAINTEXT")
        controller.epoch = 3
        controller.live = {b: BrokerInfo(node_id=b, endpoints={"PLAINTEXT": ("h", 9000 + b)}, epoch=100 + b)
                           for b in (1, 2)}
        controller.assignments = {"t": {0: [1, 2, 3]}}
        controller.topic_ids = {"t": bytes(range(16))}
        controller.states[("t", 0)] = LeaderAndIsr(leader=2, leader_epoch=4, isr=[2, 1], controller_epoch=3)
        controller._send_update_metadata([("t", 0)], deleting={"t"})
        self.assertEqual([(b, r.broker_epoch) for b, r in sent], [(1, 101), (2, 102)])
        for _, request in sent:
            self.assertEqual((request.controller_id, request.controller_epoch), (1, 3))
            self.assertEqual(sorted(b.id for b in request.live_brokers), [1, 2])
            [topic] = request.topic_states
            [p] = topic.partition_states
            self.assertEqual((p.leader, p.isr, p.offline_replicas), (LEADER_DURING_DELETE, [2, 1], [3]))


class ReplicaElectionTests(unittest.SynchronousTestCase):
    """The controller's ElectLeaders and auto rebalance in its queue, with a store double."""

    def setUp(self):
        from twisted.internet import defer
        from twisted.internet.task import Clock

        from kafkatw.cluster.state import BrokerInfo
        from kafkatw.controller.controller import KafkaController

        self.sent, self.writes = [], []
        test = self

        class Channel:
            def send(self, broker_id, request, version):
                test.sent.append((broker_id, type(request).__name__))
                return defer.Deferred()

            def remove_all_brokers(self):
                pass

        class Store:
            def update_partition_states(self, epoch_zk_version, topic, states):
                test.writes.append((epoch_zk_version, topic, dict(states)))
                return defer.succeed({p: attr.evolve(s, partition_epoch=s.partition_epoch + 1)
                                      for p, s in states.items()})

        self.clock = Clock()
        c = self.controller = KafkaController(self.clock, Store(), 1, Channel(), "PLAINTEXT")
        c.active, c.epoch, c.epoch_zk_version = True, 5, 7
        c.live = {b: BrokerInfo(node_id=b, endpoints={"PLAINTEXT": ("h", 9000 + b)}, epoch=b) for b in (1, 2, 3)}
        c.assignments = {"t": {0: [1, 2], 1: [2, 1], 2: [3, 1]}}
        c.topic_ids = {"t": bytes(16)}
        c.states = {("t", 0): LeaderAndIsr(leader=2, leader_epoch=3, isr=[2, 1], controller_epoch=4),
                    ("t", 1): LeaderAndIsr(leader=2, leader_epoch=1, isr=[2, 1], controller_epoch=4),
                    ("t", 2): LeaderAndIsr(leader=1, leader_epoch=2, isr=[1], controller_epoch=4)}

    def elect(self, partitions, election_type):
        return self.successResultOf(self.controller.elect_leaders(partitions, election_type))

    def test_preferred_election_writes_and_tells(self):
        results = self.elect([("t", 2), ("t", 0), ("t", 1), ("t", 9)], preferred.PREFERRED)
        self.assertEqual(list(results.items()), [
            (("t", 2), (errors.PREFERRED_LEADER_NOT_AVAILABLE, "Failed to elect leader for partition t-2 under "
                        "strategy PreferredReplicaPartitionLeaderElectionStrategy", None)),
            (("t", 0), (errors.NONE, None, 1)),
            (("t", 1), (errors.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.", None)),
            (("t", 9), (errors.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.", None))])
        new = LeaderAndIsr(leader=1, leader_epoch=4, isr=[2, 1], controller_epoch=5)
        self.assertEqual(self.writes, [(7, "t", {0: new})])  # fenced by the epoch's zkVersion
        self.assertEqual(self.controller.states[("t", 0)], attr.evolve(new, partition_epoch=1))
        self.assertEqual(self.sent, [(1, "LeaderAndIsrRequest"), (2, "LeaderAndIsrRequest")]
                         + [(b, "UpdateMetadataRequest") for b in (1, 2, 3)])

    def test_a_write_that_fails_is_that_partitions_error(self):
        from twisted.internet import defer
        from twisted.python.failure import Failure

        writes = []

        def update(epoch_zk_version, topic, states):
            writes.append(sorted(states))
            return defer.succeed({p: Failure(RuntimeError("znode gone")) if p == 0 else s
                                  for p, s in states.items()})
        self.controller.zk.update_partition_states = update
        results = self.elect([("t", 0)], preferred.PREFERRED)
        self.assertEqual(writes, [[0]])
        self.assertEqual(results, {("t", 0): (errors.UNKNOWN_SERVER_ERROR, "znode gone", None)})
        self.assertEqual(self.controller.states[("t", 0)].leader, 2)  # unchanged
        self.assertEqual(self.sent, [])
        self.flushLoggedErrors()

    def test_unclean_election_only_without_a_live_leader(self):
        self.controller.live.pop(1)  # t-2 (replicas 3, 1; ISR [1]) has lost its leader
        self.controller.states[("t", 2)] = LeaderAndIsr(leader=-1, leader_epoch=3, isr=[1], controller_epoch=4)
        results = self.elect([("t", 0), ("t", 2)], preferred.UNCLEAN)
        self.assertEqual(results, {("t", 0): (errors.ELECTION_NOT_NEEDED,
                                              "Leader election not needed for topic partition.", None),
                                   ("t", 2): (errors.NONE, None, 3)})
        self.assertEqual([w[2] for w in self.writes],
                         [{2: LeaderAndIsr(leader=3, leader_epoch=4, isr=[3], controller_epoch=5)}])
        self.controller.live.pop(3)
        self.controller.states[("t", 2)] = LeaderAndIsr(leader=-1, leader_epoch=5, isr=[3], controller_epoch=5)
        self.assertEqual(self.elect([("t", 2)], preferred.UNCLEAN)[("t", 2)][0], errors.ELIGIBLE_LEADERS_NOT_AVAILABLE)

    def test_not_controller(self):
        self.controller.active = False
        self.assertEqual(self.elect([("t", 0)], preferred.PREFERRED), {("t", 0): (errors.NOT_CONTROLLER, None, None)})
        self.assertIsNone(self.elect(None, preferred.PREFERRED))
        self.assertEqual(self.writes, [])

    def test_auto_rebalance_first_5_s_after_becoming_controller_then_every_interval(self):
        """Kafka's scheduleAutoLeaderRebalanceTask: 5 s after the failover, then the interval
        after each check; nothing pending on a broker that is not the controller."""
        c = self.controller
        c.active = False
        c.start_leader_rebalance(2, 10)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        c.active = True
        c.start_leader_rebalance(2, 10)  # as after a failover: the first check in 5 s
        self.clock.advance(4.9)
        self.assertEqual(self.writes, [])
        self.clock.advance(0.1)  # broker 1 leads 0 of its 1 preferred partition: t-0 moves back
        self.assertEqual([(w[1], sorted(w[2])) for w in self.writes], [("t", [0])])
        self.assertEqual(c.states[("t", 0)].leader, 1)
        self.assertEqual([call.getTime() for call in self.clock.getDelayedCalls()], [7.0])
        self.clock.advance(2)  # balanced now (t-2 prefers 3, which is not in the ISR)
        self.assertEqual(len(self.writes), 1)
        c.stop_leader_rebalance()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        c.start_leader_rebalance(2, 10)
        self.assertEqual([call.getTime() for call in self.clock.getDelayedCalls()], [12.0])  # now + 5
        c.session_lost()  # no longer controller: no check left pending
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(len(self.writes), 1)

    def alter(self, isr, broker_id=1, partition=2):
        from kafkatw.protocol import messages as m

        state = self.controller.states[("t", partition)]
        P = m.AlterPartitionRequest.TopicData.PartitionData
        request = m.AlterPartitionRequest(broker_id=broker_id, broker_epoch=broker_id, topics=[
            m.AlterPartitionRequest.TopicData(topic_name="t", partitions=[P(
                partition_index=partition, leader_epoch=state.leader_epoch, new_isr=isr,
                partition_epoch=state.partition_epoch)])])
        response = self.successResultOf(self.controller.alter_partition(request, 1))
        return response.topics[0].partitions[0].error_code

    def test_a_stopping_broker_or_a_failed_dir_replica_does_not_join_the_isr(self):
        """KIP-841: t-2 (replicas 3, 1; ISR [1]) led by 1."""
        c = self.controller
        c.shutting_down.add(3)
        self.assertEqual(self.alter([1, 3]), errors.INELIGIBLE_REPLICA)
        c.shutting_down.clear()
        c.offline_replicas[3] = {("t", 2)}
        self.assertEqual(self.alter([1, 3]), errors.INELIGIBLE_REPLICA)
        self.assertEqual(self.writes, [])
        c.offline_replicas.clear()
        self.assertEqual(self.alter([1, 3]), errors.NONE)
        self.assertEqual(c.states[("t", 2)].isr, (1, 3))


class StateWriteRetryTests(unittest.SynchronousTestCase):
    """A partition state write that fails (its reply lost with the ZooKeeper connection) is
    read again and retried: it left a dead leader in place until some later event."""

    def setUp(self):
        from twisted.internet import defer
        from twisted.internet.task import Clock

        from kafkatw.cluster.state import BrokerInfo
        from kafkatw.controller.controller import KafkaController

        self.sent, self.writes, self.reads = [], [], []
        self.stored = {0: LeaderAndIsr(leader=2, leader_epoch=3, isr=[2, 1, 3], controller_epoch=4,
                                       partition_epoch=9)}
        self.fail_writes = 1
        self.apply_failed = False
        test = self

        class Channel:
            def send(self, broker_id, request, version):
                test.sent.append((broker_id, type(request).__name__))
                return defer.Deferred()

            def remove_all_brokers(self):
                pass

        class Store:
            def update_partition_states(self, epoch_zk_version, topic, states):
                test.writes.append(dict(states))
                out = {}
                for p, s in states.items():
                    if s.partition_epoch != test.stored[p].partition_epoch:
                        out[p] = Failure(RuntimeError("BadVersion"))
                        continue
                    written = attr.evolve(s, partition_epoch=s.partition_epoch + 1)
                    if test.fail_writes:
                        test.fail_writes -= 1
                        if test.apply_failed:
                            test.stored[p] = written
                        out[p] = Failure(RuntimeError("ConnectionLoss"))
                        continue
                    test.stored[p] = out[p] = written
                return defer.succeed(out)

            def partition_states(self, topic, partitions):
                test.reads.append(sorted(partitions))
                return defer.succeed({p: test.stored[p] for p in partitions})

        from twisted.python.failure import Failure

        self.clock = Clock()
        c = self.controller = KafkaController(self.clock, Store(), 1, Channel(), "PLAINTEXT")
        c.active, c.epoch, c.epoch_zk_version = True, 5, 7
        c.live = {b: BrokerInfo(node_id=b, endpoints={"PLAINTEXT": ("h", 9000 + b)}, epoch=b) for b in (1, 3)}
        c.assignments = {"t": {0: [2, 3, 1]}}
        c.topic_ids = {"t": bytes(16)}
        c.states = {("t", 0): self.stored[0]}

    def test_a_lost_write_is_read_again_and_retried(self):
        from kafkatw.controller.controller import STATE_WRITE_RETRY_S

        d = self.controller._replicas_offline({2})
        self.assertNoResult(d)  # waiting to retry, not giving up
        self.assertEqual(len(self.writes), 1)
        self.clock.advance(STATE_WRITE_RETRY_S)
        self.assertEqual(self.successResultOf(d), [("t", 0)])
        new = LeaderAndIsr(leader=3, leader_epoch=4, isr=[1, 3], controller_epoch=5, partition_epoch=9)
        self.assertEqual(self.writes, [{0: new}, {0: new}])
        self.assertEqual(self.reads, [[0]])
        self.assertEqual(self.controller.states[("t", 0)], attr.evolve(new, partition_epoch=10))

    def test_a_lost_reply_of_an_applied_write_counts_as_written(self):
        from kafkatw.controller.controller import STATE_WRITE_RETRY_S

        self.apply_failed = True
        d = self.controller._replicas_offline({2})
        self.clock.advance(STATE_WRITE_RETRY_S)
        self.assertEqual(self.successResultOf(d), [("t", 0)])  # the brokers are told
        self.assertEqual(len(self.writes), 1)  # read back as done: not written twice
        self.assertEqual(self.controller.states[("t", 0)].leader, 3)
        self.assertEqual(self.controller.states[("t", 0)].partition_epoch, 10)

    def test_retrying_stops_when_no_longer_controller(self):
        from kafkatw.controller.controller import STATE_WRITE_RETRY_S

        d = self.controller._replicas_offline({2})
        self.controller._resign_locally()
        self.clock.advance(STATE_WRITE_RETRY_S)
        self.assertEqual(self.successResultOf(d), [])
        self.assertEqual((len(self.writes), self.reads), (1, []))


class ElectionRetryTests(unittest.SynchronousTestCase):
    """An election whose store call fails (the connection dropped; the multi's outcome unknown)
    moves the controller as Kafka's triggerControllerMove and is tried again: it left a
    /controller naming a broker that did not act as controller."""

    def setUp(self):
        from twisted.internet import defer
        from twisted.internet.task import Clock

        from kafkatw.controller.controller import KafkaController

        self.calls = []
        self.controller_znode = [-1]
        self.fail_elections = 1
        test = self

        class Channel:
            def remove_all_brokers(self):
                pass

        class Store:
            def get_controller_id(self, watch=None):
                test.calls.append("get")
                return defer.succeed(test.controller_znode[0])

            def elect_controller(self, broker_id):
                test.calls.append("elect")
                test.controller_znode[0] = broker_id  # applied, whatever the reply says
                if test.fail_elections:
                    test.fail_elections -= 1
                    return defer.fail(RuntimeError("ConnectionLoss"))
                return defer.succeed((3, 7))

            def resign_controller(self, broker_id):
                test.calls.append("resign")
                if test.controller_znode[0] == broker_id:
                    test.controller_znode[0] = -1
                return defer.succeed(None)

        self.clock = Clock()
        c = self.controller = KafkaController(self.clock, Store(), 1, Channel(), "PLAINTEXT")
        c._on_failover = lambda: defer.succeed(None)

    def test_a_failed_election_moves_the_controller_and_is_tried_again(self):
        from kafkatw.controller.controller import ELECTION_RETRY_S

        self.successResultOf(self.controller.startup())
        self.assertEqual(self.calls, ["get", "elect", "resign"])
        self.assertEqual((self.controller.active, self.controller_znode[0]), (False, -1))
        self.clock.advance(ELECTION_RETRY_S)
        self.assertEqual(self.calls, ["get", "elect", "resign", "get", "elect"])
        self.assertEqual((self.controller.active, self.controller.epoch, self.controller.controller_id),
                         (True, 3, 1))

    def test_shutdown_cancels_the_pending_new_election(self):
        """A broker stopped while its failed election waits to be tried again leaves no timer
        behind (nor an election after its shutdown)."""
        self.successResultOf(self.controller.startup())
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        self.successResultOf(self.controller.shutdown())
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(self.calls, ["get", "elect", "resign"])

    def test_a_controller_znode_of_this_broker_not_acting_is_deleted(self):
        self.controller_znode[0] = 1
        self.successResultOf(self.controller.startup())
        self.assertEqual(self.calls, ["get", "resign"])
        self.assertEqual((self.controller.active, self.controller_znode[0]), (False, -1))


class TopicDeletionRetryTests(unittest.SynchronousTestCase):
    """Deletions a live broker keeps failing are retried in one round per back-off, however
    many topics are stuck (each topic's answers scheduled a round of all of them: the rounds
    multiplied by the number of topics every back-off)."""

    def test_one_retry_round_per_backoff(self):
        from twisted.internet import defer
        from twisted.internet.task import Clock

        from kafkatw.cluster.state import BrokerInfo
        from kafkatw.controller.controller import DELETION_RETRY_S, KafkaController
        from kafkatw.protocol import messages as m

        rounds = []

        class Store:
            def topics_to_delete(self, watch=None):
                rounds.append(clock.seconds())
                return defer.succeed(["a", "b", "c"])

        class Channel:
            def send(self, broker_id, request, version):
                if isinstance(request, m.StopReplicaRequest):  # a live broker that fails each time
                    return defer.succeed(m.StopReplicaResponse(error_code=errors.UNKNOWN_SERVER_ERROR))
                return defer.Deferred()

            def remove_all_brokers(self):
                pass

        clock = Clock()
        c = KafkaController(clock, Store(), 1, Channel(), "PLAINTEXT")
        c.active, c.epoch, c.epoch_zk_version = True, 5, 7
        c.live = {b: BrokerInfo(node_id=b, endpoints={"PLAINTEXT": ("h", 9000 + b)}, epoch=b) for b in (1, 2)}
        for topic in ("a", "b", "c"):
            c.assignments[topic] = {0: [1, 2]}
            c.topic_ids[topic] = bytes(16)
            c.states[(topic, 0)] = LeaderAndIsr(leader=1, leader_epoch=0, isr=[1, 2], controller_epoch=5)
        c._deletions_watch()
        for _ in range(4):
            clock.advance(DELETION_RETRY_S)
        self.assertEqual(rounds, [0, 5, 10, 15, 20])
        self.assertEqual(c.deleting, {"a", "b", "c"})  # still waiting for the failing brokers
        c.session_lost()  # no longer controller: no retry left behind
        self.assertEqual(clock.getDelayedCalls(), [])


class BrokerMetadataTests(unittest.SynchronousTestCase):
    """A broker's metadata from UpdateMetadata (Kafka's ZkMetadataCache), without ZooKeeper."""

    def test_update_metadata_makes_each_topic_from_all_its_partitions(self):
        from types import SimpleNamespace

        from twisted.internet import defer
        from twisted.internet.task import Clock

        from kafkatw.cluster.zk_metadata import ZkClusterMetadata
        from kafkatw.protocol import messages as m

        class Store:
            def topic_configs(self, topic):
                return defer.succeed({"retention.ms": "7"})

        meta = ZkClusterMetadata(SimpleNamespace(node_id=1, cluster_id="c"), Store(), Clock())
        U = m.UpdateMetadataRequest

        def request(partitions):
            return U(controller_id=1, controller_epoch=1, broker_epoch=-1, live_brokers=[], topic_states=[
                U.UpdateMetadataTopicState(topic_name="t", topic_id=bytes(range(16)), partition_states=[
                    U.UpdateMetadataPartitionState(
                        topic_name="t", partition_index=p, controller_epoch=1, leader=1, leader_epoch=epoch,
                        isr=[1], zk_version=0, replicas=[1], offline_replicas=[])
                    for p, epoch in partitions])])
        meta.update_metadata(request([(2, 5), (0, 3), (1, 4)]))
        info = meta.get_topic("t")
        self.assertEqual((info.topic_id, info.num_partitions, info.leader_epochs, info.configs),
                         (bytes(range(16)), 3, [3, 4, 5], {"retention.ms": "7"}))
        meta.update_metadata(request([(1, 6), (3, 1)]))  # a leader change and an added partition
        info = meta.get_topic("t")
        self.assertEqual((info.num_partitions, info.leader_epochs), (4, [3, 6, 5, 1]))
        self.assertIs(meta.topic_by_id(bytes(range(16))), info)
