"""LogSegment: one .log file with its .index, .timeindex and .txnindex (Kafka's LogSegment).
Appends already validated batches, translates offsets to positions (index lookup then header
scan), slices reads, recovers (rebuilds indexes, truncates a torn tail), truncates, and rolls its
indexes to inactive. Which transactions were aborted is decided by the log, not here.
"""

import os
import struct

from kafkatw.protocol import records

from .file_records import FileRecords
from .index import OffsetIndex, TimeIndex
from .offsets import FetchDataInfo, LogOffsetMetadata
from .txn_index import TransactionIndex

_new = tuple.__new__

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_BASE_OFFSET = struct.Struct(">q")  # a batch starts with its base offset

_INT32_MAX = 2 ** 31 - 1


def filename_prefix(offset):
    return "%020d" % offset


def _segment_file(directory, offset, kind):
    # (os.sep, not os.path.join: a start checks the active .log of each of 50,000 logs)
    return "%s%s%020d%s" % (directory, os.sep, offset, kind)


def log_file(directory, offset, suffix=""):
    return _segment_file(directory, offset, LOG_SUFFIX + suffix)


def offset_index_file(directory, offset, suffix=""):
    return _segment_file(directory, offset, INDEX_SUFFIX + suffix)


def time_index_file(directory, offset, suffix=""):
    return _segment_file(directory, offset, TIME_INDEX_SUFFIX + suffix)


def txn_index_file(directory, offset, suffix=""):
    return _segment_file(directory, offset, TXN_INDEX_SUFFIX + suffix)


