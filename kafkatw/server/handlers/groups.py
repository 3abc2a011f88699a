"""Classic group membership and group admin APIs: FindCoordinator (10), JoinGroup (11),
Heartbeat (12), LeaveGroup (13), SyncGroup (14), DescribeGroups (15), ListGroups (16),
DeleteGroups (42). Decoding requests and building responses per version only; the group logic
is :class:`kafkatw.coordinator.group.coordinator.GroupCoordinator` (``apis.group_coordinator``).
"""

from zope.interface import provider

from kafkatw.cluster.metadata import GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME
from kafkatw.protocol import errors
from kafkatw.protocol.messages import (
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    FindCoordinatorResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListGroupsResponse,
    SyncGroupResponse,
)
from kafkatw.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from kafkatw.server.handlers.metadata import (
    AUTHORIZED_OPERATIONS_OMITTED,
    DELETE,
    DESCRIBE,
    READ,
    broker_endpoint,
    operations_bitfield,
)
from kafkatw.server.interfaces import IApiHandler

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
GROUP_OPERATIONS = (READ, DESCRIBE, DELETE)


def _coordinator(apis):
    return apis.group_coordinator


def _park(request, d):
    """A Join/Sync waiting in the purgatory frees its handler slot (as a DelayedFetch does)."""
    request.mark_api_local_complete()
    return d


def _client_host(request):
    addr = request.context.client_address or ("", 0)
    return "/" + str(addr[0])


@provider(IApiHandler)
class FindCoordinator:
    API_KEY = 10
    VERSIONS = (0, 6)

    @staticmethod
    def handle(apis, request):
        body, version = request.body, request.api_version
        if version >= 4:
            keys = list(body.coordinator_keys)
            key_type = body.key_type
        else:
            keys = [body.key]
            key_type = body.key_type if version >= 1 else GROUP_KEY_TYPE
        answers = [_find(apis, request, key_type, key) if _may_describe_key(apis, request, key_type, key)
                   else ((errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if key_type == TRANSACTION_KEY_TYPE
                          else errors.GROUP_AUTHORIZATION_FAILED), -1, "", -1)
                   for key in keys]
        if version >= 4:
            return FindCoordinatorResponse(coordinators=[
                FindCoordinatorResponse.Coordinator(key=k, node_id=n, host=h, port=p, error_code=c,
                                                    error_message=_message(c))
                for k, (c, n, h, p) in zip(keys, answers)])
        code, node, host, port = answers[0]
        return FindCoordinatorResponse(error_code=code, error_message=_message(code) if version >= 1 else None,
                                       node_id=node, host=host, port=port)

    @staticmethod
    def error_response(request, code, message):
        body, version = request.body, request.api_version
        if version >= 4:
            return FindCoordinatorResponse(coordinators=[
                FindCoordinatorResponse.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=code,
                                                    error_message=message)
                for k in body.coordinator_keys])
        return FindCoordinatorResponse(error_code=code, error_message=message if version >= 1 else None,
                                       node_id=-1, host="", port=-1)


def _may_describe_key(apis, request, key_type, key):
    rtype = ResourceType.TRANSACTIONAL_ID if key_type == TRANSACTION_KEY_TYPE else ResourceType.GROUP
    return apis.allowed(request, AclOperation.DESCRIBE, rtype, key)


def _message(code):
    return "NONE" if code == errors.NONE else None


def _find(apis, request, key_type, key):
    """(error, node id, host, port) of the coordinator for ``key``."""
    unavailable = (errors.COORDINATOR_NOT_AVAILABLE, -1, "", -1)
    if key_type == GROUP_KEY_TYPE:
        coordinator = _coordinator(apis)
        if coordinator is None or not coordinator.is_active:
            return unavailable
        code = coordinator.ensure_offsets_topic()
        if code != errors.NONE:
            return (code, -1, "", -1)
        topic = GROUP_METADATA_TOPIC_NAME
    elif key_type == TRANSACTION_KEY_TYPE:
        coordinator = apis.txn_coordinator
        if coordinator is None or not coordinator.is_active:
            return unavailable
        code = coordinator.ensure_state_topic()
        if code != errors.NONE:
            return (code, -1, "", -1)
        topic = TRANSACTION_STATE_TOPIC_NAME
    else:
        return (errors.INVALID_REQUEST, -1, "", -1)
    if getattr(apis.replica_manager, "cluster_mode", False):
        # Kafka's handleFindCoordinatorRequest: the current leader of the key's internal
        # partition as the metadata cache knows it
        state = apis.metadata.partition_state(topic, coordinator.partition_for(key))
        node = -1 if state is None else state.leader
    else:
        node = apis.node_id
    # no live coordinator, or none on the request's listener: COORDINATOR_NOT_AVAILABLE
    found = broker_endpoint(apis, request.context.listener_name, node) if node >= 0 else None
    if found is None:
        return unavailable
    return (errors.NONE, node, found[0], found[1])


