"""Committed-offset APIs of groups: OffsetCommit (8), OffsetFetch (9, several groups at once
v8+), OffsetDelete (47). Request/response shapes per version and the topic existence checks
Kafka's KafkaApis makes; validation and storage are the group coordinator's.
"""

from twisted.internet import defer
from zope.interface import provider

from kafkatw.coordinator.group.coordinator import UNSTABLE_OFFSET
from kafkatw.protocol import errors
from kafkatw.protocol.messages import (
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
)
from kafkatw.security.authorizer import AclOperation, ResourceType
from kafkatw.server.interfaces import IApiHandler

READ, DESCRIBE = AclOperation.READ, AclOperation.DESCRIBE
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP

INVALID_OFFSET = -1


def _by_topic(order, partition_result, topic_cls):
    """Topic results in first-seen order of ``order`` ((topic, partition) pairs), each holding
    ``partition_result(tp)`` of its partitions in that order."""
    topics = {}
    for tp in order:
        topics.setdefault(tp[0], []).append(partition_result(tp))
    return [topic_cls(name=name, partitions=parts) for name, parts in topics.items()]


@provider(IApiHandler)
class OffsetCommit:
    API_KEY = 8
    VERSIONS = (2, 9)  # Kafka 4.0 dropped v0-v1

    @staticmethod
    def handle(apis, request):
        body, version = request.body, request.api_version
        errors_by_tp = {}
        to_commit = {}
        order = []
        for t in body.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                order.append(tp)
                if not apis.allowed(request, READ, TOPIC, t.name):
                    errors_by_tp[tp] = errors.TOPIC_AUTHORIZATION_FAILED
                    continue
                if not apis.metadata.contains_partition(t.name, p.partition_index):
                    errors_by_tp[tp] = errors.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                epoch = p.committed_leader_epoch if version >= 6 else -1
                to_commit[tp] = (p.committed_offset, epoch, p.committed_metadata)
        retention = body.retention_time_ms if 2 <= version <= 4 else -1
        if to_commit:
            d = apis.group_coordinator.handle_commit_offsets(
                body.group_id, body.member_id, body.group_instance_id if version >= 7 else None,
                body.generation_id_or_member_epoch, to_commit, retention, api_version=version)
        else:
            d = defer.succeed({})

        def respond(results):
            errors_by_tp.update(results)
            return _commit_response(order, errors_by_tp)

        return d.addCallback(respond)

    @staticmethod
    def error_response(request, code, message):
        order = [(t.name, p.partition_index) for t in request.body.topics for p in t.partitions]
        return _commit_response(order, {tp: code for tp in order})


def _commit_response(order, codes):
    return OffsetCommitResponse(topics=_by_topic(
        order, lambda tp: OffsetCommitResponse.OffsetCommitResponsePartition(
            partition_index=tp[1], error_code=codes.get(tp, errors.NONE)),
        OffsetCommitResponse.OffsetCommitResponseTopic))


@provider(IApiHandler)
class OffsetFetch:
    API_KEY = 9
    VERSIONS = (1, 9)  # Kafka 4.0 dropped v0

    @staticmethod
    def handle(apis, request):
        body, version = request.body, request.api_version
        coordinator = apis.group_coordinator
        if version >= 8:
            groups = []
            for g in body.groups:
                if not apis.allowed(request, DESCRIBE, GROUP, g.group_id):
                    groups.append(OffsetFetchResponse.OffsetFetchResponseGroup(
                        group_id=g.group_id, topics=[], error_code=errors.GROUP_AUTHORIZATION_FAILED))
                    continue
                wanted = None if g.topics is None else [
                    (t.name, p) for t in g.topics for p in t.partition_indexes]
                code, offsets = coordinator.handle_fetch_offsets(
                    g.group_id, wanted, body.require_stable,
                    g.member_id if version >= 9 else None, g.member_epoch if version >= 9 else None)
                topics = [] if code != errors.NONE else _fetch_topics(
                    offsets, wanted, OffsetFetchResponse.OffsetFetchResponseTopics,
                    OffsetFetchResponse.OffsetFetchResponsePartitions, _may_describe(apis, request))
                groups.append(OffsetFetchResponse.OffsetFetchResponseGroup(
                    group_id=g.group_id, topics=topics, error_code=code))
            return OffsetFetchResponse(groups=groups)
        if not apis.allowed(request, DESCRIBE, GROUP, body.group_id):
            return OffsetFetch.error_response(request, errors.GROUP_AUTHORIZATION_FAILED, None)
        wanted = None if body.topics is None else [
            (t.name, p) for t in body.topics for p in t.partition_indexes]
        code, offsets = coordinator.handle_fetch_offsets(
            body.group_id, wanted, body.require_stable if version >= 7 else False)
        if code != errors.NONE:
            return OffsetFetch.error_response(request, code, None)
        return OffsetFetchResponse(
            error_code=code if version >= 2 else errors.NONE,
            topics=_fetch_topics(offsets, wanted, OffsetFetchResponse.OffsetFetchResponseTopic,
                                 OffsetFetchResponse.OffsetFetchResponsePartition, _may_describe(apis, request)))

    @staticmethod
    def error_response(request, code, message):
        body, version = request.body, request.api_version
        if version >= 8:
            return OffsetFetchResponse(groups=[
                OffsetFetchResponse.OffsetFetchResponseGroup(group_id=g.group_id, topics=[], error_code=code)
                for g in body.groups])
        if version >= 2:
            return OffsetFetchResponse(error_code=code, topics=[])
        # v1: the error on every requested partition
        topics = []
        for t in body.topics or []:
            topics.append(OffsetFetchResponse.OffsetFetchResponseTopic(name=t.name, partitions=[
                OffsetFetchResponse.OffsetFetchResponsePartition(
                    partition_index=p, committed_offset=INVALID_OFFSET, metadata="", error_code=code)
                for p in t.partition_indexes]))
        return OffsetFetchResponse(topics=topics)