class LogSegment:
    def __init__(self, directory, base_offset, index_interval_bytes, max_index_size,
                 created_ms=0, suffix="", new=False):
        """``new``: a segment of a directory just made: its .log is created without looking
        for it, its indexes when first written (as for any empty segment)."""
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log = FileRecords(log_file(directory, base_offset, suffix), new=new)
        self.offset_index = OffsetIndex(offset_index_file(directory, base_offset, suffix),
                                        base_offset, max_index_size)
        self.time_index = TimeIndex(time_index_file(directory, base_offset, suffix),
                                    base_offset, max_index_size)
        self.txn_index = TransactionIndex(txn_index_file(directory, base_offset, suffix),
                                          base_offset, new)
        self.created_ms = created_ms
        self.rolling_based_timestamp = None
        self._bytes_since_last_index_entry = 0
        self._max_ts_and_offset = None  # lazily from the time index
        #: True once should_roll found neither index full, until an entry is added to either
        #: (or they are rebuilt, truncated, trimmed): an index fills only by its appends
        self._indexes_have_room = False

    @classmethod
    def open(cls, directory, base_offset, config, created_ms=0, suffix="", new=False):
        return cls(directory, base_offset, config.index_interval_bytes,
                   config.segment_index_bytes, created_ms, suffix, new)

    # -- metadata -----------------------------------------------------------------------

    @property
    def size(self):
        return self.log.size_in_bytes()

    def _max_ts(self):
        if self._max_ts_and_offset is None:
            self._max_ts_and_offset = self.time_index.last_entry
        return self._max_ts_and_offset

    @property
    def max_timestamp_so_far(self):
        return self._max_ts()[0]

    @property
    def offset_of_max_timestamp_so_far(self):
        return self._max_ts()[1]

    def largest_timestamp(self, now_ms=None):
        """Max timestamp in the segment, or its file's mtime if none was recorded."""
        ts = self.max_timestamp_so_far
        if ts >= 0:
            return ts
        return self.last_modified_ms

    @property
    def last_modified_ms(self):
        return int(os.stat(self.log.path).st_mtime * 1000)

    def time_waited_for_roll(self, now_ms, first_batch_max_ts):
        if self.rolling_based_timestamp is None and self.size > 0:
            header = self.log.read_header(0)
            if header is not None:
                self.rolling_based_timestamp = header.max_timestamp
        base = self.rolling_based_timestamp
        if base is None or base < 0:
            base = self.created_ms
        return now_ms - base

    def can_convert_to_relative_offset(self, offset):
        return 0 <= offset - self.base_offset <= _INT32_MAX

    def should_roll(self, config, now_ms, messages_size, max_offset, max_ts, jitter=0):
        size = self.log._size  # (size_in_bytes() inline, read once: this runs on every append)
        if size > config.segment_bytes - messages_size:
            return True
        if size > 0:
            base = self.rolling_based_timestamp
            if base is None:
                waited = self.time_waited_for_roll(now_ms, max_ts)
            else:
                waited = now_ms - (base if base >= 0 else self.created_ms)
            if waited > config.segment_ms - jitter:
                return True
        if not self._indexes_have_room:  # (asked of the indexes again only after an entry)
            if self.offset_index.is_full() or self.time_index.is_full():
                return True
            self._indexes_have_room = True
        relative = max_offset - self.base_offset  # (two tests, not a chained comparison:
        if relative < 0 or relative > _INT32_MAX:  # each then has a specialised compare-and-jump)
            return True
        return False

    # -- append -------------------------------------------------------------------------

    def append(self, buf, batches):
        """Write ``buf`` (whole batches) and index it; returns the segment's new size.

        ``batches`` lists ``(position_in_buf, size, last_offset, max_timestamp)`` per batch.
        """
        log = self.log
        physical = log._size  # (size_in_bytes() inline: once per append)
        if physical == 0 and batches:
            self.rolling_based_timestamp = batches[0][3]
        if self._bytes_since_last_index_entry + len(buf) > self.index_interval_bytes:
            # an entry may follow the write (at most one per batch): map the indexes and
            # back their pages first, so running out of descriptors fails the append before
            # anything is written
            self.offset_index.ensure_writable(len(batches))
            self.time_index.ensure_writable(len(batches))
        log.append(buf)
        if batches:
            # a reader at the tail (woken by this append) searches from here, not from the
            # batch before it (FileRecords.batch_at inline)
            first = batches[0][0]
            log.search_hint = (physical + first, _BASE_OFFSET.unpack_from(buf, first)[0],
                               batches[0][1])
        self._index_batches(physical, batches)
        return physical + len(buf)  # (what ``size`` reads now: the log's end offset metadata)

    def _index_batches(self, physical, batches):
        max_ts_and_offset = self._max_ts_and_offset  # (_max_ts() inline: once per append)
        max_ts, max_off = self._max_ts() if max_ts_and_offset is None else max_ts_and_offset
        since = self._bytes_since_last_index_entry
        interval = self.index_interval_bytes
        for pos, size, last_offset, batch_max_ts in batches:
            if batch_max_ts > max_ts:
                max_ts, max_off = batch_max_ts, last_offset
            if since > interval:
                self._indexes_have_room = False
                self.offset_index.append(last_offset, physical + pos)
                self.time_index.maybe_append(max_ts, max_off)
                since = 0
            since += size
        self._bytes_since_last_index_entry = since
        self._max_ts_and_offset = (max_ts, max_off)

    # -- read ---------------------------------------------------------------------------

    def translate_offset(self, offset, starting_position=0):
        """(position, size) of the batch holding ``offset`` (or the first after it), or None."""
        log = self.log
        hint_position, hint_base, hint_size = log.search_hint
        if hint_base == offset and hint_position >= starting_position:
            # the batch the last append (or search) found starts at ``offset``: what a reader
            # at the tail asks for, found without the offset index and, its size known, without
            # reading its header (a pread, the header's object and a descriptor-cache touch)
            return hint_position, hint_size
        _, position = self.offset_index.lookup(offset)
        if position < starting_position:  # (not max(): the builtin parses keywords)
            position = starting_position
        found = log.search_for_offset_from_position(offset, position)
        return None if found is None else (found[0], found[1].size_in_bytes)

    def read(self, start_offset, max_size, max_position=None, min_one_message=False):
        """FetchDataInfo from ``start_offset``, or None if no batch at/after it is here."""
        if max_size < 0:
            raise ValueError("invalid max size %d for log read from segment %s"
                             % (max_size, self.log.path))
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        position, batch_size = found
        metadata = LogOffsetMetadata(start_offset, self.base_offset, position)
        # (conditionals, not min()/max(): each builtin call parses keywords, ~1k instructions)
        adjusted = batch_size if min_one_message and batch_size > max_size else max_size
        if adjusted == 0 or max_position is None:
            return _new(FetchDataInfo, (metadata, self.log.slice(position, 0), False, None))
        fetch_size = max_position - position
        if fetch_size > adjusted:
            fetch_size = adjusted
        elif fetch_size < 0:
            fetch_size = 0
        return _new(FetchDataInfo, (metadata, self.log.slice(position, fetch_size),
                                    adjusted < batch_size, None))

    def read_next_offset(self):
        """The offset after the last batch (scans from the last index entry)."""
        _, position = self.offset_index.last_entry
        next_offset = self.base_offset
        for _, header in self.log.batches_from(position):
            next_offset = header.next_offset
        return next_offset

    def find_offset_by_timestamp(self, timestamp, starting_offset):
        """(timestamp, offset, leader_epoch) of the first record with ts >= ``timestamp`` whose
        offset >= ``starting_offset``, or None."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(ts_offset, starting_offset))
        found = self.log.search_for_timestamp(timestamp, position, starting_offset)
        if found is None:
            return None
        pos, header = found
        if header.timestamp_type == records.LOG_APPEND_TIME:
            offset = max(header.base_offset, starting_offset)
            return header.max_timestamp, offset, header.partition_leader_epoch
        buf = self.log.read(pos, header.size_in_bytes)
        _, recs = records.decode_batch(buf, 0)
        for rec in recs:
            if rec.timestamp >= timestamp and rec.offset >= starting_offset:
                return rec.timestamp, rec.offset, header.partition_leader_epoch
        return None

    # -- maintenance --------------------------------------------------------------------

    def recover(self, max_message_size=None, leader_epoch_cache=None):
        """Rebuild the indexes from the log, stop at the first invalid batch and truncate there.

        Returns the number of bytes truncated.
        """
        self._indexes_have_room = False
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()  # the log rebuilds it from the markers (it knows the producers)
        self._bytes_since_last_index_entry = 0
        self._max_ts_and_offset = (-1, self.base_offset)
        valid = 0
        end = self.log.size_in_bytes()
        batches = []
        while valid < end:
            try:
                header = self.log.read_header(valid, end)
                if header is None:
                    break
                raw = self.log.read(valid, header.size_in_bytes)
                records.ensure_valid(raw, 0, header)  # size + CRC, as Kafka; compacted batches pass
            except records.CorruptRecordError:
                break
            except records.InvalidRecordError:
                break
            if header.base_offset < self.base_offset or not self.can_convert_to_relative_offset(
                    header.last_offset):
                break
            if leader_epoch_cache is not None and header.partition_leader_epoch >= 0:
                leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
            batches.append((valid, header.size_in_bytes, header.last_offset,
                            header.max_timestamp))
            valid += header.size_in_bytes
            if len(batches) >= 1024:
                self._index_batches(0, batches)
                batches = []
        self._index_batches(0, batches)
        truncated = end - valid
        if truncated:
            self.log.truncate_to(valid)
        max_ts, max_off = self._max_ts()
        if max_ts >= 0:
            self.time_index.maybe_append(max_ts, max_off, skip_full_check=True)
        return truncated

    def sanity_check(self):
        """Raise if the indexes look corrupt (Kafka checks on load; recovery fixes)."""
        for path in (self.offset_index.path, self.time_index.path):
            if not os.path.exists(path):
                if self.size == 0:
                    return  # an empty segment's indexes are created when first written
                raise FileNotFoundError(path)
        self.offset_index.sanity_check(self.size)
        self.time_index.sanity_check()
        self.txn_index.sanity_check()

    def truncate_to(self, offset):
        """Remove everything from the batch holding ``offset`` on; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, _ = found
        self._indexes_have_room = False
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.offset_index.reset_size_to_max()
        self.time_index.reset_size_to_max()
        removed = self.log.truncate_to(position)
        if self.log.size_in_bytes() == 0:
            self.rolling_based_timestamp = None
        _, last_pos = self.offset_index.last_entry
        self._bytes_since_last_index_entry = max(0, position - last_pos)
        self._max_ts_and_offset = None
        if self.time_index.entries == 0 and position > 0:
            # Rebuild the max timestamp from the remaining headers (small: below one interval).
            max_ts, max_off = -1, self.base_offset
            for _, header in self.log.batches_from(0):
                if header.max_timestamp > max_ts:
                    max_ts, max_off = header.max_timestamp, header.last_offset
            self._max_ts_and_offset = (max_ts, max_off)
        return removed

    def on_become_inactive_segment(self):
        self._indexes_have_room = False
        ts, off = self._max_ts()
        if ts >= 0:
            self.time_index.maybe_append(ts, off, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.log.trim()

    def flush(self):
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self):
        self._indexes_have_room = False
        if self._max_ts_and_offset is not None and self._max_ts_and_offset[0] >= 0:
            try:
                self.time_index.maybe_append(*self._max_ts_and_offset, skip_full_check=True)
            except Exception:
                pass
        self.offset_index.close()
        self.time_index.close()
        self.log.close()

    def close_handlers(self):
        self.offset_index.close_handler()
        self.time_index.close_handler()
        self.log.close()

    def change_file_suffixes(self, old_suffix, new_suffix):
        for obj in (self.log, self.offset_index, self.time_index, self.txn_index):
            path = obj.path
            if old_suffix and path.endswith(old_suffix):
                path = path[:-len(old_suffix)]
            if os.path.exists(obj.path):
                obj.rename_to(path + new_suffix)
            else:
                obj.path = path + new_suffix

    def delete_if_exists(self):
        self.close_handlers()
        for path in (self.log.path, self.offset_index.path, self.time_index.path,
                     self.txn_index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def __repr__(self):
        return "LogSegment(base_offset=%d, size=%d)" % (self.base_offset, self.size)
