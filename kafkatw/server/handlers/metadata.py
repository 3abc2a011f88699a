"""Metadata (key 3, v0-v12): brokers of the request's listener, cluster and controller id,
topics with ids, partitions led by this node, auto-creation (``auto.create.topics.enable``).
Topic creation itself is the metadata store's; this module only decides when to ask for it.
"""

from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import moduleProvides

from kafkatw.cluster.metadata import INTERNAL_TOPICS, ZERO_UUID, is_valid_topic_name
from kafkatw.protocol import errors
from kafkatw.protocol.encoded import Encoded
from kafkatw.protocol.errors import KafkaError
from kafkatw.protocol.messages import MetadataResponse
from kafkatw.security.authorizer import CLUSTER_NAME
from kafkatw.security.authorizer import ResourceType as RT
from kafkatw.server.interfaces import IApiHandler

moduleProvides(IApiHandler)

log = Logger()

API_KEY = 3
VERSIONS = (0, 13)

AUTHORIZED_OPERATIONS_OMITTED = -2147483648
# AclOperation codes supported on each resource type (Kafka's AclEntry.supportedOperations).
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
TOPIC_OPERATIONS = (READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS)
CLUSTER_OPERATIONS = (CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE)


def operations_bitfield(ops):
    bits = 0
    for op in ops:
        bits |= 1 << op
    return bits


def listener_endpoint(apis, listener_name):
    """This node's advertised (host, port) on ``listener_name``, or None."""
    endpoints = apis.config.advertised_listeners
    for ep in endpoints:
        if ep.listener_name == listener_name:
            return ep
    if listener_name is None and endpoints:
        return endpoints[0]
    return None


def broker_endpoint(apis, listener, node_id, info=None):
    """``(host, port, rack)`` of broker ``node_id`` on ``listener``: this node's from its
    advertised listeners, another's as the controller published it (``info``, its BrokerInfo,
    else looked up among the live brokers); None if it is not live or has no such listener."""
    if node_id == apis.node_id:
        ep = listener_endpoint(apis, listener)
        return None if ep is None else (ep.host, ep.port, apis.config_value("broker.rack"))
    if info is None:
        info = apis.metadata.live_broker(node_id)
        if info is None:
            return None
    address = info.endpoints.get(listener) if listener is not None else \
        next(iter(info.endpoints.values()), None)
    return None if address is None else (address[0], address[1], info.rack)


def broker_endpoints(apis, request):
    """``[(node id, host, port, rack)]`` of the live brokers on the request's listener."""
    listener = request.context.listener_name
    out = []
    for info in apis.metadata.live_brokers():
        found = broker_endpoint(apis, listener, info.node_id, info)
        if found is not None:
            out.append((info.node_id,) + found)
    return out


def brokers(apis, request):
    return [MetadataResponse.MetadataResponseBroker(node_id=node, host=host, port=port, rack=rack)
            for node, host, port, rack in broker_endpoints(apis, request)]


def maybe_auto_create(apis, name):
    """Start creating topic ``name`` with the broker defaults: a Deferred firing with an
    error code (NONE once the topic is durable and its logs exist)."""
    if name in INTERNAL_TOPICS:
        # Internal topics are created by their coordinators with their own settings.
        return defer.succeed(errors.UNKNOWN_TOPIC_OR_PARTITION)
    try:
        d = apis.metadata.create_topic(name, int(apis.config_value("num.partitions", 1)))
    except KafkaError as e:
        if e.code == errors.TOPIC_ALREADY_EXISTS:
            return _when_published(apis, name)
        log.info("auto-creation of topic {name} failed: {err}", name=name, err=e)
        return defer.succeed(e.code)

    def created(_):
        log.info("auto-created topic {name}", name=name)
        return errors.NONE

    def failed(f):
        log.failure("auto-creation of topic {name} failed", f, name=name)
        return errors.KAFKA_STORAGE_ERROR
    return d.addCallbacks(created, failed)


def _when_published(apis, name):
    """NONE if ``name`` is visible; LEADER_NOT_AVAILABLE while its creation is in flight (as
    Kafka answers for a topic not yet propagated; clients retry)."""
    if apis.metadata.get_topic(name) is not None:
        return defer.succeed(errors.NONE)
    return defer.succeed(errors.LEADER_NOT_AVAILABLE)


