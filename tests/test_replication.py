"""Replication in one reactor on task.Clock: three "mini brokers" (each its own log dir,
LogManager, ReplicaManager in cluster mode, KafkaApis), the test playing the controller by
calling ``become_leader_or_follower`` and answering AlterPartition like ZooKeeper would
(conditional on the partition epoch). Followers fetch through a client that hands each
request to the leader's KafkaApis through the codec both ways, as a socket would.

What it proves: follower fetch and append, HW = min LEO over the ISR (learnt by followers),
acks=all waiting in the purgatory (NOT_ENOUGH_REPLICAS, _AFTER_APPEND, REQUEST_TIMED_OUT,
NOT_LEADER_OR_FOLLOWER), ISR shrink/expand through AlterPartition, DivergingEpoch truncation
after a leader change (never to the HW), producer state rebuilt on followers, StopReplica.
"""

import os

import attr
from twisted.internet import defer, task
from twisted.trial import unittest
from zope.interface import implementer
from zope.interface.verify import verifyObject

from kafkatw.cluster.metadata import ClusterMetadata
from kafkatw.config import KafkaConfig
from kafkatw.network.request import Request, RequestContext, Response
from kafkatw.protocol import errors, messages
from kafkatw.protocol.errors import KafkaError
from kafkatw.protocol.parts import join_parts
from kafkatw.protocol.records import Record, build_batch, iter_batch_headers
from kafkatw.server.alter_partition import LeaderAndIsr
from kafkatw.server.apis import KafkaApis
from kafkatw.server.interfaces import IAlterPartitionManager
from kafkatw.server.replica_fetcher import FetcherSettings, ReplicaFetcherManager, fetcher_id
from kafkatw.server.replica_manager import (
    FetchParams,
    InitialFetchState,
    PartitionData,
    ReplicaManager,
)
from kafkatw.storage.manager import LogManager
from kafkatw.storage.offsets import FetchIsolation

TOPIC = "t"
TOPIC_ID = bytes(range(1, 17))
LeaderAndIsrPartitionState = messages.LeaderAndIsrRequest.LeaderAndIsrPartitionState


class Unreachable(Exception):
    """What the fake client fails with for a stopped broker (NodeUnavailableError's role)."""


class DirectClient:
    """KafkaNetworkClient's contract over direct calls: the request and its response each
    go through the codec; a stopped broker fails the send."""

    def __init__(self, cluster, owner):
        self.cluster = cluster
        self.owner = owner
        self.sent = []  # (node key, api key)
        self.requests = []  # what was sent, decoded as the receiver reads it
        self.closed = []
        self.parked = []  # sends of a paused owner: (Deferred, args)

    def send(self, node_id, host, port, request, version):
        if self.owner.paused:  # SIGSTOP: nothing leaves until it resumes
            d = defer.Deferred()
            self.parked.append((d, (node_id, host, port, request, version)))
            return d
        return self._send(node_id, host, port, request, version)

    def resume(self):
        parked, self.parked = self.parked, []
        for d, args in parked:
            self._send(*args).chainDeferred(d)

    def _send(self, node_id, host, port, request, version):
        self.sent.append((node_id, request.API_KEY))
        broker = self.cluster.by_port.get(port)
        if broker is None or not broker.up:
            return defer.fail(Unreachable("broker at port %d is down" % port))
        body = type(request).decode(memoryview(bytearray(request.encode_bytes(version))), version)
        self.requests.append(body)
        ctx = RequestContext(connection_id="c-%s" % (node_id,), listener_name="PLAINTEXT",
                             security_protocol="PLAINTEXT")
        req = Request(header=None, api_key=request.API_KEY, api_version=version,
                      correlation_id=1, client_id="replica", body=body, size=0, context=ctx)

        def decode(result):
            if not broker.up:
                raise Unreachable("broker at port %d went down" % port)
            body = result.body if isinstance(result, Response) else result
            cls = getattr(body, "MESSAGE", type(body))
            return cls.decode(memoryview(bytearray(join_parts(body.encode(version)))), version)
        return broker.apis.handle(req).addCallback(decode)

    def close(self, node_id):
        self.closed.append(node_id)

    def close_all(self):
        return defer.succeed(None)


@attr.s
class ZkPartition:
    leader = attr.ib()
    leader_epoch = attr.ib()
    isr = attr.ib()
    partition_epoch = attr.ib()
    replicas = attr.ib()


