"""Which partitions of one internal topic (``__consumer_offsets``, ``__transaction_state``) this
broker coordinates: Kafka's onLeadershipChange -> onElection/onResignation, shared by both
coordinators. It only reports elections and resignations; loading and unloading are theirs.

Cluster mode (the replica manager's ``cluster_mode``): a coordinator owns exactly the partitions
this broker leads, as LeaderAndIsr and StopReplica say (``add_leadership_listener``). Single
node: this broker leads everything, so every partition of the topic is elected when the seam
starts or the topic is created (partitions added too), and resigned when the topic is deleted.
"""

from twisted.logger import Logger

from kafkatw.cluster.metadata import TOPIC_CREATED, TOPIC_DELETED, TOPIC_PARTITIONS_ADDED

log = Logger(namespace="kafkatw.coordinator")

NO_EPOCH = -1


class PartitionOwnership:
    """Follows this broker's leadership of ``topic``'s partitions and calls
    ``on_elected(partition, leader_epoch)`` when it becomes leader, and again with each newer
    leader epoch while it stays leader (a group coordinator already owning it ignores that; a
    transaction coordinator takes the new coordinator epoch), and
    ``on_resigned(partition, leader_epoch)`` once when it stops leading (the new epoch as a
    follower, -1 when the replica was stopped or deleted). Calls come on the reactor thread in
    the order of the controller's requests; an exception in a callback is logged, never raised
    into the replica manager.

    ``leaders`` is ``{partition: leader epoch}`` of the partitions led now (read only)."""

    def __init__(self, topic, replica_manager, metadata, on_elected, on_resigned):
        self.topic = topic
        self.replica_manager = replica_manager
        self.metadata = metadata
        self.on_elected = on_elected
        self.on_resigned = on_resigned
        self.cluster_mode = bool(getattr(replica_manager, "cluster_mode", False))
        self.leaders = {}
        self._running = False
        self._listening = False

    def is_leader(self, partition):
        return partition in self.leaders

    def leader_epoch(self, partition):
        """The leader epoch this broker leads ``partition`` with, or None when it does not."""
        return self.leaders.get(partition)

    def start(self):
        """Start following; partitions led already (single node: every existing one) are
        elected now."""
        if self._running:
            return
        self._running = True
        if self.cluster_mode:
            if not self._listening:
                self._listening = True
                self.replica_manager.add_leadership_listener(self._leadership_changed)
            count = self.metadata.partition_count(self.topic) if self.metadata is not None else None
            for p in range(count or 0):
                part = self.replica_manager.get_partition(self.topic, p)
                if part is not None and part.log is not None and part.is_leader:
                    self._elect(p, part.leader_epoch)
            return
        if self.metadata is None:
            return
        if not self._listening:
            self._listening = True
            self.metadata.add_listener(self._topic_event)
        count = self.metadata.partition_count(self.topic)
        if count:
            self._elect_all(count, [self.metadata.leader_epoch(self.topic, p) for p in range(count)])

    def stop(self):
        """Stop following (a coordinator shutting down); no resignations are reported, the
        coordinator drops its state itself."""
        self._running = False
        self.leaders = {}
        if self._listening and not self.cluster_mode:
            self.metadata.remove_listener(self._topic_event)
            self._listening = False

    # -- cluster mode ----------------------------------------------------------------------
    def _leadership_changed(self, became_leader, became_follower):
        if not self._running:
            return
        for topic, partition, epoch in became_leader:
            if topic == self.topic:
                self._elect(partition, epoch)
        for topic, partition, epoch in became_follower:
            if topic == self.topic:
                self._resign(partition, epoch)

    # -- single node -----------------------------------------------------------------------
    def _topic_event(self, event, info):
        if not self._running or info.name != self.topic:
            return
        if event in (TOPIC_CREATED, TOPIC_PARTITIONS_ADDED):
            # listeners run before queries see the change: the event's TopicInfo says it
            self._elect_all(info.num_partitions, list(info.leader_epochs or ()))
        elif event == TOPIC_DELETED:
            for p in sorted(self.leaders):
                self._resign(p, NO_EPOCH)

    def _elect_all(self, count, epochs):
        for p in range(count):
            if p not in self.leaders:
                epoch = epochs[p] if p < len(epochs) else None
                self._elect(p, 0 if epoch is None or epoch < 0 else epoch)

    # -- reporting -------------------------------------------------------------------------
    def _elect(self, partition, epoch):
        current = self.leaders.get(partition)
        if current is not None and epoch <= current:
            return
        self.leaders[partition] = epoch
        log.info("elected coordinator of {topic}-{p} at leader epoch {e}", topic=self.topic,
                 p=partition, e=epoch)
        self._call(self.on_elected, partition, epoch)

    def _resign(self, partition, epoch):
        if partition not in self.leaders:
            return
        del self.leaders[partition]
        log.info("resigned as coordinator of {topic}-{p} (leader epoch now {e})",
                 topic=self.topic, p=partition, e=epoch)
        self._call(self.on_resigned, partition, epoch)

    def _call(self, callback, partition, epoch):
        try:
            callback(partition, epoch)
        except Exception:
            log.failure("{topic}-{p}: the coordinator's election/resignation callback failed",
                        topic=self.topic, p=partition)
