"""Produce (key 0; v0-v2 advertised for old librdkafka and answered UNSUPPORTED_VERSION as
Kafka 4.0 does, KAFKA-18659; v3+ served): acks, per-partition checks, record-set shape
(one v2 batch), the topic's ``compression.type`` (``recompress``) and the response. Appending
and producer state belong to the replica manager; record bytes pass through as the decoded
memoryview unless the topic's codec differs from the producer's.
"""

import struct

from twisted.internet import defer
from twisted.logger import Logger

from kafkatw.network.request import Response
from kafkatw.protocol import errors
from kafkatw.protocol import records as rec
from kafkatw.protocol.codec import write_uvarint
from kafkatw.protocol.errors import KafkaError
from kafkatw.protocol.messages import ProduceResponse
from kafkatw.server.handlers.recompress import (
    maybe_recompress,
    needs_recompress,
    recompress_all,
    recompress_off_reactor,
    topic_compression_type,
)

log = Logger()

API_KEY = 0
VERSIONS = (0, 11)  # v12 means transaction.version 2 (KIP-890 part 2), not built
FIRST_SERVED_VERSION = 3
ZSTD = 4


def validate_records(version, records):
    """Kafka's ProduceRequest.validateRecords: exactly one magic-2 batch per partition (v3+).

    Reads only the 61-byte batch header and returns it. Raises KafkaError.
    """
    if records is None or len(records) == 0:
        raise KafkaError(errors.INVALID_RECORD, "Produce requests with version %d must have at least "
                         "one record batch per partition" % version)
    magic = rec.read_magic(records, 0)
    if magic != rec.MAGIC_VALUE_V2:
        raise KafkaError(errors.INVALID_RECORD, "Produce requests with version %d are only allowed to "
                         "contain record batches with magic version 2" % version)
    header = rec.read_batch_header(records, 0)
    if version < 7 and header.compression == ZSTD:
        raise KafkaError(errors.UNSUPPORTED_COMPRESSION_TYPE, "Produce requests with version %d are not "
                         "allowed to use ZStandard compression" % version)
    size = header.batch_length + rec.LOG_OVERHEAD
    if size < len(records):
        raise KafkaError(errors.INVALID_RECORD, "Produce requests with version %d are only allowed to "
                         "contain exactly one record batch per partition" % version)
    if size > len(records):
        raise KafkaError(errors.CORRUPT_MESSAGE, "truncated record batch: %d bytes of %d" % (len(records), size))
    return header


def _error(code, message=None):
    return (code, -1, -1, -1, [], message)


def handle(apis, request):
    body = request.body
    version = request.api_version
    results = {}  # (topic, partition) -> (error, base_offset, log_append_time, log_start, record_errors, msg)
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

    meta = apis.metadata
    slow = []  # batches recompressed in the thread pool: [(tp, records, compression type, header)]
    for topic in body.topic_data:
        compression_type = None  # the topic's, looked up once for all its partitions
        for pd in topic.partition_data:
            tp = (topic.name, pd.index)
            order.append(tp)
            if uniform_error is not None:
                results[tp] = _error(*uniform_error)
                continue
            if not meta.contains_partition(topic.name, pd.index):
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
            if body.transactional_id is None and header is not None and header.is_transactional:
                # Kafka: transactional records need a transactional id (authorized for it)
                results[tp] = _error(errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                     "Transactional records need a transactional id")
                continue
            try:
                if compression_type is None:
                    compression_type = topic_compression_type(apis, topic.name)
                if needs_recompress(compression_type, header) and recompress_off_reactor(header):
                    slow.append((tp, pd.records, compression_type, header))
                    continue
                records = entries[tp] = maybe_recompress(pd.records, compression_type, header)
                if records is pd.records:
                    headers[tp] = [(0, header)]  # the replica manager and log need not read it again
            except rec.CorruptRecordError as e:
                results[tp] = _error(errors.CORRUPT_MESSAGE, str(e))
            except KafkaError as e:
                results[tp] = _error(e.code, e.message)

    def respond(appended):
        for tp, pr in appended.items():
            results[tp] = (pr.error_code, pr.base_offset, pr.log_append_time, pr.log_start_offset,
                           list(pr.record_errors or []), pr.error_message)
        if acks == 0:
            if all(results[tp][0] == errors.NONE for tp in order):
                return Response(None, noop=True)
            log.info("closing connection {conn}: acks=0 produce failed: {errs}",
                     conn=getattr(request.context, "connection_id", None),
                     errs={tp: errors.error_name(results[tp][0]) for tp in order if results[tp][0]})
            return Response(None, close_connection=True)
        return Response(ProduceAnswer(version, order, results))

    def append():
        if body.transactional_id is not None and entries and apis.txn_coordinator is not None \
                and apis.config_value("transaction.partition.verification.enable", True):
            for tp, code in apis.txn_coordinator.verify_produce(
                    apis.replica_manager, body.transactional_id, entries, headers).items():
                del entries[tp]
                headers.pop(tp, None)
                results[tp] = _error(code, "Transaction verification failed for %s-%d" % tp)
        if not entries:
            return respond({})
        rm = apis.replica_manager
        append_now = getattr(rm, "append_records_now", None)
        if append_now is not None:
            # synchronous on a single node: the response without a Deferred
            appended = append_now(body.timeout_ms, acks, entries, batch_headers=headers)
            if isinstance(appended, defer.Deferred):  # waiting for a producer state rebuild
                return appended.addCallback(respond)
            return respond(appended)
        d = defer.maybeDeferred(rm.append_records, body.timeout_ms, acks, entries)
        d.addCallback(respond)
        return d

    if not slow:
        return append()

    def recompressed(done):
        # back on the reactor; the connection is muted meanwhile, so its requests stay in order
        for tp, records in done:
            if isinstance(records, rec.CorruptRecordError):
                results[tp] = _error(errors.CORRUPT_MESSAGE, str(records))
            elif isinstance(records, KafkaError):
                results[tp] = _error(records.code, records.message)
            else:
                entries[tp] = records
        return append()
    return apis.run_blocking(recompress_all, slow).addCallback(recompressed)