@implementer(IAlterPartitionManager)
class FakeController:
    """AlterPartition as the controller answers it: applied only at the current leader
    epoch and partition epoch, which it then bumps (ZooKeeper's zkVersion)."""

    def __init__(self, state):
        self.state = state  # (topic, partition) -> ZkPartition
        self.requests = []
        self.hold = False  # answer later (tests of the pending state)
        self.held = []

    def start(self):
        pass

    def shutdown(self):
        pass

    def submit(self, topic, partition, topic_id, leader_epoch, new_isr, partition_epoch,
               leader_recovery_state=0):
        self.requests.append((topic, partition, list(new_isr), partition_epoch))
        d = defer.Deferred()
        if self.hold:
            self.held.append((d, topic, partition, leader_epoch, new_isr, partition_epoch))
        else:
            self._answer(d, topic, partition, leader_epoch, new_isr, partition_epoch)
        return d

    def release(self):
        held, self.held = self.held, []
        for args in held:
            self._answer(*args)

    def _answer(self, d, topic, partition, leader_epoch, new_isr, partition_epoch):
        zk = self.state[(topic, partition)]
        if leader_epoch != zk.leader_epoch:
            d.errback(KafkaError(errors.FENCED_LEADER_EPOCH))
        elif partition_epoch != zk.partition_epoch:
            d.errback(KafkaError(errors.INVALID_UPDATE_VERSION))
        else:
            zk.isr = list(new_isr)
            zk.partition_epoch += 1
            d.callback(LeaderAndIsr(zk.leader, zk.leader_epoch, list(zk.isr),
                                    zk.partition_epoch))


class MiniBroker:
    def __init__(self, cluster, node_id, directory, clock, props):
        self.node_id = node_id
        self.port = 9000 + node_id
        self.up = True
        self.paused = False
        self.cluster = cluster
        config = KafkaConfig.from_properties(dict({
            "node.id": str(node_id), "log.dirs": directory,
            "listeners": "PLAINTEXT://127.0.0.1:%d" % self.port}, **props))
        self.config = config
        self.log_manager = LogManager([directory], config.values(), clock)
        self.metadata = ClusterMetadata([directory], node_id, cluster_id="c" * 22)
        self.client = DirectClient(cluster, self)
        self.rm = ReplicaManager(self.log_manager, self.metadata, clock, config,
                                 cluster_mode=True, alter_partition_manager=cluster.controller)
        self.rm.broker_epoch = 100 + node_id
        self.rm.fetcher_manager = ReplicaFetcherManager(
            self.rm, self.client, clock, FetcherSettings.from_config(config, node_id))
        self.apis = KafkaApis(config, self.metadata, self.rm, clock=clock,
                              log_manager=self.log_manager)
        self.rm.start()

    def log(self, partition=0):
        return self.log_manager.get_log(TOPIC, partition)

    def pause(self):
        """SIGSTOP: it neither answers nor sends."""
        self.paused = True
        self.up = False

    def resume(self):
        self.paused = False
        self.up = True
        self.client.resume()


class ReplicationTestBase(unittest.TestCase):
    brokers = 3
    min_isr = 2
    lag_ms = 10000

    def setUp(self):
        self.clock = task.Clock()
        self.state = {}
        self.controller = FakeController(self.state)
        self.by_port = {}
        self.nodes = {}
        self.controller_epoch = 1
        props = {"replica.lag.time.max.ms": str(self.lag_ms), "replica.fetch.wait.max.ms": "500",
                 "replica.fetch.backoff.ms": "100",
                 "min.insync.replicas": str(self.min_isr)}
        for node_id in range(1, self.brokers + 1):
            directory = self.mktemp()
            os.makedirs(directory)
            b = MiniBroker(self, node_id, directory, self.clock, props)
            self.by_port[b.port] = b
            self.nodes[node_id] = b
            self.successResultOf(b.metadata.create_topic(TOPIC, 2, topic_id=TOPIC_ID))
        self.addCleanup(self.shutdown)

    def shutdown(self):
        for b in self.nodes.values():
            b.rm.shutdown()
            b.log_manager.shutdown()

    # -- the controller's part --------------------------------------------------------------

    def elect(self, leader, isr, replicas=(1, 2, 3), partition=0, to=None, epoch=None):
        """Write the new state and send LeaderAndIsr to ``to`` (default: every replica)."""
        tp = (TOPIC, partition)
        zk = self.state.get(tp)
        if zk is None:
            zk = self.state[tp] = ZkPartition(leader, 0, list(isr), 0, list(replicas))
        else:
            zk.leader, zk.isr, zk.replicas = leader, list(isr), list(replicas)
            zk.leader_epoch = epoch if epoch is not None else zk.leader_epoch + 1
            zk.partition_epoch += 1
        self.send_leader_and_isr(tp, to)
        return zk

    def send_leader_and_isr(self, tp, to=None):
        zk = self.state[tp]
        live = {b.node_id: ("127.0.0.1", b.port) for b in self.nodes.values() if b.up}
        results = {}
        for node_id in (to if to is not None else zk.replicas):
            b = self.nodes[node_id]
            if not b.up:
                continue
            st = LeaderAndIsrPartitionState(
                topic_name=tp[0], partition_index=tp[1], controller_epoch=self.controller_epoch,
                leader=zk.leader, leader_epoch=zk.leader_epoch, isr=list(zk.isr),
                partition_epoch=zk.partition_epoch, replicas=list(zk.replicas), is_new=False)
            results[node_id] = self.successResultOf(b.rm.become_leader_or_follower(
                0, self.controller_epoch, [st], {TOPIC: TOPIC_ID},
                {k: v for k, v in live.items() if k == zk.leader}))
        return results

    # -- clients ----------------------------------------------------------------------------

    def produce(self, node, values, acks=-1, partition=0, timeout_ms=30000, **batch_kw):
        buf = bytearray(build_batch([Record(value=v, key=None) for v in values],
                                    base_timestamp=int(self.clock.seconds() * 1000),
                                    **batch_kw))
        return self.nodes[node].rm.append_records(timeout_ms, acks, {(TOPIC, partition): buf})

    def pump(self, seconds=0.0, step=0.01):
        """Run the fetch loops: timers due within ``seconds`` (at least one turn)."""
        steps = max(1, int(round(seconds / step)))
        for _ in range(steps):
            self.clock.advance(step)

    def pump_until(self, condition, seconds=10.0, step=0.01):
        for _ in range(int(seconds / step)):
            if condition():
                return
            self.clock.advance(step)
        self.assertTrue(condition(), "condition not met within %.1f s of clock" % seconds)

    def values(self, node, partition=0, isolation=FetchIsolation.LOG_END):
        """[(offset, leader epoch of its batch, value)] of a broker's log."""
        lg = self.nodes[node].log(partition)
        info = lg.read(lg.log_start_offset, 1 << 24, isolation, True)
        data = info.records.read() if hasattr(info.records, "read") else bytes(info.records)
        out = []
        from kafkatw.protocol.records import decode_batch
        for pos, h in iter_batch_headers(data):
            _, recs = decode_batch(data, pos)
            for r in recs:
                out.append((r.offset, h.partition_leader_epoch, bytes(r.value)))
        return out

    def segment_bytes(self, node, partition=0):
        lg = self.nodes[node].log(partition)
        out = b""
        for seg in lg.segments:
            with open(seg.log.path, "rb") as f:
                out += f.read()
        return out


