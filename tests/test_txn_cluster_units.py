"""The transaction coordinator's cluster pieces in process with task.Clock and fakes: markers
routed to each partition's leader (local append, WriteTxnMarkers to the others, an unreachable or
unknown leader retriable), KIP-890 verification asked of another broker (AddPartitionsToTxn v4
verify_only; its answer, top-level error and failure mapped), and the coordinator on real
storage resigning and re-electing a state partition (ids unloaded and reloaded, the new leader
epoch on the markers, retries until every leader took its marker, a fenced marker ending the
attempt)."""

import attr
from twisted.internet import defer
from twisted.trial import unittest

from kafkatw.coordinator.txn import metadata as tm
from kafkatw.coordinator.txn.marker_channel import TransactionMarkerChannelManager
from kafkatw.coordinator.txn.verification import RemoteVerifier
from kafkatw.protocol import errors
from kafkatw.protocol.messages import AddPartitionsToTxnResponse, WriteTxnMarkersResponse
from kafkatw.server.replica_manager import PartitionResponse
from tests import test_txn_coordinator as single

WTM = WriteTxnMarkersResponse
APT = AddPartitionsToTxnResponse


@attr.s
class Broker:
    node_id = attr.ib()
    endpoints = attr.ib()


class FakeMetadata:
    def __init__(self, leaders):
        self.leaders = leaders  # (topic, partition) -> leader id
        self.brokers = {i: Broker(i, {"INTERNAL": ("h%d" % i, 9000 + i)}) for i in (1, 2, 3)}

    def leader_state(self, topic, partition):
        leader = self.leaders.get((topic, partition))
        return None if leader is None else (b"id", leader, 7, False)

    def live_broker(self, node_id):
        return self.brokers.get(node_id)


class FakeClient:
    """Records sends; each answer is a Deferred the test fires."""

    def __init__(self):
        self.sent = []

    def send(self, key, host, port, request, version, timeout_ms=None):
        d = defer.Deferred()
        self.sent.append((key, host, port, request, version, d))
        return d


class FakeReplicaManager:
    node_id = 1

    def __init__(self, code=errors.NONE):
        self.code = code
        self.appends = []

    def append_records(self, timeout_ms, acks, entries, internal_topics_allowed=False, origin=None):
        self.appends.append((timeout_ms, acks, sorted(entries)))
        return defer.succeed({tp: PartitionResponse(self.code) for tp in entries})


def marker_response(producer_id, codes):
    by_topic = {}
    for (t, p), code in codes.items():
        by_topic.setdefault(t, []).append(WTM.WritableTxnMarkerPartitionResult(
            partition_index=p, error_code=code))
    return WTM(markers=[WTM.WritableTxnMarkerResult(producer_id=producer_id, topics=[
        WTM.WritableTxnMarkerTopicResult(name=t, partitions=ps) for t, ps in by_topic.items()])])


class MarkerChannelTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.metadata = FakeMetadata({("d", 0): 1, ("d", 1): 2, ("d", 2): 2, ("d", 3): 3,
                                      ("d", 4): -1})
        self.rm = FakeReplicaManager()
        self.client = FakeClient()
        self.channel = TransactionMarkerChannelManager(self.metadata, self.rm, None, 1, self.client,
                                                       "INTERNAL", request_timeout_ms=1234)

    def send(self, partitions):
        return self.channel.send_markers(42, 3, 7, True, partitions, 1000)

    def test_routed_by_leader(self):
        d = self.send([("d", p) for p in range(5)])
        self.assertEqual(self.rm.appends, [(1234, -1, [("d", 0)])])  # local, acks=all
        self.assertEqual([(k, h, port, v) for k, h, port, _, v, _ in self.client.sent],
                         [(2, "h2", 9002, 1), (3, "h3", 9003, 1)])
        marker = self.client.sent[0][3].markers[0]
        self.assertEqual((marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                          marker.transaction_result), (42, 3, 7, True))
        self.assertEqual([(t.name, t.partition_indexes) for t in marker.topics], [("d", [1, 2])])
        self.assertNoResult(d)
        self.client.sent[0][5].callback(marker_response(42, {("d", 1): errors.NONE,
                                                             ("d", 2): errors.NOT_LEADER_OR_FOLLOWER}))
        self.client.sent[1][5].callback(marker_response(42, {("d", 3): errors.NONE}))
        self.assertEqual(self.successResultOf(d), {
            ("d", 0): errors.NONE, ("d", 1): errors.NONE, ("d", 2): errors.NOT_LEADER_OR_FOLLOWER,
            ("d", 3): errors.NONE, ("d", 4): errors.NOT_LEADER_OR_FOLLOWER})

    def test_unreachable_or_unknown_broker_is_retriable(self):
        del self.metadata.brokers[3]
        d = self.send([("d", 1), ("d", 3)])
        self.assertEqual(len(self.client.sent), 1)
        self.client.sent[0][5].errback(ConnectionError("gone"))
        self.assertEqual(self.successResultOf(d), {("d", 1): errors.NOT_LEADER_OR_FOLLOWER,
                                                   ("d", 3): errors.NOT_LEADER_OR_FOLLOWER})

    def test_partition_missing_from_the_answer_is_an_error(self):
        d = self.send([("d", 1), ("d", 2)])
        self.client.sent[0][5].callback(marker_response(42, {("d", 1): errors.NONE}))
        self.assertEqual(self.successResultOf(d), {("d", 1): errors.NONE,
                                                   ("d", 2): errors.UNKNOWN_SERVER_ERROR})


class VerifierTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.client = FakeClient()
        self.verifier = RemoteVerifier(FakeMetadata({}), self.client, "INTERNAL", 500)

    def answer(self, codes, error=errors.NONE, tid="t"):
        return APT(throttle_time_ms=0, error_code=error, results_by_transaction=[
            APT.AddPartitionsToTxnResult(transactional_id=tid, topic_results=[
                APT.AddPartitionsToTxnTopicResult(name="d", results_by_partition=[
                    APT.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=c)
                    for (_, p), c in codes.items()])])])

    def test_request_and_answer(self):
        d = self.verifier.verify(2, "t", 42, 3, [("d", 0), ("d", 1)])
        key, host, port, request, version, answer = self.client.sent[0]
        self.assertEqual((key, host, port, version), (("txn-verify", 2), "h2", 9002, 4))
        txn = request.transactions[0]
        self.assertEqual((txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.verify_only),
                         ("t", 42, 3, True))
        self.assertEqual([(t.name, t.partitions) for t in txn.topics], [("d", [0, 1])])
        answer.callback(self.answer({("d", 0): errors.NONE, ("d", 1): errors.INVALID_TXN_STATE}))
        self.assertEqual(self.successResultOf(d), {("d", 0): errors.NONE,
                                                   ("d", 1): errors.INVALID_TXN_STATE})

    def test_top_level_error_failure_and_unknown_broker(self):
        d = self.verifier.verify(2, "t", 42, 3, [("d", 0)])
        self.client.sent[0][5].callback(self.answer({}, errors.CLUSTER_AUTHORIZATION_FAILED))
        self.assertEqual(self.successResultOf(d), {("d", 0): errors.CLUSTER_AUTHORIZATION_FAILED})
        d = self.verifier.verify(3, "t", 42, 3, [("d", 0)])
        self.client.sent[1][5].errback(ConnectionError("gone"))
        self.assertEqual(self.successResultOf(d), {("d", 0): errors.NETWORK_EXCEPTION})
        d = self.verifier.verify(9, "t", 42, 3, [("d", 0)])
        self.assertEqual(self.successResultOf(d), {("d", 0): errors.COORDINATOR_NOT_AVAILABLE})
        self.assertEqual(len(self.client.sent), 2)


class ScriptedChannel:
    """A marker channel answering from a script: one {tp: code} per attempt (then NONE)."""

    def __init__(self, script):
        self.script = list(script)
        self.attempts = []

    def send_markers(self, producer_id, producer_epoch, coordinator_epoch, commit, partitions, now_ms):
        self.attempts.append((coordinator_epoch, sorted(partitions)))
        codes = self.script.pop(0) if self.script else {}
        return defer.succeed({tp: codes.get(tp, errors.NONE) for tp in partitions})

    def close(self):
        return defer.succeed(None)


