"""Transaction APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
WriteTxnMarkers (27), TxnOffsetCommit (28), DescribeTransactions (65), ListTransactions (66).
Request/response shapes per version and the topic checks Kafka's KafkaApis makes; the logic is
the transaction coordinator's (``apis.txn_coordinator``) and, for offsets, the group
coordinator's.
"""

from twisted.internet import defer
from zope.interface import provider

from kafkatw.coordinator.txn.markers import write_markers
from kafkatw.protocol import errors
from kafkatw.protocol.messages import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    DescribeTransactionsResponse,
    EndTxnResponse,
    ListTransactionsResponse,
    TxnOffsetCommitResponse,
    WriteTxnMarkersResponse,
)
from kafkatw.security.authorizer import AclOperation, ResourceType
from kafkatw.server.interfaces import IApiHandler


READ, WRITE, DESCRIBE = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE
TOPIC, TRANSACTIONAL_ID = ResourceType.TOPIC, ResourceType.TRANSACTIONAL_ID


def _fenced(code, version, first_version):
    """KIP-588: clients before ``first_version`` know PRODUCER_FENCED as INVALID_PRODUCER_EPOCH."""
    if code == errors.PRODUCER_FENCED and version < first_version:
        return errors.INVALID_PRODUCER_EPOCH
    return code


def _unavailable(apis):
    return None if apis.txn_coordinator is not None else errors.COORDINATOR_NOT_AVAILABLE


# -- AddPartitionsToTxn ------------------------------------------------------------------------

APT = AddPartitionsToTxnResponse


def _topic_results(codes):
    """[AddPartitionsToTxnTopicResult] from {(topic, partition): code}, in first-seen order."""
    by_topic = {}
    for (topic, p), code in codes.items():
        by_topic.setdefault(topic, []).append(APT.AddPartitionsToTxnPartitionResult(
            partition_index=p, partition_error_code=code))
    return [APT.AddPartitionsToTxnTopicResult(name=t, results_by_partition=ps)
            for t, ps in by_topic.items()]


def _add_one(apis, tid, pid, epoch, topics, verify_only, version, request=None):
    """A Deferred of {(topic, partition): code} for one transaction. With ``request`` (a
    client's, v3 and below) each topic needs WRITE: a denied one is TOPIC_AUTHORIZATION_FAILED
    (an internal topic always is, as in Kafka)."""
    partitions = [(t.name, p) for t in topics for p in t.partitions]
    failed = {}
    for tp in partitions:
        if request is not None and apis.authorizer is not None and \
                (apis.metadata.is_internal(tp[0]) or not apis.allowed(request, WRITE, TOPIC, tp[0])):
            failed[tp] = errors.TOPIC_AUTHORIZATION_FAILED
        elif not apis.metadata.contains_partition(*tp):
            failed[tp] = errors.UNKNOWN_TOPIC_OR_PARTITION
    if failed:
        # Kafka: nothing is added when any partition is refused or unknown.
        return defer.succeed({tp: failed.get(tp, errors.OPERATION_NOT_ATTEMPTED) for tp in partitions})
    coordinator = apis.txn_coordinator
    if verify_only:
        return defer.succeed(coordinator.handle_verify_partitions(tid, pid, epoch, partitions))
    d = coordinator.handle_add_partitions(tid, pid, epoch, partitions)
    return d.addCallback(lambda code: {tp: _fenced(code, version, 2) for tp in partitions})


@provider(IApiHandler)
class AddPartitionsToTxn:
    API_KEY = 24
    VERSIONS = (0, 5)

    @staticmethod
    def handle(apis, request):
        body, version = request.body, request.api_version
        code = _unavailable(apis)
        if code is not None:
            return AddPartitionsToTxn.error_response(request, code, None)
        if version < 4:
            d = _add_one(apis, body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
                         body.v3_and_below_producer_epoch, body.v3_and_below_topics, False, version,
                         request)
            return d.addCallback(lambda codes: APT(throttle_time_ms=0,
                                                   results_by_topic_v3_and_below=_topic_results(codes)))
        ds = [_add_one(apis, t.transactional_id, t.producer_id, t.producer_epoch, t.topics,
                       t.verify_only, version) for t in body.transactions]

        def respond(results):
            return APT(throttle_time_ms=0, error_code=errors.NONE, results_by_transaction=[
                APT.AddPartitionsToTxnResult(transactional_id=t.transactional_id,
                                             topic_results=_topic_results(codes))
                for t, codes in zip(body.transactions, results)])

        return defer.gatherResults(ds).addCallback(respond)

    @staticmethod
    def error_response(request, code, message):
        body, version = request.body, request.api_version
        if version < 4:
            return APT(throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(
                {(t.name, p): code for t in body.v3_and_below_topics for p in t.partitions}))
        return APT(throttle_time_ms=0, error_code=code, results_by_transaction=[])


# -- AddOffsetsToTxn ---------------------------------------------------------------------------

