"""The replica manager: appends produced batches to local logs (with idempotent-producer checks)
and serves Fetch and ListOffsets from them (Kafka's ReplicaManager, fetchMessages/readFromLog,
Partition.fetchOffsetForTimestamp). Owns isolation, limitBytes/minOneMessage, long polling via
the fetch purgatory and the wake-up after appends; not request decoding, sessions or storage.

Its contract is ``server.interfaces.IReplicaManager``. Topics are named by ``metadata``, a
``cluster.interfaces.IPartitionMetadata`` (node id, leader state, topic configs); partitions
are ``storage.interfaces.ILog`` objects from the log manager.

On a cluster (``zookeeper.connect``) it also applies LeaderAndIsr and StopReplica to its
``server.partition.Partition`` objects, which then say who leads; followers fetch through
``server.replica_fetcher``, ISR changes go through an ``IAlterPartitionManager``, and acks=all
waits in the produce purgatory (``server.delayed_produce``).
"""


import collections

import attr
from twisted.internet import defer, task
from twisted.logger import Logger
from zope.interface import implementer

from kafkatw.protocol import errors, records
from kafkatw.protocol.errors import KafkaError
from kafkatw.protocol.parts import FileRegion
from kafkatw.protocol.records import CONTROL_FLAG_MASK
from kafkatw.server import replica_selector
from kafkatw.server.delayed_fetch import DelayedFetch
from kafkatw.server.delayed_produce import DelayedProduce
from kafkatw.server.interfaces import IReplicaManager
from kafkatw.server.log_dir_mover import LogDirMover
from kafkatw.server.partition import Partition
from kafkatw.server.replication_quota import (
    UNLIMITED,
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    ReplicationQuotaManager,
)
from kafkatw.purgatory import DelayedOperationPurgatory, TopicPartitionOperationKey
from kafkatw.server.topic_stats import BrokerTopicStats
from kafkatw.storage.log import summary_offsets
from kafkatw.storage.offsets import (
    ORIGIN_CLIENT,
    UNKNOWN_OFFSET_METADATA,
    FetchIsolation,
)
from kafkatw.storage.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ProducerStateManager,
    delete_snapshots_before,
    write_snapshot,
)

log = Logger()

ZERO_UUID = bytes(16)
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2
FUTURE_LOCAL_REPLICA_ID = -3
NO_PARTITION_LEADER_EPOCH = -1
ISR_SIZE = 1  # a single node: every partition's ISR is this broker alone
UNKNOWN_OFFSET = -1
EMPTY_RECORDS = b""

READ_UNCOMMITTED = 0
READ_COMMITTED = 1

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


def fetch_isolation_of(replica_id, isolation_level):
    """Kafka's FetchIsolation.of: followers read to the log end, consumers to the HW or LSO."""
    is_consumer = replica_id < 0 and replica_id != FUTURE_LOCAL_REPLICA_ID
    if not is_consumer:
        return FetchIsolation.LOG_END
    if isolation_level == READ_COMMITTED:
        return FetchIsolation.TXN_COMMITTED
    return FetchIsolation.HIGH_WATERMARK


_LOG_END, _HIGH_WATERMARK, _TXN_COMMITTED = (FetchIsolation.LOG_END, FetchIsolation.HIGH_WATERMARK,
                                            FetchIsolation.TXN_COMMITTED)


@attr.s(slots=True, init=False)
class FetchParams:
    """A Fetch request's read parameters (Kafka's FetchParams); not changed once made (not
    frozen, and its own ``__init__``: one is made per Fetch, and a frozen attrs ``__init__``
    sets each field through ``object.__setattr__``, then calls a post-init hook)."""

    replica_id = attr.ib(default=CONSUMER_REPLICA_ID)
    max_wait_ms = attr.ib(default=0)
    min_bytes = attr.ib(default=1)
    max_bytes = attr.ib(default=0x7FFFFFFF)
    isolation_level = attr.ib(default=READ_UNCOMMITTED)
    replica_epoch = attr.ib(default=-1)
    client_metadata = attr.ib(default=None)
    hard_max_bytes_limit = attr.ib(default=False)  # Fetch v0-2: never hand out a cut first batch
    fetch_isolation = attr.ib(init=False, eq=False, repr=False)  # of replica_id, isolation_level

    def __init__(self, replica_id=CONSUMER_REPLICA_ID, max_wait_ms=0, min_bytes=1, max_bytes=0x7FFFFFFF,
                 isolation_level=READ_UNCOMMITTED, replica_epoch=-1, client_metadata=None,
                 hard_max_bytes_limit=False):
        self.replica_id = replica_id
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.isolation_level = isolation_level
        self.replica_epoch = replica_epoch
        self.client_metadata = client_metadata
        self.hard_max_bytes_limit = hard_max_bytes_limit
        # fetch_isolation_of, inline (enum members from plain names: an Enum class attribute
        # read costs several times a global's)
        if replica_id < 0 and replica_id != FUTURE_LOCAL_REPLICA_ID:
            self.fetch_isolation = _TXN_COMMITTED if isolation_level == READ_COMMITTED else _HIGH_WATERMARK
        else:
            self.fetch_isolation = _LOG_END

    @property
    def is_from_follower(self):
        return self.replica_id >= 0


class PartitionData(collections.namedtuple("PartitionData", (
        "fetch_offset", "log_start_offset", "max_bytes", "current_leader_epoch",
        "last_fetched_epoch", "topic_id"),
        defaults=(-1, 1048576, NO_PARTITION_LEADER_EPOCH, -1, ZERO_UUID))):
    """One partition of a Fetch request: a named tuple the fetch handler builds in C
    (``tuple.__new__`` with every field in this order) for every partition of every Fetch."""

    __slots__ = ()


class FetchPartitionData(collections.namedtuple("FetchPartitionData", (
        "error", "high_watermark", "last_stable_offset", "log_start_offset", "records",
        "aborted_transactions", "diverging_epoch", "preferred_read_replica", "error_message",
        "fetch_offset_metadata", "records_size"),
        defaults=(None, None, -1, None, UNKNOWN_OFFSET_METADATA, 0))):
    """One partition's read, as the Fetch response carries it (Kafka's LogReadResult and
    FetchPartitionData in one): ``records`` a FileRegion or bytes (b"" when empty),
    ``diverging_epoch`` (epoch, end_offset) or None; ``fetch_offset_metadata`` where the read
    started (a parked fetch compares the log end with it) and ``records_size`` len(records),
    counted once by the read for the byte budget, min_bytes and the bytes-out counter.

    A named tuple the read builds in C (``tuple.__new__`` with every field in this order):
    one object per partition read, where a LogReadResult held the log's FetchDataInfo and a
    FetchPartitionData was then copied from both."""

    __slots__ = ()


_new = tuple.__new__


def _error_read_result(code, message=None):
    """Kafka's createLogReadResult(e): the offsets of an errored partition are unknown (-1)."""
    return _new(FetchPartitionData, (code, UNKNOWN_OFFSET, UNKNOWN_OFFSET, UNKNOWN_OFFSET,
                                     EMPTY_RECORDS, None, None, -1, message,
                                     UNKNOWN_OFFSET_METADATA, 0))


@attr.s(slots=True)
class PartitionResponse:
    """One partition of a Produce response."""

    error_code = attr.ib(default=errors.NONE)
    base_offset = attr.ib(default=-1)
    log_append_time = attr.ib(default=-1)
    log_start_offset = attr.ib(default=-1)
    record_errors = attr.ib(factory=list)  # [(batch_index, message)]
    error_message = attr.ib(default=None)
    last_offset = attr.ib(default=-1)  # of the append (or duplicate): acks=all waits past it


@attr.s(slots=True, frozen=True)
class ListOffsetsPartitionResult:
    error = attr.ib(default=errors.NONE)
    timestamp = attr.ib(default=-1)
    offset = attr.ib(default=-1)
    leader_epoch = attr.ib(default=-1)


def _iter_batch_headers(buf):
    """``[(position, BatchHeader)]`` of every batch in ``buf``; raises CorruptRecordError."""
    if len(buf) >= records.BATCH_HEADER_SIZE:
        header = records.read_batch_header(buf, 0)
        if header.batch_length + records.LOG_OVERHEAD == len(buf):
            return [(0, header)]  # one batch: what every v3+ produce carries per partition
    return list(records.iter_batch_headers(buf))


