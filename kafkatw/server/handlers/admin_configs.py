"""DescribeConfigs (key 32, v1-v4), AlterConfigs (33, v0-v2) and IncrementalAlterConfigs (44,
v0-v1) for TOPIC and BROKER resources: Kafka's views (values, sources, synonyms, types, docs,
sensitive values hidden), validation naming the key, persistence in the metadata store and live
application (topic configs to their logs, broker configs through ``apis.dynamic_config``).
Config definitions live in ``kafkatw.config``; storage is untouched here.
"""

from collections import Counter

from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import provider

from kafkatw.cluster.metadata import validate_topic_name
from kafkatw.config import (
    BROKER_CONFIG_DEF,
    CONFIG_TYPE_CODES,
    DEFAULT_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    KNOWN_PREFIXES,
    LIST,
    TOPIC_CONFIG,
    TOPIC_CONFIG_DEF,
    TOPIC_CONFIG_SYNONYMS,
    ConfigError,
    to_config_string,
    validate_topic_config,
)
from kafkatw.config.removed import REMOVED_BROKER_CONFIGS, REMOVED_BROKER_PREFIXES, removed_config
from kafkatw.config.unimplemented import UNIMPLEMENTED_BROKER_CONFIGS
from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError
from kafkatw.protocol.messages import (
    AlterConfigsResponse,
    DescribeConfigsResponse,
    IncrementalAlterConfigsResponse,
)
from kafkatw.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from kafkatw.server.handlers.topics import without_removed_configs
from kafkatw.server.interfaces import IApiHandler

log = Logger()

# ConfigResource.Type
UNKNOWN_RESOURCE, TOPIC, BROKER, BROKER_LOGGER = 0, 2, 4, 8
# AlterConfigOp.OpType
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

_Result = DescribeConfigsResponse.DescribeConfigsResult
_Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
_Synonym = DescribeConfigsResponse.DescribeConfigsSynonym


# -- resources ---------------------------------------------------------------------------------

def _check_broker_name(apis, name):
    """True for the cluster-default resource (""), False for this node; else INVALID_REQUEST."""
    if name == "":
        return True
    if name != str(apis.node_id):
        raise KafkaError(errors.INVALID_REQUEST,
                         "Unexpected broker id, expected %d or empty string, but received %s"
                         % (apis.node_id, name))
    return False


def _topic_info(apis, name):
    validate_topic_name(name)
    info = apis.metadata.get_topic(name)
    if info is None:
        raise KafkaError(errors.UNKNOWN_TOPIC_OR_PARTITION, "Topic %s does not exist." % (name,))
    return info


# -- describe ----------------------------------------------------------------------------------

def _broker_synonyms(apis, names):
    """Synonym rows for the broker configs backing a topic config (Kafka's order)."""
    config = apis.config
    if not names:
        return []
    return [_Synonym(name=s.name, value=None if config.definitions[s.name].sensitive else s.value,
                     source=s.source) for s in config._synonyms(names[0])]


def describe_topic_configs(apis, info, keys, include_synonyms, include_documentation):
    """DescribeConfigsResourceResult rows for a topic (every topic config, or ``keys``)."""
    config = apis.config
    defaults = config.topic_defaults()
    rows = []
    for key in TOPIC_CONFIG_DEF:
        name = key.name
        if keys is not None and name not in keys:
            continue
        synonyms = TOPIC_CONFIG_SYNONYMS.get(name, [])
        broker_rows = _broker_synonyms(apis, synonyms) if include_synonyms else []
        if name in info.configs:
            value, source = info.configs[name], TOPIC_CONFIG
            if include_synonyms:
                broker_rows.insert(0, _Synonym(name=name, value=value, source=TOPIC_CONFIG))
        else:
            typed = defaults.get(name, key.parse(key.default))
            value, source = to_config_string(key.type, typed), DEFAULT_CONFIG
            for synonym in synonyms:
                if config.is_set(synonym):
                    source = config.source(synonym)
                    break
        if key.sensitive:
            value = None
        rows.append(_Entry(
            name=name, value=value, read_only=False, config_source=source,
            is_sensitive=key.sensitive, synonyms=broker_rows, config_type=CONFIG_TYPE_CODES[key.type],
            documentation=key.documentation if include_documentation else None))
    return rows


