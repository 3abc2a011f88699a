"""The message browser: records of one partition from an offset or a timestamp, bounded in
bytes and count, with keys, values and headers shown as JSON, UTF-8 text or hex.

Owns turning a browse into a ListOffsets (for a timestamp) and a sessionless Fetch made in
process, so READ on the topic is authorized as a consumer's fetch is; the fetched records are
read from their file regions and decoded in the broker's thread pool, never on the reactor.
"""

import json

from twisted.internet import defer, threads

from kafkatw.console.client import describe_error
from kafkatw.console.views import EARLIEST, LATEST, list_offsets
from kafkatw.protocol import messages as m
from kafkatw.protocol.records import CorruptRecordError, decode_batch, iter_batch_headers

FETCH_VERSION = 12  # topics by name
MAX_BYTES = 1024 * 1024  # the most a browse reads
DEFAULT_BYTES = 256 * 1024
MAX_RECORDS = 500
DEFAULT_RECORDS = 50


class BrowseError(ValueError):
    """A browse that cannot be made as asked (one line for the page)."""


def render_bytes(data):
    """``{"format": "json"|"text"|"hex"|"null", "text": ...}`` of a key, value or header value."""
    if data is None:
        return {"format": "null", "text": None, "size": 0}
    data = bytes(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {"format": "hex", "text": data.hex(" "), "size": len(data)}
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return {"format": "json", "text": json.dumps(json.loads(stripped), indent=2, ensure_ascii=False),
                    "size": len(data)}
        except ValueError:
            pass
    if any(ord(c) < 32 and c not in "\t\r\n" for c in text):
        return {"format": "hex", "text": data.hex(" "), "size": len(data)}
    return {"format": "text", "text": text, "size": len(data)}


def _text(key):
    return bytes(key).decode("utf-8", "replace") if isinstance(key, (bytes, bytearray, memoryview)) else key


def decode_records(records_bytes, from_offset, limit):
    """``[record dict]`` of the v2 batches in ``records_bytes`` at offsets >= ``from_offset``,
    at most ``limit``; control batches (transaction markers) are left out. The thread pool's work."""
    out = []
    for pos, header in iter_batch_headers(records_bytes, allow_partial_tail=True):
        if header.is_control:
            continue
        try:
            _, records = decode_batch(records_bytes, pos, max_size=MAX_BYTES * 8)
        except CorruptRecordError as e:
            out.append({"error": "batch at offset %d: %s" % (header.base_offset, e)})
            break
        for r in records:
            if r.offset < from_offset:
                continue
            out.append({"offset": r.offset, "timestamp": r.timestamp, "key": render_bytes(r.key),
                        "value": render_bytes(r.value),
                        "headers": [{"key": _text(k), "value": render_bytes(v)} for k, v in r.headers]})
            if len(out) >= limit:
                return out
    return out


def _read_parts(body, version):
    """The fetch response's bytes (its file regions read) decoded again as objects."""
    return m.FetchResponse.decode(body.encode_bytes(version), version)


def parse_request(args):
    """(partition, offset or None, timestamp or None, max records, max bytes) of the query
    ``args`` ({name: str}); raises :class:`BrowseError`."""
    def integer(name, default=None, low=None, high=None):
        raw = args.get(name)
        if raw in (None, ""):
            return default
        try:
            value = int(raw)
        except ValueError:
            raise BrowseError("%s must be an integer, not %r" % (name, raw)) from None
        if low is not None and value < low or high is not None and value > high:
            raise BrowseError("%s must be within %s..%s" % (name, low, high))
        return value
    partition = integer("partition", 0, 0)
    offset = integer("offset", None, 0)
    timestamp = integer("timestamp", None, 0)
    if offset is not None and timestamp is not None:
        raise BrowseError("give an offset or a timestamp, not both")
    return (partition, offset, timestamp, integer("limit", DEFAULT_RECORDS, 1, MAX_RECORDS),
            integer("maxBytes", DEFAULT_BYTES, 1024, MAX_BYTES))


@defer.inlineCallbacks
def browse(client, broker, topic, partition, offset=None, timestamp=None, limit=DEFAULT_RECORDS,
           max_bytes=DEFAULT_BYTES):
    """Records of ``topic``-``partition`` from ``offset`` (default: the start), or from the
    first offset at or after ``timestamp`` (ms)."""
    tp = (topic, partition)
    starts = yield list_offsets(client, {topic: [partition]}, EARLIEST)
    ends = yield list_offsets(client, {topic: [partition]}, LATEST)
    start, end = starts.get(tp, -1), ends.get(tp, -1)
    out = {"topic": topic, "partition": partition, "startOffset": start, "endOffset": end, "records": [],
           "maxBytes": max_bytes}
    if start < 0 or end < 0:
        out["error"] = "cannot list the offsets of %s-%d (unknown, or not authorized)" % tp
        return out
    if timestamp is not None:
        found = yield list_offsets(client, {topic: [partition]}, timestamp)
        offset = found.get(tp, -1)
        if offset < 0:  # nothing at or after that time
            out["from"] = end
            return out
    if offset is None:
        offset = start
    offset = max(offset, start)
    out["from"] = offset
    if offset >= end:
        return out
    FT = m.FetchRequest.FetchTopic
    FP = m.FetchRequest.FetchPartition
    body = m.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=0,
                          session_id=0, session_epoch=-1, topics=[FT(topic=topic, partitions=[
                              FP(partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes)])],
                          forgotten_topics_data=[], rack_id="")
    version = client.version(body.API_KEY, FETCH_VERSION)
    resp = yield client.call(body, version)
    pool = broker.threadpool
    resp = yield threads.deferToThreadPool(broker.reactor, pool, _read_parts, resp, version)
    if resp.error_code:
        out["error"] = describe_error(resp.error_code)
        return out
    (t,) = resp.responses
    (p,) = t.partitions
    if p.error_code:
        out["error"] = describe_error(p.error_code)
        return out
    data = bytes(p.records or b"")
    out["fetchedBytes"] = len(data)
    out["records"] = yield threads.deferToThreadPool(broker.reactor, pool, decode_records, data, offset, limit)
    return out
