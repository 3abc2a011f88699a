"""Tests for the Fetch handler: topic ids, sessions, byte limits, errors, records as regions."""

import os
import tempfile

from twisted.trial import unittest

from kafkatw.protocol import errors
from kafkatw.protocol.messages import FetchRequest, FetchResponse
from kafkatw.protocol.parts import FileRegion
from kafkatw.server.fetch_session import FetchManager, FetchSessionCache
from tests.test_server_apis import ApisFixture, FakeFetchPartitionData

FT = FetchRequest.FetchTopic
FP = FetchRequest.FetchPartition


def fetch_request(topics, version, session_id=0, epoch=-1, max_bytes=0x7FFFFFFF, min_bytes=1,
                  isolation_level=0, forgotten=()):
    """topics: [(name or id, [(partition, offset)])]"""
    ft = []
    for ident, parts in topics:
        kw = {"topic_id": ident} if version >= 13 else {"topic": ident}
        ft.append(FT(partitions=[FP(partition=p, fetch_offset=o, partition_max_bytes=1024,
                                    current_leader_epoch=-1, log_start_offset=-1) for p, o in parts], **kw))
    return FetchRequest(replica_id=-1, max_wait_ms=500, min_bytes=min_bytes, max_bytes=max_bytes,
                        isolation_level=isolation_level, session_id=session_id, session_epoch=epoch,
                        topics=ft, forgotten_topics_data=list(forgotten))


