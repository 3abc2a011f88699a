"""Record batches (magic v2) on the wire and on disk: headers, CRC32C, records, control batches.

Owns the byte layout of a batch and of legacy v0/v1 message sets (read and up-convert).
Does not own compression codecs (compression.py), offsets assignment policy or storage.
"""

import os as _os
import struct
import zlib

import attr
import crc32c as _crc32c

from kafkatw.protocol import compression as _compression
from kafkatw.protocol.record_errors import CorruptRecordError, InvalidRecordError

__all__ = [
    "BATCH_HEADER_SIZE", "LOG_OVERHEAD", "RECORD_BATCH_OVERHEAD", "MAGIC_VALUE_V0",
    "MAGIC_VALUE_V1", "MAGIC_VALUE_V2", "NO_TIMESTAMP", "NO_PRODUCER_ID", "NO_PRODUCER_EPOCH",
    "NO_SEQUENCE", "NO_PARTITION_LEADER_EPOCH", "CREATE_TIME", "LOG_APPEND_TIME",
    "CorruptRecordError", "InvalidRecordError", "BatchHeader", "read_batch_header",
    "read_magic", "iter_batch_headers", "compute_crc", "verify_crc", "ensure_valid", "validate_batch",
    "set_base_offset", "set_partition_leader_epoch", "set_log_append_time", "set_max_timestamp",
    "Record", "decode_batch", "iter_batches", "build_batch", "ABORT", "COMMIT", "ControlRecord",
    "build_control_batch", "decode_control_record", "NO_TIMESTAMP_TYPE", "LegacyMessage",
    "iter_legacy_messages", "legacy_to_batch", "build_legacy_message_set",
]

# -- layout ------------------------------------------------------------------------------

LOG_OVERHEAD = 12  # base offset (int64) + batch length (int32)
BATCH_HEADER_SIZE = 61
RECORD_BATCH_OVERHEAD = BATCH_HEADER_SIZE
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49

BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # the CRC covers from here to the end of the batch
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61

MAGIC_VALUE_V0 = 0
MAGIC_VALUE_V1 = 1
MAGIC_VALUE_V2 = 2
CURRENT_MAGIC = MAGIC_VALUE_V2

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

CREATE_TIME = 0
LOG_APPEND_TIME = 1

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == BATCH_HEADER_SIZE
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
#: base offset, batch length, partition leader epoch: the leading fields, adjacent
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")
assert (BASE_OFFSET_OFFSET, BATCH_LENGTH_OFFSET, PARTITION_LEADER_EPOCH_OFFSET) == (0, 8, 12)
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_LOG_OVERHEAD = struct.Struct(">qi")


# -- the batch header --------------------------------------------------------------------

_BATCH_HEADER_FIELDS = (
    "base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes",
    "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
    "base_sequence", "records_count")


class BatchHeader:
    """The 61 bytes in front of the records of a v2 batch, as read from the wire or a log.

    Not to be changed once made. A class with slots, not a named tuple: CPython 3.11
    specialises the read of a slot (~40 instructions) but not of a named tuple's field (a
    descriptor, ~200), and a produced batch's header is read some twenty times on its way to
    the log. Made only through its constructor (:func:`read_batch_header` passes the
    unpacked fields: filling a bare instance beside it saved under 1k instructions per
    produce, not worth a second place that knows the fields).
    """

    __slots__ = _BATCH_HEADER_FIELDS

    def __init__(self, base_offset, batch_length, partition_leader_epoch, magic, crc, attributes,
                 last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
                 base_sequence, records_count):
        self.base_offset = base_offset
        self.batch_length = batch_length
        self.partition_leader_epoch = partition_leader_epoch
        self.magic = magic
        self.crc = crc
        self.attributes = attributes
        self.last_offset_delta = last_offset_delta
        self.base_timestamp = base_timestamp
        self.max_timestamp = max_timestamp
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.records_count = records_count

    def fields(self):
        """The 13 fields in wire order."""
        return tuple(getattr(self, name) for name in _BATCH_HEADER_FIELDS)

    def _replace(self, **changes):
        """A copy with ``changes`` (as a named tuple's ``_replace``)."""
        values = dict(zip(_BATCH_HEADER_FIELDS, self.fields()))
        values.update(changes)
        return BatchHeader(**values)

    def __eq__(self, other):
        if type(other) is not BatchHeader:
            return NotImplemented
        return self.fields() == other.fields()

    def __hash__(self):
        return hash(self.fields())

    def __repr__(self):
        return "BatchHeader(%s)" % ", ".join(
            "%s=%r" % (name, value) for name, value in zip(_BATCH_HEADER_FIELDS, self.fields()))

    @property
    def compression(self):
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self):
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self):
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self):
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self):
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def delete_horizon_ms(self):
        """The delete horizon (stored in base_timestamp), or NO_TIMESTAMP if not set."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_FLAG_MASK else NO_TIMESTAMP

    @property
    def last_offset(self):
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self):
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size_in_bytes(self):
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_sequence(self):
        """The sequence of the last record (wrapping at 2**31), or NO_SEQUENCE."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    @property
    def has_producer_id(self):
        return self.producer_id > NO_PRODUCER_ID


