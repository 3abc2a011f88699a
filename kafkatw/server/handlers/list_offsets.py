"""ListOffsets (key 2, v1-v10): earliest (-2), latest (-1), max timestamp (-3), earliest local
(-4) and by timestamp, with isolation level and current-leader-epoch fencing. The offsets come
from the replica manager (``fetch_offset_for_timestamp``); this module maps requests and errors.
"""

from collections import Counter

from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import moduleProvides

from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError
from kafkatw.protocol.messages import ListOffsetsResponse
from kafkatw.security.authorizer import AclOperation as Op, ResourceType as RT
from kafkatw.server.interfaces import IApiHandler

moduleProvides(IApiHandler)

log = Logger()

API_KEY = 2
VERSIONS = (1, 10)

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2
UNKNOWN = -1

# Errors Kafka answers quietly (no error log) with unknown timestamp/offset.
_EXPECTED = frozenset([
    errors.UNKNOWN_TOPIC_OR_PARTITION, errors.NOT_LEADER_OR_FOLLOWER, errors.UNKNOWN_LEADER_EPOCH,
    errors.FENCED_LEADER_EPOCH, errors.KAFKA_STORAGE_ERROR, errors.OFFSET_NOT_AVAILABLE,
    errors.UNSUPPORTED_FOR_MESSAGE_FORMAT,
])


def _partition(index, code=errors.NONE, timestamp=UNKNOWN, offset=UNKNOWN, leader_epoch=-1):
    return ListOffsetsResponse.ListOffsetsPartitionResponse(
        partition_index=index, error_code=code, timestamp=timestamp, offset=offset, leader_epoch=leader_epoch)


def handle(apis, request):
    body = request.body
    meta = apis.metadata
    replica_id = body.replica_id
    isolation_level = body.isolation_level if replica_id == CONSUMER_REPLICA_ID else None
    fetch_only_from_leader = replica_id != DEBUGGING_REPLICA_ID

    counts = Counter((t.name, p.partition_index) for t in body.topics for p in t.partitions)

    def one(topic, p):
        if not apis.allowed(request, Op.DESCRIBE, RT.TOPIC, topic):
            return _partition(p.partition_index, errors.TOPIC_AUTHORIZATION_FAILED)
        if counts[(topic, p.partition_index)] > 1:
            return _partition(p.partition_index, errors.INVALID_REQUEST)
        if not meta.contains_partition(topic, p.partition_index):
            return _partition(p.partition_index, errors.UNKNOWN_TOPIC_OR_PARTITION)
        d = defer.maybeDeferred(
            apis.replica_manager.fetch_offset_for_timestamp,
            (topic, p.partition_index), p.timestamp, isolation_level, p.current_leader_epoch,
            fetch_only_from_leader)

        def found(result):
            if result is None:
                return _partition(p.partition_index)
            epoch = result.leader_epoch
            if request.api_version < 4:  # the field exists from v4 and is not ignorable
                epoch = None
            return _partition(p.partition_index, errors.NONE, result.timestamp, result.offset,
                              -1 if epoch is None else epoch)

        return d.addCallback(found)

    def failed(failure, topic, index):
        exc = failure.value
        if isinstance(exc, KafkaError):
            if exc.code not in _EXPECTED:
                log.error("ListOffsets of {topic}-{p} failed: {err}", topic=topic, p=index, err=exc)
            return _partition(index, exc.code)
        log.failure("ListOffsets of {topic}-{p} failed", failure, topic=topic, p=index)
        return _partition(index, errors.UNKNOWN_SERVER_ERROR)

    topics_out = []
    pending = []
    for t in body.topics:
        out = ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name, partitions=[])
        topics_out.append(out)
        for p in t.partitions:
            d = defer.maybeDeferred(one, t.name, p)
            d.addErrback(failed, t.name, p.partition_index)
            out.partitions.append(None)
            slot = len(out.partitions) - 1

            def place(resp, out=out, slot=slot):
                out.partitions[slot] = resp

            d.addCallback(place)
            pending.append(d)

    d = defer.gatherResults(pending, consumeErrors=True)
    d.addCallback(lambda _: ListOffsetsResponse(throttle_time_ms=0, topics=topics_out))
    return d


def error_response(request, code, message):
    return ListOffsetsResponse(throttle_time_ms=0, topics=[
        ListOffsetsResponse.ListOffsetsTopicResponse(
            name=t.name, partitions=[_partition(p.partition_index, code) for p in t.partitions])
        for t in request.body.topics])
