"""The group coordinator (Kafka's GroupCoordinator + GroupMetadataManager for classic groups):
Join/Sync/Heartbeat/Leave, offset commit/fetch, describe/list/delete, the heartbeat, join and
sync timers in the purgatory, persistence on ``__consumer_offsets`` (appended through the
replica manager as an internal origin), loading at start-up and offset expiry. It answers with
result objects and error codes; request/response encoding belongs to the handlers.

Which partitions of ``__consumer_offsets`` it coordinates comes from
:class:`~kafkatw.coordinator.partition_ownership.PartitionOwnership` (single node: all of them;
cluster mode: those this broker leads, loaded on election and unloaded on resignation, Kafka's
onElection/onResignation). The topic is created lazily by the first FindCoordinator for a group
(as Kafka does); on a single node that is answered at once, since creation there is synchronous.
"""

import attr
from twisted.internet import defer, task
from twisted.logger import Logger

from kafkatw.background_failures import FailingTask
from kafkatw.crash_points import crash_point
from kafkatw.coordinator.group import consumer_records, offsets_log
from kafkatw.coordinator.group.consumer_coordinator import ConsumerGroupCoordinator
from kafkatw.coordinator.group.delayed import (
    DelayedHeartbeat,
    DelayedJoin,
    DelayedSync,
    GroupJoinKey,
    GroupSyncKey,
    InitialDelayedJoin,
    MemberKey,
)
from kafkatw.coordinator.group.group import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    UNKNOWN_MEMBER_ID,
    GroupMetadata,
    MemberMetadata,
    OffsetAndMetadata,
)
from kafkatw.coordinator.group.offsets_log import GROUP_METADATA_TOPIC_NAME
from kafkatw.coordinator.log_append import append_coordinator_batch
from kafkatw.coordinator.partition_ownership import PartitionOwnership
from kafkatw.protocol import errors
from kafkatw.purgatory import DelayedOperationPurgatory
from kafkatw.storage.offsets import ORIGIN_COORDINATOR

log = Logger()

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
NO_GENERATION = -1
INVALID_OFFSET = -1

# operations whose group id may be empty (Kafka's isValidGroupId)
_EMPTY_GROUP_ID_OK = frozenset(["OffsetCommit", "OffsetFetch", "DescribeGroups", "DeleteGroups",
                                "OffsetDelete"])


@attr.s(slots=True)
class JoinGroupResult:
    member_id = attr.ib()
    error = attr.ib()
    members = attr.ib(default=attr.Factory(list))  # [(member id, instance id, metadata)]
    generation_id = attr.ib(default=NO_GENERATION)
    protocol_type = attr.ib(default=None)
    protocol_name = attr.ib(default=None)
    leader_id = attr.ib(default="")
    skip_assignment = attr.ib(default=False)


@attr.s(slots=True)
class SyncGroupResult:
    error = attr.ib()
    protocol_type = attr.ib(default=None)
    protocol_name = attr.ib(default=None)
    assignment = attr.ib(default=b"")


@attr.s(slots=True)
class GroupSummary:
    state = attr.ib()
    protocol_type = attr.ib()
    protocol = attr.ib()
    members = attr.ib()  # [(member id, instance id, client id, client host, metadata, assignment)]


DEAD_GROUP = GroupSummary(DEAD, "", "", [])
EMPTY_GROUP = GroupSummary("", "", "", [])


def _config_get(config, name, default):
    """``name`` (Kafka's property name) from a KafkaConfig or a plain mapping, else ``default``."""
    value = None if config is None else config.get(name)
    return default if value is None else value


def _fenced(kind, member_id):
    if kind == "join":
        return JoinGroupResult(member_id, errors.FENCED_INSTANCE_ID)
    return SyncGroupResult(errors.FENCED_INSTANCE_ID)


def _apply_offset_record(offsets, removed_offsets, rec):
    k = (rec.group_id, rec.topic, rec.partition)
    if rec.value is None:
        offsets.get(rec.group_id, {}).pop((rec.topic, rec.partition), None)
        removed_offsets.add(k)
    else:
        offsets.setdefault(rec.group_id, {})[(rec.topic, rec.partition)] = rec.value
        removed_offsets.discard(k)


def _is_commit_marker(record):
    from kafkatw.protocol.records import InvalidRecordError, decode_control_record

    try:
        return decode_control_record(record).is_commit
    except InvalidRecordError:
        return False


class _UnstableOffset:
    """The offset of a partition an open transaction holds a newer offset of (OffsetFetch with
    require_stable): answered as UNSTABLE_OFFSET_COMMIT on that partition."""

    def __repr__(self):
        return "UNSTABLE_OFFSET"


UNSTABLE_OFFSET = _UnstableOffset()


