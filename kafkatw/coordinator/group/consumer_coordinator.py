"""KIP-848 consumer groups inside the group coordinator (Kafka's GroupMetadataManager for the
consumer protocol): ConsumerGroupHeartbeat (join, reconcile, leave, static members), the
session and revocation timers, target assignment by the server-side assignors, regex
subscriptions, records on ``__consumer_offsets`` and their replay at load, describe, and the
member-epoch checks of offset commits and fetches. Classic groups and the offsets themselves stay
with :class:`kafkatw.coordinator.group.coordinator.GroupCoordinator`, which owns this object.
"""

import uuid

import attr
import re2
from twisted.internet import defer
from twisted.logger import Logger

from kafkatw.coordinator.group import consumer_records as records
from kafkatw.coordinator.group.assignors import (
    ASSIGNORS,
    AssignmentMember,
    AssignmentTopic,
    assignors_from_config,
)
from kafkatw.coordinator.group.consumer_classic import ClassicMembers
from kafkatw.coordinator.group.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    UNREVOKED_PARTITIONS,
    ConsumerGroup,
    ConsumerGroupMember,
    is_subset,
    reconcile,
)
from kafkatw.protocol import errors

log = Logger()

# Kafka 4.0's default group.consumer.assignors, by class name (the only class names the
# config accepts)
KAFKA_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


@attr.s(slots=True)
class HeartbeatResult:
    error = attr.ib()
    message = attr.ib(default=None)
    member_id = attr.ib(default=None)
    member_epoch = attr.ib(default=0)
    heartbeat_interval_ms = attr.ib(default=0)
    assignment = attr.ib(default=None)  # {topic id: frozenset} or None (unchanged)


class HeartbeatError(Exception):
    def __init__(self, code, message=None):
        Exception.__init__(self, message)
        self.code = code
        self.message = message


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


def compile_regex(pattern):
    """Kafka's RE2/J ``Pattern.compile`` + ``matches()`` (the whole name must match)."""
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as e:
        raise HeartbeatError(errors.INVALID_REGULAR_EXPRESSION,
                             "SubscribedTopicRegex `%s` is not a valid regular expression: %s."
                             % (pattern, e))


def _config_get(config, name, default):
    value = None if config is None else config.get(name)
    return default if value is None else value


