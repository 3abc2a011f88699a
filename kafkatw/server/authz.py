"""Which actions each API needs authorized, on which resources (Kafka's checks in ``KafkaApis``).

Owns, per API key, the list of :class:`Action` s a request asks for (decided in one
``authorize`` call before its handler runs, so an authorizer answering with a Deferred parks the
request instead of blocking) and the whole-request gates (one group, the cluster, a
transactional id) answered with the API's error response. Per-topic filtering (partial answers)
is in the handlers, which ask :func:`allowed`. It does not decide anything itself.
"""

from types import SimpleNamespace

from twisted.internet import defer
from twisted.logger import Logger

from kafkatw.protocol import errors
from kafkatw.security.authorizer import (
    ALLOWED,
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    Action,
    AclOperation,
    AuthorizableRequestContext,
    ResourcePattern,
    ResourceType,
)
from kafkatw.server.handlers.fetch import replica_of

log = Logger(namespace="kafkatw.server.authz")

# The enum members as plain attributes: on Python 3.11 reading a member off its Enum class costs
# about ten times a plain attribute, and every request reads a few here.
Op = SimpleNamespace(**AclOperation.__members__)
RT = SimpleNamespace(**ResourceType.__members__)

CLUSTER = ResourcePattern(RT.CLUSTER, CLUSTER_NAME)
GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE = 0, 1
# DescribeConfigs/AlterConfigs resource types (ConfigResource.Type)
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER = 2, 4, 8

# APIs anyone may call (before authentication, or answering only about the connection)
UNCHECKED = frozenset((17, 18, 36))  # SaslHandshake, ApiVersions, SaslAuthenticate


_tuple_new = tuple.__new__  # makes a named tuple without its Python-level __new__


def request_context(request):
    """The :class:`AuthorizableRequestContext` of ``request``. It holds no reference to the
    request (which holds the decisions made with it: a cycle there left every request to the
    garbage collector)."""
    ctx = request.context
    return _tuple_new(AuthorizableRequestContext, (
        ctx.principal, ctx.client_address[0], ctx.listener_name, ctx.security_protocol,
        request.api_key, request.api_version, request.client_id, request.correlation_id))


# One Action object per distinct action, reused by every request naming it: building the attrs
# objects (enum converters) was most of what authorizing a small request cost, and the ACL
# authorizer caches its decisions by the Action's identity. Cleared when it gets large (names
# come from clients).
_MEMO = {}
_MEMO_LIMIT = 100000


def _act(op, rtype, name, count=1, log_if_allowed=True, log_if_denied=True):
    key = (op, rtype, name, count, log_if_allowed, log_if_denied)
    action = _MEMO.get(key)
    if action is None:
        if len(_MEMO) >= _MEMO_LIMIT:
            _MEMO.clear()
        action = _MEMO[key] = Action(op, ResourcePattern(rtype, name), count, log_if_allowed, log_if_denied)
    return action


def _cluster(op, log_if_denied=True):
    return _act(op, RT.CLUSTER, CLUSTER_NAME, 1, True, log_if_denied)


def _topics(op, names, log_if_denied=True):
    if len(names) == 1:  # the common produce / fetch of one topic
        n = names[0]
        return [] if n is None else [_act(op, RT.TOPIC, n, 1, True, log_if_denied)]
    counts = {}
    for n in names:
        if n is not None:
            counts[n] = counts.get(n, 0) + 1
    return [_act(op, RT.TOPIC, n, c, True, log_if_denied) for n, c in counts.items()]


def _ops(rtype, name):
    """Every supported operation on one resource, for authorized-operations bit sets (not logged)."""
    return [_act(op, rtype, name, 1, False, False) for op in SUPPORTED_OPERATIONS[rtype]]


# -- per API: the actions a request needs --------------------------------------------------

# topic name -> its WRITE action: the one action of most produce requests, found
# without the two calls of _topics and _act
_WRITE_TOPIC = {}


def _produce(apis, req):
    b = req.body
    data = b.topic_data
    if len(data) == 1 and b.transactional_id is None:
        action = _WRITE_TOPIC.get(data[0].name)
        if action is not None:
            return [action]
        if len(_WRITE_TOPIC) >= _MEMO_LIMIT:
            _WRITE_TOPIC.clear()
        acts = _topics(Op.WRITE, [data[0].name])
        if acts:
            _WRITE_TOPIC[data[0].name] = acts[0]
        return acts
    acts = _topics(Op.WRITE, [t.name for t in data])
    if b.transactional_id is not None:
        acts.append(_act(Op.WRITE, RT.TRANSACTIONAL_ID, b.transactional_id))
    return acts


