"""Compression codecs of Kafka record batches: gzip, snappy (raw and xerial), lz4 frame, zstd.

Owns the byte formats as Kafka's Java client writes them and every variant clients send.
Does not know batch layout (records.py); it maps bytes to bytes and raises record errors.
"""

import gzip
import struct
import threading
import zlib

import cramjam
import lz4.frame
import zstandard

from kafkatw.protocol.record_errors import CorruptRecordError, InvalidRecordError

__all__ = ["NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD", "CODEC_NAMES", "codec_name", "compress",
           "decompress"]

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS = {name: codec for codec, name in CODEC_NAMES.items()}

# xerial snappy-java block framing (SnappyOutputStream): 8 magic bytes, version and
# compatible version as int32, then blocks of [int32 length][raw snappy].
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
_INT32 = struct.Struct(">i")

# Java's GZIPOutputStream uses Deflater.DEFAULT_COMPRESSION (zlib level 6).
GZIP_LEVEL = 6
ZSTD_LEVEL = 3

LZ4_MAGIC = b"\x04\x22\x4d\x18"

#: What the produce path lets one batch decompress to: a bomb (1 GiB of zeros in 32 kB of
#: zstd) is refused before it is held in memory. 64 MiB is far above what producers batch
#: (librdkafka and Java batch ~1 MB uncompressed by default).
MAX_DECOMPRESSED_BATCH_BYTES = 64 * 1024 * 1024


def _check_size(total, max_size):
    if max_size is not None and total > max_size:
        raise CorruptRecordError(
            "record batch decompresses to more than %d bytes" % (max_size,))


def codec_name(codec):
    return CODEC_NAMES.get(codec, "unknown(%s)" % (codec,))


#: python-lz4's highest frame level (LZ4 HC's maximum); Kafka accepts up to 17 (lz4-java's).
LZ4_MAX_LEVEL = 16


