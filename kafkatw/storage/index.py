"""Sparse per-segment indexes: OffsetIndex (relative offset -> file position) and TimeIndex
(timestamp -> relative offset), fixed-width big-endian entries in a preallocated, memory-mapped
file, binary-searched, trimmed to their valid size when the segment stops being active.
They never read the log file; translating an index hit to an exact batch is the segment's job.
"""

import mmap
import os
import struct

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class IndexFullError(Exception):
    pass


class CorruptIndexError(Exception):
    pass


class _Index:
    """Common machinery: lazy open, mmap, resize, trim, truncate, binary search."""

    ENTRY = None  # struct.Struct

    def __init__(self, path, base_offset, max_index_size):
        self.path = path
        self.base_offset = base_offset
        size = self.ENTRY.size
        self._max_size = max(size, max_index_size - max_index_size % size)
        self._fd = None
        self._mmap = None
        self._length = 0  # bytes of the mapping
        self._entries = 0
        # Bytes from the start backed by filesystem blocks. The file is preallocated sparse;
        # a store through the mapping into a hole on a full filesystem is SIGBUS (the process
        # dies), so a page is written with pwrite (ENOSPC is then an OSError) before an entry
        # goes into it.
        self._allocated = 0

    # -- lifecycle ----------------------------------------------------------------------

    def _ensure_open(self):
        if self._fd is None:
            self._open()

    def _open(self):
        size = self.ENTRY.size
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            file_size = os.fstat(fd).st_size
            existing = file_size - file_size % size
            length = max(existing, self._max_size)
            if file_size != length:
                os.ftruncate(fd, length)
            if existing == 0 and length:
                # Allocate the first page now: a first write through the mapping to a sparse
                # page faults into the filesystem's block allocation, measured at 3-10 ms,
                # which would stall the produce that writes the segment's first index entry.
                os.pwrite(fd, bytes(min(length, mmap.PAGESIZE)), 0)
                self._allocated = min(length, mmap.PAGESIZE)
            else:
                self._allocated = -(-existing // mmap.PAGESIZE) * mmap.PAGESIZE
            self._fd = fd
            self._map(length)
            self._entries = self._count_entries(existing // size)
        except Exception:
            os.close(fd)
            self._fd = None
            raise

    def _map(self, length):
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        self._length = length
        if length:
            self._mmap = mmap.mmap(self._fd, length)

    def _count_entries(self, n):
        """Entries are written in order and the preallocated tail is zeros: find the first empty
        slot by binary search (an unclean stop leaves the file at full size)."""
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if self._is_empty(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _is_empty(self, slot):
        size = self.ENTRY.size
        return self._mmap[slot * size:(slot + 1) * size] == b"\0" * size

    @property
    def entries(self):
        self._ensure_open()
        return self._entries

    @property
    def max_entries(self):
        return self._max_size // self.ENTRY.size

    @property
    def is_full(self):
        # the active segment asks on every append: entries and max_entries inline
        if self._fd is None:
            self._open()
        return self._entries >= self._max_size // self.ENTRY.size

    @property
    def size_in_bytes(self):
        return self.entries * self.ENTRY.size

    def resize(self, new_size):
        """Change the file (and mapping) length; entries beyond it are dropped."""
        self._ensure_open()
        size = self.ENTRY.size
        new_size = max(0, new_size - new_size % size)
        if self._mmap is not None:
            self._mmap.flush()
            self._mmap.close()
            self._mmap = None
        os.ftruncate(self._fd, new_size)
        self._allocated = min(self._allocated, new_size)
        self._map(new_size)
        self._entries = min(self._entries, new_size // size)

    def trim_to_valid_size(self):
        self.resize(self.entries * self.ENTRY.size)

    def reset_size_to_max(self):
        self._ensure_open()
        if self._length != self._max_size:
            self.resize(self._max_size)

    def flush(self):
        if self._mmap is not None:
            self._mmap.flush()

    def close(self):
        if self._fd is not None:
            self.trim_to_valid_size()
            if self._mmap is not None:
                self._mmap.close()
                self._mmap = None
            os.close(self._fd)
            self._fd = None

    def close_handler(self):
        """Release without trimming (for a directory that went offline)."""
        if self._fd is not None:
            try:
                if self._mmap is not None:
                    self._mmap.close()
                os.close(self._fd)
            except (OSError, ValueError):
                pass
            self._mmap = None
            self._fd = None

    def delete_if_exists(self):
        self.close_handler()
        try:
            os.unlink(self.path)
            return True
        except FileNotFoundError:
            return False

    def rename_to(self, path):
        os.rename(self.path, path)
        self.path = path

    def reset(self):
        """Drop every entry (before a rebuild)."""
        self.truncate_to_entries(0)
        self.reset_size_to_max()

    # -- entries ------------------------------------------------------------------------

    def _entry(self, slot):
        return self.ENTRY.unpack_from(self._mmap, slot * self.ENTRY.size)

    def _append_raw(self, *fields):
        if self._entries >= self.max_entries:
            raise IndexFullError("index %s is full (%d entries)" % (self.path, self._entries))
        if self._length < self._max_size:
            self.resize(self._max_size)
        pos = self._entries * self.ENTRY.size
        end = pos + self.ENTRY.size
        if end > self._allocated:
            # Nothing was stored beyond _allocated yet: zeros there lose no entry.
            upto = min(self._length, -(-end // mmap.PAGESIZE) * mmap.PAGESIZE)
            os.pwrite(self._fd, bytes(upto - self._allocated), self._allocated)
            self._allocated = upto
        self.ENTRY.pack_into(self._mmap, pos, *fields)
        self._entries += 1

    def truncate_to_entries(self, n):
        self._ensure_open()
        if n < self._entries:
            size = self.ENTRY.size
            self._mmap[n * size:self._entries * size] = b"\0" * ((self._entries - n) * size)
            self._entries = n

    def _largest_lower_bound(self, key, key_index):
        """Slot of the largest entry whose field ``key_index`` is <= key, or -1."""
        self._ensure_open()
        lo, hi = 0, self._entries - 1
        if hi < 0 or self._entry(0)[key_index] > key:
            return -1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._entry(mid)[key_index] <= key:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _smallest_upper_bound(self, key, key_index):
        self._ensure_open()
        lo, hi = 0, self._entries - 1
        if hi < 0 or self._entry(hi)[key_index] < key:
            return -1
        while lo < hi:
            mid = (lo + hi) // 2
            if self._entry(mid)[key_index] >= key:
                hi = mid
            else:
                lo = mid + 1
        return lo


class OffsetIndex(_Index):
    """Entries of (offset - base_offset: int32, position: int32)."""

    ENTRY = _OFFSET_ENTRY

    def entry(self, slot):
        self._ensure_open()
        rel, pos = self._entry(slot)
        return self.base_offset + rel, pos

    @property
    def last_entry(self):
        if self.entries == 0:
            return self.base_offset, 0
        return self.entry(self._entries - 1)

    @property
    def last_offset(self):
        return self.last_entry[0]

    def lookup(self, target_offset):
        """(offset, position) of the largest entry <= target_offset, or (base_offset, 0)."""
        slot = self._largest_lower_bound(target_offset - self.base_offset, 0)
        if slot < 0:
            return self.base_offset, 0
        return self.entry(slot)

    def append(self, offset, position):
        self._ensure_open()
        if self._entries and offset <= self.last_offset:
            raise CorruptIndexError(
                "offset %d is not larger than the last offset %d in %s"
                % (offset, self.last_offset, self.path))
        self._append_raw(offset - self.base_offset, position)

    def truncate_to(self, offset):
        """Remove entries with offset >= ``offset``."""
        slot = self._largest_lower_bound(offset - self.base_offset, 0)
        if slot < 0:
            keep = 0
        elif self.entry(slot)[0] == offset:
            keep = slot
        else:
            keep = slot + 1
        self.truncate_to_entries(keep)

    def sanity_check(self, log_size):
        self._ensure_open()
        prev = -1
        if self._entries:
            # Check the ends; a full scan is what recovery is for.
            for slot in (0, self._entries - 1):
                offset, pos = self.entry(slot)
                if offset < self.base_offset or pos < 0 or pos > log_size:
                    raise CorruptIndexError("corrupt offset index %s entry %d: (%d, %d)"
                                            % (self.path, slot, offset, pos))
                if offset < prev:
                    raise CorruptIndexError("offset index %s is not sorted" % (self.path,))
                prev = offset


class TimeIndex(_Index):
    """Entries of (timestamp: int64, offset - base_offset: int32)."""

    ENTRY = _TIME_ENTRY

    def entry(self, slot):
        self._ensure_open()
        ts, rel = self._entry(slot)
        return ts, self.base_offset + rel

    @property
    def last_entry(self):
        if self.entries == 0:
            return -1, self.base_offset
        return self.entry(self._entries - 1)

    @property
    def is_full(self):
        # Kafka keeps one slot for the final entry written when the segment rolls.
        if self._fd is None:
            self._open()
        return self._entries >= self._max_size // self.ENTRY.size - 1

    def lookup(self, target_timestamp):
        """(timestamp, offset) of the largest entry with timestamp <= target, or (-1, base)."""
        slot = self._largest_lower_bound(target_timestamp, 0)
        if slot < 0:
            return -1, self.base_offset
        return self.entry(slot)

    def maybe_append(self, timestamp, offset, skip_full_check=False):
        self._ensure_open()
        if not skip_full_check and self.is_full:
            raise IndexFullError("time index %s is full" % (self.path,))
        last_ts, last_off = self.last_entry
        if self._entries and offset < last_off:
            raise CorruptIndexError("time index offset %d below last %d" % (offset, last_off))
        if self._entries == 0 or timestamp > last_ts:
            self._append_raw(timestamp, offset - self.base_offset)

    def truncate_to(self, offset):
        self._ensure_open()
        keep = self._entries
        while keep > 0 and self.entry(keep - 1)[1] >= offset:
            keep -= 1
        self.truncate_to_entries(keep)

    def sanity_check(self, log_size=None):
        self._ensure_open()
        if self._entries:
            ts, offset = self.last_entry
            if offset < self.base_offset:
                raise CorruptIndexError("corrupt time index %s: last offset %d < base %d"
                                        % (self.path, offset, self.base_offset))
