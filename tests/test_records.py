"""Tests for kafkatw.protocol.records: v2 batch headers, CRC, in-place writers."""

import os
import struct

from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.memory_records import MemoryRecordsBuilder as KpBuilder
from twisted.trial.unittest import SkipTest, SynchronousTestCase

from kafkatw.protocol import errors, records
from kafkatw.protocol.records import (
    BATCH_HEADER_SIZE, LOG_OVERHEAD, BatchHeader, CorruptRecordError, InvalidRecordError,
    iter_batch_headers, read_batch_header, set_base_offset, set_log_append_time,
    set_partition_leader_epoch, validate_batch, verify_crc,
)


def kp_batch(messages, compression=0, offset=0, producer=(-1, -1, -1), transactional=False):
    """A batch built by kafka-python: messages are (timestamp, key, value, headers)."""
    builder = KpBuilder(2, compression, 1 << 20, offset=0, transactional=transactional,
                        producer_id=producer[0], producer_epoch=producer[1],
                        base_sequence=producer[2])
    for ts, key, value, headers in messages:
        builder.append(ts, key, value, headers)
    builder.close()
    buf = bytearray(builder.buffer())
    # kafka-python leaves the base offset to the broker (it writes 0).
    set_base_offset(buf, 0, offset)
    return bytes(buf)


BIG = [(2000 + i, b"key-%d" % i, b"value " * 50, [("n", b"%d" % i)]) for i in range(20)]

SAMPLE = [
    (1000, b"k1", b"v1", []),
    (1005, None, b"v2", [("h", b"x")]),
    (1003, b"k3", None, [("a", None), ("b", b"")]),
]


