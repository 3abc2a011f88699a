"""Online migration between classic and consumer groups (Kafka 4.0's
``group.consumer.migration.policy``): a classic group with members becomes a consumer group when a
KIP-848 member joins (upgrade), classic members keep working in it through JoinGroup, SyncGroup,
Heartbeat and LeaveGroup, and it turns classic again when its last KIP-848 member leaves
(downgrade). The embedded ConsumerProtocol subscription and assignment are read and written here;
the epochs and reconciliation stay with ``consumer_coordinator``, classic rebalances with the
classic coordinator.
"""

import struct
import uuid

from twisted.internet import defer
from twisted.logger import Logger

from kafkatw.coordinator.group import consumer_records as records
from kafkatw.coordinator.group.consumer_group import (
    MEMBER_STABLE,
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    ConsumerGroup,
    ConsumerGroupMember,
    reconcile,
)
from kafkatw.coordinator.group.group import STABLE, GroupMetadata, MemberMetadata
from kafkatw.protocol import errors
from kafkatw.protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription

log = Logger()

CONSUMER_PROTOCOL_TYPE = "consumer"
_I16 = struct.Struct(">h")
_MAX_VERSION = 3


class ClassicError(Exception):
    def __init__(self, code):
        Exception.__init__(self, errors.error_name(code))
        self.code = code


def decode_subscription(data):
    """(topic names, {topic: set(owned partitions)}, rack) of a ConsumerProtocolSubscription."""
    data = bytes(data)
    (version,) = _I16.unpack_from(data, 0)
    sub = ConsumerProtocolSubscription.decode(data[2:], min(max(version, 0), _MAX_VERSION))
    owned = {}
    for tp in sub.owned_partitions or ():
        owned.setdefault(tp.topic, set()).update(tp.partitions)
    return list(sub.topics or ()), owned, sub.rack_id


def decode_assignment(data):
    """{topic: set(partitions)} of a ConsumerProtocolAssignment (empty bytes: nothing)."""
    data = bytes(data or b"")
    if len(data) < 2:
        return {}
    (version,) = _I16.unpack_from(data, 0)
    a = ConsumerProtocolAssignment.decode(data[2:], min(max(version, 0), _MAX_VERSION))
    out = {}
    for tp in a.assigned_partitions or ():
        out.setdefault(tp.topic, set()).update(tp.partitions)
    return out


def encode_assignment(by_name, version):
    version = min(max(version, 0), _MAX_VERSION)
    TP = ConsumerProtocolAssignment.TopicPartition
    body = ConsumerProtocolAssignment(assigned_partitions=[
        TP(topic=t, partitions=sorted(ps)) for t, ps in sorted(by_name.items()) if ps])
    return _I16.pack(version) + body.encode_bytes(version)


def encode_subscription(topics, version=0):
    version = min(max(version, 0), _MAX_VERSION)
    return _I16.pack(version) + ConsumerProtocolSubscription(
        topics=sorted(topics), owned_partitions=[]).encode_bytes(version)


def _protocol_version(protocols):
    data = bytes(protocols[0][1])
    return _I16.unpack_from(data, 0)[0] if len(data) >= 2 else 0


