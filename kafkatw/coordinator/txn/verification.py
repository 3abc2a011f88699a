"""KIP-890 part 1 verification against a transaction coordinator on another broker (Kafka's
AddPartitionsToTxnManager): a partition leader asks the coordinator of a transactional id, with
AddPartitionsToTxn v4 ``verify_only``, whether its ongoing transaction holds the partitions. It
owns that one request and its answer's mapping, not the decision (the coordinator's) nor what
the produce or TxnOffsetCommit path makes of the codes.
"""

from twisted.internet import defer
from twisted.logger import Logger

from kafkatw.protocol import errors
from kafkatw.protocol.messages import AddPartitionsToTxnRequest

log = Logger(namespace="kafkatw.coordinator.txn")

VERIFY_VERSION = 4

#: A coordinator that cannot be reached: retriable (Kafka answers NETWORK_EXCEPTION; the
#: callers map it to what their clients retry).
UNREACHABLE = errors.NETWORK_EXCEPTION


def verify_request(transactional_id, producer_id, producer_epoch, partitions):
    by_topic = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    APT = AddPartitionsToTxnRequest
    return APT(transactions=[APT.AddPartitionsToTxnTransaction(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
        verify_only=True, topics=[APT.AddPartitionsToTxnTopic(name=t, partitions=sorted(ps))
                                  for t, ps in sorted(by_topic.items())])])


class RemoteVerifier:
    """``metadata`` gives the live brokers' endpoints, ``client`` is the broker's
    KafkaNetworkClient (any failure of it counts as the coordinator being unreachable)."""

    def __init__(self, metadata, client, listener="PLAINTEXT", request_timeout_ms=30000):
        self.metadata = metadata
        self.client = client
        self.listener = listener
        self.request_timeout_ms = request_timeout_ms

    def verify(self, coordinator_id, transactional_id, producer_id, producer_epoch, partitions):
        """A Deferred of {(topic, partition): error code} that never fails."""
        partitions = list(partitions)
        broker = self.metadata.live_broker(coordinator_id)
        if broker is None or self.listener not in broker.endpoints:
            return defer.succeed({tp: errors.COORDINATOR_NOT_AVAILABLE for tp in partitions})
        host, port = broker.endpoints[self.listener]
        d = self.client.send(("txn-verify", coordinator_id), host, port,
                             verify_request(transactional_id, producer_id, producer_epoch,
                                            partitions),
                             VERIFY_VERSION, self.request_timeout_ms)

        def answered(response):
            if response.error_code != errors.NONE:
                return {tp: response.error_code for tp in partitions}
            codes = {tp: errors.UNKNOWN_SERVER_ERROR for tp in partitions}
            for txn in response.results_by_transaction:
                if txn.transactional_id != transactional_id:
                    continue
                for topic in txn.topic_results:
                    for p in topic.results_by_partition:
                        tp = (topic.name, p.partition_index)
                        if tp in codes:
                            codes[tp] = p.partition_error_code
            return codes

        def failed(failure):
            log.debug("verifying {tid} with broker {b} failed: {why}", tid=transactional_id,
                     b=coordinator_id, why=failure.getErrorMessage())
            return {tp: UNREACHABLE for tp in partitions}

        return d.addCallback(answered).addErrback(failed)
