"""Kafka's ControllerChannelManager: the controller's requests to each live broker over the
inter-broker listener, one in flight per broker and in order, retried until answered or the
broker is gone; and the builders of LeaderAndIsr, UpdateMetadata and StopReplica.

It decides nothing: the controller says what to send to whom.
"""

from twisted.internet import defer
from twisted.logger import Logger

from kafkatw.cluster.state import SECURITY_PROTOCOL_IDS
from kafkatw.network.client import NodeUnavailableError, RequestTimeoutError
from kafkatw.protocol import messages as m

log = Logger(namespace="kafkatw.controller.channel")

LEADER_AND_ISR_VERSION = 6  # ZooKeeper-mode Kafka 3.x: topic ids, leader recovery state
UPDATE_METADATA_VERSION = 7
STOP_REPLICA_VERSION = 3



class _BrokerQueue:
    __slots__ = ("info", "queue", "in_flight", "retry")

    def __init__(self, info):
        self.info = info
        self.queue = []  # [(request, version, Deferred)]
        self.in_flight = False
        self.retry = None


#: the wait before a request to a broker is sent again (a fixed 100 ms, as AlterPartition's
#: retry: retry.backoff.ms is a client config, not a broker's)
RETRY_BACKOFF_S = 0.1


class ControllerChannelManager:
    """Queues per broker. ``client`` is a KafkaNetworkClient; ``listener_name`` the inter-broker
    listener whose endpoint each BrokerInfo names."""

    def __init__(self, reactor, client, listener_name):
        self._reactor = reactor
        self._client = client
        self._listener = listener_name
        self._brokers = {}

    def add_broker(self, info):
        existing = self._brokers.get(info.node_id)
        if existing is not None and existing.info == info:
            return
        if existing is not None:
            self.remove_broker(info.node_id)
        self._brokers[info.node_id] = _BrokerQueue(info)

    def remove_broker(self, broker_id):
        """Forget a broker: what is queued for it fails (the controller no longer waits on it)."""
        q = self._brokers.pop(broker_id, None)
        if q is None:
            return
        if q.retry is not None and q.retry.active():
            q.retry.cancel()
        self._client.close(broker_id)
        queued, q.queue = q.queue, []
        for _, _, d in queued:
            d.errback(NodeUnavailableError("broker %d is no longer live" % broker_id))

    def remove_all_brokers(self):
        for broker_id in list(self._brokers):
            self.remove_broker(broker_id)

    def shutdown(self):
        self.remove_all_brokers()
        return self._client.close_all()

    def send(self, broker_id, request, version):
        """A Deferred of the broker's response; fails with NodeUnavailableError if the broker is
        not (or no longer) live."""
        q = self._brokers.get(broker_id)
        if q is None:
            return defer.fail(NodeUnavailableError("broker %d is not live" % broker_id))
        d = defer.Deferred()
        q.queue.append((request, version, d))
        self._pump(broker_id, q)
        return d

    def _pump(self, broker_id, q):
        if q.in_flight or not q.queue or self._brokers.get(broker_id) is not q:
            return
        endpoint = q.info.endpoints.get(self._listener)
        if endpoint is None:
            _, _, d = q.queue.pop(0)
            d.errback(NodeUnavailableError("broker %d has no %s listener" % (broker_id, self._listener)))
            return self._pump(broker_id, q)
        request, version, d = q.queue[0]
        q.in_flight = True
        sent = self._client.send(broker_id, endpoint[0], endpoint[1], request, version)
        sent.addCallbacks(self._answered, self._failed, callbackArgs=(broker_id, q, d),
                          errbackArgs=(broker_id, q))

    def _answered(self, response, broker_id, q, d):
        q.in_flight = False
        if self._brokers.get(broker_id) is not q:
            return
        q.queue.pop(0)
        d.callback(response)
        self._pump(broker_id, q)

    def _failed(self, failure, broker_id, q):
        """Kafka's RequestSendThread: the same request again after a back-off, while the broker
        is live (a broker that died is removed by the controller, failing the queue)."""
        q.in_flight = False
        if self._brokers.get(broker_id) is not q:
            return
        if not failure.check(NodeUnavailableError, RequestTimeoutError):
            log.failure("request to broker {id} failed", failure, id=broker_id)
        q.retry = self._reactor.callLater(RETRY_BACKOFF_S, self._pump, broker_id, q)


