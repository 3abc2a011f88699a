"""Tests for ListOffsets and InitProducerId handlers."""

from twisted.trial import unittest

from kafkatw.cluster.metadata import ClusterMetadata
from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError
from kafkatw.protocol.messages import InitProducerIdRequest, ListOffsetsRequest
from tests.test_server_apis import ApisFixture, FakeTimestampAndOffset

LT = ListOffsetsRequest.ListOffsetsTopic
LP = ListOffsetsRequest.ListOffsetsPartition


def list_offsets(parts, replica_id=-1, isolation_level=0):
    """parts: [(topic, partition, timestamp, current_leader_epoch)]"""
    topics = {}
    for topic, p, ts, epoch in parts:
        topics.setdefault(topic, []).append(LP(partition_index=p, timestamp=ts, current_leader_epoch=epoch))
    return ListOffsetsRequest(replica_id=replica_id, isolation_level=isolation_level,
                              topics=[LT(name=t, partitions=ps) for t, ps in topics.items()])


class ListOffsetsTests(ApisFixture, unittest.TestCase):
    def setUp(self):
        ApisFixture.setUp(self)
        self.create_topic("t", 3)

    def parts(self, body):
        return [(t.name, p.partition_index, p.error_code, p.timestamp, p.offset, p.leader_epoch)
                for t in body.topics for p in t.partitions]

    def test_lookups(self):
        rm = self.replica_manager
        rm.offsets[(("t", 0), -1)] = FakeTimestampAndOffset(-1, 42, 0)
        rm.offsets[(("t", 1), -2)] = FakeTimestampAndOffset(-1, 0, 0)
        rm.offsets[(("t", 2), 1234)] = FakeTimestampAndOffset(1300, 7, 0)
        body = self.call(list_offsets([("t", 0, -1, -1), ("t", 1, -2, 0), ("t", 2, 1234, -1)],
                                      isolation_level=1), 9).body
        self.assertEqual(self.parts(body), [("t", 0, 0, -1, 42, 0), ("t", 1, 0, -1, 0, 0),
                                            ("t", 2, 0, 1300, 7, 0)])
        self.assertEqual([q[2:] for q in rm.offset_queries], [(1, -1, True), (1, 0, True), (1, -1, True)])

    def test_not_found(self):
        body = self.call(list_offsets([("t", 0, 99999, -1)]), 9).body
        self.assertEqual(self.parts(body), [("t", 0, 0, -1, -1, -1)])

    def test_replica_and_debug_ids(self):
        self.call(list_offsets([("t", 0, -1, -1)], replica_id=-2), 9)
        self.call(list_offsets([("t", 0, -1, -1)], replica_id=5), 9)
        self.assertEqual([q[2:] for q in self.replica_manager.offset_queries],
                         [(None, -1, False), (None, -1, True)])

    def test_errors(self):
        self.replica_manager.offsets[(("t", 1), -1)] = KafkaError(errors.KAFKA_STORAGE_ERROR)
        body = self.call(list_offsets([("t", 0, -1, 3), ("t", 2, -1, -5), ("nope", 0, -1, -1),
                                       ("t", 1, -1, -1), ("t", 9, -1, -1)]), 9).body
        # epoch 3 is newer than the partition's 0; -5 is not "none" (-1) and older: fenced,
        # as Kafka's Partition.checkCurrentLeaderEpoch answers
        self.assertEqual([p[2] for p in self.parts(body)],
                         [errors.UNKNOWN_LEADER_EPOCH, errors.FENCED_LEADER_EPOCH, errors.KAFKA_STORAGE_ERROR,
                          errors.UNKNOWN_TOPIC_OR_PARTITION, errors.UNKNOWN_TOPIC_OR_PARTITION])

    def test_fenced_epoch(self):
        self.metadata.get_topic("t").leader_epochs[0] = 4
        body = self.call(list_offsets([("t", 0, -1, 3)]), 9).body
        self.assertEqual(self.parts(body)[0][2], errors.FENCED_LEADER_EPOCH)

    def test_duplicate_partitions(self):
        body = self.call(list_offsets([("t", 0, -1, -1), ("t", 0, -2, -1)]), 9).body
        self.assertEqual([p[2] for p in self.parts(body)], [errors.INVALID_REQUEST] * 2)

    def test_unexpected_exception(self):
        self.replica_manager.offsets[(("t", 0), -1)] = RuntimeError("x")
        body = self.call(list_offsets([("t", 0, -1, -1)]), 1).body
        self.assertEqual(self.parts(body)[0][2], errors.UNKNOWN_SERVER_ERROR)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)


class InitProducerIdTests(ApisFixture, unittest.TestCase):
    def test_idempotent(self):
        a = self.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 4).body
        b = self.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000,
                                            producer_id=a.producer_id, producer_epoch=0), 4).body
        self.assertEqual((a.error_code, a.producer_epoch, b.error_code, b.producer_epoch), (0, 0, 0, 0))
        self.assertNotEqual(a.producer_id, b.producer_id)

    def test_ids_not_reused_after_restart(self):
        first = self.call(InitProducerIdRequest(transactional_id=None), 0).body.producer_id
        self.metadata = ClusterMetadata.load(self.config.log_dirs, self.node_id)
        self.apis = self.make_apis()
        second = self.call(InitProducerIdRequest(transactional_id=None), 0).body.producer_id
        self.assertGreater(second, first)

    def test_transactional_without_coordinator(self):
        # no transaction coordinator wired in: a retriable "not available", not an auth error
        body = self.call(InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=1000), 4).body
        self.assertEqual((body.error_code, body.producer_id, body.producer_epoch),
                         (errors.COORDINATOR_NOT_AVAILABLE, -1, -1))
        body = self.call(InitProducerIdRequest(transactional_id="", transaction_timeout_ms=1000), 4).body
        self.assertEqual(body.error_code, errors.INVALID_REQUEST)
