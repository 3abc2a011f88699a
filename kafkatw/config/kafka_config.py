"""KafkaConfig: the broker's effective configuration, typed and validated, from its layers
(dynamic per-broker, dynamic cluster default, static file and ``--override``, defaults), with
derived values (listeners, log dirs, retention precedence, node id) and the DescribeConfigs rows.

It applies nothing: the service and the layers below read the values.
"""

import os

import attr
from twisted.logger import Logger

from kafkatw.config.broker import BROKER_CONFIG_DEF, KNOWN_PREFIXES
from kafkatw.config.dynamic import DYNAMIC_BROKER_CONFIGS
from kafkatw.config.listeners import parse_listeners, parse_protocol_map
from kafkatw.config.properties import parse_override, read_properties_file
from kafkatw.config.removed import REFUSED, REMOVED_BROKER_CONFIGS, REMOVED_BROKER_PREFIXES, removed_config
from kafkatw.config.topic import SYNONYM_MULTIPLIERS, TOPIC_CONFIG_SYNONYMS, topic_defaults
from kafkatw.config.types import (
    CONFIG_SOURCE_NAMES,
    CONFIG_TYPE_CODES,
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    STATIC_BROKER_CONFIG,
    ConfigError,
    is_integer_text,
    split_list,
    to_config_string,
)
from kafkatw.config.unimplemented import UNIMPLEMENTED_BROKER_CONFIGS, unimplemented_message

log = Logger(namespace="kafkatw.config")


@attr.s(slots=True, frozen=True)
class ConfigSynonym:
    name = attr.ib()
    value = attr.ib()
    source = attr.ib()


@attr.s(slots=True, frozen=True)
class ConfigEntry:
    """One row of :meth:`KafkaConfig.describe` (what DescribeConfigs reports)."""

    name = attr.ib()
    value = attr.ib()             # string as Kafka renders it, None if null or sensitive
    source = attr.ib()            # ConfigSource code
    is_default = attr.ib()
    read_only = attr.ib()
    is_sensitive = attr.ib()
    config_type = attr.ib()       # ConfigType code
    documentation = attr.ib()
    default = attr.ib()           # default rendered as a string (None if null)
    synonyms = attr.ib(factory=list)

    @property
    def source_name(self):
        return CONFIG_SOURCE_NAMES[self.source]