def _marker(buf, pos):
    """The ControlRecord of the control batch at ``pos`` (is_abort, coordinator_epoch);
    raises InvalidRecordError for a malformed one."""
    _, recs = records.decode_batch(buf, pos, verify=False)
    if not recs:
        raise records.InvalidRecordError("control batch without records")
    return records.decode_control_record(recs[0])


def _check_marker(entry, header, marker):
    """Kafka's appendEndTxnMarker checks: an older producer epoch or coordinator epoch than the
    partition has seen is refused (a zombie coordinator, or a stale admin abort)."""
    if entry is None:
        return None
    if header.producer_epoch < entry.producer_epoch:
        return PartitionResponse(errors.INVALID_PRODUCER_EPOCH, error_message=(
            "Producer epoch %d of the marker is older than %d" % (header.producer_epoch,
                                                                  entry.producer_epoch)))
    ce = marker.coordinator_epoch
    if ce is not None and ce < entry.coordinator_epoch:
        return PartitionResponse(errors.TRANSACTION_COORDINATOR_FENCED, error_message=(
            "Coordinator epoch %d of the marker is older than %d" % (ce, entry.coordinator_epoch)))
    return None


def _config_get(config, name, default):
    """``name`` (Kafka's property name) from a KafkaConfig or a plain mapping, else ``default``."""
    value = None if config is None else config.get(name)
    return default if value is None else value



def _nonzero(topic_id):
    return None if topic_id is None or topic_id == ZERO_UUID else topic_id


@attr.s(slots=True, frozen=True)
class InitialFetchState:
    """Where a follower starts fetching a partition (Kafka's InitialFetchState)."""

    topic_id = attr.ib()
    leader_id = attr.ib()
    leader_endpoint = attr.ib()  # (host, port) of the leader's inter-broker listener
    current_leader_epoch = attr.ib()
    fetch_offset = attr.ib()


def _epoch_error(requested_epoch, current):
    """The error for a client's ``current_leader_epoch`` against ours (None: unknown, no check)."""
    if requested_epoch is None or requested_epoch == NO_PARTITION_LEADER_EPOCH or current is None:
        return errors.NONE
    if requested_epoch < current:
        return errors.FENCED_LEADER_EPOCH
    if requested_epoch > current:
        return errors.UNKNOWN_LEADER_EPOCH
    return errors.NONE


#: what ``_append_to_local_log`` answers for an idempotent batch whose partition's producer
#: state is being rebuilt: the append waits for it
_LOADING = object()


class _ProducerStateLoad:
    """One partition's producer-state rebuild: its cooperative task and who waits for it."""

    __slots__ = ("task", "_waiters")

    def __init__(self):
        self.task = None
        self._waiters = []

    def wait(self):
        d = defer.Deferred()
        self._waiters.append(d)
        return d

    def done(self, failure=None):
        waiters, self._waiters = self._waiters, []
        for d in waiters:
            if failure is None:
                d.callback(None)
            else:
                d.errback(failure)