def read_magic(buf, pos=0):
    """The magic byte of the batch or legacy message at ``pos`` (same place in every format)."""
    if pos < 0 or len(buf) < pos + MAGIC_OFFSET + 1:
        raise CorruptRecordError("too few bytes to read the magic at position %d" % (pos,))
    return buf[pos + MAGIC_OFFSET]


def read_batch_header(buf, pos=0):
    """Parse the v2 batch header at ``pos`` of a bytes-like ``buf`` without touching records.

    Only the header must be present in ``buf``; use :func:`validate_batch` or
    :func:`verify_crc` for the rest. Raises :class:`CorruptRecordError`.
    """
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise CorruptRecordError(
            "record batch header needs %d bytes, found %d at position %d"
            % (BATCH_HEADER_SIZE, max(0, len(buf) - pos), pos))
    fields = _HEADER.unpack_from(buf, pos)
    if fields[1] < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            "record batch length %d is smaller than the minimum %d" % (fields[1], MIN_BATCH_LENGTH))
    if fields[3] != MAGIC_VALUE_V2:
        raise CorruptRecordError("unsupported record batch magic %d (expected 2)" % (fields[3],))
    return BatchHeader(*fields)


def iter_batch_headers(buf, allow_partial_tail=False):
    """Yield ``(pos, BatchHeader)`` for each consecutive v2 batch in ``buf``.

    A truncated last batch raises :class:`CorruptRecordError` unless ``allow_partial_tail``,
    in which case iteration stops before it (as a fetch response may end mid-batch).
    """
    end = len(buf)
    pos = 0
    while pos < end:
        remaining = end - pos
        if remaining < BATCH_HEADER_SIZE:
            if remaining >= LOG_OVERHEAD:
                length = _INT32.unpack_from(buf, pos + BATCH_LENGTH_OFFSET)[0]
                if length < MIN_BATCH_LENGTH:
                    raise CorruptRecordError(
                        "record batch length %d at position %d is smaller than the minimum %d"
                        % (length, pos, MIN_BATCH_LENGTH))
            if allow_partial_tail:
                return
            raise CorruptRecordError(
                "truncated record batch header at position %d (%d bytes left)" % (pos, remaining))
        header = read_batch_header(buf, pos)
        size = header.batch_length + LOG_OVERHEAD
        if size > remaining:
            if allow_partial_tail:
                return
            raise CorruptRecordError(
                "truncated record batch at position %d: %d bytes of %d"
                % (pos, remaining, size))
        yield pos, header
        pos += size


def compute_crc(buf, pos, batch_length):
    """CRC32C of a batch's bytes from attributes to its end."""
    start = pos + ATTRIBUTES_OFFSET
    end = pos + LOG_OVERHEAD + batch_length
    return _crc32c.crc32c(memoryview(buf)[start:end])


def verify_crc(buf, pos, header):
    """True if the stored CRC matches the batch bytes (False if the batch is truncated)."""
    if len(buf) < pos + header.batch_length + LOG_OVERHEAD:
        return False
    return compute_crc(buf, pos, header.batch_length) == header.crc


def ensure_valid(buf, pos, header):
    """Kafka's ``RecordBatch.ensureValid``: size and CRC only, as log recovery checks.

    Unlike :func:`validate_batch` it accepts compacted batches whose record count no longer
    matches their offset range. Raises :class:`CorruptRecordError`.
    """
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError("record batch length %d too small" % (header.batch_length,))
    if header.size_in_bytes > len(buf) - pos:
        raise CorruptRecordError(
            "record batch of %d bytes but only %d available"
            % (header.size_in_bytes, len(buf) - pos))
    if not verify_crc(buf, pos, header):
        raise CorruptRecordError(
            "record batch is corrupt (stored crc = %d, computed crc = %d)"
            % (header.crc, compute_crc(buf, pos, header.batch_length)))
    return header


def validate_batch(buf, pos, header, allow_empty=False):
    """The checks Kafka's produce path makes on a v2 batch before looking at its records.

    ``header`` is :func:`read_batch_header`'s of ``buf`` at ``pos``, which refused a magic
    other than 2 and a length below the minimum already. Structure and CRC problems raise
    :class:`CorruptRecordError`; a well-formed batch with an inconsistent record count raises
    :class:`InvalidRecordError`.
    """
    # (properties and helpers inline: this runs for every produced batch)
    batch_length = header.batch_length
    available = len(buf) - pos
    end = pos + LOG_OVERHEAD + batch_length
    if end - pos > available:
        raise CorruptRecordError(
            "record batch of %d bytes but only %d available" % (header.size_in_bytes, available))
    # (a produced batch is a memoryview already: sliced as it is, no second view made)
    view = buf if type(buf) is memoryview else memoryview(buf)
    crc = _crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET:end])
    if crc != header.crc:
        raise CorruptRecordError(
            "record batch is corrupt (stored crc = %d, computed crc = %d)" % (header.crc, crc))
    count = header.records_count
    if count < 0:
        raise InvalidRecordError("invalid reported count for record batch: %d" % (count,))
    if count == 0:
        if not allow_empty:
            raise InvalidRecordError("invalid reported count for record batch: 0")
        if header.last_offset_delta < 0:  # (with records, the count check below implies it)
            raise InvalidRecordError("negative last offset delta %d" % (header.last_offset_delta,))
    elif header.last_offset_delta + 1 != count:
        raise InvalidRecordError(
            "inconsistent batch offset range [%d, %d] and count of records %d"
            % (header.base_offset, header.last_offset, count))
    codec = header.attributes & COMPRESSION_CODEC_MASK
    if codec == 0 and count > 0:
        # Each uncompressed record takes at least 7 bytes (length + 6 single-byte fields).
        if batch_length - MIN_BATCH_LENGTH < 7 * count:
            raise CorruptRecordError(
                "record batch of %d bytes cannot hold %d records" % (header.size_in_bytes, count))
    if codec > 4:
        raise InvalidRecordError("unknown compression codec %d" % (codec,))
    return header


