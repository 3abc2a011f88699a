"""The broker's configuration under Apache Kafka's names, types and defaults.

One module per concern: ``types`` (ConfigError, value types, validators, ConfigDef), ``topic``
(the topic config table and its broker synonyms), ``broker`` (the broker config table),
``properties`` (.properties files, ``--override``), ``listeners`` (endpoints),
``kafka_config`` (KafkaConfig: layers, derived values, DescribeConfigs rows) and ``dynamic``
(what may change while the broker runs). This package re-exports their public names.
"""

from kafkatw.config.broker import BROKER_CONFIG_DEF, KNOWN_PREFIXES
from kafkatw.config.dynamic import DYNAMIC_BROKER_CONFIGS
from kafkatw.config.kafka_config import ConfigEntry, ConfigSynonym, KafkaConfig
from kafkatw.config.listeners import (
    SECURITY_PROTOCOLS,
    Endpoint,
    parse_host_port,
    parse_listeners,
    parse_protocol_map,
)
from kafkatw.config.properties import parse_override, parse_properties, read_properties_file
from kafkatw.config.topic import (
    CLEANUP_POLICIES,
    COMPRESSION_TYPES,
    SYNONYM_MULTIPLIERS,
    TIMESTAMP_TYPES,
    TOPIC_CONFIG_DEF,
    TOPIC_CONFIG_SYNONYMS,
    validate_topic_config,
)
from kafkatw.config.types import (
    BOOLEAN,
    CLASS,
    CONFIG_SOURCE_NAMES,
    CONFIG_TYPE_CODES,
    DAY_MS,
    DEFAULT_CONFIG,
    DOUBLE,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    HIGH,
    HOUR_MS,
    INT,
    INT_MAX,
    INT_MIN,
    LIST,
    LONG,
    LONG_MAX,
    LONG_MIN,
    LOW,
    MEDIUM,
    MINUTE_MS,
    PASSWORD,
    SHORT,
    SHORT_MAX,
    SHORT_MIN,
    STATIC_BROKER_CONFIG,
    STRING,
    TOPIC_CONFIG,
    UNKNOWN_SOURCE,
    ConfigDef,
    ConfigError,
    ConfigKey,
    GiB,
    IntOneOfOrRange,
    KiB,
    ListOf,
    MiB,
    OneOf,
    Password,
    Range,
    at_least,
    between,
    parse_type,
    to_config_string,
)

__all__ = [
    "BOOLEAN", "BROKER_CONFIG_DEF", "CLASS", "CLEANUP_POLICIES", "COMPRESSION_TYPES",
    "CONFIG_SOURCE_NAMES", "CONFIG_TYPE_CODES", "DAY_MS", "DEFAULT_CONFIG", "DOUBLE",
    "DYNAMIC_BROKER_CONFIG", "DYNAMIC_BROKER_CONFIGS", "DYNAMIC_DEFAULT_BROKER_CONFIG", "HIGH",
    "HOUR_MS", "INT", "INT_MAX", "INT_MIN", "KNOWN_PREFIXES", "LIST", "LONG", "LONG_MAX",
    "LONG_MIN", "LOW", "MEDIUM", "MINUTE_MS", "PASSWORD", "SECURITY_PROTOCOLS", "SHORT",
    "SHORT_MAX", "SHORT_MIN", "STATIC_BROKER_CONFIG", "STRING", "SYNONYM_MULTIPLIERS",
    "TIMESTAMP_TYPES", "TOPIC_CONFIG", "TOPIC_CONFIG_DEF", "TOPIC_CONFIG_SYNONYMS",
    "UNKNOWN_SOURCE", "ConfigDef", "ConfigEntry", "ConfigError", "ConfigKey", "ConfigSynonym",
    "Endpoint", "GiB", "IntOneOfOrRange", "KafkaConfig", "KiB", "ListOf", "MiB", "OneOf",
    "Password", "Range", "at_least", "between", "parse_host_port", "parse_listeners", "parse_override",
    "parse_properties", "parse_protocol_map", "parse_type", "read_properties_file",
    "to_config_string", "validate_topic_config",
]
