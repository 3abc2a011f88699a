"""The broker configs: Kafka's property names with their types, defaults, validators,
importance and documentation (what ``server.properties`` may say), in one table.

Only definitions: typing and layering are in ``kafka_config.py``, topic configs in ``topic.py``.
"""

from kafkatw.config.listeners import SECURITY_PROTOCOLS
from kafkatw.config.topic import (
    CLEANUP_POLICIES,
    COMPRESSION_TYPES,
    GZIP_LEVEL,
    LZ4_LEVEL,
    TIMESTAMP_TYPES,
    ZSTD_LEVEL,
)
from kafkatw.config.types import (
    BOOLEAN,
    CLASS,
    DAY_MS,
    DOUBLE,
    GiB,
    HIGH,
    HOUR_MS,
    INT,
    INT_MAX,
    KiB,
    LIST,
    LONG,
    LONG_MAX,
    LOW,
    MEDIUM,
    MINUTE_MS,
    MiB,
    PASSWORD,
    SHORT,
    STRING,
    ConfigDef,
    ConfigError,
    ListOf,
    OneOf,
    at_least,
    between,
)

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

# cluster mode (Kafka's ZooKeeper mode): set, the broker joins the cluster coordinated there
_d("zookeeper.connect", STRING, None, None, HIGH,
   "host:port[,host:port][/chroot] of ZooKeeper; unset, the broker runs alone with its "
   "metadata in its log dirs.")
_d("zookeeper.session.timeout.ms", INT, 18000, at_least(1), HIGH,
   "ZooKeeper session timeout: a broker silent this long loses its registration.")
_d("zookeeper.connection.timeout.ms", INT, None, None, HIGH,
   "Longest wait to connect to ZooKeeper; defaults to zookeeper.session.timeout.ms.")
_d("zookeeper.max.in.flight.requests", INT, 10, at_least(1), HIGH,
   "Requests the broker's ZooKeeper client keeps in flight.")


class _OnlyAccepted:
    """A Kafka config naming a feature kafkatw lacks: ``accepted`` (Kafka's default, or unset)
    is taken, any other value refused with ``reason`` rather than ignored. ``shown`` is the
    valid value as the config listing prints it."""

    def __init__(self, accepted, shown, reason):
        self.accepted = accepted
        self.shown = shown
        self.reason = reason

    def __call__(self, name, value):
        if value not in self.accepted:
            raise ConfigError.invalid(name, value, self.reason)

    def __str__(self):
        return self.shown


def _no_zk_client(what):
    """A ZooKeeper client feature kafkatw's client lacks: false (Kafka's default) is accepted,
    true refused (other ``zookeeper.*`` keys are ignored with a warning, config/removed.py, but
    these would silently leave the connection or the znodes open)."""
    return _OnlyAccepted((False,), "false", "kafkatw's ZooKeeper client has no %s" % what)


_d("zookeeper.ssl.client.enable", BOOLEAN, False, _no_zk_client("TLS"), LOW,
   "Kafka's TLS to ZooKeeper; kafkatw's client speaks plain TCP, so only false is accepted.")
_d("zookeeper.set.acl", BOOLEAN, False, _no_zk_client("znode ACLs"), LOW,
   "Kafka's secure ACLs on the znodes it creates; kafkatw creates them open, so only false is "
   "accepted.")
_d("controlled.shutdown.enable", BOOLEAN, True, None, MEDIUM,
   "In cluster mode a stopping broker first asks the controller to move its leaderships away.")
_d("controlled.shutdown.max.retries", INT, 3, None, MEDIUM,
   "How often a stopping broker asks the controller before it stops anyway.")
_d("controlled.shutdown.retry.backoff.ms", LONG, 5000, None, MEDIUM,
   "The wait between those attempts.")
_d("kafkatw.cluster.coordinator.class", STRING, "zookeeper", None, LOW,
   "The coordination store of cluster mode: a registered short name or a dotted name of an "
   "IClusterCoordinator factory.")

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