class GroupCoordinator:
    """``replica_manager`` (an IReplicaManager) appends (``append_records(...,
    internal_topics_allowed=True)``), ``log_manager`` serves the load (ILog reads),
    ``metadata`` (an IClusterMetadata) knows and creates topics; ``clock`` is the reactor
    (``callLater``, ``seconds``)."""

    def __init__(self, config, metadata, replica_manager, log_manager, clock):
        self.config = config
        self.metadata = metadata
        self.replica_manager = replica_manager
        self.log_manager = log_manager
        self.clock = clock
        c = lambda name, default: _config_get(config, name, default)  # noqa: E731
        self.num_partitions = int(c("offsets.topic.num.partitions", 50))
        self.replication_factor = int(c("offsets.topic.replication.factor", 3))
        self.segment_bytes = int(c("offsets.topic.segment.bytes", 100 * 1024 * 1024))
        self.compression = int(c("offsets.topic.compression.codec", 0))
        self.load_buffer_size = int(c("offsets.load.buffer.size", 5 * 1024 * 1024))
        self.retention_ms = int(c("offsets.retention.minutes", 7 * 24 * 60)) * 60 * 1000
        self.retention_check_interval_ms = int(c("offsets.retention.check.interval.ms", 600000))
        self.max_metadata_size = int(c("offset.metadata.max.bytes", 4096))
        self.commit_timeout_ms = int(c("offsets.commit.timeout.ms", 5000))
        self.initial_rebalance_delay_ms = int(c("group.initial.rebalance.delay.ms", 3000))
        self.min_session_timeout_ms = int(c("group.min.session.timeout.ms", 6000))
        self.max_session_timeout_ms = int(c("group.max.session.timeout.ms", 1800000))
        self.max_size = int(c("group.max.size", 2 ** 31 - 1))
        purge = int(c("group.coordinator.purgatory.purge.interval.requests", 1000))
        self.heartbeat_purgatory = DelayedOperationPurgatory("Heartbeat", clock, purge)
        self.rebalance_purgatory = DelayedOperationPurgatory("Rebalance", clock, purge)
        self.groups = {}
        self.is_active = False
        self.owned_partitions = set()
        self.loading_partitions = set()
        self._expiry_loop = None
        self._load_call = None
        self._load_task = None
        self._load_partition_id = None  # the partition self._load_task loads
        # loading runs in slices of at most 10 ms (Twisted's default), the next one a reactor
        # turn later on ``clock``
        self._cooperator = task.Cooperator(scheduler=lambda step: clock.callLater(0, step))
        self._listening = False
        self.offsets_topic_creation = FailingTask("creating %s" % GROUP_METADATA_TOPIC_NAME,
                                                  clock)
        # KIP-848 consumer groups; their offsets live here, in a GroupMetadata without members
        self.consumer = ConsumerGroupCoordinator(self, config)
        self.ownership = PartitionOwnership(GROUP_METADATA_TOPIC_NAME, replica_manager, metadata,
                                            self.on_election, self.on_resignation)

    # -- life cycle ------------------------------------------------------------------------
    def now_ms(self):
        return int(self.clock.seconds() * 1000)

    def startup(self):
        """Become active and follow the ownership of ``__consumer_offsets``' partitions: each one
        elected is loaded, one after the other in slices (COORDINATOR_LOAD_IN_PROGRESS for its
        groups meanwhile); on a single node that is every existing partition."""
        self.is_active = True
        if self.metadata is not None and not self._listening:
            self.metadata.add_listener(self._on_topic_event)
            self._listening = True
        self.owned_partitions, self.loading_partitions = set(), set()  # elected anew below
        self.ownership.start()
        self._expiry_loop = task.LoopingCall(self.cleanup_group_metadata)
        self._expiry_loop.clock = self.clock
        self._expiry_loop.start(self.retention_check_interval_ms / 1000.0, now=False)

    def shutdown(self):
        self.is_active = False
        self.ownership.stop()
        if self._expiry_loop is not None and self._expiry_loop.running:
            self._expiry_loop.stop()
        if self._load_call is not None and self._load_call.active():
            self._load_call.cancel()
        if self._load_task is not None:
            task_, self._load_task = self._load_task, None
            task_.stop()
        self.heartbeat_purgatory.shutdown()
        self.rebalance_purgatory.shutdown()
        self.consumer.shutdown()
        if self._listening:
            self._listening = False
            self.metadata.remove_listener(self._on_topic_event)

    def _offsets_topic_exists(self):
        return self.metadata is not None and self.metadata.contains_topic(GROUP_METADATA_TOPIC_NAME)

    def partition_for(self, group_id):
        n = self.num_partitions
        if self._offsets_topic_exists():
            n = self.metadata.partition_count(GROUP_METADATA_TOPIC_NAME)
        return offsets_log.partition_for(group_id, n)

    def ensure_offsets_topic(self):
        """Create ``__consumer_offsets`` (compacted) if missing; returns an error code:
        COORDINATOR_NOT_AVAILABLE while the creation is being written, as Kafka answers
        FindCoordinator until the topic exists (clients retry). In cluster mode the replicas
        are ``offsets.topic.replication.factor`` live brokers; with fewer alive, Kafka's
        answer is COORDINATOR_NOT_AVAILABLE too (nothing is created)."""
        if self._offsets_topic_exists():
            return errors.NONE
        configs = {"cleanup.policy": "compact", "segment.bytes": str(self.segment_bytes),
                   "compression.type": "producer"}
        failing = self.offsets_topic_creation  # every client retries: logged quietly
        kwargs = {}
        if self.ownership.cluster_mode:
            alive = len(self.metadata.live_brokers())
            if alive < self.replication_factor:
                log.info("Number of alive brokers '{alive}' does not meet the required replication "
                         "factor '{rf}' for the offsets topic (configured via "
                         "'offsets.topic.replication.factor'). This error can be ignored if the "
                         "cluster is starting up and not all brokers are up yet.", alive=alive,
                         rf=self.replication_factor)
                return errors.COORDINATOR_NOT_AVAILABLE
        try:
            if self.ownership.cluster_mode:
                kwargs["assignment"] = self.metadata.assign_replicas(self.num_partitions,
                                                                     self.replication_factor)
            d = self.metadata.create_topic(GROUP_METADATA_TOPIC_NAME, self.num_partitions, configs,
                                           **kwargs)
        except Exception as e:
            if getattr(e, "code", None) == errors.TOPIC_ALREADY_EXISTS:
                return errors.COORDINATOR_NOT_AVAILABLE  # being created
            failing.failed()
            return errors.COORDINATOR_NOT_AVAILABLE

        def created(info):
            failing.succeeded()
            log.info("created {topic} with {n} partitions", topic=GROUP_METADATA_TOPIC_NAME,
                     n=info.num_partitions)

        def failed(f):
            if getattr(f.value, "code", None) == errors.TOPIC_ALREADY_EXISTS:
                return None  # another broker created it first
            failing.failed(f)

        d.addCallbacks(created, failed)
        return errors.NONE if self._offsets_topic_exists() else errors.COORDINATOR_NOT_AVAILABLE

    def _on_topic_event(self, event, info):
        from kafkatw.cluster.metadata import TOPIC_DELETED

        if info.name != GROUP_METADATA_TOPIC_NAME:
            self.consumer.on_topics_changed()
        if event == TOPIC_DELETED and info.name != GROUP_METADATA_TOPIC_NAME:
            self.handle_deleted_topic(info.name)

    # -- election, resignation, loading -----------------------------------------------------
    def on_election(self, partition, leader_epoch):
        """Kafka's onElection: this broker now coordinates ``partition``; its groups are loaded
        (COORDINATOR_LOAD_IN_PROGRESS meanwhile). A partition owned or loading already stays
        as it is (a newer leader epoch changes nothing for groups); an empty one is owned at
        once."""
        if not self.is_active or partition in self.owned_partitions \
                or partition in self.loading_partitions:
            return
        log_ = None if self.log_manager is None else \
            self.log_manager.get_log(GROUP_METADATA_TOPIC_NAME, partition)
        if log_ is None or log_.log_end_offset <= log_.log_start_offset:
            self.owned_partitions.add(partition)
            return
        self.loading_partitions.add(partition)
        self._schedule_load()

    def on_resignation(self, partition, leader_epoch):
        """Kafka's onResignation (removeGroupsForPartition): another broker coordinates
        ``partition`` now (or none); its groups leave memory, and members waiting in a
        Join/Sync get NOT_COORDINATOR so they find the new coordinator."""
        self.owned_partitions.discard(partition)
        self.loading_partitions.discard(partition)
        if self._load_task is not None and self._load_partition_id == partition:
            task_, self._load_task = self._load_task, None
            task_.stop()
            self._schedule_load()
        unloaded = 0
        for group_id in [g for g in self.groups if self.partition_for(g) == partition]:
            self._on_group_unloaded(self.groups.pop(group_id))
            unloaded += 1
        unloaded += self.consumer.unload(
            [g for g in self.consumer.groups if self.partition_for(g) == partition])
        log.info("Finished unloading {topic}-{p}: removed {n} groups", topic=GROUP_METADATA_TOPIC_NAME,
                 p=partition, n=unloaded)

    def _on_group_unloaded(self, group):
        """Kafka's onGroupUnloaded: the group is dead here; members waiting in a Join (while
        preparing a rebalance) or a Sync get NOT_COORDINATOR, heartbeat timers end."""
        previous = group.state
        group.transition_to(DEAD, self.now_ms())
        if previous == PREPARING_REBALANCE:
            for member in list(group.members.values()):
                group.maybe_invoke_join_callback(
                    member, JoinGroupResult(member.member_id, errors.NOT_COORDINATOR))
            self.rebalance_purgatory.check_and_complete(GroupJoinKey(group.group_id))
        elif previous in (STABLE, COMPLETING_REBALANCE):
            for member in list(group.members.values()):
                group.maybe_invoke_sync_callback(member, SyncGroupResult(errors.NOT_COORDINATOR))
        for member_id in list(group.members) + list(group.pending_members):
            self.heartbeat_purgatory.check_and_complete(MemberKey(group.group_id, member_id))
        self.rebalance_purgatory.check_and_complete(GroupSyncKey(group.group_id))

    def _schedule_load(self):
        if self._load_call is None and self._load_task is None and self.loading_partitions:
            self._load_call = self.clock.callLater(0, self._load_next)

    def _load_next(self):
        """Load the lowest partition still loading, in cooperative slices: a partition of tens
        of thousands of commits is seconds of decoding, and the reactor serves in between."""
        self._load_call = None
        if not self.loading_partitions or not self.is_active or self._load_task is not None:
            return
        p = min(self.loading_partitions)
        self._load_partition_id = p
        self._load_task = self._cooperator.cooperate(self._load_partition(p))
        d = self._load_task.whenDone()
        d.addCallbacks(lambda _: self._loaded(p), self._load_failed, errbackArgs=(p,))

    def _load_failed(self, failure, p):
        if failure.check(task.TaskStopped):
            return  # shut down or resigned mid-load: the partition stays unloaded
        log.failure("loading {topic}-{p} failed", failure, topic=GROUP_METADATA_TOPIC_NAME, p=p)
        self._loaded(p)

    def _loaded(self, p):
        self._load_task = None
        if p in self.loading_partitions:
            self.loading_partitions.discard(p)
            self.owned_partitions.add(p)
        if self.loading_partitions:
            self._schedule_load()
        else:
            log.info("loaded {n} groups from {topic}", n=len(self.groups),
                     topic=GROUP_METADATA_TOPIC_NAME)

    def _load_partition(self, partition):
        """Read one partition of ``__consumer_offsets`` and install its groups (Kafka's
        GroupMetadataManager.doLoadGroupsAndOffsets), yielding after every record and group
        so a cooperator can cut it into slices."""
        log_ = self.log_manager.get_log(GROUP_METADATA_TOPIC_NAME, partition)
        if log_ is None:
            return
        offsets = {}  # group -> {(topic, p): OffsetAndMetadata}
        removed_offsets = set()
        group_values = {}
        removed_groups = set()
        pending = {}  # producer id -> [OffsetRecord] of its open transaction
        consumer_groups = {}  # group id -> ConsumerGroup replayed from types 3-8
        for header, rec_ in offsets_log.iter_log_records(log_, log_.log_start_offset,
                                                         log_.log_end_offset, self.load_buffer_size,
                                                         with_batches=True):
            yield
            if header.is_control:
                records_ = pending.pop(header.producer_id, ())
                if _is_commit_marker(rec_):
                    for rec in records_:
                        _apply_offset_record(offsets, removed_offsets, rec)
                continue
            rec = offsets_log.decode_record(rec_.key, rec_.value)
            if rec is None:
                crec = consumer_records.decode(rec_.key, rec_.value)
                if crec is not None:
                    consumer_records.replay(consumer_groups, crec)
                continue
            if isinstance(rec, offsets_log.OffsetRecord):
                if header.is_transactional:
                    pending.setdefault(header.producer_id, []).append(rec)
                else:
                    _apply_offset_record(offsets, removed_offsets, rec)
            else:
                if rec.value is None:
                    group_values.pop(rec.group_id, None)
                    removed_groups.add(rec.group_id)
                else:
                    group_values[rec.group_id] = rec.value
                    removed_groups.discard(rec.group_id)
        pending_by_group = {}  # group -> {pid: {tp: om}}
        for pid, recs in pending.items():
            for rec in recs:
                if rec.value is not None:
                    pending_by_group.setdefault(rec.group_id, {}).setdefault(pid, {})[
                        (rec.topic, rec.partition)] = rec.value
        for group_id in set(pending_by_group) - set(group_values) - set(offsets):
            offsets[group_id] = {}
            group_values.setdefault(group_id, None)
        for group_id in (set(group_values) | set(g for g, o in offsets.items() if o)
                         | set(pending_by_group)):
            yield
            group = self._group_from_value(group_id, group_values.get(group_id))
            group.offsets.update(offsets.get(group_id, {}))
            group.pending_txn_offsets = pending_by_group.get(group_id, {})
            if group.is_(EMPTY) and not group.members and not group.offsets \
                    and not group.pending_txn_offsets and group_id not in group_values:
                continue
            self.groups[group_id] = group
            for member in group.members.values():
                self.complete_and_schedule_next_heartbeat_expiration(group, member)
        for group_id in removed_groups:
            if group_id not in group_values and not offsets.get(group_id):
                self.groups.pop(group_id, None)
        self.consumer.loaded(consumer_groups)

    def _group_from_value(self, group_id, value):
        if value is None:
            return GroupMetadata(group_id, EMPTY, self.now_ms())
        state = STABLE if value.members else EMPTY
        ts = value.current_state_timestamp
        group = GroupMetadata(group_id, state, ts if ts is not None and ts >= 0 else self.now_ms())
        group.protocol_type = value.protocol_type or None
        group.generation_id = value.generation
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        for m in value.members:
            member = MemberMetadata(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.rebalance_timeout if m.rebalance_timeout >= 0 else m.session_timeout,
                m.session_timeout, value.protocol_type, [(value.protocol, bytes(m.subscription))])
            member.assignment = bytes(m.assignment)
            group.add(member)
        if group.members:
            group.subscribed_topics = group.compute_subscribed_topics()
        return group

    # -- status ----------------------------------------------------------------------------
    def is_coordinator_load_in_progress(self, group_id):
        return self.partition_for(group_id) in self.loading_partitions

    def is_coordinator_for_group(self, group_id):
        return self.partition_for(group_id) in self.owned_partitions

    def validate_group_status(self, group_id, api):
        """None, or the error of Kafka's validateGroupStatus."""
        if group_id is None or (group_id == "" and api not in _EMPTY_GROUP_ID_OK):
            return errors.INVALID_GROUP_ID
        if not self.is_active:
            return errors.COORDINATOR_NOT_AVAILABLE
        if self.is_coordinator_load_in_progress(group_id):
            return errors.COORDINATOR_LOAD_IN_PROGRESS
        if not self.is_coordinator_for_group(group_id):
            return errors.NOT_COORDINATOR
        return None

    def is_loading(self):
        return bool(self.loading_partitions)

    # -- JoinGroup -------------------------------------------------------------------------
    def handle_join_group(self, group_id, member_id, group_instance_id, require_known_member_id,
                          support_skipping_assignment, client_id, client_host, rebalance_timeout_ms,
                          session_timeout_ms, protocol_type, protocols, reason=None):
        """A Deferred firing with a :class:`JoinGroupResult` (possibly after a rebalance)."""
        d = defer.Deferred()
        callback = d.callback
        error = self.validate_group_status(group_id, "JoinGroup")
        if error is not None:
            callback(JoinGroupResult(member_id, error))
            return d
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            callback(JoinGroupResult(member_id, errors.INVALID_SESSION_TIMEOUT))
            return d
        is_unknown_member = member_id == UNKNOWN_MEMBER_ID
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            if not consumer_group.is_empty():
                # a classic member in a consumer group (online migration)
                self.consumer.classic.join(
                    consumer_group, member_id, group_instance_id, require_known_member_id,
                    client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                    protocol_type, protocols).addCallback(
                        lambda r: callback(JoinGroupResult(
                            r[1], r[0], generation_id=r[2],
                            protocol_type="consumer" if r[0] == errors.NONE else None,
                            protocol_name=r[3])))
                return d
            # an empty consumer group becomes a classic group (Kafka's
            # maybeDeleteEmptyConsumerGroup); its committed offsets stay
            log.info("[GroupId {group}] Converted the empty consumer group to a classic group.",
                     group=group_id)
            self._append(group_id, self.consumer.delete_group_entries(consumer_group))
        group = self.groups.get(group_id)
        if group is None:
            if not is_unknown_member:
                callback(JoinGroupResult(member_id, errors.UNKNOWN_MEMBER_ID))
                return d
            group = self.groups[group_id] = GroupMetadata(group_id, EMPTY, self.now_ms())
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            callback(JoinGroupResult(UNKNOWN_MEMBER_ID, errors.GROUP_MAX_SIZE_REACHED))
        elif is_unknown_member:
            self._do_new_member_join_group(
                group, group_instance_id, require_known_member_id, support_skipping_assignment,
                client_id, client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type,
                protocols, callback, reason)
        else:
            self._do_current_member_join_group(
                group, member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                session_timeout_ms, protocol_type, protocols, callback, reason)
        if group.is_(PREPARING_REBALANCE):
            self.rebalance_purgatory.check_and_complete(GroupJoinKey(group.group_id))
        return d

    def _accept_joining_member(self, group, member_id):
        if group.state in (EMPTY, DEAD):
            return True
        if group.is_(PREPARING_REBALANCE):
            return ((group.has(member_id) and group.get(member_id).is_awaiting_join)
                    or group.num_members_awaiting_join < self.max_size)
        return group.has(member_id) or group.size() < self.max_size

    def _do_new_member_join_group(self, group, group_instance_id, require_known_member_id,
                                  support_skipping_assignment, client_id, client_host,
                                  rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                  callback, reason):
        if group.is_(DEAD):
            callback(JoinGroupResult(UNKNOWN_MEMBER_ID, errors.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            callback(JoinGroupResult(UNKNOWN_MEMBER_ID, errors.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_member_id = group.generate_member_id(client_id, group_instance_id)
        if group_instance_id is not None:
            old_member_id = group.current_static_member_id(group_instance_id)
            if old_member_id is not None:
                log.info("Static member with groupInstanceId={iid} and unknown member id joins group "
                         "{group} in {state} state. Replacing previously mapped member {old} with "
                         "this groupInstanceId.", iid=group_instance_id, group=group.group_id,
                         state=group.state, old=old_member_id)
                self._update_static_member_and_rebalance(
                    group, old_member_id, new_member_id, group_instance_id, protocols, callback,
                    reason, support_skipping_assignment)
            else:
                self._add_member_and_rebalance(
                    rebalance_timeout_ms, session_timeout_ms, new_member_id, group_instance_id,
                    client_id, client_host, protocol_type, protocols, group, callback, reason)
        elif require_known_member_id:
            # The member must come back with the id we hand out (KIP-394).
            group.add_pending_member(new_member_id)
            self._add_pending_member_expiration(group, new_member_id, session_timeout_ms)
            callback(JoinGroupResult(new_member_id, errors.MEMBER_ID_REQUIRED))
        else:
            self._add_member_and_rebalance(
                rebalance_timeout_ms, session_timeout_ms, new_member_id, None, client_id,
                client_host, protocol_type, protocols, group, callback, reason)

    def _do_current_member_join_group(self, group, member_id, group_instance_id, client_id,
                                      client_host, rebalance_timeout_ms, session_timeout_ms,
                                      protocol_type, protocols, callback, reason):
        if group.is_(DEAD):
            callback(JoinGroupResult(member_id, errors.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            callback(JoinGroupResult(member_id, errors.INCONSISTENT_GROUP_PROTOCOL))
            return
        if group.is_pending_member(member_id):
            self._add_member_and_rebalance(
                rebalance_timeout_ms, session_timeout_ms, member_id, None, client_id, client_host,
                protocol_type, protocols, group, callback, reason)
            return
        instance_not_found = (group_instance_id is not None
                              and not group.has_static_member(group_instance_id))
        if group.is_static_member_fenced(group_instance_id, member_id):
            callback(JoinGroupResult(member_id, errors.FENCED_INSTANCE_ID))
            return
        if not group.has(member_id) or instance_not_found:
            callback(JoinGroupResult(member_id, errors.UNKNOWN_MEMBER_ID))
            return
        member = group.get(member_id)
        state = group.state
        if state == PREPARING_REBALANCE:
            self._update_member_and_rebalance(
                group, member, protocols,
                "Member %s joining group during %s" % (member_id, state), callback)
        elif state == COMPLETING_REBALANCE:
            if member.matches(protocols):
                callback(self._join_result(group, member_id, include_members=True))
            else:
                self._update_member_and_rebalance(
                    group, member, protocols,
                    "Updating metadata for member %s during %s" % (member_id, state), callback)
        elif state == STABLE:
            if group.is_leader(member_id):
                self._update_member_and_rebalance(
                    group, member, protocols,
                    "Leader %s re-joining group during %s" % (member_id, state), callback)
            elif not member.matches(protocols):
                self._update_member_and_rebalance(
                    group, member, protocols,
                    "Updating metadata for member %s during %s" % (member_id, state), callback)
            else:
                callback(self._join_result(group, member_id, include_members=False))
        else:
            callback(JoinGroupResult(member_id, errors.UNKNOWN_MEMBER_ID))

    def _join_result(self, group, member_id, include_members, skip_assignment=False, leader=None):
        members = []
        if include_members and group.is_leader(member_id):
            members = group.current_member_metadata()
        return JoinGroupResult(
            member_id, errors.NONE, members, group.generation_id, group.protocol_type,
            group.protocol_name, group.leader_id if leader is None else leader, skip_assignment)

    def _add_member_and_rebalance(self, rebalance_timeout_ms, session_timeout_ms, member_id,
                                  group_instance_id, client_id, client_host, protocol_type,
                                  protocols, group, callback, reason):
        member = MemberMetadata(member_id, group_instance_id, client_id, client_host,
                                rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols)
        member.is_new = True
        if group.is_(PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, callback)
        # New members cannot heartbeat while their JoinGroup waits: time them out generously.
        self.complete_and_schedule_next_expiration(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self.maybe_prepare_rebalance(
            group, "Adding new member %s with group instance id %s; client reason: %s"
            % (member_id, group_instance_id, reason))

    def _update_member_and_rebalance(self, group, member, protocols, reason, callback):
        group.update_member(member, protocols, callback)
        self.maybe_prepare_rebalance(group, reason)

    def _update_static_member_and_rebalance(self, group, old_member_id, new_member_id,
                                            group_instance_id, protocols, callback, reason,
                                            support_skipping_assignment):
        current_leader = group.leader_id
        member = group.replace_static_member(group_instance_id, old_member_id, new_member_id, _fenced)
        # The old id's heartbeat expires without effect; schedule one for the new id.
        self.complete_and_schedule_next_heartbeat_expiration(group, member)
        old_protocols = list(member.supported_protocols)
        group.update_member(member, protocols, callback)
        state = group.state
        if state == STABLE:
            if group.protocol_name == group.select_protocol():
                assignment = {m.member_id: m.assignment for m in group.members.values()}

                def stored(error):
                    if error != errors.NONE:
                        group.update_member(member, old_protocols, None)
                        old = group.replace_static_member(group_instance_id, new_member_id,
                                                          old_member_id, _fenced)
                        self.complete_and_schedule_next_heartbeat_expiration(group, old)
                        callback(JoinGroupResult(UNKNOWN_MEMBER_ID, error, [], group.generation_id,
                                                 group.protocol_type, group.protocol_name,
                                                 current_leader))
                    elif support_skipping_assignment:
                        # JoinGroup v9+: the static leader learns it leads, but skips assigning.
                        is_leader = group.is_leader(new_member_id)
                        group.maybe_invoke_join_callback(member, self._join_result(
                            group, new_member_id, include_members=True, skip_assignment=is_leader))
                    else:
                        # Older clients: hand back the old leader id so this member doesn't
                        # run an assignment a stable group would ignore.
                        group.maybe_invoke_join_callback(member, self._join_result(
                            group, new_member_id, include_members=False, leader=current_leader))

                self.store_group(group, assignment, stored)
            else:
                self.maybe_prepare_rebalance(
                    group, "Group's selectedProtocol will change because static member %s with "
                    "instance id %s joined with change of protocol" % (new_member_id, group_instance_id))
        elif state == COMPLETING_REBALANCE:
            self.prepare_rebalance(
                group, "Updating metadata for static member %s with instance id %s"
                % (new_member_id, group_instance_id))

    # -- rebalance -------------------------------------------------------------------------
    def maybe_prepare_rebalance(self, group, reason):
        if group.can_rebalance():
            self.prepare_rebalance(group, reason)

    def prepare_rebalance(self, group, reason):
        if group.is_(COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, errors.REBALANCE_IN_PROGRESS)
        group.pending_sync_members = set()
        if group.is_(EMPTY):
            delayed = InitialDelayedJoin(
                self, self.rebalance_purgatory, group, self.initial_rebalance_delay_ms,
                self.initial_rebalance_delay_ms,
                max(group.rebalance_timeout_ms() - self.initial_rebalance_delay_ms, 0))
        else:
            delayed = DelayedJoin(self, group, group.rebalance_timeout_ms())
        old_state = group.state
        group.transition_to(PREPARING_REBALANCE, self.now_ms())
        log.info("Preparing to rebalance group {group} in state {state} with old generation {gen} "
                 "({topic}-{p}) (reason: {reason})", group=group.group_id, state=old_state,
                 gen=group.generation_id, topic=GROUP_METADATA_TOPIC_NAME,
                 p=self.partition_for(group.group_id), reason=reason)
        self.rebalance_purgatory.try_complete_else_watch(delayed, [GroupJoinKey(group.group_id)])

    def try_complete_join(self, group, force_complete):
        if group.is_(DEAD) or group.has_all_members_joined():
            return force_complete()
        return False

    def on_complete_join(self, group):
        # Dynamic members that did not rejoin are gone; static ones keep their place.
        for member in list(group.not_yet_rejoined_members()):
            if not member.is_static_member:
                self._remove_heartbeat_for_leaving_member(group, member)
                group.remove(member.member_id)
        if group.is_(DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait again until session timeouts clear the silent members.
            log.error("Group {group} could not complete rebalance because no members rejoined",
                      group=group.group_id)
            self.rebalance_purgatory.try_complete_else_watch(
                DelayedJoin(self, group, group.rebalance_timeout_ms()), [GroupJoinKey(group.group_id)])
            return
        group.init_next_generation(self.now_ms())
        if group.is_(EMPTY):
            log.info("Group {group} with generation {gen} is now empty", group=group.group_id,
                     gen=group.generation_id)

            def stored(error):
                if error != errors.NONE:
                    log.warn("Failed to write empty metadata for group {group}: {err}",
                             group=group.group_id, err=errors.error_name(error))

            self.store_group(group, {}, stored)
        else:
            log.info("Stabilized group {group} generation {gen} with {n} members",
                     group=group.group_id, gen=group.generation_id, n=group.size())
            for member in list(group.members.values()):
                group.maybe_invoke_join_callback(
                    member, self._join_result(group, member.member_id, include_members=True))
                self.complete_and_schedule_next_heartbeat_expiration(group, member)
                member.is_new = False
            self._schedule_pending_sync(group)

    def _schedule_pending_sync(self, group):
        group.pending_sync_members = set(group.members)
        self.rebalance_purgatory.try_complete_else_watch(
            DelayedSync(self, group, group.generation_id, group.rebalance_timeout_ms()),
            [GroupSyncKey(group.group_id)])

    def try_complete_pending_sync(self, group, generation_id, force_complete):
        if generation_id != group.generation_id or group.state in (DEAD, EMPTY, PREPARING_REBALANCE):
            return force_complete()
        if group.has_received_sync_from_all_members():
            return force_complete()
        return False

    def on_expire_pending_sync(self, group, generation_id):
        if generation_id != group.generation_id:
            return
        if group.state in (COMPLETING_REBALANCE, STABLE) and not group.has_received_sync_from_all_members():
            pending = sorted(group.pending_sync_members)
            for member_id in pending:
                member = group.members.get(member_id)
                group.remove(member_id)
                if member is not None:
                    self._remove_heartbeat_for_leaving_member(group, member)
            self.prepare_rebalance(group, "Removing %s on pending sync request expiration" % pending)

    def _remove_pending_sync_member(self, group, member_id):
        group.pending_sync_members.discard(member_id)
        self.rebalance_purgatory.check_and_complete(GroupSyncKey(group.group_id))

    def _reset_and_propagate_assignment_error(self, group, error):
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group, error):
        ptype, pname = (group.protocol_type, group.protocol_name) if error == errors.NONE else (None, None)
        for member in list(group.members.values()):
            if group.maybe_invoke_sync_callback(member, SyncGroupResult(error, ptype, pname,
                                                                        member.assignment)):
                self.complete_and_schedule_next_heartbeat_expiration(group, member)

    def _set_and_propagate_assignment(self, group, assignment):
        for member in group.members.values():
            member.assignment = bytes(assignment.get(member.member_id, b""))
        self._propagate_assignment(group, errors.NONE)

    # -- heartbeats ------------------------------------------------------------------------
    def complete_and_schedule_next_heartbeat_expiration(self, group, member):
        self.complete_and_schedule_next_expiration(group, member, member.session_timeout_ms)

    def complete_and_schedule_next_expiration(self, group, member, timeout_ms):
        key = MemberKey(group.group_id, member.member_id)
        member.heartbeat_satisfied = True
        self.heartbeat_purgatory.check_and_complete(key)
        member.heartbeat_satisfied = False
        self.heartbeat_purgatory.try_complete_else_watch(
            DelayedHeartbeat(self, group, member.member_id, False, timeout_ms), [key])

    def _add_pending_member_expiration(self, group, member_id, timeout_ms):
        self.heartbeat_purgatory.try_complete_else_watch(
            DelayedHeartbeat(self, group, member_id, True, timeout_ms),
            [MemberKey(group.group_id, member_id)])

    def _remove_heartbeat_for_leaving_member(self, group, member):
        member.is_leaving = True
        self.heartbeat_purgatory.check_and_complete(MemberKey(group.group_id, member.member_id))

    def try_complete_heartbeat(self, group, member_id, is_pending, force_complete):
        if group.is_(DEAD):
            return force_complete()  # unloaded (or deleted): nothing to expire
        if is_pending:
            # A pending member's expectation ends once it joined (or left).
            if group.has(member_id) or not group.is_pending_member(member_id):
                return force_complete()
            return False
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return force_complete()
        return False

    def on_expire_heartbeat(self, group, member_id, is_pending):
        if group.is_(DEAD):
            return
        if is_pending:
            if group.is_pending_member(member_id):
                log.info("Pending member {member} in group {group} has been removed after session "
                         "timeout expiration.", member=member_id, group=group.group_id)
                self._remove_pending_member_and_update_group(group, member_id)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("Member {member} in group {group} has failed, removing it from the group",
                 member=member_id, group=group.group_id)
        self._remove_member_and_update_group(
            group, member, "removing member %s on heartbeat expiration" % member_id)

    def _remove_member_and_update_group(self, group, member, reason):
        # A new member timing out while its JoinGroup waits gets UNKNOWN_MEMBER_ID and retries.
        group.maybe_invoke_join_callback(member, JoinGroupResult(UNKNOWN_MEMBER_ID, errors.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance(group, reason)
        elif group.is_(PREPARING_REBALANCE):
            self.rebalance_purgatory.check_and_complete(GroupJoinKey(group.group_id))

    def _remove_pending_member_and_update_group(self, group, member_id):
        group.remove(member_id)
        if group.is_(PREPARING_REBALANCE):
            self.rebalance_purgatory.check_and_complete(GroupJoinKey(group.group_id))

    def _remove_current_member_from_group(self, group, member_id, reason):
        member = group.get(member_id)
        self._remove_member_and_update_group(group, member, reason)
        self._remove_heartbeat_for_leaving_member(group, member)

    # -- SyncGroup -------------------------------------------------------------------------
    def handle_sync_group(self, group_id, generation_id, member_id, protocol_type, protocol_name,
                          group_instance_id, group_assignment):
        """A Deferred firing with a :class:`SyncGroupResult` (the leader's assignment)."""
        d = defer.Deferred()
        callback = d.callback
        error = self.validate_group_status(group_id, "SyncGroup")
        if error == errors.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance state is lost with the load: start over at JoinGroup.
            callback(SyncGroupResult(errors.REBALANCE_IN_PROGRESS))
            return d
        if error is not None:
            callback(SyncGroupResult(error))
            return d
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            code, name, assignment = self.consumer.classic.sync(
                consumer_group, generation_id, member_id, protocol_type, protocol_name,
                group_instance_id)
            callback(SyncGroupResult(code, "consumer" if code == errors.NONE else None,
                                     name, assignment))
            return d
        group = self.groups.get(group_id)
        if group is None:
            callback(SyncGroupResult(errors.UNKNOWN_MEMBER_ID))
            return d
        self._do_sync_group(group, generation_id, member_id, protocol_type, protocol_name,
                            group_instance_id, group_assignment, callback)
        return d

    def _do_sync_group(self, group, generation_id, member_id, protocol_type, protocol_name,
                       group_instance_id, group_assignment, callback):
        if group.is_(DEAD):
            callback(SyncGroupResult(errors.COORDINATOR_NOT_AVAILABLE))
        elif group.is_static_member_fenced(group_instance_id, member_id):
            callback(SyncGroupResult(errors.FENCED_INSTANCE_ID))
        elif not group.has(member_id):
            callback(SyncGroupResult(errors.UNKNOWN_MEMBER_ID))
        elif generation_id != group.generation_id:
            callback(SyncGroupResult(errors.ILLEGAL_GENERATION))
        elif protocol_type is not None and group.protocol_type != protocol_type:
            callback(SyncGroupResult(errors.INCONSISTENT_GROUP_PROTOCOL))
        elif protocol_name is not None and group.protocol_name != protocol_name:
            callback(SyncGroupResult(errors.INCONSISTENT_GROUP_PROTOCOL))
        elif group.is_(EMPTY):
            callback(SyncGroupResult(errors.UNKNOWN_MEMBER_ID))
        elif group.is_(PREPARING_REBALANCE):
            callback(SyncGroupResult(errors.REBALANCE_IN_PROGRESS))
        elif group.is_(COMPLETING_REBALANCE):
            group.get(member_id).awaiting_sync_callback = callback
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                log.info("Assignment received from leader {member} for group {group} for generation "
                         "{gen}. The group has {n} members, {s} of which are static.",
                         member=member_id, group=group.group_id, gen=group.generation_id,
                         n=group.size(), s=len(group.static_members))
                assignment = {m: bytes(a) for m, a in group_assignment.items() if group.has(m)}
                for m in group.members:
                    assignment.setdefault(m, b"")
                generation = group.generation_id

                def stored(error):
                    if group.is_(COMPLETING_REBALANCE) and generation == group.generation_id:
                        if error != errors.NONE:
                            self._reset_and_propagate_assignment_error(group, error)
                            self.maybe_prepare_rebalance(
                                group, "Error when storing group assignment during SyncGroup "
                                "(member: %s)" % member_id)
                        else:
                            self._set_and_propagate_assignment(group, assignment)
                            group.transition_to(STABLE, self.now_ms())

                self.store_group(group, assignment, stored)
        else:  # STABLE
            self._remove_pending_sync_member(group, member_id)
            member = group.get(member_id)
            callback(SyncGroupResult(errors.NONE, group.protocol_type, group.protocol_name,
                                     member.assignment))
            self.complete_and_schedule_next_heartbeat_expiration(group, member)

    # -- Heartbeat / LeaveGroup ------------------------------------------------------------
    def handle_heartbeat(self, group_id, member_id, group_instance_id, generation_id):
        """An error code."""
        error = self.validate_group_status(group_id, "Heartbeat")
        if error == errors.COORDINATOR_LOAD_IN_PROGRESS:
            return errors.NONE  # the group is still loading: answer blindly
        if error is not None:
            return error
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            return self.consumer.classic.heartbeat(consumer_group, member_id, group_instance_id,
                                                   generation_id)
        group = self.groups.get(group_id)
        if group is None:
            return errors.UNKNOWN_MEMBER_ID
        if group.is_(DEAD):
            return errors.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(group_instance_id, member_id):
            return errors.FENCED_INSTANCE_ID
        if not group.has(member_id):
            return errors.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return errors.ILLEGAL_GENERATION
        if group.is_(EMPTY):
            return errors.UNKNOWN_MEMBER_ID
        self.complete_and_schedule_next_heartbeat_expiration(group, group.get(member_id))
        if group.is_(PREPARING_REBALANCE):
            return errors.REBALANCE_IN_PROGRESS
        return errors.NONE

    def handle_leave_group(self, group_id, leaving_members):
        """``leaving_members``: [(member id, instance id, reason)]; returns
        (top-level error, [(member id, instance id, error)])."""
        error = self.validate_group_status(group_id, "LeaveGroup")
        if error is not None:
            return error, []
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            return self.consumer.classic.leave(consumer_group, leaving_members)
        group = self.groups.get(group_id)
        if group is None:
            return errors.NONE, [(m, i, errors.UNKNOWN_MEMBER_ID) for m, i, _ in leaving_members]
        if group.is_(DEAD):
            return errors.COORDINATOR_NOT_AVAILABLE, []
        results = []
        for member_id, instance_id, reason in leaving_members:
            why = "Removing member %s on LeaveGroup; client reason: %s" % (member_id, reason)
            if member_id == UNKNOWN_MEMBER_ID:
                current = group.current_static_member_id(instance_id) if instance_id is not None else None
                if current is not None:
                    self._remove_current_member_from_group(group, current, why)
                    code = errors.NONE
                else:
                    code = errors.UNKNOWN_MEMBER_ID
            elif group.is_pending_member(member_id):
                self._remove_pending_member_and_update_group(group, member_id)
                self.heartbeat_purgatory.check_and_complete(MemberKey(group.group_id, member_id))
                code = errors.NONE
            elif group.is_static_member_fenced(instance_id, member_id):
                code = errors.FENCED_INSTANCE_ID
            elif group.has(member_id):
                self._remove_current_member_from_group(group, member_id, why)
                code = errors.NONE
            else:
                code = errors.UNKNOWN_MEMBER_ID
            results.append((member_id, instance_id, code))
        return errors.NONE, results

    # -- offsets ---------------------------------------------------------------------------
    def handle_commit_offsets(self, group_id, member_id, group_instance_id, generation_id,
                              offsets, retention_time_ms=-1, api_version=None):
        """``offsets``: {(topic, partition): (offset, leader_epoch, metadata)}; a Deferred of
        {(topic, partition): error code}. For a consumer group ``generation_id`` is the member
        epoch (OffsetCommit v9+)."""
        error = self.validate_group_status(group_id, "OffsetCommit")
        if error is not None:
            return defer.succeed({tp: error for tp in offsets})
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            error = self.consumer.validate_commit(consumer_group, member_id, generation_id,
                                                  api_version)
            if error is not None:
                return defer.succeed({tp: error for tp in offsets})
            group = self.groups.get(group_id)
            if group is None:
                group = GroupMetadata(group_id, EMPTY, self.now_ms())
            return self.store_offsets(group, offsets, retention_time_ms)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id < 0:
                # Not using Kafka's group management: a simple commit creates the group.
                group = self.groups[group_id] = GroupMetadata(group_id, EMPTY, self.now_ms())
            else:
                return defer.succeed({tp: errors.ILLEGAL_GENERATION for tp in offsets})
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
        if error is not None:
            return defer.succeed({tp: error for tp in offsets})
        if group.is_(COMPLETING_REBALANCE):
            return defer.succeed({tp: errors.REBALANCE_IN_PROGRESS for tp in offsets})
        if group.has(member_id):
            self.complete_and_schedule_next_heartbeat_expiration(group, group.get(member_id))
        return self.store_offsets(group, offsets, retention_time_ms)

    def _validate_offset_commit(self, group, generation_id, member_id, group_instance_id):
        if group.is_(DEAD):
            return errors.COORDINATOR_NOT_AVAILABLE
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            if group_instance_id is not None:
                current = group.current_static_member_id(group_instance_id)
                if current is None:
                    return errors.UNKNOWN_MEMBER_ID
                if current != member_id:
                    return errors.FENCED_INSTANCE_ID
            elif not group.has(member_id):
                return errors.UNKNOWN_MEMBER_ID
            if generation_id != group.generation_id:
                return errors.ILLEGAL_GENERATION
            return None
        if not group.is_(EMPTY):
            # Only members may commit to a non-empty group.
            return errors.UNKNOWN_MEMBER_ID
        return None

    def store_offsets(self, group, offsets, retention_time_ms=-1):
        now = self.now_ms()
        results = {}
        to_store = {}
        for tp, (offset, leader_epoch, metadata) in offsets.items():
            if metadata is not None and len(metadata.encode("utf-8")) > self.max_metadata_size:
                results[tp] = errors.OFFSET_METADATA_TOO_LARGE
                continue
            expire = now + retention_time_ms if retention_time_ms is not None and retention_time_ms >= 0 else None
            to_store[tp] = OffsetAndMetadata(offset, leader_epoch if leader_epoch is not None else -1,
                                             metadata or "", now, expire)
        if not to_store:
            return defer.succeed(results)
        entries = [(offsets_log.offset_commit_key(group.group_id, t, p), offsets_log.offset_commit_value(om))
                   for (t, p), om in to_store.items()]
        d = self._append(group.group_id, entries)

        def appended(code):
            crash_point("offsets.commit.after_append")
            if code == errors.NONE and not group.is_(DEAD):
                group.offsets.update(to_store)
                if self.groups.get(group.group_id) is not group:
                    self.groups.setdefault(group.group_id, group)
            for tp in to_store:
                results[tp] = code
            return results

        return d.addCallback(appended)

    def handle_txn_commit_offsets(self, group_id, producer_id, producer_epoch, member_id,
                                  group_instance_id, generation_id, offsets):
        """TxnOffsetCommit: ``offsets`` as for :meth:`handle_commit_offsets`, written in a
        transactional batch of the producer and visible once its transaction commits (Kafka's
        doTxnCommitOffsets). A Deferred of {(topic, partition): error code}."""
        error = self.validate_group_status(group_id, "TxnOffsetCommit")
        if error is not None:
            return defer.succeed({tp: error for tp in offsets})
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = GroupMetadata(group_id, EMPTY, self.now_ms())
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            error = self.consumer.validate_txn_commit(consumer_group, member_id, generation_id)
        elif group.is_(DEAD):
            error = errors.COORDINATOR_NOT_AVAILABLE
        elif member_id not in (None, UNKNOWN_MEMBER_ID) and not group.has(member_id):
            error = errors.UNKNOWN_MEMBER_ID
        elif group_instance_id is not None and \
                group.current_static_member_id(group_instance_id) not in (None, member_id):
            error = errors.FENCED_INSTANCE_ID
        elif generation_id >= 0 and generation_id != group.generation_id:
            error = errors.ILLEGAL_GENERATION
        if error is not None:
            return defer.succeed({tp: error for tp in offsets})
        now = self.now_ms()
        results = {}
        to_store = {}
        for tp, (offset, leader_epoch, metadata) in offsets.items():
            if metadata is not None and len(metadata.encode("utf-8")) > self.max_metadata_size:
                results[tp] = errors.OFFSET_METADATA_TOO_LARGE
                continue
            to_store[tp] = OffsetAndMetadata(offset, leader_epoch if leader_epoch is not None else -1,
                                             metadata or "", now, None)
        if not to_store:
            return defer.succeed(results)
        entries = [(offsets_log.offset_commit_key(group_id, t, p), offsets_log.offset_commit_value(om))
                   for (t, p), om in to_store.items()]
        d = self._append(group_id, entries, producer_id, producer_epoch)

        def appended(code):
            if code == errors.NONE and not group.is_(DEAD):
                group.pending_txn_offsets.setdefault(producer_id, {}).update(to_store)
            for tp in to_store:
                results[tp] = code
            return results

        return d.addCallback(appended)

    def handle_txn_completion(self, producer_id, offsets_partitions, commit):
        """A marker of ``producer_id`` landed in these ``__consumer_offsets`` partitions: its
        pending offsets there become the group's offsets (commit) or are dropped (abort)."""
        partitions = set(offsets_partitions)
        for group in list(self.groups.values()):
            if producer_id not in group.pending_txn_offsets:
                continue
            if self.partition_for(group.group_id) not in partitions:
                continue
            pending = group.pending_txn_offsets.pop(producer_id)
            if commit and not group.is_(DEAD):
                group.offsets.update(pending)

    def handle_fetch_offsets(self, group_id, partitions=None, require_stable=False,
                             member_id=None, member_epoch=None):
        """(error, {(topic, partition): OffsetAndMetadata or None}); ``partitions`` None = all
        (the committed ones). ``require_stable`` (KIP-447): a partition a transaction holds an
        offset of maps to UNSTABLE_OFFSET, which the answer gives as that partition's
        UNSTABLE_OFFSET_COMMIT, the group's error staying NONE as Kafka's (librdkafka retries
        the partition; an error for the whole group it returns to the application).
        ``member_id``/``member_epoch`` (v9+) are checked against a consumer group's member."""
        error = self.validate_group_status(group_id, "OffsetFetch")
        if error is not None:
            return error, {}
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            error = self.consumer.validate_fetch(consumer_group, member_id, member_epoch)
            if error is not None:
                return error, {}
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return errors.NONE, {tp: None for tp in (partitions or [])}
        if partitions is None:
            offsets = dict(group.offsets)
        else:
            offsets = {tp: group.offsets.get(tp) for tp in partitions}
        if require_stable:
            for pending in group.pending_txn_offsets.values():
                for tp in pending:
                    if tp in offsets:
                        offsets[tp] = UNSTABLE_OFFSET
        return errors.NONE, offsets

    def handle_deleted_topic(self, topic):
        """Drop every group's offsets of a deleted topic and write their tombstones."""
        for group in list(self.groups.values()):
            gone = [tp for tp in group.offsets if tp[0] == topic]
            if gone:
                group.remove_offsets(gone)
                self._append(group.group_id,
                             [(offsets_log.offset_commit_key(group.group_id, t, p), None) for t, p in gone])

    # -- describe / list / delete ----------------------------------------------------------
    def handle_describe_group(self, group_id):
        error = self.validate_group_status(group_id, "DescribeGroups")
        if error is not None:
            return error, EMPTY_GROUP
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            members = [(m.member_id, m.instance_id, m.client_id, m.client_host)
                       + self.consumer.classic.describe_member(consumer_group, m)
                       for m in consumer_group.members.values()]
            return errors.NONE, GroupSummary(consumer_group.state, "consumer",
                                             consumer_group.assignor_name, members)
        group = self.groups.get(group_id)
        if group is None:
            return errors.NONE, DEAD_GROUP
        if group.is_(STABLE):
            members = [(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                        m.metadata(group.protocol_name), m.assignment) for m in group.members.values()]
            return errors.NONE, GroupSummary(group.state, group.protocol_type or "",
                                             group.protocol_name, members)
        members = [(m.member_id, m.group_instance_id, m.client_id, m.client_host, b"", b"")
                   for m in group.members.values()]
        return errors.NONE, GroupSummary(group.state, group.protocol_type or "", "", members)

    def handle_list_groups(self, states_filter=(), types_filter=()):
        """(error, [(group id, protocol type, state, type)])."""
        if not self.is_active:
            return errors.COORDINATOR_NOT_AVAILABLE, []
        error = errors.COORDINATOR_LOAD_IN_PROGRESS if self.is_loading() else errors.NONE
        states = set(s.lower() for s in states_filter or ())
        types = set(t.lower() for t in types_filter or ())
        out = []
        consumer_groups = self.consumer.groups
        for group in self.groups.values():
            if group.is_(DEAD) or group.group_id in consumer_groups:
                continue
            if states and group.state.lower() not in states:
                continue
            if types and "classic" not in types:
                continue
            out.append((group.group_id, group.protocol_type or "", group.state, "classic"))
        for group in consumer_groups.values():
            if states and group.state.lower() not in states:
                continue
            if types and "consumer" not in types:
                continue
            out.append((group.group_id, "consumer", group.state, "consumer"))
        return error, out

    def handle_delete_groups(self, group_ids):
        """A Deferred of {group id: error code}."""
        results = {}
        eligible = []
        for group_id in group_ids:
            error = self.validate_group_status(group_id, "DeleteGroups")
            if error is not None:
                results[group_id] = error
                continue
            consumer_group = self.consumer.groups.get(group_id)
            if consumer_group is not None:
                if not consumer_group.is_empty():
                    results[group_id] = errors.NON_EMPTY_GROUP
                    continue
                entries = self.consumer.delete_group_entries(consumer_group)
                shell = self.groups.pop(group_id, None)
                if shell is not None:
                    entries = [(offsets_log.offset_commit_key(group_id, t, p), None)
                               for t, p in shell.offsets] + entries
                    shell.offsets.clear()
                    shell.transition_to(DEAD, self.now_ms())
                results[group_id] = errors.NONE
                self._append(group_id, entries)
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_(DEAD):
                results[group_id] = errors.GROUP_ID_NOT_FOUND
            elif group.is_(EMPTY):
                group.transition_to(DEAD, self.now_ms())
                eligible.append(group)
            else:
                results[group_id] = errors.NON_EMPTY_GROUP
        ds = []
        for group in eligible:
            entries = [(offsets_log.offset_commit_key(group.group_id, t, p), None)
                       for t, p in group.offsets]
            entries.append((offsets_log.group_metadata_key(group.group_id), None))
            group.offsets.clear()
            if self.groups.get(group.group_id) is group:
                del self.groups[group.group_id]
            d = self._append(group.group_id, entries)
            d.addCallback(lambda code, gid=group.group_id: results.__setitem__(gid, errors.NONE))
            ds.append(d)
        return defer.gatherResults(ds).addCallback(lambda _: results)

    def handle_delete_offsets(self, group_id, partitions):
        """A Deferred of (group error, {(topic, partition): error})."""
        error = self.validate_group_status(group_id, "OffsetDelete")
        if error is not None:
            return defer.succeed((error, {}))
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return defer.succeed((errors.GROUP_ID_NOT_FOUND, {}))
        partition_errors = {}
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None and not consumer_group.is_empty():
            subscribed = self.consumer.subscribed_topics(consumer_group)
            eligible = []
            for tp in partitions:
                if tp[0] in subscribed:
                    partition_errors[tp] = errors.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    eligible.append(tp)
        elif group.is_(EMPTY):
            eligible = list(partitions)
        elif group.is_consumer_group():
            eligible = []
            for tp in partitions:
                if group.is_subscribed_to_topic(tp[0]):
                    partition_errors[tp] = errors.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    eligible.append(tp)
        else:
            return defer.succeed((errors.NON_EMPTY_GROUP, {}))
        if not eligible:
            return defer.succeed((errors.NONE, partition_errors))
        removed = group.remove_offsets(eligible)
        for tp in eligible:
            partition_errors[tp] = errors.NONE
        if not removed:
            return defer.succeed((errors.NONE, partition_errors))
        entries = [(offsets_log.offset_commit_key(group_id, t, p), None) for t, p in removed]
        return self._append(group_id, entries).addCallback(lambda _: (errors.NONE, partition_errors))

    # -- expiry ----------------------------------------------------------------------------
    def cleanup_group_metadata(self):
        """Expire offsets past ``offsets.retention.minutes`` (Kafka 2.1+ rules: an empty group's
        offsets age from when it became empty, a standalone group's from each commit, an active
        consumer group's only for topics it no longer subscribes to); drop groups left empty."""
        if not self.is_active:
            return 0
        now = self.now_ms()
        total = 0
        for group in list(self.groups.values()):
            if self.is_coordinator_load_in_progress(group.group_id):
                continue
            expired = self._expired_offsets(group, now)
            entries = [(offsets_log.offset_commit_key(group.group_id, t, p), None) for t, p in expired]
            group.remove_offsets(expired)
            if group.is_(EMPTY) and not group.has_offsets():
                group.transition_to(DEAD, now)
                del self.groups[group.group_id]
                consumer_group = self.consumer.groups.get(group.group_id)
                if consumer_group is None:
                    entries.append((offsets_log.group_metadata_key(group.group_id), None))
                elif consumer_group.is_empty():
                    entries.extend(self.consumer.delete_group_entries(consumer_group))
            if entries:
                total += len(expired)
                self._append(group.group_id, entries)
        for group in list(self.consumer.groups.values()):
            # an empty consumer group without offsets goes as Kafka's cleanupGroupMetadata does
            if group.is_empty() and group.group_id not in self.groups \
                    and not self.is_coordinator_load_in_progress(group.group_id):
                self._append(group.group_id, self.consumer.delete_group_entries(group))
        if total:
            log.info("Removed {n} expired offsets", n=total)
        return total

    def _expired_offsets(self, group, now):
        def is_expired(om, base):
            if om.expire_timestamp is not None:
                return now >= om.expire_timestamp
            return now - base >= self.retention_ms

        consumer_group = self.consumer.groups.get(group.group_id)
        if consumer_group is not None and not consumer_group.is_empty():
            subscribed = self.consumer.subscribed_topics(consumer_group)
            return [tp for tp, om in group.offsets.items()
                    if tp[0] not in subscribed and is_expired(om, om.commit_timestamp)]
        if group.protocol_type is not None and group.is_(EMPTY):
            return [tp for tp, om in group.offsets.items()
                    if is_expired(om, group.current_state_timestamp)]
        if group.protocol_type is None:
            return [tp for tp, om in group.offsets.items() if is_expired(om, om.commit_timestamp)]
        if group.is_consumer_group() and group.subscribed_topics is not None:
            return [tp for tp, om in group.offsets.items()
                    if tp[0] not in group.subscribed_topics and is_expired(om, om.commit_timestamp)]
        return []

    # -- persistence -----------------------------------------------------------------------
    def store_group(self, group, assignment, callback):
        """Append the GroupMetadata record; ``callback(error)`` when it is written."""
        entries = [(offsets_log.group_metadata_key(group.group_id),
                    offsets_log.group_metadata_value(group, assignment))]
        self._append(group.group_id, entries).addCallback(callback)

    def append_records(self, group_id, entries):
        """Append a group's records (the consumer groups' too); a Deferred of an error code."""
        return self._append(group_id, entries)

    def take_over_classic_group(self, group, entries):
        """Online upgrade: ``group``'s members move to a consumer group. Their parked Join/Sync
        answer REBALANCE_IN_PROGRESS, their heartbeat timers end, the classic record gets a
        tombstone (into ``entries``); the offsets stay. Returns the members."""
        members = list(group.members.values())
        for member in members:
            group.maybe_invoke_join_callback(
                member, JoinGroupResult(member.member_id, errors.REBALANCE_IN_PROGRESS))
            group.maybe_invoke_sync_callback(member, SyncGroupResult(errors.REBALANCE_IN_PROGRESS))
            self._remove_heartbeat_for_leaving_member(group, member)
            group.remove(member.member_id)
        group.transition_to(DEAD, self.now_ms())
        shell = GroupMetadata(group.group_id, EMPTY, self.now_ms())
        shell.offsets = group.offsets
        shell.pending_txn_offsets = group.pending_txn_offsets
        if self.groups.get(group.group_id) is group:
            if shell.offsets or shell.pending_txn_offsets:
                self.groups[group.group_id] = shell
            else:
                del self.groups[group.group_id]
        entries.append((offsets_log.group_metadata_key(group.group_id), None))
        return members

    def install_downgraded_group(self, group, assignments, entries):
        """Online downgrade: ``group`` (built from the consumer group's classic members)
        replaces it, keeping its offsets; written after ``entries`` (the consumer group's
        tombstones), then rebalanced so every member rejoins."""
        shell = self.groups.get(group.group_id)
        if shell is not None:
            group.offsets = shell.offsets
            group.pending_txn_offsets = shell.pending_txn_offsets
        self.groups[group.group_id] = group
        self._append(group.group_id, list(entries))
        del entries[:]
        self.store_group(group, assignments, lambda error: None)
        for member in group.members.values():
            self.complete_and_schedule_next_heartbeat_expiration(group, member)
        self.prepare_rebalance(group, "Downgrade group %s from consumer to classic." % group.group_id)

    def convert_empty_classic_group(self, group):
        """An empty classic group becomes a consumer group (Kafka's
        maybeDeleteEmptyClassicGroup): its GroupMetadata record is deleted, its committed
        offsets stay. Returns the records to write."""
        log.info("[GroupId {group}] Converted the empty classic group to a consumer group.",
                 group=group.group_id)
        group.protocol_type = None
        group.protocol_name = None
        group.generation_id = 0
        group.leader_id = None
        if not group.offsets:
            self.groups.pop(group.group_id, None)
        return [(offsets_log.group_metadata_key(group.group_id), None)]

    def _append(self, group_id, entries, producer_id=-1, producer_epoch=-1):
        """Append ``entries`` to the group's partition (a transactional batch of
        ``producer_id`` for TxnOffsetCommit); a Deferred of an error code."""
        tp = (GROUP_METADATA_TOPIC_NAME, self.partition_for(group_id))
        batch = bytearray(offsets_log.build_records_batch(entries, self.now_ms(), self.compression,
                                                          producer_id, producer_epoch))
        kwargs = {}
        if producer_id >= 0:
            kwargs["origin"] = ORIGIN_COORDINATOR
        return append_coordinator_batch(self.replica_manager, tp, batch, self.commit_timeout_ms, **kwargs)
