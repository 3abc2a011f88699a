"""The ZooKeeper coordination store against a real ZooKeeper (Debian's package): Kafka's znodes,
the controller election and its epoch fencing, broker registration epochs, producer id blocks,
watches answered on the reactor thread. Skips without ZooKeeper unless KAFKATW_REQUIRE_ZOOKEEPER=1."""

import atexit
import json
import logging
import os
import threading

from kazoo.exceptions import BadVersionError
from twisted.internet import defer, reactor
from twisted.python.failure import Failure
from twisted.trial import unittest

from kafkatw import testing
from kafkatw.cluster import zk_layout as L
from kafkatw.cluster.interfaces import ControllerMovedError, IClusterCoordinator
from kafkatw.cluster.state import LeaderAndIsr
from kafkatw.cluster.zk import ZkClusterCoordinator
from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError
from tests.support import unique_name

_server = None


def zookeeper():
    """One ZooKeeper for the module, started on first use."""
    global _server
    if _server is None:
        if not testing.zookeeper_available():
            if os.environ.get("KAFKATW_REQUIRE_ZOOKEEPER") == "1":
                raise AssertionError("ZooKeeper is required (KAFKATW_REQUIRE_ZOOKEEPER=1) but java or "
                                     "Debian's zookeeper package is missing")
            raise unittest.SkipTest("ZooKeeper (Debian's zookeeper package) is not installed")
        _server = testing.ZooKeeperServer().start()
        atexit.register(_server.close)
    return _server


class StoreTestCase(unittest.TestCase):
    """Each test in its own chroot of the module's ZooKeeper; ``store()`` a started store."""
    timeout = 60

    def setUp(self):
        self.connect = zookeeper().connect + "/" + unique_name("t")

    @defer.inlineCallbacks
    def store(self, **kwargs):
        zk = ZkClusterCoordinator(reactor, self.connect, session_timeout_ms=4000, **kwargs)
        self.assertTrue(IClusterCoordinator.providedBy(zk))
        yield zk.start()
        self.addCleanup(zk.stop)
        return zk