class FollowerFetchTests(ReplicationTestBase):

    def test_followers_replicate_and_hw_is_min_leo_over_isr(self):
        self.elect(1, [1, 2, 3])
        self.pump(0.1)
        d = self.produce(1, [b"a", b"b", b"c"])
        self.pump_until(lambda: d.called)  # (the fake client answers within the call)
        result = self.successResultOf(d)[(TOPIC, 0)]
        self.assertEqual((result.error_code, result.base_offset), (errors.NONE, 0))
        leader = self.nodes[1].log()
        self.assertEqual((leader.log_end_offset, leader.high_watermark), (3, 3))
        # followers have the same bytes and learn the HW from the next fetch response
        self.pump_until(lambda: all(self.nodes[n].log().high_watermark == 3 for n in (2, 3)))
        for n in (2, 3):
            self.assertEqual(self.segment_bytes(n), self.segment_bytes(1))
            self.assertEqual([v for _, _, v in self.values(n)], [b"a", b"b", b"c"])
            self.assertEqual(self.nodes[n].log().leader_epoch_cache.entries(), [(0, 0)])

    def test_a_follower_fetch_from_no_replica_of_the_partition_is_an_error(self):
        """Kafka's followerReplicaOrThrow, before the read: a follower fetch from a broker
        outside the partition's replicas gets UNKNOWN_LEADER_EPOCH when it names a leader
        epoch (the leader does not know that (replica, epoch) yet: the follower backs off and
        retries), NOT_LEADER_OR_FOLLOWER without one; no records, offsets unknown (-1)."""
        self.elect(1, [1, 2], replicas=(1, 2))
        self.produce(1, [b"a"], acks=1)
        rm = self.nodes[1].rm
        for epoch, error in ((0, errors.UNKNOWN_LEADER_EPOCH), (-1, errors.NOT_LEADER_OR_FOLLOWER)):
            params = FetchParams(replica_id=3, max_wait_ms=0)
            d = rm.fetch_messages(params, [((TOPIC, 0), PartitionData(0, current_leader_epoch=epoch))])
            [(tp, data)] = self.successResultOf(d)
            self.assertEqual((data.error, len(data.records), data.high_watermark), (error, 0, -1))
        # the partition's replicas still read
        d = rm.fetch_messages(FetchParams(replica_id=2, max_wait_ms=0), [((TOPIC, 0), PartitionData(0))])
        [(tp, data)] = self.successResultOf(d)
        self.assertEqual(data.error, errors.NONE)

    def test_consumer_parked_at_the_hw_is_answered_when_followers_move_it(self):
        self.elect(1, [1, 2, 3])
        for n in (2, 3):
            self.nodes[n].pause()
        params = FetchParams(replica_id=-1, max_wait_ms=5000, min_bytes=1)
        parked = self.nodes[1].rm.fetch_messages(params, [((TOPIC, 0), PartitionData(0))])
        self.produce(1, [b"a", b"b"], acks=1)
        self.clock.advance(1)
        self.assertNoResult(parked)  # the records are there, but above the HW
        for n in (2, 3):
            self.nodes[n].resume()
        self.pump_until(lambda: parked.called, seconds=4)
        [(tp, data)] = self.successResultOf(parked)
        self.assertEqual((data.error, data.high_watermark), (errors.NONE, 2))
        self.assertGreater(len(data.records), 0)

    def test_acks_all_is_answered_in_the_turn_the_followers_fetch(self):
        """No reactor turn between the leader's append and the acks=all answer while each
        follower's fetch is answered within the call (as the fake client does): the parked
        follower fetches complete on the append, each follower appends and sends its next
        fetch at once, and that fetch moves the HW and completes the DelayedProduce. A turn
        added anywhere in that chain delays every acks=all produce (bench.replication)."""
        self.elect(1, [1, 2, 3])
        self.pump(0.1)  # both followers' fetches parked at the leader
        for i in range(3):
            d = self.produce(1, [b"v%d" % i])
            r = self.successResultOf(d)[(TOPIC, 0)]  # no clock advance in between
            self.assertEqual((r.error_code, r.base_offset), (errors.NONE, i))
            self.assertEqual([self.nodes[n].log().log_end_offset for n in (1, 2, 3)],
                             [i + 1] * 3)
            self.assertEqual(self.nodes[1].log().high_watermark, i + 1)

    def test_hw_waits_for_the_slowest_isr_member(self):
        self.elect(1, [1, 2, 3])
        self.pump(0.1)
        self.nodes[3].up = False  # its fetches stop reaching anyone
        self.nodes[3].rm.fetcher_manager.shutdown()
        d = self.produce(1, [b"x"])
        self.pump(2)
        leader = self.nodes[1].log()
        self.assertEqual((leader.log_end_offset, leader.high_watermark), (1, 0))
        self.assertEqual(self.nodes[2].log().log_end_offset, 1)
        self.assertNoResult(d)
        # the consumer's view is bounded by the HW
        self.assertEqual(self.values(1, isolation=FetchIsolation.HIGH_WATERMARK), [])

    def test_acks_1_answers_at_the_append(self):
        self.elect(1, [1, 2, 3])
        d = self.produce(1, [b"x"], acks=1)
        self.assertEqual(self.successResultOf(d)[(TOPIC, 0)].error_code, errors.NONE)

    def test_produce_to_a_follower_is_refused(self):
        self.elect(1, [1, 2, 3])
        r = self.successResultOf(self.produce(2, [b"x"], acks=1))[(TOPIC, 0)]
        self.assertEqual(r.error_code, errors.NOT_LEADER_OR_FOLLOWER)

    def test_an_answer_after_shutdown_is_dropped(self):
        self.elect(1, [1, 2, 3])
        self.pump(0.1)
        follower = self.nodes[2]
        follower.rm.fetcher_manager.shutdown()  # its fetch is parked at the leader
        self.produce(1, [b"a"], acks=1)  # which answers it now, after the shutdown
        self.pump(0.1)
        self.assertEqual(follower.log().log_end_offset, 0)
        self.assertEqual(self.flushLoggedErrors(), [])

    def test_a_leader_at_a_new_address_keeps_every_partition_fetched(self):
        self.elect(1, [1, 2, 3], partition=0)
        self.elect(1, [1, 2, 3], partition=1)
        manager = self.nodes[2].rm.fetcher_manager
        self.assertEqual(sorted(manager.fetchers[(1, 0)].partitions), [(TOPIC, 0), (TOPIC, 1)])
        leader = self.nodes[1]
        del self.by_port[leader.port]
        leader.port += 100  # restarted on another port
        self.by_port[leader.port] = leader
        self.elect(1, [1, 2, 3], partition=0)
        fetcher = manager.fetchers[(1, 0)]
        self.assertEqual(fetcher.endpoint, ("127.0.0.1", leader.port))
        self.assertEqual(sorted(fetcher.partitions), [(TOPIC, 0), (TOPIC, 1)])
        d = self.produce(1, [b"p1"], partition=1)
        self.pump_until(lambda: d.called)
        self.assertEqual(self.nodes[2].log(1).log_end_offset, 1)

    def test_fetcher_ids_spread_partitions(self):
        self.assertEqual(fetcher_id("t", 0, 1), 0)
        ids = {fetcher_id("topic", p, 3) for p in range(20)}
        self.assertEqual(ids, {0, 1, 2})

    def test_follower_fetches_follow_the_replica_configs(self):
        self.elect(1, [1, 2, 3])
        self.pump(0.1)
        fetches = [r for r in self.nodes[2].client.requests if r.API_KEY == messages.FetchRequest.API_KEY]
        self.assertTrue(fetches)
        r = fetches[-1]
        # setUp: replica.fetch.wait.max.ms 500, the rest Kafka's defaults
        self.assertEqual((r.replica_state.replica_id, r.max_wait_ms, r.min_bytes, r.max_bytes),
                         (2, 500, 1, 10 * 1024 * 1024))
        self.assertEqual([p.partition_max_bytes for t in r.topics for p in t.partitions],
                         [1024 * 1024])

    def test_a_consumer_with_client_metadata_reads_a_follower_at_its_leader_epoch(self):
        from kafkatw.server.replica_selector import ClientMetadata
        self.elect(1, [1, 2, 3])
        self.elect(1, [1, 2, 3])  # leader epoch 1
        rm = self.nodes[2].rm
        rack = FetchParams(replica_id=-1, client_metadata=ClientMetadata(rack_id="r2"))

        def look_up(params, epoch, partition=0):
            lg, error, part = rm.fetch_log_or_error(params, TOPIC, partition, TOPIC_ID, epoch)
            return (lg is not None, error, part is not None)
        self.assertEqual(look_up(rack, 1), (True, errors.NONE, True))
        self.assertEqual(look_up(rack, -1), (True, errors.NONE, True))
        self.assertEqual(look_up(rack, 0), (False, errors.FENCED_LEADER_EPOCH, False))
        self.assertEqual(look_up(rack, 2), (False, errors.UNKNOWN_LEADER_EPOCH, False))
        self.assertEqual(look_up(rack, 1, partition=5), (False, errors.UNKNOWN_TOPIC_OR_PARTITION, False))
        self.assertEqual(look_up(FetchParams(replica_id=-1), 1),
                         (False, errors.NOT_LEADER_OR_FOLLOWER, False))

    def test_fetcher_settings_and_client_come_from_the_replica_configs(self):
        config = KafkaConfig.from_properties({
            "replica.fetch.wait.max.ms": "250", "replica.fetch.min.bytes": "7",
            "replica.fetch.response.max.bytes": "5000", "replica.fetch.max.bytes": "3000",
            "replica.fetch.backoff.ms": "40", "num.replica.fetchers": "3",
            "replica.socket.timeout.ms": "6000"})
        manager = ReplicaFetcherManager.from_config(config, self.nodes[1].rm, self.clock)
        self.assertEqual(manager.settings, FetcherSettings(
            broker_id=1, max_wait_ms=250, min_bytes=7, max_bytes=5000, partition_max_bytes=3000,
            backoff_ms=40, num_fetchers=3))
        self.assertEqual(manager.client.request_timeout_ms, 6000)

    def test_verify_alter_partition_manager_contract(self):
        self.assertTrue(verifyObject(IAlterPartitionManager, self.controller))


