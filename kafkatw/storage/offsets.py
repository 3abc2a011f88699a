"""Value objects of the log read/append path: LogOffsetMetadata, FetchIsolation, FetchDataInfo,
LogAppendInfo (Kafka's names). Pure data; no file access and no policy lives here.
"""

import collections
import enum

import attr

UNKNOWN_OFFSET = -1
UNIFIED_LOG_UNKNOWN_OFFSET = -1


# Kafka's AppendOrigin: who appends decides what the batches may hold and what is checked.
ORIGIN_CLIENT = "client"  # a Produce request: sequences checked, no control batches
ORIGIN_COORDINATOR = "coordinator"  # coordinators' own records and transaction markers


class FetchIsolation(enum.Enum):
    LOG_END = 0
    HIGH_WATERMARK = 1
    TXN_COMMITTED = 2


@attr.s(slots=True, unsafe_hash=True, weakref_slot=False)
class LogOffsetMetadata:
    """An offset plus, when known, the segment holding it and its byte position there.

    Not to be changed once made. A class with slots, not a named tuple: CPython 3.11
    specialises the read of a slot but not of a named tuple's field (~95 instructions against
    ~230 a read), and a parked fetch woken by a produce reads these fields ~25 times (its
    checks, the read, the log's end and HW) for the two made. Not frozen: a frozen attrs
    ``__init__`` sets each field through ``object.__setattr__``."""

    message_offset = attr.ib()
    segment_base_offset = attr.ib(default=UNIFIED_LOG_UNKNOWN_OFFSET)
    relative_position_in_segment = attr.ib(default=UNKNOWN_OFFSET)

    @property
    def message_offset_only(self):
        return (self.segment_base_offset == UNIFIED_LOG_UNKNOWN_OFFSET
                and self.relative_position_in_segment == UNKNOWN_OFFSET)

    # (message_offset_only inline below: a parked fetch asks these on every append it sees)
    def _require_positions(self, that):
        if (self.segment_base_offset == UNIFIED_LOG_UNKNOWN_OFFSET
                and self.relative_position_in_segment == UNKNOWN_OFFSET) \
                or (that.segment_base_offset == UNIFIED_LOG_UNKNOWN_OFFSET
                    and that.relative_position_in_segment == UNKNOWN_OFFSET):
            raise ValueError("%r or %r has only the message offset" % (self, that))

    def on_older_segment(self, that):
        """True if this offset is on a segment older than ``that``'s."""
        self._require_positions(that)
        return self.segment_base_offset < that.segment_base_offset

    def on_same_segment(self, that):
        self._require_positions(that)
        return self.segment_base_offset == that.segment_base_offset

    def position_diff(self, that):
        """Bytes between ``that`` and this position; both must be on the same segment."""
        self._require_positions(that)
        if self.segment_base_offset != that.segment_base_offset:
            raise ValueError("%r and %r are not on the same segment" % (self, that))
        return self.relative_position_in_segment - that.relative_position_in_segment

    def __str__(self):
        return "(offset=%d segment=[%d:%d])" % (
            self.message_offset, self.segment_base_offset, self.relative_position_in_segment)


UNKNOWN_OFFSET_METADATA = LogOffsetMetadata(-1, 0, 0)


class FetchDataInfo(collections.namedtuple("FetchDataInfo", (
        "fetch_offset_metadata", "records", "first_entry_incomplete", "aborted_transactions"),
        defaults=(False, None))):
    """The result of a log read: where it starts and a FileRegion of whole (or a cut) batches;
    ``aborted_transactions`` for a READ_COMMITTED read.

    Immutable; a named tuple the read path builds in C (``tuple.__new__(FetchDataInfo,
    (metadata, records, first_entry_incomplete, aborted))``), as LogOffsetMetadata."""

    __slots__ = ()


@attr.s(slots=True, weakref_slot=False)
class LogAppendInfo:
    """What an append did: offsets assigned, timestamps, counts (Kafka's LogAppendInfo).

    Not to be changed once made. A class with slots, not a named tuple: CPython 3.11
    specialises the read of a slot but not of a named tuple's field (~200 instructions a
    read), and an append's is read a dozen times (the log, the replica manager). Made only
    through its constructor, the validator's included."""

    first_offset = attr.ib()
    last_offset = attr.ib()
    max_timestamp = attr.ib()
    offset_of_max_timestamp = attr.ib()
    log_append_time = attr.ib()
    log_start_offset = attr.ib()
    record_count = attr.ib()
    valid_bytes = attr.ib()
    leader_epoch = attr.ib(default=-1)