class KafkaConfig:
    """Typed, validated broker configuration.

    Layers, highest first: dynamic per-broker, dynamic cluster default, static (file and
    ``--override``), definition default. ``config[name]`` is the typed effective value.
    """

    def __init__(self, static=None, dynamic_broker=None, dynamic_default=None, definitions=None,
                 source_file=None, warn=True):
        self.definitions = definitions or BROKER_CONFIG_DEF
        self.source_file = source_file
        self.originals = dict(static or {})
        self.dynamic_broker = dict(dynamic_broker or {})
        self.dynamic_default = dict(dynamic_default or {})
        self.unknown = {}
        self.ignored_removed = []  # RemovedConfig: Kafka 3.x names accepted and ignored
        self.unimplemented = []  # static names of Kafka features kafkatw does not implement
        self._layers = {}  # name -> [(source, raw, typed)] highest priority first
        self._values = {}
        self._sources = {}
        for source, props in ((DYNAMIC_BROKER_CONFIG, self.dynamic_broker),
                              (DYNAMIC_DEFAULT_BROKER_CONFIG, self.dynamic_default),
                              (STATIC_BROKER_CONFIG, self.originals)):
            for name, raw in props.items():
                if name not in self.definitions:
                    removed = removed_config(name, REMOVED_BROKER_CONFIGS, REMOVED_BROKER_PREFIXES)
                    if removed is not None:
                        if removed.action == REFUSED:
                            raise ConfigError(removed.message(), name, raw)
                        self.ignored_removed.append(removed)
                    elif name in UNIMPLEMENTED_BROKER_CONFIGS:
                        if source == STATIC_BROKER_CONFIG:
                            self.unimplemented.append(name)
                    elif source == STATIC_BROKER_CONFIG and not name.startswith(KNOWN_PREFIXES):
                        self.unknown[name] = raw
                    continue
                typed = self.definitions[name].parse(raw)
                self._layers.setdefault(name, []).append((source, raw, typed))
                if source == STATIC_BROKER_CONFIG and name in UNIMPLEMENTED_BROKER_CONFIGS:
                    self.unimplemented.append(name)  # defined (dynamic in Kafka), still inert
        for key in self.definitions:
            layers = self._layers.get(key.name)
            if layers:
                self._sources[key.name] = layers[0][0]
                self._values[key.name] = layers[0][2]
            else:
                self._sources[key.name] = DEFAULT_CONFIG
                self._values[key.name] = key.parse(key.default)
        if warn:
            self._warn_static()
        self._derive()

    def _warn_static(self):
        """One line per unknown, removed or unimplemented name of the static layer; said once,
        at start-up (a config rebuilt with new dynamic layers does not repeat them)."""
        for name in sorted(self.unknown):
            log.warn("The configuration '{name}' was supplied but isn't a known config.", name=name)
        for removed in self.ignored_removed:
            log.warn("{message}", message=removed.message())
        for name in sorted(self.unimplemented):
            log.warn("{message}", message=unimplemented_message(name))

    # -- constructors ---------------------------------------------------------------------------
    @classmethod
    def from_properties(cls, props=None, **kwargs):
        """From a mapping of property name to string (or typed) value."""
        return cls(static=props, **kwargs)

    @classmethod
    def from_file(cls, path=None, overrides=(), **kwargs):
        """From a ``.properties`` file (or none: defaults) plus ``key=value`` overrides."""
        props = read_properties_file(path) if path is not None else {}
        if isinstance(overrides, dict):
            props.update(overrides)
        else:
            for item in overrides:
                key, value = item if isinstance(item, tuple) else parse_override(item)
                props[key] = value
        return cls(static=props, source_file=path, **kwargs)

    def with_dynamic(self, dynamic_broker=None, dynamic_default=None):
        """A new config with these dynamic layers (as IncrementalAlterConfigs would store)."""
        return type(self)(self.originals,
                          dynamic_broker=self.dynamic_broker if dynamic_broker is None
                          else dynamic_broker,
                          dynamic_default=self.dynamic_default if dynamic_default is None
                          else dynamic_default,
                          definitions=self.definitions, source_file=self.source_file,
                          warn=False)

    # -- access ---------------------------------------------------------------------------------
    def __getitem__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise KeyError("%s is not a defined broker configuration" % (name,))

    def __contains__(self, name):
        return name in self._values

    def get(self, name, default=None):
        return self._values.get(name, default)

    def source(self, name):
        """The ConfigSource code of the effective value of ``name``."""
        return self._sources[name]

    def is_set(self, name):
        return self._sources.get(name, DEFAULT_CONFIG) != DEFAULT_CONFIG

    def values(self):
        """All defined names -> typed effective value (a copy)."""
        return dict(self._values)

    def with_prefix(self, prefix):
        """Original properties starting with ``prefix``, prefix stripped (listener.name.x.)."""
        return {k[len(prefix):]: v for k, v in self.originals.items() if k.startswith(prefix)}

    # -- derived --------------------------------------------------------------------------------
    @staticmethod
    def _check_group_coordinator_configs(v):
        """Kafka's GroupCoordinatorConfig requirements on the rebalance protocols (classic cannot
        be disabled) and the consumer-protocol timeouts."""
        if "classic" not in v["group.coordinator.rebalance.protocols"]:
            raise ConfigError.invalid("group.coordinator.rebalance.protocols",
                                      ",".join(v["group.coordinator.rebalance.protocols"]),
                                      "disabling the 'classic' protocol is not supported")
        for kind in ("session.timeout", "heartbeat.interval"):
            name = "group.consumer.%s.ms" % kind
            lo, hi = v["group.consumer.min.%s.ms" % kind], v["group.consumer.max.%s.ms" % kind]
            if not lo <= v[name] <= hi:
                raise ConfigError.invalid(name, v[name], "must be between "
                                          "group.consumer.min.%s.ms (%d) and "
                                          "group.consumer.max.%s.ms (%d)" % (kind, lo, kind, hi))
        if v["group.consumer.heartbeat.interval.ms"] >= v["group.consumer.session.timeout.ms"]:
            raise ConfigError.invalid("group.consumer.heartbeat.interval.ms",
                                      v["group.consumer.heartbeat.interval.ms"],
                                      "must be less than group.consumer.session.timeout.ms (%d)"
                                      % v["group.consumer.session.timeout.ms"])

    @staticmethod
    def _check_replica_fetch_wait(v):
        """Kafka's requirements on a follower's fetch wait: a fetch the leader parks for
        replica.fetch.wait.max.ms must neither outlast the follower's request timeout nor the
        time a follower may lag before it leaves the ISR."""
        wait = v["replica.fetch.wait.max.ms"]
        for name in ("replica.socket.timeout.ms", "replica.lag.time.max.ms"):
            if wait > v[name]:
                raise ConfigError.invalid("replica.fetch.wait.max.ms", wait,
                                          "must not be greater than %s (%d)" % (name, v[name]))

    def _derive(self):
        v = self._values
        # node.id / broker.id alias
        node_set = self.is_set("node.id")
        broker_set = self.is_set("broker.id") and v["broker.id"] >= 0
        if node_set and broker_set and v["node.id"] != v["broker.id"]:
            raise ConfigError("broker.id (%d) must be equal to node.id (%d)"
                              % (v["broker.id"], v["node.id"]), "broker.id", v["broker.id"])
        if broker_set and not node_set:
            v["node.id"] = v["broker.id"]
        self.node_id = v["node.id"]
        v["broker.id"] = self.node_id

        self.listener_security_protocol_map = parse_protocol_map(
            "listener.security.protocol.map", v["listener.security.protocol.map"])
        self.listeners = parse_listeners("listeners", v["listeners"],
                                         self.listener_security_protocol_map)
        if not self.listeners:
            raise ConfigError.invalid("listeners", v["listeners"], "at least one listener is "
                                      "required")
        if v["advertised.listeners"] is None:
            # the meta-address is advertised like an empty host: the service names the host
            self.advertised_listeners = [
                attr.evolve(e, host="") if e.host == "0.0.0.0" else e for e in self.listeners]
        else:
            self.advertised_listeners = parse_listeners(
                "advertised.listeners", v["advertised.listeners"],
                self.listener_security_protocol_map)
            known = {e.listener_name for e in self.listeners}
            for e in self.advertised_listeners:
                if e.listener_name not in known:
                    raise ConfigError.invalid(
                        "advertised.listeners", v["advertised.listeners"],
                        "listener %s is not defined in listeners (%s)"
                        % (e.listener_name, ", ".join(sorted(known))))
                if e.host == "0.0.0.0":
                    raise ConfigError.invalid(
                        "advertised.listeners", v["advertised.listeners"],
                        "cannot use the nonroutable meta-address 0.0.0.0")
        names = [e.listener_name for e in self.listeners]
        if v["inter.broker.listener.name"] is not None:
            ibl = v["inter.broker.listener.name"].upper()
            if ibl not in names:
                raise ConfigError.invalid("inter.broker.listener.name", ibl,
                                          "must be a listener name defined in listeners (%s)"
                                          % ", ".join(names))
        elif v["security.inter.broker.protocol"] in names:
            ibl = v["security.inter.broker.protocol"]
        else:
            ibl = names[0]  # single-node friendliness: Kafka would refuse to start here
        self.inter_broker_listener_name = ibl

        if v["log.dirs"] is not None:
            dirs = [d for d in split_list(v["log.dirs"]) if d]
            origin = "log.dirs"
        else:
            dirs = [d for d in split_list(v["log.dir"]) if d]
            origin = "log.dir"
        if not dirs:
            raise ConfigError.invalid(origin, v[origin], "at least one directory is required")
        if len(set(os.path.normpath(d) for d in dirs)) != len(dirs):
            raise ConfigError.invalid(origin, v[origin], "a directory is listed twice")
        self.log_dirs = dirs

        self.log_retention_ms = self._first_synonym_ms("retention.ms")
        if self.log_retention_ms < 0:
            self.log_retention_ms = -1
        if self.log_retention_ms == 0:
            used = next(n for n in TOPIC_CONFIG_SYNONYMS["retention.ms"] if v[n] is not None)
            raise ConfigError.invalid(used, v[used], "log retention must be unlimited (-1) or, "
                                      "equal or greater than 1 ms")
        self._check_group_coordinator_configs(v)
        self._check_replica_fetch_wait(v)
        self.log_roll_ms = self._first_synonym_ms("segment.ms")
        self.log_roll_jitter_ms = self._first_synonym_ms("segment.jitter.ms")
        self.log_flush_interval_ms = self._first_synonym_ms("flush.ms")
        self.max_connections_per_ip_overrides = self._parse_ip_overrides(
            v["max.connections.per.ip.overrides"])
        self.super_users = [u.strip() for u in (v["super.users"] or "").split(";") if u.strip()]
        self.request_log_enabled = v["kafkatw.request.log.enable"]
        self.request_log_file = v["kafkatw.request.log.file"]

    def _first_synonym_ms(self, topic_name):
        for name in TOPIC_CONFIG_SYNONYMS[topic_name]:
            value = self._values[name]
            if value is not None:
                return value * SYNONYM_MULTIPLIERS.get(name, 1)
        raise AssertionError("no value for any synonym of %s" % (topic_name,))

    @staticmethod
    def _parse_ip_overrides(text):
        name = "max.connections.per.ip.overrides"
        overrides = {}
        for entry in split_list(text):
            host, sep, count = entry.rpartition(":")
            if not sep or not host or not is_integer_text(count.strip()):
                raise ConfigError.invalid(name, text, "entry %r must be of the form host:count"
                                          % (entry,))
            overrides[host.strip()] = int(count)
        return overrides

    def topic_defaults(self):
        """Topic config name -> typed default derived from this broker config (LogConfig)."""
        return topic_defaults(self._values)

    # -- describe -------------------------------------------------------------------------------
    def describe(self, names=None, include_synonyms=False, include_documentation=True):
        """ConfigEntry rows for ``names`` (all defined keys if None), Kafka's DescribeConfigs view."""
        rows = []
        for name in (names if names is not None else self.definitions.names()):
            if name not in self.definitions:
                continue
            key = self.definitions[name]
            value = self._values[name]
            source = self._sources[name]
            synonyms = []
            if include_synonyms:
                synonyms = self._synonyms(name)
            rows.append(ConfigEntry(
                name=name,
                value=to_config_string(key.type, value),
                source=source,
                is_default=source == DEFAULT_CONFIG,
                read_only=name not in DYNAMIC_BROKER_CONFIGS,
                is_sensitive=key.sensitive,
                config_type=CONFIG_TYPE_CODES[key.type],
                documentation=key.documentation if include_documentation else None,
                default=to_config_string(key.type, key.parse(key.default)),
                synonyms=synonyms,
            ))
        return rows

    def _synonyms(self, name):
        """Kafka's broker synonyms: every layer where the name or a lower-priority alias is set."""
        group = [name]
        for names in TOPIC_CONFIG_SYNONYMS.values():
            if name in names:
                group = names[names.index(name):]
                break
        out = []
        for syn in group:
            key = self.definitions[syn]
            for source, _raw, typed in self._layers.get(syn, []):
                out.append(ConfigSynonym(syn, to_config_string(key.type, typed), source))
            if key.default is not None:
                out.append(ConfigSynonym(syn, to_config_string(key.type, key.parse(key.default)),
                                         DEFAULT_CONFIG))
        return out

    def __repr__(self):
        return "<KafkaConfig node.id=%d listeners=%s log.dirs=%s>" % (
            self.node_id, ",".join(str(e) for e in self.listeners), ",".join(self.log_dirs))