#: (metadata store, topic) -> {(version, listener answer): _CachedTopic}: a topic's answer
#: encoded once; used while the store's TopicInfo is the same object and every partition's
#: state (leader, epoch, ISR, replicas) compares equal. A deleted topic's answers go at once
#: (forget_topic): one of thousands of partitions is megabytes.
_topic_cache = {}


def forget_topic(meta, name):
    """Drop the cached answers of ``name`` (deleted) in ``meta``."""
    _topic_cache.pop((id(meta), name), None)


class _CachedTopic:
    __slots__ = ("info", "states", "encoded")

    def __init__(self, info, states, encoded):
        self.info = info
        self.states = states
        self.encoded = encoded


def topic_response(apis, request, info, include_ops, listed):
    """A topic's partitions as the metadata says (``listed``: the frozenset of broker ids the
    response lists, empty when none has the request's listener; a leader not among them is
    answered as LEADER_NOT_AVAILABLE/LISTENER_NOT_FOUND, as Kafka's MetadataCache does for an
    endpoint missing on the listener)."""
    meta = apis.metadata
    states = meta.topic_partition_states(info.name)
    if include_ops:
        return _topic_response(apis, request, info, include_ops, listed, states)
    # Topics change rarely and are asked for often (every client, every metadata.max.age.ms):
    # 10,000 partitions are ~200 ms of objects and encoding; reading their states to check
    # the cached answer is a tenth of that.
    key = (id(meta), info.name)
    answers = _topic_cache.get(key)
    if answers is None:
        if len(_topic_cache) > len(meta.topics) + 64:
            _topic_cache.clear()  # topics a store without listeners deleted
        answers = _topic_cache[key] = {}
    sub = (request.api_version, listed)
    cached = answers.get(sub)
    if cached is None or cached.info is not info or cached.states != states:
        if len(answers) > 16:
            answers.clear()  # old listener answers
        struct = _topic_response(apis, request, info, include_ops, listed, states)
        cached = answers[sub] = _CachedTopic(info, states, Encoded(struct, request.api_version))
    return cached.encoded


def _topic_response(apis, request, info, include_ops, listed, states):
    version = request.api_version
    partitions = []
    for p, state in enumerate(states):
        if state is None:
            continue
        error = errors.NONE
        leader = state.leader
        if leader < 0:
            error = errors.LEADER_NOT_AVAILABLE
            leader = -1
        elif leader not in listed:
            error = errors.LISTENER_NOT_FOUND if version >= 6 else errors.LEADER_NOT_AVAILABLE
            leader = -1
        partitions.append(MetadataResponse.MetadataResponsePartition(
            error_code=error,
            partition_index=p,
            leader_id=leader,
            leader_epoch=state.leader_epoch,
            replica_nodes=list(state.replicas),
            isr_nodes=list(state.isr),
            offline_replicas=list(state.offline_replicas),
        ))
    return MetadataResponse.MetadataResponseTopic(
        error_code=errors.NONE,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.is_internal,
        partitions=partitions,
        topic_authorized_operations=(authorized_operations(apis, request, RT.TOPIC, info.name) if include_ops
                                     else AUTHORIZED_OPERATIONS_OMITTED),
    )


def authorized_operations(apis, request, resource_type, name):
    """Kafka's authorized-operations bit set: every supported operation without an authorizer."""
    if apis.authorizer is None:
        return operations_bitfield(TOPIC_OPERATIONS if resource_type == RT.TOPIC else CLUSTER_OPERATIONS)
    if request.authz is None:
        apis.allowed(request, DESCRIBE, resource_type, name)  # builds request.authz
    return request.authz.authorized_operations(resource_type, name)


def may_create(apis, request, name):
    """Auto-creation needs CREATE on the cluster or on the topic (Kafka's order)."""
    return apis.allowed(request, CREATE, RT.CLUSTER, CLUSTER_NAME) or apis.allowed(request, CREATE, RT.TOPIC, name)


def error_topic(request, name, code, topic_id=ZERO_UUID):
    if name is None and request.api_version < 12:
        name = ""
    return MetadataResponse.MetadataResponseTopic(
        error_code=code, name=name, topic_id=topic_id,
        is_internal=name in INTERNAL_TOPICS if name else False, partitions=[])


