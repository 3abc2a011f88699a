"""FileRecords: one segment's .log file. Appends a buffer with one positional write, hands out
slices as FileRegions (no bytes read), and scans batch headers (61 bytes each) to find offsets
and timestamps. It knows the v2 batch layout only through kafkatw.protocol.records.

An offset search starts from the last batch it found when that batch is at or below the
target: a caught-up consumer asks for the offset after the one it read last, and the sparse
index (one entry per ``index.interval.bytes``) would otherwise make every such read scan all
the small batches since the last index entry, one ``pread`` each.

The descriptor is opened on first use and kept in the process's descriptor cache
(``descriptors.cache``), which may drop it when others are used more recently; a slice's
FileRegion takes a descriptor only when the transport sends it, and holds it until sent.
"""

import errno
import os

from kafkatw.protocol import records
from kafkatw.protocol.parts import FileRegion, LazyFile

from . import descriptors

_HDR = records.BATCH_HEADER_SIZE


class _RegionFile(LazyFile):
    """A slice's file: the descriptor is taken from the cache when the transport starts
    sending the slice and held (open even if the cache drops it) until it is released."""

    __slots__ = ("_records", "_desc")

    def __init__(self, file_records):
        self._records = file_records
        self._desc = None

    def fileno(self):
        desc = self._desc
        if desc is None:
            try:
                desc = self._desc = self._records._descriptor()
            except ValueError:  # closed: its segment was deleted before the slice was sent
                raise FileNotFoundError(errno.ENOENT, "segment deleted", self._records.path)
        return desc.fd

    def release(self):
        self._desc = None

    @property
    def name(self):
        """The segment file's path (a transfer failure names the log dir by it)."""
        return self._records.path


class FileRecords:
    def __init__(self, path, preallocate_size=0, new=False):
        """``new``: the file does not exist yet (its directory was just made): created now."""
        self.path = path
        self._desc = None
        self._closed = False
        try:
            if new:
                raise FileNotFoundError(path)
            self._size = os.stat(path).st_size
        except FileNotFoundError:
            # Created now and closed: its descriptor is opened by the first append.
            os.close(descriptors.cache.open_retrying(
                lambda: os.open(path, os.O_RDWR | os.O_CREAT, 0o644)))
            self._size = 0
        #: (position, base offset, size) of the batch the last append or offset search found:
        #: a true fact about the file until it is truncated below that batch's end (the
        #: segment's translate_offset reads it too, and its append sets it)
        self.search_hint = (-1, 0, 0)

    def _descriptor(self):
        """The open descriptor (opened now if the cache dropped it); hold the returned object
        while using its ``fd``."""
        desc = self._desc
        cache = descriptors.cache
        if desc is None:
            if self._closed:
                raise ValueError("%s is closed" % (self.path,))
            desc = descriptors.Descriptor(cache.open_retrying(
                lambda: os.open(self.path, os.O_RDWR)))
            self._desc = desc
            cache.opened(self)
        else:
            cache.touch(self)
        return desc

    def _drop_handle(self):
        self._desc = None

    @property
    def is_open(self):
        """Whether a descriptor is held now (the cache may drop it at any time)."""
        return self._desc is not None

    def size_in_bytes(self):
        return self._size

    # -- write --------------------------------------------------------------------------

    def append(self, buf):
        """Write all of ``buf`` at the end (one pwrite unless the kernel writes short)."""
        total = len(buf)
        desc = self._desc  # (_descriptor() inline for the common case: once per append)
        if desc is None:
            desc = self._descriptor()
        else:
            descriptors.cache.touch(self)
        fd = desc.fd
        # ``buf`` itself (no memoryview made per append); a view of the rest after a short write
        written = n = os.pwrite(fd, buf, self._size) if total else 0
        while written < total:
            if n <= 0:
                raise OSError("short write to %s" % (self.path,))
            n = os.pwrite(fd, memoryview(buf)[written:], self._size + written)
            written += n
        self._size += total
        return total

    def flush(self):
        desc = self._descriptor()
        os.fsync(desc.fd)

    def truncate_to(self, size):
        """Cut the file to ``size`` bytes; returns the bytes removed."""
        if size > self._size or size < 0:
            raise ValueError("cannot truncate %s of %d bytes to %d" % (self.path, self._size, size))
        removed = self._size - size
        hint_position, _, hint_size = self.search_hint
        if hint_position + hint_size > size:
            self.search_hint = (-1, 0, 0)
        if removed or os.stat(self.path).st_size != size:
            os.truncate(self.path, size)
        self._size = size
        return removed

    def trim(self):
        self.truncate_to(self._size)

    def close(self):
        """Forget the descriptor (it closes once no FileRegion holds it); later use raises."""
        self._closed = True
        self._desc = None
        descriptors.cache.closed(self)

    def rename_to(self, path):
        os.rename(self.path, path)
        self.path = path

    # -- read ---------------------------------------------------------------------------

    def slice(self, position, size):
        """A FileRegion of up to ``size`` bytes from ``position`` (clamped to the file end)."""
        if position < 0 or position > self._size:
            raise ValueError("slice position %d outside [0, %d]" % (position, self._size))
        available = self._size - position  # (conditionals: min/max builtins parse keywords)
        if size < available:
            available = size if size > 0 else 0
        return FileRegion(_RegionFile(self), position, available)

    def read(self, position, size):
        desc = self._descriptor()
        return os.pread(desc.fd, size, position)

    def read_header(self, position, end=None):
        """The batch header at ``position``, or None if no complete batch starts there."""
        end = self._size if end is None else end
        if position + _HDR > end:
            return None
        desc = self._descriptor()
        raw = os.pread(desc.fd, _HDR, position)
        if len(raw) < _HDR:
            return None
        header = records.read_batch_header(raw)
        if position + header.size_in_bytes > end:
            return None
        return header

    def batches_from(self, position=0, end=None):
        """Yield ``(position, BatchHeader)`` for each complete batch from ``position``."""
        end = self._size if end is None else end
        while position < end:
            header = self.read_header(position, end)
            if header is None:
                return
            yield position, header
            position += header.size_in_bytes

    def search_for_offset_from_position(self, target_offset, start_position):
        """(position, BatchHeader) of the first batch whose last offset >= target, or None.

        Every batch before one whose base offset is <= target ends below target, so the scan
        may begin at the last found batch instead of ``start_position`` when that is later.
        """
        hint_position, hint_base, _ = self.search_hint
        if hint_position > start_position and hint_base <= target_offset:
            start_position = hint_position
        for position, header in self.batches_from(start_position):
            if header.last_offset >= target_offset:
                self.search_hint = (position, header.base_offset, header.size_in_bytes)
                return position, header
        return None

    def search_for_timestamp(self, target_ts, start_position, starting_offset):
        """(position, BatchHeader) of the first batch at/after ``start_position`` with
        max timestamp >= target_ts and last offset >= starting_offset, or None."""
        for position, header in self.batches_from(start_position):
            if header.max_timestamp >= target_ts and header.last_offset >= starting_offset:
                return position, header
        return None
