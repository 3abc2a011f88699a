"""Kafka's replica assignment for new topics and partitions (AdminUtils.assignReplicasToBrokers):
round-robin with a shifting second replica, rack-aware when every broker has ``broker.rack``.

Pure functions of broker ids and racks; which brokers are live is the caller's to say.
"""

import random

from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError


def _replica_index(first_replica_index, second_replica_shift, replica_index, n_brokers):
    shift = 1 + (second_replica_shift + replica_index) % (n_brokers - 1)
    return (first_replica_index + shift) % n_brokers


def rack_alternated_brokers(broker_racks):
    """Brokers ordered rack by rack in turn (racks sorted, brokers sorted within a rack)."""
    by_rack = {}
    for broker, rack in sorted(broker_racks.items()):
        by_rack.setdefault(rack, []).append(broker)
    racks = sorted(by_rack)
    iterators = {rack: iter(by_rack[rack]) for rack in racks}
    out, index = [], 0
    while len(out) < len(broker_racks):
        broker = next(iterators[racks[index]], None)
        if broker is not None:
            out.append(broker)
        index = (index + 1) % len(racks)
    return out


def assign_replicas(n_partitions, replication_factor, broker_racks, start_partition=0,
                    fixed_start_index=-1, rng=random):
    """``{partition: [replicas]}`` for partitions ``start_partition..``; ``broker_racks`` maps each
    live broker id to its rack or None. Raises KafkaError as Kafka's CreateTopics answers."""
    if n_partitions <= 0:
        raise KafkaError(errors.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise KafkaError(errors.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor > len(broker_racks):
        raise KafkaError(errors.INVALID_REPLICATION_FACTOR,
                         "Unable to replicate the partition %d time(s): The target replication factor of "
                         "%d cannot be reached because only %d broker(s) are registered."
                         % (replication_factor, replication_factor, len(broker_racks)))
    with_rack = [b for b, r in broker_racks.items() if r is not None]
    if not with_rack:
        return _rack_unaware(n_partitions, replication_factor, sorted(broker_racks), start_partition,
                             fixed_start_index, rng)
    if len(with_rack) != len(broker_racks):
        raise KafkaError(errors.INVALID_REPLICA_ASSIGNMENT, "Not all brokers have rack information for "
                         "replica rack aware assignment.")
    return _rack_aware(n_partitions, replication_factor, broker_racks, start_partition, fixed_start_index, rng)


def _start(fixed_start_index, n, rng):
    return fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)


def _rack_unaware(n_partitions, rf, brokers, start_partition, fixed_start_index, rng):
    n = len(brokers)
    start_index = _start(fixed_start_index, n, rng)
    shift = _start(fixed_start_index, n, rng)
    out = {}
    partition = max(0, start_partition)
    for _ in range(n_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        replicas = [brokers[first]]
        for j in range(rf - 1):
            replicas.append(brokers[_replica_index(first, shift, j, n)])
        out[partition] = replicas
        partition += 1
    return out


def _rack_aware(n_partitions, rf, broker_racks, start_partition, fixed_start_index, rng):
    arranged = rack_alternated_brokers(broker_racks)
    n = len(arranged)
    n_racks = len(set(broker_racks.values()))
    start_index = _start(fixed_start_index, n, rng)
    shift = _start(fixed_start_index, n, rng)
    out = {}
    partition = max(0, start_partition)
    for _ in range(n_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        racks, chosen = {broker_racks[leader]}, {leader}
        k = 0
        for _ in range(rf - 1):
            while True:
                broker = arranged[_replica_index(first, shift * n_racks, k, n)]
                rack = broker_racks[broker]
                k += 1
                if (rack not in racks or len(racks) == n_racks) and \
                        (broker not in chosen or len(chosen) == n):
                    replicas.append(broker)
                    racks.add(rack)
                    chosen.add(broker)
                    break
        out[partition] = replicas
        partition += 1
    return out