@provider(IApiHandler)
class AddOffsetsToTxn:
    API_KEY = 25
    VERSIONS = (0, 4)

    @staticmethod
    def handle(apis, request):
        body, version = request.body, request.api_version
        code = _unavailable(apis)
        if code is not None:
            return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)
        d = apis.txn_coordinator.handle_add_offsets(body.transactional_id, body.producer_id,
                                                    body.producer_epoch, body.group_id)
        return d.addCallback(lambda code: AddOffsetsToTxnResponse(
            throttle_time_ms=0, error_code=_fenced(code, version, 2)))

    @staticmethod
    def error_response(request, code, message):
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)


# -- EndTxn ------------------------------------------------------------------------------------

@provider(IApiHandler)
class EndTxn:
    API_KEY = 26
    VERSIONS = (0, 4)  # v5 is KIP-890 part 2 (transaction.version 2), not built

    @staticmethod
    def handle(apis, request):
        body, version = request.body, request.api_version
        code = _unavailable(apis)
        if code is not None:
            return EndTxnResponse(throttle_time_ms=0, error_code=code)
        d = apis.txn_coordinator.handle_end_transaction(body.transactional_id, body.producer_id,
                                                        body.producer_epoch, body.committed)
        return d.addCallback(lambda code: EndTxnResponse(
            throttle_time_ms=0, error_code=_fenced(code, version, 2)))

    @staticmethod
    def error_response(request, code, message):
        return EndTxnResponse(throttle_time_ms=0, error_code=code)


# -- WriteTxnMarkers ---------------------------------------------------------------------------

WTM = WriteTxnMarkersResponse


def _marker_result(codes, producer_id, partitions):
    by_topic = {}
    for tp in partitions:
        by_topic.setdefault(tp[0], []).append(WTM.WritableTxnMarkerPartitionResult(
            partition_index=tp[1], error_code=codes.get(tp, errors.UNKNOWN_TOPIC_OR_PARTITION)))
    return WTM.WritableTxnMarkerResult(producer_id=producer_id, topics=[
        WTM.WritableTxnMarkerTopicResult(name=t, partitions=ps) for t, ps in by_topic.items()])


@provider(IApiHandler)
class WriteTxnMarkers:
    """What another broker's coordinator sends a partition leader; on one node the coordinator
    writes its markers directly, through the same function."""

    API_KEY = 27
    VERSIONS = (1, 1)  # Kafka 4.0 removed v0

    @staticmethod
    def handle(apis, request):
        ds = []
        for m in request.body.markers:
            partitions = [(t.name, p) for t in m.topics for p in t.partition_indexes]
            known = [tp for tp in partitions if apis.metadata.contains_partition(*tp)]
            d = write_markers(apis.replica_manager, apis.group_coordinator, m.producer_id,
                              m.producer_epoch, m.coordinator_epoch, m.transaction_result,
                              known, apis.now_ms(),
                              timeout_ms=apis.config_value("request.timeout.ms", 30000))
            ds.append(d.addCallback(_marker_result, m.producer_id, partitions))
        return defer.gatherResults(ds).addCallback(lambda out: WTM(markers=out))

    @staticmethod
    def error_response(request, code, message):
        return WTM(markers=[WTM.WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
            WTM.WritableTxnMarkerTopicResult(name=t.name, partitions=[
                WTM.WritableTxnMarkerPartitionResult(partition_index=p, error_code=code)
                for p in t.partition_indexes]) for t in m.topics])
            for m in request.body.markers])


# -- TxnOffsetCommit ---------------------------------------------------------------------------

TOC = TxnOffsetCommitResponse


def _toc_response(order, codes):
    by_topic = {}
    for tp in order:
        by_topic.setdefault(tp[0], []).append(TOC.TxnOffsetCommitResponsePartition(
            partition_index=tp[1], error_code=codes.get(tp, errors.NONE)))
    return TOC(throttle_time_ms=0, topics=[TOC.TxnOffsetCommitResponseTopic(name=t, partitions=ps)
                                           for t, ps in by_topic.items()])


