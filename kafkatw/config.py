"""KafkaConfig: the broker's properties under Apache Kafka's names, types and defaults.

Owns parsing (Java .properties files, ``--override key=value``), typing, validation with one-line
errors, derived values (listeners, retention precedence, node id) and the describe table used by
DescribeConfigs, plus the topic-level config definitions and their broker synonyms. It applies
nothing: the service and the layers below read the values.
"""

import os
import re

import attr
from twisted.logger import Logger

log = Logger(namespace="kafkatw.config")

INT_MAX = 2 ** 31 - 1
INT_MIN = -(2 ** 31)
LONG_MAX = 2 ** 63 - 1
LONG_MIN = -(2 ** 63)
SHORT_MAX = 2 ** 15 - 1
SHORT_MIN = -(2 ** 15)

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
MINUTE_MS = 60 * 1000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS


class ConfigError(ValueError):
    """A configuration problem; ``str()`` is one line naming key, value and what is allowed."""

    def __init__(self, message, name=None, value=None, reason=None):
        super().__init__(_one_line(message))
        self.name = name
        self.value = value
        self.reason = reason

    @classmethod
    def invalid(cls, name, value, reason=None):
        """Kafka's wording: ``Invalid value V for configuration K: reason``."""
        shown = "[hidden]" if isinstance(value, Password) else value
        text = "Invalid value %s for configuration %s" % (shown, name)
        if reason:
            text += ": " + reason
        return cls(text, name, value, reason)


def _one_line(text):
    return str(text).replace("\r", "\\r").replace("\n", "\\n")


class Password:
    """A secret value: compares by value, never prints it."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, Password) and other.value == self.value

    def __hash__(self):
        return hash(self.value)

    def __repr__(self):
        return "[hidden]"

    __str__ = __repr__


# -- types --------------------------------------------------------------------------------------
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = (
    "BOOLEAN", "STRING", "INT", "SHORT", "LONG", "DOUBLE", "LIST", "CLASS", "PASSWORD")

#: DescribeConfigsResponse ConfigType codes.
CONFIG_TYPE_CODES = {BOOLEAN: 1, STRING: 2, INT: 3, SHORT: 4, LONG: 5, DOUBLE: 6, LIST: 7,
                     CLASS: 8, PASSWORD: 9}

_INTEGER_BOUNDS = {INT: (INT_MIN, INT_MAX), SHORT: (SHORT_MIN, SHORT_MAX), LONG: (LONG_MIN, LONG_MAX)}
_INTEGER_RE = re.compile(r"[+-]?[0-9]+\Z")
_DOUBLE_RE = re.compile(r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)[dDfF]?\Z")
_CLASS_RE = re.compile(r"[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*\Z")
_LIST_SPLIT_RE = re.compile(r"\s*,\s*")


def parse_type(name, type_, value):
    """Convert ``value`` (a string from a file, or an already typed value) to ``type_``."""
    if value is None:
        return None
    if isinstance(value, str):
        trimmed = value.strip()
    if type_ == BOOLEAN:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and trimmed.lower() in ("true", "false"):
            return trimmed.lower() == "true"
        raise ConfigError.invalid(name, value, "Expected value to be either true or false")
    if type_ in _INTEGER_BOUNDS:
        lo, hi = _INTEGER_BOUNDS[type_]
        if isinstance(value, bool):
            pass
        elif isinstance(value, int):
            if lo <= value <= hi:
                return value
        elif isinstance(value, str) and _INTEGER_RE.match(trimmed):
            number = int(trimmed)
            if lo <= number <= hi:
                return number
        raise ConfigError.invalid(name, value, "Not a number of type %s" % type_)
    if type_ == DOUBLE:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and _DOUBLE_RE.match(trimmed):
            return float(trimmed.rstrip("dDfF").replace("Infinity", "inf"))
        raise ConfigError.invalid(name, value, "Not a number of type DOUBLE")
    if type_ == STRING:
        if isinstance(value, str):
            return trimmed
        raise ConfigError.invalid(name, value, "Expected value to be a string")
    if type_ == LIST:
        if isinstance(value, (list, tuple)):
            return [str(v).strip() for v in value]
        if isinstance(value, str):
            return [] if not trimmed else _LIST_SPLIT_RE.split(trimmed)
        raise ConfigError.invalid(name, value, "Expected a comma separated list.")
    if type_ == PASSWORD:
        if isinstance(value, Password):
            return value
        if isinstance(value, str):
            return Password(trimmed)
        raise ConfigError.invalid(name, value, "Expected value to be a string")
    if type_ == CLASS:
        if isinstance(value, str) and (_CLASS_RE.match(trimmed) or not trimmed):
            return trimmed
        if isinstance(value, type):
            return "%s.%s" % (value.__module__, value.__qualname__)
        raise ConfigError.invalid(name, value, "Expected a class name (dotted Python name).")
    raise AssertionError("unknown config type %r" % (type_,))


def to_config_string(type_, value):
    """A typed value rendered the way Kafka's DescribeConfigs renders it (None stays None)."""
    if value is None:
        return None
    if type_ == BOOLEAN:
        return "true" if value else "false"
    if type_ == LIST:
        return ",".join(value)
    if type_ == PASSWORD:
        return None
    if type_ == DOUBLE:
        return repr(float(value))
    return str(value)