class CoordinatorOwnershipTests(unittest.TestCase):
    """On the single-node Node of test_txn_coordinator, calling the election callbacks as the
    seam does in a cluster."""

    setUp = single.CoordinatorTests.setUp
    turns = single.CoordinatorTests.turns
    result = single.CoordinatorTests.result
    init = single.CoordinatorTests.init
    data = single.CoordinatorTests.data

    def ongoing(self, tid="tx"):
        _, pid, epoch = self.init(tid)
        self.result(self.node.txn.handle_add_partitions(tid, pid, epoch, [("d", 0), ("d", 1)]))
        self.data(pid, epoch)
        return pid, epoch

    def test_resigned_partition_unloads_and_election_reloads(self):
        txn = self.node.txn
        pid, epoch = self.ongoing()
        p = txn.partition_for("tx")
        txn.on_resignation(p, 4)
        self.assertNotIn("tx", txn.transactions)
        self.assertEqual(self.result(txn.handle_end_transaction("tx", pid, epoch, True)),
                         errors.NOT_COORDINATOR)
        self.assertEqual(self.init()[0], errors.NOT_COORDINATOR)
        txn.on_election(p, 5)
        self.assertEqual(self.init()[0], errors.COORDINATOR_LOAD_IN_PROGRESS)
        self.turns()
        self.assertEqual(txn.transactions["tx"].state, tm.ONGOING)
        self.assertEqual(txn.coordinator_epoch("tx"), 5)
        channel = txn.marker_channel = ScriptedChannel([])
        self.assertEqual(self.result(txn.handle_end_transaction("tx", pid, epoch, True)), errors.NONE)
        self.turns()
        self.assertEqual(channel.attempts, [(5, [("d", 0), ("d", 1)])])
        self.assertEqual(txn.transactions["tx"].state, tm.COMPLETE_COMMIT)

    def test_markers_retried_until_every_leader_took_them(self):
        txn = self.node.txn
        pid, epoch = self.ongoing()
        channel = txn.marker_channel = ScriptedChannel([
            {("d", 0): errors.NOT_LEADER_OR_FOLLOWER, ("d", 1): errors.NONE},
            {("d", 0): errors.NOT_ENOUGH_REPLICAS}])
        self.result(txn.handle_end_transaction("tx", pid, epoch, True))
        self.turns()
        self.assertEqual(txn.transactions["tx"].state, tm.PREPARE_COMMIT)
        self.clock.advance(0.1)
        self.turns()
        self.assertEqual(txn.transactions["tx"].state, tm.PREPARE_COMMIT)
        self.clock.advance(0.1)
        self.turns()
        self.assertEqual([parts for _, parts in channel.attempts],
                         [[("d", 0), ("d", 1)], [("d", 0)], [("d", 0)]])
        self.assertEqual(txn.transactions["tx"].state, tm.COMPLETE_COMMIT)

    def test_fenced_marker_ends_this_coordinators_attempt(self):
        txn = self.node.txn
        pid, epoch = self.ongoing()
        channel = txn.marker_channel = ScriptedChannel([
            {("d", 1): errors.TRANSACTION_COORDINATOR_FENCED}])
        self.result(txn.handle_end_transaction("tx", pid, epoch, True))
        self.turns()
        self.clock.advance(1)
        self.turns()
        self.assertEqual(len(channel.attempts), 1)
        self.assertEqual(txn.transactions["tx"].state, tm.PREPARE_COMMIT)

    def test_resignation_during_load_stops_it(self):
        txn = self.node.txn
        self.ongoing()
        p = txn.partition_for("tx")
        txn.on_resignation(p, 4)
        txn.on_election(p, 5)
        self.assertIn(p, txn.loading_partitions)
        # start the load without running its steps, then resign in the middle of it
        txn._load_call.cancel()
        txn._load_call = None
        txn._load_next()
        self.assertIsNotNone(txn._load_task)
        self.assertEqual(txn._load_partition_id, p)
        txn.on_resignation(p, 6)
        self.assertIsNone(txn._load_task)
        self.turns()
        self.assertNotIn("tx", txn.transactions)
        self.assertNotIn(p, txn.owned_partitions)
        self.assertEqual(txn.handle_describe_transactions("tx")[0], errors.NOT_COORDINATOR)

    def test_started_again_after_shutdown_loads_afresh(self):
        txn = self.node.txn
        self.ongoing()
        txn.shutdown()
        txn.startup()
        self.assertEqual(txn.transactions, {})
        self.assertIn(txn.partition_for("tx"), txn.loading_partitions)
        self.turns()
        self.assertEqual(txn.transactions["tx"].state, tm.ONGOING)