# -- request builders --------------------------------------------------------------------------

def leader_and_isr_request(controller_id, controller_epoch, broker_epoch, partitions, topic_ids,
                           live_leaders, listener_name, is_new=()):
    """``partitions``: ``{(topic, p): (LeaderAndIsr, replicas)}``; ``live_leaders``: BrokerInfos."""
    P = m.LeaderAndIsrRequest.LeaderAndIsrPartitionState
    topics = {}
    for (topic, p), (state, replicas) in sorted(partitions.items()):
        topics.setdefault(topic, []).append(P(
            topic_name=topic, partition_index=p, controller_epoch=state.controller_epoch,
            leader=state.leader, leader_epoch=state.leader_epoch, isr=list(state.isr),
            partition_epoch=state.partition_epoch, replicas=list(replicas), adding_replicas=[],
            removing_replicas=[], is_new=(topic, p) in is_new,
            leader_recovery_state=state.leader_recovery_state))
    return m.LeaderAndIsrRequest(
        controller_id=controller_id, controller_epoch=controller_epoch, broker_epoch=broker_epoch, type=0,
        topic_states=[m.LeaderAndIsrRequest.LeaderAndIsrTopicState(
            topic_name=t, topic_id=topic_ids[t], partition_states=states) for t, states in topics.items()],
        live_leaders=[m.LeaderAndIsrRequest.LeaderAndIsrLiveLeader(
            broker_id=b.node_id, host_name=b.endpoints[listener_name][0], port=b.endpoints[listener_name][1])
            for b in live_leaders if listener_name in b.endpoints])


def update_metadata_request(controller_id, controller_epoch, broker_epoch, partitions, topic_ids,
                            live_brokers):
    """``partitions``: ``{(topic, p): (LeaderAndIsr, replicas, offline replicas)}``."""
    P = m.UpdateMetadataRequest.UpdateMetadataPartitionState
    topics = {}
    for (topic, p), (state, replicas, offline) in sorted(partitions.items()):
        topics.setdefault(topic, []).append(P(
            topic_name=topic, partition_index=p, controller_epoch=state.controller_epoch,
            leader=state.leader, leader_epoch=state.leader_epoch, isr=list(state.isr),
            zk_version=state.partition_epoch, replicas=list(replicas), offline_replicas=list(offline)))
    brokers = []
    for b in sorted(live_brokers, key=lambda b: b.node_id):
        brokers.append(m.UpdateMetadataRequest.UpdateMetadataBroker(
            id=b.node_id, rack=b.rack,
            endpoints=[m.UpdateMetadataRequest.UpdateMetadataEndpoint(
                port=port, host=host, listener=name,
                security_protocol=SECURITY_PROTOCOL_IDS.get(b.security_protocols.get(name, name), 0))
                for name, (host, port) in b.endpoints.items()]))
    return m.UpdateMetadataRequest(
        controller_id=controller_id, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
        topic_states=[m.UpdateMetadataRequest.UpdateMetadataTopicState(
            topic_name=t, topic_id=topic_ids[t], partition_states=states) for t, states in topics.items()],
        live_brokers=brokers)


def stop_replica_request(controller_id, controller_epoch, broker_epoch, partitions):
    """``partitions``: ``[(topic, p, leader_epoch, delete)]``."""
    topics = {}
    for topic, p, leader_epoch, delete in partitions:
        topics.setdefault(topic, []).append(m.StopReplicaRequest.StopReplicaPartitionState(
            partition_index=p, leader_epoch=leader_epoch, delete_partition=delete))
    return m.StopReplicaRequest(
        controller_id=controller_id, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
        topic_states=[m.StopReplicaRequest.StopReplicaTopicState(topic_name=t, partition_states=ps)
                      for t, ps in sorted(topics.items())])
