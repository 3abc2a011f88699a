"""The on-disk side of the group coordinator: ``__consumer_offsets`` partitioning (Java's
String.hashCode), the coordinator record formats (OffsetCommitKey/Value, GroupMetadataKey/Value
with their int16 version prefix), building record batches and reading a partition back at load.
It appends and reads through what the coordinator hands it; it keeps no group state.
"""

import struct

import attr

from kafkatw.protocol import coordinator_records as cr
from kafkatw.protocol.records import Record, build_batch, decode_batch, iter_batch_headers
from kafkatw.coordinator.group.group import OffsetAndMetadata

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_EXPIRE = 1
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")


def java_string_hashcode(s):
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit wrap-around)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id, num_partitions):
    """Kafka's ``Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount``."""
    h = java_string_hashcode(group_id)
    h = 0 if h == -(1 << 31) else abs(h)
    return h % num_partitions


# -- record keys and values ----------------------------------------------------------------

def offset_commit_key(group_id, topic, partition):
    return _I16.pack(OFFSET_COMMIT_KEY_VERSION) + cr.OffsetCommitKey(
        group=group_id, topic=topic, partition=partition).encode_bytes(OFFSET_COMMIT_KEY_VERSION)


def group_metadata_key(group_id):
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + cr.GroupMetadataKey(
        group=group_id).encode_bytes(GROUP_METADATA_KEY_VERSION)


def offset_commit_value(om):
    if om.expire_timestamp is not None:
        version = OFFSET_COMMIT_VALUE_VERSION_EXPIRE
        value = cr.OffsetCommitValue(offset=om.offset, metadata=om.metadata or "",
                                     commit_timestamp=om.commit_timestamp,
                                     expire_timestamp=om.expire_timestamp)
    else:
        version = OFFSET_COMMIT_VALUE_VERSION
        value = cr.OffsetCommitValue(offset=om.offset, leader_epoch=om.leader_epoch,
                                     metadata=om.metadata or "", commit_timestamp=om.commit_timestamp)
    return _I16.pack(version) + value.encode_bytes(version)


def group_metadata_value(group, assignment):
    """The GroupMetadataValue of ``group`` with ``assignment`` ({member id: bytes})."""
    members = []
    if group.protocol_name is not None:
        for m in group.members.values():
            members.append(cr.GroupMetadataValue.MemberMetadata(
                member_id=m.member_id, group_instance_id=m.group_instance_id,
                client_id=m.client_id, client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms, session_timeout=m.session_timeout_ms,
                subscription=bytes(m.metadata(group.protocol_name)),
                assignment=bytes(assignment.get(m.member_id, b""))))
    value = cr.GroupMetadataValue(
        protocol_type=group.protocol_type or "", generation=group.generation_id,
        protocol=group.protocol_name, leader=group.leader_id,
        current_state_timestamp=group.current_state_timestamp, members=members)
    return _I16.pack(GROUP_METADATA_VALUE_VERSION) + value.encode_bytes(GROUP_METADATA_VALUE_VERSION)


@attr.s(slots=True, frozen=True)
class OffsetRecord:
    group_id = attr.ib()
    topic = attr.ib()
    partition = attr.ib()
    value = attr.ib()  # OffsetAndMetadata, or None for a tombstone


@attr.s(slots=True, frozen=True)
class GroupRecord:
    group_id = attr.ib()
    value = attr.ib()  # cr.GroupMetadataValue, or None for a tombstone


def decode_record(key, value):
    """An :class:`OffsetRecord` or :class:`GroupRecord`, or None for a record of another kind
    (the consumer/share group records of the new protocols)."""
    if key is None:
        raise ValueError("record without a key in %s" % GROUP_METADATA_TOPIC_NAME)
    key = bytes(key)
    (kv,) = _I16.unpack_from(key, 0)
    if kv in (0, 1):
        k = cr.OffsetCommitKey.decode(key[2:], kv)
        om = None
        if value is not None:
            value = bytes(value)
            (vv,) = _I16.unpack_from(value, 0)
            v = cr.OffsetCommitValue.decode(value[2:], vv)
            om = OffsetAndMetadata(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp,
                                   v.expire_timestamp if v.expire_timestamp != -1 else None)
        return OffsetRecord(k.group, k.topic, k.partition, om)
    if kv == GROUP_METADATA_KEY_VERSION:
        k = cr.GroupMetadataKey.decode(key[2:], kv)
        gv = None
        if value is not None:
            value = bytes(value)
            (vv,) = _I16.unpack_from(value, 0)
            gv = cr.GroupMetadataValue.decode(value[2:], vv)
        return GroupRecord(k.group, gv)
    return None


def build_records_batch(entries, timestamp_ms, compression=0, producer_id=-1, producer_epoch=-1):
    """One v2 batch of ``entries`` ([(key bytes, value bytes or None)]); transactional when
    a ``producer_id`` is given (TxnOffsetCommit)."""
    txn = {}
    if producer_id >= 0:
        txn = dict(producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=-1,
                   is_transactional=True)
    return build_batch([Record(key=k, value=v, timestamp=timestamp_ms) for k, v in entries],
                       compression=compression, **txn)


def iter_log_records(log_, start_offset, end_offset, buffer_size, with_batches=False):
    """Yield (key, value) of every non-control record of ``log_`` in [start, end), reading
    ``buffer_size`` bytes at a time (Kafka's offsets.load.buffer.size). ``with_batches``:
    yield (BatchHeader, Record) of every record, control records included (transactional
    offsets wait for their producer's marker)."""
    from kafkatw.storage.offsets import FetchIsolation

    offset = start_offset
    while offset < end_offset:
        info = log_.read(offset, buffer_size, FetchIsolation.LOG_END, True)
        records = info.records
        data = records.read() if hasattr(records, "read") else bytes(records or b"")
        if not data:
            return
        last = None
        for pos, header in iter_batch_headers(data, allow_partial_tail=True):
            last = header
            if header.next_offset <= offset or (header.is_control and not with_batches):
                continue
            _, recs = decode_batch(data, pos)
            for r in recs:
                if r.offset >= offset and r.offset < end_offset:
                    yield (header, r) if with_batches else (r.key, r.value)
        if last is None or last.next_offset <= offset:
            return
        offset = last.next_offset
