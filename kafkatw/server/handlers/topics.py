"""CreateTopics (key 19, v2-v7) and DeleteTopics (key 20, v1-v6) on a single node: request
validation, replication factor 1, explicit assignments, topic configs, validate-only, deletion
by name and by id. The metadata store persists; listeners create and delete the partition logs.
"""

from collections import Counter

from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import provider

from kafkatw.cluster.metadata import ZERO_UUID, uuid_to_base64
from kafkatw.config import (
    DEFAULT_CONFIG,
    TOPIC_CONFIG,
    TOPIC_CONFIG_DEF,
    TOPIC_CONFIG_SYNONYMS,
    ConfigError,
    to_config_string,
    validate_topic_config,
)
from kafkatw.config.removed import REMOVED_TOPIC_CONFIGS, split_removed
from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError, error_name
from kafkatw.protocol.messages import CreateTopicsResponse, DeleteTopicsResponse
from kafkatw.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from kafkatw.server.interfaces import IApiHandler
from kafkatw.server.quota import mutation_quota, with_mutation_throttle

CREATE, DELETE, DESCRIBE = AclOperation.CREATE, AclOperation.DELETE, AclOperation.DESCRIBE
TOPIC, CLUSTER = ResourceType.TOPIC, ResourceType.CLUSTER

log = Logger()

#: Kafka's ReplicationControlManager.MAX_PARTITIONS_PER_BATCH: more partitions in one
#: CreateTopics/CreatePartitions request are refused with POLICY_VIOLATION.
MAX_PARTITIONS_PER_BATCH = 10000
EXCESSIVE_PARTITIONS = "Excessively large number of partitions per request."


def requested_partitions(apis, topics):
    """Kafka's validateTotalNumberOfPartitions count: assignments, else the partition count
    (-1: num.partitions; zero and negative counts add nothing)."""
    total = 0
    for t in topics:
        if t.assignments:
            total += len(t.assignments)
        elif t.num_partitions == -1:
            total += int(apis.config_value("num.partitions", 1))
        elif t.num_partitions > 0:
            total += t.num_partitions
    return total


def without_removed_configs(topic, configs):
    """``configs`` less the Kafka 3.x names accepted and ignored (a warning each); a refused one
    is INVALID_CONFIG naming what replaced it."""
    try:
        kept, ignored = split_removed(configs, REMOVED_TOPIC_CONFIGS)
    except ConfigError as e:
        raise KafkaError(errors.INVALID_CONFIG, str(e))
    for removed in ignored:
        log.warn("Topic {topic}: {message}", topic=topic, message=removed.message())
    return kept


def validate_topic_configs(apis, configs):
    """Raise KafkaError(INVALID_CONFIG) unless ``configs`` (name -> str) is a valid override set."""
    for name, value in configs.items():
        if value is None:
            raise KafkaError(errors.INVALID_CONFIG, "Null value not supported for topic configs: %s" % name)
    try:
        validate_topic_config(dict(configs))
    except ConfigError as e:
        raise KafkaError(errors.INVALID_CONFIG, str(e))


def effective_configs(apis, overrides):
    """CreatableTopicConfigs for v5+: every topic config with its value and source."""
    config = apis.config
    defaults = config.topic_defaults()
    out = []
    for key in TOPIC_CONFIG_DEF:
        name = key.name
        if name in overrides:
            value, source = overrides[name], TOPIC_CONFIG
        else:
            typed = defaults.get(name, key.parse(key.default))
            value = None if typed is None else to_config_string(key.type, typed)
            source = DEFAULT_CONFIG
            for synonym in TOPIC_CONFIG_SYNONYMS.get(name, ()):
                if config.is_set(synonym):
                    source = config.source(synonym)
                    break
        out.append(CreateTopicsResponse.CreatableTopicConfigs(
            name=name, value=value, read_only=False, config_source=source,
            is_sensitive=key.sensitive))
    return out


def _check_assignments(apis, topic):
    """Number of partitions from explicit assignments, or raise KafkaError."""
    indexes = sorted(a.partition_index for a in topic.assignments)
    if indexes != list(range(len(indexes))):
        raise KafkaError(errors.INVALID_REPLICA_ASSIGNMENT,
                         "Partitions should be a consecutive 0-based integer sequence")
    for a in topic.assignments:
        if not a.broker_ids:
            raise KafkaError(errors.INVALID_REPLICA_ASSIGNMENT,
                             "The manual partition assignment includes an empty replica list.")
        seen = set()
        for b in a.broker_ids:
            if b in seen:
                raise KafkaError(errors.INVALID_REPLICA_ASSIGNMENT,
                                 "The manual partition assignment includes the broker %d more than once." % b)
            seen.add(b)
            if apis.metadata.live_broker(b) is None:
                raise KafkaError(errors.INVALID_REPLICA_ASSIGNMENT,
                                 "The manual partition assignment includes broker %d, but no broker "
                                 "with that ID was found." % b)
    return len(indexes)