@provider(IApiHandler)
class TxnOffsetCommit:
    API_KEY = 28
    VERSIONS = (0, 4)  # v5 is KIP-890 part 2, not built

    @staticmethod
    def handle(apis, request):
        body, version = request.body, request.api_version
        order = []
        codes = {}
        to_commit = {}
        for t in body.topics:
            allowed = apis.allowed(request, READ, TOPIC, t.name)
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                order.append(tp)
                if not allowed:  # Kafka: the other topics' offsets are still committed
                    codes[tp] = errors.TOPIC_AUTHORIZATION_FAILED
                    continue
                if not apis.metadata.contains_partition(*tp):
                    codes[tp] = errors.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                epoch = p.committed_leader_epoch if version >= 2 else -1
                to_commit[tp] = (p.committed_offset, epoch, p.committed_metadata)
        if not to_commit:
            return _toc_response(order, codes)
        txn = apis.txn_coordinator
        group = apis.group_coordinator
        if txn is None or group is None:
            return _toc_response(order, {tp: errors.COORDINATOR_NOT_AVAILABLE for tp in order})
        # KIP-890 part 1: the group's offsets partition must be in this producer's ongoing
        # transaction (AddOffsetsToTxn), else the commit would hang outside any transaction.
        # In a cluster the transaction's coordinator may be another broker: it is asked.
        offsets_tp = ("__consumer_offsets", group.partition_for(body.group_id))
        verified = txn.verify_partitions(body.transactional_id, body.producer_id,
                                         body.producer_epoch, [offsets_tp])

        def commit(verified):
            verified = verified[offsets_tp]
            if verified != errors.NONE:
                if verified == errors.NETWORK_EXCEPTION:
                    # Kafka's maybeConvertOffsetCommitError: older clients retry this one
                    verified = errors.COORDINATOR_LOAD_IN_PROGRESS
                code = _fenced(verified, version, 3)
                codes.update({tp: code for tp in to_commit})
                return _toc_response(order, codes)
            d = group.handle_txn_commit_offsets(
                body.group_id, body.producer_id, body.producer_epoch,
                body.member_id if version >= 3 else None,
                body.group_instance_id if version >= 3 else None,
                body.generation_id if version >= 3 else -1, to_commit)
            return d.addCallback(respond)

        def respond(results):
            codes.update(results)
            return _toc_response(order, codes)

        if isinstance(verified, defer.Deferred):
            request.mark_api_local_complete()  # waiting on another broker: slot freed
            return verified.addCallback(commit)
        return commit(verified)

    @staticmethod
    def error_response(request, code, message):
        order = [(t.name, p.partition_index) for t in request.body.topics for p in t.partitions]
        return _toc_response(order, {tp: code for tp in order})


# -- DescribeTransactions / ListTransactions ---------------------------------------------------

DTR = DescribeTransactionsResponse


@provider(IApiHandler)
class DescribeTransactions:
    API_KEY = 65
    VERSIONS = (0, 0)

    @staticmethod
    def handle(apis, request):
        states = []
        for tid in request.body.transactional_ids:
            if not apis.allowed(request, DESCRIBE, TRANSACTIONAL_ID, tid):
                code, txn = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None  # Kafka: per id
            elif apis.txn_coordinator is None:
                code, txn = errors.COORDINATOR_NOT_AVAILABLE, None
            else:
                code, txn = apis.txn_coordinator.handle_describe_transactions(tid)
            if txn is None:
                states.append(DTR.TransactionState(
                    error_code=code, transactional_id=tid, transaction_state="",
                    transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                    producer_epoch=-1, topics=[]))
                continue
            by_topic = {}
            for topic, p in sorted(txn.partitions):
                if apis.allowed(request, DESCRIBE, TOPIC, topic):  # Kafka hides the others
                    by_topic.setdefault(topic, []).append(p)
            states.append(DTR.TransactionState(
                error_code=errors.NONE, transactional_id=tid, transaction_state=txn.state,
                transaction_timeout_ms=txn.txn_timeout_ms,
                transaction_start_time_ms=txn.txn_start_timestamp, producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                topics=[DTR.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]))
        return DTR(throttle_time_ms=0, transaction_states=states)

    @staticmethod
    def error_response(request, code, message):
        return DTR(throttle_time_ms=0, transaction_states=[DTR.TransactionState(
            error_code=code, transactional_id=tid, transaction_state="", transaction_timeout_ms=0,
            transaction_start_time_ms=-1, producer_id=-1, producer_epoch=-1, topics=[])
            for tid in request.body.transactional_ids])


@provider(IApiHandler)
class ListTransactions:
    API_KEY = 66
    VERSIONS = (0, 1)

    @staticmethod
    def handle(apis, request):
        body, version = request.body, request.api_version
        if apis.txn_coordinator is None:
            return ListTransactions.error_response(request, errors.COORDINATOR_NOT_AVAILABLE, None)
        duration = body.duration_filter if version >= 1 else -1
        code, unknown, txns = apis.txn_coordinator.handle_list_transactions(
            body.state_filters, body.producer_id_filters, duration)
        # Kafka: only the ids the principal may describe
        txns = [t for t in txns if apis.allowed(request, DESCRIBE, TRANSACTIONAL_ID, t.transactional_id)]
        return ListTransactionsResponse(
            throttle_time_ms=0, error_code=code, unknown_state_filters=unknown,
            transaction_states=[ListTransactionsResponse.TransactionState(
                transactional_id=t.transactional_id, producer_id=t.producer_id,
                transaction_state=t.state) for t in txns])

    @staticmethod
    def error_response(request, code, message):
        return ListTransactionsResponse(throttle_time_ms=0, error_code=code,
                                        unknown_state_filters=[], transaction_states=[])


HANDLERS = (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, WriteTxnMarkers, TxnOffsetCommit,
            DescribeTransactions, ListTransactions)
