"""Markers to each partition's current leader (Kafka's TransactionMarkerChannelManager, one
attempt at a time): partitions this broker leads get theirs through the local append path,
the others as WriteTxnMarkers (API 27) to their leader, one connection per broker on the
inter-broker listener. It owns routing and the wire, not retries or transaction state: the
coordinator retries what did not land (the leader is looked up afresh each attempt).
"""

from twisted.internet import defer
from twisted.logger import Logger

from kafkatw.protocol import errors
from kafkatw.protocol.messages import WriteTxnMarkersRequest

from .markers import write_markers

log = Logger(namespace="kafkatw.coordinator.txn")

WRITE_TXN_MARKERS_VERSION = 1

#: What a marker that did not land is answered when no leader can be reached: retriable, as
#: Kafka's channel manager treats a leader it cannot find or reach.
NO_LEADER = errors.NOT_LEADER_OR_FOLLOWER


def write_txn_markers_request(producer_id, producer_epoch, coordinator_epoch, commit, partitions):
    by_topic = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    return WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
        coordinator_epoch=coordinator_epoch,
        topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=t, partition_indexes=sorted(ps))
                for t, ps in sorted(by_topic.items())])])


class TransactionMarkerChannelManager:
    """``metadata`` gives each partition's leader (``leader_state``) and the live brokers'
    endpoints; ``client`` is the broker's KafkaNetworkClient (None on a single node: every partition
    is local; its failures of any kind count as the broker being unreachable); ``listener`` the inter-broker listener name."""

    def __init__(self, metadata, replica_manager, group_coordinator, node_id, client=None,
                 listener="PLAINTEXT", request_timeout_ms=30000):
        self.metadata = metadata
        self.replica_manager = replica_manager
        self.group_coordinator = group_coordinator
        self.node_id = node_id
        self.client = client
        self.listener = listener
        self.request_timeout_ms = request_timeout_ms

    def _leader(self, tp):
        if self.client is None:
            return self.node_id
        state = self.metadata.leader_state(*tp)
        return None if state is None else state[1]

    def send_markers(self, producer_id, producer_epoch, coordinator_epoch, commit, partitions,
                     now_ms):
        """One attempt: a Deferred of {(topic, partition): error code} for every partition
        (NONE where the marker landed with acks=all)."""
        by_leader = {}
        for tp in partitions:
            by_leader.setdefault(self._leader(tp), []).append(tp)
        results = {}
        pending = []
        for leader, tps in sorted(by_leader.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
            if leader is None or leader < 0:
                results.update((tp, NO_LEADER) for tp in tps)
            elif leader == self.node_id:
                d = write_markers(self.replica_manager, self.group_coordinator, producer_id,
                                  producer_epoch, coordinator_epoch, commit, tps, now_ms,
                                  timeout_ms=self.request_timeout_ms)
                pending.append(d.addCallback(results.update))
            else:
                d = self._send_remote(leader, producer_id, producer_epoch, coordinator_epoch,
                                      commit, tps)
                pending.append(d.addCallback(results.update))
        return defer.gatherResults(pending, consumeErrors=True).addCallback(lambda _: results)

    def _send_remote(self, leader, producer_id, producer_epoch, coordinator_epoch, commit, tps):
        """WriteTxnMarkers to broker ``leader``; a Deferred of {tp: code} that never fails (a
        broker gone or not answering is NOT_LEADER_OR_FOLLOWER for its partitions: retried)."""
        broker = self.metadata.live_broker(leader)
        if broker is None or self.listener not in broker.endpoints:
            return defer.succeed({tp: NO_LEADER for tp in tps})
        host, port = broker.endpoints[self.listener]
        request = write_txn_markers_request(producer_id, producer_epoch, coordinator_epoch,
                                            commit, tps)
        d = self.client.send(leader, host, port, request, WRITE_TXN_MARKERS_VERSION,
                             self.request_timeout_ms)

        def answered(response):
            codes = {tp: errors.UNKNOWN_SERVER_ERROR for tp in tps}
            for marker in response.markers:
                if marker.producer_id != producer_id:
                    continue
                for topic in marker.topics:
                    for p in topic.partitions:
                        if (topic.name, p.partition_index) in codes:
                            codes[(topic.name, p.partition_index)] = p.error_code
            return codes

        def failed(failure):
            # the broker went away, did not answer in time, or answered garbage: its
            # partitions are retried with their leaders looked up again (every 100 ms until
            # the controller moves them: debug, not a line per retry)
            log.debug("WriteTxnMarkers to broker {b} failed ({why}); retrying after a metadata "
                     "refresh", b=leader, why=failure.getErrorMessage())
            return {tp: NO_LEADER for tp in tps}

        def unexpected(failure):
            log.failure("reading the WriteTxnMarkers answer of broker {b} failed", failure, b=leader)
            return {tp: errors.UNKNOWN_SERVER_ERROR for tp in tps}

        return d.addCallbacks(answered, failed).addErrback(unexpected)

    def close(self):
        if self.client is not None:
            return self.client.close_all()
        return defer.succeed(None)
