"""DelayedFetch: a Fetch parked in the purgatory until enough bytes accumulate, a partition
changes state, or max wait expires (Kafka's DelayedFetch, cases A-H). It only decides *when*;
the reading is the replica manager's, done again on completion.
"""

import attr
from twisted.logger import Logger

from kafkatw.protocol import errors
from kafkatw.purgatory import DelayedOperation
from kafkatw.storage.offsets import UNKNOWN_OFFSET_METADATA, FetchIsolation

log = Logger()


@attr.s(slots=True, frozen=True)
class FetchPartitionStatus:
    """Where the first read of a partition started, and the partition's request fields."""

    start_offset_metadata = attr.ib()
    fetch_info = attr.ib()


class DelayedFetch(DelayedOperation):
    def __init__(self, params, fetch_partition_status, replica_manager):
        super().__init__(params.max_wait_ms)
        self.params = params
        self.fetch_partition_status = list(fetch_partition_status)  # [(tp, FetchPartitionStatus)]
        self.replica_manager = replica_manager

    def try_complete(self):
        """Complete when (A-E) a partition is gone, not led here or its leader epoch moved,
        (F) the fetch offset is past the end or on an older segment than the end, (H) the
        follower's log diverged, or (G) the bytes now available reach min_bytes."""
        rm = self.replica_manager
        accumulated = 0
        for (topic, partition), status in self.fetch_partition_status:
            fetch_offset = status.start_offset_metadata
            info = status.fetch_info
            log_, error, _ = rm.fetch_log_or_error(self.params, topic, partition, info.topic_id,
                                                   info.current_leader_epoch)
            if error != errors.NONE:
                return self.force_complete()  # cases A-E
            if fetch_offset == UNKNOWN_OFFSET_METADATA:
                continue
            end = _end_offset_metadata(log_, self.params.fetch_isolation)
            if fetch_offset.message_offset != end.message_offset:
                if fetch_offset.message_offset > end.message_offset:
                    return self.force_complete()  # case F: truncated leader
                if fetch_offset.message_offset_only or end.message_offset_only:
                    return self.force_complete()  # positions unknown: let a read decide
                if fetch_offset.on_older_segment(end):
                    return self.force_complete()  # case F: the log rolled past us
                # as Kafka: a throttled partition's bytes do not count towards a follower's
                # min bytes (truncation, a roll or a divergence still answer at once)
                if fetch_offset.on_same_segment(end) and not (
                        self.params.replica_id >= 0
                        and rm.should_leader_throttle(topic, partition, self.params.replica_id)):
                    accumulated += min(end.position_diff(fetch_offset), info.max_bytes)
            if info.last_fetched_epoch >= 0 and rm.diverging_epoch(log_, info) is not None:
                return self.force_complete()  # case H
        if accumulated >= self.params.min_bytes:
            return self.force_complete()  # case G
        return False

    def on_complete(self):
        fetch_infos = [(tp, status.fetch_info) for tp, status in self.fetch_partition_status]
        results = self.replica_manager.read_from_log(self.params, fetch_infos)
        self.replica_manager.topic_stats.record_fetch(results)
        return [(tp, r.to_fetch_partition_data()) for tp, r in results]


def _end_offset_metadata(log_, isolation):
    if isolation == FetchIsolation.LOG_END:
        return log_.log_end_offset_metadata
    if isolation == FetchIsolation.TXN_COMMITTED:
        return log_.last_stable_offset_metadata
    return log_.high_watermark_metadata
