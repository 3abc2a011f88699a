"""Fetch (key 1, v4-v17), as seed 000 describes KafkaApis.handleFetchRequest: resolve topic
ids, let the fetch session (KIP-227) decide what to read, split unknown partitions off, bound the
read by min(request, ``fetch.max.bytes``), hand the rest to the replica manager (long polling
happens there) and build the response with the records as file regions, never read here.
"""

import struct

import attr
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from kafkatw.network.request import Response
from kafkatw.protocol import errors
from kafkatw.protocol.codec import write_uvarint
from kafkatw.protocol.messages import FetchResponse
from kafkatw.protocol.parts import FileRegion
from kafkatw.server.fetch_session import (
    LEGACY,
    ZERO_UUID,
    FetchMetadata,
    SessionlessFetchContext,
    TopicIdPartition,
)

from kafkatw.server.replica_manager import FetchParams, PartitionData

log = Logger()

API_KEY = 1
VERSIONS = (4, 17)

INVALID_HIGH_WATERMARK = -1
INVALID_LAST_STABLE_OFFSET = -1
INVALID_LOG_START_OFFSET = -1
DEFAULT_FETCH_MAX_BYTES = 55 * 1024 * 1024


@attr.s(slots=True)
class ErrorPartitionData:
    """A partition answered with an error without reading (the fields the session looks at)."""

    error = attr.ib()
    high_watermark = attr.ib(default=INVALID_HIGH_WATERMARK)
    last_stable_offset = attr.ib(default=INVALID_LAST_STABLE_OFFSET)
    log_start_offset = attr.ib(default=INVALID_LOG_START_OFFSET)
    records = attr.ib(default=None)
    aborted_transactions = attr.ib(default=None)
    diverging_epoch = attr.ib(default=None)
    preferred_read_replica = attr.ib(default=-1)


def replica_of(request):
    """(replica id, replica epoch) of the sender: -1 for consumers."""
    body = request.body
    if request.api_version >= 15:
        return body.replica_state.replica_id, body.replica_state.replica_epoch
    return body.replica_id, -1


def decode_fetch_data(apis, request):
    """(FetchMetadata, [(TopicIdPartition, PartitionData)], [TopicIdPartition]) of a request."""
    body = request.body
    version = request.api_version
    meta = apis.metadata
    uses_topic_ids = version >= 13
    fetch_data = []
    for t in body.topics:
        if uses_topic_ids:
            topic_id, name = t.topic_id, meta.topic_name(t.topic_id)
        else:
            topic_id, name = ZERO_UUID, t.topic
        for p in t.partitions:
            key = TopicIdPartition(topic_id, name, p.partition)
            fetch_data.append((key, PartitionData(
                fetch_offset=p.fetch_offset,
                log_start_offset=p.log_start_offset,
                max_bytes=p.partition_max_bytes,
                current_leader_epoch=p.current_leader_epoch,
                last_fetched_epoch=p.last_fetched_epoch,
                topic_id=topic_id,
            )))
    to_forget = []
    if version >= 7:
        for t in body.forgotten_topics_data:
            if uses_topic_ids:
                topic_id, name = t.topic_id, meta.topic_name(t.topic_id)
            else:
                topic_id, name = ZERO_UUID, t.topic
            for p in t.partitions:
                to_forget.append(TopicIdPartition(topic_id, name, p))
        metadata = FetchMetadata(body.session_id, body.session_epoch)
    else:
        metadata = LEGACY
    return metadata, fetch_data, to_forget


