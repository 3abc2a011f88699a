"""Tests for kafkatw.protocol.compression against the codecs of kafka-python and aiokafka."""

import gzip
import os
import struct

import cramjam
import lz4.frame
import zstandard
from aiokafka import codec as aio_codec
from kafka import codec as kp_codec
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.protocol import compression, errors
from kafkatw.protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, compress, decompress
from kafkatw.protocol.records import CorruptRecordError, InvalidRecordError

PAYLOADS = [
    b"",
    b"x",
    b"hello kafka " * 1000,
    os.urandom(70000),  # incompressible, more than one snappy/lz4 block
    bytes(range(256)) * 600,
]
ALL = (NONE, GZIP, SNAPPY, LZ4, ZSTD)


class CodecIdTests(SynchronousTestCase):

    def test_ids(self):
        self.assertEqual((NONE, GZIP, SNAPPY, LZ4, ZSTD), (0, 1, 2, 3, 4))
        self.assertEqual(compression.codec_name(LZ4), "lz4")
        self.assertEqual(compression.codec_name(9), "unknown(9)")

    def test_unknown_codec(self):
        e = self.assertRaises(CorruptRecordError, decompress, 5, b"abc")
        self.assertIn("unknown compression codec", str(e))
        self.assertEqual(e.code, errors.CORRUPT_MESSAGE)
        e = self.assertRaises(InvalidRecordError, compress, 7, b"abc")
        self.assertIn("unknown compression codec", str(e))


