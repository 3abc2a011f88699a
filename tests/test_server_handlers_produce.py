"""Tests for the Produce handler: served versions, acks, per-partition errors, record checks."""

import struct

import crc32c
from twisted.internet import defer
from twisted.trial import unittest

from kafkatw.protocol import errors
from kafkatw.protocol import records as rec
from kafkatw.protocol.errors import KafkaError
from kafkatw.protocol.messages import ProduceRequest, ProduceResponse
from tests.test_server_apis import ApisFixture, FakePartitionResponse

TPD = ProduceRequest.TopicProduceData
PPD = ProduceRequest.PartitionProduceData


def batch(n=1, compression=0):
    return rec.build_batch([rec.Record(value=b"v%d" % i) for i in range(n)], compression=compression,
                           base_timestamp=1000)


def produce(parts, acks=1, transactional_id=None):
    """parts: [(topic, partition, records)]"""
    topics = {}
    for topic, partition, records in parts:
        topics.setdefault(topic, []).append(PPD(index=partition, records=records))
    return ProduceRequest(transactional_id=transactional_id, acks=acks, timeout_ms=1500,
                          topic_data=[TPD(name=t, partition_data=p) for t, p in topics.items()])


class ProduceTests(ApisFixture, unittest.TestCase):
    def setUp(self):
        ApisFixture.setUp(self)
        self.create_topic("t", 2)

    def partitions(self, body):
        if isinstance(body, ProduceResponse.Rows):  # as the handler answers: its message
            body = body.to_message()
        return [(t.name, p.index, p.error_code, p.base_offset)
                for t in body.responses for p in t.partition_responses]

    def test_response_rows(self):
        """build_response gives the generated row writer the results in request order, topics
        grouped by first appearance, record errors and messages from v8."""
        from kafkatw.server.handlers.produce import build_response

        long_name = "x" * 200
        cases = [
            ([("t", 0)], {("t", 0): (0, 5, -1, 0, [], None)}),
            # topics grouped in first-appearance order, a long name, a repeated partition
            ([("t", 0), (long_name, 3), ("t", 1), ("t", 0)],
             {("t", 0): (0, 5, 1234, 2, [], None), (long_name, 3): (3, -1, -1, -1, [], None),
              ("t", 1): (0, 2 ** 40, -1, 0, [], None)}),
            ([("t", p) for p in range(130)], {("t", p): (0, p, -1, 0, [], None) for p in range(130)}),
            ([("t", 0), ("t", 1)], {("t", 0): (0, 5, -1, 0, [], None),
                                    ("t", 1): (errors.INVALID_RECORD, -1, -1, -1, [(0, "no key")], "bad")}),
            ([("t", 0)], {("t", 0): (errors.NOT_ENOUGH_REPLICAS, -1, -1, -1, [], "isr")}),
        ]
        from kafkatw.server.replica_manager import PartitionResponse

        for order, rows in cases:
            results = {tp: PartitionResponse(*row) for tp, row in rows.items()}
            grouped = {}
            for topic, partition in order:
                grouped.setdefault(topic, []).append(partition)
            for version in range(0, 12):
                body = build_response(version, order, results)
                self.assertEqual(body.to_message().encode_bytes(version), body.encode_bytes(version))
                got = ProduceResponse.decode(body.encode_bytes(version), version)
                self.assertEqual([(t.name, [p.index for p in t.partition_responses]) for t in got.responses],
                                 list(grouped.items()))
                for t in got.responses:
                    for p in t.partition_responses:
                        code, base, append_time, log_start, record_errors, message = rows[(t.name, p.index)]
                        self.assertEqual((p.error_code, p.base_offset), (code, base))
                        self.assertEqual(p.log_append_time_ms, append_time if version >= 2 else -1)
                        self.assertEqual(p.log_start_offset, log_start if version >= 5 else -1)
                        self.assertEqual([(e.batch_index, e.batch_index_error_message) for e in p.record_errors],
                                         record_errors if version >= 8 else [])
                        self.assertEqual(p.error_message, message if version >= 8 else None)
        body = build_response(9, cases[0][0], {tp: PartitionResponse(*row) for tp, row in cases[0][1].items()})
        body.throttle_time_ms = 25  # the quota hook's field
        self.assertEqual(ProduceResponse.decode(body.encode_bytes(9), 9).throttle_time_ms, 25)

    def test_append(self):
        b = batch(3)
        resp = self.call(produce([("t", 0, b), ("t", 1, b)], acks=-1), 9).body
        self.assertEqual(self.partitions(resp), [("t", 0, 0, 0), ("t", 1, 0, 10)])
        ((timeout, acks, entries),) = self.replica_manager.appends
        self.assertEqual((timeout, acks, sorted(entries)), (1500, -1, [("t", 0), ("t", 1)]))
        self.assertEqual(bytes(entries[("t", 0)]), b)
        self.assertEqual(resp.throttle_time_ms, 0)

    def test_parked_acks_all_frees_its_handler_slot(self):
        """An acks=all append waiting for its replicas marks the handler's work done at once
        (Kafka's DelayedProduce frees the request handler thread): the num.io.threads slot
        serves other connections meanwhile; the response comes when the replicas have it."""
        waiting = defer.Deferred()
        self.replica_manager.append_result = lambda entries: waiting
        request = self.request(produce([("t", 0, batch())], acks=-1), 9)
        released = []
        request._on_local_complete = lambda req, now_ns: released.append(req)
        answer = self.apis.handle(request)
        self.assertEqual(released, [request])
        self.assertNoResult(answer)
        waiting.callback({("t", 0): FakePartitionResponse(base_offset=4)})
        body = self.successResultOf(answer).body.to_message()
        self.assertEqual(self.partitions(body), [("t", 0, 0, 4)])
        self.assertEqual(released, [request])  # once

    def test_wait_paused_on_another_frees_its_handler_slot(self):
        """A wait that has fired but is paused on another Deferred (a DeferredLock's run, a
        chained wait) has ``called`` set and no result yet: it frees the slot as well."""
        inner = defer.Deferred()
        outer = defer.succeed(None)
        outer.addCallback(lambda _: inner)  # paused: called, waiting on inner
        self.assertTrue(outer.called)
        self.replica_manager.append_result = lambda entries: outer
        request = self.request(produce([("t", 0, batch())], acks=-1), 9)
        released = []
        request._on_local_complete = lambda req, now_ns: released.append(req)
        answer = self.apis.handle(request)
        self.assertEqual(released, [request])
        self.assertNoResult(answer)
        inner.callback({("t", 0): FakePartitionResponse(base_offset=7)})
        self.assertEqual(self.partitions(self.successResultOf(answer).body.to_message()), [("t", 0, 0, 7)])
        self.assertEqual(released, [request])

    def test_records_passed_as_memoryview(self):
        self.call(produce([("t", 0, batch())]), 9)
        buf = self.replica_manager.appends[0][2][("t", 0)]
        self.assertIsInstance(buf, memoryview)

    def test_old_versions_unsupported(self):
        for version in (0, 1, 2):
            resp = self.call(produce([("t", 0, batch())]), version).body
            self.assertEqual(self.partitions(resp), [("t", 0, errors.UNSUPPORTED_VERSION, -1)])
        self.assertEqual(self.replica_manager.appends, [])

    def test_invalid_acks(self):
        resp = self.call(produce([("t", 0, batch())], acks=2), 9).body
        self.assertEqual(self.partitions(resp), [("t", 0, errors.INVALID_REQUIRED_ACKS, -1)])

    def test_unknown_partition_and_mixed(self):
        resp = self.call(produce([("t", 0, batch()), ("t", 5, batch()), ("nope", 0, batch())]), 9).body
        self.assertEqual(self.partitions(resp), [("t", 0, 0, 0), ("t", 5, errors.UNKNOWN_TOPIC_OR_PARTITION, -1),
                                                 ("nope", 0, errors.UNKNOWN_TOPIC_OR_PARTITION, -1)])
        self.assertEqual(list(self.replica_manager.appends[0][2]), [("t", 0)])
        self.assertIsNone(self.metadata.get_topic("nope"))  # produce never auto-creates

    def test_record_checks(self):
        two = batch() + batch()
        legacy = bytearray(batch())
        legacy[rec.MAGIC_OFFSET] = 1
        resp = self.call(produce([("t", 0, two), ("t", 1, bytes(legacy))]), 9).body
        self.assertEqual([p[2] for p in self.partitions(resp)], [errors.INVALID_RECORD, errors.INVALID_RECORD])
        resp = self.call(produce([("t", 0, batch()[:-3])]), 9).body
        self.assertEqual(self.partitions(resp)[0][2], errors.CORRUPT_MESSAGE)
        resp = self.call(produce([("t", 0, None)]), 9).body
        self.assertEqual(self.partitions(resp)[0][2], errors.INVALID_RECORD)
        self.assertEqual(self.replica_manager.appends, [])

    def test_header_read_as_read_batch_header(self):
        """validate_records answers read_batch_header's BatchHeader, and its
        CorruptRecordError for a short header or a batch length under the minimum."""
        from kafkatw.server.handlers.produce import validate_records

        good = batch(2)
        self.assertEqual(validate_records(9, good), rec.read_batch_header(good, 0))
        short = good[:rec.MAGIC_OFFSET + 5]
        small = bytearray(good)
        struct.pack_into(">i", small, rec.BATCH_LENGTH_OFFSET, rec.MIN_BATCH_LENGTH - 1)
        for buf in (short, bytes(small)):
            expected = self.assertRaises(rec.CorruptRecordError, rec.read_batch_header, buf, 0)
            got = self.assertRaises(rec.CorruptRecordError, validate_records, 9, buf)
            self.assertEqual(str(got), str(expected))

    def test_magic_checked_first(self):
        """A batch whose magic byte is not 2 is INVALID_RECORD for its version, whether or
        not a whole v2 header would fit; fewer bytes than reach the magic are corrupt."""
        from kafkatw.server.handlers.produce import validate_records

        good = batch(2)
        for cut in (rec.MAGIC_OFFSET + 1, rec.BATCH_HEADER_SIZE - 1, len(good)):
            legacy = bytearray(good[:cut])
            legacy[rec.MAGIC_OFFSET] = 1
            got = self.assertRaises(KafkaError, validate_records, 9, bytes(legacy))
            self.assertEqual((got.code, got.message), (errors.INVALID_RECORD, (
                "Produce requests with version 9 are only allowed to contain record batches "
                "with magic version 2")))
        self.assertRaises(rec.CorruptRecordError, validate_records, 9, good[:rec.MAGIC_OFFSET])

    def test_default_compression_as_topic_compression(self):
        """A topic without a compression.type override under the broker default 'producer'
        keeps what was produced: no codec, so no level."""
        from kafkatw.server.handlers.recompress import PRODUCER, topic_compression

        self.assertEqual(self.apis.compression_type, PRODUCER)
        self.assertEqual(topic_compression(self.apis, {}), (PRODUCER, None))
        self.assertEqual(topic_compression(self.apis, {"retention.ms": "1"}), (PRODUCER, None))

    def test_zstd_needs_v7(self):
        resp = self.call(produce([("t", 0, batch(compression=4))]), 6).body
        self.assertEqual(self.partitions(resp)[0][2], errors.UNSUPPORTED_COMPRESSION_TYPE)
        resp = self.call(produce([("t", 0, batch(compression=4))]), 7).body
        self.assertEqual(self.partitions(resp)[0][2], 0)

    def test_record_errors_v8(self):
        self.replica_manager.append_result = {("t", 0): FakePartitionResponse(
            error_code=errors.INVALID_RECORD, base_offset=-1, record_errors=[(0, "bad key")],
            error_message="One or more records have been rejected")}
        resp = self.call(produce([("t", 0, batch())]), 8).body
        p = resp.responses[0].partition_responses[0]
        self.assertEqual((p.error_code, [(e.batch_index, e.batch_index_error_message) for e in p.record_errors],
                          p.error_message),
                         (errors.INVALID_RECORD, [(0, "bad key")], "One or more records have been rejected"))

    def test_acks_zero_success_is_noop(self):
        resp = self.call(produce([("t", 0, batch())], acks=0), 9)
        self.assertEqual((resp.body, resp.noop, resp.close_connection), (None, True, False))

    def test_acks_zero_failure_closes(self):
        resp = self.call(produce([("nope", 0, batch())], acks=0), 9)
        self.assertEqual((resp.body, resp.noop, resp.close_connection), (None, False, True))

    def test_acks_zero_handler_exception_closes(self):
        self.replica_manager.append_result = lambda entries: defer.fail(RuntimeError("disk"))
        resp = self.call(produce([("t", 0, batch())], acks=0), 9)
        self.assertTrue(resp.close_connection)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_handler_exception_maps_to_unknown_server_error(self):
        self.replica_manager.append_result = lambda entries: defer.fail(RuntimeError("disk"))
        resp = self.call(produce([("t", 0, batch())]), 9)
        self.assertEqual(self.partitions(resp.body), [("t", 0, errors.UNKNOWN_SERVER_ERROR, -1)])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_transactional_refused_without_coordinator(self):
        resp = self.call(produce([("t", 0, batch())], transactional_id="tx"), 9).body
        self.assertEqual(self.partitions(resp)[0][2], errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)