class BatchHeaderTests(SynchronousTestCase):

    def test_constants(self):
        self.assertEqual(BATCH_HEADER_SIZE, 61)
        self.assertEqual(LOG_OVERHEAD, 12)

    def test_read_header_of_foreign_batch(self):
        buf = kp_batch(SAMPLE, offset=0, producer=(77, 3, 10), transactional=True)
        h = read_batch_header(buf)
        self.assertEqual(h.base_offset, 0)
        self.assertEqual(h.batch_length, len(buf) - 12)
        self.assertEqual(h.size_in_bytes, len(buf))
        self.assertEqual(h.magic, 2)
        self.assertEqual(h.last_offset_delta, 2)
        self.assertEqual(h.last_offset, 2)
        self.assertEqual(h.next_offset, 3)
        self.assertEqual(h.base_timestamp, 1000)
        self.assertEqual(h.max_timestamp, 1005)
        self.assertEqual(h.producer_id, 77)
        self.assertEqual(h.producer_epoch, 3)
        self.assertEqual(h.base_sequence, 10)
        self.assertEqual(h.last_sequence, 12)
        self.assertEqual(h.records_count, 3)
        self.assertTrue(h.is_transactional)
        self.assertFalse(h.is_control)
        self.assertFalse(h.has_delete_horizon)
        self.assertEqual(h.compression, 0)
        self.assertEqual(h.timestamp_type, 0)
        self.assertEqual(h.crc, KpBatch(buf).crc)
        self.assertTrue(verify_crc(buf, 0, h))
        self.assertIs(validate_batch(buf, 0, h), h)

    def test_header_read_is_the_header_made_from_its_fields(self):
        """read_batch_header fills each field from its place on the wire: the same header as
        the constructor makes from the unpacked fields in BATCH_HEADER field order."""
        buf = kp_batch(SAMPLE, producer=(77, 3, 10))
        h = read_batch_header(buf)
        fields = records._HEADER.unpack_from(buf, 0)
        self.assertEqual(h.fields(), fields)
        self.assertEqual(h, BatchHeader(*fields))
        self.assertEqual(hash(h), hash(BatchHeader(*fields)))
        self.assertEqual(h, BatchHeader(**dict(zip(records._BATCH_HEADER_FIELDS, fields))))
        changed = h._replace(records_count=9)
        self.assertEqual((changed.records_count, changed.producer_id, h.records_count), (9, 77, 3))
        self.assertNotEqual(changed, h)
        self.assertIn("producer_id=77", repr(h))
        self.assertRaises(AttributeError, setattr, h, "other", 1)  # slots only

    def test_buffer_kinds(self):
        buf = kp_batch(SAMPLE)
        expected = read_batch_header(buf)
        self.assertEqual(read_batch_header(bytearray(buf)), expected)
        self.assertEqual(read_batch_header(memoryview(buf)), expected)
        padded = b"\x00" * 5 + buf
        self.assertEqual(read_batch_header(memoryview(padded), 5), expected)
        self.assertTrue(verify_crc(memoryview(padded), 5, expected))

    def test_attribute_bits(self):
        buf = bytearray(kp_batch(SAMPLE))
        struct.pack_into(">h", buf, 21, 0x7F)
        h = read_batch_header(buf)
        self.assertEqual(h.compression, 7)
        self.assertEqual(h.timestamp_type, 1)
        self.assertTrue(h.is_transactional)
        self.assertTrue(h.is_control)
        self.assertTrue(h.has_delete_horizon)
        self.assertEqual(h.delete_horizon_ms, h.base_timestamp)

    def test_short_input(self):
        buf = kp_batch(SAMPLE)
        for n in (0, 1, 12, 60):
            e = self.assertRaises(CorruptRecordError, read_batch_header, buf[:n])
            self.assertEqual(e.code, errors.CORRUPT_MESSAGE)
        self.assertRaises(CorruptRecordError, read_batch_header, buf, len(buf) - 60)
        self.assertRaises(CorruptRecordError, read_batch_header, buf, -1)

    def test_small_batch_length(self):
        buf = bytearray(kp_batch(SAMPLE))
        struct.pack_into(">i", buf, 8, 48)
        self.assertRaises(CorruptRecordError, read_batch_header, buf)

    def test_unsupported_magic(self):
        buf = bytearray(kp_batch(SAMPLE))
        for magic in (0, 1, 3, 255):
            buf[16] = magic
            self.assertRaises(CorruptRecordError, read_batch_header, buf)
            self.assertEqual(records.read_magic(buf), magic)

    def test_iter_batch_headers(self):
        a = kp_batch(SAMPLE, offset=0)
        b = kp_batch(SAMPLE[:1], offset=3)
        c = kp_batch(BIG[:2], offset=4, compression=1)
        buf = a + b + c
        got = list(iter_batch_headers(buf))
        self.assertEqual([pos for pos, _ in got], [0, len(a), len(a) + len(b)])
        self.assertEqual([h.base_offset for _, h in got], [0, 3, 4])
        self.assertEqual([h.next_offset for _, h in got], [3, 4, 6])
        self.assertEqual(list(iter_batch_headers(b"")), [])

    def test_iter_truncated_tail(self):
        a = kp_batch(SAMPLE)
        b = kp_batch(SAMPLE[:1], offset=3)
        for cut in (1, 11, 12, 30, 60, 61, len(b) - 1):
            buf = a + b[:cut]
            e = self.assertRaises(CorruptRecordError, list, iter_batch_headers(buf))
            self.assertEqual(e.code, errors.CORRUPT_MESSAGE)
            got = list(iter_batch_headers(memoryview(buf), allow_partial_tail=True))
            self.assertEqual([pos for pos, _ in got], [0])

    def test_iter_invalid_length_in_partial_tail_raises(self):
        a = kp_batch(SAMPLE)
        tail = struct.pack(">qi", 0, 10) + b"\x00" * 10
        self.assertRaises(CorruptRecordError, list,
                          iter_batch_headers(a + tail, allow_partial_tail=True))

    def test_flipped_bit(self):
        buf = kp_batch(SAMPLE, producer=(5, 0, 0))
        # Every byte from attributes on is covered by the CRC.
        for i in range(21, len(buf)):
            corrupt = bytearray(buf)
            corrupt[i] ^= 0x10
            try:
                h = read_batch_header(corrupt)
            except CorruptRecordError:
                continue
            self.assertFalse(verify_crc(corrupt, 0, h), i)
            e = self.assertRaises((CorruptRecordError, InvalidRecordError),
                                  validate_batch, corrupt, 0, h)
            self.assertEqual(e.code, errors.CORRUPT_MESSAGE)
        # The CRC itself.
        corrupt = bytearray(buf)
        corrupt[18] ^= 1
        h = read_batch_header(corrupt)
        self.assertFalse(verify_crc(corrupt, 0, h))
        self.assertRaises(CorruptRecordError, validate_batch, corrupt, 0, h)

    def test_verify_crc_truncated(self):
        buf = kp_batch(SAMPLE)
        h = read_batch_header(buf)
        self.assertFalse(verify_crc(buf[:-1], 0, h))
        self.assertRaises(CorruptRecordError, validate_batch, buf[:-1], 0, h)

    def _with_header_field(self, buf, fmt, offset, value):
        buf = bytearray(buf)
        struct.pack_into(fmt, buf, offset, value)
        records._rewrite_crc(buf, 0)
        return buf

    def test_validate_count_mismatch(self):
        buf = kp_batch(SAMPLE)
        bad = self._with_header_field(buf, ">i", 57, 2)
        e = self.assertRaises(InvalidRecordError, validate_batch, bad, 0, read_batch_header(bad))
        self.assertEqual(e.code, errors.INVALID_RECORD)
        bad = self._with_header_field(buf, ">i", 23, 5)
        self.assertRaises(InvalidRecordError, validate_batch, bad, 0, read_batch_header(bad))
        bad = self._with_header_field(buf, ">i", 57, -1)
        self.assertRaises(InvalidRecordError, validate_batch, bad, 0, read_batch_header(bad))

    def test_validate_empty(self):
        buf = self._with_header_field(kp_batch(SAMPLE), ">i", 57, 0)
        h = read_batch_header(buf)
        self.assertRaises(InvalidRecordError, validate_batch, buf, 0, h)
        self.assertIs(validate_batch(buf, 0, h, allow_empty=True), h)

    def test_ensure_valid_accepts_compacted_batch(self):
        # Compaction keeps last_offset_delta but drops records.
        buf = build_batch([Record(offset_delta=0, value=b"a"), Record(offset_delta=4, value=b"b")],
                          base_timestamp=0)
        h = read_batch_header(buf)
        self.assertEqual((h.records_count, h.last_offset_delta), (2, 4))
        self.assertIs(records.ensure_valid(buf, 0, h), h)
        self.assertRaises(InvalidRecordError, validate_batch, buf, 0, h)
        bad = bytearray(buf)
        bad[-1] ^= 1
        self.assertRaises(CorruptRecordError, records.ensure_valid, bad, 0, h)
        self.assertRaises(CorruptRecordError, records.ensure_valid, buf[:-1], 0, h)

    def test_validate_too_many_records_for_size(self):
        buf = kp_batch(SAMPLE[:1])
        bad = self._with_header_field(buf, ">i", 57, 1000)
        bad = self._with_header_field(bad, ">i", 23, 999)
        self.assertRaises(CorruptRecordError, validate_batch, bad, 0, read_batch_header(bad))

    def test_set_base_offset_and_epoch(self):
        buf = bytearray(kp_batch(SAMPLE))
        set_base_offset(buf, 0, 123456789012)
        set_partition_leader_epoch(buf, 0, 42)
        h = read_batch_header(buf)
        self.assertEqual(h.base_offset, 123456789012)
        self.assertEqual(h.partition_leader_epoch, 42)
        self.assertEqual(h.last_offset, 123456789014)
        self.assertTrue(verify_crc(buf, 0, h))
        kp = KpBatch(bytes(buf))
        self.assertTrue(kp.validate_crc())
        self.assertEqual([r.offset for r in kp], [123456789012, 123456789013, 123456789014])

    def test_set_base_offset_and_epoch_in_one_pack(self):
        """The leader's rewrite in one pack: the same bytes as the two setters, at any
        position, the batch length untouched."""
        from kafkatw.protocol.records import set_base_offset_length_and_epoch

        one = bytearray(b"xyz" + kp_batch(SAMPLE))
        two = bytearray(one)
        set_base_offset(two, 3, 77)
        set_partition_leader_epoch(two, 3, 5)
        set_base_offset_length_and_epoch(one, 3, 77, read_batch_header(one, 3).batch_length, 5)
        self.assertEqual(one, two)

    def test_writers_on_memoryview_slice(self):
        a = kp_batch(SAMPLE)
        buf = bytearray(a + a)
        view = memoryview(buf)
        for pos, _ in list(iter_batch_headers(view)):
            set_base_offset(view, pos, 10 + pos)
            set_log_append_time(view, pos, 99)
        hs = list(iter_batch_headers(buf))
        self.assertEqual([h.base_offset for _, h in hs], [10, 10 + len(a)])
        for pos, h in hs:
            self.assertEqual(h.max_timestamp, 99)
            self.assertTrue(verify_crc(buf, pos, h))

    def test_set_log_append_time(self):
        buf = bytearray(kp_batch(BIG, compression=1))
        before = read_batch_header(buf)
        set_log_append_time(buf, 0, 1700000000000)
        h = read_batch_header(buf)
        self.assertEqual(h.timestamp_type, 1)
        self.assertEqual(h.max_timestamp, 1700000000000)
        self.assertEqual(h.base_timestamp, before.base_timestamp)
        self.assertEqual(h.compression, 1)
        self.assertNotEqual(h.crc, before.crc)
        self.assertTrue(verify_crc(buf, 0, h))
        kp = KpBatch(bytes(buf))
        self.assertTrue(kp.validate_crc())
        got = list(kp)
        self.assertEqual([r.timestamp for r in got], [1700000000000] * 20)
        self.assertEqual([r.timestamp_type for r in got], [1] * 20)