# -- validators ---------------------------------------------------------------------------------
class Range:
    """``[min,...]``, ``[...,max]`` or ``[min,...,max]`` (Kafka's atLeast / between)."""

    def __init__(self, min=None, max=None):
        self.min = min
        self.max = max

    def __call__(self, name, value):
        if self.min is not None and value < self.min:
            raise ConfigError.invalid(name, value, "Value must be at least %s" % (self.min,))
        if self.max is not None and value > self.max:
            raise ConfigError.invalid(name, value, "Value must be no more than %s" % (self.max,))

    def __str__(self):
        if self.max is None:
            return "[%s,...]" % (self.min,)
        if self.min is None:
            return "[...,%s]" % (self.max,)
        return "[%s,...,%s]" % (self.min, self.max)


def at_least(minimum):
    return Range(min=minimum)


def between(minimum, maximum):
    return Range(min=minimum, max=maximum)


class OneOf:
    """The value (a string) is one of a fixed set (Kafka's ValidString)."""

    def __init__(self, *values, case_insensitive=False):
        self.values = values
        self.case_insensitive = case_insensitive

    def _ok(self, value):
        if self.case_insensitive:
            return value.lower() in (v.lower() for v in self.values)
        return value in self.values

    def __call__(self, name, value):
        if not self._ok(value):
            kind = " (case insensitive)" if self.case_insensitive else ""
            raise ConfigError.invalid(name, value, "String must be one of%s: %s"
                                      % (kind, ", ".join(self.values)))

    def __str__(self):
        return "[%s]" % (", ".join(self.values),)


class ListOf(OneOf):
    """Every entry of a list value is one of a fixed set (Kafka's ValidList)."""

    def __call__(self, name, value):
        for item in value:
            if not self._ok(item):
                raise ConfigError.invalid(name, ",".join(value), "String must be one of: %s"
                                          % (", ".join(self.values),))


class IntOneOfOrRange:
    """An int that is either one of a few special values or within a range (compression levels)."""

    def __init__(self, specials, low, high):
        self.specials = tuple(specials)
        self.range = Range(low, high)

    def __call__(self, name, value):
        if value not in self.specials:
            try:
                self.range(name, value)
            except ConfigError:
                raise ConfigError.invalid(name, value, "Value must be %s" % (self,))

    def __str__(self):
        return "%s or %s" % (self.range, " or ".join(str(s) for s in self.specials))


# -- definitions ----------------------------------------------------------------------------------
HIGH, MEDIUM, LOW = "HIGH", "MEDIUM", "LOW"


@attr.s(slots=True, frozen=True)
class ConfigKey:
    """One defined property: name, type, typed default, validator, importance, documentation."""

    name = attr.ib()
    type = attr.ib()
    default = attr.ib()
    validator = attr.ib()
    importance = attr.ib()
    documentation = attr.ib()

    @property
    def sensitive(self):
        return self.type == PASSWORD

    def parse(self, value):
        typed = parse_type(self.name, self.type, value)
        if typed is not None and self.validator is not None:
            try:
                self.validator(self.name, typed)
            except ConfigError as e:
                if isinstance(value, str):  # name the value as it was written
                    raise ConfigError.invalid(self.name, value.strip(), e.reason) from None
                raise
        return typed

    @property
    def valid_values(self):
        return "" if self.validator is None else str(self.validator)


class ConfigDef:
    """An ordered table of :class:`ConfigKey` s."""

    def __init__(self):
        self.keys = {}

    def define(self, name, type_, default, validator=None, importance=MEDIUM, doc=""):
        if name in self.keys:
            raise AssertionError("Configuration %s is defined twice." % (name,))
        key = ConfigKey(name, type_, default, validator, importance, doc)
        if default is not None:
            key.parse(default)  # a default must satisfy its own type and validator
        self.keys[name] = key
        return self

    def __contains__(self, name):
        return name in self.keys

    def __getitem__(self, name):
        return self.keys[name]

    def __iter__(self):
        return iter(self.keys.values())

    def names(self):
        return list(self.keys)


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("compact", "delete")

_GZIP_LEVEL = IntOneOfOrRange([-1], 1, 9)
_LZ4_LEVEL = Range(1, 17)
_ZSTD_LEVEL = Range(-131072, 22)

BROKER_CONFIG_DEF = ConfigDef()
_d = BROKER_CONFIG_DEF.define

# server / KRaft identity
_d("node.id", INT, 1, at_least(0), HIGH,
   "The node id of this server (kafkatw default 1; Kafka requires it to be set).")
_d("broker.id", INT, -1, None, HIGH,
   "Older name of node.id; if set it must equal node.id.")
_d("process.roles", LIST, "broker,controller", ListOf("broker", "controller"), HIGH,
   "Roles of this process. kafkatw always runs broker and embedded controller; informational.")
_d("controller.listener.names", LIST, "", None, HIGH,
   "Listener names used by the controller (informational in single-node mode).")
_d("broker.rack", STRING, None, None, MEDIUM, "Rack of the broker, used in rack-aware assignment.")

# listeners / socket server
_d("listeners", STRING, "PLAINTEXT://127.0.0.1:9092", None, HIGH,
   "Comma-separated URIs NAME://host:port to listen on; an empty host binds all interfaces.")
_d("advertised.listeners", STRING, None, None, HIGH,
   "Listeners published to clients in Metadata; defaults to listeners.")
_d("listener.security.protocol.map", STRING,
   "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", None, LOW,
   "Map of listener name to security protocol, NAME:PROTOCOL pairs separated by commas.")