def auto_create_asked(apis, request):
    """The request allows auto-creation and the broker does it."""
    allow_auto = True if request.api_version < 4 else bool(request.body.allow_auto_topic_creation)
    return allow_auto and bool(apis.config_value("auto.create.topics.enable", True))


def handle(apis, request):
    ready = apis.metadata.metadata_ready()
    if not ready.called:  # a cluster-mode broker just registered: answer once it knows the cluster
        return ready.addCallback(lambda _: _handle(apis, request))
    return _handle(apis, request)


def _handle(apis, request):
    body = request.body
    meta = apis.metadata
    auto_create = auto_create_asked(apis, request)

    requested = body.topics
    if auto_create and requested:
        missing = []
        for t in requested:
            if t.name is not None and meta.get_topic(t.name) is None and is_valid_topic_name(t.name) \
                    and t.name not in missing and apis.allowed(request, DESCRIBE, RT.TOPIC, t.name) \
                    and may_create(apis, request, t.name):
                missing.append(t.name)
        if missing:
            # creations are written in the thread pool: answer once they are durable
            pending = [maybe_auto_create(apis, name) for name in missing]
            d = defer.gatherResults(pending)
            return d.addCallback(lambda codes: _respond(apis, request, dict(zip(missing, codes))))
    return _respond(apis, request, {})


def _respond(apis, request, auto_created):
    """The response; ``auto_created`` maps topics auto-created for it to the creation's code."""
    body = request.body
    version = request.api_version
    meta = apis.metadata
    include_ops = bool(getattr(body, "include_topic_authorized_operations", False)) and version >= 8
    broker_list = brokers(apis, request)
    listed = frozenset(b.node_id for b in broker_list)
    topics_out = []
    requested = body.topics
    if requested is None or (version == 0 and not requested):
        for name in sorted(meta.topics):
            if not apis.allowed(request, DESCRIBE, RT.TOPIC, name):
                continue  # what the principal may not describe is not listed
            topics_out.append(topic_response(apis, request, meta.topics[name], include_ops, listed))
    else:
        seen = set()
        for t in requested:
            topic_id = getattr(t, "topic_id", ZERO_UUID) or ZERO_UUID
            name = t.name
            if topic_id != ZERO_UUID and name is None:
                info = meta.topic_by_id(topic_id)
                if info is None:
                    if ("id", topic_id) not in seen:
                        seen.add(("id", topic_id))
                        topics_out.append(error_topic(request, None, errors.UNKNOWN_TOPIC_ID, topic_id))
                    continue
                name = info.name
            if name in seen:
                continue
            seen.add(name)
            if not apis.allowed(request, DESCRIBE, RT.TOPIC, name):
                topics_out.append(error_topic(request, name, errors.TOPIC_AUTHORIZATION_FAILED, topic_id))
                continue
            info = meta.get_topic(name)
            if info is None:
                if not is_valid_topic_name(name):
                    topics_out.append(error_topic(request, name, errors.INVALID_TOPIC_EXCEPTION))
                    continue
                code = auto_created.get(name, errors.UNKNOWN_TOPIC_OR_PARTITION)
                if name not in auto_created and auto_create_asked(apis, request) \
                        and not may_create(apis, request, name):
                    code = errors.TOPIC_AUTHORIZATION_FAILED
                info = meta.get_topic(name) if code == errors.NONE else None
                if info is None:
                    topics_out.append(error_topic(request, name, code or errors.UNKNOWN_TOPIC_OR_PARTITION))
                    continue
            topics_out.append(topic_response(apis, request, info, include_ops, listed))

    response = MetadataResponse(
        throttle_time_ms=0,
        brokers=broker_list,
        cluster_id=meta.cluster_id,
        # the active controller (on one node: this node, as a KRaft broker names a live broker)
        controller_id=meta.controller_id,
        topics=topics_out,
    )
    if 8 <= version <= 10 and getattr(body, "include_cluster_authorized_operations", False):
        response.cluster_authorized_operations = authorized_operations(apis, request, RT.CLUSTER, CLUSTER_NAME)
    return response


def error_response(request, code, message):
    body = request.body
    topics = []
    for t in (getattr(body, "topics", None) or []):
        topics.append(error_topic(request, t.name, code, getattr(t, "topic_id", ZERO_UUID) or ZERO_UUID))
    return MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1, topics=topics)
