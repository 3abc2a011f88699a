"""A struct given as its encoding at one version (a cached Metadata topic of thousands of
partitions is encoded once, not per request). It owns only the substitution in the generated
writers; what to cache and when to drop it is the caller's.
"""


class Encoded:
    """Stands where ``struct`` would in a message: written as ``data`` at ``version`` (the
    generated writers call ``_w0``/``_w1`` of each element), as ``struct`` at any other;
    attribute reads go to ``struct``, so in-process readers see the struct."""

    __slots__ = ("struct", "version", "data")

    def __init__(self, struct, version):
        self.struct = struct
        self.version = version
        buf = bytearray()
        parts = []
        fv = struct.FLEXIBLE_VERSIONS_START
        if fv is not None and version >= fv:
            struct._w1(buf, parts, version)
        else:
            struct._w0(buf, parts, version)
        if parts:
            raise ValueError("%s has parts of its own (records): not cacheable as bytes"
                             % (type(struct).__qualname__,))
        self.data = bytes(buf)

    def _w0(self, buf, parts, v):
        if v == self.version:
            buf += self.data
        else:
            self.struct._w0(buf, parts, v)

    def _w1(self, buf, parts, v):
        if v == self.version:
            buf += self.data
        else:
            self.struct._w1(buf, parts, v)

    def __getattr__(self, name):
        return getattr(self.struct, name)

    def __eq__(self, other):
        return self.struct == (other.struct if isinstance(other, Encoded) else other)

    def __ne__(self, other):
        return not self == other

    __hash__ = None

    def __repr__(self):
        return "Encoded(%r, version=%d)" % (self.struct, self.version)