_d("inter.broker.listener.name", STRING, None, None, MEDIUM,
   "Listener used between brokers; defaults to the one named by security.inter.broker.protocol.")
_d("security.inter.broker.protocol", STRING, "PLAINTEXT", OneOf(*SECURITY_PROTOCOLS), MEDIUM,
   "Security protocol between brokers when inter.broker.listener.name is not set.")
_d("control.plane.listener.name", STRING, None, None, HIGH,
   "Listener for controller traffic (unused in single-node mode).")
_d("early.start.listeners", STRING, None, None, HIGH,
   "Listeners that may start before authorizer initialisation.")
_d("socket.send.buffer.bytes", INT, 100 * KiB, None, HIGH,
   "SO_SNDBUF of server sockets; -1 uses the OS default.")
_d("socket.receive.buffer.bytes", INT, 100 * KiB, None, HIGH,
   "SO_RCVBUF of server sockets; -1 uses the OS default.")
_d("socket.request.max.bytes", INT, 100 * MiB, at_least(1), HIGH,
   "The largest request size the server accepts.")
_d("socket.listen.backlog.size", INT, 50, at_least(1), MEDIUM,
   "Maximum number of pending connections on a listening socket.")
_d("queued.max.requests", INT, 500, at_least(1), HIGH,
   "Requests that may wait for the handlers before the network layer stops reading.")
_d("queued.max.request.bytes", LONG, -1, None, MEDIUM,
   "Bytes of queued requests allowed before no more are read; -1 means no limit.")
_d("num.network.threads", INT, 3, at_least(1), HIGH,
   "Network threads (kafkatw runs one reactor; accepted for compatibility).")
_d("num.io.threads", INT, 8, at_least(1), HIGH,
   "Maximum number of requests handled concurrently.")
_d("background.threads", INT, 10, at_least(1), HIGH, "Threads for background work.")
_d("connections.max.idle.ms", LONG, 10 * MINUTE_MS, None, MEDIUM,
   "Idle connections are closed after this many milliseconds.")
_d("connection.failed.authentication.delay.ms", INT, 100, at_least(0), LOW,
   "Delay before closing a connection that failed authentication.")
_d("max.connections", INT, INT_MAX, at_least(0), MEDIUM,
   "Maximum connections accepted at any time (per listener overrides aside).")
_d("max.connections.per.ip", INT, INT_MAX, at_least(0), MEDIUM,
   "Maximum connections from one IP address.")
_d("max.connections.per.ip.overrides", STRING, "", None, MEDIUM,
   "Per-IP or hostname overrides of max.connections.per.ip, as host:count pairs.")
_d("max.connection.creation.rate", INT, INT_MAX, at_least(0), MEDIUM,
   "Maximum rate of new connections per second.")
_d("request.timeout.ms", INT, 30000, None, MEDIUM, "Client-side request timeout of the broker's own clients.")

# message size / fetch
_d("message.max.bytes", INT, 1024 * 1024 + 12, at_least(0), HIGH,
   "Largest record batch size allowed (topic config max.message.bytes).")
_d("fetch.max.bytes", INT, 55 * MiB, at_least(1024), MEDIUM,
   "Maximum bytes returned for a fetch request.")
_d("max.incremental.fetch.session.cache.slots", INT, 1000, at_least(0), MEDIUM,
   "Maximum number of incremental fetch sessions cached.")
_d("max.request.partition.size.limit", INT, 2000, at_least(1), MEDIUM,
   "Maximum number of partitions in one request (share fetch, produce limits).")
_d("fetch.purgatory.purge.interval.requests", INT, 1000, None, MEDIUM,
   "Purge interval (in requests) of the fetch purgatory.")
_d("producer.purgatory.purge.interval.requests", INT, 1000, None, MEDIUM,
   "Purge interval (in requests) of the produce purgatory.")
_d("delete.records.purgatory.purge.interval.requests", INT, 1, None, MEDIUM,
   "Purge interval (in requests) of the delete records purgatory.")
_d("compression.type", STRING, "producer", OneOf(*COMPRESSION_TYPES), HIGH,
   "Final compression of topic data; 'producer' keeps what the producer used.")
_d("compression.gzip.level", INT, -1, _GZIP_LEVEL, MEDIUM, "Compression level for gzip.")
_d("compression.lz4.level", INT, 9, _LZ4_LEVEL, MEDIUM, "Compression level for lz4.")
_d("compression.zstd.level", INT, 3, _ZSTD_LEVEL, MEDIUM, "Compression level for zstd.")

# replication
_d("default.replication.factor", INT, 1, at_least(1), MEDIUM,
   "Replication factor of automatically created topics.")
_d("min.insync.replicas", INT, 1, at_least(1), HIGH,
   "Minimum in-sync replicas for an acks=all produce to succeed.")
_d("unclean.leader.election.enable", BOOLEAN, False, None, HIGH,
   "Whether an out-of-sync replica may become leader as a last resort.")
_d("replica.lag.time.max.ms", LONG, 30000, None, HIGH,
   "A follower not caught up for this long leaves the ISR.")
_d("replica.fetch.max.bytes", INT, 1 * MiB, at_least(0), MEDIUM,
   "Bytes per partition a follower fetches.")
_d("replica.fetch.response.max.bytes", INT, 10 * MiB, at_least(0), MEDIUM,
   "Maximum bytes of a whole follower fetch response.")