class ProduceCompressionTypeTests(ApisFixture, unittest.TestCase):
    properties = {"compression.type": "lz4"}
    partitions = ProduceTests.partitions

    def codec_of_append(self):
        buf = self.replica_manager.appends[-1][2][("t", 0)]
        return rec.read_batch_header(buf, 0).compression, buf

    def test_broker_default_recompresses(self):
        self.create_topic("t", 1)
        self.call(produce([("t", 0, batch(3, compression=1))]), 9)
        codec, buf = self.codec_of_append()
        self.assertEqual(codec, 3)
        self.assertEqual([r.value for r in rec.decode_batch(buf, 0)[1]], [b"v0", b"v1", b"v2"])

    def test_dynamic_broker_default_applies_to_the_next_produce(self):
        """KafkaApis keeps the broker's compression.type per config: an update is seen."""
        from zope.interface import implementer

        from kafkatw.config.dynamic import IBrokerReconfigurable

        @implementer(IBrokerReconfigurable)
        class LogDefaults:  # what the log manager's DynamicLogConfig is in a broker
            reconfigurable_configs = frozenset(["compression.type"])

            def validate_reconfiguration(self, new_config):
                pass

            def reconfigure(self, old_config, new_config):
                pass

        self.apis.dynamic_config.add_reconfigurable(LogDefaults())
        self.create_topic("t", 1)
        self.apis.dynamic_config.update(dynamic_default={"compression.type": "gzip"})
        self.call(produce([("t", 0, batch(3, compression=3))]), 9)
        self.assertEqual(self.codec_of_append()[0], 1)
        self.apis.dynamic_config.update(dynamic_default={"compression.type": "producer"})
        self.call(produce([("t", 0, batch(3, compression=3))]), 9)
        self.assertEqual(self.codec_of_append()[0], 3)

    def test_topic_producer_keeps_bytes(self):
        self.create_topic("t", 1, {"compression.type": "producer"})
        b = batch(2, compression=2)
        self.call(produce([("t", 0, b)]), 9)
        codec, buf = self.codec_of_append()
        self.assertEqual((codec, bytes(buf)), (2, b))
        self.assertIsInstance(buf, memoryview)

    def test_topic_uncompressed(self):
        self.create_topic("t", 1, {"compression.type": "uncompressed"})
        self.call(produce([("t", 0, batch(2, compression=4))]), 9)
        self.assertEqual(self.codec_of_append()[0], 0)

    def test_same_codec_untouched(self):
        self.create_topic("t", 1)
        self.call(produce([("t", 0, batch(2, compression=3))]), 9)
        self.assertIsInstance(self.codec_of_append()[1], memoryview)

    def test_large_batch_is_recompressed_off_the_reactor(self):
        from kafkatw.server.handlers.recompress import OFF_REACTOR_RECORDS

        self.create_topic("t", 2)
        work = []
        pool = defer.Deferred()
        self.apis.run_blocking = lambda fn, *args: work.append((fn, args)) or pool
        big = batch(OFF_REACTOR_RECORDS, compression=1)
        d = self.apis.handle(self.request(produce([("t", 0, big), ("t", 1, batch(2, compression=1))]), 9))
        self.assertNoResult(d)
        self.assertEqual((len(work), self.replica_manager.appends), (1, []))  # nothing appended yet
        fn, args = work[0]
        self.assertEqual([item[0] for item in args[0]], [("t", 0)])  # the small one went inline
        pool.callback(fn(*args))  # what the pool thread does, then back on the reactor
        response = self.successResultOf(d)
        self.assertEqual([p[2] for p in self.partitions(response.body)], [errors.NONE, errors.NONE])
        appended = self.replica_manager.appends[-1][2]
        self.assertEqual([rec.read_batch_header(appended[tp], 0).compression for tp in (("t", 0), ("t", 1))],
                         [3, 3])
        self.assertEqual(len(rec.decode_batch(appended[("t", 0)], 0)[1]), OFF_REACTOR_RECORDS)

    def test_corrupt_large_batch_answers_corrupt_message(self):
        from kafkatw.server.handlers.recompress import OFF_REACTOR_RECORDS

        self.create_topic("t", 1)
        big = bytearray(batch(OFF_REACTOR_RECORDS, compression=1))
        big[-8:] = b"\0" * 8  # the gzip stream's trailer
        struct.pack_into(">I", big, 17, crc32c.crc32c(bytes(big[21:])))  # a valid CRC over bad data
        resp = self.call(produce([("t", 0, bytes(big))]), 9).body
        self.assertEqual(self.partitions(resp)[0][2], errors.CORRUPT_MESSAGE)
        self.assertEqual(self.replica_manager.appends, [])