@provider(IApiHandler)
class JoinGroup:
    API_KEY = 11
    VERSIONS = (2, 9)  # Kafka 4.0 dropped v0-v1

    @staticmethod
    def handle(apis, request):
        body, version = request.body, request.api_version
        coordinator = _coordinator(apis)
        rebalance_timeout = body.rebalance_timeout_ms if version >= 1 else body.session_timeout_ms
        protocols = [(p.name, bytes(p.metadata)) for p in body.protocols]
        d = coordinator.handle_join_group(
            body.group_id, body.member_id, body.group_instance_id if version >= 5 else None,
            version >= 4, version >= 9, request.client_id or "", _client_host(request),
            rebalance_timeout, body.session_timeout_ms, body.protocol_type, protocols,
            body.reason if version >= 8 else None)
        d.addCallback(_join_response, version)
        return _park(request, d)

    @staticmethod
    def error_response(request, code, message):
        return _join_response_error(request.body.member_id, code, request.api_version)


def _join_response_error(member_id, code, version):
    return JoinGroupResponse(error_code=code, generation_id=-1, member_id=member_id or "",
                             leader="", protocol_name=None if version >= 7 else "", members=[])


def _join_response(result, version):
    members = [JoinGroupResponse.JoinGroupResponseMember(
        member_id=m, group_instance_id=i if version >= 5 else None, metadata=meta)
        for m, i, meta in result.members]
    return JoinGroupResponse(
        error_code=result.error, generation_id=result.generation_id,
        protocol_type=result.protocol_type if version >= 7 else None,
        protocol_name=result.protocol_name if (version >= 7 or result.protocol_name is not None) else "",
        leader=result.leader_id or "", skip_assignment=bool(result.skip_assignment) if version >= 9 else False,
        member_id=result.member_id or "", members=members)


@provider(IApiHandler)
class SyncGroup:
    API_KEY = 14
    VERSIONS = (0, 5)

    @staticmethod
    def handle(apis, request):
        body, version = request.body, request.api_version
        assignment = {a.member_id: bytes(a.assignment) for a in body.assignments}
        d = _coordinator(apis).handle_sync_group(
            body.group_id, body.generation_id, body.member_id,
            body.protocol_type if version >= 5 else None, body.protocol_name if version >= 5 else None,
            body.group_instance_id if version >= 3 else None, assignment)

        def respond(result):
            return SyncGroupResponse(
                error_code=result.error,
                protocol_type=result.protocol_type if version >= 5 else None,
                protocol_name=result.protocol_name if version >= 5 else None,
                assignment=result.assignment or b"")

        d.addCallback(respond)
        return _park(request, d)

    @staticmethod
    def error_response(request, code, message):
        return SyncGroupResponse(error_code=code, assignment=b"")


@provider(IApiHandler)
class Heartbeat:
    API_KEY = 12
    VERSIONS = (0, 4)

    @staticmethod
    def handle(apis, request):
        body, version = request.body, request.api_version
        code = _coordinator(apis).handle_heartbeat(
            body.group_id, body.member_id, body.group_instance_id if version >= 3 else None,
            body.generation_id)
        return HeartbeatResponse(error_code=code)

    @staticmethod
    def error_response(request, code, message):
        return HeartbeatResponse(error_code=code)


