"""Replication over real sockets in one reactor: three brokers each with a loopback listener
(SocketServer + KafkaApis) and the replica manager's own fetchers on KafkaNetworkClient; the
test plays the controller (LeaderAndIsr calls, AlterPartition answered like ZooKeeper).
Real time, conditions polled with bounds. The leader serves follower fetches as any fetch
(file regions, sendfile); the followers end with the leader's bytes.
"""

import os

from twisted.internet import defer, reactor, task
from twisted.trial import unittest

from kafkatw.cluster.metadata import ClusterMetadata
from kafkatw.config import KafkaConfig
from kafkatw.network.listener import SocketServer
from kafkatw.protocol import errors, messages
from kafkatw.protocol.records import Record, build_batch
from kafkatw.server.apis import KafkaApis
from kafkatw.server.replica_manager import ReplicaManager
from kafkatw.storage.manager import LogManager
from tests.test_replication import TOPIC, TOPIC_ID, FakeController, ZkPartition

LeaderAndIsrPartitionState = messages.LeaderAndIsrRequest.LeaderAndIsrPartitionState


class SocketBroker:
    def __init__(self, node_id, directory, controller, props):
        self.node_id = node_id
        self.config = KafkaConfig.from_properties(dict({
            "node.id": str(node_id), "log.dirs": directory,
            "listeners": "PLAINTEXT://127.0.0.1:0"}, **props))
        self.log_manager = LogManager([directory], self.config.values(), reactor)
        self.metadata = ClusterMetadata([directory], node_id, cluster_id="c" * 22)
        self.rm = ReplicaManager(self.log_manager, self.metadata, reactor, self.config,
                                 cluster_mode=True, alter_partition_manager=controller)
        self.rm.broker_epoch = 100 + node_id
        self.apis = KafkaApis(self.config, self.metadata, self.rm, clock=reactor,
                              log_manager=self.log_manager)
        self.server = None
        self.port = None

    def start(self):
        self.server = SocketServer(self.config.listeners, self.apis, reactor)
        self.server.start()
        self.port = self.server.bound_port("PLAINTEXT")
        self.rm.start()

    def stop(self):
        self.rm.shutdown()
        d = defer.maybeDeferred(self.server.stop)
        return d.addBoth(lambda _: self.log_manager.shutdown())

    def log(self, partition=0):
        return self.log_manager.get_log(TOPIC, partition)


class SocketReplicationTests(unittest.TestCase):
    timeout = 60

    def setUp(self):
        self.state = {}
        self.controller = FakeController(self.state)
        props = {"replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "50",
                 "min.insync.replicas": "2", "replica.lag.time.max.ms": "10000",
                 "num.replica.fetchers": "2"}
        self.nodes = {}
        for node_id in (1, 2, 3):
            directory = self.mktemp()
            os.makedirs(directory)
            b = SocketBroker(node_id, directory, self.controller, props)
            self.successResultOf(b.metadata.create_topic(TOPIC, 2, topic_id=TOPIC_ID))
            b.start()
            self.addCleanup(b.stop)
            self.nodes[node_id] = b

    def elect(self, partition, leader, isr, epoch, to=(1, 2, 3)):
        tp = (TOPIC, partition)
        zk = self.state.get(tp)
        if zk is None:
            zk = self.state[tp] = ZkPartition(leader, epoch, list(isr), 0, [1, 2, 3])
        else:
            zk.leader, zk.leader_epoch, zk.isr = leader, epoch, list(isr)
            zk.partition_epoch += 1
        live = {leader: ("127.0.0.1", self.nodes[leader].port)}
        for n in to:
            st = LeaderAndIsrPartitionState(
                topic_name=TOPIC, partition_index=partition, controller_epoch=1, leader=leader,
                leader_epoch=zk.leader_epoch, isr=list(zk.isr), partition_epoch=zk.partition_epoch,
                replicas=[1, 2, 3])
            result = self.successResultOf(self.nodes[n].rm.become_leader_or_follower(
                0, 1, [st], {TOPIC: TOPIC_ID}, live))
            self.assertEqual(result, {tp: errors.NONE})

    @defer.inlineCallbacks
    def poll(self, condition, seconds=20.0):
        for _ in range(int(seconds / 0.02)):
            if condition():
                return
            yield task.deferLater(reactor, 0.02, lambda: None)
        self.assertTrue(condition(), "condition not met within %.0f s" % seconds)

    def batch(self, values):
        return bytearray(build_batch([Record(value=v) for v in values],
                                     base_timestamp=int(reactor.seconds() * 1000)))

    def segment_bytes(self, node, partition):
        out = b""
        for seg in self.nodes[node].log(partition).segments:
            with open(seg.log.path, "rb") as f:
                out += f.read()
        return out

    @defer.inlineCallbacks
    def test_acks_all_over_sockets_and_a_leader_change(self):
        self.elect(0, 1, [1, 2, 3], 0)
        self.elect(1, 2, [1, 2, 3], 0)
        results = []
        for i in range(20):
            r = yield self.nodes[1].rm.append_records(
                30000, -1, {(TOPIC, 0): self.batch([b"p0-%d" % i] * 3)})
            results.append(r[(TOPIC, 0)])
            r = yield self.nodes[2].rm.append_records(
                30000, -1, {(TOPIC, 1): self.batch([b"p1-%d" % i])})
            results.append(r[(TOPIC, 1)])
        self.assertEqual([r.error_code for r in results], [errors.NONE] * 40)
        self.assertEqual([r.base_offset for r in results[0::2]], list(range(0, 60, 3)))
        self.assertEqual([r.base_offset for r in results[1::2]], list(range(20)))
        yield self.poll(lambda: all(self.nodes[n].log(0).high_watermark == 60
                                    and self.nodes[n].log(1).high_watermark == 20
                                    for n in (1, 2, 3)))
        for p in (0, 1):
            expected = self.segment_bytes(1, p)
            self.assertEqual(self.segment_bytes(2, p), expected)
            self.assertEqual(self.segment_bytes(3, p), expected)
        # broker 1 stops serving; 2 leads partition 0 at epoch 1 and keeps taking acks=all
        yield self.nodes[1].stop()
        self.elect(0, 2, [2, 3], 1, to=(2, 3))
        r = yield self.nodes[2].rm.append_records(30000, -1, {(TOPIC, 0): self.batch([b"new"])})
        self.assertEqual((r[(TOPIC, 0)].error_code, r[(TOPIC, 0)].base_offset), (errors.NONE, 60))
        yield self.poll(lambda: self.nodes[3].log(0).log_end_offset == 61)
        self.assertEqual(self.segment_bytes(3, 0), self.segment_bytes(2, 0))
        self.assertEqual(self.nodes[3].log(0).leader_epoch_cache.entries(), [(0, 0), (1, 60)])
