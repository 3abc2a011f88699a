"""AlterPartitionManager on task.Clock with a scripted client: batching, one change in flight
per partition, retries after NOT_CONTROLLER / a lost connection / an unknown controller, the
controller moving, per-partition answers and errors, shutdown."""

from twisted.internet import defer, task
from twisted.trial import unittest
from zope.interface.verify import verifyObject

from kafkatw.protocol import errors, messages
from kafkatw.protocol.errors import KafkaError
from kafkatw.server.alter_partition import ALTER_PARTITION_VERSION, AlterPartitionManager
from kafkatw.server.interfaces import IAlterPartitionManager

TID = b"\x01" * 16
R = messages.AlterPartitionResponse


class ScriptedClient:
    def __init__(self):
        self.sent = []  # (key, host, port, request, version, Deferred)
        self.closed = []

    def send(self, key, host, port, request, version):
        # the request goes through the codec, as on the wire
        request = type(request).decode(request.encode_bytes(version), version)
        d = defer.Deferred()
        self.sent.append((key, host, port, request, version, d))
        return d

    def close(self, key):
        self.closed.append(key)


def answer(partitions, error=errors.NONE):
    """A response: ``partitions`` [(index, error, leader, epoch, isr, partition epoch)]."""
    return R(error_code=error, topics=[R.TopicData(topic_id=TID, partitions=[
        R.PartitionData(partition_index=i, error_code=e, leader_id=l, leader_epoch=le, isr=isr,
                        partition_epoch=pe) for i, e, l, le, isr, pe in partitions])])


class AlterPartitionManagerTests(unittest.TestCase):

    def setUp(self):
        self.clock = task.Clock()
        self.client = ScriptedClient()
        self.controller = (7, ("10.0.0.7", 9092))
        self.manager = AlterPartitionManager(self.client, 1, lambda: 42,
                                             lambda: self.controller, self.clock)
        self.manager.start()

    def test_contract(self):
        self.assertTrue(verifyObject(IAlterPartitionManager, self.manager))

    def test_batches_while_one_request_is_in_flight(self):
        d0 = self.manager.submit("t", 0, TID, 3, [1, 2], 10)
        d1 = self.manager.submit("t", 1, TID, 4, [1], 11)
        d2 = self.manager.submit("t", 2, TID, 5, [1, 3], 12)
        self.assertEqual(len(self.client.sent), 1)  # d1, d2 wait for the first answer
        key, host, port, req, version, wire = self.client.sent[0]
        self.assertEqual((key, host, port, version), (("controller", 7), "10.0.0.7", 9092,
                                                       ALTER_PARTITION_VERSION))
        self.assertEqual((req.broker_id, req.broker_epoch), (1, 42))
        p = req.topics[0].partitions[0]
        self.assertEqual((req.topics[0].topic_id, p.partition_index, p.leader_epoch, p.new_isr,
                          p.partition_epoch), (TID, 0, 3, [1, 2], 10))
        wire.callback(answer([(0, errors.NONE, 1, 3, [1, 2], 11)]))
        result = self.successResultOf(d0)
        self.assertEqual((result.leader, result.leader_epoch, result.isr, result.partition_epoch),
                         (1, 3, [1, 2], 11))
        self.assertEqual(len(self.client.sent), 2)
        second = self.client.sent[1][3]
        self.assertEqual(sorted(p.partition_index for p in second.topics[0].partitions), [1, 2])
        self.client.sent[1][5].callback(answer([(1, errors.NONE, 1, 4, [1], 12),
                                                (2, errors.INVALID_UPDATE_VERSION, -1, -1, [], -1)]))
        self.assertEqual(self.successResultOf(d1).isr, [1])
        self.assertEqual(self.failureResultOf(d2, KafkaError).value.code,
                         errors.INVALID_UPDATE_VERSION)

    def test_second_change_of_a_partition_in_flight_is_not_attempted(self):
        self.manager.submit("t", 0, TID, 3, [1, 2], 10)
        f = self.failureResultOf(self.manager.submit("t", 0, TID, 3, [1], 10), KafkaError)
        self.assertEqual(f.value.code, errors.OPERATION_NOT_ATTEMPTED)

    def test_not_controller_and_lost_connection_are_retried_after_backoff(self):
        d = self.manager.submit("t", 0, TID, 3, [1, 2], 10)
        self.client.sent[0][5].callback(answer([], error=errors.NOT_CONTROLLER))
        self.assertEqual(len(self.client.sent), 1)
        self.controller = (8, ("10.0.0.8", 9093))  # the controller moved
        self.clock.advance(0.1)
        self.assertEqual(len(self.client.sent), 2)
        self.assertEqual(self.client.sent[1][:3], (("controller", 8), "10.0.0.8", 9093))
        self.assertEqual(self.client.closed, [("controller", 7)])
        self.client.sent[1][5].errback(ConnectionError("lost"))
        self.clock.advance(0.1)
        self.assertEqual(len(self.client.sent), 3)
        self.client.sent[2][5].callback(answer([(0, errors.NONE, 1, 3, [1, 2], 11)]))
        self.assertEqual(self.successResultOf(d).partition_epoch, 11)

    def test_unknown_controller_waits(self):
        self.controller = None
        d = self.manager.submit("t", 0, TID, 3, [1, 2], 10)
        self.clock.advance(0.5)
        self.assertEqual(self.client.sent, [])
        self.controller = (7, ("10.0.0.7", 9092))
        self.clock.advance(0.1)
        self.assertEqual(len(self.client.sent), 1)
        self.assertNoResult(d)

    def test_shutdown_fails_what_is_pending(self):
        d0 = self.manager.submit("t", 0, TID, 3, [1, 2], 10)
        d1 = self.manager.submit("t", 1, TID, 3, [1, 2], 10)
        self.manager.shutdown()
        for d in (d0, d1):
            self.assertEqual(self.failureResultOf(d, KafkaError).value.code,
                             errors.OPERATION_NOT_ATTEMPTED)


class FromConfigTests(unittest.SynchronousTestCase):
    def test_request_timeout_is_controller_socket_timeout_ms(self):
        # read before, but not a defined broker config: a value set was dropped (30 s always)
        from types import SimpleNamespace

        from kafkatw.config import KafkaConfig

        metadata = SimpleNamespace(node_id=1, controller_id=-1, live_broker=lambda i: None)
        for props, expected in (({"controller.socket.timeout.ms": "1234"}, 1234), ({}, 30000)):
            manager = AlterPartitionManager.from_config(KafkaConfig.from_properties(props), metadata,
                                                        task.Clock(), lambda: 42)
            self.assertEqual(manager.client.request_timeout_ms, expected)