_d("replica.fetch.wait.max.ms", INT, 500, None, MEDIUM, "Max wait of follower fetch requests.")
_d("replica.fetch.min.bytes", INT, 1, None, MEDIUM, "Min bytes of follower fetch responses.")
_d("replica.fetch.backoff.ms", INT, 1000, at_least(0), MEDIUM, "Backoff after a follower fetch error.")
_d("replica.socket.timeout.ms", INT, 30000, None, HIGH, "Socket timeout of follower fetches.")
_d("replica.high.watermark.checkpoint.interval.ms", LONG, 5000, None, HIGH,
   "How often the high watermark is checkpointed to disk.")
_d("num.replica.fetchers", INT, 1, None, HIGH, "Fetcher connections per source broker.")
_d("auto.leader.rebalance.enable", BOOLEAN, True, None, HIGH,
   "Whether the controller moves leadership back to preferred replicas.")

# topics / logs
_d("num.partitions", INT, 1, at_least(1), MEDIUM, "Default number of partitions per topic.")
_d("auto.create.topics.enable", BOOLEAN, True, None, HIGH,
   "Create a topic when Metadata or Produce names one that does not exist.")
_d("delete.topic.enable", BOOLEAN, True, None, HIGH, "Whether DeleteTopics is allowed.")
_d("log.dir", STRING, "/tmp/kafka-logs", None, HIGH,
   "The directory holding log data (used when log.dirs is not set).")
_d("log.dirs", STRING, None, None, HIGH,
   "Comma-separated directories holding log data; relative paths are relative to the working "
   "directory of the process.")
_d("num.recovery.threads.per.data.dir", INT, 2, at_least(1), HIGH,
   "Threads per log dir for recovery at start-up and flushing at shutdown.")
_d("log.segment.bytes", INT, 1 * GiB, at_least(1 * MiB), HIGH, "Maximum size of one log segment file.")
_d("log.roll.ms", LONG, None, None, HIGH,
   "Maximum age of a segment before a new one is rolled; overrides log.roll.hours.")
_d("log.roll.hours", INT, 168, at_least(1), HIGH, "Maximum age of a segment in hours.")
_d("log.roll.jitter.ms", LONG, None, None, HIGH, "Jitter subtracted from the roll time (ms).")
_d("log.roll.jitter.hours", INT, 0, at_least(0), HIGH, "Jitter subtracted from the roll time (hours).")
_d("log.retention.ms", LONG, None, None, HIGH,
   "Milliseconds to keep a log segment; -1 keeps forever. Takes precedence over minutes/hours.")
_d("log.retention.minutes", INT, None, None, HIGH,
   "Minutes to keep a log segment; takes precedence over log.retention.hours.")
_d("log.retention.hours", INT, 168, None, HIGH, "Hours to keep a log segment.")
_d("log.retention.bytes", LONG, -1, None, HIGH,
   "Maximum size of a partition's log before old segments are deleted; -1 means no limit.")
_d("log.retention.check.interval.ms", LONG, 5 * MINUTE_MS, at_least(1), MEDIUM,
   "How often segments are checked for deletion.")
_d("log.cleanup.policy", LIST, "delete", ListOf(*CLEANUP_POLICIES), MEDIUM,
   "Default cleanup policy of segments beyond retention: delete, compact or both.")
_d("log.index.size.max.bytes", INT, 10 * MiB, at_least(4), MEDIUM, "Maximum size of an offset index.")
_d("log.index.interval.bytes", INT, 4096, at_least(0), MEDIUM,
   "Bytes of log between offset index entries.")
_d("log.flush.interval.messages", LONG, LONG_MAX, at_least(1), HIGH,
   "Messages accumulated on a partition before they are flushed to disk.")
_d("log.flush.interval.ms", LONG, None, None, HIGH,
   "Maximum time a message stays unflushed; defaults to log.flush.scheduler.interval.ms.")
_d("log.flush.scheduler.interval.ms", LONG, LONG_MAX, None, HIGH,
   "How often the flusher checks whether logs need flushing.")
_d("log.flush.offset.checkpoint.interval.ms", INT, 60000, at_least(0), HIGH,
   "How often the recovery point checkpoint is written.")
_d("log.flush.start.offset.checkpoint.interval.ms", INT, 60000, at_least(0), HIGH,
   "How often the log start offset checkpoint is written.")
_d("log.segment.delete.delay.ms", LONG, 60000, at_least(0), HIGH,
   "Time to wait before deleting a file from the file system.")
_d("log.preallocate", BOOLEAN, False, None, MEDIUM, "Preallocate segment files.")
_d("log.message.timestamp.type", STRING, "CreateTime", OneOf(*TIMESTAMP_TYPES), MEDIUM,
   "Whether record timestamps are the producer's CreateTime or the broker's LogAppendTime.")
_d("log.message.timestamp.before.max.ms", LONG, LONG_MAX, at_least(0), MEDIUM,
   "How far in the past a CreateTime timestamp may be.")
_d("log.message.timestamp.after.max.ms", LONG, HOUR_MS, at_least(0), MEDIUM,
   "How far in the future a CreateTime timestamp may be.")
_d("log.local.retention.ms", LONG, -2, at_least(-2), MEDIUM,
   "Local retention with tiered storage; -2 means log.retention.ms.")
_d("log.local.retention.bytes", LONG, -2, at_least(-2), MEDIUM,
   "Local retention bytes with tiered storage; -2 means log.retention.bytes.")
