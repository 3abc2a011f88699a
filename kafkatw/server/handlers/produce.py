"""Produce (key 0; v0-v2 advertised for old librdkafka and answered UNSUPPORTED_VERSION as
Kafka 4.0 does, KAFKA-18659; v3+ served): acks, per-partition checks, record-set shape
(one v2 batch), the topic's ``compression.type`` (``recompress``) and the response. Appending
and producer state belong to the replica manager; record bytes pass through as the decoded
memoryview unless the topic's codec differs from the producer's.
"""

from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import moduleProvides

from kafkatw.network.request import Response
from kafkatw.protocol import errors
from kafkatw.protocol import records as rec
from kafkatw.protocol.errors import KafkaError
from kafkatw.protocol.messages import ProduceResponse
from kafkatw.security.authorizer import AclOperation, ResourceType
from kafkatw.server.handlers.recompress import (
    PRODUCER,
    maybe_recompress,
    needs_recompress,
    recompress_all,
    recompress_off_reactor,
    topic_compression,
)
from kafkatw.server.interfaces import IApiHandler
from kafkatw.server.replica_manager import PartitionResponse

moduleProvides(IApiHandler)

log = Logger()

API_KEY = 0
VERSIONS = (0, 11)  # v12 means transaction.version 2 (KIP-890 part 2), not built
FIRST_SERVED_VERSION = 3
ZSTD = 4
WRITE, TOPIC, TRANSACTIONAL_ID = AclOperation.WRITE, ResourceType.TOPIC, ResourceType.TRANSACTIONAL_ID
MAGIC_OFFSET, MAGIC_VALUE_V2, LOG_OVERHEAD = rec.MAGIC_OFFSET, rec.MAGIC_VALUE_V2, rec.LOG_OVERHEAD
COMPRESSION_CODEC_MASK, TRANSACTIONAL_FLAG_MASK = rec.COMPRESSION_CODEC_MASK, rec.TRANSACTIONAL_FLAG_MASK
read_batch_header = rec.read_batch_header


def validate_records(version, records):
    """Kafka's ProduceRequest.validateRecords: exactly one magic-2 batch per partition (v3+).

    Reads only the 61-byte batch header and returns it. Raises KafkaError.
    """
    n = 0 if records is None else len(records)
    if n == 0:
        raise KafkaError(errors.INVALID_RECORD, "Produce requests with version %d must have at least "
                         "one record batch per partition" % version)
    try:
        header = read_batch_header(records, 0)
    except rec.CorruptRecordError:
        # a batch whose magic is not 2 is refused for that first (a v2 batch read above
        # has a magic of 2: its byte is looked at only when the read failed)
        magic = records[MAGIC_OFFSET] if n > MAGIC_OFFSET else rec.read_magic(records, 0)  # (raises)
        if magic != MAGIC_VALUE_V2:
            raise KafkaError(errors.INVALID_RECORD, "Produce requests with version %d are only "
                             "allowed to contain record batches with magic version 2" % version)
        raise
    if version < 7 and header.attributes & COMPRESSION_CODEC_MASK == ZSTD:
        raise KafkaError(errors.UNSUPPORTED_COMPRESSION_TYPE, "Produce requests with version %d are not "
                         "allowed to use ZStandard compression" % version)
    size = header.batch_length + LOG_OVERHEAD
    if size < n:
        raise KafkaError(errors.INVALID_RECORD, "Produce requests with version %d are only allowed to "
                         "contain exactly one record batch per partition" % version)
    if size > n:
        raise KafkaError(errors.CORRUPT_MESSAGE, "truncated record batch: %d bytes of %d" % (n, size))
    return header


def _error(code, message=None):
    # (a PartitionResponse as the replica manager's: the appended ones join ``results`` as
    # they are, no tuple copied from each)
    return PartitionResponse(code, error_message=message)  # (offsets -1, no record errors)


