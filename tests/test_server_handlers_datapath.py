"""The data path end to end below the network: KafkaApis on the real metadata store, replica
manager, log manager and fetch sessions (produce, fetch, list offsets, long polling, delete)."""

import os

from twisted.internet import task
from twisted.trial import unittest

from kafkatw.cluster.metadata import ClusterMetadata
from kafkatw.config import KafkaConfig
from kafkatw.network.request import Request, RequestContext
from kafkatw.protocol import errors
from kafkatw.protocol import records as rec
from kafkatw.protocol.messages import (
    CreateTopicsRequest,
    DeleteTopicsRequest,
    FetchRequest,
    ListOffsetsRequest,
    ProduceRequest,
)
from kafkatw.protocol.parts import join_parts
from kafkatw.server.apis import KafkaApis
from kafkatw.server.fetch_session import FetchManager, FetchSessionCache
from kafkatw.server.replica_manager import ReplicaManager
from kafkatw.storage.manager import LogManager


def as_message(response):
    """A response whose body is a generated ``Rows`` (Produce, Fetch) with that body as the
    message objects (records stay file regions), so tests read fields by name."""
    to_message = getattr(response.body, "to_message", None)
    if to_message is not None:
        response.body = to_message()
    return response


class DataPathTests(unittest.TestCase):
    def setUp(self):
        base = os.path.abspath(self.mktemp())
        self.config = KafkaConfig.from_properties({
            "node.id": "1", "log.dirs": os.path.join(base, "logs"),
            "listeners": "PLAINTEXT://localhost:9092"})
        self.clock = task.Clock()
        self.clock.advance(1700000000)
        self.metadata = ClusterMetadata.load(self.config.log_dirs, 1)
        self.log_manager = LogManager(self.config.log_dirs, reactor=self.clock)
        self.log_manager.load_logs()
        self.replica_manager = ReplicaManager(self.log_manager, self.metadata, self.clock, self.config)
        self.apis = KafkaApis(self.config, self.metadata, self.replica_manager,
                              fetch_manager=FetchManager(self.clock, FetchSessionCache()),
                              clock=self.clock, log_manager=self.log_manager)
        self.addCleanup(self.replica_manager.shutdown)

    def handle(self, body, version):
        wire = type(body).decode(memoryview(bytearray(body.encode_bytes(version))), version)
        req = Request(header=None, api_key=body.API_KEY, api_version=version, correlation_id=1,
                      client_id="t", body=wire, size=0,
                      context=RequestContext("c", "PLAINTEXT", "PLAINTEXT"))
        return self.apis.handle(req).addCallback(as_message)

    def call(self, body, version):
        return self.successResultOf(self.handle(body, version)).body

    def create(self, name, partitions):
        body = self.call(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=1000), 7)
        self.assertEqual(body.topics[0].error_code, 0)
        return body.topics[0].topic_id

    def produce(self, topic, partition, values, version=9):
        batch = bytearray(rec.build_batch([rec.Record(value=v) for v in values],
                                          base_timestamp=1700000000000))
        req = ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[ProduceRequest.TopicProduceData(
            name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
        return self.call(req, version).responses[0].partition_responses[0]

    def fetch(self, topic_id, partition, offset, version=13, max_wait_ms=0, min_bytes=1,
              session_id=0, epoch=-1):
        req = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 20,
                           session_id=session_id, session_epoch=epoch,
                           topics=[FetchRequest.FetchTopic(topic_id=topic_id, partitions=[
                               FetchRequest.FetchPartition(partition=partition, fetch_offset=offset,
                                                           partition_max_bytes=1 << 20)])])
        return self.handle(req, version)

    def test_produce_fetch_list_offsets(self):
        topic_id = self.create("t", 2)
        self.assertEqual(os.path.isdir(os.path.join(self.config.log_dirs[0], "t-1")), True)
        p = self.produce("t", 1, [b"a", b"b", b"c"])
        self.assertEqual((p.error_code, p.base_offset), (0, 0))
        p = self.produce("t", 1, [b"d"])
        self.assertEqual((p.error_code, p.base_offset), (0, 3))

        resp = self.successResultOf(self.fetch(topic_id, 1, 0)).body
        part = resp.responses[0].partitions[0]
        self.assertEqual((part.error_code, part.high_watermark, part.log_start_offset), (0, 4, 0))
        # the record bytes travel as a file region; materialise only to check them here
        data = join_parts(resp.encode(13))
        values = []
        raw = join_parts([part.records]) if not isinstance(part.records, (bytes, memoryview)) else bytes(part.records)
        pos = 0
        while pos < len(raw):
            header, recs = rec.decode_batch(raw, pos)
            values += [r.value for r in recs]
            pos += header.size_in_bytes
        self.assertEqual(values, [b"a", b"b", b"c", b"d"])
        self.assertGreater(len(data), len(raw))

        got = []
        for ts in (-2, -1, 1700000000000):
            lo = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
                name="t", partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=1, timestamp=ts)])])
            x = self.call(lo, 7).topics[0].partitions[0]
            got.append((x.error_code, x.offset))
        self.assertEqual(got, [(0, 0), (0, 4), (0, 0)])

    def test_long_poll_woken_by_produce(self):
        topic_id = self.create("t", 1)
        d = self.fetch(topic_id, 0, 0, max_wait_ms=10000)
        self.assertNoResult(d)
        self.clock.advance(1.5)
        self.assertNoResult(d)
        self.produce("t", 0, [b"x"])
        part = self.successResultOf(d).body.responses[0].partitions[0]
        self.assertEqual((part.error_code, part.high_watermark), (0, 1))
        self.assertGreater(len(part.records), 0)

    def test_a_fetch_its_parking_check_completes_is_answered_at_once(self):
        """The check that would park a fetch (Kafka's tryCompleteElseWatch) may complete it (in
        a cluster: a partition moved since the read); its answer is then the Response at once,
        with what the completion read."""
        from kafkatw.server.delayed_fetch import DelayedFetch

        topic_id = self.create("t", 1)
        self.produce("t", 0, [b"x"])
        self.patch(DelayedFetch, "try_complete", DelayedFetch.force_complete)
        d = self.fetch(topic_id, 0, 0, max_wait_ms=10000, min_bytes=1 << 20)  # fewer bytes: parks
        part = self.successResultOf(d).body.responses[0].partitions[0]
        self.assertEqual((part.error_code, part.high_watermark), (0, 1))
        self.assertGreater(len(part.records), 0)
        purgatory = self.replica_manager.fetch_purgatory
        self.assertEqual((purgatory.num_delayed(), purgatory.watch_lists), (0, {}))

    def test_a_woken_fetch_is_freed_without_the_cyclic_gc(self):
        # no completed fetch may be cyclic garbage: its collections stalled the end-to-end path
        import gc
        import weakref

        topic_id = self.create("t", 1)
        gc.disable()
        self.addCleanup(gc.enable)
        d = self.fetch(topic_id, 0, 0, max_wait_ms=10000)
        (ops,) = self.replica_manager.fetch_purgatory.watch_lists.values()
        ref = weakref.ref(ops[0])
        del ops
        self.produce("t", 0, [b"x"])
        self.assertEqual(self.successResultOf(d).body.responses[0].partitions[0].high_watermark, 1)
        del d
        self.assertIsNone(ref())

    def test_long_poll_expires(self):
        topic_id = self.create("t", 1)
        d = self.fetch(topic_id, 0, 0, max_wait_ms=3000)
        self.clock.advance(2.9)
        self.assertNoResult(d)
        self.clock.advance(0.2)
        part = self.successResultOf(d).body.responses[0].partitions[0]
        self.assertEqual((part.error_code, part.high_watermark, len(part.records)), (0, 0, 0))

    def test_offset_out_of_range_and_delete(self):
        topic_id = self.create("t", 1)
        self.produce("t", 0, [b"x"])
        part = self.successResultOf(self.fetch(topic_id, 0, 50)).body.responses[0].partitions[0]
        self.assertEqual(part.error_code, errors.OFFSET_OUT_OF_RANGE)
        body = self.call(DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(
            name=None, topic_id=topic_id)], timeout_ms=1000), 6)
        self.assertEqual(body.responses[0].error_code, 0)
        part = self.successResultOf(self.fetch(topic_id, 0, 0)).body.responses[0].partitions[0]
        self.assertEqual(part.error_code, errors.UNKNOWN_TOPIC_ID)
        self.assertIsNone(self.log_manager.get_log("t", 0))
