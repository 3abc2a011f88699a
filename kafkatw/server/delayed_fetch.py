"""DelayedFetch: a Fetch parked in the purgatory until enough bytes accumulate, a partition
changes state, or max wait expires (Kafka's DelayedFetch, cases A-H). It only decides *when*;
the reading is the replica manager's, done again on completion, and the answer the fetch
handler's (``respond``).
"""

from twisted.logger import Logger

from kafkatw.protocol import errors
from kafkatw.purgatory import DelayedOperation
from kafkatw.storage.offsets import UNKNOWN_OFFSET_METADATA, FetchIsolation

UNKNOWN = -1  # LogOffsetMetadata's unknown segment base and position
LOG_END, TXN_COMMITTED = FetchIsolation.LOG_END, FetchIsolation.TXN_COMMITTED

log = Logger()


class DelayedFetch(DelayedOperation):
    def __init__(self, params, fetch_infos, start_offsets, replica_manager, found=None, kept=None):
        super().__init__(params.max_wait_ms)
        self.params = params
        # [((topic, partition), PartitionData)] as the fetch asked, read again by on_complete,
        # and per partition the LogOffsetMetadata where its first read started (Kafka's
        # FetchPartitionStatus: two parallel lists, no object per partition)
        self.fetch_infos = fetch_infos
        self.start_offsets = start_offsets
        self.replica_manager = replica_manager
        # [(log, Partition or None)] per partition as ReplicaManager.fetch_log_or_error found
        # them in the current call, for the next try_complete or on_complete in that same call
        # (nothing can change in between): ``found`` from the read that made this operation,
        # for the check that parks it; then what the try_complete completing it found, for
        # the read of on_complete
        self._found = found
        # ``kept``: the same look-ups, made when parking, for the checks on wake (Kafka's
        # tryComplete looks each partition up again): valid while the look-ups' sources
        # (published topics, attached logs) have the versions they had then, one comparison
        # for all partitions instead of a look-up chain each
        self._kept = kept
        if kept is not None:
            self._kept_versions = (replica_manager.metadata.published_version,
                                   replica_manager.log_manager.attached_version)
        # the fetch handler's answer maker: completing gives respond(results), the Response
        # (a failure there fails the operation); None: the results themselves
        self.respond = None

    def try_complete(self):
        """Complete when (A-E) a partition is gone, not led here or its leader epoch moved,
        (F) the fetch offset is past the end or on an older segment than the end (unless
        the leader throttles this follower of the partition now), (H) the
        follower's log diverged, or (G) the bytes now available reach min_bytes.

        Runs on every append to a watched partition: LogOffsetMetadata's position checks
        (``message_offset_only``, ``on_older_segment``, ``on_same_segment``,
        ``position_diff``) are inline here, on the fields. Case H is asked last, only when
        nothing else completes the fetch (completing reads again, and that read reports a
        divergence itself), and not by the check that parks it: the read just before, in the
        same call, found none (else it had answered at once)."""
        rm = self.replica_manager
        params = self.params
        isolation = params.fetch_isolation
        accumulated = 0
        epoch_checks = None  # [(log, PartitionData)] of a follower's partitions, for case H
        known = self._found
        parking = known is not None  # looked up by the read that is parking it, in this call
        if parking:
            self._found = None
        elif self._kept is not None:
            if self._kept_versions == (rm.metadata.published_version,
                                       rm.log_manager.attached_version):
                known = self._kept  # nothing a look-up answers changed since parking
            else:
                self._kept = None  # looked up from now on (cases A-E)
        if known is None:
            found = []
        else:
            found = known
            known = iter(known)
        for ((topic, partition), info), fetch_offset in zip(self.fetch_infos, self.start_offsets):
            if known is None:
                log_, error, part = rm.fetch_log_or_error(params, topic, partition, info.topic_id,
                                                          info.current_leader_epoch)
                if error != errors.NONE:
                    return self.force_complete()  # cases A-E
                found.append((log_, part))
            else:
                log_, part = next(known)
            offset = fetch_offset.message_offset
            if offset == -1 and fetch_offset == UNKNOWN_OFFSET_METADATA:
                continue
            if isolation is LOG_END:
                end = log_.log_end_offset_metadata
            elif isolation is TXN_COMMITTED:
                end = log_.last_stable_offset_metadata
            else:
                end = log_.high_watermark_metadata
            end_offset = end.message_offset
            if offset != end_offset:
                if offset > end_offset:
                    return self.force_complete()  # case F: truncated leader
                base = fetch_offset.segment_base_offset
                position = fetch_offset.relative_position_in_segment
                end_base = end.segment_base_offset
                end_position = end.relative_position_in_segment
                if (base == UNKNOWN and position == UNKNOWN) \
                        or (end_base == UNKNOWN and end_position == UNKNOWN):
                    return self.force_complete()  # positions unknown: let a read decide
                if base < end_base:
                    # case F: the log rolled past us; as Kafka, not for a follower the leader
                    # throttles now (its read is empty: answered at once, it would ask again
                    # at once while the quota stays used up)
                    if not (params.replica_id >= 0
                            and rm.should_leader_throttle(topic, partition, params.replica_id)):
                        return self.force_complete()
                # as Kafka: a throttled partition's bytes do not count towards a follower's
                # min bytes (truncation or a divergence still answer at once)
                elif base == end_base and not (
                        params.replica_id >= 0
                        and rm.should_leader_throttle(topic, partition, params.replica_id)):
                    available = end_position - position  # at most the partition's max bytes
                    accumulated += available if available < info.max_bytes else info.max_bytes
            if info.last_fetched_epoch >= 0 and not parking:
                if epoch_checks is None:
                    epoch_checks = []
                epoch_checks.append((log_, info))
        if accumulated >= params.min_bytes:
            self._found = found
            try:
                return self.force_complete()  # case G
            finally:
                self._found = None
        if epoch_checks is not None:
            for log_, info in epoch_checks:
                if rm.diverging_epoch(log_, info) is not None:
                    return self.force_complete()  # case H
        return False

    def on_complete(self):
        rm = self.replica_manager
        results = rm.read_from_log(self.params, self.fetch_infos, self._found)
        rm.topic_stats.record_fetch(results)
        respond = self.respond
        return results if respond is None else respond(results)