_d("log.dir.failure.timeout.ms", LONG, 30000, at_least(1), LOW,
   "Time before a broker with an offline log dir shuts down.")
_d("log.cleaner.enable", BOOLEAN, True, None, MEDIUM, "Run the log cleaner (compaction).")
_d("log.cleaner.threads", INT, 1, at_least(0), MEDIUM, "Log cleaner threads.")
_d("log.cleaner.dedupe.buffer.size", LONG, 128 * MiB, None, MEDIUM,
   "Memory for deduplication across all cleaner threads.")
_d("log.cleaner.io.buffer.size", INT, 512 * KiB, at_least(0), MEDIUM, "I/O buffer of cleaner threads.")
_d("log.cleaner.backoff.ms", LONG, 15000, at_least(0), MEDIUM, "Sleep when no log needs cleaning.")
_d("log.cleaner.delete.retention.ms", LONG, DAY_MS, at_least(0), MEDIUM,
   "How long delete tombstones are retained on compacted topics.")
_d("log.cleaner.min.cleanable.ratio", DOUBLE, 0.5, between(0, 1), MEDIUM,
   "Minimum dirty/total ratio for a log to be eligible for cleaning.")
_d("log.cleaner.min.compaction.lag.ms", LONG, 0, at_least(0), MEDIUM,
   "Minimum time a message stays uncompacted.")
_d("log.cleaner.max.compaction.lag.ms", LONG, LONG_MAX, at_least(1), MEDIUM,
   "Maximum time a message stays ineligible for compaction.")
_d("create.topic.policy.class.name", CLASS, None, None, LOW, "Policy class validating CreateTopics.")
_d("alter.config.policy.class.name", CLASS, None, None, LOW, "Policy class validating AlterConfigs.")

# group coordinator
_d("offsets.topic.num.partitions", INT, 50, at_least(1), HIGH, "Partitions of __consumer_offsets.")
_d("offsets.topic.replication.factor", SHORT, 1, at_least(1), HIGH,
   "Replication factor of __consumer_offsets (kafkatw default 1 for a single node; Kafka's is 3).")
_d("offsets.topic.segment.bytes", INT, 100 * MiB, at_least(1), HIGH,
   "Segment size of __consumer_offsets.")
_d("offsets.topic.compression.codec", INT, 0, None, HIGH,
   "Compression codec id of offset commit batches (0 none).")
_d("offsets.load.buffer.size", INT, 5 * MiB, at_least(1), HIGH,
   "Batch size when loading offsets.")
_d("offsets.retention.minutes", INT, 7 * 24 * 60, at_least(1), HIGH,
   "Committed offsets of an empty group are kept this long.")
_d("offsets.retention.check.interval.ms", LONG, 600000, at_least(1), HIGH,
   "How often stale offsets are checked.")
_d("offsets.commit.timeout.ms", INT, 5000, at_least(1), HIGH,
   "Offset commit wait time for replication.")
_d("offset.metadata.max.bytes", INT, 4096, None, HIGH, "Maximum size of offset commit metadata.")
_d("group.initial.rebalance.delay.ms", INT, 3000, None, MEDIUM,
   "Delay of the first rebalance of a new classic group.")
_d("group.min.session.timeout.ms", INT, 6000, None, MEDIUM, "Minimum session timeout of members.")
_d("group.max.session.timeout.ms", INT, 1800000, None, MEDIUM, "Maximum session timeout of members.")
_d("group.max.size", INT, INT_MAX, at_least(1), MEDIUM, "Maximum members of a classic group.")
_d("group.coordinator.rebalance.protocols", LIST, "classic,consumer",
   ListOf("classic", "consumer", "share", "streams"), MEDIUM, "Enabled rebalance protocols.")
_d("group.consumer.session.timeout.ms", INT, 45000, at_least(1), MEDIUM,
   "Session timeout of consumer-protocol members.")
_d("group.consumer.heartbeat.interval.ms", INT, 5000, at_least(1), MEDIUM,
   "Heartbeat interval of consumer-protocol members.")
_d("group.consumer.max.size", INT, INT_MAX, at_least(1), MEDIUM,
   "Maximum members of a consumer-protocol group.")

# transactions / producer state
_d("transaction.state.log.num.partitions", INT, 50, at_least(1), HIGH,
   "Partitions of __transaction_state.")
_d("transaction.state.log.replication.factor", SHORT, 1, at_least(1), HIGH,
   "Replication factor of __transaction_state (kafkatw default 1; Kafka's is 3).")
_d("transaction.state.log.min.isr", INT, 1, at_least(1), HIGH,
   "min.insync.replicas of __transaction_state (kafkatw default 1; Kafka's is 2).")
_d("transaction.state.log.segment.bytes", INT, 100 * MiB, at_least(1), HIGH,
   "Segment size of __transaction_state.")
_d("transaction.state.log.load.buffer.size", INT, 5 * MiB, at_least(1), HIGH,
   "Batch size when loading transaction state.")
_d("transaction.max.timeout.ms", INT, 15 * MINUTE_MS, at_least(1), HIGH,
   "Maximum transaction timeout a producer may ask for.")
_d("transactional.id.expiration.ms", INT, 7 * DAY_MS, at_least(1), HIGH,
   "A transactional id without updates for this long expires.")