# -- full decode / build ------------------------------------------------------------------

import os  # noqa: E402

from aiokafka.record import default_records as aio_default  # noqa: E402
from aiokafka.record.control_record import ABORT_MARKER, COMMIT_MARKER  # noqa: E402
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402
from kafka.record.default_records import ControlRecord as KpControlRecord  # noqa: E402

from kafkatw.protocol.records import (  # noqa: E402
    Record, build_batch, build_control_batch, decode_batch, decode_control_record,
)

CODECS = (0, 1, 2, 3, 4)
AIO_READERS = (aio_default._DefaultRecordBatchPy, aio_default.DefaultRecordBatch)
AIO_BUILDERS = (aio_default._DefaultRecordBatchBuilderPy, aio_default.DefaultRecordBatchBuilder)


def aio_batch(builder_cls, messages, compression=0, producer=(-1, -1, -1), transactional=False):
    builder = builder_cls(2, compression, transactional, producer[0], producer[1], producer[2],
                          1 << 20)
    for offset, (ts, key, value, headers) in enumerate(messages):
        builder.append(offset, ts, key, value, headers)
    return bytes(builder.build())


def as_records(messages):
    return [Record(key=k, value=v, headers=list(h), timestamp=ts) for ts, k, v, h in messages]


def their_view(batch):
    """(offset, timestamp, timestamp_type, key, value, headers) from a foreign reader."""
    return [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, list(r.headers))
            for r in batch]


def our_view(header, recs):
    return [(r.offset, r.timestamp, header.timestamp_type, r.key, r.value, r.headers)
            for r in recs]


class DecodeForeignBatchTests(SynchronousTestCase):

    def _check(self, buf, messages, codec, base_offset=0):
        header, recs = decode_batch(buf)
        self.assertEqual(header.compression, codec)
        self.assertEqual(header.records_count, len(messages))
        expected = [(base_offset + i, ts, 0, k, v, list(h))
                    for i, (ts, k, v, h) in enumerate(messages)]
        self.assertEqual(our_view(header, recs), expected)
        self.assertEqual([r.offset_delta for r in recs], list(range(len(messages))))
        self.assertEqual([r.timestamp_delta for r in recs],
                         [ts - messages[0][0] for ts, _, _, _ in messages])
        validate_batch(buf, 0, header)

    def test_kafka_python_batches(self):
        for codec in (0, 1, 3, 4):  # kafka-python's snappy needs python-snappy
            for messages in (SAMPLE, BIG):
                if codec and messages is SAMPLE:
                    continue  # kafka-python falls back to no compression for tiny batches
                buf = kp_batch(messages, compression=codec, offset=1000)
                self._check(buf, messages, codec, base_offset=1000)

    def test_aiokafka_batches(self):
        for builder_cls in AIO_BUILDERS:
            for codec in CODECS:
                buf = aio_batch(builder_cls, BIG, compression=codec, producer=(9, 1, 5))
                self._check(buf, BIG, codec)
                self.assertEqual(read_batch_header(buf).producer_id, 9)

    def test_memoryview_and_offset_position(self):
        buf = kp_batch(SAMPLE)
        other = kp_batch(BIG, compression=1, offset=3)
        joined = memoryview(buf + other)
        header, recs = decode_batch(joined, len(buf))
        self.assertEqual(header.base_offset, 3)
        self.assertEqual([r.value for r in recs], [m[2] for m in BIG])
        self.assertEqual([(h.base_offset, len(rs)) for h, rs in records.iter_batches(joined)],
                         [(0, 3), (3, 20)])

    def test_log_append_time_timestamps(self):
        buf = bytearray(kp_batch(SAMPLE))
        set_log_append_time(buf, 0, 5555)
        header, recs = decode_batch(buf)
        self.assertEqual([r.timestamp for r in recs], [5555] * 3)
        self.assertEqual(header.timestamp_type, 1)