class ClassicMembers:
    """The classic side of a consumer group, for ``ConsumerGroupCoordinator`` (``cgc``)."""

    def __init__(self, cgc, policy):
        self.cgc = cgc
        policy = (policy or "bidirectional").lower()
        self.upgrade_enabled = policy in ("upgrade", "bidirectional")
        self.downgrade_enabled = policy in ("downgrade", "bidirectional")

    # -- names <-> ids ---------------------------------------------------------------------
    def _by_id(self, by_name):
        metadata = self.cgc.owner.metadata
        out = {}
        for name, ps in by_name.items():
            info = None if metadata is None else metadata.get_topic(name)
            if info is not None and ps:
                out[info.topic_id] = frozenset(ps)
        return out

    def _by_name(self, by_id):
        out = {}
        for tid, ps in by_id.items():
            name = self.cgc.topic_name(tid)
            if name is not None:
                out[name] = set(ps)
        return out

    # -- upgrade ---------------------------------------------------------------------------
    def can_upgrade(self, classic):
        return (self.upgrade_enabled and classic.protocol_type == CONSUMER_PROTOCOL_TYPE
                and len(classic.members) <= self.cgc.max_size)

    def upgrade(self, classic, entries):
        """A ConsumerGroup holding ``classic``'s members at its generation (Kafka's
        ConsumerGroup.fromClassicGroup); their records go to ``entries``."""
        generation = classic.generation_id
        members = self.cgc.owner.take_over_classic_group(classic, entries)
        group = ConsumerGroup(classic.group_id)
        group.group_epoch = group.assignment_epoch = generation
        for m in members:
            try:
                topics, _, rack = decode_subscription(m.metadata(classic.protocol_name))
                assigned = self._by_id(decode_assignment(m.assignment))
            except Exception:
                log.warn("[GroupId {group}] cannot read member {member}'s embedded consumer "
                         "protocol; it rejoins without partitions", group=classic.group_id,
                         member=m.member_id)
                topics, rack, assigned = [], None, {}
            member = ConsumerGroupMember(
                m.member_id, instance_id=m.group_instance_id, rack_id=rack,
                client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=sorted(topics),
                rebalance_timeout_ms=m.rebalance_timeout_ms, member_epoch=generation,
                previous_member_epoch=generation, state=MEMBER_STABLE, assigned=assigned,
                classic=(m.session_timeout_ms, tuple((n, bytes(meta)) for n, meta in m.supported_protocols)))
            group.update_member(member)
            group.target[member.member_id] = assigned
        self.cgc._refresh_subscription(group, force=True)
        for member in group.members.values():
            entries.append(records.member_metadata_record(group.group_id, member))
            entries.append(records.target_member_record(group.group_id, member.member_id, member.assigned))
            entries.append(records.current_assignment_record(group.group_id, member))
        entries.extend([records.partition_metadata_record(group), records.target_epoch_record(group),
                        records.group_epoch_record(group)])
        for member in group.members.values():
            self.cgc._schedule_session(group, member.member_id)
        log.info("[GroupId {group}] Upgraded the classic group with {n} members to a consumer group.",
                 group=group.group_id, n=len(group.members))
        return group

    # -- downgrade -------------------------------------------------------------------------
    def maybe_downgrade(self, group, leaving_member):
        """After ``leaving_member`` (a KIP-848 member) left: if only classic members remain and
        the policy allows, the group turns classic (Kafka's convertToClassicGroup). Returns the
        records of the consumer group to delete, or None."""
        if leaving_member.classic is not None or not group.members \
                or not group.all_classic_except(None) or not self.downgrade_enabled:
            return None
        entries = []
        for member_id in list(group.members):
            entries.extend(records.member_tombstones(group.group_id, member_id))
            self.cgc._cancel_timers(group.group_id, member_id)
        entries.extend(self.cgc.delete_group_entries(group))
        classic = GroupMetadata(group.group_id, STABLE, self.cgc.owner.now_ms())
        classic.protocol_type = CONSUMER_PROTOCOL_TYPE
        classic.generation_id = group.group_epoch
        assignments = {}
        for m in group.members.values():
            session_timeout, protocols = m.classic
            member = MemberMetadata(m.member_id, m.instance_id, m.client_id, m.client_host,
                                    m.rebalance_timeout_ms if m.rebalance_timeout_ms > 0 else session_timeout,
                                    session_timeout, CONSUMER_PROTOCOL_TYPE, list(protocols))
            member.assignment = encode_assignment(self._by_name(m.assigned), _protocol_version(protocols))
            assignments[m.member_id] = member.assignment
            classic.add(member)
        classic.protocol_name = classic.select_protocol()
        classic.subscribed_topics = classic.compute_subscribed_topics()
        log.info("[GroupId {group}] Downgraded the consumer group to a classic group with {n} "
                 "members.", group=group.group_id, n=len(classic.members))
        self.cgc.owner.install_downgraded_group(classic, assignments, entries)
        return entries

    def describe_member(self, group, m):
        """(subscription bytes, assignment bytes) of a member as DescribeGroups shows it: a
        classic member's own subscription, else one built from its topic names; the current
        assignment in the ConsumerProtocol format."""
        if m.classic is not None:
            protocols = m.classic[1]
            return bytes(protocols[0][1]), encode_assignment(self._by_name(m.assigned),
                                                             _protocol_version(protocols))
        return (encode_subscription(group.member_topics(m)),
                encode_assignment(self._by_name(m.assigned), 0))

    # -- the classic APIs on a consumer group ----------------------------------------------
    def join(self, group, member_id, instance_id, require_known_member_id, client_id, client_host,
             rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols):
        """A Deferred of (error, member id, generation, protocol name) (Kafka's
        classicGroupJoinToConsumerGroup): the member is reconciled at once; its SyncGroup
        gets the assignment."""
        cgc = self.cgc
        if protocol_type != CONSUMER_PROTOCOL_TYPE or not protocols:
            return defer.succeed((errors.INCONSISTENT_GROUP_PROTOCOL, member_id, -1, None))
        unknown = not member_id
        if unknown:
            member_id = str(uuid.uuid4())
        if member_id not in group.members and len(group.members) >= cgc.max_size:
            return defer.succeed((errors.GROUP_MAX_SIZE_REACHED, member_id, -1, None))
        if require_known_member_id and unknown and instance_id is None:
            return defer.succeed((errors.MEMBER_ID_REQUIRED, member_id, -1, None))
        try:
            topics, owned, rack = decode_subscription(protocols[0][1])
        except Exception:
            return defer.succeed((errors.INCONSISTENT_GROUP_PROTOCOL, member_id, -1, None))
        entries = []
        member = group.members.get(member_id)
        if instance_id is not None:
            existing = group.static_member(instance_id)
            if existing is not None and existing.member_id != member_id:
                if not unknown:
                    return defer.succeed((errors.FENCED_INSTANCE_ID, member_id, -1, None))
                cgc._cancel_timers(group.group_id, existing.member_id)
                target = group.target.get(existing.member_id, {})
                group.remove_member(existing.member_id)
                entries.extend(records.member_tombstones(group.group_id, existing.member_id))
                member = existing.copy(member_id=member_id, member_epoch=0, previous_member_epoch=0)
                group.update_member(member)
                group.target[member_id] = target
                entries.append(records.target_member_record(group.group_id, member_id, target))
        new_member = member is None
        if member is None:
            member = ConsumerGroupMember(member_id, instance_id=instance_id)
        updated = member.copy(
            instance_id=instance_id, rack_id=rack if rack is not None else member.rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms, server_assignor=None,
            subscribed_topic_names=sorted(topics), client_id=client_id, client_host=client_host,
            classic=(session_timeout_ms, tuple((n, bytes(meta)) for n, meta in protocols)))
        bump = new_member or updated.subscribed_topic_names != member.subscribed_topic_names
        if bump or updated != member:
            entries.append(records.member_metadata_record(group.group_id, updated))
        group.update_member(updated)
        if cgc._refresh_subscription(group, force=bump):
            bump = True
            entries.append(records.partition_metadata_record(group))
        if bump:
            group.group_epoch += 1
            entries.append(records.group_epoch_record(group))
        if group.group_epoch > group.assignment_epoch:
            entries.extend(cgc._update_target(group))
        current = group.members[member_id]
        reconciled = reconcile(group, current, self._by_id(owned))
        if reconciled is not current:
            group.update_member(reconciled)
            entries.append(records.current_assignment_record(group.group_id, reconciled))
        cgc._schedule_session(group, member_id)
        cgc._schedule_revocation(group, reconciled)
        result = (errors.NONE, member_id, reconciled.member_epoch, protocols[0][0])
        return cgc.owner.append_records(group.group_id, entries).addCallback(
            lambda code: result if code == errors.NONE else (code, member_id, -1, None))

    def _member(self, group, member_id, instance_id):
        if instance_id is not None:
            member = group.static_member(instance_id)
            if member is None:
                raise ClassicError(errors.UNKNOWN_MEMBER_ID)
            if member.member_id != member_id:
                raise ClassicError(errors.FENCED_INSTANCE_ID)
        else:
            member = group.members.get(member_id)
            if member is None:
                raise ClassicError(errors.UNKNOWN_MEMBER_ID)
        if member.classic is None:
            raise ClassicError(errors.UNKNOWN_MEMBER_ID)  # a KIP-848 member: not via classic APIs
        return member

    def sync(self, group, generation_id, member_id, protocol_type, protocol_name, instance_id):
        """(error, protocol name, assignment bytes) (Kafka's classicGroupSyncToConsumerGroup)."""
        try:
            member = self._member(group, member_id, instance_id)
        except ClassicError as e:
            return e.code, None, b""
        if generation_id != member.member_epoch:
            return errors.ILLEGAL_GENERATION, None, b""
        protocols = member.classic[1]
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or \
                (protocol_name is not None and protocol_name != protocols[0][0]):
            return errors.INCONSISTENT_GROUP_PROTOCOL, None, b""
        if group.group_epoch > member.member_epoch and member.state != UNREVOKED_PARTITIONS:
            return errors.REBALANCE_IN_PROGRESS, None, b""
        self.cgc._schedule_session(group, member_id)
        return (errors.NONE, protocols[0][0],
                encode_assignment(self._by_name(member.assigned), _protocol_version(protocols)))

    def heartbeat(self, group, member_id, instance_id, generation_id):
        """An error code (Kafka's classicGroupHeartbeatToConsumerGroup): REBALANCE_IN_PROGRESS
        asks the member to rejoin when its epoch is behind, it must revoke, or what it waits
        for was released."""
        try:
            member = self._member(group, member_id, instance_id)
        except ClassicError as e:
            return e.code
        if generation_id != member.member_epoch:
            return errors.ILLEGAL_GENERATION
        self.cgc._schedule_session(group, member_id)
        if member.member_epoch < group.group_epoch or member.state == UNREVOKED_PARTITIONS:
            return errors.REBALANCE_IN_PROGRESS
        if member.state == UNRELEASED_PARTITIONS:
            target = group.target.get(member_id, {})
            for t, ps in target.items():
                if any(group.owner_of(t, p) is None for p in ps - member.assigned.get(t, frozenset())):
                    return errors.REBALANCE_IN_PROGRESS
        return errors.NONE

    def leave(self, group, leaving):
        """(top error, [(member id, instance id, error)]) for LeaveGroup v3+ members."""
        results = []
        for member_id, instance_id, _ in leaving:
            try:
                if not member_id and instance_id is not None:
                    member = group.static_member(instance_id)
                    if member is None:
                        raise ClassicError(errors.UNKNOWN_MEMBER_ID)
                else:
                    member = self._member(group, member_id, instance_id)
            except ClassicError as e:
                results.append((member_id, instance_id, e.code))
                continue
            self.cgc.owner.append_records(group.group_id,
                                          self.cgc._remove_member(group, member.member_id))
            results.append((member_id, instance_id, errors.NONE))
        return errors.NONE, results
