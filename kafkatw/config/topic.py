"""The topic-level configs: their one definition table (names, types, defaults, validators,
documentation), the broker configs that give their defaults, and topic config validation.

Imports only ``types.py``, so storage (LogConfig) derives from this same table. Broker property
definitions are in ``broker.py``.
"""

from kafkatw.config.types import (
    BOOLEAN,
    DAY_MS,
    DOUBLE,
    GiB,
    HOUR_MS,
    INT,
    LIST,
    LONG,
    LONG_MAX,
    MEDIUM,
    MINUTE_MS,
    MiB,
    STRING,
    ConfigDef,
    ConfigError,
    IntOneOfOrRange,
    ListOf,
    OneOf,
    Range,
    at_least,
    between,
    parse_type,
)

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("compact", "delete")

GZIP_LEVEL = IntOneOfOrRange([-1], 1, 9)
LZ4_LEVEL = Range(1, 17)
ZSTD_LEVEL = Range(-131072, 22)


#: Topic config name -> broker configs giving its default, in priority order (Kafka's
#: ServerTopicConfigSynonyms). The first one that has a value (set or defaulted) wins.
TOPIC_CONFIG_SYNONYMS = {
    "segment.bytes": ["log.segment.bytes"],
    "segment.ms": ["log.roll.ms", "log.roll.hours"],
    "segment.jitter.ms": ["log.roll.jitter.ms", "log.roll.jitter.hours"],
    "segment.index.bytes": ["log.index.size.max.bytes"],
    "flush.messages": ["log.flush.interval.messages"],
    "flush.ms": ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"],
    "retention.bytes": ["log.retention.bytes"],
    "retention.ms": ["log.retention.ms", "log.retention.minutes", "log.retention.hours"],
    "max.message.bytes": ["message.max.bytes"],
    "index.interval.bytes": ["log.index.interval.bytes"],
    "delete.retention.ms": ["log.cleaner.delete.retention.ms"],
    "min.compaction.lag.ms": ["log.cleaner.min.compaction.lag.ms"],
    "max.compaction.lag.ms": ["log.cleaner.max.compaction.lag.ms"],
    "file.delete.delay.ms": ["log.segment.delete.delay.ms"],
    "min.cleanable.dirty.ratio": ["log.cleaner.min.cleanable.ratio"],
    "cleanup.policy": ["log.cleanup.policy"],
    "unclean.leader.election.enable": ["unclean.leader.election.enable"],
    "min.insync.replicas": ["min.insync.replicas"],
    "compression.type": ["compression.type"],
    "compression.gzip.level": ["compression.gzip.level"],
    "compression.lz4.level": ["compression.lz4.level"],
    "compression.zstd.level": ["compression.zstd.level"],
    "preallocate": ["log.preallocate"],
    "message.timestamp.type": ["log.message.timestamp.type"],
    "message.timestamp.before.max.ms": ["log.message.timestamp.before.max.ms"],
    "message.timestamp.after.max.ms": ["log.message.timestamp.after.max.ms"],
    "local.retention.ms": ["log.local.retention.ms"],
    "local.retention.bytes": ["log.local.retention.bytes"],
}

#: Broker synonyms whose value must be converted to the topic config's unit (milliseconds).
SYNONYM_MULTIPLIERS = {
    "log.roll.hours": HOUR_MS,
    "log.roll.jitter.hours": HOUR_MS,
    "log.retention.minutes": MINUTE_MS,
    "log.retention.hours": HOUR_MS,
}

TOPIC_CONFIG_DEF = ConfigDef()
_t = TOPIC_CONFIG_DEF.define


class _ThrottledReplicaList:
    """Kafka's ThrottledReplicaListValidator: ``*`` or ``partition:broker`` pairs."""

    def __call__(self, name, value):
        items = [v.strip() for v in value]
        if items == ["*"] or not items:
            return
        for item in items:
            p, sep, b = item.partition(":")
            if not (sep and p.strip().isdigit() and b.strip().isdigit()):
                raise ConfigError.invalid(name, ",".join(value), "%s must be the literal '*' or a list of "
                                          "replicas in the following format: [partitionId]:[brokerId],"
                                          "[partitionId]:[brokerId],..." % name)

    def __str__(self):
        return "[partitionId]:[brokerId],[partitionId]:[brokerId],..."


THROTTLED_REPLICAS = _ThrottledReplicaList()

_t("cleanup.policy", LIST, "delete", ListOf(*CLEANUP_POLICIES), MEDIUM,
   "Retention policy of old segments: delete, compact, or both.")
_t("compression.type", STRING, "producer", OneOf(*COMPRESSION_TYPES), MEDIUM,
   "Final compression of the topic's data; 'producer' keeps the producer's codec.")
_t("compression.gzip.level", INT, -1, GZIP_LEVEL, MEDIUM, "Compression level for gzip.")
_t("compression.lz4.level", INT, 9, LZ4_LEVEL, MEDIUM, "Compression level for lz4.")
_t("compression.zstd.level", INT, 3, ZSTD_LEVEL, MEDIUM, "Compression level for zstd.")
_t("delete.retention.ms", LONG, DAY_MS, at_least(0), MEDIUM,
   "How long delete tombstones are kept on a compacted topic.")
_t("file.delete.delay.ms", LONG, 60000, at_least(0), MEDIUM,
   "Time to wait before deleting a file from the file system.")