# -- in-place writers (the buffer must be writable: bytearray or writable memoryview) ---------

def set_base_offset(buf, pos, offset):
    """Rewrite the base offset; not covered by the CRC."""
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, offset)


def set_partition_leader_epoch(buf, pos, epoch):
    """Rewrite the partition leader epoch; not covered by the CRC."""
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


#: ``set_base_offset_length_and_epoch(buf, pos, offset, batch_length, epoch)``: both rewrites
#: of a leader's append (:func:`set_base_offset`, then :func:`set_partition_leader_epoch`) in
#: one pack of the three leading fields, the batch's ``batch_length`` (from its header) written
#: back as it is. The struct's own ``pack_into``, not a Python function around it (a frame per
#: produced batch), hence the fields in their wire order.
set_base_offset_length_and_epoch = _OFFSET_LENGTH_EPOCH.pack_into


def set_log_append_time(buf, pos, ts):
    """Mark the batch LOG_APPEND_TIME with max timestamp ``ts`` and recompute its CRC."""
    attributes = _INT16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)[0]
    old_ts = _INT64.unpack_from(buf, pos + MAX_TIMESTAMP_OFFSET)[0]
    if attributes & TIMESTAMP_TYPE_MASK and old_ts == ts:
        return
    _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, ts)
    _rewrite_crc(buf, pos)


def set_max_timestamp(buf, pos, timestamp_type, ts):
    """Rewrite timestamp type and max timestamp (Kafka's setMaxTimestamp) and the CRC."""
    attributes = _INT16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)[0]
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    else:
        attributes &= ~TIMESTAMP_TYPE_MASK
    _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, ts)
    _rewrite_crc(buf, pos)


def _rewrite_crc(buf, pos):
    length = _INT32.unpack_from(buf, pos + BATCH_LENGTH_OFFSET)[0]
    _UINT32.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, length))


# -- varints (zigzag, as in protobuf; Kafka's ByteUtils) ----------------------------------

