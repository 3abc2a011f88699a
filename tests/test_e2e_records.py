"""Record batches as real clients write them, and corrupt batches over the wire.

Batches sent by confluent-kafka (librdkafka), kafka-python and kcat at every compression
are read back from the segment files (the broker only rewrites base offset and leader
epoch, which the CRC does not cover): they decode, their CRC verifies, uncompressed ones
re-encode byte for byte, and compressed ones re-encode to the same records. A produce
request whose batch has one flipped bit is answered CORRUPT_MESSAGE and nothing is stored.
"""

import glob
import os
import shutil
import socket
import struct
import subprocess
import uuid

from twisted.trial import unittest

from kafkatw.protocol import errors, messages, records
from kafkatw.protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from kafkatw.testing import KafkaBroker
from tests.support import recv_exact

CODECS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
N = 200


def _values(tag):
    return [(b"k%d" % (i % 7), ("%s-%d-" % (tag, i)).encode() + b"y" * (i % 30)) for i in range(N)]


def _produce_confluent(bootstrap, topic, codec, values):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20})
    for k, v in values:
        p.produce(topic, key=k, value=v, headers=[("h", b"1")])
    assert p.flush(30) == 0


def _produce_kafka_python(bootstrap, topic, codec, values):
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20,
                      compression_type=None if codec == "none" else codec)
    for k, v in values:
        p.send(topic, key=k, value=v, headers=[("h", b"1")])
    p.flush(30)
    p.close()


def _produce_kcat(bootstrap, topic, codec, values):
    data = b"".join(k + b":" + v + b"\n" for k, v in values)
    subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", topic, "-K", ":", "-z", codec, "-H", "h=1"],
                   input=data, check=True, timeout=60, capture_output=True)


PRODUCERS = {"confluent": _produce_confluent, "kafka-python": _produce_kafka_python, "kcat": _produce_kcat}


class ClientBatchesTests(unittest.SynchronousTestCase):
    def test_client_batches_decode_verify_and_reencode(self):
        if shutil.which("kcat") is None:
            raise unittest.SkipTest("kcat is not installed")
        broker = KafkaBroker()
        self.addCleanup(broker.close)
        broker.start()
        written = {}
        for client, produce in PRODUCERS.items():
            for codec in CODECS:
                topic = "cap-%s-%s-%s" % (client.replace("-", ""), codec, uuid.uuid4().hex[:6])
                values = _values(client + codec)
                produce(broker.bootstrap_servers, topic, codec, values)
                written[topic] = (client, codec, values)
        broker.stop()  # flush and close segments before reading them

        for topic, (client, codec, values) in written.items():
            what = "%s/%s" % (client, codec)
            (segment,) = glob.glob(os.path.join(broker.data_dir, topic + "-0", "*.log"))
            with open(segment, "rb") as f:
                data = f.read()
            decoded = []
            batches = 0
            codecs_seen = set()
            for pos, header in records.iter_batch_headers(data):
                batches += 1
                self.assertEqual(header.magic, 2, what)
                self.assertTrue(records.verify_crc(data, pos, header), what)
                # librdkafka sends a batch uncompressed when compressing does not shrink it
                self.assertIn(header.compression, (CODECS[codec], NONE), what)
                codecs_seen.add(header.compression)
                h, recs = records.decode_batch(data, pos)
                decoded.extend(recs)
                raw = data[pos:pos + header.size_in_bytes]
                rebuilt = records.build_batch(
                    [records.Record(attributes=r.attributes, timestamp_delta=r.timestamp_delta,
                                    offset_delta=r.offset_delta, key=r.key, value=r.value,
                                    headers=r.headers) for r in recs],
                    base_offset=h.base_offset, compression=h.compression, producer_id=h.producer_id,
                    producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
                    is_transactional=h.is_transactional, timestamp_type=h.timestamp_type,
                    base_timestamp=h.base_timestamp, partition_leader_epoch=h.partition_leader_epoch,
                    max_timestamp=h.max_timestamp, last_offset_delta=h.last_offset_delta)
                if h.compression == NONE:
                    self.assertEqual(rebuilt, raw, what)
                else:
                    h2, recs2 = records.decode_batch(rebuilt, 0)
                    self.assertEqual([(r.key, r.value, r.headers, r.offset) for r in recs2],
                                     [(r.key, r.value, r.headers, r.offset) for r in recs], what)
                    self.assertEqual((h2.base_offset, h2.last_offset_delta, h2.records_count),
                                     (h.base_offset, h.last_offset_delta, h.records_count), what)
            self.assertGreaterEqual(batches, 1, what)
            self.assertIn(CODECS[codec], codecs_seen, what)
            self.assertEqual([(r.key, r.value) for r in decoded], values, what)
            self.assertEqual([r.offset for r in decoded], list(range(N)), what)
            self.assertEqual({tuple(r.headers) for r in decoded}, {(("h", b"1"),)}, what)


def _request(sock, api_key, version, body, correlation_id):
    header = messages.RequestHeader(request_api_key=api_key, request_api_version=version,
                                    correlation_id=correlation_id, client_id="corrupt-test")
    hv = messages.request_header_version(api_key, version)
    payload = header.encode_bytes(hv) + body.encode_bytes(version)
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    frame = recv_exact(sock, size)
    rhv = messages.response_header_version(api_key, version)
    rheader, pos = messages.ResponseHeader.decode_from(memoryview(frame), 0, rhv)
    assert rheader.correlation_id == correlation_id
    return messages.RESPONSES[api_key].decode(memoryview(frame)[pos:], version)


class CorruptBatchOverTheWireTests(unittest.SynchronousTestCase):
    def test_flipped_bit_is_corrupt_message_and_connection_survives(self):
        broker = KafkaBroker(overrides={"num.partitions": 1})
        self.addCleanup(broker.close)
        broker.start()
        topic = "corrupt-" + uuid.uuid4().hex[:6]
        batch = bytearray(records.build_batch(
            [records.Record(key=b"k", value=b"value-%d" % i, timestamp=1_700_000_000_000 + i)
             for i in range(5)]))
        bad = bytearray(batch)
        bad[len(bad) - 3] ^= 0x10  # inside the last record: covered by the CRC

        def produce(data):
            return messages.ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
                messages.ProduceRequest.TopicProduceData(name=topic, partition_data=[
                    messages.ProduceRequest.PartitionProduceData(index=0, records=bytes(data))])])

        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
            md = _request(s, 3, 9, messages.MetadataRequest(
                topics=[messages.MetadataRequest.MetadataRequestTopic(name=topic)],
                allow_auto_topic_creation=True), 1)
            self.assertEqual([t.error_code for t in md.topics], [errors.NONE])
            resp = _request(s, 0, 9, produce(bad), 2)
            part = resp.responses[0].partition_responses[0]
            self.assertEqual(part.error_code, errors.CORRUPT_MESSAGE)
            # the same connection still works, and nothing of the bad batch was stored
            resp = _request(s, 0, 9, produce(batch), 3)
            part = resp.responses[0].partition_responses[0]
            self.assertEqual((part.error_code, part.base_offset), (errors.NONE, 0))
