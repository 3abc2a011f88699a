"""Appending a coordinator's own records to its internal topic, shared by both coordinators.

Owns the one append call (internal topics allowed, coordinator origin when asked), its logging,
and Kafka's mapping of a failed append to the error the coordinator answers its client with;
not what the records say (each coordinator builds its batch).
"""

from twisted.logger import Logger

from kafkatw.protocol import errors

log = Logger(namespace="kafkatw.coordinator")


def coordinator_error(code):
    """Kafka's mapping of an append error to the coordinator's answer (GroupMetadataManager,
    TransactionStateManager): the client retries elsewhere or later, or sees a server error."""
    if code in (errors.UNKNOWN_TOPIC_OR_PARTITION, errors.NOT_ENOUGH_REPLICAS,
                errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, errors.REQUEST_TIMED_OUT):
        return errors.COORDINATOR_NOT_AVAILABLE
    if code in (errors.NOT_LEADER_OR_FOLLOWER, errors.KAFKA_STORAGE_ERROR):
        return errors.NOT_COORDINATOR
    if code in (errors.MESSAGE_TOO_LARGE, errors.RECORD_LIST_TOO_LARGE, errors.INVALID_FETCH_SIZE):
        return errors.UNKNOWN_SERVER_ERROR
    return code


def append_coordinator_batch(replica_manager, tp, batch, timeout_ms=-1, **append_kwargs):
    """Append ``batch`` to the internal partition ``tp``; a Deferred of the coordinator's error
    code (``errors.NONE`` once appended). An unexpected failure is logged and answered
    UNKNOWN_SERVER_ERROR."""
    d = replica_manager.append_records(timeout_ms, -1, {tp: batch}, internal_topics_allowed=True,
                                       **append_kwargs)

    def done(results):
        code = results[tp].error_code
        if code != errors.NONE:
            log.warn("Appending to {topic}-{p} failed: {err}", topic=tp[0], p=tp[1],
                     err=errors.error_name(code))
        return coordinator_error(code)

    def failed(f):
        log.failure("Appending to {topic}-{p} failed", f, topic=tp[0], p=tp[1])
        return errors.UNKNOWN_SERVER_ERROR

    return d.addCallbacks(done, failed)