class AcksAllTests(ReplicationTestBase):

    def test_not_enough_replicas_before_the_append(self):
        self.elect(1, [1])
        r = self.successResultOf(self.produce(1, [b"x"], acks=-1))[(TOPIC, 0)]
        self.assertEqual(r.error_code, errors.NOT_ENOUGH_REPLICAS)
        self.assertEqual(self.nodes[1].log().log_end_offset, 0)  # nothing appended
        r = self.successResultOf(self.produce(1, [b"y"], acks=1))[(TOPIC, 0)]
        self.assertEqual((r.error_code, r.base_offset), (errors.NONE, 0))
        # under min ISR the HW stays: consumers do not see the acks=1 record yet
        self.assertEqual(self.nodes[1].log().high_watermark, 0)

    def test_request_timed_out(self):
        self.elect(1, [1, 2, 3])
        for n in (2, 3):
            self.nodes[n].rm.fetcher_manager.shutdown()
        d = self.produce(1, [b"x"], timeout_ms=1500)
        self.clock.advance(1.4)
        self.assertNoResult(d)
        self.clock.advance(0.2)
        r = self.successResultOf(d)[(TOPIC, 0)]
        self.assertEqual((r.error_code, r.base_offset), (errors.REQUEST_TIMED_OUT, 0))

    def test_not_leader_when_leadership_moves_while_waiting(self):
        self.elect(1, [1, 2, 3])
        for n in (2, 3):
            self.nodes[n].rm.fetcher_manager.shutdown()
        d = self.produce(1, [b"x"])
        self.assertNoResult(d)
        self.elect(2, [2, 3])
        r = self.successResultOf(d)[(TOPIC, 0)]
        self.assertEqual(r.error_code, errors.NOT_LEADER_OR_FOLLOWER)

    def test_not_enough_replicas_after_append(self):
        self.elect(1, [1, 2], replicas=(1, 2))
        self.pump(0.1)
        self.controller.hold = True
        self.nodes[2].rm.fetcher_manager.shutdown()
        d = self.produce(1, [b"x"])
        # follower 2 is stuck: the leader shrinks the ISR to [1] (below min ISR 2)
        self.clock.advance(self.lag_ms / 1000.0 + 1)
        self.assertEqual(self.controller.requests[-1][:3], (TOPIC, 0, [1]))
        self.controller.release()
        self.assertEqual(self.nodes[1].rm.get_partition(TOPIC, 0).isr, (1,))
        self.assertNoResult(d)  # the HW does not move while the ISR is under min ISR
        self.assertEqual(self.nodes[1].log().high_watermark, 0)
        r = self.successResultOf(self.produce(1, [b"y"]))[(TOPIC, 0)]
        self.assertEqual(r.error_code, errors.NOT_ENOUGH_REPLICAS)
        self.clock.advance(31)
        self.assertEqual(self.successResultOf(d)[(TOPIC, 0)].error_code, errors.REQUEST_TIMED_OUT)


