"""Tests for kafkatw.protocol.records: v2 batch headers, CRC, in-place writers."""

import struct

from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.memory_records import MemoryRecordsBuilder as KpBuilder
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.protocol import errors, records
from kafkatw.protocol.records import (
    BATCH_HEADER_SIZE, LOG_OVERHEAD, CorruptRecordError, InvalidRecordError,
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