class BuildBatchTests(SynchronousTestCase):

    def test_uncompressed_bytes_identical_to_clients(self):
        for messages in (SAMPLE, BIG, SAMPLE[:1]):
            ours = build_batch(as_records(messages), partition_leader_epoch=0)
            self.assertEqual(ours, kp_batch(messages))
            # aiokafka leaves the partition leader epoch at -1, kafka-python at 0.
            ours_aio = build_batch(as_records(messages))
            for builder_cls in AIO_BUILDERS:
                self.assertEqual(ours_aio, aio_batch(builder_cls, messages))
            ours = build_batch(as_records(messages), partition_leader_epoch=0,
                               producer_id=4, producer_epoch=2, base_sequence=77,
                               is_transactional=True)
            self.assertEqual(ours, kp_batch(messages, producer=(4, 2, 77), transactional=True))

    def test_clients_read_our_batches(self):
        for codec in CODECS:
            for messages in (SAMPLE, BIG):
                buf = build_batch(as_records(messages), base_offset=500, compression=codec,
                                  producer_id=8, producer_epoch=0, base_sequence=3)
                expected = [(500 + i, ts, 0, k, v, list(h))
                            for i, (ts, k, v, h) in enumerate(messages)]
                kp = KpBatch(buf)
                self.assertTrue(kp.validate_crc())
                self.assertEqual(kp.compression_type, codec)
                if codec != 2:  # kafka-python's snappy needs python-snappy (not installed)
                    self.assertEqual(their_view(kp), expected)
                for reader in AIO_READERS:
                    aio = reader(buf)
                    self.assertTrue(aio.validate_crc())
                    self.assertEqual(aio.compression_type, codec)
                    self.assertEqual((aio.producer_id, aio.producer_epoch, aio.base_sequence),
                                     (8, 0, 3))
                    self.assertEqual(their_view(aio), expected)
                header, recs = decode_batch(buf)
                self.assertEqual(our_view(header, recs), expected)
                validate_batch(buf, 0, header)

    def test_header_fields(self):
        recs = [Record(key=b"a", timestamp=100), Record(key=b"b", timestamp=90),
                Record(key=b"c", timestamp=130)]
        buf = build_batch(recs, base_offset=7, partition_leader_epoch=3,
                          timestamp_type=records.LOG_APPEND_TIME)
        h = read_batch_header(buf)
        self.assertEqual((h.base_offset, h.partition_leader_epoch, h.last_offset_delta,
                          h.base_timestamp, h.max_timestamp, h.records_count),
                         (7, 3, 2, 100, 130, 3))
        self.assertEqual(h.timestamp_type, 1)
        self.assertEqual(h.size_in_bytes, len(buf))

    def test_deltas_and_offsets(self):
        recs = [Record(offset_delta=0, timestamp_delta=0, value=b"x"),
                Record(offset_delta=5, timestamp_delta=-3, value=b"y")]
        buf = build_batch(recs, base_offset=10, base_timestamp=1000)
        h, out = decode_batch(buf)
        self.assertEqual(h.last_offset_delta, 5)
        self.assertEqual(h.max_timestamp, 1000)
        self.assertEqual([(r.offset, r.timestamp) for r in out], [(10, 1000), (15, 997)])
        buf = build_batch([Record(offset=20, value=b"a"), Record(offset=22, value=b"b")],
                          base_offset=20, base_timestamp=5)
        h, out = decode_batch(buf)
        self.assertEqual([r.offset_delta for r in out], [0, 2])
        self.assertEqual(h.last_offset, 22)

    def test_empty_and_null_fields(self):
        recs = [Record(key=None, value=None, headers=[]),
                Record(key=b"", value=b"", headers=[("", b""), ("k\u00e9y", None)])]
        h, out = decode_batch(build_batch(recs, base_timestamp=1))
        self.assertEqual([(r.key, r.value, r.headers) for r in out],
                         [(None, None, []), (b"", b"", [("", b""), ("k\u00e9y", None)])])

    def test_large_varints(self):
        recs = [Record(key=b"k" * 300, value=os.urandom(70000), timestamp=-(1 << 40)),
                Record(value=b"v", timestamp=(1 << 42))]
        h, out = decode_batch(build_batch(recs))
        self.assertEqual([r.timestamp for r in out], [-(1 << 40), 1 << 42])
        self.assertEqual(out[0].value, recs[0].value)
        self.assertEqual(their_view(KpBatch(build_batch(recs)))[1][1], 1 << 42)