_d("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, 10000, at_least(1), LOW,
   "How often timed-out transactions are rolled back.")
_d("transaction.remove.expired.transaction.cleanup.interval.ms", INT, HOUR_MS, at_least(1), LOW,
   "How often expired transactional ids are removed.")
_d("transaction.partition.verification.enable", BOOLEAN, True, None, LOW,
   "Verify that a partition was added to a transaction before a transactional write.")
_d("producer.id.expiration.ms", INT, DAY_MS, at_least(1), LOW,
   "Producer id state without writes is kept this long.")
_d("producer.id.expiration.check.interval.ms", INT, 600000, at_least(1), LOW,
   "How often expired producer ids are removed.")

# security
_d("ssl.protocol", STRING, "TLSv1.3", None, MEDIUM, "TLS protocol used to create the context.")
_d("ssl.enabled.protocols", LIST, "TLSv1.2,TLSv1.3", None, MEDIUM, "TLS protocol versions enabled.")
_d("ssl.cipher.suites", LIST, "", None, LOW, "Allowed cipher suites; empty means all supported.")
_d("ssl.keystore.type", STRING, "JKS", None, MEDIUM, "Key store format (kafkatw reads PEM and PKCS12).")
_d("ssl.keystore.location", STRING, None, None, HIGH, "Key store file.")
_d("ssl.keystore.password", PASSWORD, None, None, HIGH, "Key store password.")
_d("ssl.keystore.certificate.chain", PASSWORD, None, None, HIGH,
   "Certificate chain in PEM format (with ssl.keystore.type=PEM).")
_d("ssl.keystore.key", PASSWORD, None, None, HIGH,
   "Private key in PEM format (with ssl.keystore.type=PEM).")
_d("ssl.key.password", PASSWORD, None, None, HIGH, "Password of the private key.")
_d("ssl.truststore.type", STRING, "JKS", None, MEDIUM, "Trust store format.")
_d("ssl.truststore.location", STRING, None, None, HIGH, "Trust store file.")
_d("ssl.truststore.password", PASSWORD, None, None, HIGH, "Trust store password.")
_d("ssl.truststore.certificates", PASSWORD, None, None, HIGH, "Trusted certificates in PEM format.")
_d("ssl.client.auth", STRING, "none", OneOf("required", "requested", "none"), MEDIUM,
   "Whether TLS clients must (required), may (requested) or need not present a certificate.")
_d("ssl.endpoint.identification.algorithm", STRING, "https", None, LOW,
   "Endpoint identification of the server's own TLS clients.")
_d("ssl.principal.mapping.rules", STRING, "DEFAULT", None, LOW,
   "Rules mapping a certificate's distinguished name to a principal.")
_d("sasl.enabled.mechanisms", LIST, "GSSAPI", None, MEDIUM, "SASL mechanisms enabled on the server.")
_d("sasl.mechanism.inter.broker.protocol", STRING, "GSSAPI", None, MEDIUM,
   "SASL mechanism for inter-broker traffic.")
_d("authorizer.class.name", STRING, "", None, LOW,
   "Dotted name of the authorizer; empty disables authorization.")
_d("super.users", STRING, None, None, LOW,
   "Semicolon-separated principals (User:name) that bypass ACLs.")
_d("allow.everyone.if.no.acl.found", BOOLEAN, False, None, LOW,
   "Allow an operation on a resource that has no ACL.")

# kafkatw additions
_d("kafkatw.request.log.enable", BOOLEAN, False, None, LOW,
   "Log every completed request (Kafka's kafka.request.logger at DEBUG).")
_d("kafkatw.request.log.file", STRING, None, None, LOW,
   "File for the request log; unset logs through the twisted logger namespace "
   "'kafka.request.logger'.")
_d("kafkatw.ready.file", STRING, None, None, LOW,
   "When set, a JSON file describing the bound listeners is written once the broker listens.")

del _d

#: Prefixes of per-listener and per-mechanism overrides (kept in originals, no warning).
KNOWN_PREFIXES = ("listener.name.",)

# -- dynamic update -----------------------------------------------------------------------------
#: DescribeConfigsResponse ConfigSource codes.
UNKNOWN_SOURCE = 0
TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

CONFIG_SOURCE_NAMES = {
    UNKNOWN_SOURCE: "UNKNOWN", TOPIC_CONFIG: "DYNAMIC_TOPIC_CONFIG",
    DYNAMIC_BROKER_CONFIG: "DYNAMIC_BROKER_CONFIG",
    DYNAMIC_DEFAULT_BROKER_CONFIG: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    STATIC_BROKER_CONFIG: "STATIC_BROKER_CONFIG", DEFAULT_CONFIG: "DEFAULT_CONFIG",
}

# -- topic configs ------------------------------------------------------------------------------
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

#: Broker configs that DescribeConfigs reports as not read-only (Kafka's dynamic broker configs
#: that kafkatw can honour without a restart, or will).
DYNAMIC_BROKER_CONFIGS = frozenset(
    [name for names in TOPIC_CONFIG_SYNONYMS.values() for name in names]
    + ["listeners", "advertised.listeners", "listener.security.protocol.map",
       "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
       "max.connection.creation.rate", "num.io.threads", "num.network.threads",
       "num.replica.fetchers", "num.recovery.threads.per.data.dir", "background.threads",
       "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.size",
       "log.cleaner.backoff.ms", "log.retention.check.interval.ms",
       "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
       "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.key.password",
       "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
       "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols",
       "ssl.cipher.suites", "sasl.enabled.mechanisms", "kafkatw.request.log.enable"])

