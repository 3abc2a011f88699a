"""Fetch (key 1, v4-v17), as seed 000 describes KafkaApis.handleFetchRequest: resolve topic
ids, let the fetch session (KIP-227) decide what to read, split unknown partitions off, bound the
read by min(request, ``fetch.max.bytes``), hand the rest to the replica manager (long polling
happens there) and build the response with the records as file regions, never read here.
"""

from functools import partial

import attr
from twisted.logger import Logger
from zope.interface import moduleProvides

from kafkatw.network.request import Response
from kafkatw.protocol import errors
from kafkatw.protocol.messages import FetchResponse
from kafkatw.security.authorizer import AclOperation, ResourceType
from kafkatw.server.fetch_session import (
    LEGACY,
    ZERO_UUID,
    FetchMetadata,
    SessionlessFetchContext,
    TopicIdPartition,
)
from kafkatw.server.interfaces import IApiHandler
from kafkatw.server.replica_manager import FetchParams, PartitionData
from kafkatw.server.replica_selector import ClientMetadata

moduleProvides(IApiHandler)

log = Logger()

API_KEY = 1
VERSIONS = (4, 17)

INVALID_HIGH_WATERMARK = -1
INVALID_LAST_STABLE_OFFSET = -1
INVALID_LOG_START_OFFSET = -1
DEFAULT_FETCH_MAX_BYTES = 55 * 1024 * 1024
READ, TOPIC = AclOperation.READ, ResourceType.TOPIC
_new = tuple.__new__  # a named tuple built in C, fields in order


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
    records_size = attr.ib(default=0)


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
            # both named tuples built in C, fields in order (no Python __new__ or __init__)
            fetch_data.append((_new(TopicIdPartition, (topic_id, name, p.partition)), _new(PartitionData, (
                p.fetch_offset, p.log_start_offset, p.partition_max_bytes, p.current_leader_epoch,
                p.last_fetched_epoch, topic_id))))
    if len(fetch_data) > 1:
        # Kafka's fetchData is a LinkedHashMap: a partition named twice is one entry, where
        # it was first named, with its last mention's fields (what dict() of the pairs
        # keeps, in C); read and answered once
        unique = dict(fetch_data)
        if len(unique) != len(fetch_data):
            fetch_data = list(unique.items())
    to_forget = []
    if version >= 7:
        for t in body.forgotten_topics_data:
            if uses_topic_ids:
                topic_id, name = t.topic_id, meta.topic_name(t.topic_id)
            else:
                topic_id, name = ZERO_UUID, t.topic
            for p in t.partitions:
                to_forget.append(TopicIdPartition(topic_id, name, p))
        metadata = _new(FetchMetadata, (body.session_id, body.session_epoch))
    else:
        metadata = LEGACY
    return metadata, fetch_data, to_forget


def client_metadata_of(request, is_follower):
    """Kafka's ClientMetadata of a consumer's Fetch v11+ (its rack_id, KIP-392), else None: a
    consumer with it may read a follower and be sent to a preferred read replica."""
    if is_follower or request.api_version < 11:
        return None
    ctx = request.context
    return ClientMetadata(rack_id=request.body.rack_id or "", client_id=request.client_id or "",
                          client_address=ctx.client_address, principal=ctx.principal,
                          listener_name=ctx.listener_name)