def _fetch(apis, req):
    b = req.body
    if replica_of(req)[0] >= 0:
        return [_cluster(Op.CLUSTER_ACTION)]
    meta = apis.metadata
    names = []
    for t in b.topics:
        name = getattr(t, "topic", None)
        if not name and getattr(t, "topic_id", None) is not None:
            info = meta.topic_by_id(t.topic_id)
            name = info.name if info is not None else None
        names.append(name)
    # an incremental fetch reads its session's partitions too, named or not (Kafka authorizes
    # every partition of the fetch context): planned, so an asynchronous authorizer decides them
    session_id, epoch = getattr(b, "session_id", 0), getattr(b, "session_epoch", -1)
    manager = apis.fetch_manager
    if session_id and epoch > 0 and manager is not None:
        session = manager.cache.get(session_id)
        if session is not None:
            names.extend(getattr(key, "topic", None) for key in session.partitions)
    return _topics(Op.READ, names)


def _metadata(apis, req):
    b = req.body
    meta = apis.metadata
    version = req.api_version
    if b.topics is None or (version == 0 and not b.topics):
        names = list(meta.topics)
        acts = _topics(Op.DESCRIBE, names, log_if_denied=False)  # filtered silently, as Kafka does
    else:
        names = []
        for t in b.topics:
            name = t.name
            if name is None and getattr(t, "topic_id", None) is not None:
                info = meta.topic_by_id(t.topic_id)
                name = info.name if info is not None else None
            names.append(name)
        acts = _topics(Op.DESCRIBE, names)
        missing = [n for n in names if n is not None and meta.get_topic(n) is None]
        if missing:
            acts.append(_cluster(Op.CREATE, log_if_denied=False))
            acts.extend(_topics(Op.CREATE, missing))
    if version >= 8 and getattr(b, "include_topic_authorized_operations", False):
        for n in set(n for n in names if n is not None):
            acts.extend(_ops(RT.TOPIC, n))
    if 8 <= version <= 10 and getattr(b, "include_cluster_authorized_operations", False):
        acts.extend(_ops(RT.CLUSTER, CLUSTER_NAME))
    return acts


def _list_offsets(apis, req):
    return _topics(Op.DESCRIBE, [t.name for t in req.body.topics])


def _offset_commit(apis, req):
    b = req.body
    return [_act(Op.READ, RT.GROUP, b.group_id)] + _topics(Op.READ, [t.name for t in b.topics])


def _offset_fetch(apis, req):
    b = req.body
    acts = []
    every_topic = False
    for group_id, topics in [(g.group_id, g.topics) for g in b.groups] or [(b.group_id, b.topics)]:
        acts.append(_act(Op.DESCRIBE, RT.GROUP, group_id))
        if topics is None:
            every_topic = True
        else:
            acts.extend(_topics(Op.DESCRIBE, [t.name for t in topics]))
    if every_topic:
        # a group's offsets of every committed topic: filtered by what the principal may describe
        acts.extend(_topics(Op.DESCRIBE, list(apis.metadata.topics), log_if_denied=False))
    return acts


def _coordinator_keys(req):
    b = req.body
    keys = list(getattr(b, "coordinator_keys", None) or [])
    if not keys and b.key is not None:
        keys = [b.key]
    return keys, getattr(b, "key_type", GROUP_KEY_TYPE)


def _find_coordinator(apis, req):
    keys, key_type = _coordinator_keys(req)
    rtype = RT.TRANSACTIONAL_ID if key_type == TRANSACTION_KEY_TYPE else RT.GROUP
    return [_act(Op.DESCRIBE, rtype, k) for k in keys]


def _group_read(apis, req):
    return [_act(Op.READ, RT.GROUP, req.body.group_id)]


def _describe_each_group(groups, include_authorized_operations):
    acts = []
    for g in groups:
        acts.append(_act(Op.DESCRIBE, RT.GROUP, g))
        if include_authorized_operations:
            acts.extend(_ops(RT.GROUP, g))
    return acts