class ControlBatchTests(SynchronousTestCase):

    def test_commit_and_abort(self):
        for marker, aio_marker in ((records.COMMIT, COMMIT_MARKER),
                                   (records.ABORT, ABORT_MARKER)):
            buf = build_control_batch(marker, 12, 3000, 4, base_offset=77, timestamp=1234,
                                      partition_leader_epoch=2)
            h, recs = decode_batch(buf)
            self.assertTrue(h.is_control)
            self.assertTrue(h.is_transactional)
            self.assertEqual((h.producer_id, h.producer_epoch, h.base_sequence), (3000, 4, -1))
            self.assertEqual((h.base_offset, h.records_count, h.max_timestamp), (77, 1, 1234))
            validate_batch(buf, 0, h)
            control = decode_control_record(recs[0])
            self.assertEqual((control.version, control.type, control.coordinator_epoch),
                             (0, marker, 12))
            self.assertEqual(control.is_commit, marker == records.COMMIT)
            self.assertEqual(recs[0].key, struct.pack(">hh", 0, marker))
            self.assertEqual(recs[0].value, struct.pack(">hi", 0, 12))
            for reader in AIO_READERS:
                aio = reader(buf)
                self.assertTrue(aio.is_control_batch)
                self.assertTrue(aio.validate_crc())
                from aiokafka.record.control_record import ControlRecord as AioControl
                self.assertEqual(AioControl.parse(next(iter(aio)).key), aio_marker)
            kp_records = list(KpBatch(buf))
            self.assertIsInstance(kp_records[0], KpControlRecord)
            self.assertEqual(kp_records[0].commit, marker == records.COMMIT)

    def test_other_control_types_and_invalid(self):
        rec = Record(key=struct.pack(">hh", 0, records.LEADER_CHANGE), value=b"whatever")
        self.assertEqual(decode_control_record(rec), records.ControlRecord(0, 2, None))
        for key in (None, b"", b"\x00\x00\x00"):
            self.assertRaises(InvalidRecordError, decode_control_record, Record(key=key))
        self.assertRaises(InvalidRecordError, decode_control_record,
                          Record(key=struct.pack(">hh", -1, 1), value=b"\x00" * 6))
        self.assertRaises(InvalidRecordError, decode_control_record,
                          Record(key=struct.pack(">hh", 0, 1), value=b"\x00" * 5))
        self.assertRaises(InvalidRecordError, build_control_batch, 2, 0, 1, 1)


class CorruptRecordsTests(SynchronousTestCase):

    def test_crc_checked_by_decode(self):
        buf = bytearray(build_batch(as_records(SAMPLE)))
        buf[-1] ^= 1
        self.assertRaises(CorruptRecordError, decode_batch, buf)
        decode_batch(buf, verify=False)  # still structurally fine

    def test_count_larger_than_records(self):
        buf = bytearray(build_batch(as_records(SAMPLE)))
        struct.pack_into(">i", buf, 57, 4)
        records._rewrite_crc(buf, 0)
        self.assertRaises(CorruptRecordError, decode_batch, buf)
        struct.pack_into(">i", buf, 57, 2)
        records._rewrite_crc(buf, 0)
        e = self.assertRaises(CorruptRecordError, decode_batch, buf)
        self.assertIn("left after", str(e))

    def test_record_length_mismatch(self):
        good = build_batch([Record(key=b"abc", value=b"defg", timestamp=1)])
        buf = bytearray(good)
        buf[61] += 2  # record length varint (zigzag): +1
        records._rewrite_crc(buf, 0)
        self.assertRaises(CorruptRecordError, decode_batch, buf)

    def test_corrupt_compressed_body(self):
        buf = bytearray(build_batch(as_records(BIG), compression=4))
        buf[80] ^= 0xFF
        records._rewrite_crc(buf, 0)
        self.assertRaises(CorruptRecordError, decode_batch, buf)

    def test_truncated(self):
        buf = build_batch(as_records(SAMPLE))
        for n in range(0, len(buf)):
            self.assertRaises(CorruptRecordError, decode_batch, buf[:n])


ALLOWED = (CorruptRecordError, InvalidRecordError)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))

record_strategy = st.builds(
    Record,
    key=st.none() | st.binary(max_size=40),
    value=st.none() | st.binary(max_size=200),
    headers=st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)),
                     max_size=3),
    timestamp=st.integers(min_value=-(1 << 50), max_value=1 << 50),
)


class PropertyTests(SynchronousTestCase):

    @FUZZ
    @given(st.lists(record_strategy, min_size=1, max_size=12), st.sampled_from(CODECS),
           st.integers(min_value=0, max_value=1 << 60))
    def test_round_trip(self, recs, codec, base_offset):
        buf = build_batch(recs, base_offset=base_offset, compression=codec)
        h, out = decode_batch(buf)
        validate_batch(buf, 0, h)
        self.assertEqual([(r.key, r.value, r.headers, r.timestamp) for r in out],
                         [(r.key, r.value, r.headers, r.timestamp) for r in recs])
        self.assertEqual([r.offset for r in out],
                         list(range(base_offset, base_offset + len(recs))))
        self.assertEqual(h.max_timestamp, max(r.timestamp for r in recs))
        theirs = aio_default.DefaultRecordBatch(buf)
        self.assertTrue(theirs.validate_crc())
        self.assertEqual([(r.key, r.value, r.timestamp) for r in theirs],
                         [(r.key, r.value, r.timestamp) for r in recs])

    @FUZZ
    @given(st.binary(max_size=200))
    def test_random_bytes(self, data):
        for fn in (read_batch_header, decode_batch, lambda b: list(iter_batch_headers(b))):
            try:
                fn(data)
            except ALLOWED:
                pass

    @FUZZ
    @given(st.binary(min_size=61, max_size=200))
    def test_random_bytes_behind_valid_header(self, data):
        # A plausible header (right length and magic) in front of random bytes reaches the
        # record decoder; verify=False skips the CRC so mutations get that far.
        buf = bytearray(data)
        struct.pack_into(">i", buf, 8, len(buf) - 12)
        buf[16] = 2
        for verify in (True, False):
            try:
                decode_batch(buf, verify=verify)
            except ALLOWED:
                pass

    @FUZZ
    @given(st.sampled_from(CODECS), st.data())
    def test_mutated_valid_batch(self, codec, data):
        buf = bytearray(build_batch(as_records(BIG[:5]), compression=codec))
        for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
            i = data.draw(st.integers(min_value=0, max_value=len(buf) - 1))
            buf[i] = data.draw(st.integers(min_value=0, max_value=255))
        cut = data.draw(st.integers(min_value=0, max_value=len(buf)))
        for candidate in (buf, buf[:cut]):
            for verify in (True, False):
                try:
                    h, _ = decode_batch(candidate, verify=verify)
                    validate_batch(candidate, 0, h)
                except ALLOWED:
                    pass