def _record_error(e):
    if isinstance(e, tuple):
        index, message = e
    else:
        index, message = e.batch_index, getattr(e, "message", getattr(e, "batch_index_error_message", None))
    return ProduceResponse.BatchIndexAndErrorMessage(batch_index=index, batch_index_error_message=message)


def build_response(version, order, results):
    topics = {}
    out = []
    for topic, partition in order:
        t = topics.get(topic)
        if t is None:
            t = topics[topic] = ProduceResponse.TopicProduceResponse(name=topic, partition_responses=[])
            out.append(t)
        code, base_offset, append_time, log_start, record_errors, message = results[(topic, partition)]
        t.partition_responses.append(ProduceResponse.PartitionProduceResponse(
            index=partition,
            error_code=code,
            base_offset=base_offset,
            log_append_time_ms=append_time,
            log_start_offset=log_start,
            record_errors=[_record_error(e) for e in record_errors] if version >= 8 else [],
            error_message=message if version >= 8 else None,
        ))
    return ProduceResponse(responses=out, throttle_time_ms=0)


_PARTITION_V9 = struct.Struct(">ihqqqBBB")  # ... log_start_offset, no record errors, null message, no tags
_PARTITION_V8 = struct.Struct(">ihqqqih")  # ... log_start_offset, no record errors, null message
_PARTITION_V5 = struct.Struct(">ihqqq")  # index, error_code, base_offset, log_append_time, log_start
_PARTITION_V3 = struct.Struct(">ihqq")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_FIRST_FLEXIBLE = 9
_FIELDS = frozenset(ProduceResponse.__slots__)
_set = object.__setattr__


class ProduceAnswer(ProduceResponse):
    """The ProduceResponse of a handled request, encoded straight from the handler's results when
    no partition carries record errors or an error message (every answer without a refusal
    message); otherwise, and as soon as any field is read or set, it is the generated message
    that :func:`build_response` makes (same bytes either way: see the handler's tests)."""

    __slots__ = ("_version", "_order", "_results")

    def __init__(self, version, order, results):
        _set(self, "_version", version)
        _set(self, "_order", order)
        _set(self, "_results", results)

    def _materialize(self):
        order = self._order
        if order is not None:
            self._order = None
            built = build_response(self._version, order, self._results)
            for name in ProduceResponse.__slots__:
                _set(self, name, getattr(built, name))

    def __getattr__(self, name):
        # only reached for a field not set yet: the generated message's fields from here on
        if name in _FIELDS and self._order is not None:
            self._materialize()
            return getattr(self, name)
        raise AttributeError(name)

    def __setattr__(self, name, value):
        if name in _FIELDS:
            self._materialize()
        _set(self, name, value)

    def encode(self, version):
        if self._order is None or not 3 <= version <= 11:
            self._materialize()
            return ProduceResponse.encode(self, version)
        results = self._results
        topics = {}  # name -> [partition results], in first-appearance order as build_response
        for topic, partition in self._order:
            code, base_offset, append_time, log_start, record_errors, message = \
                results[(topic, partition)]
            if record_errors or message is not None:
                self._materialize()
                return ProduceResponse.encode(self, version)
            row = (partition, code, base_offset, append_time, log_start)
            parts = topics.get(topic)
            if parts is None:
                topics[topic] = [row]
            else:
                parts.append(row)
        if version >= _FIRST_FLEXIBLE:
            pack = _PARTITION_V9.pack
            buf = bytearray(write_uvarint(len(topics) + 1))
            for topic, rows in topics.items():
                name = topic.encode("utf-8")
                buf += write_uvarint(len(name) + 1)
                buf += name
                buf += write_uvarint(len(rows) + 1)
                for row in rows:
                    buf += pack(*row, 1, 0, 0)  # empty record_errors, null error_message, no tags
                buf.append(0)  # the topic's tagged fields
            buf += b"\0\0\0\0\0"  # throttle_time_ms 0, no tagged fields
            return [bytes(buf)]
        if version >= 8:
            pack, tail = _PARTITION_V8.pack, (0, -1)
        elif version >= 5:
            pack, tail = _PARTITION_V5.pack, ()
        else:
            pack, tail = _PARTITION_V3.pack, None
        buf = bytearray(_I32.pack(len(topics)))
        for topic, rows in topics.items():
            name = topic.encode("utf-8")
            buf += _I16.pack(len(name))
            buf += name
            buf += _I32.pack(len(rows))
            for row in rows:
                buf += pack(*row[:4]) if tail is None else pack(*row, *tail)
        buf += b"\0\0\0\0"  # throttle_time_ms 0
        return [bytes(buf)]


def error_response(request, code, message):
    body = request.body
    if body.acks == 0:
        return None  # close the connection, as Kafka does for a failed acks=0 produce
    order = [(t.name, pd.index) for t in body.topic_data for pd in t.partition_data]
    results = {tp: _error(code, message) for tp in order}
    return build_response(request.api_version, order, results)