class IsrTests(ReplicationTestBase):
    lag_ms = 2000

    def test_stuck_follower_leaves_and_rejoins_the_isr(self):
        self.elect(1, [1, 2, 3])
        self.pump(0.1)
        follower = self.nodes[3]
        follower.pause()
        d1 = self.produce(1, [b"a"])
        self.pump(3.5)  # past replica.lag.time.max.ms, one isr-expiration check later
        part = self.nodes[1].rm.get_partition(TOPIC, 0)
        self.assertEqual(part.isr, (1, 2))
        self.assertEqual(self.nodes[1].rm.under_replicated_partitions(), 1)
        self.assertEqual(self.state[(TOPIC, 0)].isr, [1, 2])
        self.assertEqual(self.state[(TOPIC, 0)].partition_epoch, 1)
        # the acks=all produce waiting for 3 completes once 3 is out of the ISR
        self.assertEqual(self.successResultOf(d1)[(TOPIC, 0)].error_code, errors.NONE)
        d2 = self.produce(1, [b"b"])
        self.pump_until(lambda: d2.called)
        self.assertEqual(self.successResultOf(d2)[(TOPIC, 0)].base_offset, 1)
        # SIGCONT: it catches up and the leader adds it back through AlterPartition
        follower.resume()
        self.pump_until(lambda: part.isr == (1, 2, 3))
        self.assertEqual(self.state[(TOPIC, 0)].isr, [1, 2, 3])
        self.assertEqual(self.state[(TOPIC, 0)].partition_epoch, 2)
        self.assertEqual(self.nodes[1].rm.under_replicated_partitions(), 0)
        self.assertEqual(follower.log().log_end_offset, 2)
        self.assertEqual(self.segment_bytes(3), self.segment_bytes(1))

    def test_isr_never_loses_its_last_member(self):
        self.elect(1, [1, 2, 3])
        for n in (2, 3):
            self.nodes[n].up = False
            self.nodes[n].rm.fetcher_manager.shutdown()
        self.produce(1, [b"a"], acks=1)
        self.clock.advance(5)
        self.assertEqual(self.nodes[1].rm.get_partition(TOPIC, 0).isr, (1,))
        self.clock.advance(5)
        self.assertEqual(self.nodes[1].rm.get_partition(TOPIC, 0).isr, (1,))
        self.assertEqual([r[2] for r in self.controller.requests], [[1]])

    def test_stale_partition_epoch_keeps_the_change_pending(self):
        self.elect(1, [1, 2, 3])
        self.nodes[3].rm.fetcher_manager.shutdown()
        self.nodes[3].up = False
        self.state[(TOPIC, 0)].partition_epoch += 5  # changed behind the leader's back
        self.produce(1, [b"a"], acks=1)
        self.pump(3.5)
        part = self.nodes[1].rm.get_partition(TOPIC, 0)
        self.assertEqual(part.isr, (1, 2, 3))
        self.assertIsNotNone(part.pending)  # until a LeaderAndIsr brings the truth
        self.assertEqual(len(self.controller.requests), 1)
        self.elect(1, [1, 2])
        self.assertEqual((part.isr, part.pending), ((1, 2), None))