def handle(apis, request):
    body = request.body
    version = request.api_version
    meta = apis.metadata
    replica_id, replica_epoch = replica_of(request)
    is_follower = replica_id >= 0
    metadata, fetch_data, to_forget = decode_fetch_data(apis, request)
    # request-log summary (the fields seed 000's example 1 reads from kafka.request.logger)
    request.summary = {"maxWaitMs": body.max_wait_ms, "minBytes": body.min_bytes,
                       "sessionId": metadata.session_id, "sessionEpoch": metadata.epoch,
                       "partitions": len(fetch_data), "forgotten": len(to_forget)}
    if apis.fetch_manager is not None:
        context = apis.fetch_manager.new_context(metadata, fetch_data, to_forget, is_follower,
                                                 uses_topic_ids=version >= 13)
    else:
        context = SessionlessFetchContext(fetch_data)

    interesting = []  # ((topic, partition), PartitionData)
    keys = {}  # (topic, partition) -> TopicIdPartition
    erroneous = []  # (TopicIdPartition, ErrorPartitionData)
    for key, data in context.partitions_to_fetch():
        if key.topic is None:
            erroneous.append((key, ErrorPartitionData(errors.UNKNOWN_TOPIC_ID)))
        elif not meta.contains_partition(key.topic, key.partition):
            erroneous.append((key, ErrorPartitionData(errors.UNKNOWN_TOPIC_OR_PARTITION)))
        else:
            tp = (key.topic, key.partition)
            keys[tp] = key
            interesting.append((tp, data))

    fetch_max_bytes = min(body.max_bytes, int(apis.config_value("fetch.max.bytes", DEFAULT_FETCH_MAX_BYTES)))
    fetch_min_bytes = min(body.min_bytes, fetch_max_bytes)
    params = FetchParams(
        replica_id=replica_id,
        max_wait_ms=body.max_wait_ms,
        min_bytes=fetch_min_bytes,
        max_bytes=fetch_max_bytes,
        isolation_level=body.isolation_level,
        replica_epoch=replica_epoch,
    )

    def respond(results):
        updates = []
        for tp, data in results:
            key = keys.get(tp, tp) if not isinstance(tp, TopicIdPartition) else tp
            updates.append((key, data))
        updates.extend(erroneous)
        response_data = context.update_and_generate_response_data(updates)
        return Response(build_response(version, response_data.error, response_data.session_id,
                                       response_data.partitions),
                        summary={"errorCode": response_data.error, "sessionId": response_data.session_id,
                                 "partitions": len(response_data.partitions)})

    if not interesting or context.error != errors.NONE:
        return respond([])
    rm = apis.replica_manager
    fetch_now = getattr(rm, "fetch_messages_now", None)
    if fetch_now is None:  # a replica manager answering with Deferreds only
        d = defer.maybeDeferred(rm.fetch_messages, params, interesting)
        if not d.called:
            request.mark_api_local_complete()
        d.addCallback(respond)
        return d
    result = fetch_now(params, interesting)
    if type(result) is list:
        return respond(result)
    # Parked in the fetch purgatory: the wait is remoteTimeMs and holds no handler slot.
    request.mark_api_local_complete()
    return ParkedFetch(result, respond)


class ParkedFetch:
    """The answer to a Fetch parked in the purgatory: ``when_complete`` (what KafkaApis and the
    request channel call) goes to the DelayedFetch, and its results become the Response, with
    no Deferred in between."""

    __slots__ = ("operation", "respond")

    def __init__(self, operation, respond):
        self.operation = operation
        self.respond = respond

    def when_complete(self, callback, errback):
        respond = self.respond

        def completed(results):
            try:
                response = respond(results)
            except Exception:
                errback(Failure())
                return
            callback(response)

        self.operation.when_complete(completed, errback)


def _partition_response(key, data):
    records = data.records
    if records is None or len(records) == 0:
        records = b""
    aborted = data.aborted_transactions
    if aborted is not None:
        aborted = [
            a if isinstance(a, FetchResponse.AbortedTransaction) else FetchResponse.AbortedTransaction(
                producer_id=a[0] if isinstance(a, tuple) else a.producer_id,
                first_offset=a[1] if isinstance(a, tuple) else a.first_offset)
            for a in aborted
        ]
    out = FetchResponse.PartitionData(
        partition_index=key.partition,
        error_code=data.error,
        high_watermark=data.high_watermark,
        last_stable_offset=data.last_stable_offset,
        log_start_offset=data.log_start_offset,
        aborted_transactions=aborted,
        preferred_read_replica=data.preferred_read_replica if data.preferred_read_replica is not None else -1,
        records=records,
    )
    diverging = data.diverging_epoch
    if diverging is not None:
        epoch = diverging[0] if isinstance(diverging, tuple) else diverging.epoch
        end_offset = diverging[1] if isinstance(diverging, tuple) else diverging.end_offset
        out.diverging_epoch = FetchResponse.EpochEndOffset(epoch=epoch, end_offset=end_offset)
    return out


def build_response(version, error, session_id, partitions):
    """FetchResponse of [(TopicIdPartition, data)], consecutive partitions of a topic grouped
    (a :class:`FetchAnswer`, the same message encoded without generated objects, from v12)."""
    if version >= _FIRST_FLEXIBLE:
        return FetchAnswer(version, error, session_id, partitions)
    return build_generated_response(version, error, session_id, partitions)