def _describe_groups(apis, req):
    return _describe_each_group(req.body.groups, req.body.include_authorized_operations)


def _consumer_group_heartbeat(apis, req):
    b = req.body
    names = list(b.subscribed_topic_names or ())
    acts = _group_read(apis, req) + _topics(Op.DESCRIBE, names)
    coordinator = apis.group_coordinator
    if coordinator is not None:
        # the topics the member's regex matches: its assignment keeps the describable ones
        acts.extend(_topics(Op.DESCRIBE, coordinator.consumer.regex_matches(
            b.group_id, b.member_id, b.subscribed_topic_regex), log_if_denied=False))
    return acts


def _consumer_group_describe(apis, req):
    return _describe_each_group(req.body.group_ids, req.body.include_authorized_operations)


def _list_groups(apis, req):
    acts = [_cluster(Op.DESCRIBE, log_if_denied=False)]
    coordinator = apis.group_coordinator
    if coordinator is not None:
        names = dict.fromkeys(coordinator.groups)  # classic groups, then KIP-848 groups
        names.update(dict.fromkeys(coordinator.consumer.groups))
        acts.extend(_act(Op.DESCRIBE, RT.GROUP, n, 1, True, False) for n in names)
    return acts


def _delete_groups(apis, req):
    return [_act(Op.DELETE, RT.GROUP, g) for g in req.body.groups_names]


def _offset_delete(apis, req):
    b = req.body
    return [_act(Op.DELETE, RT.GROUP, b.group_id)] + _topics(Op.READ, [t.name for t in b.topics])


def _create_topics(apis, req):
    names = [t.name for t in req.body.topics]
    return [_cluster(Op.CREATE, log_if_denied=False)] + _topics(Op.CREATE, names) + \
        _topics(Op.DESCRIBE_CONFIGS, names, log_if_denied=False)


def _delete_topics(apis, req):
    b = req.body
    meta = apis.metadata
    names = list(getattr(b, "topic_names", None) or [])
    for t in getattr(b, "topics", None) or []:
        name = t.name
        if name is None and getattr(t, "topic_id", None) is not None:
            info = meta.topic_by_id(t.topic_id)
            name = info.name if info is not None else None
        names.append(name)
    return _topics(Op.DELETE, names) + _topics(Op.DESCRIBE, names, log_if_denied=False)


def _delete_records(apis, req):
    return _topics(Op.DELETE, [t.name for t in req.body.topics])


def _init_producer_id(apis, req):
    tid = req.body.transactional_id
    if tid is not None:
        return [_act(Op.WRITE, RT.TRANSACTIONAL_ID, tid)]
    return [_cluster(Op.IDEMPOTENT_WRITE, log_if_denied=False)] + \
        _topics(Op.WRITE, list(apis.metadata.topics), log_if_denied=False)


def _offset_for_leader_epoch(apis, req):
    # Kafka: CLUSTER_ACTION (a broker) allows every topic, else DESCRIBE per topic (KIP-320)
    return [_cluster(Op.CLUSTER_ACTION, log_if_denied=False)] + \
        _topics(Op.DESCRIBE, [t.topic for t in req.body.topics])


def _config_resource(resource_type, name):
    if resource_type == CONFIG_TOPIC:
        return RT.TOPIC, name
    return RT.CLUSTER, CLUSTER_NAME


def _configs(op):
    def actions(apis, req):
        out = []
        for r in req.body.resources:
            rtype, name = _config_resource(r.resource_type, r.resource_name)
            out.append(_act(op, rtype, name))
        return out
    return actions


def _describe_producers(apis, req):
    return _topics(Op.READ, [t.name for t in req.body.topics])


def _create_partitions(apis, req):
    return _topics(Op.ALTER, [t.name for t in req.body.topics])


def _cluster_only(op):
    return lambda apis, req: [_cluster(op)]


def _add_partitions_to_txn(apis, req):
    b = req.body
    if req.api_version >= 4:
        return [_cluster(Op.CLUSTER_ACTION)]  # v4+: sent by brokers (KIP-890), as Kafka: only this
    return [_act(Op.WRITE, RT.TRANSACTIONAL_ID, b.v3_and_below_transactional_id)] + \
        _topics(Op.WRITE, [t.name for t in b.v3_and_below_topics])