def _create_one(apis, topic, validate_only):
    """Validate (raising KafkaError) and unless validate_only create one topic: a Deferred of
    (topic id, partitions, replication factor, configs) once the topic is durable."""
    meta = apis.metadata
    meta.check_new_topic(topic.name)
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise KafkaError(errors.INVALID_REQUEST,
                             "Both numPartitions or replicationFactor and replicasAssignments were set. "
                             "Both cannot be used at the same time.")
        num_partitions = _check_assignments(apis, topic)
        replication_factor = len(topic.assignments[0].broker_ids)
        assignment = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
    else:
        num_partitions = topic.num_partitions
        if num_partitions == -1:
            num_partitions = int(apis.config_value("num.partitions", 1))
        elif num_partitions <= 0:
            raise KafkaError(errors.INVALID_PARTITIONS,
                             "Number of partitions was set to an invalid non-positive value.")
        replication_factor = topic.replication_factor
        if replication_factor == -1:
            replication_factor = int(apis.config_value("default.replication.factor", 1))
        elif replication_factor <= 0:
            raise KafkaError(errors.INVALID_REPLICATION_FACTOR,
                             "Replication factor must be larger than 0, or -1 to use the default value.")
        assignment = meta.assign_replicas(num_partitions, replication_factor)
    configs = {}
    for c in topic.configs:
        configs[c.name] = c.value
    configs = without_removed_configs(topic.name, configs)
    validate_topic_configs(apis, configs)
    if validate_only:
        return defer.succeed((ZERO_UUID, num_partitions, replication_factor, configs))

    def created(info):
        log.info("created topic {name} ({id}) with {n} partitions",
                 name=info.name, id=uuid_to_base64(info.topic_id), n=num_partitions)
        return info.topic_id, num_partitions, replication_factor, configs
    return meta.create_topic(topic.name, num_partitions, configs, assignment=assignment).addCallback(created)


def _set_error(result, e):
    result.error_code = e.code
    result.error_message = e.message if e.message is not None else error_name(e.code)


def _set_created(created, result, version, apis):
    topic_id, n, rf, configs = created
    result.topic_id = topic_id
    if version >= 5:
        result.num_partitions = n
        result.replication_factor = rf
        result.configs = effective_configs(apis, configs)


def _set_failed(failure, result):
    """A topic whose write failed: KAFKA_STORAGE_ERROR for it (the others may be fine)."""
    if failure.check(KafkaError):
        _set_error(result, failure.value)
    else:
        log.failure("creating topic {name} failed", failure, name=result.name)
        result.error_code = errors.KAFKA_STORAGE_ERROR
        result.error_message = "The metadata could not be written: %s" % (failure.getErrorMessage(),)


@provider(IApiHandler)
class CreateTopics:
    API_KEY = 19
    VERSIONS = (2, 7)

    @staticmethod
    def handle(apis, request):
        body = request.body
        version = request.api_version
        if requested_partitions(apis, body.topics) > MAX_PARTITIONS_PER_BATCH:
            return CreateTopics.error_response(request, errors.POLICY_VIOLATION, EXCESSIVE_PARTITIONS)
        counts = Counter(t.name for t in body.topics)
        quota = mutation_quota(apis, request, strict_from_version=6)  # KIP-599
        may_create = apis.allowed(request, CREATE, CLUSTER, CLUSTER_NAME)
        results = []
        pending = []
        for t in body.topics:
            result = CreateTopicsResponse.CreatableTopicResult(name=t.name, error_code=errors.NONE)
            results.append(result)
            if counts[t.name] > 1:
                result.error_code = errors.INVALID_REQUEST
                result.error_message = "Duplicate topic name."
                continue
            if not may_create and not apis.allowed(request, CREATE, TOPIC, t.name):
                result.error_code = errors.TOPIC_AUTHORIZATION_FAILED
                result.error_message = "Authorization failed."
                continue
            try:
                if not body.validate_only:
                    quota.record(requested_partitions(apis, [t]))
                d = _create_one(apis, t, body.validate_only)
            except KafkaError as e:
                _set_error(result, e)
                continue
            # every topic is validated and staged now (in request order); the answer waits
            # until all of them are durable
            d.addCallbacks(_set_created, _set_failed, callbackArgs=(result, version, apis),
                           errbackArgs=(result,))
            pending.append(d)
        response = CreateTopicsResponse(throttle_time_ms=0, topics=results)
        if not pending:
            return with_mutation_throttle(response, quota)
        return defer.gatherResults(pending).addCallback(lambda _: with_mutation_throttle(response, quota))

    @staticmethod
    def error_response(request, code, message):
        return CreateTopicsResponse(throttle_time_ms=0, topics=[
            CreateTopicsResponse.CreatableTopicResult(name=t.name, error_code=code, error_message=message)
            for t in request.body.topics])


