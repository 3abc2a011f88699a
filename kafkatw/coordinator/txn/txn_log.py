"""The on-disk side of the transaction coordinator: ``__transaction_state`` partitioning (Java's
String.hashCode of the transactional id) and Kafka's TransactionLogKey/Value records (int16
version prefix; value version 0, what Kafka writes for transaction.version 1). It keeps no
state; the coordinator appends and loads through it.
"""

import struct

from kafkatw.coordinator.group.offsets_log import java_string_hashcode
from kafkatw.protocol import coordinator_records as cr
from kafkatw.protocol.records import Record, build_batch

from .metadata import EMPTY, STATE_IDS, STATES_BY_ID, TransactionMetadata

TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0

_I16 = struct.Struct(">h")


def partition_for(transactional_id, num_partitions):
    """Kafka's ``Utils.abs(transactionalId.hashCode) % transactionTopicPartitionCount``."""
    h = java_string_hashcode(transactional_id)
    h = 0 if h == -(1 << 31) else abs(h)
    return h % num_partitions


def key_bytes(transactional_id):
    return _I16.pack(KEY_VERSION) + cr.TransactionLogKey(
        transactional_id=transactional_id).encode_bytes(KEY_VERSION)


def value_bytes(transit):
    """The TransactionLogValue of a TxnTransitMetadata (partitions null when Empty, as Kafka)."""
    partitions = None
    if transit.state != EMPTY:
        by_topic = {}
        for topic, p in transit.partitions:
            by_topic.setdefault(topic, []).append(p)
        partitions = [cr.TransactionLogValue.PartitionsSchema(topic=t, partition_ids=sorted(ps))
                      for t, ps in sorted(by_topic.items())]
    value = cr.TransactionLogValue(
        producer_id=transit.producer_id, producer_epoch=transit.producer_epoch,
        transaction_timeout_ms=transit.txn_timeout_ms,
        transaction_status=STATE_IDS[transit.state], transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=transit.txn_last_update_timestamp,
        transaction_start_timestamp_ms=transit.txn_start_timestamp)
    return _I16.pack(VALUE_VERSION) + value.encode_bytes(VALUE_VERSION)


def build_record_batch(transactional_id, transit, timestamp_ms):
    value = None if transit is None else value_bytes(transit)
    return build_batch([Record(key=key_bytes(transactional_id), value=value,
                               timestamp=timestamp_ms)])


def decode_key(key):
    key = bytes(key)
    (version,) = _I16.unpack_from(key, 0)
    if version != KEY_VERSION:
        return None  # a record of a later format this broker does not read
    return cr.TransactionLogKey.decode(key[2:], version).transactional_id


def decode_value(transactional_id, value):
    """A TransactionMetadata from a stored value; None for a tombstone."""
    if value is None:
        return None
    value = bytes(value)
    (version,) = _I16.unpack_from(value, 0)
    v = cr.TransactionLogValue.decode(value[2:], version)
    partitions = set()
    for entry in v.transaction_partitions or ():
        for p in entry.partition_ids:
            partitions.add((entry.topic, p))
    last_pid = getattr(v, "previous_producer_id", -1)
    return TransactionMetadata(
        transactional_id, v.producer_id, last_producer_id=last_pid if last_pid is not None else -1,
        producer_epoch=v.producer_epoch, txn_timeout_ms=v.transaction_timeout_ms,
        state=STATES_BY_ID[v.transaction_status], partitions=partitions,
        txn_start_timestamp=v.transaction_start_timestamp_ms,
        txn_last_update_timestamp=v.transaction_last_update_timestamp_ms)