def build_generated_response(version, error, session_id, partitions):
    """:func:`build_response` as the generated message objects."""
    topics = []
    last = None
    for key, data in partitions:
        ident = key.topic_id if version >= 13 else key.topic
        if last is None or last[0] != ident:
            entry = FetchResponse.FetchableTopicResponse(
                topic=key.topic or "", topic_id=key.topic_id, partitions=[])
            topics.append(entry)
            last = (ident, entry)
        last[1].partitions.append(_partition_response(key, data))
    return FetchResponse(throttle_time_ms=0, error_code=error, session_id=session_id, responses=topics)


_FIRST_FLEXIBLE = 12
_TOP = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_PARTITION = struct.Struct(">ihqqq")  # index, error, high watermark, last stable, log start
_I32 = struct.Struct(">i")
_FIELDS = frozenset(FetchResponse.__slots__)
_set = object.__setattr__


class FetchAnswer(FetchResponse):
    """The FetchResponse (v12+) of a handled request, encoded straight from the partitions'
    read results when each has no aborted transactions to list, no diverging epoch and records
    that are a file region or empty; otherwise, and as soon as any field is read or set, it is
    the generated message :func:`build_generated_response` makes (same bytes either way: see
    the handler's tests)."""

    __slots__ = ("_version", "_error", "_session_id", "_partitions")

    def __init__(self, version, error, session_id, partitions):
        _set(self, "_version", version)
        _set(self, "_error", error)
        _set(self, "_session_id", session_id)
        _set(self, "_partitions", partitions)

    def _materialize(self):
        partitions = self._partitions
        if partitions is not None:
            self._partitions = None
            built = build_generated_response(self._version, self._error, self._session_id, partitions)
            for name in FetchResponse.__slots__:
                _set(self, name, getattr(built, name))

    def __getattr__(self, name):
        # only reached for a field not set yet: the generated message's fields from here on
        if name in _FIELDS and self._partitions is not None:
            self._materialize()
            return getattr(self, name)
        raise AttributeError(name)

    def __setattr__(self, name, value):
        if name in _FIELDS:
            self._materialize()
        _set(self, name, value)

    def encode(self, version):
        partitions = self._partitions
        if partitions is None or version != self._version:
            self._materialize()
            return FetchResponse.encode(self, version)
        for _, data in partitions:
            records = data.records
            aborted = data.aborted_transactions
            if ((aborted is not None and len(aborted) != 0) or data.diverging_epoch is not None
                    or (records is not None and type(records) is not FileRegion and len(records) != 0)):
                self._materialize()
                return FetchResponse.encode(self, version)
        parts = []
        buf = bytearray(_TOP.pack(0, self._error, self._session_id))
        # topics: runs of consecutive partitions of one topic (by id from v13), as build_response
        by_name = version < 13
        groups = []
        last = _NO_TOPIC
        for key, data in partitions:
            ident = key.topic if by_name else key.topic_id
            if ident != last:
                groups.append([])
                last = ident
            groups[-1].append((key, data))
        buf += write_uvarint(len(groups) + 1)
        pack = _PARTITION.pack
        i32 = _I32.pack
        for rows in groups:
            key = rows[0][0]
            if by_name:
                name = (key.topic or "").encode("utf-8")
                buf += write_uvarint(len(name) + 1)
                buf += name
            else:
                buf += key.topic_id
            buf += write_uvarint(len(rows) + 1)
            for key, data in rows:
                buf += pack(key.partition, data.error, data.high_watermark, data.last_stable_offset,
                            data.log_start_offset)
                # aborted transactions: null, or an empty list
                buf.append(0 if data.aborted_transactions is None else 1)
                replica = data.preferred_read_replica
                buf += i32(-1 if replica is None else replica)
                records = data.records
                if records is not None and type(records) is FileRegion and records.count:
                    buf += write_uvarint(records.count + 1)
                    parts.append(bytes(buf))
                    parts.append(records)
                    buf = bytearray()
                else:
                    buf.append(1)  # empty records
                buf.append(0)  # partition tagged fields: no diverging epoch, leader or snapshot
            buf.append(0)  # topic tagged fields
        buf.append(0)  # no node endpoints, no other tagged fields
        parts.append(bytes(buf))
        return parts


_NO_TOPIC = object()


def error_response(request, code, message):
    """Kafka's FetchRequest.getErrorResponse: the top-level error (v7+), and before v13 the same
    error on every requested partition too."""
    version = request.api_version
    body = request.body
    parts = []
    if version < 13:
        for t in body.topics:
            for p in t.partitions:
                parts.append((TopicIdPartition(ZERO_UUID, t.topic, p.partition), ErrorPartitionData(code)))
    session_id = body.session_id if version >= 7 else 0
    return build_response(version, code, session_id, parts)