def handle(apis, request):
    body = request.body
    version = request.api_version
    results = {}  # (topic, partition) -> PartitionResponse
    order = []  # (topic, partition) in request order
    entries = {}
    headers = {}  # (topic, partition) -> [(0, header)] when the batch goes on as produced

    acks = body.acks
    uniform_error = None
    if version < FIRST_SERVED_VERSION:
        uniform_error = (errors.UNSUPPORTED_VERSION, None)
    elif acks not in (0, 1, -1):
        uniform_error = (errors.INVALID_REQUIRED_ACKS, None)
    elif body.transactional_id is not None and apis.txn_coordinator is None:
        # No transaction coordinator: no InitProducerId with a transactional id ever succeeds,
        # so a transactional produce cannot be legitimate here.
        uniform_error = (errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                         "Transactions are not supported by this broker")
    elif body.transactional_id is not None and apis.authorizer is not None and \
            not apis.allowed(request, WRITE, TRANSACTIONAL_ID, body.transactional_id):
        uniform_error = (errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None)  # Kafka's whole-request refusal

    meta = apis.metadata
    decisions = request.authz  # the authorizer's answers (None without an authorizer)
    if decisions is None and apis.authorizer is not None:
        decisions = apis.decisions(request)
    slow = []  # recompressed in the thread pool: [(tp, records, compression type, header, level)]
    for topic in body.topic_data:
        compression_type = level = None  # the topic's, looked up once for all its partitions
        denied = decisions is not None and not decisions.allowed(WRITE, TOPIC, topic.name)
        for pd in topic.partition_data:
            tp = (topic.name, pd.index)
            order.append(tp)
            if uniform_error is not None:
                results[tp] = _error(*uniform_error)
                continue
            if denied:
                results[tp] = _error(errors.TOPIC_AUTHORIZATION_FAILED)
                continue
            overrides = meta.partition_configs(topic.name, pd.index)  # None: no such partition
            if overrides is None:
                results[tp] = _error(errors.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            try:
                header = validate_records(version, pd.records)
            except rec.CorruptRecordError as e:
                results[tp] = _error(errors.CORRUPT_MESSAGE, str(e))
                continue
            except KafkaError as e:
                results[tp] = _error(e.code, e.message)
                continue
            if body.transactional_id is None and header.attributes & TRANSACTIONAL_FLAG_MASK:
                # Kafka: transactional records need a transactional id (authorized for it)
                results[tp] = _error(errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                     "Transactional records need a transactional id")
                continue
            try:
                if compression_type is None:
                    compression_type, level = topic_compression(apis, overrides)
                if compression_type == PRODUCER:  # the default: stored as produced
                    entries[tp] = pd.records
                    headers[tp] = [(0, header)]  # the replica manager and log need not read it again
                    continue
                if needs_recompress(compression_type, header) and recompress_off_reactor(header):
                    slow.append((tp, pd.records, compression_type, header, level))
                    continue
                records = entries[tp] = maybe_recompress(pd.records, compression_type, header, level)
                if records is pd.records:
                    headers[tp] = [(0, header)]  # the replica manager and log need not read it again
            except rec.CorruptRecordError as e:
                results[tp] = _error(errors.CORRUPT_MESSAGE, str(e))
            except KafkaError as e:
                results[tp] = _error(e.code, e.message)

    if slow:
        return apis.run_blocking(recompress_all, slow).addCallback(
            _recompressed, apis, request, results, order, entries, headers)
    if body.transactional_id is None:  # nothing to verify: straight to the append
        return _append_verified(apis, request, results, order, entries, headers, None)
    return _append(apis, request, results, order, entries, headers)


# The steps after the checks are module functions with their state as arguments, not closures
# made per request: no function objects and cells for the common synchronous produce.

def _recompressed(done, apis, request, results, order, entries, headers):
    # back on the reactor; the connection is muted meanwhile, so its requests stay in order
    for tp, records in done:
        if isinstance(records, rec.CorruptRecordError):
            results[tp] = _error(errors.CORRUPT_MESSAGE, str(records))
        elif isinstance(records, KafkaError):
            results[tp] = _error(records.code, records.message)
        else:
            entries[tp] = records
    return _append(apis, request, results, order, entries, headers)


def _append(apis, request, results, order, entries, headers):
    """Transaction verification (a transactional produce), then the append."""
    body = request.body
    if body.transactional_id is not None and entries and apis.txn_coordinator is not None \
            and apis.config_value("transaction.partition.verification.enable", True):
        refused = apis.txn_coordinator.verify_produce(
            apis.replica_manager, body.transactional_id, entries, headers)
        if isinstance(refused, defer.Deferred):  # asked of the coordinator's broker
            # waiting on another broker frees the handler slot: two brokers verifying
            # with each other must not fill each other's num.io.threads
            request.mark_api_local_complete()
            return refused.addCallback(
                lambda refused: _append_verified(apis, request, results, order, entries, headers, refused))
        return _append_verified(apis, request, results, order, entries, headers, refused)
    return _append_verified(apis, request, results, order, entries, headers, None)


def _append_verified(apis, request, results, order, entries, headers, refused):
    if refused:
        for tp, code in refused.items():
            del entries[tp]
            headers.pop(tp, None)
            results[tp] = _error(code, "Transaction verification failed for %s-%d" % tp)
    if not entries:
        return _respond(request, results, order, {})
    body = request.body
    # (positional: internal_topics_allowed=False, batch_headers=headers)
    appended = apis.replica_manager.append_records_now(body.timeout_ms, body.acks, entries, False, headers)
    # (the dict test first: Deferred is an ABC, its isinstance a Python call; a dict is the
    # synchronous answer)
    if type(appended) is not dict and isinstance(appended, defer.Deferred):
        # acks=all replication, or a producer state rebuild: parked, as Kafka's DelayedProduce;
        # the handler slot (num.io.threads) is free for other connections' requests meanwhile
        request.mark_api_local_complete()
        return appended.addCallback(lambda appended: _respond(request, results, order, appended))
    return _respond(request, results, order, appended)


def _respond(request, results, order, appended):
    """The Response of ``results`` with the replica manager's ``appended`` merged in."""
    results.update(appended)
    if request.body.acks == 0:
        if all(results[tp].error_code == errors.NONE for tp in order):
            return Response(None, noop=True)
        log.info("closing connection {conn}: acks=0 produce failed: {errs}",
                 conn=request.context.connection_id,
                 errs={tp: errors.error_name(results[tp].error_code) for tp in order
                       if results[tp].error_code})
        return Response(None, close_connection=True)
    return Response(build_response(request.api_version, order, results))


def _record_error(e):
    """A BatchIndexAndErrorMessage row of a replica manager's record error."""
    if isinstance(e, tuple):
        return e
    return (e.batch_index, getattr(e, "message", getattr(e, "batch_index_error_message", None)))


def build_response(version, order, results):
    """The ProduceResponse of ``results`` ({tp: PartitionResponse}) in request order, each
    topic's partitions under its first appearance, as the generated row writer's rows (no
    message objects per request)."""
    topics = {}
    out = []
    has_errors = version >= 8  # record_errors and error_message exist from v8
    for tp in order:
        rows = topics.get(tp[0])
        if rows is None:
            rows = topics[tp[0]] = []
            out.append((tp[0], rows))
        pr = results[tp]
        if has_errors:
            record_errors = pr.record_errors
            if record_errors:
                record_errors = [_record_error(e) for e in record_errors]
            message = pr.error_message
        else:
            record_errors, message = (), None
        # index, error_code, base_offset, log_append_time_ms, log_start_offset, record_errors,
        # error_message, current_leader (a single node leads everything: the default)
        rows.append((tp[1], pr.error_code, pr.base_offset, pr.log_append_time, pr.log_start_offset,
                     record_errors, message, None))
    return ProduceResponse.Rows(out)


def error_response(request, code, message):
    body = request.body
    if body.acks == 0:
        return None  # close the connection, as Kafka does for a failed acks=0 produce
    order = [(t.name, pd.index) for t in body.topic_data for pd in t.partition_data]
    results = {tp: _error(code, message) for tp in order}
    return build_response(request.api_version, order, results)
