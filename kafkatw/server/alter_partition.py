"""AlterPartitionManager: a leader's ISR changes sent to the controller as AlterPartition
(Kafka's DefaultAlterPartitionManager): queued per partition (one in flight each), batched
into one request at a time, retried after NOT_CONTROLLER, a lost connection or a timeout.
Which ISR to propose and what to do with the answer is the Partition's.
"""

import attr
from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import implementer

from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError
from kafkatw.protocol.messages import AlterPartitionRequest
from kafkatw.server.interfaces import IAlterPartitionManager

log = Logger()

#: v2: topic ids and plain ISR lists (what a ZooKeeper-mode controller of Kafka 3.x takes)
ALTER_PARTITION_VERSION = 2
#: seconds before a request that failed or was refused is sent again: a fixed wait
#: (retry.backoff.ms is a client config, not a broker's)
RETRY_BACKOFF_S = 0.1
CONTROLLER_NODE_KEY = "controller"  # with the controller's id, the client's connection key


@attr.s(slots=True, frozen=True)
class LeaderAndIsr:
    """The partition state the controller answers with."""

    leader = attr.ib()
    leader_epoch = attr.ib()
    isr = attr.ib()
    partition_epoch = attr.ib()
    leader_recovery_state = attr.ib(default=0)


@attr.s(slots=True)
class _Item:
    topic = attr.ib()
    partition = attr.ib()
    topic_id = attr.ib()
    leader_epoch = attr.ib()
    new_isr = attr.ib()
    partition_epoch = attr.ib()
    leader_recovery_state = attr.ib()
    deferred = attr.ib()


@implementer(IAlterPartitionManager)
class AlterPartitionManager:
    """``client``: a KafkaNetworkClient; ``controller_endpoint()`` gives ``(controller id,
    (host, port))`` of the controller's inter-broker listener, or None when none is known;
    ``broker_epoch()`` this broker's epoch; ``clock`` a reactor (callLater)."""

    def __init__(self, client, broker_id, broker_epoch, controller_endpoint, clock):
        self.client = client
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.controller_endpoint = controller_endpoint
        self.clock = clock
        self._unsent = {}  # (topic, partition) -> _Item
        self._inflight = None  # {(topic, partition): _Item} of the request on the wire
        self._retry = None
        self._running = False
        self._controller_key = None

    @classmethod
    def from_config(cls, config, metadata, reactor, broker_epoch, client=None):
        """The broker's manager: the controller from ``metadata`` (``controller_id``,
        ``live_broker(id).endpoints``) on ``config``'s inter-broker listener."""
        if client is None:
            from kafkatw.network.client import KafkaNetworkClient, inter_broker_tls
            client = KafkaNetworkClient(reactor, "broker-%d-alter-partition" % metadata.node_id,
                                        request_timeout_ms=int(config.get(
                                            "controller.socket.timeout.ms") or 30000),
                                        tls=inter_broker_tls(config))
        listener = getattr(config, "inter_broker_listener_name", None) or "PLAINTEXT"

        def controller_endpoint():
            cid = metadata.controller_id
            if cid is None or cid < 0:
                return None
            broker = metadata.live_broker(cid)
            if broker is None or listener not in broker.endpoints:
                return None
            return cid, tuple(broker.endpoints[listener])

        return cls(client, metadata.node_id, broker_epoch, controller_endpoint, reactor)

    def start(self):
        self._running = True
        self._maybe_send()

    def shutdown(self):
        self._running = False
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        self._retry = None
        items = list(self._unsent.values()) + list((self._inflight or {}).values())
        self._unsent = {}
        self._inflight = None
        for item in items:
            item.deferred.errback(KafkaError(errors.OPERATION_NOT_ATTEMPTED, "shutting down"))

    def submit(self, topic, partition, topic_id, leader_epoch, new_isr, partition_epoch,
               leader_recovery_state=0):
        tp = (topic, partition)
        if tp in self._unsent or (self._inflight is not None and tp in self._inflight):
            return defer.fail(KafkaError(errors.OPERATION_NOT_ATTEMPTED,
                                         "an AlterPartition of %s-%d is in flight" % tp))
        d = defer.Deferred()
        self._unsent[tp] = _Item(topic, partition, topic_id, leader_epoch, list(new_isr),
                                 partition_epoch, leader_recovery_state, d)
        self._maybe_send()
        return d

    # -- sending ---------------------------------------------------------------------------

    def _schedule_retry(self):
        if self._retry is None and self._running:
            def retry():
                self._retry = None
                self._maybe_send()
            self._retry = self.clock.callLater(RETRY_BACKOFF_S, retry)

    def _maybe_send(self):
        if not self._running or self._inflight is not None or not self._unsent \
                or self._retry is not None:
            return
        target = self.controller_endpoint()
        if target is None:
            self._schedule_retry()
            return
        controller_id, (host, port) = target
        batch, self._unsent = self._unsent, {}
        self._inflight = batch
        request = self._request(batch)
        key = (CONTROLLER_NODE_KEY, controller_id)
        if self._controller_key is not None and self._controller_key != key:
            self.client.close(self._controller_key)  # the controller moved
        self._controller_key = key
        d = self.client.send(key, host, port, request, ALTER_PARTITION_VERSION)
        d.addCallbacks(self._answered, self._failed, callbackArgs=(batch,), errbackArgs=(batch,))

    def _request(self, batch):
        topics = {}
        for item in batch.values():
            t = topics.get(item.topic)
            if t is None:
                t = topics[item.topic] = AlterPartitionRequest.TopicData(
                    topic_id=item.topic_id or bytes(16), partitions=[])
            t.partitions.append(AlterPartitionRequest.PartitionData(
                partition_index=item.partition, leader_epoch=item.leader_epoch,
                new_isr=item.new_isr, leader_recovery_state=item.leader_recovery_state,
                partition_epoch=item.partition_epoch))
        return AlterPartitionRequest(broker_id=self.broker_id, broker_epoch=self.broker_epoch(),
                                     topics=list(topics.values()))

    def _requeue(self, batch):
        for tp, item in batch.items():
            self._unsent.setdefault(tp, item)

    def _failed(self, failure, batch):
        if self._inflight is not batch:
            return
        self._inflight = None
        log.info("AlterPartition to the controller failed ({err}); retrying",
                 err=failure.getErrorMessage())
        self._requeue(batch)
        self._schedule_retry()

    def _answered(self, response, batch):
        if self._inflight is not batch:
            return
        self._inflight = None
        if response.error_code != errors.NONE:
            # NOT_CONTROLLER (the controller moved), STALE_BROKER_EPOCH...: all again, later
            log.info("AlterPartition answered {err}; retrying",
                     err=errors.error_name(response.error_code))
            self._requeue(batch)
            self._schedule_retry()
            return
        by_id = {}
        for item in batch.values():
            by_id[(item.topic_id or bytes(16), item.partition)] = item
        answered = set()
        for t in response.topics:
            for p in t.partitions:
                item = by_id.get((t.topic_id, p.partition_index))
                if item is None:
                    continue
                answered.add((item.topic, item.partition))
                if p.error_code != errors.NONE:
                    item.deferred.errback(KafkaError(p.error_code))
                else:
                    item.deferred.callback(LeaderAndIsr(p.leader_id, p.leader_epoch,
                                                        list(p.isr), p.partition_epoch,
                                                        p.leader_recovery_state))
        for tp, item in batch.items():
            if tp not in answered:  # the controller did not answer it: Kafka fails it too
                item.deferred.errback(KafkaError(errors.UNKNOWN_SERVER_ERROR,
                                                 "no answer for %s-%d" % tp))
        self._maybe_send()