def handle(apis, request):
    body = request.body
    version = request.api_version
    meta = apis.metadata
    replica_id, replica_epoch = replica_of(request)
    is_follower = replica_id >= 0
    metadata, fetch_data, to_forget = decode_fetch_data(apis, request)
    # request-log summary (the fields seed 000's example 1 reads from kafka.request.logger),
    # made only if the request log writes a line
    request.summary = partial(_request_summary, body, metadata, len(fetch_data), len(to_forget))
    if apis.fetch_manager is not None:
        # positional: a keyword call to a Python function takes CPython 3.11's slow path
        context = apis.fetch_manager.new_context(metadata, fetch_data, to_forget, is_follower,
                                                 version >= 13, meta.topic_name)
    else:
        context = SessionlessFetchContext(fetch_data)

    interesting = []  # ((topic, partition), PartitionData)
    keys = []  # the TopicIdPartition of each, in the same order (the results come back in it)
    erroneous = []  # (TopicIdPartition, ErrorPartitionData)
    check_read = apis.authorizer is not None and not is_follower  # a follower: CLUSTER_ACTION, gated
    for key, data in context.partitions_to_fetch():
        topic = key.topic
        if topic is None:
            erroneous.append((key, ErrorPartitionData(errors.UNKNOWN_TOPIC_ID)))
        elif check_read and not apis.allowed(request, READ, TOPIC, topic):
            erroneous.append((key, ErrorPartitionData(errors.TOPIC_AUTHORIZATION_FAILED)))
        elif not meta.contains_partition(topic, key.partition):
            erroneous.append((key, ErrorPartitionData(errors.UNKNOWN_TOPIC_OR_PARTITION)))
        else:
            keys.append(key)
            interesting.append(((topic, key.partition), data))

    # the answer, made now or when a parked fetch completes (a partial, not a closure: a
    # nested def makes a cell of every variable it captures on each call)
    respond = partial(_respond, version, context, keys, erroneous)
    if not interesting or context.error != errors.NONE:
        return respond(())
    # the request's bounds within the broker's fetch.max.bytes (kept per config); min()
    # as conditionals (the builtin parses keywords: ~1k instructions a call)
    fetch_max_bytes = body.max_bytes
    if apis.fetch_max_bytes < fetch_max_bytes:
        fetch_max_bytes = apis.fetch_max_bytes
    fetch_min_bytes = body.min_bytes
    if fetch_max_bytes < fetch_min_bytes:
        fetch_min_bytes = fetch_max_bytes
    params = FetchParams(
        replica_id, body.max_wait_ms, fetch_min_bytes, fetch_max_bytes, body.isolation_level,
        replica_epoch,
        # only a cluster reads followers or names a preferred read replica (KIP-392)
        client_metadata_of(request, is_follower) if apis.replica_manager.cluster_mode else None)
    result = apis.replica_manager.fetch_messages_now(params, interesting)
    if type(result) is list:
        return respond(result)
    # Parked in the fetch purgatory: the wait is remoteTimeMs and holds no handler slot. The
    # DelayedFetch is the pending answer (``when_complete``, what KafkaApis and the request
    # channel call): it completes with ``respond``'s Response, no wrapper or closure between.
    request.mark_api_local_complete()
    result.respond = respond
    return result


def _respond(version, context, keys, erroneous, results):
    """The Response of a Fetch: ``results`` ([((topic, partition), data)] in the order of
    ``keys``, the partitions read) under their TopicIdPartition, then the ``erroneous``
    ones, as the fetch session sends them."""
    updates = []
    for key, (_, data) in zip(keys, results):
        updates.append((key, data))
    updates += erroneous
    response_data = context.update_and_generate_response_data(updates)
    # body, close_connection, throttle_time_ms, noop, summary (positional, as above)
    return Response(build_response(version, response_data.error, response_data.session_id,
                                   response_data.partitions),
                    False, 0, False, partial(_response_summary, response_data))


def _request_summary(body, metadata, partitions, forgotten):
    return {"maxWaitMs": body.max_wait_ms, "minBytes": body.min_bytes,
            "sessionId": metadata.session_id, "sessionEpoch": metadata.epoch,
            "partitions": partitions, "forgotten": forgotten}


def _response_summary(response_data):
    return {"errorCode": response_data.error, "sessionId": response_data.session_id,
            "partitions": len(response_data.partitions)}


def build_response(version, error, session_id, partitions):
    """The FetchResponse of [(TopicIdPartition, data)], consecutive partitions of a topic (by
    name before v13, by id from v13) grouped, as the generated row writer's rows: the records
    stay file regions, no message objects are made per request."""
    topics = []
    by_name = version < 13
    last = _NO_TOPIC
    rows = None
    for key, data in partitions:
        ident = key.topic if by_name else key.topic_id
        if ident != last:
            rows = []
            topics.append((key.topic or "", key.topic_id, rows))
            last = ident
        # the partition's row, inline (a call per partition fewer)
        records = data.records if data.records_size else b""  # (the read counted its bytes)
        aborted = data.aborted_transactions
        if aborted:
            aborted = [a if type(a) is tuple else (a.producer_id, a.first_offset) for a in aborted]
        diverging = data.diverging_epoch
        if diverging is not None and type(diverging) is not tuple:
            diverging = (diverging.epoch, diverging.end_offset)
        replica = data.preferred_read_replica
        # partition_index, error_code, high_watermark, last_stable_offset, log_start_offset,
        # diverging_epoch, current_leader, snapshot_id, aborted_transactions,
        # preferred_read_replica, records
        rows.append((key.partition, data.error, data.high_watermark, data.last_stable_offset,
                     data.log_start_offset, diverging, None, None, aborted,
                     -1 if replica is None else replica, records))
    return FetchResponse.Rows(0, error, session_id, topics)


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