class LeaderAndIsrTests(ReplicationTestBase):

    def test_leadership_listeners_hear_role_changes(self):
        heard = []
        self.nodes[2].rm.add_leadership_listener(lambda lead, follow: heard.append((lead, follow)))
        self.elect(1, [1, 2, 3])
        self.elect(2, [2, 3])
        self.successResultOf(self.nodes[2].rm.stop_replicas(0, 1, [(TOPIC, 0, 1, False)]))
        self.assertEqual(heard, [([], [(TOPIC, 0, 0)]), ([(TOPIC, 0, 1)], []),
                                 ([], [(TOPIC, 0, -1)])])

    def test_stale_controller_epoch_is_refused(self):
        self.elect(1, [1, 2, 3])
        self.controller_epoch = 0
        st = LeaderAndIsrPartitionState(topic_name=TOPIC, partition_index=0, controller_epoch=0,
                                        leader=2, leader_epoch=5, isr=[2], replicas=[1, 2, 3])
        e = self.assertRaises(KafkaError, self.nodes[1].rm.become_leader_or_follower,
                              0, 0, [st], {TOPIC: TOPIC_ID}, {})
        self.assertEqual(e.code, errors.STALE_CONTROLLER_EPOCH)

    def test_old_leader_epoch_is_refused_per_partition(self):
        self.elect(1, [1, 2, 3])
        results = self.send_leader_and_isr((TOPIC, 0))  # the same leader epoch again
        self.assertEqual(results[1], {(TOPIC, 0): errors.STALE_CONTROLLER_EPOCH})
        st = LeaderAndIsrPartitionState(topic_name=TOPIC, partition_index=1, controller_epoch=1,
                                        leader=1, leader_epoch=0, isr=[1], replicas=[2, 3])
        self.assertEqual(self.successResultOf(self.nodes[1].rm.become_leader_or_follower(
            0, 1, [st], {TOPIC: TOPIC_ID}, {})), {(TOPIC, 1): errors.UNKNOWN_TOPIC_OR_PARTITION})

    def test_fetch_epoch_checks_follow_leader_and_isr(self):
        self.elect(1, [1, 2, 3])
        rm = self.nodes[1].rm
        self.assertEqual(rm.check_leader_epoch(TOPIC, 0, 0), errors.NONE)
        self.assertEqual(rm.check_leader_epoch(TOPIC, 0, 1), errors.UNKNOWN_LEADER_EPOCH)
        self.elect(1, [1, 2, 3])
        self.assertEqual(rm.check_leader_epoch(TOPIC, 0, 0), errors.FENCED_LEADER_EPOCH)
        self.assertEqual(self.nodes[2].rm.get_partition_or_error(TOPIC, 0)[1],
                         errors.NOT_LEADER_OR_FOLLOWER)
        self.assertEqual(rm.get_partition_or_error(TOPIC, 1)[1], errors.NOT_LEADER_OR_FOLLOWER)

    def test_stop_replica_with_delete(self):
        self.elect(1, [1, 2, 3])
        d = self.produce(1, [b"a"])
        self.pump_until(lambda: d.called)
        path = self.nodes[3].log().dir
        result = self.successResultOf(self.nodes[3].rm.stop_replicas(0, 1, [(TOPIC, 0, 0, True)]))
        self.assertEqual(result, {(TOPIC, 0): errors.NONE})
        self.assertIsNone(self.nodes[3].log())
        self.assertFalse(os.path.exists(path))
        self.assertEqual(self.nodes[3].rm.fetcher_manager.fetchers, {})
        stale = self.successResultOf(self.nodes[2].rm.stop_replicas(0, 1, [(TOPIC, 0, -5, False)]))
        self.assertEqual(stale, {(TOPIC, 0): errors.FENCED_LEADER_EPOCH})