# Kafka sends the controller's requests (and AlterPartition, ControlledShutdown) on this
# listener; kafkatw's go on the inter-broker listener, so a value is refused, not ignored.
_d("control.plane.listener.name", STRING, None,
   _OnlyAccepted((None, ""), "null", "kafkatw has no separate control plane listener: "
                 "controller traffic uses inter.broker.listener.name"), HIGH,
   "Kafka's listener for controller traffic; kafkatw's uses the inter-broker listener, so "
   "only unset is accepted.")
# Kafka lets these listeners accept before the authorizer has started; every listener of
# kafkatw waits for it, so a value is refused, not ignored.
_d("early.start.listeners", STRING, None,
   _OnlyAccepted((None, ""), "null", "kafkatw starts no listener early: every listener "
                 "accepts once the authorizer has started"), HIGH,
   "Kafka's listeners that may accept before the authorizer has started; every listener of "
   "kafkatw waits for it, so only unset is accepted.")
# Kafka's defaults are 102400 (and 65536 for replica.socket.receive.buffer.bytes). A fixed
# SO_RCVBUF turns off Linux's receive autotuning: a 1 MB produce request then crosses in 100 KiB
# windows, a reactor turn each (one broker, 1 MB acks=all batches: 51-61 MB/s against 78 MB/s
# with the OS default, and a third more CPU per MB). -1, the OS default, is the default here.
_d("socket.send.buffer.bytes", INT, -1, None, HIGH,
   "SO_SNDBUF of server sockets; -1 (the default here; Kafka's is 102400) uses the OS default.")
_d("socket.receive.buffer.bytes", INT, -1, None, HIGH,
   "SO_RCVBUF of server sockets; -1 (the default here; Kafka's is 102400) uses the OS default.")
_d("socket.request.max.bytes", INT, 100 * MiB, at_least(1), HIGH,
   "The largest request size the server accepts.")
_d("socket.listen.backlog.size", INT, 50, at_least(1), MEDIUM,
   "Maximum number of pending connections on a listening socket.")
_d("queued.max.requests", INT, 500, at_least(1), HIGH,
   "Requests that may wait for the handlers before the network layer stops reading.")

# Kafka's memory pool for queued requests; kafkatw bounds them by count only, so a bound is
# refused rather than ignored (-1, no bound, is accepted).
_d("queued.max.request.bytes", LONG, -1,
   _OnlyAccepted((-1,), "-1", "kafkatw bounds queued requests by count (queued.max.requests), "
                 "not by bytes; only -1 is accepted"), MEDIUM,
   "Kafka's bytes of queued requests allowed before no more are read; kafkatw has no such "
   "bound, so only -1 (no limit, Kafka's default) is accepted.")
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
_d("compression.gzip.level", INT, -1, GZIP_LEVEL, MEDIUM, "Compression level for gzip.")
_d("compression.lz4.level", INT, 9, LZ4_LEVEL, MEDIUM, "Compression level for lz4.")
_d("compression.zstd.level", INT, 3, ZSTD_LEVEL, MEDIUM, "Compression level for zstd.")

# replication
_d("default.replication.factor", INT, 1, at_least(1), MEDIUM,
   "Replication factor of automatically created topics.")
_d("min.insync.replicas", INT, 1, at_least(1), HIGH,
   "Minimum in-sync replicas for an acks=all produce to succeed.")
_d("unclean.leader.election.enable", BOOLEAN, False, None, HIGH,
   "Whether an out-of-sync replica may become leader as a last resort.")
_d("replica.lag.time.max.ms", LONG, 30000, None, HIGH,
   "A follower not caught up for this long leaves the ISR.")
_d("replica.selector.class", STRING, None, None, MEDIUM,
   "KIP-392: the replica a consumer with client.rack is sent to read from (a plug-in such as "
   "rack-aware, Kafka's org.apache.kafka.common.replica.RackAwareReplicaSelector, or a dotted "
   "Python name providing IReplicaSelector); unset, consumers read the leader.")