_t("flush.messages", LONG, LONG_MAX, at_least(1), MEDIUM, "Messages between forced fsyncs.")
_t("flush.ms", LONG, LONG_MAX, at_least(0), MEDIUM, "Milliseconds between forced fsyncs.")
_t("follower.replication.throttled.replicas", LIST, "", THROTTLED_REPLICAS, MEDIUM,
   "Replicas throttled on the follower side: [partition]:[broker] pairs or '*'.")
_t("index.interval.bytes", INT, 4096, at_least(0), MEDIUM, "Bytes between offset index entries.")
_t("leader.replication.throttled.replicas", LIST, "", THROTTLED_REPLICAS, MEDIUM,
   "Replicas throttled on the leader side: [partition]:[broker] pairs or '*'.")
_t("local.retention.bytes", LONG, -2, at_least(-2), MEDIUM,
   "Local bytes kept with tiered storage; -2 means retention.bytes.")
_t("local.retention.ms", LONG, -2, at_least(-2), MEDIUM,
   "Local time kept with tiered storage; -2 means retention.ms.")
_t("max.compaction.lag.ms", LONG, LONG_MAX, at_least(1), MEDIUM,
   "Maximum time a message stays ineligible for compaction.")
_t("max.message.bytes", INT, 1024 * 1024 + 12, at_least(0), MEDIUM,
   "Largest record batch size allowed.")
_t("message.timestamp.after.max.ms", LONG, HOUR_MS, at_least(0), MEDIUM,
   "How far in the future a CreateTime timestamp may be.")
_t("message.timestamp.before.max.ms", LONG, LONG_MAX, at_least(0), MEDIUM,
   "How far in the past a CreateTime timestamp may be.")
_t("message.timestamp.type", STRING, "CreateTime", OneOf(*TIMESTAMP_TYPES), MEDIUM,
   "CreateTime or LogAppendTime.")
_t("min.cleanable.dirty.ratio", DOUBLE, 0.5, between(0, 1), MEDIUM,
   "Minimum dirty ratio for the log to be cleaned.")
_t("min.compaction.lag.ms", LONG, 0, at_least(0), MEDIUM, "Minimum time a message stays uncompacted.")
_t("min.insync.replicas", INT, 1, at_least(1), MEDIUM,
   "Minimum in-sync replicas for an acks=all produce.")
_t("preallocate", BOOLEAN, False, None, MEDIUM, "Preallocate segment files.")
_t("remote.storage.enable", BOOLEAN, False, None, MEDIUM, "Tiered storage (not supported by kafkatw).")
_t("retention.bytes", LONG, -1, None, MEDIUM,
   "Maximum partition size before old segments are deleted; -1 means no limit.")
_t("retention.ms", LONG, 7 * DAY_MS, at_least(-1), MEDIUM,
   "Maximum age of a segment before deletion; -1 means no limit.")
_t("segment.bytes", INT, 1 * GiB, at_least(1 * MiB), MEDIUM, "Segment file size.")
_t("segment.index.bytes", INT, 10 * MiB, at_least(4), MEDIUM, "Maximum size of an offset index.")
_t("segment.jitter.ms", LONG, 0, at_least(0), MEDIUM, "Random jitter subtracted from segment.ms.")
_t("segment.ms", LONG, 7 * DAY_MS, at_least(1), MEDIUM, "Maximum age of a segment before rolling.")
_t("unclean.leader.election.enable", BOOLEAN, False, None, MEDIUM,
   "Whether an out-of-sync replica may become leader.")
del _t


def validate_topic_config(configs):
    """Type and validate topic configs (CreateTopics / AlterConfigs); returns a typed dict.

    A ``None`` value (reset to default) passes through as ``None``. Raises :class:`ConfigError`
    for an unknown name or a bad value.
    """
    typed = {}
    for name, value in configs.items():
        if name not in TOPIC_CONFIG_DEF:
            raise ConfigError("Unknown topic config name: %s" % (name,), name, value)
        typed[name] = None if value is None else TOPIC_CONFIG_DEF[name].parse(value)
    low = typed.get("min.compaction.lag.ms")
    high = typed.get("max.compaction.lag.ms")
    if low is not None and high is not None and low > high:
        raise ConfigError("conflict topic config setting min.compaction.lag.ms (%d) > "
                          "max.compaction.lag.ms (%d)" % (low, high), "min.compaction.lag.ms", low)
    return typed




def topic_defaults(broker_values):
    """Topic config name -> its default from broker properties (Kafka's LogConfig defaults).

    ``broker_values`` maps broker property names to typed values or strings (``None`` or absent
    means unset). For each topic config the first of its broker synonyms with a value wins,
    converted to milliseconds where the synonym counts hours or minutes; a topic config without
    a synonym (or with none set) takes the table's default. Values are typed by the topic table.
    """
    out = {}
    for key in TOPIC_CONFIG_DEF:
        value = key.default
        for name in TOPIC_CONFIG_SYNONYMS.get(key.name, ()):
            raw = broker_values.get(name)
            if raw is None:
                continue
            value = raw
            if name in SYNONYM_MULTIPLIERS:
                number = parse_type(name, LONG, raw)
                value = number * SYNONYM_MULTIPLIERS[name] if number >= 0 else number
            break
        typed = parse_type(key.name, key.type, value)
        if key.name == "retention.ms" and typed < 0:
            typed = -1  # any negative retention means unlimited
        out[key.name] = typed
    return out