@provider(IApiHandler)
class LeaveGroup:
    API_KEY = 13
    VERSIONS = (0, 5)

    @staticmethod
    def handle(apis, request):
        body, version = request.body, request.api_version
        if version >= 3:
            leaving = [(m.member_id, m.group_instance_id, m.reason if version >= 5 else None)
                       for m in body.members]
        else:
            leaving = [(body.member_id, None, None)]
        top, results = _coordinator(apis).handle_leave_group(body.group_id, leaving)
        if version >= 3:
            return LeaveGroupResponse(error_code=top, members=[
                LeaveGroupResponse.MemberResponse(member_id=m, group_instance_id=i, error_code=c)
                for m, i, c in results])
        # v0-v2: one member; its error is the top-level error.
        if top == errors.NONE:
            for _, _, c in results:
                if c != errors.NONE:
                    top = c
                    break
        return LeaveGroupResponse(error_code=top)

    @staticmethod
    def error_response(request, code, message):
        return LeaveGroupResponse(error_code=code)


@provider(IApiHandler)
class DescribeGroups:
    API_KEY = 15
    VERSIONS = (0, 5)

    @staticmethod
    def handle(apis, request):
        body, version = request.body, request.api_version
        coordinator = _coordinator(apis)
        out = []
        for group_id in body.groups:
            if not apis.allowed(request, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
                out.append(DescribeGroupsResponse.DescribedGroup(
                    error_code=errors.GROUP_AUTHORIZATION_FAILED, group_id=group_id, group_state="",
                    protocol_type="", protocol_data="", members=[]))
                continue
            code, summary = coordinator.handle_describe_group(group_id)
            ops = AUTHORIZED_OPERATIONS_OMITTED
            if version >= 3 and body.include_authorized_operations:
                ops = (operations_bitfield(GROUP_OPERATIONS) if apis.authorizer is None
                       else request.authz.authorized_operations(ResourceType.GROUP, group_id))
            out.append(DescribeGroupsResponse.DescribedGroup(
                error_code=code, group_id=group_id, group_state=summary.state,
                protocol_type=summary.protocol_type, protocol_data=summary.protocol,
                authorized_operations=ops,
                members=[DescribeGroupsResponse.DescribedGroupMember(
                    member_id=m, group_instance_id=i if version >= 4 else None, client_id=c,
                    client_host=h, member_metadata=bytes(meta), member_assignment=bytes(a))
                    for m, i, c, h, meta, a in summary.members]))
        return DescribeGroupsResponse(groups=out)

    @staticmethod
    def error_response(request, code, message):
        return DescribeGroupsResponse(groups=[
            DescribeGroupsResponse.DescribedGroup(error_code=code, group_id=g, group_state="",
                                                  protocol_type="", protocol_data="", members=[])
            for g in request.body.groups])


@provider(IApiHandler)
class ListGroups:
    API_KEY = 16
    VERSIONS = (0, 5)

    @staticmethod
    def handle(apis, request):
        body, version = request.body, request.api_version
        code, groups = _coordinator(apis).handle_list_groups(
            body.states_filter if version >= 4 else (), body.types_filter if version >= 5 else ())
        if not apis.allowed(request, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            # without DESCRIBE on the cluster, only the groups the principal may describe
            groups = [g for g in groups if apis.allowed(request, AclOperation.DESCRIBE, ResourceType.GROUP, g[0])]
        return ListGroupsResponse(error_code=code, groups=[
            ListGroupsResponse.ListedGroup(group_id=g, protocol_type=pt,
                                           group_state=s if version >= 4 else "",
                                           group_type=t if version >= 5 else "")
            for g, pt, s, t in groups])

    @staticmethod
    def error_response(request, code, message):
        return ListGroupsResponse(error_code=code, groups=[])


@provider(IApiHandler)
class DeleteGroups:
    API_KEY = 42
    VERSIONS = (0, 2)

    @staticmethod
    def handle(apis, request):
        names = list(request.body.groups_names)
        denied = {g for g in names if not apis.allowed(request, AclOperation.DELETE, ResourceType.GROUP, g)}
        d = _coordinator(apis).handle_delete_groups([g for g in names if g not in denied])

        def respond(results):
            results = dict(results, **{g: errors.GROUP_AUTHORIZATION_FAILED for g in denied})
            return DeleteGroupsResponse(results=[
                DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=results[g])
                for g in dict.fromkeys(names)])

        return d.addCallback(respond)

    @staticmethod
    def error_response(request, code, message):
        return DeleteGroupsResponse(results=[
            DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=code)
            for g in dict.fromkeys(request.body.groups_names)])


HANDLERS = (FindCoordinator, JoinGroup, Heartbeat, LeaveGroup, SyncGroup, DescribeGroups,
            ListGroups, DeleteGroups)