_d("replica.fetch.max.bytes", INT, 1 * MiB, at_least(0), MEDIUM,
   "Bytes per partition a follower fetches.")
_d("replica.fetch.response.max.bytes", INT, 10 * MiB, at_least(0), MEDIUM,
   "Maximum bytes of a whole follower fetch response.")
_d("replica.fetch.wait.max.ms", INT, 500, None, MEDIUM, "Max wait of follower fetch requests.")
_d("replica.fetch.min.bytes", INT, 1, None, MEDIUM, "Min bytes of follower fetch responses.")
_d("replica.fetch.backoff.ms", INT, 1000, at_least(0), MEDIUM, "Backoff after a follower fetch error.")
_d("replica.socket.timeout.ms", INT, 30000, None, HIGH, "Socket timeout of follower fetches.")
_d("controller.socket.timeout.ms", INT, 30000, None, MEDIUM,
   "Request timeout of the controller's requests to brokers and of a leader's AlterPartition.")
_d("replica.socket.receive.buffer.bytes", INT, -1, None, HIGH,
   "SO_RCVBUF of a follower's connections to its leaders; -1 (the default here; Kafka's is "
   "65536) uses the OS default.")
_d("replica.high.watermark.checkpoint.interval.ms", LONG, 5000, None, HIGH,
   "How often the high watermark is checkpointed to disk.")
_d("num.replica.fetchers", INT, 1, None, HIGH, "Fetcher connections per source broker.")
_d("leader.replication.throttled.rate", LONG, LONG_MAX, at_least(0), MEDIUM,
   "Bytes/s a leader sends to out-of-sync followers of the partitions its topics' "
   "leader.replication.throttled.replicas name (a dynamic config, usually set by a reassignment).")
_d("follower.replication.throttled.rate", LONG, LONG_MAX, at_least(0), MEDIUM,
   "Bytes/s a follower fetches for its out-of-sync replicas of the partitions its topics' "
   "follower.replication.throttled.replicas name.")
_d("replication.quota.window.size.seconds", INT, 1, at_least(1), LOW,
   "How many seconds of a replication throttle's rate may be sent at once.")
_d("auto.leader.rebalance.enable", BOOLEAN, True, None, HIGH,
   "Whether the controller moves leadership back to preferred replicas.")
_d("leader.imbalance.check.interval.seconds", LONG, 300, at_least(1), HIGH,
   "How often the controller checks the leader imbalance of each broker.")
_d("leader.imbalance.per.broker.percentage", INT, 10, at_least(0), HIGH,
   "The share (%) of a broker's preferred partitions led elsewhere above which the controller "
   "moves their leadership back.")

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
_d("offsets.topic.replication.factor", SHORT, 3, at_least(1), HIGH,
   "Replication factor of __consumer_offsets in cluster mode (FindCoordinator answers "
   "COORDINATOR_NOT_AVAILABLE while fewer brokers are alive); a single node ignores it.")
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
   ListOf("classic", "consumer"), MEDIUM,
   "Enabled rebalance protocols: classic (always on, as in Kafka) and consumer (KIP-848); "
   "kafkatw has no share or streams groups.")
_d("group.consumer.session.timeout.ms", INT, 45000, at_least(1), MEDIUM,
   "Session timeout of consumer-protocol members.")
_d("group.consumer.heartbeat.interval.ms", INT, 5000, at_least(1), MEDIUM,
   "Heartbeat interval of consumer-protocol members.")
_d("group.consumer.max.size", INT, INT_MAX, at_least(1), MEDIUM,
   "Maximum members of a consumer-protocol group.")
_d("group.consumer.min.session.timeout.ms", INT, 45000, at_least(1), MEDIUM,
   "Minimum session timeout of consumer-protocol members.")
_d("group.consumer.max.session.timeout.ms", INT, 60000, at_least(1), MEDIUM,
   "Maximum session timeout of consumer-protocol members.")