class StoreTests(StoreTestCase):

    @defer.inlineCallbacks
    def test_election_bumps_the_epoch_and_old_epochs_cannot_write(self):
        a = yield self.store()
        b = yield self.store()
        first = yield a.elect_controller(1)
        self.assertEqual(first[0], 1)
        self.assertIsNone((yield b.elect_controller(2)))
        self.assertEqual((yield b.get_controller_id()), 1)
        yield a.create_topic("t", bytes(range(16)), {0: [1, 2]}, {})
        state = LeaderAndIsr(leader=1, leader_epoch=0, isr=[1, 2], controller_epoch=1)
        created = yield a.create_partition_states(first[1], "t", {0: state})
        self.assertEqual(created[0].partition_epoch, 0)
        # controller 1 "pauses": its /controller goes, broker 2 is elected with epoch 2
        yield a.resign_controller(1)
        second = yield b.elect_controller(2)
        self.assertEqual(second[0], 2)
        moved = LeaderAndIsr(leader=2, leader_epoch=1, isr=[2], controller_epoch=1, partition_epoch=0)
        stale = yield a.update_partition_states(first[1], "t", {0: moved})
        self.assertTrue(stale[0].check(ControllerMovedError))
        stale = yield a.create_partition_states(first[1], "t", {1: state})
        self.assertTrue(stale[1].check(ControllerMovedError))
        self.assertEqual((yield b.partition_states("t", [0, 1])), {0: created[0]})
        with self.assertRaises(ControllerMovedError):
            yield a.delete_topic(first[1], "t")
        self.assertEqual((yield b.topics()), ["t"])
        # the new controller writes, conditional on the partition epoch it read
        now = yield b.update_partition_states(second[1], "t", {0: attr_evolve(moved, controller_epoch=2)})
        self.assertFalse(hasattr(now[0], "getTraceback"), getattr(now[0], "getTraceback", lambda: "")())
        self.assertEqual((now[0].leader, now[0].partition_epoch), (2, 1))
        again = yield b.update_partition_states(second[1], "t", {0: attr_evolve(moved, controller_epoch=2)})
        self.assertFalse(again[0].check(ControllerMovedError))  # a stale partition epoch, not a move
        self.assertEqual((yield b.partition_states("t", [0]))[0].partition_epoch, 1)

    @defer.inlineCallbacks
    def test_registration_epoch_is_the_czxid_and_one_session_owns_an_id(self):
        a = yield self.store()
        b = yield self.store()
        epoch = yield a.register_broker(1, L.encode_broker(1, [("PLAINTEXT", "h", 1)], {"PLAINTEXT": "PLAINTEXT"}))
        info = yield b.get_broker(1)
        self.assertEqual((info.epoch, info.endpoints), (epoch, {"PLAINTEXT": ("h", 1)}))
        with self.assertRaises(KafkaError) as e:
            yield b.register_broker(1, b"{}")
        self.assertEqual(e.exception.code, errors.BROKER_ID_NOT_REGISTERED)
        yield a.stop()  # the session ends: the ephemeral registration goes at once
        self.assertEqual((yield b.broker_ids()), [])
        epoch2 = yield b.register_broker(1, L.encode_broker(1, [("PLAINTEXT", "h", 2)], {"PLAINTEXT": "PLAINTEXT"}))
        self.assertGreater(epoch2, epoch)

    @defer.inlineCallbacks
    def test_watches_fire_on_the_reactor_thread(self):
        a = yield self.store()
        b = yield self.store()
        fired = defer.Deferred()

        def changed():
            if not fired.called:
                fired.callback(threading.current_thread() is threading.main_thread())
        self.assertEqual((yield a.broker_ids(watch=changed)), [])
        yield b.register_broker(3, L.encode_broker(3, [("PLAINTEXT", "h", 1)], {"PLAINTEXT": "PLAINTEXT"}))
        self.assertTrue((yield fired))
        self.assertEqual((yield a.broker_ids()), [3])

    @defer.inlineCallbacks
    def test_cluster_id_and_producer_id_blocks(self):
        a = yield self.store()
        b = yield self.store()
        self.assertEqual((yield a.get_or_create_cluster_id("first")), "first")
        self.assertEqual((yield b.get_or_create_cluster_id("second")), "first")
        blocks = yield defer.gatherResults([a.allocate_producer_id_block(1, 1000),
                                            b.allocate_producer_id_block(2, 1000),
                                            a.allocate_producer_id_block(1, 1000)])
        self.assertEqual(sorted(blocks), [(0, 999), (1000, 1999), (2000, 2999)])

    @defer.inlineCallbacks
    def test_racing_producer_id_blocks_are_disjoint(self):
        """Two brokers' allocators taking blocks at once: the conditional write makes the loser
        of each race read again (BadVersion), so the 20 blocks tile 0..19999 exactly."""
        a = yield self.store()
        b = yield self.store()
        blocks = yield defer.gatherResults([s.allocate_producer_id_block(broker, 1000)
                                            for _ in range(10) for s, broker in ((a, 1), (b, 2))])
        self.assertEqual(sorted(blocks), [(i * 1000, i * 1000 + 999) for i in range(20)])
        data, _ = yield a._run(lambda: a._client.get_async(a._p(L.PRODUCER_ID_BLOCK)))
        last = json.loads(data)
        self.assertEqual((last["version"], last["block_start"], last["block_end"]),
                         (1, "19000", "19999"))
        self.assertIn(last["broker"], (1, 2))

    @defer.inlineCallbacks
    def test_topic_configs_and_change_notifications(self):
        a = yield self.store()
        yield a.create_topic("c", bytes(range(16)), {0: [1]}, {"retention.ms": "5"})
        self.assertEqual((yield a.topic_configs("c")), {"retention.ms": "5"})
        with self.assertRaises(KafkaError) as e:
            yield a.create_topic("c", bytes(range(16)), {0: [1]}, {})
        self.assertEqual(e.exception.code, errors.TOPIC_ALREADY_EXISTS)
        yield a.set_topic_configs("c", {"retention.ms": "6"})
        self.assertEqual((yield a.topic_configs("c")), {"retention.ms": "6"})
        changes = yield a.config_changes()
        self.assertEqual([(t, n) for _, t, n in changes], [("topics", "c")])
        yield a.set_topic_configs("c", {"retention.ms": "7"})
        yield a.set_entity_configs("users/u", b'{"version":1,"config":{}}')
        later = yield a.config_changes(after=changes[0][0])  # only those not seen yet
        self.assertEqual([(t, n) for _, t, n in later], [("topics", "c"), ("users", "u")])
        self.assertGreater(later[0][0], changes[0][0])
        # Kafka's 15 minutes: nothing is that old yet; an hour later all three go
        now_ms = int(reactor.seconds() * 1000)
        self.assertEqual((yield a.purge_config_changes(15 * 60 * 1000, now_ms)), 0)
        self.assertEqual(len((yield a.config_changes())), 3)
        self.assertEqual((yield a.purge_config_changes(15 * 60 * 1000, now_ms + 3600 * 1000)), 3)
        self.assertEqual((yield a.config_changes()), [])

    @defer.inlineCallbacks
    def test_acl_nodes_conditional_writes_and_change_notifications(self):
        a = yield self.store()
        b = yield self.store()
        self.assertEqual((yield a.resource_acls("PREFIXED", "Topic", "orders-")), (None, -1))
        self.assertTrue((yield a.write_resource_acls("PREFIXED", "Topic", "orders-", b"one", -1)))
        self.assertFalse((yield b.write_resource_acls("PREFIXED", "Topic", "orders-", b"two", -1)))  # exists
        data, version = yield b.resource_acls("PREFIXED", "Topic", "orders-")
        self.assertEqual((data, version), (b"one", 0))
        self.assertTrue((yield b.write_resource_acls("PREFIXED", "Topic", "orders-", b"two", version)))
        self.assertFalse((yield a.write_resource_acls("PREFIXED", "Topic", "orders-", b"three", version)))  # stale
        self.assertTrue((yield a.write_resource_acls("LITERAL", "Group", "g", b"lit", -1)))
        self.assertEqual((yield a.acl_resources("PREFIXED")), [("Topic", "orders-", b"two")])
        self.assertEqual((yield a.acl_resources("LITERAL")), [("Group", "g", b"lit")])
        # Kafka's change notifications: "Type:name" for LITERAL, a JSON event for the others
        literal = yield a.acl_changes("LITERAL")
        self.assertEqual([c[1:] for c in literal], [("Group", "g")])
        data, _ = yield a._run(lambda: a._client.get_async(a._p("/kafka-acl-changes/" + literal[0][0])))
        self.assertEqual(data, b"Group:g")
        prefixed = yield a.acl_changes("PREFIXED")
        self.assertEqual([c[1:] for c in prefixed], [("Topic", "orders-")] * 2)
        self.assertEqual((yield a.acl_changes("PREFIXED", after=prefixed[0][0])), prefixed[1:])
        self.assertTrue((yield a.write_resource_acls("LITERAL", "Group", "g", None, 0)))  # deleted
        self.assertEqual((yield a.acl_resources("LITERAL")), [])
        now_ms = int(reactor.seconds() * 1000)
        self.assertEqual((yield a.purge_acl_changes("PREFIXED", 15 * 60 * 1000, now_ms)), 0)
        self.assertEqual((yield a.purge_acl_changes("PREFIXED", 15 * 60 * 1000, now_ms + 3600 * 1000)), 2)
        self.assertEqual((yield a.acl_changes("PREFIXED")), [])

    @defer.inlineCallbacks
    def test_max_in_flight_requests_bounds_the_requests_sent_at_once(self):
        """zookeeper.max.in.flight.requests: 20 partition reads issued together, at most 2 unanswered."""
        zk = yield self.store(max_in_flight_requests=2)
        sent = zk._deferred
        in_flight, most = [0], [0]

        def counting(async_result):
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])

            def answered(result):
                in_flight[0] -= 1
                return result
            return sent(async_result).addBoth(answered)
        zk._deferred = counting
        self.assertEqual((yield zk.partition_states("none", range(20))), {})
        self.assertEqual(most[0], 2)

    @defer.inlineCallbacks
    def test_start_makes_the_paths_again_after_a_session_expired_meanwhile(self):
        """A session that expires while start() makes the persistent paths (a busy machine, a
        short session timeout) does not fail the start: the paths are made again."""
        from kazoo.client import KazooClient
        from kazoo.exceptions import SessionExpiredError

        hosts = self.connect.split("/", 1)[0]
        expired = []

        class Expiring(KazooClient):
            def ensure_path(self, path, acl=None):
                if not expired:
                    expired.append(path)
                    raise SessionExpiredError()
                return super().ensure_path(path, acl)

        zk = yield self.store(client=Expiring(hosts=hosts, timeout=4.0))
        self.assertEqual(len(expired), 1)
        for path in L.PERSISTENT_PATHS:
            self.assertIsNotNone(zk._client.exists(zk._p(path)))

    @defer.inlineCallbacks
    def test_a_read_whose_connection_dropped_is_sent_again(self):
        """A read answered ConnectionLoss (the connection dropped, the session lives on) is sent
        again: it failed the controller event that made it."""
        from kazoo.client import KazooClient
        from kazoo.exceptions import ConnectionLoss

        hosts = self.connect.split("/", 1)[0]
        lost = []

        class Dropping(KazooClient):
            def get_children_async(self, path, watch=None, include_data=False):
                if not lost:
                    lost.append(path)
                    result = self.handler.async_result()
                    result.set_exception(ConnectionLoss())
                    return result
                return super().get_children_async(path, watch, include_data)

        zk = yield self.store(client=Dropping(hosts=hosts, timeout=4.0))
        yield zk.register_broker(7, L.encode_broker(7, [("PLAINTEXT", "h", 9092)], {"PLAINTEXT": "PLAINTEXT"}))
        self.assertEqual((yield zk.broker_ids()), [7])
        self.assertEqual(len(lost), 1)