class ConsumerGroupCoordinator:
    def __init__(self, owner, config):
        self.owner = owner  # the GroupCoordinator: status checks, appends, clock, metadata
        self.clock = owner.clock
        c = lambda name, default: _config_get(config, name, default)  # noqa: E731
        self.session_timeout_ms = int(c("group.consumer.session.timeout.ms", 45000))
        self.heartbeat_interval_ms = int(c("group.consumer.heartbeat.interval.ms", 5000))
        self.max_size = int(c("group.consumer.max.size", 2 ** 31 - 1))
        self.assignors = assignors_from_config(
            [KAFKA_ASSIGNOR_CLASSES.get(n, n) for n in c("group.consumer.assignors", ["uniform", "range"])])
        self.enabled = "consumer" in c("group.coordinator.rebalance.protocols", ["classic", "consumer"])
        self.classic = ClassicMembers(self, c("group.consumer.migration.policy", "bidirectional"))
        self.groups = {}  # group id -> ConsumerGroup
        self._session_timers = {}  # (group id, member id) -> IDelayedCall
        self._revocation_timers = {}
        self.metadata_version = 0  # bumped on every topic change: regexes and metadata refresh

    # -- life cycle ------------------------------------------------------------------------
    def shutdown(self):
        for timers in (self._session_timers, self._revocation_timers):
            for call in timers.values():
                if call.active():
                    call.cancel()
            timers.clear()

    def unload(self, group_ids):
        """The coordinator resigned the groups' partition: they leave memory with their timers
        (members' next heartbeat gets NOT_COORDINATOR and finds the new coordinator). Returns
        how many were removed."""
        removed = 0
        for group_id in group_ids:
            group = self.groups.pop(group_id, None)
            if group is None:
                continue
            removed += 1
            for member_id in list(group.members):
                self._cancel_timers(group_id, member_id)
        return removed

    def on_topics_changed(self):
        self.metadata_version += 1

    def loaded(self, groups):
        """Install the groups replayed from a ``__consumer_offsets`` partition and start every
        member's session timer (Kafka does so at load: a member that never comes back leaves)."""
        for group in groups.values():
            if not group.members and group.group_epoch == 0:
                continue
            self.groups[group.group_id] = group
            group.metadata_version = -1
            for m in group.members.values():
                self._schedule_session(group, m.member_id)

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------
    def heartbeat(self, version, group_id, member_id, member_epoch, instance_id, rack_id,
                  rebalance_timeout_ms, subscribed_topic_names, subscribed_topic_regex,
                  server_assignor, owned, client_id, client_host, may_describe=None):
        """A Deferred of a :class:`HeartbeatResult`, fired once the records it wrote are on the
        log. ``owned``: {topic id: frozenset} the member reports owning, or None.
        ``may_describe(topic)``: with an authorizer, whether this member's principal may
        describe a topic; its regex then only brings in those (Kafka 4.0)."""
        try:
            if not self.enabled:
                raise HeartbeatError(errors.UNSUPPORTED_VERSION,
                                     "The consumer rebalance protocol is not enabled.")
            self._validate(version, group_id, member_id, member_epoch, instance_id, rack_id,
                           rebalance_timeout_ms, subscribed_topic_names, subscribed_topic_regex,
                           server_assignor, owned)
            error = self.owner.validate_group_status(group_id, "ConsumerGroupHeartbeat")
            if error is not None:
                raise HeartbeatError(error)
            if member_epoch == 0 and not member_id:
                member_id = str(uuid.uuid4())  # v0: the coordinator names the member
            if member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(group_id, member_id, member_epoch, instance_id)
            return self._heartbeat(group_id, member_id, member_epoch, instance_id, rack_id,
                                   rebalance_timeout_ms, subscribed_topic_names,
                                   subscribed_topic_regex, server_assignor, owned, client_id,
                                   client_host, may_describe)
        except HeartbeatError as e:
            return defer.succeed(HeartbeatResult(e.code, e.message, member_id or None, 0))

    def _validate(self, version, group_id, member_id, member_epoch, instance_id, rack_id,
                  rebalance_timeout_ms, names, regex, server_assignor, owned):
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        def invalid(message):
            raise HeartbeatError(errors.INVALID_REQUEST, message)

        if not group_id:
            invalid("GroupId can't be empty.")
        if instance_id == "":
            invalid("InstanceId can't be empty.")
        if rack_id == "":
            invalid("RackId can't be empty.")
        if version >= 1 and not member_id:
            invalid("MemberId can't be empty.")
        if member_epoch > 0:
            if not member_id:
                invalid("MemberId can't be empty.")
        elif member_epoch == 0:
            if rebalance_timeout_ms == -1:
                invalid("RebalanceTimeoutMs must be provided in first request.")
            if owned is None or any(owned.values()):
                invalid("TopicPartitions must be empty when (re-)joining.")
            if not names and not regex:
                invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if not member_id:
                invalid("MemberId can't be empty.")
        elif member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if not member_id:
                invalid("MemberId can't be empty.")
            if instance_id is None:
                invalid("InstanceId can't be null.")
        else:
            invalid("MemberEpoch is invalid.")
        if server_assignor is not None and server_assignor not in [a.name for a in self.assignors]:
            raise HeartbeatError(errors.UNSUPPORTED_ASSIGNOR,
                                 "ServerAssignor %s is not supported. Supported assignors: %s."
                                 % (server_assignor, ", ".join(a.name for a in self.assignors)))
        if regex:
            compile_regex(regex)

    def _get_or_create_group(self, group_id, create, entries):
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = self.owner.groups.get(group_id)
        if classic is not None and classic.members:
            if create and self.classic.can_upgrade(classic):
                group = self.groups[group_id] = self.classic.upgrade(classic, entries)
                return group
            raise HeartbeatError(errors.GROUP_ID_NOT_FOUND,
                                 "Group %s is not a consumer group" % group_id)
        if not create:
            raise HeartbeatError(errors.GROUP_ID_NOT_FOUND,
                                 "Consumer group %s not found." % group_id)
        if classic is not None:
            entries.extend(self.owner.convert_empty_classic_group(classic))
        group = self.groups[group_id] = ConsumerGroup(group_id)
        return group

    def _heartbeat(self, group_id, member_id, member_epoch, instance_id, rack_id,
                   rebalance_timeout_ms, names, regex, server_assignor, owned, client_id,
                   client_host, may_describe=None):
        entries = []
        group = self._get_or_create_group(group_id, member_epoch == 0, entries)
        member = group.members.get(member_id)
        new_member = member is None
        if instance_id is not None:
            member = self._static_member(group, member_id, member_epoch, instance_id, owned,
                                         entries)
            new_member = new_member and member_id not in group.members
        elif member is None:
            if member_epoch != 0:
                raise HeartbeatError(errors.UNKNOWN_MEMBER_ID,
                                     "Member %s is not a member of group %s." % (member_id, group_id))
            self._check_capacity(group)
            member = ConsumerGroupMember(member_id)
        else:
            self._check_epoch(member, member_epoch, owned)
        updated = member.copy(
            rack_id=rack_id if rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(rebalance_timeout_ms if rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            server_assignor=server_assignor if server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(sorted(names) if names is not None
                                    else member.subscribed_topic_names),
            subscribed_topic_regex=(regex or None) if regex is not None else member.subscribed_topic_regex,
            client_id=client_id, client_host=client_host)
        bump = new_member
        if _metadata_changed(member, updated) or new_member:
            entries.append(records.member_metadata_record(group_id, updated))
            if (updated.subscribed_topic_names != member.subscribed_topic_names
                    or updated.subscribed_topic_regex != member.subscribed_topic_regex
                    or updated.server_assignor != member.server_assignor):
                bump = True
        group.update_member(updated)
        changed = self._refresh_subscription(group, force=bump)
        if self._authorize_regex(group, member_id, may_describe):
            bump = True
            changed = self._update_subscription_metadata(group) or changed
        if changed:
            bump = True
            entries.append(records.partition_metadata_record(group))
        if bump:
            group.group_epoch += 1
            entries.append(records.group_epoch_record(group))
        self._schedule_session(group, member_id)
        if group.group_epoch > group.assignment_epoch:
            entries.extend(self._update_target(group))
        member = group.members[member_id]
        reconciled = reconcile(group, member, owned)
        if reconciled is not member:
            group.update_member(reconciled)
            entries.append(records.current_assignment_record(group_id, reconciled))
        self._schedule_revocation(group, reconciled)
        # Kafka's rule: the assignment goes to a full request (a join, or one carrying every
        # optional field) and whenever it changed
        full_request = member_epoch == 0 or (rebalance_timeout_ms != -1 and names is not None
                                             and owned is not None)
        send_assignment = full_request or reconciled.assigned != member.assigned
        result = HeartbeatResult(errors.NONE, None, member_id, reconciled.member_epoch,
                                 self.heartbeat_interval_ms,
                                 reconciled.assigned if send_assignment else None)
        return self._write(group_id, entries, result)

    def _check_epoch(self, member, epoch, owned):
        """Kafka's throwIfMemberEpochIsInvalid: a newer epoch than ours is a zombie; an older
        one is accepted only when our answer was lost and the member owns a subset of its
        assignment."""
        if epoch > member.member_epoch:
            raise HeartbeatError(errors.FENCED_MEMBER_EPOCH,
                                 "The consumer group member has a greater member epoch (%d) than "
                                 "the one known by the group coordinator (%d). The member must "
                                 "abandon all its partitions and rejoin."
                                 % (epoch, member.member_epoch))
        if epoch < member.member_epoch:
            if epoch != member.previous_member_epoch or owned is None \
                    or not is_subset(owned, member.assigned):
                raise HeartbeatError(errors.FENCED_MEMBER_EPOCH,
                                     "The consumer group member has a smaller member epoch (%d) "
                                     "than the one known by the group coordinator (%d). The "
                                     "member must abandon all its partitions and rejoin."
                                     % (epoch, member.member_epoch))

    def _check_capacity(self, group):
        """``group.consumer.max.size``: a new member (dynamic, or a static one not taking over
        an instance already in the group) is refused once the group is full."""
        if len(group.members) >= self.max_size:
            raise HeartbeatError(errors.GROUP_MAX_SIZE_REACHED,
                                 "The consumer group has reached its maximum capacity of %d members."
                                 % self.max_size)

    def _static_member(self, group, member_id, member_epoch, instance_id, owned, entries):
        existing = group.static_member(instance_id)
        if member_epoch == 0:
            if existing is None:
                member = group.members.get(member_id)
                if member is None:
                    self._check_capacity(group)
                    member = ConsumerGroupMember(member_id, instance_id=instance_id)
                return member
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise HeartbeatError(errors.UNRELEASED_INSTANCE_ID,
                                     "Static member %s with instance id %s cannot join the group "
                                     "because the instance id is owned by member %s."
                                     % (member_id, instance_id, existing.member_id))
            # the instance comes back under a new member id: it takes over the old assignment
            target = group.target.get(existing.member_id, {})
            self._cancel_timers(group.group_id, existing.member_id)
            group.remove_member(existing.member_id)
            entries.extend(records.member_tombstones(group.group_id, existing.member_id))
            replacement = existing.copy(member_id=member_id, member_epoch=0,
                                        previous_member_epoch=0)
            group.update_member(replacement)
            group.target[member_id] = target
            entries.append(records.target_member_record(group.group_id, member_id, target))
            entries.append(records.current_assignment_record(group.group_id, replacement))
            return replacement
        if existing is None:
            raise HeartbeatError(errors.UNKNOWN_MEMBER_ID,
                                 "Instance id %s is unknown." % instance_id)
        if existing.member_id != member_id:
            raise HeartbeatError(errors.FENCED_INSTANCE_ID,
                                 "Static member %s with instance id %s was fenced by member %s."
                                 % (member_id, instance_id, existing.member_id))
        self._check_epoch(existing, member_epoch, owned)
        return existing

    def _leave(self, group_id, member_id, member_epoch, instance_id):
        group = self.groups.get(group_id)
        if group is None:
            raise HeartbeatError(errors.GROUP_ID_NOT_FOUND, "Group %s not found." % group_id)
        member = group.members.get(member_id)
        if instance_id is not None:
            existing = group.static_member(instance_id)
            if existing is None:
                raise HeartbeatError(errors.UNKNOWN_MEMBER_ID,
                                     "Instance id %s is unknown." % instance_id)
            if existing.member_id != member_id:
                raise HeartbeatError(errors.FENCED_INSTANCE_ID,
                                     "Static member %s with instance id %s was fenced by member %s."
                                     % (member_id, instance_id, existing.member_id))
            member = existing
        if member is None:
            raise HeartbeatError(errors.UNKNOWN_MEMBER_ID,
                                 "Member %s is not a member of group %s." % (member_id, group_id))
        result = HeartbeatResult(errors.NONE, None, member_id, member_epoch,
                                 self.heartbeat_interval_ms)
        if member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # a static member away for a restart keeps its partitions until its session ends
            away = member.copy(member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                               previous_member_epoch=member.member_epoch)
            group.update_member(away)
            self._cancel_revocation(group_id, member_id)
            return self._write(group_id, [records.current_assignment_record(group_id, away)],
                               result)
        log.info("[GroupId {group}] Member {member} left the consumer group.", group=group_id,
                 member=member_id)
        return self._write(group_id, self._remove_member(group, member_id), result)

    def _remove_member(self, group, member_id):
        """Drop a member (left, fenced or expired): its records' tombstones, and a new group
        epoch so the others get its partitions; or the group turns classic when only classic
        members are left (online downgrade)."""
        self._cancel_timers(group.group_id, member_id)
        leaving = group.remove_member(member_id)
        entries = records.member_tombstones(group.group_id, member_id)
        downgraded = None if leaving is None else self.classic.maybe_downgrade(group, leaving)
        if downgraded is not None:
            return entries + downgraded
        self._refresh_subscription(group, force=True)
        group.group_epoch += 1
        entries.append(records.partition_metadata_record(group))
        entries.append(records.group_epoch_record(group))
        return entries

    def _write(self, group_id, entries, result):
        if not entries:
            return defer.succeed(result)
        d = self.owner.append_records(group_id, entries)

        def written(code):
            if code != errors.NONE:
                return HeartbeatResult(code, None, result.member_id, 0)
            return result

        return d.addCallback(written)

    # -- subscriptions and target assignment -----------------------------------------------
    def _refresh_subscription(self, group, force=False):
        """Recompute regex matches and the subscribed topics' metadata if a topic changed since
        (or ``force``); True if the metadata differs from before."""
        if not force and group.metadata_version == self.metadata_version:
            return False
        metadata = self.owner.metadata
        topics = {} if metadata is None else metadata.topics
        regexes = {m.subscribed_topic_regex for m in group.members.values() if m.subscribed_topic_regex}
        group.regex_topics = {}
        for regex in regexes:
            pattern = compile_regex(regex)
            group.regex_topics[regex] = frozenset(
                name for name, info in topics.items()
                if not info.is_internal and pattern.fullmatch(name))
        group.metadata_version = self.metadata_version
        return self._update_subscription_metadata(group)

    def _update_subscription_metadata(self, group):
        """The subscribed topics' ids and partition counts; True if they changed."""
        metadata = self.owner.metadata
        topics = {} if metadata is None else metadata.topics
        subscription = {}
        for name in group.subscribed_topic_names():
            info = topics.get(name)
            if info is not None:
                subscription[name] = (info.topic_id, info.num_partitions)
        if subscription == group.subscription_metadata:
            return False
        group.subscription_metadata = subscription
        return True

    def _authorize_regex(self, group, member_id, may_describe):
        """Narrow the member's regex matches to the topics its principal may describe; True if
        that changed what it subscribes to."""
        member = group.members[member_id]
        if may_describe is None or not member.subscribed_topic_regex:
            return False
        matches = group.regex_topics.get(member.subscribed_topic_regex, frozenset())
        allowed = frozenset(n for n in matches if may_describe(n))
        if allowed == member.authorized_topics:
            return False
        member.authorized_topics = allowed
        return True

    def regex_matches(self, group_id, member_id, regex):
        """The topics a heartbeat's regex (or the member's current one) matches now: what the
        authorization step plans DESCRIBE checks for."""
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        regex = regex or (member.subscribed_topic_regex if member is not None else None)
        if not regex:
            return []
        try:
            pattern = compile_regex(regex)
        except HeartbeatError:
            return []
        metadata = self.owner.metadata
        topics = {} if metadata is None else metadata.topics
        return [name for name, info in topics.items()
                if not info.is_internal and pattern.fullmatch(name)]

    def _choose_assignor(self, group):
        """The assignor most members asked for (``group.remote.assignor``), else the first
        of ``group.consumer.assignors``."""
        votes = {}
        for m in group.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if votes:
            name = max(sorted(votes), key=lambda n: votes[n])
            if name in ASSIGNORS:
                return ASSIGNORS[name]
        return self.assignors[0]

    def _update_target(self, group):
        """A new target assignment at the group epoch: records of the members whose target
        changed, then the assignment epoch."""
        assignor = self._choose_assignor(group)
        group.assignor_name = assignor.name
        racks = self._broker_racks()
        topics = {}
        for name, (tid, n) in group.subscription_metadata.items():
            topics[tid] = AssignmentTopic(tid, name, n, self._partition_racks(name, n, racks))
        members = [AssignmentMember(m.member_id,
                                    frozenset(group.subscription_metadata[n][0]
                                              for n in group.member_topics(m)
                                              if n in group.subscription_metadata),
                                    m.rack_id, group.target.get(m.member_id, {}))
                   for m in group.members.values()]
        new_target = assignor.assign(members, topics)
        entries = []
        for member_id, assignment in new_target.items():
            if group.target.get(member_id) != assignment:  # None for a member without one
                entries.append(records.target_member_record(group.group_id, member_id, assignment))
        group.target = dict(new_target)
        group.assignment_epoch = group.group_epoch
        entries.append(records.target_epoch_record(group))
        log.debug("[GroupId {group}] target assignment at epoch {epoch} by {assignor}",
                  group=group.group_id, epoch=group.assignment_epoch, assignor=assignor.name)
        return entries

    def _broker_racks(self):
        """{node id: rack} of the live brokers that have one."""
        metadata = self.owner.metadata
        if metadata is None:
            return {}
        return {b.node_id: b.rack for b in metadata.live_brokers() if b.rack}

    def _partition_racks(self, name, num_partitions, racks):
        """{partition: frozenset of the racks of its replicas} (what Kafka hands its assignors;
        in cluster mode the replicas are on other brokers); {} when no broker has a rack."""
        if not racks:
            return {}
        out = {}
        for p in range(num_partitions):
            state = self.owner.metadata.partition_state(name, p)
            if state is not None:
                out[p] = frozenset(racks[r] for r in state.replicas if r in racks)
        return out

    # -- timers ----------------------------------------------------------------------------
    def _schedule_session(self, group, member_id):
        key = (group.group_id, member_id)
        call = self._session_timers.get(key)
        member = group.members.get(member_id)
        timeout_ms = self.session_timeout_ms
        if member is not None and member.classic is not None:
            timeout_ms = member.classic[0]  # a classic member's own session timeout
        delay = timeout_ms / 1000.0
        if call is not None and call.active():
            call.reset(delay)
        else:
            self._session_timers[key] = self.clock.callLater(delay, self._expire, group.group_id,
                                                             member_id, "session")

    def _schedule_revocation(self, group, member):
        key = (group.group_id, member.member_id)
        if member.state != UNREVOKED_PARTITIONS:
            self._cancel_revocation(*key)
            return
        call = self._revocation_timers.get(key)
        if call is None or not call.active():
            timeout = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 \
                else self.session_timeout_ms
            self._revocation_timers[key] = self.clock.callLater(
                timeout / 1000.0, self._expire, group.group_id, member.member_id, "revocation")

    def _cancel_revocation(self, group_id, member_id):
        call = self._revocation_timers.pop((group_id, member_id), None)
        if call is not None and call.active():
            call.cancel()

    def _cancel_timers(self, group_id, member_id):
        self._cancel_revocation(group_id, member_id)
        call = self._session_timers.pop((group_id, member_id), None)
        if call is not None and call.active():
            call.cancel()

    def _expire(self, group_id, member_id, why):
        (self._session_timers if why == "session" else self._revocation_timers).pop(
            (group_id, member_id), None)
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return
        if why == "session":
            log.info("[GroupId {group}] Member {member} fenced from the group because its session "
                     "expired.", group=group_id, member=member_id)
        else:
            log.info("[GroupId {group}] Member {member} fenced from the group because it failed "
                     "to revoke partitions within its rebalance timeout.", group=group_id,
                     member=member_id)
        self.owner.append_records(group_id, self._remove_member(group, member_id))

    # -- offsets, describe, list, delete ---------------------------------------------------
    def validate_commit(self, group, member_id, member_epoch, api_version):
        """None or the error of an OffsetCommit to a consumer group (Kafka 4.0's
        ConsumerGroup.validateOffsetCommit)."""
        if member_epoch < 0 and not member_id:
            return None if group.is_empty() else errors.UNKNOWN_MEMBER_ID
        member = group.members.get(member_id)
        if member is not None and member.classic is not None:
            # a classic member commits with its generation, any version
            return None if member_epoch == member.member_epoch else errors.ILLEGAL_GENERATION
        if api_version is not None and api_version < 9:
            return errors.UNSUPPORTED_VERSION
        if member is None:
            return errors.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return errors.STALE_MEMBER_EPOCH
        return None

    def validate_txn_commit(self, group, member_id, member_epoch):
        """None or the error of a TxnOffsetCommit to a consumer group: a named member must be
        there at that epoch (ILLEGAL_GENERATION otherwise, as Kafka answers transactions)."""
        if not member_id:
            return None
        member = group.members.get(member_id)
        if member is None:
            return errors.UNKNOWN_MEMBER_ID
        if member_epoch >= 0 and member_epoch != member.member_epoch:
            return errors.ILLEGAL_GENERATION
        return None

    def validate_fetch(self, group, member_id, member_epoch):
        """None or the error of an OffsetFetch v9+ naming a member."""
        if member_id is None or member_epoch is None or member_epoch < 0:
            return None
        member = group.members.get(member_id)
        if member is None:
            return errors.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return errors.STALE_MEMBER_EPOCH
        return None

    def delete_group_entries(self, group):
        """Tombstones of an empty group being deleted or converted to a classic group."""
        self.groups.pop(group.group_id, None)
        return records.group_tombstones(group.group_id)

    def topic_name(self, topic_id):
        metadata = self.owner.metadata
        return None if metadata is None else metadata.topic_name(topic_id)

    def subscribed_topics(self, group):
        return set(group.subscription_metadata)


def _metadata_changed(old, new):
    return (old.rack_id != new.rack_id or old.rebalance_timeout_ms != new.rebalance_timeout_ms
            or old.server_assignor != new.server_assignor
            or old.subscribed_topic_names != new.subscribed_topic_names
            or old.subscribed_topic_regex != new.subscribed_topic_regex
            or old.client_id != new.client_id or old.client_host != new.client_host
            or old.instance_id != new.instance_id)