class FetchTests(ApisFixture, unittest.TestCase):
    properties = {"fetch.max.bytes": "100000"}

    def setUp(self):
        ApisFixture.setUp(self)
        self.info = self.create_topic("t", 2)
        self.apis = self.make_apis(fetch_manager=FetchManager(self.clock, FetchSessionCache()))

    def parts(self, body):
        return [(t.topic if t.topic else t.topic_id, p.partition_index, p.error_code, p.high_watermark)
                for t in body.responses for p in t.partitions]

    def test_by_name_v11(self):
        body = self.call(fetch_request([("t", [(0, 3), (1, 0)])], 11), 11).body
        self.assertEqual(self.parts(body), [("t", 0, 0, 5), ("t", 1, 0, 5)])
        ((params, infos),) = self.replica_manager.fetches
        self.assertEqual([(tp, d.fetch_offset, d.max_bytes) for tp, d in infos],
                         [(("t", 0), 3, 1024), (("t", 1), 0, 1024)])
        self.assertEqual((params.max_bytes, params.min_bytes, params.max_wait_ms, params.replica_id),
                         (100000, 1, 500, -1))

    def test_a_partition_named_twice_is_read_and_answered_once(self):
        """Kafka's FetchRequest.fetchData is a LinkedHashMap: a partition named twice is one
        entry, where it was first named, with the fields of its last mention; it is read
        once and has one row (not two reads of the same records, both counted against the
        byte budget)."""
        body = self.call(fetch_request([("t", [(0, 3), (1, 0)]), ("t", [(0, 4)])], 11), 11).body
        self.assertEqual(self.parts(body), [("t", 0, 0, 5), ("t", 1, 0, 5)])
        ((params, infos),) = self.replica_manager.fetches
        self.assertEqual([(tp, d.fetch_offset) for tp, d in infos], [(("t", 0), 4), (("t", 1), 0)])

    def test_min_bytes_capped_by_max_bytes(self):
        self.call(fetch_request([("t", [(0, 0)])], 11, max_bytes=2000, min_bytes=5000), 11)
        params = self.replica_manager.fetches[0][0]
        self.assertEqual((params.max_bytes, params.min_bytes), (2000, 2000))

    def test_by_id_v13_and_unknown_id(self):
        unknown = b"\x09" * 16
        body = self.call(fetch_request([(self.info.topic_id, [(0, 0)]), (unknown, [(0, 0)])], 13), 13).body
        self.assertEqual(self.parts(body), [(self.info.topic_id, 0, 0, 5),
                                            (unknown, 0, errors.UNKNOWN_TOPIC_ID, -1)])
        self.assertEqual([tp for tp, _ in self.replica_manager.fetches[0][1]], [("t", 0)])

    def test_unknown_topic_and_partition(self):
        body = self.call(fetch_request([("t", [(7, 0)]), ("nope", [(0, 0)])], 12), 12).body
        self.assertEqual(self.parts(body), [("t", 7, errors.UNKNOWN_TOPIC_OR_PARTITION, -1),
                                            ("nope", 0, errors.UNKNOWN_TOPIC_OR_PARTITION, -1)])
        self.assertEqual(self.replica_manager.fetches, [])

    def test_records_are_a_file_region_part(self):
        fd, path = tempfile.mkstemp()
        os.write(fd, b"x" * 5000)
        os.close(fd)
        f = open(path, "rb")
        self.addCleanup(f.close)
        self.addCleanup(os.unlink, path)
        region = FileRegion(f, 100, 4096)
        self.replica_manager.fetch_result = lambda params, infos: [
            (tp, FakeFetchPartitionData(high_watermark=9, records=region)) for tp, _ in infos]
        resp = self.successResultOf(self.apis.handle(self.request(fetch_request([("t", [(0, 0)])], 12), 12)))
        encoded = resp.body.encode(12)
        self.assertIn(region, encoded)
        self.assertEqual(resp.body.to_message().responses[0].partitions[0].records, region)

    def test_empty_records_are_not_null(self):
        body = self.call(fetch_request([("t", [(0, 0)])], 11), 11).body
        self.assertEqual(bytes(body.responses[0].partitions[0].records), b"")

    def test_session_full_then_incremental(self):
        body = self.call(fetch_request([("t", [(0, 0), (1, 0)])], 12, session_id=0, epoch=0), 12).body
        session_id = body.session_id
        self.assertNotEqual(session_id, 0)
        self.assertEqual(len(self.parts(body)), 2)
        # nothing changed: the incremental response carries no partitions, but both were read
        body = self.call(fetch_request([], 12, session_id=session_id, epoch=1), 12).body
        self.assertEqual((body.session_id, body.error_code, self.parts(body)), (session_id, 0, []))
        self.assertEqual([tp for tp, _ in self.replica_manager.fetches[-1][1]], [("t", 0), ("t", 1)])
        # wrong epoch
        body = self.call(fetch_request([], 12, session_id=session_id, epoch=5), 12).body
        self.assertEqual(body.error_code, errors.INVALID_FETCH_SESSION_EPOCH)
        # unknown session
        body = self.call(fetch_request([], 12, session_id=session_id + 1, epoch=1), 12).body
        self.assertEqual(body.error_code, errors.FETCH_SESSION_ID_NOT_FOUND)

    def test_legacy_v4_without_sessions(self):
        body = self.call(fetch_request([("t", [(0, 0)])], 4), 4).body
        self.assertEqual(self.parts(body), [("t", 0, 0, 5)])

    def test_follower_v15_replica_state(self):
        req = fetch_request([(self.info.topic_id, [(0, 0)])], 15)
        req.replica_state = FetchRequest.ReplicaState(replica_id=2, replica_epoch=7)
        self.call(req, 15)
        params = self.replica_manager.fetches[0][0]
        self.assertEqual((params.replica_id, params.replica_epoch), (2, 7))

    def test_aborted_transactions_and_diverging_epoch(self):
        self.replica_manager.fetch_result = lambda params, infos: [
            (tp, FakeFetchPartitionData(aborted_transactions=[(5, 10)], diverging_epoch=(1, 20)))
            for tp, _ in infos]
        body = self.call(fetch_request([("t", [(0, 0)])], 12, isolation_level=1), 12).body
        p = body.responses[0].partitions[0]
        self.assertEqual([(a.producer_id, a.first_offset) for a in p.aborted_transactions], [(5, 10)])
        self.assertEqual((p.diverging_epoch.epoch, p.diverging_epoch.end_offset), (1, 20))

    def test_error_response_shapes(self):
        from kafkatw.server.handlers import fetch

        req = self.request(fetch_request([("t", [(0, 0)])], 12, session_id=3, epoch=1), 12)
        body = fetch.error_response(req, errors.UNKNOWN_SERVER_ERROR, None).to_message()
        self.assertEqual((body.error_code, body.session_id, self.parts(body)),
                         (errors.UNKNOWN_SERVER_ERROR, 3, [("t", 0, errors.UNKNOWN_SERVER_ERROR, -1)]))
        req = self.request(fetch_request([(self.info.topic_id, [(0, 0)])], 13), 13)
        body = fetch.error_response(req, errors.UNKNOWN_SERVER_ERROR, None).to_message()
        self.assertEqual(body.responses, [])
        FetchResponse.decode(body.encode_bytes(13), 13)


