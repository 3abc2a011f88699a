"""Sparse per-segment indexes: OffsetIndex (relative offset -> file position) and TimeIndex
(timestamp -> relative offset), fixed-width big-endian entries in a memory-mapped file,
binary-searched, trimmed to their valid size when the segment stops being active.
They never read the log file; translating an index hit to an exact batch is the segment's job.

An index is mapped on first use and its own descriptor closed at once (the mapping is what
the process's descriptor cache counts: CPython's mmap keeps a duplicate descriptor); the cache
may drop the mapping when others are used more recently, and the next use maps it again.
What the file holds (entries, length) is remembered, so a dropped index is not read again.
"""

import mmap
import os
import struct

from . import descriptors

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class IndexFullError(Exception):
    pass


class CorruptIndexError(Exception):
    pass


class _Index:
    """Common machinery: lazy state and mapping, resize, trim, truncate, binary search."""

    ENTRY = None  # struct.Struct

    def __init__(self, path, base_offset, max_index_size):
        self.path = path
        self.base_offset = base_offset
        size = self._entry_size = self.ENTRY.size  # (an instance's own: read per append)
        self._max_size = max(size, max_index_size - max_index_size % size)
        self._known = False  # _entries, _length and _allocated describe the file
        self._mmap = None
        self._length = 0  # bytes of the file (and of the mapping when mapped)
        self._entries = 0
        self._dirty = False  # written since the last flush
        # Bytes from the start backed by filesystem blocks. The file is preallocated sparse;
        # a store through the mapping into a hole on a full filesystem is SIGBUS (the process
        # dies), so a page is written with pwrite (ENOSPC is then an OSError) before an entry
        # goes into it.
        self._allocated = 0

    # -- lifecycle ----------------------------------------------------------------------

    def _with_fd(self, fn, create=False):
        """``fn(fd)`` on a descriptor of the file opened for this call only."""
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        fd = descriptors.cache.open_retrying(lambda: os.open(self.path, flags, 0o644))
        try:
            return fn(fd)
        finally:
            os.close(fd)

    def _load_state(self):
        """Learn entries and length from the file (mapping it only after an unclean stop,
        when a preallocated tail of zeros must be searched)."""
        size = self.ENTRY.size
        try:
            file_size = os.stat(self.path).st_size
        except FileNotFoundError:
            # created empty on first use, as a segment with records has both index files
            self._with_fd(lambda fd: None, create=True)
            file_size = 0
        existing = file_size - file_size % size
        if existing != file_size:
            os.truncate(self.path, existing)
        self._length = existing
        self._allocated = -(-existing // mmap.PAGESIZE) * mmap.PAGESIZE
        self._entries = existing // size
        if existing:
            last = self._with_fd(lambda fd: os.pread(fd, size, existing - size))
            if last == b"\0" * size:
                self._known = True
                self._map()
                self._entries = self._count_entries(existing // size)
        self._known = True

    def _ensure_open(self):
        """The mapping (None while the file is empty); mapped now if the cache dropped it.
        Hold the returned object while using it."""
        if not self._known:
            self._load_state()
        m = self._mmap
        if m is None:
            if self._length:
                m = self._map()
        else:
            descriptors.cache.touch(self)
        return m

    def _map(self):
        m = self._with_fd(lambda fd: mmap.mmap(fd, self._length))
        self._mmap = m
        descriptors.cache.opened(self)
        return m

    def _drop_handle(self):
        # the cache's eviction: forget, never close (a user may hold it; CPython unmaps it and
        # closes its duplicate descriptor when the last reference goes)
        self._mmap = None

    def _unmap(self):
        m, self._mmap = self._mmap, None
        descriptors.cache.closed(self)
        if m is not None:
            try:
                m.close()
            except (BufferError, ValueError):
                pass

    @property
    def is_mapped(self):
        return self._mmap is not None

    def _count_entries(self, n):
        """Entries are written in order and the preallocated tail is zeros: find the first empty
        slot by binary search (an unclean stop leaves the file at full size)."""
        m = self._mmap
        size = self.ENTRY.size
        empty = b"\0" * size
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if m[mid * size:(mid + 1) * size] == empty:
                hi = mid
            else:
                lo = mid + 1
        return lo

    @property
    def entries(self):
        if not self._known:
            self._load_state()
        return self._entries

    @property
    def max_entries(self):
        return self._max_size // self.ENTRY.size

    def is_full(self):
        # the active segment asks on every append: entries and max_entries inline; a method,
        # not a property (3.11 specialises no property read: each was a generic look-up and a
        # frame made from C)
        if not self._known:
            self._load_state()
        return self._entries >= self._max_size // self._entry_size

    @property
    def size_in_bytes(self):
        return self.entries * self.ENTRY.size

    def resize(self, new_size):
        """Change the file (and mapping) length; entries beyond it are dropped."""
        if not self._known:
            self._load_state()
        size = self.ENTRY.size
        new_size = max(0, new_size - new_size % size)
        if new_size == self._length and os.path.exists(self.path):
            return
        self._unmap()
        if os.path.exists(self.path):
            os.truncate(self.path, new_size)
        else:
            self._with_fd(lambda fd: os.ftruncate(fd, new_size), create=True)
        self._allocated = min(self._allocated, new_size)
        self._length = new_size
        self._entries = min(self._entries, new_size // size)

    def trim_to_valid_size(self):
        self.resize(self.entries * self.ENTRY.size)

    def reset_size_to_max(self):
        if not self._known:
            self._load_state()
        if self._length != self._max_size:
            self.resize(self._max_size)

    def ensure_writable(self, entries=1):
        """Map now and back the pages the next ``entries`` entries go into, so the appends
        that follow need no descriptor after the log write they index (EMFILE surfaces
        before anything is written)."""
        if not self._known:
            self._load_state()
        if self._length < self._max_size:
            self.resize(self._max_size)
        self._allocate(min(self._entries + entries, self.max_entries) * self.ENTRY.size)
        self._ensure_open()

    def flush(self):
        m = self._mmap
        if m is not None:
            m.flush()
            self._dirty = False
        elif self._dirty:
            # written through a mapping dropped since: its pages are in the page cache
            self._with_fd(os.fsync)
            self._dirty = False

    def close(self):
        if self._known:
            self.trim_to_valid_size()
        self._unmap()

    def close_handler(self):
        """Release without trimming (for a directory that went offline)."""
        self._unmap()

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
        """Drop every entry (before a rebuild): the file is cut to nothing and preallocated
        again, never read (after an unclean stop it is a full-length file to be searched)."""
        self._unmap()
        self._with_fd(lambda fd: os.ftruncate(fd, 0), create=True)
        self._known = True
        self._length = self._entries = self._allocated = 0
        self._dirty = False
        self.reset_size_to_max()

    # -- entries ------------------------------------------------------------------------

    def _entry(self, slot):
        m = self._mmap
        if m is None:
            m = self._ensure_open()
        return self.ENTRY.unpack_from(m, slot * self.ENTRY.size)

    def _append_raw(self, *fields):
        if self._entries >= self.max_entries:
            raise IndexFullError("index %s is full (%d entries)" % (self.path, self._entries))
        if self._length < self._max_size:
            self.resize(self._max_size)
        pos = self._entries * self.ENTRY.size
        self._allocate(pos + self.ENTRY.size)
        m = self._ensure_open()
        self.ENTRY.pack_into(m, pos, *fields)
        self._entries += 1
        self._dirty = True

    def _allocate(self, end):
        """Back the first ``end`` bytes (whole pages, at most the file's length) with blocks
        before entries are stored there (see ``_allocated``). Nothing was stored beyond
        ``_allocated`` yet: zeros there lose no entry."""
        if end > self._allocated:
            upto = min(self._length, -(-end // mmap.PAGESIZE) * mmap.PAGESIZE)
            start = self._allocated
            self._with_fd(lambda fd: os.pwrite(fd, bytes(upto - start), start))
            self._allocated = upto

    def truncate_to_entries(self, n):
        m = self._ensure_open()
        if n < self._entries:
            size = self.ENTRY.size
            m[n * size:self._entries * size] = b"\0" * ((self._entries - n) * size)
            self._entries = n
            self._dirty = True

    def _largest_lower_bound(self, key, key_index):
        """Slot of the largest entry whose field ``key_index`` is <= key, or -1."""
        self._ensure_open()
        lo, hi = 0, self._entries - 1
        if hi < 0:
            return -1
        # a reader at the tail (a consumer or follower at the log end) asks for the last
        # entry: one probe instead of the whole binary search (entries are sorted, so the
        # search would land on the same slot)
        if self._entry(hi)[key_index] <= key:
            return hi
        if self._entry(0)[key_index] > key:
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
        # the search just mapped the index and touched it in the descriptor cache: the slot
        # is read without entry()'s second _ensure_open (every fetch read looks up here)
        rel, pos = self._entry(slot)
        return self.base_offset + rel, pos

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

    def is_full(self):
        # Kafka keeps one slot for the final entry written when the segment rolls.
        if not self._known:
            self._load_state()
        return self._entries >= self._max_size // self._entry_size - 1

    def lookup(self, target_timestamp):
        """(timestamp, offset) of the largest entry with timestamp <= target, or (-1, base)."""
        slot = self._largest_lower_bound(target_timestamp, 0)
        if slot < 0:
            return -1, self.base_offset
        return self.entry(slot)

    def maybe_append(self, timestamp, offset, skip_full_check=False):
        self._ensure_open()
        if not skip_full_check and self.is_full():
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
