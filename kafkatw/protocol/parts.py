"""Response parts: the pieces a response is made of on its way to the socket.

An encoded response is a list of ``bytes``-like chunks and :class:`FileRegion`s.
The codec never reads a region; the transport decides how it reaches the wire
(``os.sendfile`` over plaintext, chunks read and encrypted through TLS).
"""

import attr


@attr.s(slots=True, init=False, hash=True)
class FileRegion:
    """``count`` bytes of an open file starting at ``position``.

    ``file`` is an object with ``fileno()``: an open file, or a :class:`LazyFile` whose
    descriptor is opened when the region's turn to be sent comes.

    Not changed once made; not frozen, and its own ``__init__``: every fetch read makes one,
    and a frozen attrs ``__init__`` sets each field through ``object.__setattr__``.
    """

    file = attr.ib()
    position = attr.ib()
    count = attr.ib()

    def __init__(self, file, position, count):
        self.file = file
        self.position = position
        self.count = count

    def __len__(self):
        return self.count

    def read(self):
        """Read the region's bytes (tests and the rare fallback only)."""
        import os

        return os.pread(self.file.fileno(), self.count, self.position)


class LazyFile:
    """The file of a FileRegion whose descriptor is opened by the first ``fileno()`` and kept
    until ``release()``: storage keeps a bounded number of descriptors open, so a response
    naming many segments must not hold them all at once. A transport calls
    :func:`region_done` once it has sent (or given up on) a region."""

    __slots__ = ()

    def fileno(self):
        raise NotImplementedError

    def release(self):
        pass


def region_done(region):
    """The transport is done with ``region``: a lazy file may close its descriptor."""
    f = region.file
    if isinstance(f, LazyFile):
        f.release()


def parts_size(parts):
    """Total length in bytes of a list of parts."""
    return sum(len(p) for p in parts)


def join_parts(parts):
    """Materialise parts into one ``bytes`` (tests, oracles; never the hot path)."""
    out = bytearray()
    for p in parts:
        out += p.read() if isinstance(p, FileRegion) else p
    return bytes(out)