def _add_offsets_to_txn(apis, req):
    b = req.body
    return [_act(Op.WRITE, RT.TRANSACTIONAL_ID, b.transactional_id), _act(Op.READ, RT.GROUP, b.group_id)]


def _end_txn(apis, req):
    return [_act(Op.WRITE, RT.TRANSACTIONAL_ID, req.body.transactional_id)]


def _txn_offset_commit(apis, req):
    b = req.body
    return [_act(Op.WRITE, RT.TRANSACTIONAL_ID, b.transactional_id), _act(Op.READ, RT.GROUP, b.group_id)] + \
        _topics(Op.READ, [t.name for t in b.topics])


def _describe_transactions(apis, req):
    """DESCRIBE per transactional id, and on the topics of each transaction (Kafka leaves out
    those the principal may not describe)."""
    acts = [_act(Op.DESCRIBE, RT.TRANSACTIONAL_ID, t) for t in req.body.transactional_ids]
    coordinator = apis.txn_coordinator
    if coordinator is not None:
        topics = set()
        for tid in req.body.transactional_ids:
            _, txn = coordinator.handle_describe_transactions(tid)
            if txn is not None:
                topics.update(topic for topic, _ in txn.partitions)
        acts.extend(_topics(Op.DESCRIBE, sorted(topics), log_if_denied=False))
    return acts


def _list_transactions(apis, req):
    """DESCRIBE on each transactional id listed (Kafka lists only those, without logging the
    others): the ids come from the coordinator, asked once more here."""
    b, coordinator = req.body, apis.txn_coordinator
    if coordinator is None:
        return []
    duration = b.duration_filter if req.api_version >= 1 else -1
    _, _, txns = coordinator.handle_list_transactions(b.state_filters, b.producer_id_filters, duration)
    return [_act(Op.DESCRIBE, RT.TRANSACTIONAL_ID, t.transactional_id, 1, True, False) for t in txns]


def _describe_cluster(apis, req):
    if getattr(req.body, "include_cluster_authorized_operations", False):
        return _ops(RT.CLUSTER, CLUSTER_NAME)
    return []


ACTIONS = {
    0: _produce, 1: _fetch, 2: _list_offsets, 3: _metadata, 8: _offset_commit, 9: _offset_fetch,
    10: _find_coordinator, 11: _group_read, 12: _group_read, 13: _group_read, 14: _group_read,
    15: _describe_groups, 16: _list_groups, 19: _create_topics, 20: _delete_topics,
    21: _delete_records, 22: _init_producer_id, 23: _offset_for_leader_epoch,
    29: _cluster_only(Op.DESCRIBE), 30: _cluster_only(Op.ALTER), 31: _cluster_only(Op.ALTER),
    32: _configs(Op.DESCRIBE_CONFIGS), 33: _configs(Op.ALTER_CONFIGS), 35: _cluster_only(Op.DESCRIBE),
    37: _create_partitions, 42: _delete_groups, 43: _cluster_only(Op.ALTER),
    44: _configs(Op.ALTER_CONFIGS), 47: _offset_delete, 50: _cluster_only(Op.DESCRIBE),
    51: _cluster_only(Op.ALTER), 60: _describe_cluster, 61: _describe_producers,
    45: _cluster_only(Op.ALTER), 46: _cluster_only(Op.DESCRIBE),  # partition reassignments
    34: _cluster_only(Op.ALTER),  # AlterReplicaLogDirs
    # transactions (their handlers arrive with the transaction coordinator)
    24: _add_partitions_to_txn, 25: _add_offsets_to_txn, 26: _end_txn, 28: _txn_offset_commit,
    65: _describe_transactions, 27: _cluster_only(Op.CLUSTER_ACTION),
    66: _list_transactions,
    48: _cluster_only(Op.DESCRIBE_CONFIGS), 49: _cluster_only(Op.ALTER_CONFIGS),
    # cluster mode: the controller's requests and AlterPartition come from brokers
    4: _cluster_only(Op.CLUSTER_ACTION), 5: _cluster_only(Op.CLUSTER_ACTION),
    6: _cluster_only(Op.CLUSTER_ACTION), 56: _cluster_only(Op.CLUSTER_ACTION),
    7: _cluster_only(Op.CLUSTER_ACTION),
    # KIP-848 consumer groups: ConsumerGroupHeartbeat, ConsumerGroupDescribe (per group, in
    # the handler)
    68: _consumer_group_heartbeat, 69: _consumer_group_describe,
}


