"""DelayedProduce: an acks=all Produce parked in the purgatory until the high watermark passes
each appended partition's last offset (Kafka's DelayedProduce). It only decides *when* and
with which error; the appending and the ISR are the replica manager's and the partition's.
"""

from kafkatw.protocol import errors
from kafkatw.purgatory import DelayedOperation


class ProducePartitionStatus:
    """One appended partition: the offset the HW must reach and its response so far."""

    __slots__ = ("required_offset", "response", "acks_pending")

    def __init__(self, required_offset, response):
        self.required_offset = required_offset
        self.response = response
        self.acks_pending = True
        # what the client hears if the timeout comes first (Kafka's initial status)
        response.error_code = errors.REQUEST_TIMED_OUT
        response.error_message = None


class DelayedProduce(DelayedOperation):
    """``results``: {tp: PartitionResponse} of the whole request (those not waiting are final);
    ``waiting``: {tp: required offset}; ``replica_manager.online_partition_or_error(topic,
    partition)`` gives ``(Partition, NONE)`` or ``(None, error)``."""

    def __init__(self, timeout_ms, results, waiting, replica_manager):
        super().__init__(timeout_ms)
        self.results = results
        self.replica_manager = replica_manager
        self.statuses = {tp: ProducePartitionStatus(offset, results[tp])
                         for tp, offset in waiting.items()}

    def try_complete(self):
        """Kafka's tryComplete: each pending partition is done once its leader's HW passed the
        required offset (NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below
        min.insync.replicas meanwhile) or it is no longer led here."""
        rm = self.replica_manager
        for (topic, partition), status in self.statuses.items():
            if not status.acks_pending:
                continue
            p, error = rm.online_partition_or_error(topic, partition)
            if p is not None:
                done, error = p.check_enough_replicas_reach_offset(status.required_offset)
            else:
                done = True
            if done:
                status.acks_pending = False
                status.response.error_code = error
        if all(not s.acks_pending for s in self.statuses.values()):
            return self.force_complete()
        return False

    def on_complete(self):
        return self.results