# -- legacy message sets ------------------------------------------------------------------

import zlib  # noqa: E402

from aiokafka.record import legacy_records as aio_legacy  # noqa: E402
from kafka.record.legacy_records import LegacyRecordBatchBuilder as KpLegacyBuilder  # noqa: E402
from kafka.record.memory_records import MemoryRecords as KpMemoryRecords  # noqa: E402

from kafkatw.protocol import compression  # noqa: E402
from kafkatw.protocol.records import (  # noqa: E402
    build_legacy_message_set, iter_legacy_messages, legacy_to_batch,
)

LEGACY = [(1000 + i, b"key%d" % i if i % 3 else None, b"value %d " % i * 20) for i in range(12)]


def legacy_set(builder_cls, magic, codec, messages=LEGACY, first_offset=0):
    builder = builder_cls(magic, codec, 1 << 20)
    for i, (ts, key, value) in enumerate(messages):
        builder.append(first_offset + i, ts, key, value, [])
    return bytes(builder.build())


def legacy_view(msgs):
    return [(m.offset, m.timestamp, m.key, m.value) for m in msgs]


class LegacyReadTests(SynchronousTestCase):

    def _expected(self, magic, first_offset=0):
        return [(first_offset + i, ts if magic else -1, k, v)
                for i, (ts, k, v) in enumerate(LEGACY)]

    def test_uncompressed(self):
        for magic in (0, 1):
            buf = legacy_set(KpLegacyBuilder, magic, 0, first_offset=40)
            msgs = list(iter_legacy_messages(buf))
            self.assertEqual(legacy_view(msgs), self._expected(magic, 40))
            self.assertEqual({m.magic for m in msgs}, {magic})
            self.assertEqual({m.timestamp_type for m in msgs}, {0 if magic else -1})
            self.assertEqual([m.crc for m in msgs], [r.checksum for r in
                                                     _kp_legacy_records(buf)])

    def test_compressed_wrappers(self):
        cases = [(KpLegacyBuilder, 0, 1), (KpLegacyBuilder, 1, 1),
                 (aio_legacy._LegacyRecordBatchBuilderPy, 1, 2),
                 (aio_legacy._LegacyRecordBatchBuilderPy, 0, 2),
                 (aio_legacy._LegacyRecordBatchBuilderPy, 1, 3)]
        for builder_cls, magic, codec in cases:
            buf = legacy_set(builder_cls, magic, codec)
            shallow = list(iter_legacy_messages(buf, deep=False))
            self.assertEqual(len(shallow), 1)
            self.assertEqual(shallow[0].compression, codec)
            # The client leaves the wrapper offset at 0; v1 inner offsets are relative to it
            # (so they end at 0), v0 inner offsets are taken as they are.
            got = legacy_view(iter_legacy_messages(buf))
            shift = -(len(LEGACY) - 1) if magic else 0
            self.assertEqual(got, self._expected(magic, shift), (builder_cls, magic, codec))

    def test_v1_relative_offsets_against_wrapper(self):
        buf = bytearray(legacy_set(KpLegacyBuilder, 1, 1))
        struct.pack_into(">q", buf, 0, 500)  # the broker's offset: that of the last inner
        got = [m.offset for m in iter_legacy_messages(buf, verify=True)]
        self.assertEqual(got, list(range(500 - len(LEGACY) + 1, 501)))
        self.assertEqual(got, [r.offset for r in _kp_legacy_records(bytes(buf))])

    def test_wrapper_log_append_time(self):
        inner = bytearray()
        records._encode_legacy_message(inner, 0, 1, 0, 5, b"a", b"b")
        records._encode_legacy_message(inner, 1, 1, 0, 6, b"c", b"d")
        out = bytearray()
        records._encode_legacy_message(out, 9, 1, 0x08 | 1, 777, None,
                                       compression.compress(1, inner))
        msgs = list(iter_legacy_messages(out))
        self.assertEqual([(m.offset, m.timestamp, m.timestamp_type) for m in msgs],
                         [(8, 777, 1), (9, 777, 1)])

    def test_lz4_v0_with_broken_header_checksum(self):
        inner = bytearray()
        for i in range(3):
            records._encode_legacy_message(inner, i, 0, 0, -1, None, b"m%d" % i)
        frame = bytearray(compression.compress(compression.LZ4, inner))
        frame[6] = (compression.xxh32(bytes(frame[:6])) >> 8) & 0xFF  # Kafka 0.8 style
        out = bytearray()
        records._encode_legacy_message(out, 2, 0, 3, -1, None, bytes(frame))
        self.assertEqual([m.value for m in iter_legacy_messages(out)], [b"m0", b"m1", b"m2"])

    def test_crc_and_structure_errors(self):
        buf = legacy_set(KpLegacyBuilder, 1, 0)
        for i in (16, 17, 20, 30, len(buf) - 1):
            bad = bytearray(buf)
            bad[i] ^= 0x01
            self.assertRaises(CorruptRecordError, list, iter_legacy_messages(bad))
        bad = bytearray(buf)
        bad[16] = 2
        self.assertRaises(CorruptRecordError, list, iter_legacy_messages(bad, verify=False))

    def test_partial_tail(self):
        buf = legacy_set(KpLegacyBuilder, 1, 0)
        for cut in (3, 12, 20, 40):
            part = buf[:len(buf) - cut]
            self.assertRaises(CorruptRecordError, list, iter_legacy_messages(part))
            got = list(iter_legacy_messages(part, allow_partial_tail=True))
            self.assertEqual(len(got), len(LEGACY) - 1)

    def test_double_compressed(self):
        inner = bytearray()
        records._encode_legacy_message(inner, 0, 1, 1, 0, None, compression.compress(1, b"x"))
        out = bytearray()
        records._encode_legacy_message(out, 0, 1, 1, 0, None, compression.compress(1, inner))
        self.assertRaises(CorruptRecordError, list, iter_legacy_messages(out))

    @FUZZ
    @given(st.binary(max_size=300))
    def test_fuzz(self, data):
        for verify in (True, False):
            try:
                list(iter_legacy_messages(data, verify=verify))
            except ALLOWED:
                pass
        try:
            legacy_to_batch(data)
        except ALLOWED:
            pass


