"""KIP-848 consumer group APIs: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).
Decoding requests, authorizing the group and building responses only; the protocol is
:class:`kafkatw.coordinator.group.consumer_coordinator.ConsumerGroupCoordinator`
(``apis.group_coordinator.consumer``).
"""

from zope.interface import provider

from kafkatw.protocol import errors
from kafkatw.protocol.messages import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
)
from kafkatw.security.authorizer import AclOperation, ResourceType
from kafkatw.server.handlers.groups import GROUP_OPERATIONS, _client_host
from kafkatw.server.handlers.metadata import AUTHORIZED_OPERATIONS_OMITTED, operations_bitfield
from kafkatw.server.interfaces import IApiHandler


def _heartbeat_response(result):
    assignment = None
    if result.assignment is not None:
        TP = ConsumerGroupHeartbeatResponse.TopicPartitions
        assignment = ConsumerGroupHeartbeatResponse.Assignment(topic_partitions=[
            TP(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(result.assignment.items())])
    return ConsumerGroupHeartbeatResponse(
        error_code=result.error, error_message=result.message, member_id=result.member_id,
        member_epoch=result.member_epoch, heartbeat_interval_ms=result.heartbeat_interval_ms,
        assignment=assignment)


@provider(IApiHandler)
class ConsumerGroupHeartbeat:
    API_KEY = 68
    VERSIONS = (0, 1)

    @staticmethod
    def handle(apis, request):
        body, version = request.body, request.api_version
        if not apis.allowed(request, AclOperation.READ, ResourceType.GROUP, body.group_id):
            return ConsumerGroupHeartbeat.error_response(
                request, errors.GROUP_AUTHORIZATION_FAILED, None)
        owned = None
        if body.topic_partitions is not None:
            owned = {}
            for tp in body.topic_partitions:
                if tp.partitions:
                    owned[tp.topic_id] = owned.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
        may_describe = None
        if apis.authorizer is not None:
            def may_describe(topic):
                return apis.allowed(request, AclOperation.DESCRIBE, ResourceType.TOPIC, topic)
        d = apis.group_coordinator.consumer.heartbeat(
            version, body.group_id, body.member_id, body.member_epoch, body.instance_id,
            body.rack_id, body.rebalance_timeout_ms,
            None if body.subscribed_topic_names is None else list(body.subscribed_topic_names),
            body.subscribed_topic_regex if version >= 1 else None, body.server_assignor, owned,
            request.client_id or "", _client_host(request), may_describe)
        return d.addCallback(_heartbeat_response)

    @staticmethod
    def error_response(request, code, message):
        return ConsumerGroupHeartbeatResponse(error_code=code, error_message=message,
                                              member_id=None, member_epoch=0,
                                              heartbeat_interval_ms=0)


def _describe_assignment(consumer, assignment):
    TP = ConsumerGroupDescribeResponse.TopicPartitions
    out = []
    for t, ps in sorted(assignment.items()):
        name = consumer.topic_name(t)
        if name is not None:
            out.append(TP(topic_id=t, topic_name=name, partitions=sorted(ps)))
    return ConsumerGroupDescribeResponse.Assignment(topic_partitions=out)


@provider(IApiHandler)
class ConsumerGroupDescribe:
    API_KEY = 69
    VERSIONS = (0, 0)

    @staticmethod
    def handle(apis, request):
        body = request.body
        coordinator = apis.group_coordinator
        consumer = coordinator.consumer
        out = []
        for group_id in body.group_ids:
            described = ConsumerGroupDescribeResponse.DescribedGroup(
                group_id=group_id, group_state="", group_epoch=0, assignment_epoch=0,
                assignor_name="", members=[])
            out.append(described)
            if not apis.allowed(request, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
                described.error_code = errors.GROUP_AUTHORIZATION_FAILED
                continue
            error = coordinator.validate_group_status(group_id, "ConsumerGroupDescribe")
            if error is not None:
                described.error_code = error
                continue
            group = consumer.groups.get(group_id)
            if group is None:
                described.error_code = errors.GROUP_ID_NOT_FOUND
                classic = coordinator.groups.get(group_id)
                described.error_message = ("Group %s is not a consumer group." % group_id
                                           if classic is not None and classic.protocol_type
                                           else "Group %s not found." % group_id)
                continue
            described.group_state = group.state
            described.group_epoch = group.group_epoch
            described.assignment_epoch = group.assignment_epoch
            described.assignor_name = group.assignor_name or consumer.assignors[0].name
            if body.include_authorized_operations:
                described.authorized_operations = (
                    operations_bitfield(GROUP_OPERATIONS) if apis.authorizer is None
                    else request.authz.authorized_operations(ResourceType.GROUP, group_id))
            else:
                described.authorized_operations = AUTHORIZED_OPERATIONS_OMITTED
            described.members = [ConsumerGroupDescribeResponse.Member(
                member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed_topic_names or ()),
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=_describe_assignment(consumer, m.assigned),
                target_assignment=_describe_assignment(consumer, group.target.get(m.member_id, {})))
                for m in group.members.values()]
        return ConsumerGroupDescribeResponse(groups=out)

    @staticmethod
    def error_response(request, code, message):
        return ConsumerGroupDescribeResponse(groups=[
            ConsumerGroupDescribeResponse.DescribedGroup(
                error_code=code, error_message=message, group_id=g, group_state="",
                group_epoch=0, assignment_epoch=0, assignor_name="", members=[])
            for g in request.body.group_ids])


HANDLERS = (ConsumerGroupHeartbeat, ConsumerGroupDescribe)
