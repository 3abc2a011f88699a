"""Follower fetching (KIP-392): the values a replica selector sees, Kafka's two selectors, and
the leader's choice of a preferred read replica for a consumer's fetch. Reading from a
follower itself is the replica manager's; loading a selector plug-in is the registry's."""

import attr
from zope.interface import implementer

from kafkatw.server.interfaces import IReplicaSelector


@attr.s(frozen=True, slots=True)
class ClientMetadata:
    """Kafka's ClientMetadata: who fetches, from Fetch v11's ``rack_id`` and the connection."""
    rack_id = attr.ib(default="")
    client_id = attr.ib(default="")
    client_address = attr.ib(default=None)
    principal = attr.ib(default=None)
    listener_name = attr.ib(default=None)


@attr.s(frozen=True, slots=True)
class ReplicaView:
    """One replica as a selector sees it (Kafka's ReplicaView)."""
    broker_id = attr.ib()
    rack = attr.ib(default=None)
    log_end_offset = attr.ib(default=-1)
    time_since_last_caught_up_ms = attr.ib(default=0)


@attr.s(frozen=True, slots=True)
class PartitionView:
    """The replicas a consumer may be sent to, the leader among them (Kafka's PartitionView)."""
    replicas = attr.ib(converter=tuple)
    leader = attr.ib()


@implementer(IReplicaSelector)
class LeaderSelector:
    """Always the leader: Kafka's LeaderSelector."""

    def select(self, topic_partition, client_metadata, partition_view):
        return partition_view.leader


@implementer(IReplicaSelector)
class RackAwareReplicaSelector:
    """Kafka's RackAwareReplicaSelector: a replica in the client's rack, the leader if it is
    one of them, else the one furthest ahead (the most recently caught up on a tie); the
    leader when the client names no rack or no replica shares it."""

    def select(self, topic_partition, client_metadata, partition_view):
        rack = client_metadata.rack_id
        if not rack:
            return partition_view.leader
        same_rack = [r for r in partition_view.replicas if r.rack == rack]
        if not same_rack or partition_view.leader in same_rack:
            return partition_view.leader
        return max(same_rack, key=lambda r: (r.log_end_offset, -r.time_since_last_caught_up_ms, -r.broker_id))


def load_replica_selector(config):
    """The verified ``IReplicaSelector`` that ``replica.selector.class`` names, or None when it
    is unset (consumers then read from whichever replica they ask, the leader by default). A
    name that cannot be loaded is a one-line ConfigError."""
    from kafkatw import registry

    name = config.get("replica.selector.class") if config is not None else None
    if not name:
        return None
    originals = getattr(config, "originals", None)
    configs = dict(originals) if isinstance(originals, dict) else {}
    return registry.load("replica.selector.class", name, IReplicaSelector, configs=configs)


def preferred_read_replica(selector, metadata, partition, client_metadata, fetch_offset, now_ms):
    """Kafka's findPreferredReadReplica on the leader ``partition``: the broker id a consumer
    should read from instead, or -1 to read here. Candidates are live followers holding
    everything up to the HW and the fetch offset; the leader itself is never sent back."""
    if selector is None or client_metadata is None:
        return -1
    log_ = partition.log
    hw = log_.high_watermark

    def rack_of(broker_id):
        info = metadata.live_broker(broker_id)
        return None if info is None else info.rack

    leader = ReplicaView(partition.local_broker_id, rack_of(partition.local_broker_id), log_.log_end_offset, 0)
    candidates = [leader]
    for broker_id, replica in sorted(partition.remote_replicas.items()):
        if metadata.live_broker(broker_id) is None:
            continue
        if replica.log_end_offset < hw or not (0 <= replica.log_start_offset <= fetch_offset):
            continue
        candidates.append(ReplicaView(broker_id, rack_of(broker_id), replica.log_end_offset,
                                      max(0, now_ms - replica.last_caught_up_time_ms)))
    chosen = selector.select((partition.topic, partition.partition), client_metadata,
                             PartitionView(candidates, leader))
    if chosen is None or chosen.broker_id == leader.broker_id:
        return -1
    return chosen.broker_id
