"""Value objects of cluster state shared by the controller, the coordination store and the
brokers' metadata: a live broker, a partition's leadership, its ISR and epochs.

Plain frozen values only; who keeps them and how they travel (ZooKeeper, UpdateMetadata) is
elsewhere.
"""

import attr

#: Kafka's "no leader" (LeaderAndIsr.NoLeader) and the epoch of a never-led partition.
NO_LEADER = -1
INITIAL_LEADER_EPOCH = 0
INITIAL_PARTITION_EPOCH = 0
#: UpdateMetadata's leader for a partition of a topic being deleted (Kafka's LeaderDuringDelete)
LEADER_DURING_DELETE = -2

#: UpdateMetadata's endpoint security protocol ids (Kafka's SecurityProtocol.id)
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
SECURITY_PROTOCOL_NAMES = {v: k for k, v in SECURITY_PROTOCOL_IDS.items()}


@attr.s(frozen=True, slots=True)
class BrokerInfo:
    """A live broker: id, rack (or None), ``{listener name: (host, port)}`` and the broker
    epoch (the czxid of its registration znode; -1 where unknown)."""

    node_id = attr.ib()
    rack = attr.ib(default=None)
    endpoints = attr.ib(factory=dict)
    security_protocols = attr.ib(factory=dict)  # listener name -> security protocol name
    epoch = attr.ib(default=-1)


@attr.s(frozen=True, slots=True)
class PartitionState:
    """What Metadata and DescribeTopicPartitions answer of one partition."""

    leader = attr.ib()
    leader_epoch = attr.ib()
    isr = attr.ib(converter=tuple)
    replicas = attr.ib(converter=tuple)
    offline_replicas = attr.ib(converter=tuple, default=())
    partition_epoch = attr.ib(default=INITIAL_PARTITION_EPOCH)


@attr.s(frozen=True, slots=True)
class LeaderAndIsr:
    """Kafka's ``LeaderIsrAndControllerEpoch`` as kept in ``.../partitions/<p>/state``: the
    ``partition_epoch`` is the znode's version (every write must name it)."""

    leader = attr.ib()
    leader_epoch = attr.ib()
    isr = attr.ib(converter=tuple)
    controller_epoch = attr.ib()
    partition_epoch = attr.ib(default=INITIAL_PARTITION_EPOCH)
    leader_recovery_state = attr.ib(default=0)

    def new_leader_and_isr(self, leader, isr):
        """The next state with a new leader and ISR: leader epoch + 1 (Kafka's newLeaderAndIsr)."""
        return attr.evolve(self, leader=leader, isr=tuple(isr), leader_epoch=self.leader_epoch + 1)

    def new_isr(self, isr):
        """The same leader with another ISR: the leader epoch stays (KIP-497's AlterPartition)."""
        return attr.evolve(self, isr=tuple(isr))