# -- whole-request gates: an error code for the API's error response, or None ---------------
# (Produce has none: its handler refuses a transactional id it may not write, so the common
# produce costs no gate call.)

def _gate_group(apis, req, ok):
    return None if ok(Op.READ, RT.GROUP, req.body.group_id) else errors.GROUP_AUTHORIZATION_FAILED


def _gate_cluster(op):
    def gate(apis, req, ok):
        return None if ok(op, RT.CLUSTER, CLUSTER_NAME) else errors.CLUSTER_AUTHORIZATION_FAILED
    return gate


def _gate_init_producer_id(apis, req, ok):
    tid = req.body.transactional_id
    if tid is not None:
        return None if ok(Op.WRITE, RT.TRANSACTIONAL_ID, tid) else errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if ok(Op.IDEMPOTENT_WRITE, RT.CLUSTER, CLUSTER_NAME):
        return None
    # Kafka 3.0+: WRITE on any topic also allows an idempotent producer (KIP-679)
    if any(ok(Op.WRITE, RT.TOPIC, n) for n in apis.metadata.topics):
        return None
    return errors.CLUSTER_AUTHORIZATION_FAILED


def _gate_fetch(apis, req, ok):
    if replica_of(req)[0] >= 0:
        if not ok(Op.CLUSTER_ACTION, RT.CLUSTER, CLUSTER_NAME):
            return errors.TOPIC_AUTHORIZATION_FAILED
    return None


def _gate_find_coordinator(apis, req, ok):
    keys, key_type = _coordinator_keys(req)
    if getattr(req.body, "coordinator_keys", None):
        return None  # v4+: per key, in the handler
    if key_type == TRANSACTION_KEY_TYPE:
        return None if all(ok(Op.DESCRIBE, RT.TRANSACTIONAL_ID, k) for k in keys) \
            else errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    return None if all(ok(Op.DESCRIBE, RT.GROUP, k) for k in keys) else errors.GROUP_AUTHORIZATION_FAILED


def _gate_txn(apis, req, ok):
    """Transactional APIs: the transactional id first, then the group (the cluster for a
    broker's AddPartitionsToTxn), for the whole request; AddPartitionsToTxn and TxnOffsetCommit
    answer a denied topic per partition in their handlers, as Kafka."""
    for action in ACTIONS[req.api_key](apis, req):
        r = action.resource
        if r.resource_type == RT.TOPIC and req.api_key in (24, 28):
            continue
        if not ok(action.operation, r.resource_type, r.name):
            return {RT.TRANSACTIONAL_ID: errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    RT.GROUP: errors.GROUP_AUTHORIZATION_FAILED,
                    RT.CLUSTER: errors.CLUSTER_AUTHORIZATION_FAILED}.get(r.resource_type,
                                                                         errors.TOPIC_AUTHORIZATION_FAILED)
    return None


def _gate_offset_delete(apis, req, ok):
    """DELETE on the group for the whole request (READ per topic is the handler's)."""
    return None if ok(Op.DELETE, RT.GROUP, req.body.group_id) else errors.GROUP_AUTHORIZATION_FAILED


def _gate_consumer_group_heartbeat(apis, req, ok):
    """READ on the group, DESCRIBE on every topic subscribed by name (Kafka 4.0); of the
    topics a regex matches, the member is assigned only those it may describe (the handler)."""
    if not ok(Op.READ, RT.GROUP, req.body.group_id):
        return errors.GROUP_AUTHORIZATION_FAILED
    if not all(ok(Op.DESCRIBE, RT.TOPIC, n) for n in req.body.subscribed_topic_names or ()):
        return errors.TOPIC_AUTHORIZATION_FAILED
    return None