def describe_broker_configs(apis, default_resource, keys, include_synonyms, include_documentation):
    """Rows for this broker (every defined config) or for the cluster default (only what is set)."""
    config = apis.config
    if default_resource:
        names = sorted(config.dynamic_default)
    else:
        names = list(config.definitions.names())
    if keys is not None:
        names = [n for n in names if n in keys]
    rows = []
    for entry in config.describe(names, include_synonyms=include_synonyms,
                                 include_documentation=include_documentation):
        value = None if entry.is_sensitive else entry.value
        source = entry.source
        synonyms = [_Synonym(name=s.name, value=None if entry.is_sensitive else s.value, source=s.source)
                    for s in entry.synonyms]
        if default_resource:
            key = config.definitions[entry.name]
            raw = config.dynamic_default[entry.name]
            value = None if entry.is_sensitive else to_config_string(key.type, key.parse(raw))
            source = DYNAMIC_DEFAULT_BROKER_CONFIG
            synonyms = [s for s in synonyms if s.source == DYNAMIC_DEFAULT_BROKER_CONFIG]
        rows.append(_Entry(
            name=entry.name, value=value, read_only=entry.read_only, config_source=source,
            is_sensitive=entry.is_sensitive, synonyms=synonyms, config_type=entry.config_type,
            documentation=entry.documentation))
    return rows


def _authorize(apis, request, res, operation):
    """Kafka's per-resource check: the topic, or the cluster for a broker or broker logger."""
    if res.resource_type == TOPIC:
        if not apis.allowed(request, operation, ResourceType.TOPIC, res.resource_name):
            raise KafkaError(errors.TOPIC_AUTHORIZATION_FAILED, None)
    elif not apis.allowed(request, operation, ResourceType.CLUSTER, CLUSTER_NAME):
        raise KafkaError(errors.CLUSTER_AUTHORIZATION_FAILED, None)


@provider(IApiHandler)
class DescribeConfigs:
    API_KEY = 32
    VERSIONS = (1, 4)

    @staticmethod
    def handle(apis, request):
        body = request.body
        include_synonyms = bool(body.include_synonyms) and request.api_version >= 1
        include_documentation = bool(body.include_documentation) and request.api_version >= 3
        results = []
        for res in body.resources:
            result = _Result(error_code=errors.NONE, error_message=None,
                             resource_type=res.resource_type, resource_name=res.resource_name,
                             configs=[])
            keys = None if res.configuration_keys is None else set(res.configuration_keys)
            try:
                _authorize(apis, request, res, AclOperation.DESCRIBE_CONFIGS)
                if res.resource_type == TOPIC:
                    info = _topic_info(apis, res.resource_name)
                    result.configs = describe_topic_configs(
                        apis, info, keys, include_synonyms, include_documentation)
                elif res.resource_type == BROKER:
                    default_resource = _check_broker_name(apis, res.resource_name)
                    result.configs = describe_broker_configs(
                        apis, default_resource, keys, include_synonyms, include_documentation)
                else:
                    raise KafkaError(errors.INVALID_REQUEST,
                                     "Unsupported resource type %d" % res.resource_type)
            except KafkaError as e:
                result.error_code, result.error_message = e.code, e.message
            if request.api_version < 3:
                for row in result.configs:  # ConfigType and Documentation are v3+
                    row.config_type, row.documentation = 0, None
            results.append(result)
        return DescribeConfigsResponse(throttle_time_ms=0, results=results)

    @staticmethod
    def error_response(request, code, message):
        return DescribeConfigsResponse(throttle_time_ms=0, results=[
            _Result(error_code=code, error_message=message, resource_type=r.resource_type,
                    resource_name=r.resource_name, configs=[]) for r in request.body.resources])


# -- alter -------------------------------------------------------------------------------------

def _split(value):
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _current_topic(apis, info):
    return dict(info.configs)


def _current_broker(apis, default_resource):
    config = apis.config
    return dict(config.dynamic_default if default_resource else config.dynamic_broker)