def _kp_legacy_records(buf):
    out = []
    mr = KpMemoryRecords(buf)
    while mr.has_next():
        out.extend(mr.next_batch())
    return out


class LegacyConversionTests(SynchronousTestCase):

    def test_up_convert(self):
        for magic in (0, 1):
            for codec in (0, 1):
                buf = legacy_set(KpLegacyBuilder, magic, codec)
                batch = legacy_to_batch(buf, base_offset=100)
                h, recs = decode_batch(batch)
                validate_batch(batch, 0, h)
                self.assertEqual(h.compression, codec)
                self.assertEqual([(r.offset, r.timestamp, r.key, r.value, r.headers)
                                  for r in recs],
                                 [(100 + i, ts if magic else -1, k, v, [])
                                  for i, (ts, k, v) in enumerate(LEGACY)])
        self.assertEqual(legacy_to_batch(b""), b"")
        buf = legacy_set(KpLegacyBuilder, 1, 1)
        h, _ = decode_batch(legacy_to_batch(buf, compression=4))
        self.assertEqual(h.compression, 4)

    def test_down_convert_read_by_clients(self):
        recs = [Record(offset=70 + i, timestamp=ts, key=k, value=v, headers=[("h", b"x")])
                for i, (ts, k, v) in enumerate(LEGACY)]
        for magic in (0, 1):
            for codec in (0, 1, 2):
                buf = build_legacy_message_set(recs, magic, compression=codec)
                expected = [(70 + i, ts if magic else -1, k, v)
                            for i, (ts, k, v) in enumerate(LEGACY)]
                self.assertEqual(legacy_view(iter_legacy_messages(buf)), expected)
                if codec != 2:  # kafka-python's snappy needs python-snappy
                    kp = _kp_legacy_records(buf)
                    self.assertTrue(all(r.validate_crc() for r in kp))
                    # kafka-python reports "no timestamp" of v0 as None.
                    self.assertEqual([(r.offset, -1 if r.timestamp is None else r.timestamp,
                                       r.key, r.value) for r in kp], expected)
                shallow = list(iter_legacy_messages(buf, deep=False))
                self.assertEqual(len(shallow), 1 if codec else len(LEGACY))
                for m in shallow:
                    self.assertEqual(m.crc, zlib.crc32(_message_bytes(buf, m)))
        self.assertRaises(InvalidRecordError, build_legacy_message_set, recs, 0, compression=3)
        self.assertEqual(build_legacy_message_set([], 1), b"")


def _message_bytes(buf, message):
    for pos in _positions(buf):
        if struct.unpack_from(">q", buf, pos)[0] == message.offset:
            size = struct.unpack_from(">i", buf, pos + 8)[0]
            return buf[pos + 16:pos + 12 + size]
    raise AssertionError("message not found")


def _positions(buf):
    pos = 0
    while pos < len(buf):
        yield pos
        pos += 12 + struct.unpack_from(">i", buf, pos + 8)[0]


class KeylessRecordsTests(SynchronousTestCase):
    """keyless_records: the key check of a compacted topic's append, without decoding records."""

    def keyless(self, buf):
        return records.keyless_records(buf, 0, read_batch_header(buf, 0), 1 << 24)

    def test_indexes_of_null_keys_plain_and_compressed(self):
        messages = SAMPLE + [(1010 + i, None if i % 7 == 0 else b"k", b"v", []) for i in range(30)]
        expected = [1] + [3 + i for i in range(30) if i % 7 == 0]
        for codec in (0, 1, 2, 3, 4):  # kafka-python's builder, every codec
            self.assertEqual(self.keyless(kp_batch(messages, codec)), expected, codec)
        self.assertEqual(self.keyless(kp_batch(BIG)), [])
        # an empty key is a key; long timestamps and large offset deltas are multi-byte varints
        built = records.build_batch([records.Record(offset_delta=300 + i, timestamp_delta=2 ** 40,
                                                    key=b"" if i else None, value=b"v")
                                     for i in range(3)], base_timestamp=1)
        self.assertEqual(self.keyless(built), [0])

    def test_framing_errors_as_check_records(self):
        buf = bytearray(kp_batch(SAMPLE))
        struct.pack_into(">i", buf, 57, 4)  # records_count 3 -> 4: the walk runs out
        with self.assertRaises(InvalidRecordError):
            self.keyless(buf)
        buf = bytearray(kp_batch(SAMPLE))
        struct.pack_into(">i", buf, 57, 2)  # 3 -> 2: bytes left over
        with self.assertRaises(InvalidRecordError):
            self.keyless(buf)