GATES = {
    8: _gate_group, 1: _gate_fetch, 10: _gate_find_coordinator, 11: _gate_group, 12: _gate_group,
    13: _gate_group, 14: _gate_group, 22: _gate_init_producer_id,
    29: _gate_cluster(Op.DESCRIBE), 30: _gate_cluster(Op.ALTER), 31: _gate_cluster(Op.ALTER),
    35: _gate_cluster(Op.DESCRIBE), 43: _gate_cluster(Op.ALTER), 50: _gate_cluster(Op.DESCRIBE),
    51: _gate_cluster(Op.ALTER),
    45: _gate_cluster(Op.ALTER), 46: _gate_cluster(Op.DESCRIBE),
    34: _gate_cluster(Op.ALTER),
    # ListOffsets (2), DeleteRecords (21), OffsetForLeaderEpoch (23), CreatePartitions (37) and
    # DescribeProducers (61) answer TOPIC_AUTHORIZATION_FAILED per topic in their handlers.
    47: _gate_offset_delete,
    24: _gate_txn, 25: _gate_txn, 26: _gate_txn, 28: _gate_txn,
    # DescribeTransactions (65): TRANSACTIONAL_ID_AUTHORIZATION_FAILED per id in its handler
    27: _gate_cluster(Op.CLUSTER_ACTION),
    48: _gate_cluster(Op.DESCRIBE_CONFIGS), 49: _gate_cluster(Op.ALTER_CONFIGS),
    4: _gate_cluster(Op.CLUSTER_ACTION), 5: _gate_cluster(Op.CLUSTER_ACTION),
    6: _gate_cluster(Op.CLUSTER_ACTION), 56: _gate_cluster(Op.CLUSTER_ACTION),
    7: _gate_cluster(Op.CLUSTER_ACTION),
    68: _gate_consumer_group_heartbeat,
}


# -- the decided results, as handlers read them ----------------------------------------------

class Decisions(tuple):
    """The authorizer's answers for one request: ``allowed(op, resource_type, name)``.

    A tuple (authorizer, context, actions, answers, {(op, rtype, name): bool} filled when first
    asked, None for a request of one action), so making one per request runs no Python code.
    An action that was not planned is asked now when the authorizer answers directly; an
    authorizer answering with a Deferred cannot be waited on here, so it is DENIED (fail closed)."""

    __slots__ = ()

    @staticmethod
    def of(authorizer, context, actions, answers):
        return _tuple_new(Decisions, (authorizer, context, actions, answers, {}))

    def allowed(self, op, rtype, name):
        actions = self[2]
        if len(actions) == 1:  # a request of one action (most produce and fetch requests)
            a = actions[0]
            resource = a.resource
            if resource.name == name and a.operation == op and resource.resource_type == rtype:
                return self[3][0] == ALLOWED
        results = self[4]
        if results is None:  # not kept for one action: a dict per request costs ~1% of a produce
            results = {}
        if not results:
            for a, r in zip(self[2], self[3]):
                resource = a.resource
                results[(a.operation, resource.resource_type, resource.name)] = r == ALLOWED
        key = (op, rtype, name)
        result = results.get(key)
        if result is None:
            answer = self[0].authorize(self[1], [_act(op, rtype, name)])
            if isinstance(answer, defer.Deferred):
                log.error("authorization of {op} on {rtype} {name} was not planned; denied",
                          op=AclOperation(op).name, rtype=ResourceType(rtype).name, name=name)
                answer.addErrback(lambda f: None)
                result = False
            else:
                result = list(answer)[0] == ALLOWED
            results[key] = result
        return result

    def authorized_operations(self, rtype, name):
        """Kafka's authorized-operations bit set of one resource."""
        bits = 0
        for op in SUPPORTED_OPERATIONS[rtype]:
            if self.allowed(op, rtype, name):
                bits |= 1 << op
        return bits


def decide(authorizer, request, actions):
    """The :class:`Decisions` on ``actions`` for ``request``, or a Deferred of them when the
    authorizer answers with one."""
    ctx = request.context  # request_context(request), inline: this runs on every request
    context = _tuple_new(AuthorizableRequestContext, (
        ctx.principal, ctx.client_address[0], ctx.listener_name, ctx.security_protocol,
        request.api_key, request.api_version, request.client_id, request.correlation_id))
    if not actions:
        return Decisions.of(authorizer, context, (), ())
    answers = authorizer.authorize(context, actions)
    if type(answers) is not list and isinstance(answers, defer.Deferred):
        return answers.addCallback(lambda r: Decisions.of(authorizer, context, actions, list(r)))
    return _tuple_new(Decisions, (authorizer, context, actions, answers, None if len(actions) == 1 else {}))
