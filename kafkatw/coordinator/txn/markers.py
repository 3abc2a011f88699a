"""Writing transaction markers (what Kafka's WriteTxnMarkers does on each partition leader): a
COMMIT or ABORT control batch per partition, appended through the replica manager (so it would
replicate) with the coordinator as origin, then the group coordinator is told about markers in
``__consumer_offsets`` (pending transactional offsets become visible or vanish). The
transaction coordinator and the WriteTxnMarkers handler both use it; it holds no state.
"""

from twisted.internet import defer
from twisted.logger import Logger

from kafkatw.protocol import errors
from kafkatw.protocol.records import ABORT, COMMIT, build_control_batch
from kafkatw.storage.offsets import ORIGIN_COORDINATOR

log = Logger()

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"


def write_markers(replica_manager, group_coordinator, producer_id, producer_epoch,
                  coordinator_epoch, commit, partitions, timestamp_ms, timeout_ms=30000):
    """Append one marker to each (topic, partition) as its leader, acks=all; a Deferred of
    {(topic, partition): error code} (an append may wait, e.g. for a partition's producer
    state, or, in a cluster, up to ``timeout_ms`` for the followers: Kafka's
    request.timeout.ms)."""
    kind = COMMIT if commit else ABORT
    entries = {}
    for tp in partitions:
        entries[tp] = bytearray(build_control_batch(kind, coordinator_epoch, producer_id,
                                                    producer_epoch, timestamp=timestamp_ms))
    if not entries:
        return defer.succeed({})

    def appended(responses):
        results = {tp: r.error_code for tp, r in responses.items()}
        offsets_partitions = [p for (t, p), code in results.items()
                              if t == GROUP_METADATA_TOPIC_NAME and code == errors.NONE]
        if offsets_partitions and group_coordinator is not None:
            group_coordinator.handle_txn_completion(producer_id, offsets_partitions, commit)
        for tp, code in results.items():
            if code != errors.NONE:
                log.warn("Writing the {kind} marker of producer {pid} to {topic}-{p} failed: "
                         "{err}", kind="COMMIT" if commit else "ABORT", pid=producer_id,
                         topic=tp[0], p=tp[1], err=errors.error_name(code))
        return results

    d = replica_manager.append_records(timeout_ms, -1, entries, internal_topics_allowed=True,
                                       origin=ORIGIN_COORDINATOR)
    return d.addCallback(appended)
