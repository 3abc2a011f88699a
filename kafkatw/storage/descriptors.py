"""The process's budget of open segment and index descriptors: an LRU of the handles storage
keeps open (a segment's .log descriptor, an index's mapping), so the number of partitions is not
bounded by ``ulimit -n``. It owns the limit and the eviction order; what a handle is and when one
is opened belong to FileRecords and the indexes.

An evicted handle is only dropped, never closed under its user: the descriptor (or the
mapping, whose CPython object holds a duplicate of its descriptor) closes when the last
reference goes, so a FileRegion being sent by ``sendfile`` keeps its descriptor open until the
response has left. Storage touches handles on the reactor and in the thread pool (creation,
flush, the cleaner), hence the lock.
"""

import errno
import os
import resource
import threading
from collections import OrderedDict

#: errno values that say the process or the machine ran out of something, not that the disk
#: failed: the operation fails, the log dir stays online.
RESOURCE_ERRNOS = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS))

#: the smallest cache, whatever the limit says (a test broker under ``ulimit -n 64``)
MIN_CAPACITY = 16


def is_resource_error(exc):
    """True for an OSError that is an exhausted resource (descriptors, memory, mappings)."""
    return isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS


def capacity_for_limit(soft_limit):
    """Two fifths of the descriptor limit for storage, the rest for sockets and everything
    else (under 20,000: 8,000 and 12,000, room for 10,000 connections; ``RLIM_INFINITY``: as
    if 1,048,576)."""
    if soft_limit == resource.RLIM_INFINITY or soft_limit <= 0:
        soft_limit = 1 << 20
    return max(MIN_CAPACITY, soft_limit * 2 // 5)


def raise_open_file_limit():
    """Raise the soft RLIMIT_NOFILE to the hard limit; ``(soft before, soft now, hard)``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            return soft, soft, hard
    return soft, hard, hard


class Descriptor:
    """An open descriptor closed when its last reference goes (``fileno()`` for FileRegion)."""

    __slots__ = ("fd",)

    def __init__(self, fd):
        self.fd = fd

    def fileno(self):
        return self.fd

    def __del__(self, _close=os.close):  # os may be gone when the interpreter exits
        try:
            _close(self.fd)
        except OSError:
            pass


class DescriptorCache:
    """At most ``capacity`` handles open; the least recently used is dropped first.

    An owner is any object with ``_drop_handle()`` (called under the cache's lock: it must
    only forget its handle). Owners register with :meth:`opened` after opening, say
    :meth:`touch` on each use and :meth:`closed` when they close themselves.
    """

    def __init__(self, capacity):
        self.capacity = max(1, capacity)
        self._lock = threading.Lock()
        self._open = OrderedDict()
        #: handles dropped to stay under capacity (since start)
        self.evictions = 0

    def __len__(self):
        return len(self._open)

    def configure(self, capacity):
        with self._lock:
            self.capacity = max(1, capacity)
            self._shrink(self.capacity)

    def touch(self, owner):
        # the common case without the lock: ``move_to_end`` of a present owner is one C call
        # (atomic under the GIL, and owners hash by identity, so no Python code runs in it);
        # the lock guards the compound insert-and-shrink
        try:
            self._open.move_to_end(owner)
            return
        except KeyError:
            pass
        with self._lock:
            try:
                self._open.move_to_end(owner)
            except KeyError:
                self._open[owner] = None
                self._shrink(self.capacity)

    def opened(self, owner):
        with self._lock:
            self._open[owner] = None
            self._open.move_to_end(owner)
            self._shrink(self.capacity)

    def closed(self, owner):
        with self._lock:
            self._open.pop(owner, None)

    def release(self, count):
        """Drop up to ``count`` least recently used handles (an open failed with EMFILE:
        make room and try once more); the number dropped."""
        with self._lock:
            before = len(self._open)
            self._shrink(max(0, before - count))
            return before - len(self._open)

    def _shrink(self, size):
        while len(self._open) > size:
            owner, _ = self._open.popitem(last=False)
            self.evictions += 1
            owner._drop_handle()

    def open_retrying(self, opener):
        """``opener()``; after EMFILE/ENFILE, drop an eighth of the cache (at least one) and
        call it once more, so sockets and storage share the limit."""
        try:
            return opener()
        except OSError as e:
            if e.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            if not self.release(max(1, len(self._open) // 8)):
                raise
        return opener()


#: the one cache of this process (the descriptor limit is per process); the service sizes it
#: from RLIMIT_NOFILE at start, tests may replace it with :func:`use_cache`
cache = DescriptorCache(capacity_for_limit(resource.getrlimit(resource.RLIMIT_NOFILE)[0]))


def use_cache(new_cache):
    """Make ``new_cache`` the process's cache (tests); returns the previous one."""
    global cache
    old, cache = cache, new_cache
    return old