class FetchResponseRowsTests(unittest.TestCase):
    """build_response gives the generated row writer each partition's read result: records
    stay file regions, topics are runs of one name (one id from v13)."""

    def test_rows_of_read_results(self):
        from kafkatw.server.fetch_session import TopicIdPartition
        from kafkatw.server.handlers.fetch import ErrorPartitionData, build_response
        from kafkatw.server.replica_manager import FetchPartitionData

        path = os.path.join(self.mktemp())
        with open(path, "wb") as f:
            f.write(os.urandom(300))
        f = open(path, "rb")
        self.addCleanup(f.close)
        a, b = b"\x01" * 16, b"\x02" * 16

        def data(records=b"", aborted=None, diverging=None, replica=-1, error=0, hw=7):
            return FetchPartitionData(error=error, high_watermark=hw, last_stable_offset=hw - 1,
                                      log_start_offset=2, records=records, aborted_transactions=aborted,
                                      diverging_epoch=diverging, preferred_read_replica=replica,
                                      records_size=0 if records is None else (  # as the read counts
                                          records.count if type(records) is FileRegion else len(records)))

        big = FileRegion(f, 10, 200)
        partitions = [
            (TopicIdPartition(a, "t", 3), data(big, aborted=[], replica=None)),
            (TopicIdPartition(a, "t", 1), data(FileRegion(f, 0, 0), hw=9)),
            (TopicIdPartition(b, "u", 0), data(FileRegion(f, 0, 5), replica=2)),
            (TopicIdPartition(a, "t", 2), data(None, aborted=[(5, 10)], diverging=(1, 20))),
            (TopicIdPartition(bytes(16), None, 4), ErrorPartitionData(errors.UNKNOWN_TOPIC_ID)),
            (TopicIdPartition(b, "u", 1), ErrorPartitionData(errors.NOT_LEADER_OR_FOLLOWER)),
            (TopicIdPartition(b, "u", 2), data(b"\x00" * 61)),
        ]
        for version in range(12, 18):
            body = build_response(version, errors.FETCH_SESSION_ID_NOT_FOUND, 77, partitions)
            parts = body.encode(version)
            # the records are file regions, sent as they are (the empty one is written as empty)
            self.assertEqual([(p.position, p.count) for p in parts if type(p) is FileRegion], [(10, 200), (0, 5)])
            got = FetchResponse.decode(body.encode_bytes(version), version)
            self.assertEqual((got.throttle_time_ms, got.error_code, got.session_id),
                             (0, errors.FETCH_SESSION_ID_NOT_FOUND, 77))
            topics = [(t.topic_id if version >= 13 else t.topic, [p.partition_index for p in t.partitions])
                      for t in got.responses]
            if version >= 13:
                self.assertEqual(topics, [(a, [3, 1]), (b, [0]), (a, [2]), (bytes(16), [4]), (b, [1, 2])])
            else:
                self.assertEqual(topics, [("t", [3, 1]), ("u", [0]), ("t", [2]), ("", [4]), ("u", [1, 2])])
            ps = [p for t in got.responses for p in t.partitions]
            self.assertEqual([(p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset,
                               p.preferred_read_replica) for p in ps[:4]],
                             [(0, 7, 6, 2, -1), (0, 9, 8, 2, -1), (0, 7, 6, 2, 2), (0, 7, 6, 2, -1)])
            self.assertEqual([p.records for p in ps],
                             [big.read(), b"", FileRegion(f, 0, 5).read(), b"", b"",
                              b"", b"\x00" * 61])
            self.assertEqual([p.aborted_transactions for p in ps[:2]], [[], None])
            self.assertEqual([(x.producer_id, x.first_offset) for x in ps[3].aborted_transactions], [(5, 10)])
            self.assertEqual((ps[3].diverging_epoch.epoch, ps[3].diverging_epoch.end_offset), (1, 20))
            self.assertEqual([p.error_code for p in ps[4:6]],
                             [errors.UNKNOWN_TOPIC_ID, errors.NOT_LEADER_OR_FOLLOWER])
            self.assertEqual(body.to_message().encode(version)[0], parts[0])
        body.throttle_time_ms = 30  # the quota hook's field
        self.assertEqual(FetchResponse.decode(body.encode_bytes(16), 16).throttle_time_ms, 30)