class CheckRecordsWalkTests(SynchronousTestCase):
    """check_records steps over canonical prefixes by table and leaves everything else to the
    exact loop (``_walk_records``): the two must agree on every batch, good or bad, message
    included. The batch sits before another one in the buffer, as in a produced record set, so
    a walk that overruns reads real bytes rather than the buffer's end."""

    def outcome(self, fn, buf, count):
        h = read_batch_header(buf, 0)
        h = h._replace(records_count=count)
        try:
            if fn is records.check_records:
                fn(buf, 0, h, 1 << 20)
            else:
                body, p, end = records._records_span(buf, 0, h, 1 << 20)
                fn(body, p, end, count)
        except InvalidRecordError as e:
            return str(e)
        return None

    def assertSameOutcome(self, buf, count):
        exact = self.outcome(records._walk_records, buf, count)
        self.assertEqual(self.outcome(records.check_records, buf, count), exact)
        return exact

    def test_same_sizes_lengths_and_counts(self):
        tail = build_batch(as_records(SAMPLE))
        for codec in (0, 1, 3):  # none, gzip, lz4: a compressed batch is walked decompressed
            for size in (0, 1, 50, 56, 57, 100, 120, 8100, 8180, 8200, 20000):
                recs = [Record(key=None, value=b"v" * size, timestamp=1) for _ in range(5)]
                buf = bytearray(build_batch(recs, compression=codec) + tail)
                self.assertIsNone(self.assertSameOutcome(buf, 5), size)
                self.assertIn("premature EOF", self.assertSameOutcome(buf, 6))
                self.assertIn("records still remaining", self.assertSameOutcome(buf, 4))

    def with_records(self, area, count):
        """A batch header followed by ``area`` as its records (lengths fixed, CRC not)."""
        buf = bytearray(build_batch([Record(key=None, value=b"abcd", timestamp=1)]))[:61] + area
        struct.pack_into(">i", buf, 8, len(buf) - LOG_OVERHEAD)
        struct.pack_into(">i", buf, 57, count)
        return buf + build_batch(as_records(SAMPLE))

    def test_prefixes_left_to_the_exact_walk(self):
        body = b"\x00\x02\x00\x00\x08abcd\x00"  # a 10-byte record of value b"abcd"
        self.assertIsNone(self.assertSameOutcome(self.with_records(b"\x14" + body, 1), 1))
        # the same length in two bytes (not canonical, but valid)
        self.assertIsNone(self.assertSameOutcome(self.with_records(b"\x94\x00" + body, 1), 1))
        # and in three, before a canonical one
        two = b"\x94\x80\x00" + body + b"\x14" + body
        self.assertIsNone(self.assertSameOutcome(self.with_records(two, 2), 2))
        # lengths that fit the batch exactly but are too short or negative for a record
        self.assertIn("claims 1 bytes", self.assertSameOutcome(self.with_records(b"\x82\x00x", 1), 1))
        self.assertIn("claims 1 bytes", self.assertSameOutcome(self.with_records(b"\x02x", 1), 1))
        self.assertIn("claims -7 bytes",
                      self.assertSameOutcome(self.with_records(b"\x0d" + b"x" * 6, 1), 1))
        self.assertIn("claims -71 bytes",
                      self.assertSameOutcome(self.with_records(b"\x8d\x01" + b"x" * 71, 1), 1))

    @FUZZ
    @given(st.lists(st.integers(min_value=0, max_value=9000), min_size=1, max_size=6),
           st.integers(min_value=0, max_value=10 ** 6), st.integers(min_value=0, max_value=255),
           st.integers(min_value=-2, max_value=2))
    def test_corrupted_batches_agree(self, sizes, where, value, count_delta):
        recs = [Record(key=None if i % 2 else b"k", value=b"x" * n, timestamp=1)
                for i, n in enumerate(sizes)]
        buf = bytearray(build_batch(recs) + build_batch(as_records(SAMPLE)))
        h = read_batch_header(buf, 0)
        span = h.batch_length + LOG_OVERHEAD - 61
        buf[61 + where % span] = value
        self.assertSameOutcome(buf, len(sizes) + count_delta)


class CheckRecordsPurePythonWalkTests(CheckRecordsWalkTests):
    """The same agreement with check_records on its pure-Python step (what runs where the
    compiled ``_recwalk`` is not built, or with ``KAFKATW_PURE_PYTHON=1``)."""

    def setUp(self):
        self.patch(records, "step_records", records.step_records_py)


class CompiledWalkTests(SynchronousTestCase):
    """The compiled step is built by ``pip install`` here (a C compiler is part of the test
    machine) and is what check_records uses; it answers as the Python step does."""

    def test_built_and_used(self):
        if os.environ.get("KAFKATW_PURE_PYTHON"):
            raise SkipTest("KAFKATW_PURE_PYTHON is set: the pure-Python walk is in use")
        from kafkatw.protocol import _recwalk

        self.assertIs(records.step_records, _recwalk.step_records)
        self.assertEqual(_recwalk.MIN_RECORD_BODY, records.MIN_RECORD_BODY)

    def test_same_end_as_the_python_step(self):
        from kafkatw.protocol import _recwalk

        recs = [Record(key=None, value=b"v" * n, timestamp=1) for n in (0, 1, 56, 57, 120, 8100)]
        buf = bytes(build_batch(recs))
        end = len(buf)
        for step in (_recwalk.step_records, records.step_records_py):
            self.assertEqual(step(buf, 61, end, 6), end)
            self.assertEqual(step(memoryview(buf), 61, end, 6), end)
            self.assertEqual(step(bytearray(buf), 61, end, 6), end)
            self.assertNotEqual(step(buf, 61, end, 7), end)  # one record too many
            self.assertNotEqual(step(buf, 61, end, 5), end)  # one too few
        # an end inside the last record, a count past the buffer, a start past it: no reads
        # outside the buffer, and not the end
        self.assertEqual(_recwalk.step_records(buf, 61, end - 1, 6), -1)
        self.assertEqual(_recwalk.step_records(buf, 61, end + 100, 7), -1)
        self.assertEqual(_recwalk.step_records(buf, end + 5, end, 1), -1)
        self.assertEqual(_recwalk.step_records(buf, 61, end, 0), 61)
        with self.assertRaises(TypeError):
            _recwalk.step_records("text", 0, 4, 1)