def incremental_result(resource_type, current, ops):
    """Apply IncrementalAlterConfigs ops to ``current`` (name -> str); returns the new dict."""
    definitions = TOPIC_CONFIG_DEF if resource_type == TOPIC else None
    new = dict(current)
    seen = set()
    for op in ops:
        if op.name in seen:
            raise KafkaError(errors.INVALID_CONFIG, "Error due to duplicate config keys")
        seen.add(op.name)
    for op in ops:
        name, value = op.name, op.value
        if op.config_operation == SET:
            new[name] = value
        elif op.config_operation == DELETE:
            new.pop(name, None)
        elif op.config_operation in (APPEND, SUBTRACT):
            defs = definitions if definitions is not None else BROKER_CONFIG_DEF
            key = defs[name] if name in defs else None
            if key is None or key.type != LIST:
                verb = "append" if op.config_operation == APPEND else "subtract"
                raise KafkaError(errors.INVALID_CONFIG,
                                 "Config value %s is not allowed for config key: %s" % (verb, name))
            base = new.get(name)
            if base is None:
                base = key.default if isinstance(key.default, str) else ",".join(key.default or [])
            parts = _split(base)
            if op.config_operation == APPEND:
                parts += [v for v in _split(value) if v not in parts]
            else:
                remove = set(_split(value))
                parts = [p for p in parts if p not in remove]
            new[name] = ",".join(parts)
        else:
            raise KafkaError(errors.INVALID_REQUEST,
                             "Unknown alter config operation %d for %s" % (op.config_operation, name))
    return new


def _apply_topic(apis, info, new, validate_only):
    new = without_removed_configs(info.name, new)
    for name, value in new.items():
        if value is None:
            raise KafkaError(errors.INVALID_CONFIG, "Null value not supported for topic configs: %s" % name)
    try:
        validate_topic_config(new)
    except ConfigError as e:
        raise KafkaError(errors.INVALID_CONFIG, str(e))
    if validate_only:
        return

    def durable(_):
        if apis.log_manager is not None:
            apis.log_manager.update_log_config(info.name, new)
        log.info("topic {name} configs now {configs}", name=info.name, configs=new)
    return apis.metadata.alter_topic_configs(info.name, new).addCallback(durable)


def _apply_broker(apis, default_resource, new, validate_only):
    """Make ``new`` this node's (or the cluster-default) dynamic layer: in force, then persisted.

    Like Kafka, a key that cannot change while the broker runs, a bad value or a component
    that cannot apply it is INVALID_REQUEST "Invalid config value for resource ...", and then
    nothing changed: not the live config, not the stored layer.
    """
    config = apis.config
    for name, value in new.items():
        if (name not in config.definitions and not name.startswith(KNOWN_PREFIXES)
                and name not in UNIMPLEMENTED_BROKER_CONFIGS):  # Kafka's: refused as not dynamic
            removed = removed_config(name, REMOVED_BROKER_CONFIGS, REMOVED_BROKER_PREFIXES)
            if removed is not None:  # nothing to apply live: say what became of it
                raise KafkaError(errors.INVALID_CONFIG, removed.message())
            raise KafkaError(errors.INVALID_CONFIG, "Unknown broker config name: %s" % (name,))
        if value is None:
            raise KafkaError(errors.INVALID_CONFIG, "Null value not supported for : %s" % (name,))
    layer = "dynamic_default" if default_resource else "dynamic_broker"
    dynamic = apis.dynamic_config
    try:
        dynamic.update(validate_only=validate_only, **{layer: new})
    except ConfigError as e:
        resource = "ConfigResource(type=BROKER, name='%s')" % ("" if default_resource else apis.node_id)
        raise KafkaError(errors.INVALID_REQUEST,
                         "Invalid config value for resource %s: %s" % (resource, e))
    if validate_only:
        return

    def revert(failure):
        dynamic.update(**{layer: getattr(config, layer)})  # not stored: not in force either
        return failure

    def stored(_):
        log.info("dynamic broker configs ({which}) now {configs}",
                 which="cluster default" if default_resource else "node %d" % apis.node_id, configs=new)
    try:
        d = apis.metadata.set_broker_configs(new, default=default_resource)  # written in the pool
    except Exception:
        revert(None)
        raise
    return d.addCallbacks(stored, revert)


