"""Record batches (magic v2) on the wire and on disk: headers, CRC32C, records, control batches.

Owns the byte layout of a batch and of legacy v0/v1 message sets (read and up-convert).
Does not own compression codecs (compression.py), offsets assignment policy or storage.
"""

import struct

import attr
import crc32c as _crc32c

from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError

__all__ = [
    "BATCH_HEADER_SIZE", "LOG_OVERHEAD", "RECORD_BATCH_OVERHEAD", "MAGIC_VALUE_V0",
    "MAGIC_VALUE_V1", "MAGIC_VALUE_V2", "NO_TIMESTAMP", "NO_PRODUCER_ID", "NO_PRODUCER_EPOCH",
    "NO_SEQUENCE", "NO_PARTITION_LEADER_EPOCH", "CREATE_TIME", "LOG_APPEND_TIME",
    "CorruptRecordError", "InvalidRecordError", "BatchHeader", "read_batch_header",
    "read_magic", "iter_batch_headers", "compute_crc", "verify_crc", "validate_batch",
    "set_base_offset", "set_partition_leader_epoch", "set_log_append_time",
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
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_LOG_OVERHEAD = struct.Struct(">qi")


# -- errors ------------------------------------------------------------------------------

class CorruptRecordError(KafkaError):
    """Bytes that are not a well-formed record batch (Kafka's CorruptRecordException)."""

    def __init__(self, message=None):
        super().__init__(errors.CORRUPT_MESSAGE, message)


class InvalidRecordError(KafkaError):
    """A well-formed batch whose contents break Kafka's rules (InvalidRecordException)."""

    def __init__(self, message=None):
        super().__init__(errors.INVALID_RECORD, message)


# -- the batch header --------------------------------------------------------------------

@attr.s(slots=True, frozen=True)
class BatchHeader:
    """The 61 bytes in front of the records of a v2 batch, as read from the wire or a log."""

    base_offset = attr.ib()
    batch_length = attr.ib()
    partition_leader_epoch = attr.ib()
    magic = attr.ib()
    crc = attr.ib()
    attributes = attr.ib()
    last_offset_delta = attr.ib()
    base_timestamp = attr.ib()
    max_timestamp = attr.ib()
    producer_id = attr.ib()
    producer_epoch = attr.ib()
    base_sequence = attr.ib()
    records_count = attr.ib()

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


def validate_batch(buf, pos, header, allow_empty=False):
    """The checks Kafka's produce path makes on a v2 batch before looking at its records.

    Structure and CRC problems raise :class:`CorruptRecordError`; a well-formed batch with an
    inconsistent record count raises :class:`InvalidRecordError`.
    """
    if header.magic != MAGIC_VALUE_V2:
        raise CorruptRecordError("unsupported record batch magic %d" % (header.magic,))
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError("record batch length %d too small" % (header.batch_length,))
    available = len(buf) - pos
    if header.size_in_bytes > available:
        raise CorruptRecordError(
            "record batch of %d bytes but only %d available" % (header.size_in_bytes, available))
    if not verify_crc(buf, pos, header):
        raise CorruptRecordError(
            "record batch is corrupt (stored crc = %d, computed crc = %d)"
            % (header.crc, compute_crc(buf, pos, header.batch_length)))
    count = header.records_count
    if count < 0:
        raise InvalidRecordError("invalid reported count for record batch: %d" % (count,))
    if count == 0:
        if not allow_empty:
            raise InvalidRecordError("invalid reported count for record batch: 0")
    elif header.last_offset_delta + 1 != count:
        raise InvalidRecordError(
            "inconsistent batch offset range [%d, %d] and count of records %d"
            % (header.base_offset, header.last_offset, count))
    if header.last_offset_delta < 0:
        raise InvalidRecordError("negative last offset delta %d" % (header.last_offset_delta,))
    if header.compression == 0 and count > 0:
        # Each uncompressed record takes at least 7 bytes (length + 6 single-byte fields).
        if header.batch_length - MIN_BATCH_LENGTH < 7 * count:
            raise CorruptRecordError(
                "record batch of %d bytes cannot hold %d records" % (header.size_in_bytes, count))
    if header.compression > 4:
        raise InvalidRecordError("unknown compression codec %d" % (header.compression,))
    return header


# -- in-place writers (the buffer must be writable: bytearray or writable memoryview) ---------

def set_base_offset(buf, pos, offset):
    """Rewrite the base offset; not covered by the CRC."""
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, offset)


def set_partition_leader_epoch(buf, pos, epoch):
    """Rewrite the partition leader epoch; not covered by the CRC."""
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


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