_d("group.consumer.min.heartbeat.interval.ms", INT, 5000, at_least(1), MEDIUM,
   "Minimum heartbeat interval of consumer-protocol members.")
_d("group.consumer.max.heartbeat.interval.ms", INT, 15000, at_least(1), MEDIUM,
   "Maximum heartbeat interval of consumer-protocol members.")
_d("group.consumer.assignors", LIST,
   "org.apache.kafka.coordinator.group.assignor.UniformAssignor,"
   "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
   ListOf("uniform", "range", "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
          "org.apache.kafka.coordinator.group.assignor.RangeAssignor"), MEDIUM,
   "Server-side assignors of consumer groups (short names or Kafka's classes); the first is "
   "the default.")
_d("group.consumer.migration.policy", STRING, "bidirectional",
   OneOf("disabled", "downgrade", "upgrade", "bidirectional", case_insensitive=True), MEDIUM,
   "Online conversions between classic and consumer groups with members (upgrade: a KIP-848 "
   "member joins a classic group; downgrade: its last KIP-848 member leaves); empty groups "
   "convert under every policy, as in Kafka.")

# transactions / producer state
_d("transaction.state.log.num.partitions", INT, 50, at_least(1), HIGH,
   "Partitions of __transaction_state.")
_d("transaction.state.log.replication.factor", SHORT, 3, at_least(1), HIGH,
   "Replication factor of __transaction_state in cluster mode (FindCoordinator answers "
   "COORDINATOR_NOT_AVAILABLE while fewer brokers are alive); a single node ignores it.")
_d("transaction.state.log.min.isr", INT, 2, at_least(1), HIGH,
   "min.insync.replicas of __transaction_state in cluster mode; a single node ignores it.")
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
_d("sasl.server.max.receive.size", INT, 524288, at_least(1), LOW,
   "Largest frame accepted from a SASL client before it has authenticated.")
_d("connections.max.reauth.ms", LONG, 0, at_least(0), MEDIUM,
   "Lifetime of a SASL session (KIP-368): the client must re-authenticate within it; 0 = forever.")
_d("sasl.oauthbearer.jwks.endpoint.url", STRING, None, None, MEDIUM,
   "JWKS of the signed-token OAUTHBEARER validator (kafkatw reads file: URLs).")
_d("sasl.oauthbearer.expected.audience", LIST, "", None, LOW,
   "Audiences (aud) a signed OAUTHBEARER token must name one of; empty checks none.")
_d("sasl.oauthbearer.expected.issuer", STRING, None, None, LOW,
   "Issuer (iss) a signed OAUTHBEARER token must name; unset checks none.")
_d("sasl.oauthbearer.clock.skew.seconds", INT, 30, None, LOW,
   "Allowed clock difference with the token issuer, in seconds.")
_d("sasl.oauthbearer.scope.claim.name", STRING, "scope", None, LOW, "Claim holding the token's scopes.")
_d("sasl.oauthbearer.sub.claim.name", STRING, "sub", None, LOW, "Claim holding the token's principal.")
_d("principal.builder.class", CLASS, None, None, MEDIUM,
   "IPrincipalBuilder plug-in name or dotted name; unset uses Kafka's default principal builder.")
# client quotas (Kafka's ClientQuotaManagerConfig)
_d("client.quota.callback.class", STRING, None, None, LOW,
   "IClientQuotaCallback plug-in name (a short name a drop-in registers) or dotted name; unset uses "
   "the quotas set with AlterClientQuotas.")
_d("quota.window.num", INT, 11, at_least(1), LOW,
   "Number of samples kept in memory for client quotas.")
_d("quota.window.size.seconds", INT, 1, at_least(1), LOW,
   "Time span of each client quota sample.")
_d("authorizer.class.name", STRING, "", None, LOW,
   "Dotted name of the authorizer; empty disables authorization.")
_d("super.users", STRING, None, None, LOW,
   "Semicolon-separated principals (User:name) that bypass ACLs.")