class RoundTripTests(SynchronousTestCase):

    def test_round_trip(self):
        for codec in ALL:
            for data in PAYLOADS:
                for kind in (bytes, bytearray, memoryview):
                    out = compress(codec, kind(data))
                    self.assertIsInstance(out, (bytes, bytearray))
                    self.assertEqual(decompress(codec, out), data, (codec, len(data)))
                    self.assertEqual(decompress(codec, memoryview(out)), data)

    def test_compresses(self):
        data = b"hello kafka " * 1000
        for codec in (GZIP, SNAPPY, LZ4, ZSTD):
            self.assertLess(len(compress(codec, data)), len(data) // 5, codec)


class FormatTests(SynchronousTestCase):

    def test_snappy_is_xerial_framed(self):
        data = os.urandom(40000) + b"a" * 40000
        out = compress(SNAPPY, data)
        self.assertEqual(out[:16], b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
        # 32 KiB blocks of raw snappy, each with a big-endian int32 length.
        pos, blocks = 16, []
        while pos < len(out):
            (n,) = struct.unpack_from(">i", out, pos)
            blocks.append(bytes(cramjam.snappy.decompress_raw(out[pos + 4:pos + 4 + n])))
            pos += 4 + n
        self.assertEqual([len(b) for b in blocks], [32768, 32768, 14464])
        self.assertEqual(b"".join(blocks), data)

    def test_raw_snappy(self):
        # librdkafka sends raw snappy without the xerial framing.
        data = b"librdkafka " * 500
        self.assertEqual(decompress(SNAPPY, bytes(cramjam.snappy.compress_raw(data))), data)

    def test_lz4_frame_layout(self):
        out = compress(LZ4, b"a" * 100000)
        self.assertEqual(out[:4], b"\x04\x22\x4d\x18")
        flg, bd = out[4], out[5]
        self.assertEqual(flg >> 6, 1)            # version 01
        self.assertTrue(flg & 0x20)             # independent blocks
        self.assertFalse(flg & 0x08)            # no content size
        self.assertEqual((bd >> 4) & 7, 4)      # 64 KiB blocks

    def test_gzip_concatenated_members(self):
        data = gzip.compress(b"abc") + gzip.compress(b"def")
        self.assertEqual(decompress(GZIP, data), b"abcdef")

    def test_zstd_without_content_size_and_multi_frame(self):
        cctx = zstandard.ZstdCompressor(write_content_size=False)
        one = cctx.compress(b"z" * 5000)
        self.assertEqual(decompress(ZSTD, one), b"z" * 5000)
        self.assertEqual(decompress(ZSTD, one + one), b"z" * 10000)

    def test_xxh32(self):
        self.assertEqual(compression.xxh32(b""), 0x02CC5D05)
        self.assertEqual(compression.xxh32(b"a"), 0x550D7456)
        self.assertEqual(compression.xxh32(b"abc"), 0x32D153FF)
        self.assertEqual(compression.xxh32(b"Nobody inspects the spammish repetition"),
                         0xE2293B2F)

    def test_lz4_broken_header_checksum_of_magic_v0(self):
        data = b"old kafka " * 300
        good = bytearray(lz4.frame.compress(data, store_size=False))
        self.assertEqual(good[4] & 0x09, 0)
        # Kafka 0.8/0.9 hashed the magic number too: HC over bytes [0, 6).
        broken = bytearray(good)
        broken[6] = (compression.xxh32(bytes(good[:6])) >> 8) & 0xFF
        self.assertNotEqual(broken[6], good[6])
        self.assertEqual(decompress(LZ4, broken, magic=0), data)
        self.assertEqual(decompress(LZ4, good, magic=0), data)
        self.assertRaises(CorruptRecordError, decompress, LZ4, broken, magic=1)


class OracleTests(SynchronousTestCase):
    """Output of kafka-python / aiokafka encoders decodes here and ours decodes there."""

    def test_gzip(self):
        for data in PAYLOADS:
            self.assertEqual(decompress(GZIP, kp_codec.gzip_encode(data)), data)
            self.assertEqual(decompress(GZIP, aio_codec.gzip_encode(data)), data)
            self.assertEqual(kp_codec.gzip_decode(compress(GZIP, data)), data)
            self.assertEqual(aio_codec.gzip_decode(compress(GZIP, data)), data)

    def test_snappy(self):
        for data in PAYLOADS:
            for xerial in (True, False):
                theirs = aio_codec.snappy_encode(data, xerial_compatible=xerial)
                self.assertEqual(decompress(SNAPPY, theirs), data)
            if data:  # aiokafka wants more than the 16-byte header to detect the framing
                self.assertEqual(aio_codec.snappy_decode(compress(SNAPPY, data)), data)
            # Same framing and block size as the xerial-compatible Python clients.
            self.assertEqual(compress(SNAPPY, data), aio_codec.snappy_encode(data))

    def test_lz4(self):
        for data in PAYLOADS:
            self.assertEqual(decompress(LZ4, kp_codec.lz4_encode(data)), data)
            self.assertEqual(decompress(LZ4, aio_codec.lz4_encode(data)), data)
            self.assertEqual(kp_codec.lz4_decode(compress(LZ4, data)), data)
            self.assertEqual(aio_codec.lz4_decode(compress(LZ4, data)), data)

    def test_zstd(self):
        for data in PAYLOADS:
            self.assertEqual(decompress(ZSTD, kp_codec.zstd_encode(data)), data)
            self.assertEqual(decompress(ZSTD, aio_codec.zstd_encode(data)), data)
            self.assertEqual(kp_codec.zstd_decode(compress(ZSTD, data)), data)
            self.assertEqual(aio_codec.zstd_decode(compress(ZSTD, data)), data)


class CorruptInputTests(SynchronousTestCase):

    def test_truncated_and_garbage(self):
        data = b"payload " * 2000
        for codec in (GZIP, SNAPPY, LZ4, ZSTD):
            out = compress(codec, data)
            for bad in (out[:len(out) // 2], out[:-1], b"garbage" * 10, b"\xff" * 3):
                try:
                    got = decompress(codec, bad)
                except CorruptRecordError as e:
                    self.assertEqual(e.code, errors.CORRUPT_MESSAGE)
                else:
                    self.fail("codec %d accepted bad input, gave %d bytes" % (codec, len(got)))

    def test_bad_xerial_block_length(self):
        out = bytearray(compress(SNAPPY, b"q" * 100))
        struct.pack_into(">i", out, 16, 1 << 30)
        self.assertRaises(CorruptRecordError, decompress, SNAPPY, out)
        struct.pack_into(">i", out, 16, -5)
        self.assertRaises(CorruptRecordError, decompress, SNAPPY, out)


class BoundedDecompressionTests(SynchronousTestCase):
    """``max_size``: the produce path's bound on what one batch may decompress to, checked
    without holding more than it; output of every shape still decodes exactly."""

    data = b"".join(b"record %08d " % i for i in range(300000))  # 5.1 MB, compressible

    def test_exact_bound_and_one_byte_less(self):
        for codec in (GZIP, SNAPPY, LZ4, ZSTD):
            out = compress(codec, self.data)
            self.assertTrue(decompress(codec, out, max_size=len(self.data)) == self.data, codec)
            with self.assertRaises(CorruptRecordError, msg=codec):
                decompress(codec, out, max_size=len(self.data) - 1)

    def test_lz4_output_of_many_chunks_and_frames(self):
        self.assertGreater(len(self.data), 4 * compression.LZ4_OUTPUT_CHUNK)
        out = compress(LZ4, self.data)
        self.assertEqual(decompress(LZ4, out + out, max_size=2 * len(self.data)), self.data * 2)
        self.assertRaises(CorruptRecordError, decompress, LZ4, out + out[:-3])

    def test_zstd_bomb_refused_before_decompressing(self):
        # refused from its block headers (RLE blocks) or its declared size: this thread's
        # decompressor is never used
        self.forbid_decompressing()
        for declared in (False, True):
            bomb = zstandard.ZstdCompressor(write_content_size=declared).compress(b"\0" * (256 << 20))
            self.assertLess(len(bomb), 64 * 1024)
            with self.assertRaises(CorruptRecordError) as caught:
                decompress(ZSTD, bomb, max_size=64 << 20)
            self.assertIn("more than %d bytes" % (64 << 20), str(caught.exception))

    def forbid_decompressing(self):
        """This thread's zstd decompressor fails the test if anything uses it."""
        class NotToBeUsed:
            def __getattr__(self, name):
                raise AssertionError("the bomb was decompressed (%s)" % name)

        compression._zstd_dctx()
        self.patch(compression._local, "zstd", NotToBeUsed())

    def test_zstd_declared_size_beyond_the_bound_refused_before_decompressing(self):
        """Compressed blocks (no RLE or raw block whose exact output would tell) under a
        declared content size beyond the bound: refused from the frame header alone."""
        self.forbid_decompressing()
        data = bytes(range(256)) * (16 << 10)  # 4 MiB, compressed blocks
        frame = zstandard.ZstdCompressor(write_content_size=True).compress(data)
        self.assertEqual(zstandard.frame_content_size(frame), len(data))
        with self.assertRaises(CorruptRecordError) as caught:
            decompress(ZSTD, frame, max_size=1 << 20)
        self.assertIn("more than %d bytes" % (1 << 20), str(caught.exception))

    def test_zstd_declared_size_beyond_its_blocks(self):
        out = bytearray(zstandard.ZstdCompressor().compress(b"abc" * 30000))
        self.assertEqual(zstandard.frame_content_size(bytes(out)), 90000)
        fhd = out[4]
        self.assertEqual(fhd >> 6, 2)  # a 4-byte content size field, after the window byte if any
        struct.pack_into("<I", out, 5 + (0 if fhd & 0x20 else 1), 1000000)
        with self.assertRaises(CorruptRecordError) as caught:
            decompress(ZSTD, bytes(out), max_size=64 << 20)
        self.assertIn("declares 1000000 bytes but its blocks hold at most 131072", str(caught.exception))

    def test_zstd_checksum_skippable_frames_and_trailing_bytes(self):
        one = zstandard.ZstdCompressor(write_checksum=True).compress(b"checked " * 100)
        skippable = struct.pack("<II", 0x184D2A53, 5) + b"12345"
        self.assertEqual(decompress(ZSTD, skippable + one + skippable + one, max_size=1600),
                         b"checked " * 200)
        for bad in (b"", one + b"\x00\x00", one + skippable[:-1], one[:-2]):
            self.assertRaises(CorruptRecordError, decompress, ZSTD, bad, max_size=1 << 20)

    def test_zstd_frame_of_many_small_blocks(self):
        # past the blocks the broker walks itself: the streaming path, still bounded and exact
        cobj = zstandard.ZstdCompressor(write_content_size=False).compressobj()
        parts = [cobj.compress(b"part %05d;" % i) + cobj.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
                 for i in range(3000)]
        framed = b"".join(parts) + cobj.flush()
        expected = b"".join(b"part %05d;" % i for i in range(3000))
        self.assertEqual(decompress(ZSTD, framed, max_size=len(expected)), expected)
        self.assertEqual(decompress(ZSTD, framed), expected)
        self.assertRaises(CorruptRecordError, decompress, ZSTD, framed, max_size=len(expected) - 1)
        self.assertRaises(CorruptRecordError, decompress, ZSTD, framed[:-5], max_size=1 << 20)
        self.assertRaises(CorruptRecordError, decompress, ZSTD, framed[:-5])