TOPIC_CONFIG_DEF = ConfigDef()
_t = TOPIC_CONFIG_DEF.define
_t("cleanup.policy", LIST, "delete", ListOf(*CLEANUP_POLICIES), MEDIUM,
   "Retention policy of old segments: delete, compact, or both.")
_t("compression.type", STRING, "producer", OneOf(*COMPRESSION_TYPES), MEDIUM,
   "Final compression of the topic's data; 'producer' keeps the producer's codec.")
_t("compression.gzip.level", INT, -1, _GZIP_LEVEL, MEDIUM, "Compression level for gzip.")
_t("compression.lz4.level", INT, 9, _LZ4_LEVEL, MEDIUM, "Compression level for lz4.")
_t("compression.zstd.level", INT, 3, _ZSTD_LEVEL, MEDIUM, "Compression level for zstd.")
_t("delete.retention.ms", LONG, DAY_MS, at_least(0), MEDIUM,
   "How long delete tombstones are kept on a compacted topic.")
_t("file.delete.delay.ms", LONG, 60000, at_least(0), MEDIUM,
   "Time to wait before deleting a file from the file system.")
_t("flush.messages", LONG, LONG_MAX, at_least(1), MEDIUM, "Messages between forced fsyncs.")
_t("flush.ms", LONG, LONG_MAX, at_least(0), MEDIUM, "Milliseconds between forced fsyncs.")
_t("follower.replication.throttled.replicas", LIST, "", None, MEDIUM,
   "Replicas throttled on the follower side.")
_t("index.interval.bytes", INT, 4096, at_least(0), MEDIUM, "Bytes between offset index entries.")
_t("leader.replication.throttled.replicas", LIST, "", None, MEDIUM,
   "Replicas throttled on the leader side.")
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


# -- Java .properties ---------------------------------------------------------------------------
_LINE_SPLIT_RE = re.compile(r"\r\n|\r|\n")
_WHITESPACE = " \t\f"


def _ends_with_odd_backslashes(text):
    count = len(text) - len(text.rstrip("\\"))
    return count % 2 == 1


def _unescape(text, where):
    if "\\" not in text:
        return text
    out = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        i += 1
        if i >= n:
            break
        ch = text[i]
        if ch == "u":
            digits = text[i + 1:i + 5]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError("Malformed \\uxxxx encoding%s" % (where,))
            out.append(chr(int(digits, 16)))
            i += 5
            continue
        out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(ch, ch))
        i += 1
    return "".join(out)


def _split_key_value(line):
    i = 0
    n = len(line)
    while i < n:
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=:" or ch in _WHITESPACE:
            break
        i += 1
    key = line[:i]
    j = i
    while j < n and line[j] in _WHITESPACE:
        j += 1
    if j < n and line[j] in "=:":
        j += 1
        while j < n and line[j] in _WHITESPACE:
            j += 1
    return key, line[j:]


def parse_properties(text, source="<string>"):
    """Parse Java ``.properties`` text into an ordered dict of strings (last duplicate wins).

    Comments start with ``#`` or ``!``; ``key=value``, ``key: value`` and ``key value`` forms;
    a line ending in an odd number of backslashes continues on the next line (leading white
    space of the continuation dropped); ``\\t \\n \\r \\f \\uXXXX`` escapes; other ``\\c`` is ``c``.
    """
    props = {}
    lines = _LINE_SPLIT_RE.split(text)
    i = 0
    while i < len(lines):
        lineno = i + 1
        logical = lines[i].lstrip(_WHITESPACE)
        i += 1
        if not logical or logical[0] in "#!":
            continue
        while _ends_with_odd_backslashes(logical):
            logical = logical[:-1]
            if i >= len(lines):
                break
            logical += lines[i].lstrip(_WHITESPACE)
            i += 1
        key, value = _split_key_value(logical)
        where = " in %s line %d" % (source, lineno)
        props[_unescape(key, where)] = _unescape(value, where)
    return props


