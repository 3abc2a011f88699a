"""The ``__consumer_offsets`` records of KIP-848 consumer groups (Kafka's record types 3-8:
ConsumerGroupMetadata, PartitionMetadata, MemberMetadata, TargetAssignmentMetadata,
TargetAssignmentMember, CurrentMemberAssignment), built from and replayed into
``consumer_group`` objects. The key's int16 prefix is the record type; values are version 0.
It keeps no state and does not decide when a record is written.
"""

import struct

import attr

from kafkatw.protocol import coordinator_records as cr
from kafkatw.coordinator.group.consumer_group import ConsumerGroup, ConsumerGroupMember

METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8

_KEYS = {
    METADATA: cr.ConsumerGroupMetadataKey,
    PARTITION_METADATA: cr.ConsumerGroupPartitionMetadataKey,
    MEMBER_METADATA: cr.ConsumerGroupMemberMetadataKey,
    TARGET_ASSIGNMENT_METADATA: cr.ConsumerGroupTargetAssignmentMetadataKey,
    TARGET_ASSIGNMENT_MEMBER: cr.ConsumerGroupTargetAssignmentMemberKey,
    CURRENT_MEMBER_ASSIGNMENT: cr.ConsumerGroupCurrentMemberAssignmentKey,
}
_VALUES = {
    METADATA: cr.ConsumerGroupMetadataValue,
    PARTITION_METADATA: cr.ConsumerGroupPartitionMetadataValue,
    MEMBER_METADATA: cr.ConsumerGroupMemberMetadataValue,
    TARGET_ASSIGNMENT_METADATA: cr.ConsumerGroupTargetAssignmentMetadataValue,
    TARGET_ASSIGNMENT_MEMBER: cr.ConsumerGroupTargetAssignmentMemberValue,
    CURRENT_MEMBER_ASSIGNMENT: cr.ConsumerGroupCurrentMemberAssignmentValue,
}
_I16 = struct.Struct(">h")
VALUE_VERSION = 0


@attr.s(slots=True, frozen=True)
class ConsumerRecord:
    kind = attr.ib()
    group_id = attr.ib()
    member_id = attr.ib()  # None for group-level records
    value = attr.ib()  # the decoded value struct, or None for a tombstone


def _key(kind, group_id, member_id=None):
    fields = dict(group_id=group_id)
    if member_id is not None:
        fields["member_id"] = member_id
    return _I16.pack(kind) + _KEYS[kind](**fields).encode_bytes(kind)


def _value(kind, value):
    return _I16.pack(VALUE_VERSION) + value.encode_bytes(VALUE_VERSION)


def _partitions(cls, assignment):
    return [cls(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(assignment.items())]


def _assignment(topic_partitions):
    return {tp.topic_id: frozenset(tp.partitions) for tp in topic_partitions if tp.partitions}


# -- records for the coordinator to write: (key bytes, value bytes or None) -----------------

def group_epoch_record(group):
    return (_key(METADATA, group.group_id),
            _value(METADATA, cr.ConsumerGroupMetadataValue(epoch=group.group_epoch)))


def partition_metadata_record(group):
    TopicMetadata = cr.ConsumerGroupPartitionMetadataValue.TopicMetadata
    topics = [TopicMetadata(topic_id=tid, topic_name=name, num_partitions=n, partition_metadata=[])
              for name, (tid, n) in sorted(group.subscription_metadata.items())]
    return (_key(PARTITION_METADATA, group.group_id),
            _value(PARTITION_METADATA, cr.ConsumerGroupPartitionMetadataValue(topics=topics)))


def member_metadata_record(group_id, m):
    classic = None
    if m.classic is not None:
        Classic = cr.ConsumerGroupMemberMetadataValue.ClassicMemberMetadata
        classic = Classic(session_timeout_ms=m.classic[0], supported_protocols=[
            cr.ConsumerGroupMemberMetadataValue.ClassicProtocol(name=n, metadata=bytes(meta))
            for n, meta in m.classic[1]])
    value = cr.ConsumerGroupMemberMetadataValue(
        instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id or "",
        client_host=m.client_host or "", subscribed_topic_names=list(m.subscribed_topic_names or ()),
        subscribed_topic_regex=m.subscribed_topic_regex, rebalance_timeout_ms=m.rebalance_timeout_ms,
        server_assignor=m.server_assignor, classic_member_metadata=classic)
    return (_key(MEMBER_METADATA, group_id, m.member_id), _value(MEMBER_METADATA, value))


def target_member_record(group_id, member_id, assignment):
    value = cr.ConsumerGroupTargetAssignmentMemberValue(topic_partitions=_partitions(
        cr.ConsumerGroupTargetAssignmentMemberValue.TopicPartition, assignment))
    return (_key(TARGET_ASSIGNMENT_MEMBER, group_id, member_id),
            _value(TARGET_ASSIGNMENT_MEMBER, value))


def target_epoch_record(group):
    return (_key(TARGET_ASSIGNMENT_METADATA, group.group_id),
            _value(TARGET_ASSIGNMENT_METADATA, cr.ConsumerGroupTargetAssignmentMetadataValue(
                assignment_epoch=group.assignment_epoch)))


def current_assignment_record(group_id, m):
    TP = cr.ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions
    value = cr.ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=m.state,
        assigned_partitions=_partitions(TP, m.assigned),
        partitions_pending_revocation=_partitions(TP, m.pending_revocation))
    return (_key(CURRENT_MEMBER_ASSIGNMENT, group_id, m.member_id),
            _value(CURRENT_MEMBER_ASSIGNMENT, value))