def _text_batch(compression=0):
    """Records compressible enough that codec levels give different sizes."""
    words = [b"alpha", b"beta", b"gamma", b"delta", b"epsilon", b"zeta", b"eta", b"theta"]
    values = [b" ".join(words[(i * 7 + j * 3) % 8] + b"%d" % ((i * j) % 13) for j in range(60))
              for i in range(40)]
    return rec.build_batch([rec.Record(value=v) for v in values], compression=compression,
                           base_timestamp=1000)


class ProduceCompressionLevelTests(ApisFixture, unittest.TestCase):
    """KIP-390: a recompressed batch is written at the topic's level for its codec (an override,
    else the broker's ``compression.<codec>.level``): its bytes are exactly what that codec at
    that level gives, and differ between levels."""

    properties = {"compression.type": "zstd", "compression.zstd.level": "1"}

    def appended(self, topic):
        return bytes(self.replica_manager.appends[-1][2][(topic, 0)])

    def expected(self, buf, codec, level):
        from kafkatw.server.handlers.recompress import maybe_recompress

        header = rec.read_batch_header(buf, 0)
        return bytes(maybe_recompress(buf, {1: "gzip", 3: "lz4", 4: "zstd"}[codec], header, level))

    def test_levels_per_codec(self):
        source = _text_batch()
        cases = [  # (topic configs, codec, level the bytes must match)
            ({}, 4, 1),  # the broker's zstd level
            ({"compression.zstd.level": "19"}, 4, 19),
            ({"compression.type": "gzip"}, 1, 6),  # gzip's default -1 is zlib's 6
            ({"compression.type": "gzip", "compression.gzip.level": "1"}, 1, 1),
            ({"compression.type": "gzip", "compression.gzip.level": "9"}, 1, 9),
            ({"compression.type": "lz4"}, 3, 9),  # Kafka's lz4 default: 9 (LZ4 HC)
            ({"compression.type": "lz4", "compression.lz4.level": "1"}, 3, 1),
        ]
        sizes = {}
        for i, (configs, codec, level) in enumerate(cases):
            topic = "t%d" % i
            self.create_topic(topic, 1, configs)
            resp = self.call(produce([(topic, 0, source)]), 9).body
            self.assertEqual(ProduceTests.partitions(self, resp)[0][2], errors.NONE)
            got = self.appended(topic)
            self.assertEqual(rec.read_batch_header(got, 0).compression, codec)
            self.assertEqual(got, self.expected(source, codec, level), (configs, level))
            self.assertEqual([r.value for r in rec.decode_batch(got, 0)[1]],
                             [r.value for r in rec.decode_batch(source, 0)[1]])
            sizes[(codec, level)] = len(got)
        # the levels matter: each pair is a different encoding
        self.assertNotEqual(sizes[(4, 1)], sizes[(4, 19)])
        self.assertNotEqual(sizes[(1, 1)], sizes[(1, 9)])
        self.assertNotEqual(sizes[(3, 1)], sizes[(3, 9)])