def apply_stored_broker_configs(apis, default, configs):
    """Dynamic broker configs changed in the cluster's store (the cluster default through
    another broker, or this broker's written by a tool): in force here, then kept in the local
    copy; a layer that cannot apply is logged and left out, as at start-up."""
    layer = "dynamic_default" if default else "dynamic_broker"
    try:
        apis.dynamic_config.update(**{layer: dict(configs)})
    except ConfigError as e:
        log.warn("dynamic broker configs ({which}) from ZooKeeper not applied: {err}",
                 which="cluster default" if default else "node %d" % apis.node_id, err=e)
        return None
    log.info("dynamic broker configs ({which}) from ZooKeeper now {configs}",
             which="cluster default" if default else "node %d" % apis.node_id, configs=configs)
    return apis.metadata.local.set_broker_configs(dict(configs), default)


def _alter(apis, request, incremental, response_cls):
    body = request.body
    counts = Counter((res.resource_type, res.resource_name) for res in body.resources)
    responses = []
    pending = []  # (response entry, Deferred of its durable change or None)
    for res in body.resources:
        out = response_cls.AlterConfigsResourceResponse(
            error_code=errors.NONE, error_message=None, resource_type=res.resource_type,
            resource_name=res.resource_name)
        responses.append(out)
        try:
            if counts[(res.resource_type, res.resource_name)] > 1:
                raise KafkaError(errors.INVALID_REQUEST, "Duplicate resource in request")
            _authorize(apis, request, res, AclOperation.ALTER_CONFIGS)
            if res.resource_type == TOPIC:
                info = _topic_info(apis, res.resource_name)
                if incremental:
                    new = incremental_result(TOPIC, _current_topic(apis, info), res.configs)
                else:
                    new = {c.name: c.value for c in res.configs}
                pending.append((out, _apply_topic(apis, info, new, body.validate_only)))
            elif res.resource_type == BROKER:
                default_resource = _check_broker_name(apis, res.resource_name)
                if incremental:
                    new = incremental_result(BROKER, _current_broker(apis, default_resource), res.configs)
                else:
                    new = {c.name: c.value for c in res.configs}
                pending.append((out, _apply_broker(apis, default_resource, new, body.validate_only)))
            elif res.resource_type == BROKER_LOGGER and incremental:
                _check_broker_name(apis, res.resource_name)  # loggers are not dynamic here
                raise KafkaError(errors.INVALID_REQUEST, "Broker loggers cannot be altered by kafkatw")
            else:
                raise KafkaError(errors.INVALID_REQUEST,
                                 "Unsupported resource type %d" % res.resource_type)
        except KafkaError as e:
            out.error_code, out.error_message = e.code, e.message
    response = response_cls(throttle_time_ms=0, responses=responses)
    # changes are written in the thread pool: answer once every one of them is durable
    waits = [d.addErrback(_write_failed, out) for out, d in pending if d is not None]
    if not waits:
        return response
    return defer.gatherResults(waits).addCallback(lambda _: response)


def _write_failed(failure, out):
    log.failure("altering configs of {name} failed", failure, name=out.resource_name)
    out.error_code = errors.KAFKA_STORAGE_ERROR
    out.error_message = "The metadata could not be written: %s" % (failure.getErrorMessage(),)


def _alter_error(response_cls, request, code, message):
    return response_cls(throttle_time_ms=0, responses=[
        response_cls.AlterConfigsResourceResponse(
            error_code=code, error_message=message, resource_type=r.resource_type,
            resource_name=r.resource_name) for r in request.body.resources])


@provider(IApiHandler)
class AlterConfigs:
    API_KEY = 33
    VERSIONS = (0, 2)

    @staticmethod
    def handle(apis, request):
        return _alter(apis, request, False, AlterConfigsResponse)

    @staticmethod
    def error_response(request, code, message):
        return _alter_error(AlterConfigsResponse, request, code, message)


@provider(IApiHandler)
class IncrementalAlterConfigs:
    API_KEY = 44
    VERSIONS = (0, 1)

    @staticmethod
    def handle(apis, request):
        return _alter(apis, request, True, IncrementalAlterConfigsResponse)

    @staticmethod
    def error_response(request, code, message):
        return _alter_error(IncrementalAlterConfigsResponse, request, code, message)