def member_tombstones(group_id, member_id):
    """Kafka's order when a member leaves: its current assignment, its target, its metadata."""
    return [(_key(CURRENT_MEMBER_ASSIGNMENT, group_id, member_id), None),
            (_key(TARGET_ASSIGNMENT_MEMBER, group_id, member_id), None),
            (_key(MEMBER_METADATA, group_id, member_id), None)]


def group_tombstones(group_id):
    """The group-level records of a deleted (or converted) empty group."""
    return [(_key(TARGET_ASSIGNMENT_METADATA, group_id), None),
            (_key(PARTITION_METADATA, group_id), None),
            (_key(METADATA, group_id), None)]


# -- reading back ---------------------------------------------------------------------------

def decode(key, value):
    """A :class:`ConsumerRecord` for a record of types 3-8, else None."""
    key = bytes(key)
    (kind,) = _I16.unpack_from(key, 0)
    if kind not in _KEYS:
        return None
    k = _KEYS[kind].decode(key[2:], kind)
    v = None
    if value is not None:
        value = bytes(value)
        (vv,) = _I16.unpack_from(value, 0)
        v = _VALUES[kind].decode(value[2:], vv)
    return ConsumerRecord(kind, k.group_id, getattr(k, "member_id", None), v)


def _classic(meta):
    if meta is None:
        return None
    return (meta.session_timeout_ms,
            tuple((p.name, bytes(p.metadata)) for p in meta.supported_protocols))


def replay(groups, rec):
    """Apply one record to ``groups`` ({group id: ConsumerGroup}), as Kafka's
    GroupMetadataManager.replay does at load."""
    group = groups.get(rec.group_id)
    if rec.kind == METADATA:
        if rec.value is None:
            groups.pop(rec.group_id, None)
            return
        if group is None:
            group = groups[rec.group_id] = ConsumerGroup(rec.group_id)
        group.group_epoch = rec.value.epoch
        return
    if group is None:
        if rec.value is None:
            return
        group = groups[rec.group_id] = ConsumerGroup(rec.group_id)
    v = rec.value
    if rec.kind == PARTITION_METADATA:
        group.subscription_metadata = {} if v is None else {
            t.topic_name: (t.topic_id, t.num_partitions) for t in v.topics}
    elif rec.kind == TARGET_ASSIGNMENT_METADATA:
        group.assignment_epoch = 0 if v is None else v.assignment_epoch
    elif rec.kind == TARGET_ASSIGNMENT_MEMBER:
        if v is None:
            group.target.pop(rec.member_id, None)
        else:
            group.target[rec.member_id] = _assignment(v.topic_partitions)
    elif rec.kind == MEMBER_METADATA:
        if v is None:
            group.remove_member(rec.member_id)
            return
        old = group.members.get(rec.member_id) or ConsumerGroupMember(rec.member_id)
        group.update_member(old.copy(
            instance_id=v.instance_id, rack_id=v.rack_id, client_id=v.client_id,
            client_host=v.client_host, subscribed_topic_names=list(v.subscribed_topic_names or ()),
            subscribed_topic_regex=v.subscribed_topic_regex, rebalance_timeout_ms=v.rebalance_timeout_ms,
            server_assignor=v.server_assignor, classic=_classic(v.classic_member_metadata)))
    elif rec.kind == CURRENT_MEMBER_ASSIGNMENT:
        if v is None:
            return
        old = group.members.get(rec.member_id) or ConsumerGroupMember(rec.member_id)
        group.update_member(old.copy(
            member_epoch=v.member_epoch, previous_member_epoch=v.previous_member_epoch,
            state=v.state, assigned=_assignment(v.assigned_partitions),
            pending_revocation=_assignment(v.partitions_pending_revocation)))
