"""Response parts: the pieces a response is made of on its way to the socket.

An encoded response is a list of ``bytes``-like chunks and :class:`FileRegion`s.
The codec never reads a region; the transport decides how it reaches the wire
(``os.sendfile`` over plaintext, 32 KiB chunks through TLS).
"""

import attr


@attr.s(slots=True, frozen=True)
class FileRegion:
    """``count`` bytes of an open file starting at ``position``.

    ``file`` is an object with ``fileno()`` (the segment's open file); holding a
    reference keeps the descriptor alive even if retention unlinks the segment.
    """

    file = attr.ib()
    position = attr.ib()
    count = attr.ib()

    def __len__(self):
        return self.count

    def read(self):
        """Read the region's bytes (tests and the rare fallback only)."""
        import os

        return os.pread(self.file.fileno(), self.count, self.position)


def parts_size(parts):
    """Total length in bytes of a list of parts."""
    return sum(len(p) for p in parts)


def join_parts(parts):
    """Materialise parts into one ``bytes`` (tests, oracles; never the hot path)."""
    out = bytearray()
    for p in parts:
        out += p.read() if isinstance(p, FileRegion) else p
    return bytes(out)