def _may_describe(apis, request):
    return lambda topic: apis.allowed(request, DESCRIBE, TOPIC, topic)


def _fetch_topics(offsets, wanted, topic_cls, partition_cls, may_describe=None):
    """Requested partitions the principal may not describe answer TOPIC_AUTHORIZATION_FAILED;
    with all partitions asked for, those are left out (Kafka's OffsetFetch)."""
    if may_describe is not None and wanted is None:
        offsets = {tp: om for tp, om in offsets.items() if may_describe(tp[0])}

    def partition_result(tp):
        if may_describe is not None and wanted is not None and not may_describe(tp[0]):
            return partition_cls(partition_index=tp[1], committed_offset=INVALID_OFFSET,
                                 committed_leader_epoch=-1, metadata="",
                                 error_code=errors.TOPIC_AUTHORIZATION_FAILED)
        om = offsets.get(tp)
        if om is None or om is UNSTABLE_OFFSET:
            return partition_cls(partition_index=tp[1], committed_offset=INVALID_OFFSET,
                                 committed_leader_epoch=-1, metadata="",
                                 error_code=errors.NONE if om is None else errors.UNSTABLE_OFFSET_COMMIT)
        return partition_cls(partition_index=tp[1], committed_offset=om.offset,
                             committed_leader_epoch=om.leader_epoch, metadata=om.metadata,
                             error_code=errors.NONE)

    return _by_topic(wanted if wanted is not None else sorted(offsets), partition_result, topic_cls)


@provider(IApiHandler)
class OffsetDelete:
    API_KEY = 47
    VERSIONS = (0, 0)

    @staticmethod
    def handle(apis, request):
        body = request.body
        order = []
        known = []
        codes = {}
        for t in body.topics:
            # Kafka: READ on each topic (DELETE on the group is checked for the whole request)
            allowed = apis.allowed(request, READ, TOPIC, t.name)
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                order.append(tp)
                if not allowed:
                    codes[tp] = errors.TOPIC_AUTHORIZATION_FAILED
                elif apis.metadata.contains_partition(t.name, p.partition_index):
                    known.append(tp)
                else:
                    codes[tp] = errors.UNKNOWN_TOPIC_OR_PARTITION
        d = apis.group_coordinator.handle_delete_offsets(body.group_id, known)

        def respond(result):
            group_error, partition_errors = result
            if group_error != errors.NONE:
                return OffsetDeleteResponse(error_code=group_error, topics=[])
            codes.update(partition_errors)
            return OffsetDeleteResponse(error_code=errors.NONE, topics=_by_topic(
                order, lambda tp: OffsetDeleteResponse.OffsetDeleteResponsePartition(
                    partition_index=tp[1], error_code=codes.get(tp, errors.NONE)),
                OffsetDeleteResponse.OffsetDeleteResponseTopic))

        return d.addCallback(respond)

    @staticmethod
    def error_response(request, code, message):
        return OffsetDeleteResponse(error_code=code, topics=[])


HANDLERS = (OffsetCommit, OffsetFetch, OffsetDelete)