def _read_varint(buf, pos, max_shift=28):
    """Read a zigzag varint (max_shift 28: int32, 63: int64); IndexError if truncated."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > max_shift:
            raise CorruptRecordError("varint is too long (more than %d bits)" % (max_shift + 7))


def _read_varlong(buf, pos):
    return _read_varint(buf, pos, 63)


def _write_varint(out, n):
    """Append the zigzag varint (or varlong) encoding of ``n`` to bytearray ``out``."""
    z = (n << 1) ^ (n >> 63)
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _size_of_varint(n):
    z = (n << 1) ^ (n >> 63)
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


# -- records -------------------------------------------------------------------------------

@attr.s(slots=True, frozen=True)
class Record:
    """One record of a v2 batch. ``offset``/``timestamp`` are absolute when decoded from a
    batch; when building, they may replace the deltas (see :func:`build_batch`)."""

    attributes = attr.ib(default=0)
    timestamp_delta = attr.ib(default=0)
    offset_delta = attr.ib(default=None)
    key = attr.ib(default=None)
    value = attr.ib(default=None)
    headers = attr.ib(default=attr.Factory(list))
    offset = attr.ib(default=None)
    timestamp = attr.ib(default=None)


def _decode_records(body, count, base_offset, base_timestamp, log_append_time):
    """Decode ``count`` records from ``body`` (bytes) which must hold exactly them."""
    out = []
    append = out.append
    pos = 0
    end_of_body = len(body)
    try:
        for _ in range(count):
            length, pos = _read_varint(body, pos)
            end = pos + length
            if length < 0 or end > end_of_body:
                raise CorruptRecordError(
                    "invalid record size %d at byte %d of %d" % (length, pos, end_of_body))
            attributes = body[pos]
            pos += 1
            timestamp_delta, pos = _read_varint(body, pos, 63)
            offset_delta, pos = _read_varint(body, pos)
            size, pos = _read_varint(body, pos)
            if size < 0:
                key = None
            else:
                if pos + size > end:
                    raise CorruptRecordError("record key overruns the record")
                key = body[pos:pos + size]
                pos += size
            size, pos = _read_varint(body, pos)
            if size < 0:
                value = None
            else:
                if pos + size > end:
                    raise CorruptRecordError("record value overruns the record")
                value = body[pos:pos + size]
                pos += size
            header_count, pos = _read_varint(body, pos)
            if header_count < 0:
                raise CorruptRecordError("invalid number of record headers %d" % header_count)
            headers = []
            for _ in range(header_count):
                size, pos = _read_varint(body, pos)
                if size < 0:
                    raise CorruptRecordError("invalid negative header key size %d" % size)
                if pos + size > end:
                    raise CorruptRecordError("header key overruns the record")
                header_key = body[pos:pos + size].decode("utf-8")
                pos += size
                size, pos = _read_varint(body, pos)
                if size < 0:
                    header_value = None
                else:
                    if pos + size > end:
                        raise CorruptRecordError("header value overruns the record")
                    header_value = body[pos:pos + size]
                    pos += size
                headers.append((header_key, header_value))
            if pos != end:
                raise CorruptRecordError(
                    "invalid record size: expected %d bytes in record payload, read %d"
                    % (length, length - (end - pos)))
            append(Record(
                attributes, timestamp_delta, offset_delta, key, value, headers,
                base_offset + offset_delta,
                log_append_time if log_append_time is not None
                else base_timestamp + timestamp_delta))
    except IndexError:
        raise CorruptRecordError("record batch body ends inside record %d of %d"
                                 % (len(out), count))
    except UnicodeDecodeError as e:
        raise CorruptRecordError("record header key is not UTF-8: %s" % (e,))
    if pos != end_of_body:
        raise CorruptRecordError(
            "%d bytes left after the %d records of the batch" % (end_of_body - pos, count))
    return out


def decode_batch(buf, pos=0, verify=True, max_size=None):
    """Decode the v2 batch at ``pos``: ``(BatchHeader, [Record])``, decompressing as needed.

    Raises :class:`CorruptRecordError` for anything malformed (including a CRC mismatch
    when ``verify``, and a body decompressing to more than ``max_size`` bytes).
    """
    header = read_batch_header(buf, pos)
    end = pos + header.size_in_bytes
    if end > len(buf):
        raise CorruptRecordError(
            "truncated record batch: %d bytes of %d" % (len(buf) - pos, header.size_in_bytes))
    if verify and not verify_crc(buf, pos, header):
        raise CorruptRecordError(
            "record batch is corrupt (stored crc = %d, computed crc = %d)"
            % (header.crc, compute_crc(buf, pos, header.batch_length)))
    if header.records_count < 0:
        raise CorruptRecordError("invalid record count %d" % (header.records_count,))
    body = memoryview(buf)[pos + RECORDS_OFFSET:end]
    codec = header.compression
    if codec:
        body = _compression.decompress(codec, body, max_size=max_size)
    else:
        body = bytes(body)
    if header.records_count > len(body):  # every record takes at least one byte
        raise CorruptRecordError(
            "record count %d cannot fit in %d bytes" % (header.records_count, len(body)))
    log_append_time = header.max_timestamp if header.timestamp_type == LOG_APPEND_TIME else None
    return header, _decode_records(body, header.records_count, header.base_offset,
                                   header.base_timestamp, log_append_time)


MIN_RECORD_BODY = 6  # attributes + five one-byte varints (timestamp/offset deltas, key, value, headers)


def _records_span(buf, pos, header, max_size):
    """``(body, start, end)`` of a batch's records: the buffer itself (walked in place, no
    slice, no copy) or the decompressed body of at most ``max_size`` bytes."""
    p = pos + RECORDS_OFFSET
    end = pos + header.batch_length + LOG_OVERHEAD
    codec = header.attributes & COMPRESSION_CODEC_MASK  # (header.compression inline)
    if codec:
        body = _compression.decompress(codec, memoryview(buf)[p:end], max_size=max_size)
        return body, 0, len(body)
    return buf, p, end if end <= len(buf) else len(buf)


def _check_all_read(p, end, count):
    if p != end:
        raise InvalidRecordError("Incorrect declared batch size, records still remaining in file "
                                 "(%d bytes after %d records)" % (end - p, count))


def _prefix_steps():
    """The tables of :func:`check_records`' walk: ``FIRST[b]`` is what a record whose length
    prefix starts with byte ``b`` adds to the position (prefix plus body) for a one-byte
    prefix (b < 0x80), or the first byte's share of it for a two-byte one, and ``SECOND[b2]``
    the second byte's share; ``_UNUSUAL`` (past any buffer) stands for everything the walk
    leaves to the exact loop: a negative or too short length, a longer or non-canonical
    prefix."""
    first = []
    for b in range(256):
        if b & 1:  # zigzag: an odd low byte is a negative length
            first.append(_UNUSUAL)
        elif b < 0x80:
            first.append(1 + (b >> 1) if b >> 1 >= MIN_RECORD_BODY else _UNUSUAL)
        else:
            first.append(2 + ((b & 0x7F) >> 1))
    second = [b2 << 6 if 0 < b2 < 0x80 else _UNUSUAL for b2 in range(256)]
    return tuple(first), tuple(second)


_UNUSUAL = 1 << 40
_FIRST, _SECOND = _prefix_steps()


def step_records_py(body, p, end, count):
    """The position after ``count`` records of ``body`` from ``p`` when each has a one- or
    two-byte canonical length prefix and a body of at least MIN_RECORD_BODY bytes; else any
    position that is not ``end`` (the caller's exact walk then decides). ``end`` bounds nothing
    here: a walk that overruns it cannot come back to it.

    Records under 8 KiB with canonical prefixes (what clients write) are stepped over by a
    table look-up per prefix byte, no check per record: a bad or unusual prefix sends the
    position past any buffer for good. The pure-Python form of the compiled
    ``_recwalk.step_records`` (~100 ns a record against a few)."""
    first, second = _FIRST, _SECOND
    try:
        for _ in range(count):
            b = body[p]
            if b < 0x80:
                p += first[b]
            else:
                p += first[b] + second[body[p + 1]]
    except IndexError:
        return -1
    return p


def _compiled_step():
    """``_recwalk.step_records`` when it is built (``pip install`` compiles it where a C
    compiler is found) and not turned off with ``KAFKATW_PURE_PYTHON=1``; else None."""
    if _os.environ.get("KAFKATW_PURE_PYTHON"):
        return None
    try:
        from kafkatw.protocol import _recwalk
    except ImportError:
        return None
    if _recwalk.MIN_RECORD_BODY != MIN_RECORD_BODY:  # pragma: no cover - a stale build
        return None
    return _recwalk.step_records


#: the framing walk check_records uses: the compiled one when built, else :func:`step_records_py`
step_records = _compiled_step() or step_records_py


def check_records(buf, pos, header, max_size):
    """Kafka's walk over a produced batch's records (LogValidator's skipKeyValueIterator)
    reduced to framing: the (decompressed, at most ``max_size`` bytes) body holds exactly
    ``records_count`` length-prefixed records. Raises CorruptRecordError / InvalidRecordError.

    :func:`step_records` steps over the records clients write; only when it does not end at
    the batch's end does the exact loop (:func:`_walk_records`) walk the batch again, to accept
    an unusual but valid prefix or say what is wrong."""
    if header.attributes & COMPRESSION_CODEC_MASK:
        body, p, end = _records_span(buf, pos, header, max_size)
    else:  # _records_span's uncompressed case inline: the buffer itself
        body, p, end = buf, pos + RECORDS_OFFSET, pos + header.batch_length + LOG_OVERHEAD
        if end > len(body):  # (not min(): a builtin call parsing its keywords, ~1k)
            end = len(body)
    count = header.records_count
    if step_records(body, p, end, count) != end:
        _walk_records(body, p, end, count)


def _walk_records(body, p, end, count):
    """check_records' exact walk, record by record: any prefix, and the error that names
    what is wrong."""
    read_varint = _read_varint
    try:
        for i in range(count):
            if p >= end:
                raise IndexError(p)
            b = body[p]
            if b < 0x80:  # one- and two-byte length prefixes inline (records under 8 KiB)
                length = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                b2 = body[p + 1]
                if b2 < 0x80:
                    raw = (b & 0x7F) | (b2 << 7)
                    length = (raw >> 1) ^ -(raw & 1)
                    p += 2
                else:
                    length, p = read_varint(body, p)
            if length < MIN_RECORD_BODY or p + length > end:
                raise InvalidRecordError("Incorrect declared batch size, premature EOF reached "
                                         "(record %d of %d claims %d bytes)" % (i, count, length))
            p += length
    except IndexError:
        raise InvalidRecordError("Incorrect declared batch size, premature EOF reached")
    _check_all_read(p, end, count)


def keyless_records(buf, pos, header, max_size):
    """Indexes of the records of a produced batch whose key is null (Kafka's
    LogValidator.validateKey, for compacted topics), by the same framing walk as
    :func:`check_records` plus a look at each record's key length: no record is built (decoding
    a 30,000-record batch took ~0.3-1 s, the walk ~0.03 s). Raises like check_records."""
    body, p, end = _records_span(buf, pos, header, max_size)
    count = header.records_count
    read_varint = _read_varint
    keyless = []
    try:
        for i in range(count):
            if p >= end:
                raise IndexError(p)
            b = body[p]
            if b < 0x80:  # one-byte length prefix inline, as check_records
                length = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                length, p = read_varint(body, p)
            if length < MIN_RECORD_BODY or p + length > end:
                raise InvalidRecordError("Incorrect declared batch size, premature EOF reached "
                                         "(record %d of %d claims %d bytes)" % (i, count, length))
            q = p + 1  # after the attributes byte: skip the timestamp and offset deltas
            while body[q] >= 0x80:
                q += 1
            q += 1
            while body[q] >= 0x80:
                q += 1
            q += 1
            if q >= p + length:
                raise InvalidRecordError("record %d of %d is shorter than its fields" % (i, count))
            if body[q] == 1:  # key length -1 (zigzag): a null key
                keyless.append(i)
            p += length
    except IndexError:
        raise InvalidRecordError("Incorrect declared batch size, premature EOF reached")
    _check_all_read(p, end, count)
    return keyless


def iter_batches(buf, allow_partial_tail=False, verify=True):
    """Yield ``(BatchHeader, [Record])`` for each v2 batch in ``buf``."""
    for pos, _ in iter_batch_headers(buf, allow_partial_tail):
        yield decode_batch(buf, pos, verify)


def _encode_record(out, attributes, timestamp_delta, offset_delta, key, value, headers):
    body = bytearray()
    body.append(attributes & 0xFF)
    _write_varint(body, timestamp_delta)
    _write_varint(body, offset_delta)
    if key is None:
        body.append(1)  # varint -1
    else:
        _write_varint(body, len(key))
        body += key
    if value is None:
        body.append(1)
    else:
        _write_varint(body, len(value))
        body += value
    _write_varint(body, len(headers))
    for header_key, header_value in headers:
        if isinstance(header_key, str):
            header_key = header_key.encode("utf-8")
        _write_varint(body, len(header_key))
        body += header_key
        if header_value is None:
            body.append(1)
        else:
            _write_varint(body, len(header_value))
            body += header_value
    _write_varint(out, len(body))
    out += body


def build_batch(records, *, base_offset=0, compression=0, producer_id=NO_PRODUCER_ID,
                producer_epoch=NO_PRODUCER_EPOCH, base_sequence=NO_SEQUENCE,
                is_transactional=False, is_control=False, timestamp_type=CREATE_TIME,
                base_timestamp=None, partition_leader_epoch=NO_PARTITION_LEADER_EPOCH,
                max_timestamp=None, last_offset_delta=None, compression_level=None):
    """Encode ``records`` (:class:`Record`) as one v2 batch and return its bytes.

    Per record, the offset delta is ``offset_delta`` if set, else ``offset - base_offset``
    if ``offset`` is set, else its index. The timestamp is ``timestamp`` (absolute) if set,
    else ``base_timestamp + timestamp_delta``. ``base_timestamp`` defaults to the first
    record's absolute timestamp (else NO_TIMESTAMP); ``max_timestamp`` to the largest record
    timestamp. ``compression_level``: Kafka's level for the codec (``compression.compress``).
    """
    records = list(records)
    if base_timestamp is None:
        base_timestamp = NO_TIMESTAMP
        if records and records[0].timestamp is not None:
            base_timestamp = records[0].timestamp
    body = bytearray()
    max_ts = None
    offset_delta = -1
    for index, r in enumerate(records):
        if r.offset_delta is not None:
            offset_delta = r.offset_delta
        elif r.offset is not None:
            offset_delta = r.offset - base_offset
        else:
            offset_delta = index
        if r.timestamp is not None:
            timestamp_delta = r.timestamp - base_timestamp
            ts = r.timestamp
        else:
            timestamp_delta = r.timestamp_delta
            ts = base_timestamp + timestamp_delta
        if max_ts is None or ts > max_ts:
            max_ts = ts
        _encode_record(body, r.attributes, timestamp_delta, offset_delta, r.key, r.value,
                       r.headers)
    count = len(records)
    if last_offset_delta is None:
        last_offset_delta = max(offset_delta, 0)
    if max_timestamp is None:
        max_timestamp = max_ts if max_ts is not None else base_timestamp
    if compression:
        body = _compression.compress(compression, body, compression_level)
    attributes = compression & COMPRESSION_CODEC_MASK
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    out = bytearray(BATCH_HEADER_SIZE)
    out += body
    _HEADER.pack_into(
        out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, MAGIC_VALUE_V2,
        0, attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
        producer_epoch, base_sequence, count)
    _UINT32.pack_into(out, CRC_OFFSET, compute_crc(out, 0, len(out) - LOG_OVERHEAD))
    return bytes(out)


# -- control batches (transaction markers and KRaft control records) ----------------------

ABORT = 0
COMMIT = 1
LEADER_CHANGE = 2
SNAPSHOT_HEADER = 3
SNAPSHOT_FOOTER = 4
KRAFT_VERSION = 5
KRAFT_VOTERS = 6

CONTROL_RECORD_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0

_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")


@attr.s(slots=True, frozen=True)
class ControlRecord:
    """The key of a control record; ``coordinator_epoch`` only for COMMIT/ABORT markers."""

    version = attr.ib()
    type = attr.ib()
    coordinator_epoch = attr.ib(default=None)

    @property
    def is_commit(self):
        return self.type == COMMIT

    @property
    def is_abort(self):
        return self.type == ABORT


def build_control_batch(marker_type, coordinator_epoch, producer_id, producer_epoch, *,
                        base_offset=0, timestamp=NO_TIMESTAMP,
                        partition_leader_epoch=NO_PARTITION_LEADER_EPOCH):
    """A transactional control batch holding one COMMIT (1) or ABORT (0) marker."""
    if marker_type not in (ABORT, COMMIT):
        raise InvalidRecordError("not a transaction marker type: %r" % (marker_type,))
    record = Record(
        key=_CONTROL_KEY.pack(CONTROL_RECORD_KEY_VERSION, marker_type),
        value=_END_TXN_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch),
        timestamp=timestamp)
    return build_batch(
        [record], base_offset=base_offset, producer_id=producer_id,
        producer_epoch=producer_epoch, is_transactional=True, is_control=True,
        base_timestamp=timestamp, partition_leader_epoch=partition_leader_epoch)


def decode_control_record(record):
    """Parse the key (and for markers the value) of a record of a control batch."""
    key = record.key
    if key is None or len(key) < _CONTROL_KEY.size:
        raise InvalidRecordError("control record key must hold at least 4 bytes")
    version, control_type = _CONTROL_KEY.unpack_from(key, 0)
    if version < 0:
        raise InvalidRecordError("invalid version %d in control record" % (version,))
    if control_type not in (ABORT, COMMIT):
        return ControlRecord(version, control_type)
    value = record.value
    if value is None or len(value) < _END_TXN_VALUE.size:
        raise InvalidRecordError("end transaction marker value must hold at least 6 bytes")
    marker_version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value, 0)
    if marker_version < 0:
        raise InvalidRecordError("invalid end transaction marker version %d" % marker_version)
    return ControlRecord(version, control_type, coordinator_epoch)


# -- legacy message sets (magic v0 and v1) --------------------------------------------------

NO_TIMESTAMP_TYPE = -1

# offset, message size, crc, magic, attributes [, timestamp]
_LEGACY_V0 = struct.Struct(">qiIbb")
_LEGACY_V1 = struct.Struct(">qiIbbq")
LEGACY_MAGIC_OFFSET = 16  # the CRC32 covers from the magic to the end of the message
LEGACY_RECORD_OVERHEAD_V0 = 14  # crc, magic, attributes, key length, value length
LEGACY_RECORD_OVERHEAD_V1 = 22  # plus the timestamp
_LEGACY_OVERHEAD = {MAGIC_VALUE_V0: LEGACY_RECORD_OVERHEAD_V0,
                    MAGIC_VALUE_V1: LEGACY_RECORD_OVERHEAD_V1}


@attr.s(slots=True, frozen=True)
class LegacyMessage:
    """A v0/v1 message; inner messages of a compressed wrapper carry absolute offsets."""

    offset = attr.ib()
    magic = attr.ib()
    attributes = attr.ib()
    timestamp = attr.ib()
    key = attr.ib()
    value = attr.ib()
    crc = attr.ib()

    @property
    def compression(self):
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self):
        if self.magic == MAGIC_VALUE_V0:
            return NO_TIMESTAMP_TYPE
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME


def _read_legacy_message(buf, pos, size, verify):
    magic = buf[pos + LEGACY_MAGIC_OFFSET]
    if magic not in _LEGACY_OVERHEAD:
        raise CorruptRecordError("unsupported legacy message magic %d" % (magic,))
    if size < _LEGACY_OVERHEAD[magic]:
        raise CorruptRecordError("message size %d is less than the minimum %d for magic %d"
                                 % (size, _LEGACY_OVERHEAD[magic], magic))
    end = pos + LOG_OVERHEAD + size
    if magic == MAGIC_VALUE_V0:
        offset, _, crc, _, attributes = _LEGACY_V0.unpack_from(buf, pos)
        timestamp = NO_TIMESTAMP
        p = pos + _LEGACY_V0.size
    else:
        offset, _, crc, _, attributes, timestamp = _LEGACY_V1.unpack_from(buf, pos)
        p = pos + _LEGACY_V1.size
    if verify:
        computed = zlib.crc32(memoryview(buf)[pos + LEGACY_MAGIC_OFFSET:end])
        if computed != crc:
            raise CorruptRecordError(
                "message is corrupt (stored crc = %d, computed crc = %d)" % (crc, computed))
    key_size = _INT32.unpack_from(buf, p)[0]
    p += 4
    if key_size < 0:
        key = None
    else:
        if p + key_size + 4 > end:
            raise CorruptRecordError("message key overruns the message")
        key = bytes(buf[p:p + key_size])
        p += key_size
    value_size = _INT32.unpack_from(buf, p)[0]
    p += 4
    if value_size < 0:
        value = None
    else:
        if p + value_size > end:
            raise CorruptRecordError("message value overruns the message")
        value = bytes(buf[p:p + value_size])
        p += value_size
    if p != end:
        raise CorruptRecordError("%d unexpected bytes at the end of the message" % (end - p,))
    return LegacyMessage(offset, magic, attributes & 0xFF, timestamp, key, value, crc)


def _iter_shallow_legacy(buf, allow_partial_tail, verify):
    end = len(buf)
    pos = 0
    while pos < end:
        remaining = end - pos
        if remaining < LOG_OVERHEAD + LEGACY_RECORD_OVERHEAD_V0:
            if remaining >= LOG_OVERHEAD:
                size = _INT32.unpack_from(buf, pos + BATCH_LENGTH_OFFSET)[0]
                if size < LEGACY_RECORD_OVERHEAD_V0:
                    raise CorruptRecordError("message size %d too small" % (size,))
            if allow_partial_tail:
                return
            raise CorruptRecordError("truncated message at position %d" % (pos,))
        size = _INT32.unpack_from(buf, pos + BATCH_LENGTH_OFFSET)[0]
        if size < LEGACY_RECORD_OVERHEAD_V0:
            raise CorruptRecordError("message size %d too small" % (size,))
        if LOG_OVERHEAD + size > remaining:
            if allow_partial_tail:
                return
            raise CorruptRecordError(
                "truncated message at position %d: %d bytes of %d"
                % (pos, remaining, LOG_OVERHEAD + size))
        yield _read_legacy_message(buf, pos, size, verify)
        pos += LOG_OVERHEAD + size


def _unpack_wrapper(wrapper, verify):
    if wrapper.value is None:
        raise InvalidRecordError("compressed message at offset %d has a null value"
                                 % (wrapper.offset,))
    inner_bytes = _compression.decompress(wrapper.compression, wrapper.value, wrapper.magic)
    inner = list(_iter_shallow_legacy(inner_bytes, False, verify))
    if not inner:
        raise InvalidRecordError("compressed message at offset %d holds no messages"
                                 % (wrapper.offset,))
    shift = 0
    if wrapper.magic >= MAGIC_VALUE_V1:
        shift = wrapper.offset - inner[-1].offset  # inner offsets are relative
    log_append = wrapper.timestamp_type == LOG_APPEND_TIME
    for m in inner:
        if m.compression:
            raise CorruptRecordError("message at offset %d appears double-compressed"
                                     % (wrapper.offset,))
        if m.magic != wrapper.magic:
            raise CorruptRecordError(
                "compressed message has magic %d but an inner message has magic %d"
                % (wrapper.magic, m.magic))
        attributes = m.attributes
        timestamp = m.timestamp
        if log_append:
            attributes |= TIMESTAMP_TYPE_MASK
            timestamp = wrapper.timestamp
        yield LegacyMessage(m.offset + shift, m.magic, attributes, timestamp, m.key, m.value,
                            m.crc)


def iter_legacy_messages(buf, allow_partial_tail=False, verify=True, deep=True):
    """Yield :class:`LegacyMessage` for each v0/v1 message of a message set.

    With ``deep`` (default), compressed wrapper messages are unpacked into their inner
    messages with absolute offsets (v1 stores them relative to the wrapper's offset, which
    is that of the last inner message) and the wrapper's log-append time. CRC32 is checked
    when ``verify``. Malformed input raises :class:`CorruptRecordError`.
    """
    for message in _iter_shallow_legacy(buf, allow_partial_tail, verify):
        if deep and message.compression:
            yield from _unpack_wrapper(message, verify)
        else:
            yield message


def legacy_to_batch(buf, *, base_offset=None, compression=None,
                    partition_leader_epoch=NO_PARTITION_LEADER_EPOCH):
    """Up-convert a v0/v1 message set into one v2 batch (bytes), as Kafka does on produce.

    Offset deltas are assigned in order; ``base_offset`` defaults to the first message's
    offset, ``compression`` to the codec the message set used. v0 messages get
    NO_TIMESTAMP. Returns b"" for an empty message set.
    """
    source_codec = 0
    messages = []
    for shallow in _iter_shallow_legacy(buf, False, True):
        if shallow.compression:
            source_codec = shallow.compression
            messages.extend(_unpack_wrapper(shallow, True))
        else:
            messages.append(shallow)
    if not messages:
        return b""
    if compression is None:
        compression = source_codec
    if base_offset is None:
        base_offset = messages[0].offset
    log_append = messages[-1].timestamp_type == LOG_APPEND_TIME
    recs = [Record(offset_delta=i, key=m.key, value=m.value, headers=[], timestamp=m.timestamp)
            for i, m in enumerate(messages)]
    return build_batch(recs, base_offset=base_offset, compression=compression,
                       timestamp_type=LOG_APPEND_TIME if log_append else CREATE_TIME,
                       partition_leader_epoch=partition_leader_epoch)


def _encode_legacy_message(out, offset, magic, attributes, timestamp, key, value):
    start = len(out)
    header = _LEGACY_V0 if magic == MAGIC_VALUE_V0 else _LEGACY_V1
    out += bytes(header.size)
    for field in (key, value):
        if field is None:
            out += b"\xff\xff\xff\xff"
        else:
            out += _INT32.pack(len(field))
            out += field
    size = len(out) - start - LOG_OVERHEAD
    if magic == MAGIC_VALUE_V0:
        header.pack_into(out, start, offset, size, 0, magic, attributes)
    else:
        header.pack_into(out, start, offset, size, 0, magic, attributes, timestamp)
    crc = zlib.crc32(memoryview(out)[start + LEGACY_MAGIC_OFFSET:])
    _UINT32.pack_into(out, start + 12, crc)


def build_legacy_message_set(records, magic, *, compression=0, timestamp_type=CREATE_TIME):
    """Down-convert absolute-offset :class:`Record`s (as decoded) to a v0/v1 message set.

    Headers are dropped (v0/v1 have none). Compressed sets are one wrapper message whose
    offset is the last inner offset; v1 inner offsets are relative to the first.
    """
    if magic not in (MAGIC_VALUE_V0, MAGIC_VALUE_V1):
        raise ValueError("legacy magic must be 0 or 1, not %r" % (magic,))
    records = list(records)
    out = bytearray()
    ts_bit = TIMESTAMP_TYPE_MASK if (magic and timestamp_type == LOG_APPEND_TIME) else 0
    if not records:
        return b""
    if not compression:
        for r in records:
            ts = r.timestamp if magic else NO_TIMESTAMP
            _encode_legacy_message(out, r.offset, magic, ts_bit, ts, r.key, r.value)
        return bytes(out)
    first = records[0].offset
    inner = bytearray()
    max_ts = NO_TIMESTAMP
    for r in records:
        ts = r.timestamp if magic else NO_TIMESTAMP
        max_ts = max(max_ts, ts)
        offset = r.offset - first if magic else r.offset
        _encode_legacy_message(inner, offset, magic, 0, ts, r.key, r.value)
    if compression == _compression.LZ4 and magic == MAGIC_VALUE_V0:
        raise InvalidRecordError("lz4 is not supported with magic v0 (broken framing)")
    value = _compression.compress(compression, inner)
    _encode_legacy_message(out, records[-1].offset, magic, (compression & 7) | ts_bit,
                           max_ts if magic else NO_TIMESTAMP, None, value)
    return bytes(out)