def _losing_client(hosts, lose):
    """A kazoo client that loses the answer of each request ``lose(request)`` picks (kazoo's
    serialization tuples: Create2, SetData, Delete, Transaction...) while ``client.left`` > 0:
    ZooKeeper gets and applies it, then the connection drops before the answer is handed on and
    the caller gets ConnectionLoss (the session lives on; kazoo reconnects). ``client.lost``
    lists the requests whose answer was lost."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import ConnectionLoss
    from kazoo.protocol.connection import _CONNECTION_DROP

    class Losing(KazooClient):
        left = 1

        def _call(self, request, async_object):
            if async_object is None or self.left <= 0 or not lose(request):
                return super()._call(request, async_object)
            self.left -= 1
            sent = self.handler.async_result()

            def answered(_):  # kazoo's thread: drop the connection, then lose the answer
                self.lost.append(request)
                KazooClient._call(self, _CONNECTION_DROP, None)
                async_object.set_exception(ConnectionLoss())
            sent.rawlink(answered)
            return super()._call(request, sent)

    quiet = logging.getLogger("tests.test_cluster_zk.kazoo")  # the drops' warnings are the test's doing
    quiet.propagate = False
    quiet.addHandler(logging.NullHandler())
    client = Losing(hosts=hosts, timeout=4.0, logger=quiet)
    client.lost = []
    return client


def _writes(kind, suffix):
    """``lose`` for requests of type ``kind`` (a transaction: holding one) on a path ending in ``suffix``."""
    def lose(request):
        ops = request.operations if type(request).__name__ == "Transaction" else [request]
        return any(type(op).__name__ == kind and op.path.endswith(suffix) for op in ops)
    return lose


class LostAnswerTests(StoreTestCase):
    """Writes whose answer the connection lost (ZooKeeper applied them) are sent again, and each
    kind tells its own first send from a conflict, as Kafka's KafkaZkClient does."""

    def losing(self, lose, left=1):
        client = _losing_client(self.connect.split("/", 1)[0], lose)
        client.left = left
        return self.store(client=client)

    @defer.inlineCallbacks
    def test_a_registration_whose_answer_was_lost_is_this_sessions_node(self):
        a = yield self.losing(_writes("Create2", "/brokers/ids/5"))
        epoch = yield a.register_broker(5, L.encode_broker(5, [("PLAINTEXT", "h", 1)], {"PLAINTEXT": "PLAINTEXT"}))
        self.assertEqual(len(a._client.lost), 1)
        b = yield self.store()
        _, stat = yield b._run(lambda: b._client.get_async(b._p(L.broker_path(5))))
        self.assertEqual((stat.czxid, stat.ephemeralOwner), (epoch, a._client.client_id[0]))
        self.assertEqual(((yield b.get_broker(5)).epoch, (yield b.broker_ids())), (epoch, [5]))

    @defer.inlineCallbacks
    def test_a_registration_against_another_sessions_node_fails_also_after_a_lost_answer(self):
        a = yield self.store()
        epoch = yield a.register_broker(5, L.encode_broker(5, [("PLAINTEXT", "h", 1)], {"PLAINTEXT": "PLAINTEXT"}))
        b = yield self.losing(_writes("Create2", "/brokers/ids/5"))
        with self.assertRaises(KafkaError) as e:
            yield b.register_broker(5, L.encode_broker(5, [("PLAINTEXT", "h", 2)], {"PLAINTEXT": "PLAINTEXT"}))
        self.assertEqual(e.exception.code, errors.BROKER_ID_NOT_REGISTERED)
        self.assertEqual(len(b._client.lost), 1)
        info = yield b.get_broker(5)
        self.assertEqual((info.epoch, info.endpoints), (epoch, {"PLAINTEXT": ("h", 1)}))

    @defer.inlineCallbacks
    def test_an_election_whose_answer_was_lost_is_won(self):
        a = yield self.losing(_writes("Create", L.CONTROLLER))
        self.assertEqual((yield a.elect_controller(1)), (1, 1))
        self.assertEqual(len(a._client.lost), 1)
        b = yield self.store()
        self.assertIsNone((yield b.elect_controller(2)))
        self.assertEqual((yield b.get_controller_id()), 1)

    @defer.inlineCallbacks
    def test_a_resignation_whose_answer_was_lost_leaves_the_next_controller(self):
        """The delete of /controller applied, its answer lost, and another broker elected before
        the resend: that broker's /controller (version 0 as every fresh one) stays; the resend is
        fenced by the controller epoch, as Kafka's deleteController."""
        a = yield self.losing(_writes("Delete", L.CONTROLLER), left=0)
        yield a.elect_controller(1)
        b = yield self.store()
        won = []
        run = a._run

        def run_after_b_won(call):  # the resend waits for b's election
            if a._client.lost and not won:
                won.append(None)
                return b.elect_controller(2).addCallback(lambda result: won.append(result) or run(call))
            return run(call)
        a._run = run_after_b_won
        a._client.left = 1
        yield a.resign_controller(1)
        self.assertEqual((len(a._client.lost), won[1:]), (1, [(2, 2)]))
        self.assertEqual((yield b.get_controller_id()), 2)

    @defer.inlineCallbacks
    def test_a_lost_conditional_partition_state_update_was_applied(self):
        a = yield self.losing(_writes("SetData", "/partitions/0/state"), left=0)
        _, epoch_zk_version = yield a.elect_controller(1)
        yield a.create_topic("t", bytes(range(16)), {0: [1, 2]}, {})
        state = LeaderAndIsr(leader=1, leader_epoch=0, isr=[1, 2], controller_epoch=1)
        created = yield a.create_partition_states(epoch_zk_version, "t", {0: state})
        a._client.left = 1
        shrunk = attr_evolve(created[0], isr=[1], leader_epoch=1)
        written = yield a.update_partition_states(epoch_zk_version, "t", {0: shrunk})
        self.assertEqual(len(a._client.lost), 1)
        self.assertFalse(isinstance(written[0], Failure), getattr(written[0], "getTraceback", lambda: "")())
        self.assertEqual(written[0], attr_evolve(shrunk, partition_epoch=1))
        self.assertEqual((yield a.partition_states("t", [0])), {0: written[0]})

    @defer.inlineCallbacks
    def test_a_lost_partition_state_update_still_meets_conflicts_and_the_epoch_fence(self):
        """BadVersion after a lost answer is this write only if the state holds its bytes; a
        deposed controller's resend is ControllerMovedError, whatever its first send did."""
        a = yield self.losing(_writes("SetData", "/partitions/0/state"), left=0)
        _, epoch_zk_version = yield a.elect_controller(1)
        yield a.create_topic("t", bytes(range(16)), {0: [1, 2]}, {})
        state = LeaderAndIsr(leader=1, leader_epoch=0, isr=[1, 2], controller_epoch=1)
        created = yield a.create_partition_states(epoch_zk_version, "t", {0: state})
        first = yield a.update_partition_states(epoch_zk_version, "t", {0: attr_evolve(created[0], isr=[1])})
        a._client.left = 1  # a write at the version read before: its lost answer was BadVersion
        stale = yield a.update_partition_states(epoch_zk_version, "t", {0: attr_evolve(created[0], isr=[2])})
        self.assertEqual(len(a._client.lost), 1)
        self.assertTrue(stale[0].check(BadVersionError))
        yield a.resign_controller(1)
        b = yield self.store()
        yield b.elect_controller(2)
        a._client.left = 1
        moved = yield a.update_partition_states(epoch_zk_version, "t", {0: attr_evolve(first[0], isr=[2])})
        self.assertEqual(len(a._client.lost), 2)
        self.assertTrue(moved[0].check(ControllerMovedError))
        self.assertEqual((yield b.partition_states("t", [0])), {0: first[0]})

    @defer.inlineCallbacks
    def test_a_deletion_whose_answer_was_lost_is_done(self):
        a = yield self.losing(_writes("Delete", "/brokers/topics/t"), left=0)
        _, epoch_zk_version = yield a.elect_controller(1)
        yield a.create_topic("t", bytes(range(16)), {0: [1]}, {})
        state = LeaderAndIsr(leader=1, leader_epoch=0, isr=[1], controller_epoch=1)
        yield a.create_partition_states(epoch_zk_version, "t", {0: state})
        yield a.mark_topic_for_deletion("t")
        a._client.left = 1
        yield a.delete_topic(epoch_zk_version, "t")
        self.assertEqual(len(a._client.lost), 1)
        self.assertEqual(((yield a.topics()), (yield a.topics_to_delete())), ([], []))
        self.assertEqual((yield a.topic_configs("t")), {})

    @defer.inlineCallbacks
    def test_a_topic_creation_whose_answer_was_lost_is_not_an_existing_topic(self):
        a = yield self.losing(_writes("Create", "/brokers/topics/t"))
        yield a.create_topic("t", bytes(range(16)), {0: [1]}, {})
        self.assertEqual(len(a._client.lost), 1)
        self.assertEqual((yield a.topic_assignment("t")), (bytes(range(16)), {0: [1]}))
        with self.assertRaises(KafkaError) as e:  # another topic id: another creation
            yield a.create_topic("t", bytes(range(1, 17)), {0: [1]}, {})
        self.assertEqual(e.exception.code, errors.TOPIC_ALREADY_EXISTS)

    @defer.inlineCallbacks
    def test_an_acl_write_whose_answer_was_lost_is_notified(self):
        a = yield self.losing(_writes("SetData", "/kafka-acl/Topic/x"), left=0)
        self.assertTrue((yield a.write_resource_acls("LITERAL", "Topic", "x", b"one", -1)))
        a._client.left = 1
        self.assertTrue((yield a.write_resource_acls("LITERAL", "Topic", "x", b"two", 0)))
        self.assertEqual(len(a._client.lost), 1)
        self.assertEqual((yield a.resource_acls("LITERAL", "Topic", "x")), (b"two", 1))
        self.assertEqual([c[1:] for c in (yield a.acl_changes("LITERAL"))], [("Topic", "x")] * 2)


def attr_evolve(state, **changes):
    import attr

    return attr.evolve(state, **changes)


class ZooKeeperServerFixtureTests(unittest.SynchronousTestCase):
    """The fixture never mistakes another ZooKeeper on its port for its own: parallel trial
    workers pick free ports that a neighbour may take before Java binds."""

    def test_a_port_taken_meanwhile_is_picked_again_and_a_given_one_refused(self):
        server = zookeeper()
        real_free_port = testing._free_port
        picks = [server.port]

        def free_port(host):
            return picks.pop() if picks else real_free_port(host)
        self.patch(testing, "_free_port", free_port)
        mine = testing.ZooKeeperServer()
        self.addCleanup(mine.close)
        mine.start()
        self.assertNotEqual(mine.port, server.port)
        self.assertIn(os.path.join(mine.work_dir, "data"), testing.zookeeper_command(mine.host, mine.port, "conf"))
        given = testing.ZooKeeperServer(port=server.port)
        self.addCleanup(given.close)
        with self.assertRaises(testing.BrokerStartError) as e:
            given.start()
        self.assertIn("another ZooKeeper answers there", str(e.exception))