def read_properties_file(path):
    """Read a ``.properties`` file (UTF-8, falling back to ISO-8859-1 as Java reads it)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError("Cannot read config file %s: %s" % (path, e.strerror or e))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")
    return parse_properties(text, path)


def parse_override(text):
    """``key=value`` (split at the first ``=``) -> (key, value); the key is stripped."""
    key, sep, value = str(text).partition("=")
    if not sep or not key.strip():
        raise ConfigError("Invalid override %r: expected key=value" % (text,))
    return key.strip(), value


# -- derived values -----------------------------------------------------------------------------
@attr.s(slots=True, frozen=True)
class Endpoint:
    """A listener: name, security protocol, host ("" = all interfaces) and port (0 = any)."""

    listener_name = attr.ib()
    security_protocol = attr.ib()
    host = attr.ib()
    port = attr.ib()

    def connection_string(self):
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "%s://%s:%d" % (self.listener_name, host, self.port)

    def __str__(self):
        return self.connection_string()


_ENDPOINT_RE = re.compile(r"(.*)://\[?([0-9a-zA-Z\-%._:]*?)\]?:(-?[0-9]+)\Z")


def parse_protocol_map(name, text):
    mapping = {}
    for entry in _LIST_SPLIT_RE.split(text.strip()) if text.strip() else []:
        listener, sep, protocol = entry.partition(":")
        listener, protocol = listener.strip().upper(), protocol.strip().upper()
        if not sep or not listener or not protocol:
            raise ConfigError.invalid(name, text, "entry %r must be of the form "
                                      "LISTENER_NAME:SECURITY_PROTOCOL" % (entry,))
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError.invalid(name, text, "security protocol %s of listener %s is not one "
                                      "of %s" % (protocol, listener, ", ".join(SECURITY_PROTOCOLS)))
        if listener in mapping:
            raise ConfigError.invalid(name, text, "listener %s is mapped twice" % (listener,))
        mapping[listener] = protocol
    return mapping


def parse_listeners(name, text, protocol_map):
    """``listeners``-style text -> [Endpoint]; names are upper-cased as Kafka normalises them."""
    endpoints = []
    entries = _LIST_SPLIT_RE.split(text.strip()) if text and text.strip() else []
    for entry in entries:
        m = _ENDPOINT_RE.match(entry)
        if m is None:
            raise ConfigError.invalid(name, text, "Unable to parse %s to a broker endpoint "
                                      "(expected NAME://host:port)" % (entry,))
        listener = m.group(1).upper()
        host = m.group(2)
        port = int(m.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError.invalid(name, text, "port %d of listener %s is not between 0 and "
                                      "65535" % (port, listener))
        protocol = protocol_map.get(listener)
        if protocol is None:
            raise ConfigError.invalid(name, text, "No security protocol defined for listener %s "
                                      "(listener.security.protocol.map has %s)"
                                      % (listener, ", ".join(protocol_map) or "no entries"))
        endpoints.append(Endpoint(listener, protocol, host, port))
    names = [e.listener_name for e in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError.invalid(name, text, "Each listener must have a different name")
    ports = [e.port for e in endpoints if e.port != 0]
    if len(set(ports)) != len(ports):
        raise ConfigError.invalid(name, text, "Each listener must have a different port")
    return endpoints


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
                 source_file=None):
        self.definitions = definitions or BROKER_CONFIG_DEF
        self.source_file = source_file
        self.originals = dict(static or {})
        self.dynamic_broker = dict(dynamic_broker or {})
        self.dynamic_default = dict(dynamic_default or {})
        self.unknown = {}
        self._layers = {}  # name -> [(source, raw, typed)] highest priority first
        self._values = {}
        self._sources = {}
        for source, props in ((DYNAMIC_BROKER_CONFIG, self.dynamic_broker),
                              (DYNAMIC_DEFAULT_BROKER_CONFIG, self.dynamic_default),
                              (STATIC_BROKER_CONFIG, self.originals)):
            for name, raw in props.items():
                if name not in self.definitions:
                    if source == STATIC_BROKER_CONFIG and not name.startswith(KNOWN_PREFIXES):
                        self.unknown[name] = raw
                    continue
                typed = self.definitions[name].parse(raw)
                self._layers.setdefault(name, []).append((source, raw, typed))
        for key in self.definitions:
            layers = self._layers.get(key.name)
            if layers:
                self._sources[key.name] = layers[0][0]
                self._values[key.name] = layers[0][2]
            else:
                self._sources[key.name] = DEFAULT_CONFIG
                self._values[key.name] = key.parse(key.default)
        for name in sorted(self.unknown):
            log.warn("The configuration '{name}' was supplied but isn't a known config.", name=name)
        self._derive()

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
                          definitions=self.definitions, source_file=self.source_file)

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

    def get_class(self, name):
        """Resolve a CLASS-typed (or class-naming STRING) property to the object; None if unset."""
        value = self._values[name]
        if not value:
            return None
        from twisted.python.reflect import namedAny

        try:
            return namedAny(value)
        except (AttributeError, ValueError, ImportError) as e:
            raise ConfigError.invalid(name, value, "Class %s could not be found (%s)"
                                      % (value, e)) from None

    def with_prefix(self, prefix):
        """Original properties starting with ``prefix``, prefix stripped (listener.name.x.)."""
        return {k[len(prefix):]: v for k, v in self.originals.items() if k.startswith(prefix)}

    # -- derived --------------------------------------------------------------------------------
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
            dirs = [d for d in _LIST_SPLIT_RE.split(v["log.dirs"].strip()) if d]
            origin = "log.dirs"
        else:
            dirs = [d for d in _LIST_SPLIT_RE.split(v["log.dir"].strip()) if d]
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
        for entry in _LIST_SPLIT_RE.split(text.strip()) if text.strip() else []:
            host, sep, count = entry.rpartition(":")
            if not sep or not host or not _INTEGER_RE.match(count.strip()):
                raise ConfigError.invalid(name, text, "entry %r must be of the form host:count"
                                          % (entry,))
            overrides[host.strip()] = int(count)
        return overrides

    def topic_defaults(self):
        """Topic config name -> typed default derived from the broker config (LogConfig)."""
        out = {}
        for key in TOPIC_CONFIG_DEF:
            synonyms = TOPIC_CONFIG_SYNONYMS.get(key.name)
            if not synonyms:
                out[key.name] = key.parse(key.default)
                continue
            for name in synonyms:
                value = self._values[name]
                if value is not None:
                    if name in SYNONYM_MULTIPLIERS:
                        value = value * SYNONYM_MULTIPLIERS[name]
                    break
            if key.name == "retention.ms" and value < 0:
                value = -1
            out[key.name] = value
        return out

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