@implementer(IReplicaManager)
class ReplicaManager:
    """``config``: a KafkaConfig or a mapping with Kafka property names (``get(name)``):
    ``fetch.purgatory.purge.interval.requests``, ``producer.id.expiration.ms``."""

    def __init__(self, log_manager, metadata, clock, config=None, batch_headers=_iter_batch_headers,
                 cluster_mode=None, alter_partition_manager=None, fetcher_manager=None):
        self.log_manager = log_manager
        self.metadata = metadata
        self.clock = clock
        self.config = config
        self._batch_headers = batch_headers
        self.fetch_purgatory = DelayedOperationPurgatory(
            "Fetch", clock, _config_get(config, "fetch.purgatory.purge.interval.requests", 1000))
        self.produce_purgatory = DelayedOperationPurgatory(
            "Produce", clock, _config_get(config, "producer.purgatory.purge.interval.requests", 1000))
        # Cluster mode (zookeeper.connect set): leadership comes from LeaderAndIsr into the
        # Partition objects below, never from the metadata; embedded mode leads everything.
        if cluster_mode is None:
            cluster_mode = bool(_config_get(config, "zookeeper.connect", None))
        self.cluster_mode = cluster_mode
        # embedded mode: what a partition look-up answers changes only with the metadata's
        # published topics and the log manager's attached logs, each versioned
        # (ClusterMetadata.published_version, LogManager.attached_version: embedded mode
        # needs both), so a parked fetch reuses its look-ups on wake while both versions are
        # unchanged (a cluster's Partitions change by LeaderAndIsr: looked up again)
        self._lookups_versioned = not cluster_mode
        self.broker_epoch = -1  # this broker's registration epoch (set by the cluster wiring)
        self.controller_epoch = -1  # the newest controller epoch a LeaderAndIsr/StopReplica had
        self._partitions = {}  # (topic, partition) -> Partition (cluster mode)
        self.alter_partition_manager = alter_partition_manager
        self.fetcher_manager = fetcher_manager
        # KIP-392: which replica a consumer with a rack should read from (None: no preference)
        self.replica_selector = replica_selector.load_replica_selector(config) if cluster_mode else None
        self.replica_lag_time_max_ms = _config_get(config, "replica.lag.time.max.ms", 30000)
        # replication throttles (a reassignment's): bytes sent to / fetched for out-of-sync replicas
        window_s = _config_get(config, "replication.quota.window.size.seconds", 1)
        self.leader_quota = ReplicationQuotaManager(
            metadata.node_id, metadata.topic_configs, LEADER_REPLICAS, self.now_ms,
            _config_get(config, LEADER_RATE, UNLIMITED), window_s)
        self.follower_quota = ReplicationQuotaManager(
            metadata.node_id, metadata.topic_configs, FOLLOWER_REPLICAS, self.now_ms,
            _config_get(config, FOLLOWER_RATE, UNLIMITED), window_s)
        self._isr_loop = None
        self._leadership_listeners = []
        self.producer_id_expiration_ms = _config_get(
            config, "producer.id.expiration.ms", DEFAULT_PRODUCER_ID_EXPIRATION_MS)
        self._producer_states = {}  # (topic, partition) -> ProducerStateManager
        # (topic, partition) -> _ProducerStateLoad: rebuilds from the log cut into slices
        # of at most 10 ms, the next one a reactor turn later
        self._producer_state_loads = {}
        self._cooperator = task.Cooperator(scheduler=lambda step: clock.callLater(0, step))
        # AlterReplicaLogDirs: replicas being copied to another log dir
        self.log_dir_mover = LogDirMover(self, lambda step: clock.callLater(0, step))
        self.topic_stats = BrokerTopicStats()
        self._expiry_loop = None  # producer expiry, from start()

    # -- partitions ------------------------------------------------------------------------

    @property
    def node_id(self):
        return self.metadata.node_id

    def now_ms(self):
        return int(self.clock.seconds() * 1000)

    def get_partition_or_error(self, topic, partition, topic_id=None):
        """``(log, NONE)`` for a partition led here, else ``(None, error code)``."""
        log_, error, _ = self._leader_log(topic, partition, topic_id)
        return log_, error

    def leader_log_or_error(self, topic, partition, topic_id, requested_epoch):
        """:meth:`get_partition_or_error` then :meth:`check_leader_epoch` (the read path's
        checks, in that order) from one metadata look-up."""
        log_, error, current = self._leader_log(topic, partition, topic_id)
        if error == errors.NONE:
            error = _epoch_error(requested_epoch, current)
            if error != errors.NONE:
                return None, error
        return log_, error

    def _leader_log(self, topic, partition, topic_id, internal_allowed=True):
        """``(log, NONE, leader epoch)`` for a partition led here, else ``(None, error, None)``.

        ``internal_allowed=False`` (a client's append on a single node): an internal topic is
        INVALID_TOPIC_EXCEPTION first, answered by the same metadata look-up."""
        if self.cluster_mode:
            p, error = self.online_partition_or_error(topic, partition, topic_id)
            if p is None:
                return None, error, None
            return p.log, errors.NONE, p.leader_epoch
        md = self.metadata
        state = md.leader_state(topic, partition)
        if state is None:
            if not internal_allowed and md.is_internal(topic):
                return None, errors.INVALID_TOPIC_EXCEPTION, None
            return None, errors.UNKNOWN_TOPIC_OR_PARTITION, None
        known_id, leader, current, internal = state
        if internal and not internal_allowed:
            return None, errors.INVALID_TOPIC_EXCEPTION, None
        if topic_id is not None and topic_id != ZERO_UUID and known_id != topic_id:
            return None, errors.INCONSISTENT_TOPIC_ID, None
        if leader != md.node_id:
            return None, errors.NOT_LEADER_OR_FOLLOWER, None
        log_ = self.log_manager.get_log(topic, partition)
        if log_ is None:
            try:
                log_ = self.log_manager.get_or_create_log(
                    topic, partition, known_id, md.topic_configs(topic), is_new=False)
            except KafkaError as e:  # its log dir may be offline
                return None, e.code, None
        return log_, errors.NONE, current

    def fetch_log_or_error(self, params, topic, partition, topic_id, requested_epoch):
        """The read path's look-up: :meth:`leader_log_or_error`, except that a consumer with
        client metadata (Fetch v11+) on a cluster may read a follower too (KIP-392, up to
        its HW). ``(log, error, Partition or None)``."""
        if self.cluster_mode and params.client_metadata is not None and params.replica_id < 0:
            # led or followed, checked against the leader epoch this replica knows
            p, error = self.hosted_partition_or_error(topic, partition, topic_id)
            if p is not None:
                error = _epoch_error(requested_epoch, p.leader_epoch)
                if error != errors.NONE:
                    p = None
            return (None if p is None else p.log), error, p
        # leader_log_or_error, inline: this runs for every partition of every fetch read
        log_, error, current = self._leader_log(topic, partition, topic_id)
        if error == errors.NONE and current is not None and requested_epoch is not None \
                and requested_epoch != current and requested_epoch != NO_PARTITION_LEADER_EPOCH:
            return None, _epoch_error(requested_epoch, current), None
        return log_, error, None

    def check_leader_epoch(self, topic, partition, requested_epoch):
        """FENCED_LEADER_EPOCH if the client's epoch is older than ours, UNKNOWN_LEADER_EPOCH if newer."""
        if requested_epoch is None or requested_epoch == NO_PARTITION_LEADER_EPOCH:
            return errors.NONE
        return _epoch_error(requested_epoch, self._leader_epoch(topic, partition))

    def _leader_epoch(self, topic, partition):
        if self.cluster_mode:
            p = self._partitions.get((topic, partition))
            return None if p is None or p.log is None else p.leader_epoch
        return self.metadata.leader_epoch(topic, partition)

    # -- cluster: partitions set by the controller -------------------------------------------

    def get_partition(self, topic, partition):
        """The Partition hosted here (cluster mode), or None."""
        return self._partitions.get((topic, partition))

    def online_partition_or_error(self, topic, partition, topic_id=None):
        """Kafka's getPartitionOrError for a leader: ``(Partition, NONE)`` if led here, else
        ``(None, error)``: NOT_LEADER_OR_FOLLOWER (hosted as a follower, or known to the
        metadata only), UNKNOWN_TOPIC_OR_PARTITION, INCONSISTENT_TOPIC_ID, KAFKA_STORAGE_ERROR."""
        p, error = self.hosted_partition_or_error(topic, partition, topic_id)
        if p is not None and not p.is_leader:
            return None, errors.NOT_LEADER_OR_FOLLOWER
        return p, error

    def hosted_partition_or_error(self, topic, partition, topic_id=None):
        """:meth:`online_partition_or_error` without the leader requirement: the Partition
        led or followed here (what a consumer may read from a follower, KIP-392)."""
        p = self._partitions.get((topic, partition))
        if p is None or p.log is None:
            if self.metadata.contains_partition(topic, partition):
                return None, errors.NOT_LEADER_OR_FOLLOWER
            return None, errors.UNKNOWN_TOPIC_OR_PARTITION
        if topic_id is not None and topic_id != ZERO_UUID and p.topic_id is not None \
                and p.topic_id != topic_id:
            return None, errors.INCONSISTENT_TOPIC_ID
        if p.log.is_offline:
            return None, errors.KAFKA_STORAGE_ERROR
        return p, errors.NONE

    def producer_state(self, topic, partition, log_=None):
        """The producer state of a partition, loaded from its snapshot and the log on first use
        (at once: for tools; the produce path uses :meth:`producer_state_or_load`)."""
        key = (topic, partition)
        ps = self._producer_states.get(key)
        if ps is None:
            if log_ is None:
                log_ = self.log_manager.get_log(topic, partition)
            loading = self._producer_state_loads.pop(key, None)
            ps, start = self._new_producer_state(log_)
            for _ in self._rebuild_steps(ps, log_, start):
                pass
            self._install_producer_state(key, log_, ps)
            if loading is not None:  # finished here instead: its waiters append now
                loading.task.stop()
                loading.done()
        return ps

    def producer_state_or_load(self, topic, partition, log_):
        """The producer state if loaded (or loadable at once from a snapshot covering the
        log), else None after starting (or joining) its rebuild from the log: the caller waits
        on :meth:`when_producer_state_loaded`, as an idempotent produce must."""
        key = (topic, partition)
        ps = self._producer_states.get(key)
        if ps is not None or key in self._producer_state_loads:
            return ps
        ps, start = self._new_producer_state(log_)
        if start >= log_.log_end_offset:
            self._install_producer_state(key, log_, ps)
            return ps
        # Until the rebuild is done nothing after the snapshot is known to be stable.
        unstable = ps.first_unstable_offset()
        log_.first_unstable_offset = start if unstable is None else min(unstable, start)
        loading = self._producer_state_loads[key] = _ProducerStateLoad()
        log.info("rebuilding producer state of {topic}-{partition} from offset {start} to {end}",
                 topic=topic, partition=partition, start=start, end=log_.log_end_offset)
        loading.task = self._cooperator.cooperate(self._rebuild_steps(ps, log_, start))

        def rebuilt(_):
            if self._producer_state_loads.get(key) is loading:
                del self._producer_state_loads[key]
                self._install_producer_state(key, log_, ps)
            loading.done()

        def failed(f):
            if f.check(task.TaskStopped):
                return  # whoever stopped it answers its waiters (or, at shutdown, nobody)
            log.failure("rebuilding producer state of {topic}-{partition} failed", f,
                        topic=topic, partition=partition)
            if self._producer_state_loads.get(key) is loading:
                del self._producer_state_loads[key]
            loading.done(f)  # their appends fail; the next produce rebuilds again
        loading.task.whenDone().addCallbacks(rebuilt, failed)
        return None

    def loaded_producer_state(self, topic, partition):
        """The partition's producer state if it is loaded, else None (nothing started)."""
        return self._producer_states.get((topic, partition))

    def when_producer_state_loaded(self, topic, partition):
        """A Deferred firing once the partition's producer state rebuild has ended (loaded,
        or given up: the partition was deleted); fired already if none is running."""
        loading = self._producer_state_loads.get((topic, partition))
        if loading is None:
            return defer.succeed(None)
        return loading.wait()

    def _new_producer_state(self, log_):
        ps = ProducerStateManager(log_.dir, self.producer_id_expiration_ms)
        return ps, ps.load(log_.log_start_offset, log_.log_end_offset)

    def _install_producer_state(self, key, log_, ps):
        ps.map_end_offset = max(ps.map_end_offset, log_.log_end_offset)
        ps.producer_id_expiration_ms = self.producer_id_expiration_ms  # changed while rebuilding?
        self._producer_states[key] = ps
        self._hook_roll(log_, ps)
        log_.producer_state_manager = ps  # the cleaner keeps each producer's last batch
        log_.first_unstable_offset = ps.first_unstable_offset()
        if not log_.may_have_producer_snapshot():
            # A partition with producer state always has a snapshot from here on, so a start-up
            # (even after a crash) knows which logs may hold open transactions without reading
            # logs that never saw a producer id.
            self._write_snapshot(log_, ps, ps.map_end_offset)

    def _write_snapshot(self, lg, ps, offset):
        """Encode ``ps`` here, write it (fsync) in the pool: a thread gets only bytes and paths."""
        data, log_dir, start = ps.encode_snapshot(), lg.dir, lg.log_start_offset

        def write():
            write_snapshot(log_dir, offset, data)
            delete_snapshots_before(log_dir, start)
        d = self.log_manager.run_blocking(write)
        d.addErrback(lambda f: log.failure("producer snapshot of {topic}-{partition} failed",
                                           f, topic=lg.topic, partition=lg.partition))

    def _hook_roll(self, log_, ps):
        """Snapshot the producer state when the log rolls a segment (Kafka does this inside
        UnifiedLog.roll); chains any listener the log manager installed."""
        previous = log_.roll_listener

        def on_roll(lg, new_base):
            if previous is not None:
                previous(lg, new_base)
            if ps.map_end_offset == new_base:
                self._write_snapshot(lg, ps, new_base)

        log_.roll_listener = on_roll

    def _rebuild_steps(self, ps, log_, offset):
        """Replay the batch headers of ``log_`` from ``offset`` to its end into ``ps``,
        yielding after each (appends that are not idempotent may land meanwhile: the end is
        read again at each chunk)."""
        from kafkatw.protocol.records import iter_batch_headers

        while offset < log_.log_end_offset:
            try:
                info = log_.read(offset, 1 << 20, FetchIsolation.LOG_END, True)
            except KafkaError as e:
                if e.code == errors.OFFSET_OUT_OF_RANGE and offset < log_.log_start_offset:
                    # deleted under the rebuild (DeleteRecords, retention): what went is
                    # gone, the rest still counts
                    offset = log_.log_start_offset
                    continue
                break
            records = info.records
            data = records.read() if hasattr(records, "read") else bytes(records or b"")
            if not data:
                break
            last = None
            for _, h in iter_batch_headers(data, allow_partial_tail=True):
                if h.next_offset > ps.map_end_offset:
                    ps.update(h, h.base_offset, h.last_offset)
                last = h
                yield
            if last is None or last.next_offset <= offset:
                break
            offset = last.next_offset

    def log_moved(self, tp, old, new):
        """A replica moved to another log dir (``LogDirMover``): its producer state follows,
        its snapshots written in the new dir from now on; what waited on it looks again."""
        loading = self._producer_state_loads.pop(tp, None)
        if loading is not None:
            loading.task.stop()
            loading.done()  # its waiters retry and load from the moved log
        ps = self._producer_states.get(tp)
        if ps is not None:
            ps.log_dir = new.dir
            self._install_producer_state(tp, new, ps)
        self._complete_delayed([tp])

    def take_producer_snapshots(self):
        """Write every partition's producer snapshot (clean shutdown; segment roll calls the
        per-partition :meth:`take_producer_snapshot`)."""
        for ps in self._producer_states.values():
            ps.take_snapshot()

    def take_producer_snapshot(self, topic, partition):
        ps = self._producer_states.get((topic, partition))
        return ps.take_snapshot() if ps is not None else None

    def forget_partition(self, topic, partition):
        """Drop in-memory state of a deleted partition (and wake fetches waiting on it)."""
        if self._partitions.pop((topic, partition), None) is not None \
                and self.fetcher_manager is not None:
            self.fetcher_manager.remove_fetcher_for_partitions([(topic, partition)])
        self._producer_states.pop((topic, partition), None)
        loading = self._producer_state_loads.pop((topic, partition), None)
        if loading is not None:
            loading.task.stop()
            loading.done()  # its waiters retry and find the partition gone
        self.topic_stats.remove(topic)
        self._complete_delayed([(topic, partition)])

    def set_producer_id_expiration_ms(self, expiration_ms):
        """``producer.id.expiration.ms`` changed live: every partition's next expiry check uses it."""
        self.producer_id_expiration_ms = expiration_ms
        for ps in self._producer_states.values():
            ps.producer_id_expiration_ms = expiration_ms

    def remove_expired_producers(self):
        now = self.now_ms()
        for ps in self._producer_states.values():
            ps.remove_expired_producers(now)

    def start(self):
        """Lead every loaded partition, and expire idle producers every
        producer.id.expiration.check.interval.ms."""
        # Kafka's Partition.makeLeader -> maybeIncrementLeaderHW: the ISR is this broker, so the
        # HW is the log end at once. The HW checkpoint lags (replica.high.watermark.checkpoint.
        # interval.ms); without this, records acknowledged before a crash stay invisible.
        # On a cluster the HW comes from the ISR once LeaderAndIsr says who leads.
        lm = self.log_manager
        # The logs not opened since a clean shutdown are opened only if this has work for
        # them (from their summaries: a high watermark behind the end, or producer state).
        for topic, p, summ in lm.unopened_summaries():
            start, _, hw = summary_offsets(summ)  # (as the log would report them)
            if (not self.cluster_mode and hw < summ.log_end_offset) or (
                    summ.producer_snapshot and summ.log_end_offset > start):
                lm.get_log(topic, p)
        for log_ in lm.opened_logs():
            if not self.cluster_mode:
                log_.maybe_increment_high_watermark(log_.log_end_offset)
            if log_.log_end_offset > log_.log_start_offset and not log_.is_offline \
                    and log_.may_have_producer_snapshot():
                # Open transactions hold the LSO back from the first fetch on (Kafka loads
                # producer state with the log); only logs that ever had producer state can
                # hold one, and each of those has a snapshot. A rebuild from the snapshot runs
                # in slices, the LSO held at the snapshot meanwhile.
                self.producer_state_or_load(log_.topic, log_.partition, log_)

        interval = _config_get(self.config, "producer.id.expiration.check.interval.ms", 600000)
        self._expiry_loop = task.LoopingCall(self.remove_expired_producers)
        self._expiry_loop.clock = self.clock
        self._expiry_loop.start(interval / 1000.0, now=False)
        if self.cluster_mode:
            self._isr_loop = task.LoopingCall(self.maybe_shrink_isrs)
            self._isr_loop.clock = self.clock
            self._isr_loop.start(self.replica_lag_time_max_ms / 2000.0, now=False)

    def shutdown(self):
        """Stop timers and write every producer snapshot (call before the log manager's shutdown)."""
        for loop in (self._expiry_loop, self._isr_loop):
            if loop is not None and loop.running:
                loop.stop()
        if self.fetcher_manager is not None:
            self.fetcher_manager.shutdown()
        if self.alter_partition_manager is not None:
            self.alter_partition_manager.shutdown()
        self.fetch_purgatory.shutdown()
        self.produce_purgatory.shutdown()
        self.log_dir_mover.shutdown()
        for loading in list(self._producer_state_loads.values()):
            loading.task.stop()  # no snapshot of a partial state: the next start rebuilds
        self._producer_state_loads.clear()
        self.take_producer_snapshots()

    # -- cluster: LeaderAndIsr, StopReplica, followers ---------------------------------------

    def _check_controller_epoch(self, controller_id, controller_epoch, what):
        if controller_epoch < self.controller_epoch:
            raise KafkaError(errors.STALE_CONTROLLER_EPOCH, (
                "%s from controller %d with controller epoch %d is older than the latest "
                "controller epoch %d" % (what, controller_id, controller_epoch,
                                         self.controller_epoch)))
        self.controller_epoch = controller_epoch

    def _new_partition(self, topic, partition):
        return Partition(topic, partition, self.node_id, self.now_ms,
                         alter_partition=self._alter_partition_manager(),
                         on_high_watermark=self._high_watermark_moved,
                         lag_time_max_ms=self.replica_lag_time_max_ms)

    def _high_watermark_moved(self, part):
        """A partition's HW (or ISR) moved outside an append: complete acks=all produces and
        fetches at the HW waiting on it."""
        self._complete_delayed([part.tp])

    def _complete_delayed(self, tps):
        for topic, partition in tps:
            key = TopicPartitionOperationKey(topic, partition)
            self.produce_purgatory.check_and_complete(key)
            self.fetch_purgatory.check_and_complete(key)

    def become_leader_or_follower(self, controller_id, controller_epoch, partition_states,
                                  topic_ids, live_leaders):
        """Kafka's ReplicaManager.becomeLeaderOrFollower: a Deferred of {tp: error code}.
        Raises KafkaError(STALE_CONTROLLER_EPOCH) for a controller epoch older than one seen;
        a partition whose leader epoch is not newer than ours answers STALE_CONTROLLER_EPOCH,
        one not assigned here UNKNOWN_TOPIC_OR_PARTITION. Missing logs are created in the
        thread pool first."""
        self._check_controller_epoch(controller_id, controller_epoch, "LeaderAndIsr")
        results = {}
        accepted = []
        missing = {}  # topic -> [partition] whose log does not exist yet
        for st in partition_states:
            tp = (st.topic_name, st.partition_index)
            part = self._partitions.get(tp)
            if part is not None and part.log is not None and part.log.is_offline:
                results[tp] = errors.KAFKA_STORAGE_ERROR
                continue
            current = NO_PARTITION_LEADER_EPOCH if part is None else part.leader_epoch
            if st.leader_epoch <= current:
                log.info("ignoring LeaderAndIsr of {tp} from controller {c} epoch {ce}: leader "
                         "epoch {e} is not newer than {cur}", tp="%s-%d" % tp, c=controller_id,
                         ce=controller_epoch, e=st.leader_epoch, cur=current)
                results[tp] = errors.STALE_CONTROLLER_EPOCH
                continue
            if self.node_id not in st.replicas:
                results[tp] = errors.UNKNOWN_TOPIC_OR_PARTITION
                continue
            topic_id = topic_ids.get(st.topic_name)
            lg = self.log_manager.get_log(*tp)
            if lg is not None and topic_id not in (None, ZERO_UUID) and lg.topic_id is not None \
                    and lg.topic_id != topic_id:
                results[tp] = errors.INCONSISTENT_TOPIC_ID
                continue
            if lg is None:
                missing.setdefault(st.topic_name, []).append(st.partition_index)
            accepted.append(st)

        creations = [self.log_manager.create_logs(
            topic, parts, _nonzero(topic_ids.get(topic)), self.metadata.topic_configs(topic))
            for topic, parts in missing.items()]

        def apply(_):
            self._apply_leader_and_isr(accepted, topic_ids, live_leaders, results)
            return results

        if not creations:
            return defer.succeed(apply(None))
        return defer.gatherResults(creations, consumeErrors=True).addBoth(
            lambda outcome: apply(None))

    def _apply_leader_and_isr(self, accepted, topic_ids, live_leaders, results):
        leaders = []
        followers = []  # (Partition, leader changed)
        for st in accepted:
            tp = (st.topic_name, st.partition_index)
            lg = self.log_manager.get_log(*tp)
            if lg is None or lg.is_offline:
                results[tp] = errors.KAFKA_STORAGE_ERROR
                continue
            part = self._partitions.get(tp)
            if part is None:
                part = self._partitions[tp] = self._new_partition(*tp)
            topic_id = _nonzero(topic_ids.get(st.topic_name))
            if topic_id is not None:
                part.topic_id = topic_id
            elif part.topic_id is None:
                part.topic_id = lg.topic_id
            if st.leader == self.node_id:
                part.make_leader(st, lg)
                leaders.append(part)
            else:
                followers.append((part, part.make_follower(st, lg)))
            results[tp] = errors.NONE
        fetchers = self._fetcher_manager() if followers or leaders else None
        if fetchers is not None:
            fetchers.remove_fetcher_for_partitions(
                [p.tp for p in leaders] + [p.tp for p, changed in followers if changed])
        for part in leaders:
            log.info("leading {tp} at epoch {e} (ISR {isr}), log end {leo}",
                     tp="%s-%d" % part.tp, e=part.leader_epoch, isr=list(part.isr),
                     leo=part.log.log_end_offset)
            part.maybe_increment_leader_hw()
        add = {}
        for part, changed in followers:
            if not changed:
                continue
            endpoint = live_leaders.get(part.leader_id)
            if endpoint is None:
                log.info("following {tp}: leader {l} is not alive, no fetcher",
                         tp="%s-%d" % part.tp, l=part.leader_id)
                continue
            add[part.tp] = InitialFetchState(part.topic_id, part.leader_id, tuple(endpoint),
                                             part.leader_epoch, part.log.log_end_offset)
        if add:
            fetchers.add_fetcher_for_partitions(add)
        self._complete_delayed([p.tp for p in leaders] + [p.tp for p, _ in followers])
        if leaders or followers:
            self._tell_leadership([(p.topic, p.partition, p.leader_epoch) for p in leaders],
                                  [(p.topic, p.partition, p.leader_epoch) for p, _ in followers])

    def add_leadership_listener(self, listener):
        """Call ``listener(became_leader, became_follower)`` (lists of ``(topic, partition,
        leader_epoch)``) after each LeaderAndIsr applied here and, for partitions stopped,
        after StopReplica (as followers with epoch -1): Kafka's onLeadershipChange, what the
        group and transaction coordinators need to load or unload their partitions."""
        self._leadership_listeners.append(listener)

    def _tell_leadership(self, leaders, followers):
        for listener in list(self._leadership_listeners):
            try:
                listener(leaders, followers)
            except Exception:
                log.failure("a leadership listener failed")

    def stop_replicas(self, controller_id, controller_epoch, partitions):
        """Kafka's ReplicaManager.stopReplicas: ``partitions`` is [(topic, partition, leader
        epoch, delete)]; a Deferred of {tp: error code} (FENCED_LEADER_EPOCH for an older
        leader epoch than ours; -1 and -2 always stop). Deleted logs go in the thread pool."""
        self._check_controller_epoch(controller_id, controller_epoch, "StopReplica")
        results = {}
        stopping = []
        for topic, partition, leader_epoch, delete in partitions:
            tp = (topic, partition)
            part = self._partitions.get(tp)
            if part is not None and leader_epoch not in (-1, -2) \
                    and leader_epoch < part.leader_epoch:
                results[tp] = errors.FENCED_LEADER_EPOCH
                continue
            stopping.append((tp, delete))
            results[tp] = errors.NONE
        if stopping and self.fetcher_manager is not None:
            self.fetcher_manager.remove_fetcher_for_partitions([tp for tp, _ in stopping])
        deletes = {}
        for tp, delete in stopping:
            if delete:
                self.forget_partition(*tp)
                deletes.setdefault(tp[0], []).append(tp[1])
        self._complete_delayed([tp for tp, _ in stopping])
        if stopping:
            self._tell_leadership([], [(tp[0], tp[1], -1) for tp, _ in stopping])
        done = [self.log_manager.delete_logs(topic, parts) for topic, parts in deletes.items()]
        if not done:
            return defer.succeed(results)

        def deleted(outcomes):
            for (topic, parts), (ok, _) in zip(deletes.items(), outcomes):
                if not ok:
                    for p in parts:
                        results[(topic, p)] = errors.KAFKA_STORAGE_ERROR
            return results
        return defer.DeferredList(done, consumeErrors=True).addCallback(deleted)

    def maybe_shrink_isrs(self):
        """Kafka's isr-expiration task: every leader drops followers not caught up within
        ``replica.lag.time.max.ms``."""
        for part in list(self._partitions.values()):
            if part.is_leader:
                part.maybe_shrink_isr()

    def under_replicated_partitions(self):
        """Partitions led here whose ISR is smaller than their replica set (Kafka's
        UnderReplicatedPartitions); 0 on a single node."""
        return sum(1 for p in self._partitions.values()
                   if p.is_leader and len(p.isr) < len(p.assignment))

    def follower_partition(self, topic, partition):
        """The Partition if this broker follows it now (what a fetcher appends to), else None."""
        part = self._partitions.get((topic, partition))
        if part is None or part.log is None or part.is_leader or part.log.is_offline:
            return None
        return part

    def append_records_to_follower(self, topic, partition, buf, leader_hw, leader_log_start):
        """A fetcher's records: written with the leader's offsets and epochs (Kafka's
        appendRecordsToFollowerOrFutureReplica), producer state kept as the leader's, the HW
        and log start learnt from the leader. Returns the LogAppendInfo (None: nothing)."""
        part = self.follower_partition(topic, partition)
        if part is None:
            return None
        lg = part.log
        info = None
        if len(buf):
            headers = _iter_batch_headers(buf)  # read once, for the log and producer state
            info = lg.append_as_follower(buf, headers)
            self._update_follower_producer_state(topic, partition, lg, buf, headers)
        if leader_log_start > lg.log_start_offset:
            lg.maybe_increment_log_start_offset(min(leader_log_start, lg.log_end_offset))
        part.follower_high_watermark(leader_hw)
        return info

    def _update_follower_producer_state(self, topic, partition, lg, buf, headers):
        """Producer state follows the follower's log so a new leader keeps deduplicating (and
        knows open transactions): updated from the batch ``headers`` and markers as appended."""
        if not any(h.producer_id >= 0 for _, h in headers):
            ps = self._producer_states.get((topic, partition))
            if ps is not None:
                ps.map_end_offset = lg.log_end_offset
            return
        ps = self._producer_states.get((topic, partition))
        if ps is None:
            # loads from a snapshot and replays the log (this append included) in slices
            self.producer_state_or_load(topic, partition, lg)
            return
        for pos, h in headers:
            if h.next_offset <= ps.map_end_offset:
                continue
            if h.is_control and h.producer_id >= 0:
                marker = _marker(buf, pos)
                completed = ps.update(h, h.base_offset, h.last_offset, h.max_timestamp,
                                      marker.is_abort, marker.coordinator_epoch)
                if completed is not None and completed.is_aborted:
                    lg.append_aborted_txn(completed.producer_id, completed.first_offset,
                                          completed.last_offset, ps.last_stable_offset(completed))
            elif h.producer_id >= 0:
                ps.update(h, h.base_offset, h.last_offset, h.max_timestamp)
        ps.map_end_offset = max(ps.map_end_offset, lg.log_end_offset)
        lg.first_unstable_offset = ps.first_unstable_offset()

    def truncate_follower(self, topic, partition, offset, fully=False):
        """Cut a follower's log at ``offset`` (a divergence point the leader named, never just
        its HW), or with ``fully`` empty it and start at ``offset`` (the leader's log start is
        past ours); producer state is rebuilt from what stays."""
        part = self.follower_partition(topic, partition)
        if part is None:
            return False
        lg = part.log
        if fully:
            lg.truncate_fully_and_start_at(offset)
            changed = True
        else:
            changed = lg.truncate_to(offset)
        if changed:
            log.info("truncated {tp} to {offset}{how}", tp="%s-%d" % (topic, partition),
                     offset=offset, how=" (emptied)" if fully else "")
            had_state = self._producer_states.pop((topic, partition), None) is not None
            loading = self._producer_state_loads.pop((topic, partition), None)
            if loading is not None:
                loading.task.stop()
                loading.done()
            lg.producer_state_manager = None
            lg.first_unstable_offset = None
            if had_state or loading is not None or lg.may_have_producer_snapshot():
                # from the newest snapshot at or below the new end (later ones are deleted)
                self.producer_state_or_load(topic, partition, lg)
        return changed

    def _alter_partition_manager(self):
        if self.alter_partition_manager is None:
            from kafkatw.server.alter_partition import AlterPartitionManager
            self.alter_partition_manager = AlterPartitionManager.from_config(
                self.config, self.metadata, self.clock, lambda: self.broker_epoch)
            self.alter_partition_manager.start()
        return self.alter_partition_manager

    def _fetcher_manager(self):
        if self.fetcher_manager is None:
            from kafkatw.server.replica_fetcher import ReplicaFetcherManager
            self.fetcher_manager = ReplicaFetcherManager.from_config(self.config, self, self.clock)
        return self.fetcher_manager

    # -- produce ---------------------------------------------------------------------------

    def append_records(self, timeout_ms, required_acks, entries, internal_topics_allowed=False,
                       origin=ORIGIN_CLIENT):
        """Append ``entries`` ({(topic, partition): writable buffer of v2 batches}).

        Returns a Deferred firing with {(topic, partition): PartitionResponse}. On a single node
        every acks value completes once written: the ISR is this broker and the HW moves to the
        log end right after the append. Fetches parked on an appended partition are retried
        before this returns (within the same reactor turn).
        """
        return defer.maybeDeferred(self.append_records_now, timeout_ms, required_acks, entries,
                                   internal_topics_allowed, origin=origin)

    def append_records_now(self, timeout_ms, required_acks, entries, internal_topics_allowed=False,
                           batch_headers=None, origin=ORIGIN_CLIENT):
        """:meth:`append_records` without the Deferred: the results dict itself (every append
        completes synchronously on a single node; the produce path calls this), or a
        Deferred of it when an idempotent batch waits for its partition's producer state.

        ``batch_headers``: {(topic, partition): [(position, BatchHeader)]} for entries whose
        caller read every batch header of the buffer already (the produce handler has, for the
        single batch of a partition it did not recompress); the others are read here.
        ``origin`` (``storage.offsets``): ORIGIN_CLIENT refuses control batches; coordinators
        append with ORIGIN_COORDINATOR (no sequence checks; markers end transactions in the
        producer state)."""
        if required_acks not in (-1, 0, 1):
            return {tp: PartitionResponse(errors.INVALID_REQUIRED_ACKS) for tp in entries}
        results = {}
        appended = []
        waiting = None
        known = batch_headers or {}
        for tp, buf in entries.items():
            resp = self._append_to_local_log(tp, buf, internal_topics_allowed, required_acks,
                                             known.get(tp), origin)
            if resp is _LOADING:
                if waiting is None:
                    waiting = {}
                waiting[tp] = buf
                continue
            results[tp] = resp
            if resp.error_code == errors.NONE:
                appended.append(tp)
        purgatory = self.fetch_purgatory
        # (its watch lists non-empty: any fetch parked at all, asked per produce)
        if appended and purgatory.watch_lists:
            for tp in appended:
                # (the key built in C from the entries' (topic, partition): no named tuple
                # __new__ frame per appended partition a fetch may wait on)
                purgatory.check_and_complete(_new(TopicPartitionOperationKey, tp))
        if waiting is None:
            if required_acks == -1 and self.cluster_mode:
                return self._maybe_delay_produce(timeout_ms, results)
            return results
        return self._append_after_load(timeout_ms, required_acks, waiting, internal_topics_allowed,
                                       known, results, origin)

    def _maybe_delay_produce(self, timeout_ms, results):
        """acks=all on a cluster: the results at once if every appended partition's HW has
        passed it already, else a Deferred fired by a DelayedProduce (Kafka's
        delayedProduceRequestRequired / DelayedProduce)."""
        pending = {}
        for tp, resp in results.items():
            if resp.error_code == errors.NONE and resp.last_offset >= 0:
                pending[tp] = resp.last_offset + 1
        if not pending:
            return results
        op = DelayedProduce(timeout_ms, results, pending, self)
        d = defer.Deferred()
        op.when_complete(d.callback, d.errback)
        self.produce_purgatory.try_complete_else_watch(
            op, [TopicPartitionOperationKey(topic, partition) for topic, partition in pending])
        return d

    def _append_after_load(self, timeout_ms, required_acks, waiting, internal_topics_allowed,
                           known, results, origin=ORIGIN_CLIENT):
        """Idempotent batches for partitions whose producer state is being rebuilt: appended
        once it is (in arrival order: waiters run in the order they came); a Deferred of all
        of the request's results."""
        def load_failed(f, tp):
            results[tp] = PartitionResponse(errors.UNKNOWN_SERVER_ERROR, error_message=(
                "rebuilding the producer state failed: %s" % (f.getErrorMessage(),)))
            del waiting[tp]

        loads = [self.when_producer_state_loaded(*tp).addErrback(load_failed, tp)
                 for tp in list(waiting)]

        def append(_):
            if not waiting:
                return merge({})
            later = self.append_records_now(timeout_ms, required_acks, waiting,
                                            internal_topics_allowed,
                                            {tp: known[tp] for tp in waiting if tp in known},
                                            origin)
            if isinstance(later, defer.Deferred):  # the partition was reloaded meanwhile
                return later.addCallback(merge)
            return merge(later)

        def merge(later):
            results.update(later)
            if required_acks == -1 and self.cluster_mode:
                # the partitions appended before the load wait for their acks too
                return self._maybe_delay_produce(timeout_ms, results)
            return results
        return defer.gatherResults(loads).addCallback(append)

    def _append_to_local_log(self, tp, buf, internal_topics_allowed, required_acks=1,
                             batch_headers=None, origin=ORIGIN_CLIENT):
        topic, partition = tp  # (the entries' key: no (topic, partition) tuple made again)
        if self.cluster_mode:
            if not internal_topics_allowed and self.metadata.is_internal(topic):
                error = errors.INVALID_TOPIC_EXCEPTION
            else:
                part, error = self.online_partition_or_error(topic, partition)
                log_ = None if part is None else part.log
                isr = () if part is None else part.isr
        else:
            part = None
            # (the internal-topic refusal comes first, from the leader's look-up: one call)
            log_, error, epoch = self._leader_log(topic, partition, None, internal_topics_allowed)
            isr = None  # this node alone; built for acks=all only
        if error != errors.NONE:
            if error == errors.INVALID_TOPIC_EXCEPTION:
                return PartitionResponse(error, error_message="Cannot append to internal topic %s" % topic)
            return PartitionResponse(error)
        if required_acks == -1 and isr is None:
            isr = (self.node_id,)
        if required_acks == -1 and log_.config.min_insync_replicas > len(isr):
            min_isr = log_.config.min_insync_replicas
            # Kafka's Partition.appendRecordsToLeader: acks=all needs min.insync.replicas in sync
            return PartitionResponse(errors.NOT_ENOUGH_REPLICAS, error_message=(
                "The size of the current ISR {%s} is insufficient to satisfy the min.isr "
                "requirement of %d for partition %s-%d" % (", ".join(str(r) for r in isr),
                                                            min_isr, topic, partition)))
        try:
            headers = batch_headers  # [(position, header)], read once for this and the log
            if headers is None:
                try:
                    headers = self._batch_headers(buf)
                except KafkaError:
                    headers = None  # let the log's validation report it
            ps = None
            markers = None  # position -> ControlRecord, for the control batches of a coordinator
            if headers:
                idempotent = False
                for pos, h in headers:
                    if h.attributes & CONTROL_FLAG_MASK:
                        if origin == ORIGIN_CLIENT:
                            return PartitionResponse(errors.INVALID_RECORD, error_message=(
                                "Clients are not allowed to write control records"))
                        if markers is None:
                            markers = {}
                        markers[pos] = _marker(buf, pos)
                    if h.producer_id >= 0:
                        idempotent = True
                if idempotent:
                    ps = self.producer_state_or_load(topic, partition, log_)
                    if ps is None:
                        return _LOADING
            if ps is not None and markers is not None:
                for pos, h in headers:
                    if h.is_control:
                        refused = _check_marker(ps.last_entry(h.producer_id), h, markers[pos])
                        if refused is not None:
                            return refused
            if ps is not None and origin == ORIGIN_CLIENT:
                # Coordinator writes (markers, transactional offsets) carry no sequences; the
                # coordinators checked the producer epoch already.
                check = ps.check_batches([h for _, h in headers])
                if check.duplicate is not None:
                    return PartitionResponse(errors.NONE, check.duplicate.first_offset, -1,
                                             log_.log_start_offset,
                                             last_offset=check.duplicate.last_offset)
                if check.error != errors.NONE:
                    return PartitionResponse(check.error, error_message=check.message)
            if part is not None:
                epoch = part.leader_epoch  # (single node: the one _leader_log read)
            info = log_.append_as_leader(buf, epoch, headers)
            if ps is not None:
                offset = info.first_offset
                for pos, h in headers:
                    n = h.last_offset_delta + 1
                    ts = info.log_append_time if info.log_append_time != -1 else h.max_timestamp
                    if markers is not None and h.is_control:
                        marker = markers[pos]
                        completed = ps.update(h, offset, offset + n - 1, ts, marker.is_abort,
                                              marker.coordinator_epoch)
                        if completed is not None and completed.is_aborted:
                            log_.append_aborted_txn(completed.producer_id, completed.first_offset,
                                                    completed.last_offset,
                                                    ps.last_stable_offset(completed))
                    else:
                        ps.update(h, offset, offset + n - 1, ts)
                    offset += n
                log_.first_unstable_offset = ps.first_unstable_offset()
            elif tp in self._producer_states:
                self._producer_states[tp].map_end_offset = info.last_offset + 1
            if part is not None:
                # the HW moves once the ISR's followers have fetched this far (or now, when
                # the leader is the ISR)
                if part.maybe_increment_leader_hw():
                    self.produce_purgatory.check_and_complete(
                        TopicPartitionOperationKey(topic, partition))
            else:
                # Single node: the ISR is {us}, so the HW follows the log end at once.
                log_.update_high_watermark(info.last_offset + 1)  # (the log end offset now)
            self.topic_stats.record_append(topic, info.last_offset - info.first_offset + 1, len(buf))
            # (positional, in field order: no record errors (an empty tuple: nothing is added
            # to them), no message)
            return PartitionResponse(errors.NONE, info.first_offset, info.log_append_time,
                                     info.log_start_offset, (), None, info.last_offset)
        except KafkaError as e:
            return PartitionResponse(e.code, record_errors=list(getattr(e, "record_errors", None) or []),
                                     error_message=e.message)
        except OSError as e:
            log.failure("I/O error appending to {topic}-{partition}", topic=topic, partition=partition)
            return PartitionResponse(errors.KAFKA_STORAGE_ERROR, error_message=str(e))
        except Exception as e:
            log.failure("Error appending to {topic}-{partition}", topic=topic, partition=partition)
            return PartitionResponse(errors.UNKNOWN_SERVER_ERROR, error_message=str(e))

    # -- fetch -----------------------------------------------------------------------------

    def fetch_messages(self, params, fetch_infos):
        """Read ``fetch_infos`` ([((topic, partition), PartitionData)] in request order).

        Returns a Deferred of [((topic, partition), FetchPartitionData)]. Answers at once if
        the request does not want to wait, asks for nothing, already has min_bytes, hit an
        error or a diverging epoch; otherwise parks a DelayedFetch that reads again when it
        completes (enough bytes, a partition change, or max_wait_ms)."""
        result = self.fetch_messages_now(params, fetch_infos)
        if isinstance(result, DelayedFetch):
            d = defer.Deferred(lambda _: result.cancel())  # cancelled: CancelledError, never read
            result.when_complete(d.callback, d.errback)
            return d
        return defer.succeed(result)

    def fetch_messages_now(self, params, fetch_infos):
        """:meth:`fetch_messages` without a Deferred: the result list when answered at once,
        else the parked :class:`DelayedFetch` (its ``when_complete`` gets the list)."""
        fetch_infos = list(fetch_infos)
        # each partition looked up once for the read and, if the fetch parks, for the check
        # that parks it (both in this call: nothing can change between them); after an error
        # the read looks each up again and reports it
        found = []
        for (topic, partition), info in fetch_infos:
            log_, error, part = self.fetch_log_or_error(params, topic, partition, info.topic_id,
                                                        info.current_leader_epoch)
            if error != errors.NONE:
                found = None
                break
            found.append((log_, part))
        if params.replica_id < 0 and found and params.max_wait_ms > 0 and params.min_bytes > 0:
            # A consumer's fetch at the end of every partition parks: each read would be empty
            # at that end (Log.end_if_read_empty), and nothing else answers it now (no error,
            # no preferred read replica: no Partition to read a follower of, no diverging
            # epoch), so the reads are skipped, their starts are those ends, and the check
            # that parks it is skipped too (every start at its end: no byte, no case F; case
            # H is not asked when parking). A follower's read has side effects: read.
            isolation = params.fetch_isolation
            starts = []
            keys = []
            for (tp, info), (log_, part) in zip(fetch_infos, found):
                if part is not None:
                    break
                end = log_.end_if_read_empty(info.fetch_offset, isolation)
                if end is None or (info.last_fetched_epoch >= 0
                                   and self.diverging_epoch(log_, info) is not None):
                    break
                starts.append(end)
                keys.append(_new(TopicPartitionOperationKey, tp))  # (topic, partition), in C
            else:
                op = DelayedFetch(params, fetch_infos, starts, self, None,
                                  found if self._lookups_versioned else None)
                self.fetch_purgatory.try_complete_else_watch(op, keys, False)
                return op
        results = self.read_from_log(params, fetch_infos, found)
        bytes_readable = 0
        error_reading = False
        diverging = False
        for _, r in results:
            bytes_readable += r.records_size
            if r.error != errors.NONE or r.preferred_read_replica >= 0:
                error_reading = True  # answered at once, as Kafka does with a preferred replica too
            if r.diverging_epoch is not None:
                diverging = True
        if (params.max_wait_ms <= 0 or not fetch_infos or bytes_readable >= params.min_bytes
                or error_reading or diverging):
            self.topic_stats.record_fetch(results)
            return results
        starts = []
        keys = []
        for tp, r in results:
            starts.append(r.fetch_offset_metadata)
            keys.append(_new(TopicPartitionOperationKey, tp))  # (topic, partition), in C
        op = DelayedFetch(params, fetch_infos, starts, self, found,
                          found if self._lookups_versioned else None)
        if self.fetch_purgatory.try_complete_else_watch(op, keys):
            # completed by the check that would park it (a cluster: a partition moved since
            # the read): answered now, as a read that does not wait
            return op.result()
        return op

    def read_from_log(self, params, fetch_infos, found=None):
        """Read each partition in order ([(tp, FetchPartitionData)]); the request's byte
        budget shrinks by what each read returned, and the first non-empty partition may
        exceed it by one whole batch. ``found``: [(log, Partition or None)] per partition from
        a :meth:`fetch_log_or_error` made in the same call (a DelayedFetch completing), else
        each is looked up here."""
        limit_bytes = params.max_bytes
        min_one_message = True
        results = []
        found = iter(()) if found is None else iter(found)
        for tp, info in fetch_infos:
            r = self._read(params, tp[0], tp[1], info, limit_bytes, min_one_message,
                           next(found, None))
            size = r.records_size
            if size > 0:
                min_one_message = False
            limit_bytes -= size  # (not max(0, ...): the builtin parses keywords, ~1k a call)
            if limit_bytes < 0:
                limit_bytes = 0
            results.append((tp, r))
        return results

    def _leader_throttles(self, topic, partition, replica_id):
        """Whether what this leader sends ``replica_id`` of the partition counts against the
        leader replication quota (a rate set, the replica out of the ISR, the partition named)."""
        if self.leader_quota.unlimited:
            return False
        led = self._partitions.get((topic, partition))
        return led is not None and self.leader_quota.throttles(topic, partition, replica_id in led.isr)

    def should_leader_throttle(self, topic, partition, replica_id):
        """Kafka's shouldLeaderThrottle: such a follower gets nothing of the partition now.
        (No quota set, the common case, answers without the call below.)"""
        quota = self.leader_quota
        return not quota.unlimited and self._leader_throttles(topic, partition, replica_id) \
            and quota.is_quota_exceeded()

    def diverging_epoch(self, log_, info):
        """(epoch, end_offset) if the follower's last fetched epoch ends before its fetch offset."""
        res = log_.end_offset_for_epoch(info.last_fetched_epoch)
        if res is None or res[0] < 0:
            # an epoch newer than any we know (cannot come from a follower of ours): nothing
            # to compare, the fetch goes on by offset
            return None
        epoch, end_offset = res
        if epoch < info.last_fetched_epoch or end_offset < info.fetch_offset:
            return (epoch, end_offset)
        return None

    def _read(self, params, topic, partition, info, limit_bytes, min_one_message, found=None):
        if found is None:
            log_, error, part = self.fetch_log_or_error(params, topic, partition, info.topic_id,
                                                        info.current_leader_epoch)
            if error != errors.NONE:
                return _error_read_result(error)
        else:
            log_, part = found
        try:
            if params.replica_id >= 0 and self.cluster_mode:
                # Kafka's followerReplicaOrThrow, before the read: a broker outside the
                # partition's replicas reads nothing and is told so (UNKNOWN_LEADER_EPOCH
                # when it names a leader epoch: not a known (replica, epoch) yet, it backs
                # off and retries; NOT_LEADER_OR_FOLLOWER without one)
                led = self._partitions.get((topic, partition))
                if led is None or params.replica_id not in led.remote_replicas:
                    return _error_read_result(
                        errors.UNKNOWN_LEADER_EPOCH
                        if info.current_leader_epoch != NO_PARTITION_LEADER_EPOCH
                        else errors.NOT_LEADER_OR_FOLLOWER,
                        "Replica %d is not recognized as a valid replica of %s-%d"
                        % (params.replica_id, topic, partition))
            # Offsets as of before the read (Kafka: appends racing the read don't matter).
            log_start, hw, lso = log_.fetch_offset_snapshot()
            if part is not None and part.is_leader:
                preferred = replica_selector.preferred_read_replica(
                    self.replica_selector, self.metadata, part, params.client_metadata, info.fetch_offset,
                    self.now_ms())
                if preferred >= 0:
                    return _new(FetchPartitionData, (errors.NONE, hw, lso, log_start, EMPTY_RECORDS, None,
                                                     None, preferred, None, UNKNOWN_OFFSET_METADATA, 0))
            # Kafka: a fetch offset below the log start is out of range whether or not the
            # epochs diverge (the read below says so)
            if info.last_fetched_epoch >= 0 and info.fetch_offset >= log_start:
                div = self.diverging_epoch(log_, info)
                if div is not None:
                    return _new(FetchPartitionData, (errors.NONE, hw, lso, log_start, EMPTY_RECORDS, None,
                                                     div, -1, None, UNKNOWN_OFFSET_METADATA, 0))
            max_bytes = info.max_bytes
            if limit_bytes < max_bytes:
                max_bytes = limit_bytes
            # Kafka's shouldLeaderThrottle: an out-of-sync follower of a throttled partition
            # gets nothing while the leader's replication quota is used up
            throttled = params.replica_id >= 0 and not self.leader_quota.unlimited \
                and self._leader_throttles(topic, partition, params.replica_id)
            if throttled and self.leader_quota.is_quota_exceeded():
                max_bytes = 0
            data = log_.read(info.fetch_offset, max_bytes, params.fetch_isolation,
                             min_one_message and max_bytes > 0)
            # (FetchDataInfo unpacked: one step for its four fields, each a named-tuple read)
            start, records, first_entry_incomplete, aborted = data
            if records is None:
                records, size = EMPTY_RECORDS, 0
            else:
                # (a FileRegion's count, not len(): its __len__ is a Python call)
                size = records.count if type(records) is FileRegion else len(records)
            if throttled:
                self.leader_quota.record(size)
            if not params.hard_max_bytes_limit and first_entry_incomplete:
                # v3+: a cut first batch is useless to the consumer; send nothing instead
                records, size = EMPTY_RECORDS, 0
                if aborted is not None:
                    aborted = []
            if params.replica_id >= 0 and self.cluster_mode:
                # Kafka's updateFollowerFetchState, after the read: the follower has everything
                # below its fetch offset (the HW answered is the one read before); ``led``,
                # the partition checked before the read (nothing runs in between)
                if not led.update_follower_fetch_state(
                        params.replica_id, info.fetch_offset, info.log_start_offset):
                    records, size, aborted = EMPTY_RECORDS, 0, None
            return _new(FetchPartitionData, (errors.NONE, hw, lso, log_start, records, aborted, None, -1,
                                             None, start, size))
        except KafkaError as e:
            return _error_read_result(e.code, e.message)
        except OSError as e:
            log.failure("I/O error reading {topic}-{partition}", topic=topic, partition=partition)
            return _error_read_result(errors.KAFKA_STORAGE_ERROR, str(e))
        except Exception as e:
            log.failure("Error reading {topic}-{partition}", topic=topic, partition=partition)
            return _error_read_result(errors.UNKNOWN_SERVER_ERROR, str(e))

    # -- list offsets ----------------------------------------------------------------------

    def fetch_offset_for_timestamp(self, tp, timestamp, isolation_level=None,
                                   current_leader_epoch=NO_PARTITION_LEADER_EPOCH,
                                   fetch_only_from_leader=True, topic_id=None):
        """ListOffsets for one partition ``tp`` = (topic, partition). ``isolation_level`` None
        means a replica asks (reads to the log end); 0/1 a consumer (to the HW / LSO).
        Returns a ListOffsetsPartitionResult (offset -1 when nothing matches); raises
        KafkaError for partition errors (unknown, not leader, fenced/unknown leader epoch)."""
        topic, partition = tp
        log_, error = self.get_partition_or_error(topic, partition, topic_id)
        if error == errors.NONE:
            error = self.check_leader_epoch(topic, partition, current_leader_epoch)
        if error != errors.NONE:
            raise KafkaError(error)
        if isolation_level is None:
            last_fetchable = log_.log_end_offset
        elif isolation_level == READ_COMMITTED:
            last_fetchable = log_.last_stable_offset
        else:
            last_fetchable = log_.high_watermark
        leader_epoch = self._leader_epoch(topic, partition)
        if leader_epoch is None:
            leader_epoch = -1
        if timestamp == LATEST_TIMESTAMP:
            return ListOffsetsPartitionResult(errors.NONE, -1, last_fetchable, leader_epoch)
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            timestamp = EARLIEST_TIMESTAMP
        found = log_.fetch_offset_by_timestamp(timestamp)
        if found is None:
            return ListOffsetsPartitionResult(errors.NONE)
        offset, ts, epoch = found
        if timestamp != EARLIEST_TIMESTAMP and offset >= last_fetchable:
            return ListOffsetsPartitionResult(errors.NONE)
        return ListOffsetsPartitionResult(errors.NONE, ts, offset, -1 if epoch is None else epoch)