def _deleted(info):
    log.info("deleted topic {name}", name=info.name)


def _delete_failed(failure, result, version):
    log.failure("deleting topic {name} failed", failure, name=result.name)
    result.error_code = errors.KAFKA_STORAGE_ERROR
    if version >= 5:
        result.error_message = "The metadata could not be written: %s" % (failure.getErrorMessage(),)


@provider(IApiHandler)
class DeleteTopics:
    API_KEY = 20
    VERSIONS = (1, 6)

    @staticmethod
    def _requested(request):
        """[(name or None, topic id or ZERO_UUID)] in request order."""
        body = request.body
        if request.api_version >= 6:
            return [(t.name, t.topic_id or ZERO_UUID) for t in body.topics]
        return [(name, ZERO_UUID) for name in body.topic_names]

    @staticmethod
    def handle(apis, request):
        meta = apis.metadata
        version = request.api_version
        requested = DeleteTopics._requested(request)
        name_counts = Counter(name for name, _ in requested if name is not None)
        id_counts = Counter(tid for _, tid in requested if tid != ZERO_UUID)
        deletion_enabled = bool(apis.config_value("delete.topic.enable", True))
        quota = mutation_quota(apis, request, strict_from_version=5)  # KIP-599
        results = []
        pending = []
        for name, tid in requested:
            result = DeleteTopicsResponse.DeletableTopicResult(name=name, topic_id=tid, error_code=errors.NONE)
            results.append(result)
            try:
                if name is not None and tid != ZERO_UUID:
                    raise KafkaError(errors.INVALID_REQUEST, "You may not specify both topic name and topic id.")
                if name is None and tid == ZERO_UUID:
                    raise KafkaError(errors.INVALID_REQUEST, "Neither topic name nor id were specified.")
                if name is not None and name_counts[name] > 1:
                    raise KafkaError(errors.INVALID_REQUEST, "Duplicate topic name.")
                if tid != ZERO_UUID and id_counts[tid] > 1:
                    raise KafkaError(errors.INVALID_REQUEST, "Duplicate topic id.")
                if name is None:
                    info = meta.topic_by_id(tid)
                    if info is None:
                        raise KafkaError(errors.UNKNOWN_TOPIC_ID, "This server does not host this topic ID.")
                    result.name = info.name
                else:
                    info = meta.get_topic(name)
                    if info is None:
                        raise KafkaError(errors.UNKNOWN_TOPIC_OR_PARTITION,
                                         "This server does not host this topic-partition.")
                    result.topic_id = info.topic_id
                if not apis.allowed(request, DELETE, TOPIC, info.name):
                    # a topic the principal may not describe looks unknown (Kafka's DeleteTopics)
                    if apis.allowed(request, DESCRIBE, TOPIC, info.name):
                        raise KafkaError(errors.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
                    raise KafkaError(errors.UNKNOWN_TOPIC_OR_PARTITION if name is not None else
                                     errors.UNKNOWN_TOPIC_ID, "This server does not host this topic.")
                if not deletion_enabled:
                    raise KafkaError(errors.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
                quota.record(info.num_partitions)
                d = meta.delete_topic(info.name)
                d.addCallbacks(_deleted, _delete_failed, errbackArgs=(result, version))
                pending.append(d)
            except KafkaError as e:
                result.error_code = e.code
                if version >= 5:
                    result.error_message = e.message
        for result in results:
            if result.name is None and version < 6:
                result.name = ""
        response = DeleteTopicsResponse(throttle_time_ms=0, responses=results)
        if not pending:
            return with_mutation_throttle(response, quota)
        return defer.gatherResults(pending).addCallback(lambda _: with_mutation_throttle(response, quota))

    @staticmethod
    def error_response(request, code, message):
        return DeleteTopicsResponse(throttle_time_ms=0, responses=[
            DeleteTopicsResponse.DeletableTopicResult(
                name=name if name is not None or request.api_version >= 6 else "", topic_id=tid,
                error_code=code, error_message=message if request.api_version >= 5 else None)
            for name, tid in DeleteTopics._requested(request)])


CREATE_TOPICS = CreateTopics
DELETE_TOPICS = DeleteTopics