class TruncationTests(ReplicationTestBase):

    def test_new_leader_makes_the_old_leader_truncate_to_the_divergence_point(self):
        self.elect(1, [1, 2, 3])
        d = self.produce(1, [b"a", b"b"])
        self.pump_until(lambda: d.called)
        self.pump_until(lambda: self.nodes[2].log().high_watermark == 2)
        # followers stop; the leader appends two records nobody else has (acks=1)
        for n in (2, 3):
            self.nodes[n].rm.fetcher_manager.remove_fetcher_for_partitions([(TOPIC, 0)])
        self.successResultOf(self.produce(1, [b"lost1", b"lost2"], acks=1))
        self.assertEqual(self.nodes[1].log().log_end_offset, 4)
        # broker 1 "dies"; 2 is elected with epoch 1 and takes new writes
        self.nodes[1].up = False
        self.elect(2, [2, 3], to=[2, 3])
        d = self.produce(2, [b"c"])
        self.pump_until(lambda: d.called)
        self.assertEqual(self.successResultOf(d)[(TOPIC, 0)].base_offset, 2)
        # 1 comes back as a follower: it truncates its epoch-0 tail at offset 2 (its HW is 2
        # too, but the leader named the point) and replicates epoch 1
        self.nodes[1].up = True
        self.send_leader_and_isr((TOPIC, 0), to=[1])
        self.pump_until(lambda: self.nodes[1].log().log_end_offset == 3
                        and self.values(1)[-1][2] == b"c")
        self.assertEqual(self.values(1), [(0, 0, b"a"), (1, 0, b"b"), (2, 1, b"c")])
        self.assertEqual(self.segment_bytes(1), self.segment_bytes(2))
        self.assertEqual(self.nodes[1].log().leader_epoch_cache.entries(), [(0, 0), (1, 2)])

    def test_a_deposed_leader_that_wrote_nothing_in_its_epoch_follows_on(self):
        """Broker 2 led epoch 1 from its log end 2 and appended nothing before broker 3 took
        epoch 2: 3 has no epoch 1 and names the divergence (0, 2). Broker 2's cut at 2 removes
        no record but must drop its empty epoch 1, or it names epoch 1 again on every fetch,
        is answered the same divergence, never replicates and never rejoins the ISR (the
        rolling-restart CI failure of session 11)."""
        self.elect(1, [1, 2, 3])
        d = self.produce(1, [b"a", b"b"])
        self.pump_until(lambda: d.called)
        self.pump_until(lambda: self.nodes[2].log().high_watermark == 2)
        self.elect(2, [1, 2, 3])
        self.assertEqual(self.nodes[2].log().leader_epoch_cache.entries(), [(0, 0), (1, 2)])
        cuts = []
        original = self.nodes[2].rm.truncate_follower
        self.nodes[2].rm.truncate_follower = lambda *a, **kw: cuts.append(a) or original(*a, **kw)
        self.elect(3, [1, 2, 3])
        d = self.produce(3, [b"c"])
        self.pump_until(lambda: d.called)
        self.assertEqual(self.successResultOf(d)[(TOPIC, 0)].base_offset, 2)
        self.pump_until(lambda: self.nodes[2].log().log_end_offset == 3)
        self.assertEqual(self.values(2), [(0, 0, b"a"), (1, 0, b"b"), (2, 2, b"c")])
        self.assertEqual(self.nodes[2].log().leader_epoch_cache.entries(), [(0, 0), (2, 2)])
        self.assertEqual(cuts, [(TOPIC, 0, 2)])  # one divergence answered, not one per fetch
        self.assertEqual(self.nodes[3].rm.get_partition(TOPIC, 0).isr, (1, 2, 3))

    def test_a_follower_behind_on_the_hw_keeps_what_the_new_leader_has(self):
        """Its HW lags its log end; the new leader has the same records: nothing is cut
        (truncating to the HW, as before KIP-101, would drop and fetch them again)."""
        self.elect(1, [1, 2, 3])
        d = self.produce(1, [b"a", b"b", b"c"])
        self.pump_until(lambda: d.called)
        for n in (2, 3):
            self.nodes[n].rm.fetcher_manager.remove_fetcher_for_partitions([(TOPIC, 0)])
            self.nodes[n].log().update_high_watermark(1)  # it had not learnt HW 3 yet
        cuts = []
        original = self.nodes[3].rm.truncate_follower
        self.nodes[3].rm.truncate_follower = lambda *a, **kw: cuts.append(a) or original(*a, **kw)
        self.nodes[1].up = False
        self.elect(2, [2, 3], to=[2, 3])
        d = self.produce(2, [b"d"])
        self.pump_until(lambda: d.called)
        self.assertEqual(self.successResultOf(d)[(TOPIC, 0)].base_offset, 3)
        self.assertEqual(cuts, [])
        self.assertEqual([v for _, _, v in self.values(3)], [b"a", b"b", b"c", b"d"])
        self.assertEqual(self.segment_bytes(3), self.segment_bytes(2))

    def test_an_unclean_leader_makes_followers_truncate_to_its_log(self):
        """A leader without the last records (chosen out of the ISR): a follower cuts back to
        where the leader's epoch 0 ends and takes the leader's epoch 1 records."""
        self.elect(1, [1, 2], replicas=(1, 2, 3))
        self.nodes[3].rm.fetcher_manager.remove_fetcher_for_partitions([(TOPIC, 0)])
        for values in ([b"a"], [b"b", b"c"]):  # two batches: a cut at offset 1 would keep "a"
            d = self.produce(1, values)
            self.pump_until(lambda: d.called)
        self.assertEqual(self.nodes[2].log().log_end_offset, 3)
        self.assertEqual(self.nodes[3].log().log_end_offset, 0)
        self.nodes[1].up = False
        self.elect(3, [3], to=[3])
        d = self.produce(3, [b"x"], acks=1)
        self.assertEqual(self.successResultOf(d)[(TOPIC, 0)].base_offset, 0)
        # 2 follows now: its epoch 0 is older than any the leader knows, so the leader
        # answers that epoch 0 ends where its first epoch starts (0)
        self.send_leader_and_isr((TOPIC, 0), to=[2])
        self.pump_until(lambda: self.values(2) == [(0, 1, b"x")])
        self.assertEqual(self.segment_bytes(2), self.segment_bytes(3))
        self.assertEqual(self.nodes[2].log().leader_epoch_cache.entries(), [(1, 0)])

    def test_a_follower_behind_the_leaders_log_start_starts_there(self):
        """OFFSET_OUT_OF_RANGE below the leader's log start (DeleteRecords, retention): the
        follower asks ListOffsets for it, empties its log and starts at it."""
        self.elect(1, [1, 2], replicas=(1, 2, 3))
        self.nodes[3].rm.fetcher_manager.remove_fetcher_for_partitions([(TOPIC, 0)])
        for i in range(4):
            d = self.produce(1, [b"r%d" % i])
            self.pump_until(lambda: d.called)
        self.nodes[1].log().delete_records_before(3)
        # 3's fetcher again, from its log end 0
        self.nodes[3].rm.fetcher_manager.add_fetcher_for_partitions({(TOPIC, 0): InitialFetchState(
            TOPIC_ID, 1, ("127.0.0.1", self.nodes[1].port), 0, 0)})
        self.pump_until(lambda: self.nodes[3].log().log_end_offset == 4)
        self.assertEqual(self.nodes[3].log().log_start_offset, 3)
        self.assertEqual(self.values(3), [(3, 0, b"r3")])
        self.assertIn(((1, 0), messages.ListOffsetsRequest.API_KEY), self.nodes[3].client.sent)

    def test_follower_keeps_producer_state(self):
        self.elect(1, [1, 2, 3])
        d = self.produce(1, [b"a"], producer_id=7, producer_epoch=0, base_sequence=0)
        self.pump_until(lambda: d.called)
        self.pump_until(lambda: self.nodes[2].log().log_end_offset == 1)
        ps = self.nodes[2].rm.producer_state(TOPIC, 0)
        self.assertEqual(ps.last_entry(7).last_seq, 0)
        # 2 becomes leader: the retried batch is a duplicate, not a second record
        self.nodes[1].up = False
        self.elect(2, [2, 3], to=[2, 3])
        d = self.produce(2, [b"a"], producer_id=7, producer_epoch=0, base_sequence=0)
        self.pump_until(lambda: d.called)
        r = self.successResultOf(d)[(TOPIC, 0)]
        self.assertEqual((r.error_code, r.base_offset), (errors.NONE, 0))
        self.assertEqual(self.nodes[2].log().log_end_offset, 1)