_d("allow.everyone.if.no.acl.found", BOOLEAN, False, None, LOW,
   "Allow an operation on a resource that has no ACL.")

# Kafka's metrics keys: accepted so server.properties files keep working. Prometheus computes
# rates from the exported counters, so the sampling keys change nothing here; kafkatw's
# exporter is kafkatw.metrics.listener, not a reporter class.
class _OnlyJmxReporter:
    """metric.reporters: Kafka's JmxReporter (always on in Kafka, nothing to do here) is accepted;
    any other reporter class would be ignored, so it is refused instead."""

    JMX = "org.apache.kafka.common.metrics.JmxReporter"

    def __call__(self, name, value):
        if any(v != self.JMX for v in value):
            raise ConfigError.invalid(name, ",".join(value), "kafkatw runs no metric reporter classes; "
                                      "export metrics with kafkatw.metrics.listener")

    def __str__(self):
        return "[%s]" % self.JMX


_d("metric.reporters", LIST, "", _OnlyJmxReporter(), LOW,
   "Kafka's metric reporter classes; only JmxReporter is accepted, as a no-op (see kafkatw.metrics.listener).")
_d("metrics.num.samples", INT, 2, at_least(1), LOW, "Samples kept to compute Kafka's metric rates (unused).")
_d("metrics.sample.window.ms", LONG, 30000, at_least(1), LOW, "Window of one metric sample (unused).")
_d("metrics.recording.level", STRING, "INFO", OneOf("INFO", "DEBUG", "TRACE"), LOW,
   "Highest recording level of Kafka's metrics (unused: kafkatw records every exported metric).")

# Kafka's dynamic configs of features kafkatw does not implement (unimplemented.py): typed and
# stored like Kafka's, so AlterConfigs written for Kafka succeeds; they change nothing here
_KERBEROS = "Kafka's Kerberos login setting; kafkatw has no SASL/GSSAPI, so it has no effect."
_LOGIN = "Kafka's SASL login refresh setting; kafkatw has no login refresh thread, so it has no effect."
_JSSE = "Kafka's JSSE setting; kafkatw's TLS is OpenSSL, so it has no effect."
_TIERED = "Kafka's tiered storage setting; kafkatw has no tiered storage, so it has no effect."
_d("sasl.kerberos.service.name", STRING, None, None, MEDIUM, _KERBEROS)
_d("sasl.kerberos.kinit.cmd", STRING, "/usr/bin/kinit", None, MEDIUM, _KERBEROS)
_d("sasl.kerberos.ticket.renew.window.factor", DOUBLE, 0.8, None, MEDIUM, _KERBEROS)
_d("sasl.kerberos.ticket.renew.jitter", DOUBLE, 0.05, None, MEDIUM, _KERBEROS)
_d("sasl.kerberos.min.time.before.relogin", LONG, 60000, None, MEDIUM, _KERBEROS)
_d("sasl.kerberos.principal.to.local.rules", LIST, "DEFAULT", None, MEDIUM, _KERBEROS)
_d("sasl.login.refresh.window.factor", DOUBLE, 0.8, between(0.5, 1.0), MEDIUM, _LOGIN)
_d("sasl.login.refresh.window.jitter", DOUBLE, 0.05, between(0.0, 0.25), MEDIUM, _LOGIN)
_d("sasl.login.refresh.min.period.seconds", SHORT, 60, between(0, 900), MEDIUM, _LOGIN)
_d("sasl.login.refresh.buffer.seconds", SHORT, 300, between(0, 3600), MEDIUM, _LOGIN)
_d("ssl.provider", STRING, None, None, MEDIUM, _JSSE)
_d("ssl.engine.factory.class", CLASS, None, None, LOW, _JSSE)
_d("ssl.keymanager.algorithm", STRING, "SunX509", None, MEDIUM, _JSSE)
_d("ssl.trustmanager.algorithm", STRING, "PKIX", None, MEDIUM, _JSSE)
_d("ssl.secure.random.implementation", STRING, None, None, LOW, _JSSE)
_d("log.cleaner.io.buffer.load.factor", DOUBLE, 0.9, None, MEDIUM,
   "Kafka's cleaner dedupe buffer load factor; kafkatw's cleaner does not use it.")