def compress(codec, data, level=None):
    """Compress ``data`` (bytes-like) the way Kafka's Java producer does for ``codec``.

    ``level`` is Kafka's (KIP-390: ``compression.gzip.level`` -1 or 1-9, ``compression.lz4.level``
    1-17, where Kafka's lz4 compressor is LZ4 HC, ``compression.zstd.level`` -131072-22); None keeps
    each codec's default (gzip 6, the fast lz4 compressor, zstd 3); snappy has no level."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        if level is None or level < 0:
            level = GZIP_LEVEL
        return gzip.compress(data, compresslevel=level, mtime=0)
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        # KafkaLZ4BlockOutputStream: 64 KiB independent blocks, no content size.
        return lz4.frame.compress(
            data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
            content_checksum=False, store_size=False,
            compression_level=0 if level is None else min(level, LZ4_MAX_LEVEL))
    if codec == ZSTD:
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL if level is None else level).compress(data)
    raise InvalidRecordError("unknown compression codec id %r" % (codec,))


def decompress(codec, data, magic=2, max_size=None):
    """Decompress ``data`` written with ``codec`` by any client; bad input raises
    :class:`~kafkatw.protocol.records.CorruptRecordError`, and so does output beyond
    ``max_size`` bytes (checked before it is held in memory).

    ``magic`` matters for lz4 only: magic v0 messages carry a wrongly computed frame
    descriptor checksum, which is repaired before decoding.
    """
    try:
        if codec == NONE:
            return bytes(data)
        if codec == GZIP:
            return _gunzip(data, max_size)
        if codec == SNAPPY:
            return _snappy_decompress(data, max_size)
        if codec == LZ4:
            if magic == 0:
                data = _fix_lz4_header_checksum(data)
            return _lz4_decompress(data, max_size)
        if codec == ZSTD:
            return _zstd_decompress(data, max_size)
    except CorruptRecordError:
        raise
    except Exception as e:
        raise CorruptRecordError(
            "cannot decompress %s data: %s: %s" % (codec_name(codec), type(e).__name__, e))
    raise CorruptRecordError("unknown compression codec id %r" % (codec,))


# -- gzip ---------------------------------------------------------------------------------

def _gunzip(data, max_size=None):
    # Concatenated gzip members are one stream (as GZIPInputStream reads them).
    out = []
    total = 0
    data = bytes(data)
    while True:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        pending = data
        while True:
            chunk = d.decompress(pending, 0 if max_size is None else max_size - total + 1)
            total += len(chunk)
            _check_size(total, max_size)
            out.append(chunk)
            if d.eof or not d.unconsumed_tail:
                break
            pending = d.unconsumed_tail
        if not d.eof:
            raise CorruptRecordError("truncated gzip stream")
        data = d.unused_data.lstrip(b"\x00")
        if not data:
            return b"".join(out)


# -- snappy -------------------------------------------------------------------------------

def _xerial_compress(data):
    view = memoryview(data)
    out = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + XERIAL_BLOCK_SIZE]))
        out.append(_INT32.pack(len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_len(block, total, max_size):
    if max_size is not None:
        _check_size(total + cramjam.snappy.decompress_raw_len(block), max_size)


def _snappy_decompress(data, max_size=None):
    view = memoryview(data)
    total = 0
    if len(view) >= 16 and view[:8] == XERIAL_MAGIC:
        out = []
        pos = 16
        end = len(view)
        while pos < end:
            if end - pos < 4:
                raise CorruptRecordError("truncated xerial snappy block length")
            size = _INT32.unpack_from(view, pos)[0]
            pos += 4
            if size < 0 or size > end - pos:
                raise CorruptRecordError("invalid xerial snappy block size %d" % size)
            _snappy_len(view[pos:pos + size], total, max_size)
            out.append(bytes(cramjam.snappy.decompress_raw(view[pos:pos + size])))
            total += len(out[-1])
            pos += size
        return b"".join(out)
    _snappy_len(view, 0, max_size)
    return bytes(cramjam.snappy.decompress_raw(view))


# -- lz4 (bounded) ------------------------------------------------------------------------

#: Output room asked of python-lz4 per call: it allocates all of ``max_length`` up front, so a
#: 64 MiB bound as one call cost an mmap and munmap per batch (~4x the decompression itself).
#: Larger output comes in further calls of this size.
LZ4_OUTPUT_CHUNK = 1 << 20


def _lz4_decompress(data, max_size=None):
    """Concatenated lz4 frames, each to its end marker, in one pass over ``data`` (no copy
    of it) and at most ``max_size`` bytes of output (checked chunk by chunk)."""
    out = []
    total = 0
    limit = -1 if max_size is None else max_size + 1  # one byte over: too much, refused
    while data:
        d = lz4.frame.LZ4FrameDecompressor()
        pending = data
        while True:
            room = LZ4_OUTPUT_CHUNK if limit < 0 else min(LZ4_OUTPUT_CHUNK, limit - total)
            chunk = d.decompress(pending, max_length=room)
            total += len(chunk)
            _check_size(total, max_size)
            out.append(chunk)
            if d.eof or d.needs_input:
                break
            pending = b""  # more output of the input already taken
        if not d.eof:
            raise CorruptRecordError("truncated lz4 frame")
        data = d.unused_data
    return out[0] if len(out) == 1 else b"".join(out)


# -- lz4 ----------------------------------------------------------------------------------

def _fix_lz4_header_checksum(data):
    """Rewrite the frame descriptor checksum old (magic v0) Kafka clients computed over the
    magic number too; a correct checksum is left alone."""
    view = memoryview(data)
    if len(view) < 7 or view[:4] != LZ4_MAGIC:
        return data
    flg = view[4]
    end = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if len(view) <= end:
        return data
    correct = (xxh32(view[4:end]) >> 8) & 0xFF
    if view[end] == correct:
        return data
    fixed = bytearray(view)
    fixed[end] = correct
    return fixed


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x, r):
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data, seed=0):
    """XXH32 of a short bytes-like (used only for lz4 frame descriptors)."""
    data = bytes(data)
    n = len(data)
    pos = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while pos + 16 <= n:
            lanes = struct.unpack_from("<4I", data, pos)
            v1 = (_rotl((v1 + lanes[0] * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + lanes[1] * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + lanes[2] * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + lanes[3] * _P2) & _M32, 13) * _P1) & _M32
            pos += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        h = (h + struct.unpack_from("<I", data, pos)[0] * _P3) & _M32
        h = (_rotl(h, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (h + data[pos] * _P5) & _M32
        h = (_rotl(h, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


# -- zstd ---------------------------------------------------------------------------------

_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE_MASK, _SKIPPABLE_MAGIC = 0xFFFFFFF0, 0x184D2A50
#: RFC 8878 3.1.1.2: no block decompresses to more than 128 KiB.
_ZSTD_MAX_BLOCK = 128 * 1024
#: Blocks walked per frame before handing it to the streaming path: 64 MiB needs 512 full
#: blocks; thousands of tiny ones are a hostile frame, not worth a Python loop each.
_ZSTD_MAX_WALKED_BLOCKS = 1024
_UINT32_LE = struct.Struct("<I")


def _zstd_frame_bound(view, pos, budget):
    """``(end, bound)`` of the zstd frame at ``pos``: where it ends (after its blocks and
    checksum) and the most it can decompress to: raw and RLE blocks their size, a compressed
    block 128 KiB (RFC 8878 3.1.1.2); a declared content size lowers the bound. python-zstandard
    has no bounded one-pass decompression that also reports a truncated frame (its stream
    reader ends quietly), so the frame's 3-byte block headers are walked here, stopping after
    1,024 blocks (``end`` is then None, as for a whole frame whose bound passes ``budget``).
    A frame whose declared size, or whose raw and RLE blocks alone (their output is exact: a
    bomb of zeros is RLE), pass ``budget`` is refused here, before any of it is decompressed.
    Raises ZstdError / CorruptRecordError."""
    frame = view[pos:]
    header = zstandard.frame_header_size(frame)
    params = zstandard.get_frame_parameters(frame)
    content_size = zstandard.frame_content_size(frame)
    if budget is not None:
        _check_size(content_size, budget)  # (-1 when not declared)
    p = pos + header
    end = len(view)
    bound = 0
    exact = 0  # output of the raw and RLE blocks: at least this much comes out
    blocks = 0
    while True:
        if p + 3 > end:
            raise CorruptRecordError("truncated zstd frame")
        bh = view[p] | (view[p + 1] << 8) | (view[p + 2] << 16)
        p += 3
        size = bh >> 3
        kind = (bh >> 1) & 3
        if kind == 1:  # RLE: one byte repeated size times
            p += 1
            bound += size
            exact += size
        elif kind == 3:
            raise CorruptRecordError("reserved zstd block type")
        elif kind == 0:  # raw
            p += size
            bound += size
            exact += size
        else:
            p += size
            bound += _ZSTD_MAX_BLOCK
        if p > end:
            raise CorruptRecordError("truncated zstd frame")
        if budget is not None and exact > budget:
            _check_size(exact, budget)
        if bh & 1:  # last block
            break
        blocks += 1
        if blocks > _ZSTD_MAX_WALKED_BLOCKS:
            return None, bound
    if params.has_checksum:
        p += 4
        if p > end:
            raise CorruptRecordError("truncated zstd frame")
    if content_size > bound:  # (-1: not declared, as zstd-jni and librdkafka write them)
        # python-zstandard would allocate the declared size, whatever the bound given
        raise CorruptRecordError("zstd frame declares %d bytes but its blocks hold at most %d"
                                 % (content_size, bound))
    if content_size >= 0:
        bound = content_size
    if budget is not None and bound > budget:
        return None, bound
    return p, bound


_local = threading.local()  # a ZstdDecompressor per thread (one is not thread-safe)


def _zstd_dctx():
    dctx = getattr(_local, "zstd", None)
    if dctx is None:
        dctx = _local.zstd = zstandard.ZstdDecompressor()
    return dctx


def _zstd_decompress(data, max_size=None):
    """Concatenated zstd frames (skippable frames skipped), none truncated, each decompressed
    in one call into a buffer of its bound; at most ``max_size`` bytes of output, refused
    before it is decompressed when the frames' own headers rule it out.

    A frame whose bound exceeds what is left of ``max_size`` (many small blocks: not what
    zstd-jni or librdkafka write, but valid) goes through the streaming reader, counted."""
    view = memoryview(data)
    dctx = _zstd_dctx()  # (reset by each operation; creating one costs ~3 us)
    out = []
    total = 0
    pos = 0
    end = len(view)
    if not end:
        raise CorruptRecordError("truncated zstd frame: no data")
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("%d trailing bytes after the zstd frames" % (end - pos))
        magic = _UINT32_LE.unpack_from(view, pos)[0]
        if magic & _SKIPPABLE_MASK == _SKIPPABLE_MAGIC:
            if end - pos < 8:
                raise CorruptRecordError("truncated skippable zstd frame")
            pos += 8 + _UINT32_LE.unpack_from(view, pos + 4)[0]
            if pos > end:
                raise CorruptRecordError("truncated skippable zstd frame")
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptRecordError("not a zstd frame (magic 0x%08x)" % magic)
        budget = None if max_size is None else max_size - total
        frame_end, bound = _zstd_frame_bound(view, pos, budget)
        if frame_end is None:
            out.append(_zstd_streamed(dctx, view[pos:], budget))
            break
        if bound:
            chunk = dctx.decompress(view[pos:frame_end], max_output_size=bound)
            out.append(chunk)
            total += len(chunk)  # (within the budget: the bound was)
        pos = frame_end
    return out[0] if len(out) == 1 else b"".join(out)


def _zstd_streamed(dctx, view, budget):
    """The rest of ``view`` (whole frames) the slow way: counted through the stream reader
    64 KiB at a time (nothing kept) up to ``budget`` bytes, then decompressed again by a
    decompression object that reports a truncated frame (the reader ends quietly)."""
    if budget is not None:
        reader = dctx.stream_reader(view, read_across_frames=True)
        total = 0
        while True:
            chunk = reader.read(65536)
            if not chunk:
                break
            total += len(chunk)
            _check_size(total, budget)
    data = bytes(view)
    out = []
    while True:
        dobj = dctx.decompressobj()
        out.append(dobj.decompress(data))
        if not dobj.eof:
            raise CorruptRecordError("truncated zstd frame")
        data = dobj.unused_data
        if not data:
            return b"".join(out)
