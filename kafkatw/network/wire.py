"""The seam between framing and the generated codec: header/body decode, response encode.

Owns the use of ``kafkatw.protocol.messages`` by the network layer (imported lazily so
this package imports before the codec exists); tests substitute a fake with the same
four methods.  The UNSUPPORTED_VERSION ApiVersions answer is built here with ``struct``.
"""

import struct

from kafkatw.protocol.codec import DecodeFailure as _DecodeFailure
from kafkatw.protocol.codec import decode_error as _decode_error

API_VERSIONS_KEY = 18
UNSUPPORTED_VERSION = 35

#: api_key, api_version, correlation_id: the first 8 bytes of every request header
_HDR = HEADER_PREFIX = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")
_SIZE_CORRELATION = struct.Struct(">ii")
#: header v1: the same and an empty tagged-field count, packed in one (no concatenation)
_SIZE_CORRELATION_NO_TAGS = struct.Struct(">iiB")


def peek_header(frame):
    """``(api_key, api_version, correlation_id)``: the first 8 bytes of every request header."""
    return _HDR.unpack_from(frame, 0)


def peek_client_id(frame):
    """Best-effort client id of header v1+ (a non-compact nullable string at offset 8)."""
    if len(frame) < 10:
        return None
    (n,) = struct.unpack_from(">h", frame, 8)
    if n < 0 or 10 + n > len(frame):
        return None
    return bytes(frame[10:10 + n]).decode("utf-8", "replace")


def unsupported_api_versions_response(correlation_id, api_versions_range):
    """Size-prefixed ApiVersions v0 response (header v0) with UNSUPPORTED_VERSION.

    As Kafka's ``ApiVersionsRequest.getErrorResponse``: the body lists the supported
    range of ApiVersions itself so the client can retry with a version it shares.
    """
    lo, hi = api_versions_range
    body = struct.pack(">ihihhh", correlation_id, UNSUPPORTED_VERSION, 1, API_VERSIONS_KEY, lo, hi)
    return _SIZE.pack(len(body)) + body


class _ByApiKey(dict):
    """api key -> message class, copied from the codec's lazy registry on a key's first use, so
    each later lookup is a plain dict hit and an API never asked for is never loaded."""

    __slots__ = ("_registry",)

    def __init__(self, registry):
        super().__init__()
        self._registry = registry

    def __missing__(self, api_key):
        cls = self[api_key] = self._registry[api_key]
        return cls


class _ApiNames(dict):
    """api key -> API name; an unknown key reads as ``Unknown<key>`` (not stored)."""

    __slots__ = ()

    def __missing__(self, api_key):
        return "Unknown%d" % api_key


class MessagesWire:
    """The production seam over ``kafkatw.protocol.messages``."""

    def __init__(self):
        from kafkatw.protocol import messages

        self.messages = messages
        # (read by subscript where every request completes: no api_name() call per request)
        self.api_names = _ApiNames(messages.API_NAMES)
        self._requests = _ByApiKey(messages.REQUESTS)
        self._request_header = messages.RequestHeader
        self._request_header_version = messages.request_header_version
        self._response_header_version = messages.response_header_version
        # api_key -> {api_version: (header reader, header version, body reader, body class)}:
        # the generated readers themselves, no per-request version or buffer checks (nested
        # dicts: a (key, version) tuple made and hashed per look-up costs ~0.5k instructions)
        self._readers = {}
        self._response_header_versions = {}  # api_key -> {api_version: header version}

    def api_name(self, api_key):
        return self.api_names[api_key]

    def decode_request(self, frame, api_key, api_version):
        """``(header, body)`` of a whole frame; raises on a malformed one."""
        try:
            read_header, hv, read_body, cls = self._readers[api_key][api_version]
        except KeyError:
            read_header, hv, read_body, cls = self._readers_of(api_key, api_version)
        view = memoryview(frame)
        try:
            header, pos = read_header(view, 0, hv)
        except _DecodeFailure as e:
            raise _decode_error(self._request_header.__qualname__, hv, e) from None
        # Like Kafka, bytes after the body are ignored: librdkafka 2.x sends Metadata v12
        # with 3 of them, and Apache Kafka's parser never checks for leftovers.
        try:
            body, _ = read_body(view, pos, api_version)
        except _DecodeFailure as e:
            raise _decode_error(cls.__qualname__, api_version, e) from None
        return header, body

    def _readers_of(self, api_key, api_version):
        cls = self._requests[api_key]
        hv = self._request_header_version(api_key, api_version)
        readers = (self._request_header.reader(hv), hv, cls.reader(api_version), cls)
        self._readers.setdefault(api_key, {})[api_version] = readers
        return readers

    def _response_header_version_of(self, api_key, api_version):
        hv = self._response_header_version(api_key, api_version)
        self._response_header_versions.setdefault(api_key, {})[api_version] = hv
        return hv

    def encode_response(self, request, body):
        """Size prefix, response header and body as a list of parts.

        The header is packed here with the size: ResponseHeader v0 is the correlation id, v1
        adds an empty tagged-field count (a broker never sends tagged header fields), the
        bytes the generated ``ResponseHeader`` writes, ~1.5 us cheaper per response."""
        parts = body.encode(request.api_version)
        size = 4
        for p in parts:
            size += len(p)
        try:
            hv = self._response_header_versions[request.api_key][request.api_version]
        except KeyError:
            hv = self._response_header_version_of(request.api_key, request.api_version)
        if hv:
            head = _SIZE_CORRELATION_NO_TAGS.pack(size + 1, request.correlation_id, 0)
        else:
            head = _SIZE_CORRELATION.pack(size, request.correlation_id)
        return [head, *parts]
