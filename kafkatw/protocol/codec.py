"""Hand-written wire primitives that the generated ``messages`` module calls.

Owns varints, compact lengths, tagged-field framing, records part emission and the
decode/encode errors. It knows nothing about individual messages (see ``messages``).
"""

import struct

from kafkatw.protocol.parts import FileRegion

# A records value at least this large is emitted as its own part instead of being
# copied into the surrounding chunk.
LARGE_PART = 4096

ZERO_UUID = bytes(16)


class ProtocolDecodeError(ValueError):
    """Malformed input; the message names message class, version and field path."""


class UnsupportedVersionError(ValueError):
    """A message or field cannot be written (or read) at the requested version."""


class DecodeFailure(Exception):
    """Internal: carries a failure up through nested structs, collecting the field path."""

    def __init__(self, message, path):
        Exception.__init__(self, message)
        self.message = message
        self.path = path


def fail(exc, field, index):
    """Wrap ``exc`` raised while reading ``field`` (element ``index`` if >= 0)."""
    name = field if index < 0 else "%s[%d]" % (field, index)
    if isinstance(exc, DecodeFailure):
        exc.path.append(name)
        return exc
    if isinstance(exc, (struct.error, IndexError)):
        return DecodeFailure("truncated input (%s)" % (exc,), [name])
    return DecodeFailure(str(exc), [name])


def fail_in(exc, *levels):
    """:func:`fail` for a reader that reads nested structs inline: ``levels`` are the
    ``(field, index)`` of each depth from the outermost, the field ``None`` from the first
    depth not being read; the path gets the innermost first, as nested readers append it."""
    depth = 0
    while depth + 1 < len(levels) // 2 and levels[2 * depth + 2] is not None:
        depth += 1
    exc = fail(exc, levels[2 * depth], levels[2 * depth + 1])
    while depth:
        depth -= 1
        field, index = levels[2 * depth], levels[2 * depth + 1]
        exc.path.append(field if index < 0 else "%s[%d]" % (field, index))
    return exc


def decode_error(cls_name, version, exc):
    """Turn a :class:`DecodeFailure` into the public :class:`ProtocolDecodeError`."""
    path = ".".join(reversed([p for p in exc.path if p]))
    return ProtocolDecodeError("%s v%d: %s: %s" % (cls_name, version, path or "<message>", exc.message))


def check_length(buf, pos, n, nullable):
    """Validate a length prefix read at ``pos`` (already advanced past it)."""
    if n < 0:
        if n == -1 and nullable:
            return
        raise DecodeFailure("invalid length %d" % n, [])
    remaining = len(buf) - pos
    if n > remaining:
        raise DecodeFailure("length %d exceeds remaining %d bytes" % (n, remaining), [])


# -- varints ---------------------------------------------------------------


def write_uvarint(n):
    """Unsigned varint encoding of ``n`` (0 <= n < 2**32 in Kafka; we allow 2**63)."""
    if n < 0:
        raise ValueError("unsigned varint of negative value %d" % n)
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_uvarint(buf, pos):
    """Read an unsigned varint at ``pos``; returns ``(value, new_pos)``."""
    b = buf[pos]
    pos += 1
    if b < 0x80:
        return b, pos
    value = b & 0x7F
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise DecodeFailure("varint too long", [])


def write_varint(n):
    """Zig-zag signed varint (record format, 64-bit)."""
    return write_uvarint((n << 1) ^ (n >> 63))


def read_varint(buf, pos):
    """Read a zig-zag signed varint; returns ``(value, new_pos)``."""
    u, pos = read_uvarint(buf, pos)
    return (u >> 1) ^ -(u & 1), pos


def read_compact_len(buf, pos, nullable):
    """Read a compact length (uvarint N+1); returns ``(n or -1, pos)`` after validation."""
    b = buf[pos]
    if b < 0x80:
        pos += 1
    else:
        b, pos = read_uvarint(buf, pos)
    n = b - 1
    check_length(buf, pos, n, nullable)
    return n, pos


# -- records ------------------------------------------------------------------


def records_size(value):
    """Length in bytes of a records value (bytes-like, FileRegion or a list of them)."""
    if isinstance(value, list):
        return sum(len(p) for p in value)
    return len(value)


def emit_records(buf, parts, value):
    """Append a records value: small bytes are copied, large ones and regions become parts."""
    if isinstance(value, list):
        for p in value:
            emit_records(buf, parts, p)
        return
    if isinstance(value, FileRegion) or len(value) >= LARGE_PART:
        if parts is None:
            # Inside a tagged field: no parts possible, copy.
            buf += value.read() if isinstance(value, FileRegion) else value
            return
        if buf:
            parts.append(bytes(buf))
            del buf[:]
        parts.append(value)
    else:
        buf += value


# -- tagged fields ---------------------------------------------------------------


def write_tags(buf, known, unknown):
    """Write the tagged-field section: ``known`` is a list of (tag, bytes) in tag order,
    ``unknown`` a dict tag -> raw bytes (re-emitted as read); merged in tag order."""
    if unknown:
        merged = dict(known)
        for tag, raw in unknown.items():
            if tag not in merged:
                merged[tag] = raw
        items = sorted(merged.items())
    else:
        items = known
    buf += write_uvarint(len(items))
    for tag, raw in items:
        buf += write_uvarint(tag)
        buf += write_uvarint(len(raw))
        buf += raw


def read_tag_header(buf, pos):
    """Read a tag and its size; returns ``(tag, size, pos)`` with size validated."""
    tag, pos = read_uvarint(buf, pos)
    size, pos = read_uvarint(buf, pos)
    remaining = len(buf) - pos
    if size > remaining:
        raise DecodeFailure("tagged field %d size %d exceeds remaining %d bytes" % (tag, size, remaining), [])
    return tag, size, pos


def to_memoryview(buf):
    """A byte-format memoryview over ``buf`` (no copy)."""
    if isinstance(buf, memoryview):
        if buf.format != "B" or buf.ndim != 1:
            return buf.cast("B")
        return buf
    return memoryview(buf)