_d("log.cleaner.io.max.bytes.per.second", DOUBLE, 1.7976931348623157e308, None, MEDIUM,
   "Kafka's cleaner I/O throttle; kafkatw's cleaner is not throttled, so it has no effect.")
_d("remote.fetch.max.wait.ms", INT, 500, at_least(1), MEDIUM, _TIERED)
_d("remote.list.offsets.request.timeout.ms", LONG, 30000, at_least(1), MEDIUM, _TIERED)
_d("remote.log.index.file.cache.total.size.bytes", LONG, GiB, at_least(1), LOW, _TIERED)
_d("remote.log.manager.copy.max.bytes.per.second", LONG, LONG_MAX, at_least(1), MEDIUM, _TIERED)
_d("remote.log.manager.fetch.max.bytes.per.second", LONG, LONG_MAX, at_least(1), MEDIUM, _TIERED)
del _KERBEROS, _LOGIN, _JSSE, _TIERED

# kafkatw additions
_d("kafkatw.authorizer.log.file", STRING, None, None, LOW,
   "File for the authorizer's audit log (Kafka's kafka.authorizer.logger: one line per denied "
   "action, allowed ones at debug); unset logs through that twisted logger namespace only.")
_d("kafkatw.authorizer.log.allowed", BOOLEAN, False, None, LOW,
   "Also log allowed actions that ask for it (Kafka's kafka.authorizer.logger at DEBUG).")
_d("kafkatw.request.log.enable", BOOLEAN, False, None, LOW,
   "Log every completed request (Kafka's kafka.request.logger at DEBUG).")
_d("kafkatw.request.log.file", STRING, None, None, LOW,
   "File for the request log; unset logs through the twisted logger namespace "
   "'kafka.request.logger'.")
_d("kafkatw.metrics.listener", STRING, None, None, LOW,
   "HOST:PORT of the HTTP endpoint serving Prometheus metrics (/metrics) and health checks "
   "(/healthz, /readyz); unset, there is none. Port 0 picks a free port (see the ready file).")
_d("kafkatw.console.listener", STRING, None, None, LOW,
   "HOST:PORT of the built-in web console (topics, partitions, consumer groups, messages, admin "
   "actions; docs/console.md); unset, there is none. With SASL listeners or an authorizer it asks "
   "for a SASL user's password (HTTP basic) and authorizes every read and action. Port 0 picks a "
   "free port (see the ready file).")
_d("kafkatw.ready.file", STRING, None, None, LOW,
   "When set, a JSON file describing the bound listeners is written once the broker listens.")
_d("kafkatw.reactor.stall.probe.ms", INT, 0, at_least(0), LOW,
   "When positive, a timer runs every this many ms and logs 'reactor stall: N ms' whenever it "
   "runs that much late or more (work holding the reactor thread); 0 disables it.")


class _CrashPoint:
    """A name of ``kafkatw.crash_points.POINTS``, optionally ``:n``."""

    def __call__(self, name, value):
        if value:
            from kafkatw.crash_points import parse
            try:
                parse(value)
            except ValueError as e:
                raise ConfigError.invalid(name, value, str(e))

    def __str__(self):
        return "a crash point name[:n]"


_d("kafkatw.test.crash.point", STRING, None, _CrashPoint(), LOW,
   "Tests only: a named point of a file operation (kafkatw.crash_points.POINTS), optionally "
   "'name:n' for its n-th hit, where the broker kills itself with SIGKILL, to test recovery.")

del _d

#: Prefixes of per-listener and per-mechanism overrides (kept in originals, no warning).
KNOWN_PREFIXES = ("listener.name.",)
