"""A broker's membership of the cluster (Kafka's KafkaServer start-up in ZooKeeper mode and its
session handling): connect, agree on the cluster id, register ``/brokers/ids/<id>`` once the
listeners are bound, run the controller candidate, follow config change notifications, and on
a new ZooKeeper session register again (a new broker epoch) and re-run the election.

It owns the order of these steps, not what they do: the store, the controller and the metadata
cache do the work.
"""

from twisted.internet import defer, task
from twisted.logger import Logger

from kafkatw.cluster import zk_layout
from kafkatw.config import ConfigError
from kafkatw.controller.channel import ControllerChannelManager
from kafkatw.controller.controller import KafkaController
from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError

log = Logger(namespace="kafkatw.controller.registration")

#: Kafka's ZkNodeChangeNotificationListener keeps a change notification 15 minutes
CONFIG_CHANGE_EXPIRATION_MS = 15 * 60 * 1000
CONFIG_CHANGE_PURGE_INTERVAL_S = 60


def inter_broker_listener(config):
    """The inter-broker listener (``KafkaConfig.inter_broker_listener_name``); one line refusing
    a missing one or one the broker's own client cannot speak."""
    name = config.inter_broker_listener_name
    listeners = {ep.listener_name: ep for ep in config.listeners}
    if name is None:
        raise ConfigError.invalid("security.inter.broker.protocol", config["security.inter.broker.protocol"],
                                  "no listener uses it; set inter.broker.listener.name")
    if name not in listeners:
        raise ConfigError.invalid("inter.broker.listener.name", name, "it is not one of the listeners (%s)"
                                  % ", ".join(sorted(listeners)))
    if listeners[name].security_protocol not in ("PLAINTEXT", "SSL"):
        raise ConfigError.invalid("inter.broker.listener.name", name,
                                  "kafkatw's inter-broker client speaks PLAINTEXT and SSL only "
                                  "so far")
    return name


class ClusterMembership:
    """``zk``: IClusterCoordinator; ``metadata``: ZkClusterMetadata; ``network_client``: the
    controller's KafkaNetworkClient; ``meta_properties_existed``: whether this node had a cluster
    id before (then another one in ZooKeeper is the wrong cluster)."""

    def __init__(self, reactor, config, zk, metadata, network_client, meta_properties_existed):
        self._reactor = reactor
        self.config = config
        self.zk = zk
        self.metadata = metadata
        self.broker_id = config.node_id
        self.listener_name = inter_broker_listener(config)
        self._client = network_client
        self.channel = ControllerChannelManager(reactor, network_client, self.listener_name)
        self.controller = KafkaController(reactor, zk, self.broker_id, self.channel, self.listener_name,
                                          unclean_leader_election=config["unclean.leader.election.enable"])
        self._meta_existed = meta_properties_existed
        self._registration = None  # bytes written to /brokers/ids/<id>
        self._session_lost = False
        self._stopping = False
        self._last_change = None
        self._last_purge = None  # reactor seconds of the last purge of old change notifications
        #: called with the broker epoch after each registration (the replica manager's fetches
        #: and AlterPartition carry it)
        self.on_registered = []
        zk.add_state_listener(self._state_changed)

    # -- start ------------------------------------------------------------------------------------

    @defer.inlineCallbacks
    def connect(self):
        """Connect and settle the cluster id (before anything is served from this store)."""
        yield self.zk.start()
        cluster_id = yield self.zk.get_or_create_cluster_id(self.metadata.cluster_id)
        if cluster_id != self.metadata.cluster_id:
            if self._meta_existed:
                message = ("The Cluster ID %s doesn't match stored clusterId %s in meta.properties. The broker "
                           "is trying to join the wrong cluster." % (cluster_id, self.metadata.cluster_id))
                raise ConfigError(message, "zookeeper.connect")
            yield self.metadata.local.adopt_cluster_id(cluster_id)
            self.metadata.cluster_id = cluster_id
        yield self.metadata.load_client_quotas()

    @defer.inlineCallbacks
    def register(self, advertised):
        """Register with the advertised endpoints (ports bound), then stand for controller."""
        endpoints = [(ep.listener_name, ep.host, ep.port) for ep in advertised]
        protocols = {ep.listener_name: ep.security_protocol for ep in advertised}
        self._registration = zk_layout.encode_broker(self.broker_id, endpoints, protocols,
                                                     rack=self.config["broker.rack"])
        yield self._register()
        yield self._watch_config_changes()
        self.controller.startup()
        if self.config["auto.leader.rebalance.enable"]:
            self.controller.start_leader_rebalance(self.config["leader.imbalance.check.interval.seconds"],
                                                   self.config["leader.imbalance.per.broker.percentage"])

    @defer.inlineCallbacks
    def _register(self):
        """Kafka's registerBroker; while the znode of this id's previous session (a crash) is still
        there, wait for ZooKeeper to expire it, at most a session timeout and a bit."""
        deadline = self._reactor.seconds() + self.config["zookeeper.session.timeout.ms"] / 1000.0 + 5
        while True:
            try:
                epoch = yield self.zk.register_broker(self.broker_id, self._registration)
                break
            except KafkaError as e:
                if e.code != errors.BROKER_ID_NOT_REGISTERED or self._reactor.seconds() > deadline:
                    raise
                yield task.deferLater(self._reactor, 0.25, lambda: None)
        self.metadata.broker_epoch = epoch
        for listener in list(self.on_registered):
            listener(epoch)
        log.info("registered broker {id} at {path} with broker epoch {epoch}", id=self.broker_id,
                 path=zk_layout.broker_path(self.broker_id), epoch=epoch)

    # -- config changes ------------------------------------------------------------------------------

    def _config_watch(self):
        if not self._stopping:
            self._watch_config_changes().addErrback(
                lambda f: log.failure("reading config change notifications failed", f))

    @defer.inlineCallbacks
    def _watch_config_changes(self):
        # only the notifications not seen yet are read (they are never purged)
        changes = yield self.zk.config_changes(watch=self._config_watch, after=self._last_change or "")
        if self._last_change is None:  # at start-up the configs are read with the topics
            self._last_change = changes[-1][0] if changes else ""
            return
        self._maybe_purge_config_changes()
        for name, entity_type, entity in changes:
            if name > self._last_change:
                self._last_change = name
                if entity_type == "topics":
                    yield self.metadata.config_changed(entity)
                    self.controller.topic_config_changed(entity)
                elif entity_type in ("users", "clients", "ips"):
                    yield self.metadata.quota_entity_changed(entity_type + "/" + entity)
                elif entity_type == "brokers":
                    yield self.metadata.broker_config_changed(entity)

    def _maybe_purge_config_changes(self):
        """Notifications older than Kafka's 15 minutes go, checked at most once a minute
        (when notifications arrive), off the path that applies them."""
        now = self._reactor.seconds()
        if self._last_purge is not None and now - self._last_purge < CONFIG_CHANGE_PURGE_INTERVAL_S:
            return
        self._last_purge = now
        d = self.zk.purge_config_changes(CONFIG_CHANGE_EXPIRATION_MS, int(now * 1000))
        d.addErrback(lambda f: log.info("purging old config change notifications failed: {err}",
                                        err=f.getErrorMessage()))

    # -- session ---------------------------------------------------------------------------------------

    def _state_changed(self, state):
        if self._stopping:
            return
        if state == "LOST":
            log.warn("ZooKeeper session of broker {id} expired", id=self.broker_id)
            self._session_lost = True
            self.controller.session_lost()
        elif state == "CONNECTED" and self._session_lost:
            self._session_lost = False
            d = self._register() if self._registration is not None else defer.succeed(None)
            d.addCallback(lambda _: self.controller.session_reestablished())
            d.addErrback(lambda f: log.failure("registering again after a new ZooKeeper session failed", f))

    # -- log dir failures ---------------------------------------------------------------------------

    def log_dir_failed(self, directory):
        """A log dir went offline: tell the controller through ZooKeeper so the partitions it
        held get other leaders (Kafka's propagateLogDirEvent); the broker keeps serving the
        dirs still online."""
        log.warn("telling the controller that log dir {dir} of broker {id} failed", dir=directory,
                 id=self.broker_id)
        d = self.zk.propagate_log_dir_event(self.broker_id)
        d.addErrback(lambda f: log.failure("reporting the failed log dir {dir} to the controller failed", f,
                                           dir=directory))
        return d

    # -- controlled shutdown ----------------------------------------------------------------------------

    @defer.inlineCallbacks
    def _controlled_shutdown(self):
        """Kafka's controlledShutdown: ask the controller to move this broker's leaderships away
        before it stops serving, up to ``controlled.shutdown.max.retries`` times."""
        from kafkatw.protocol.messages import ControlledShutdownRequest

        backoff = self.config["controlled.shutdown.retry.backoff.ms"] / 1000.0
        request = ControlledShutdownRequest(broker_id=self.broker_id, broker_epoch=self.metadata.broker_epoch)
        for attempt in range(max(1, self.config["controlled.shutdown.max.retries"])):
            if attempt:
                yield task.deferLater(self._reactor, backoff, lambda: None)
            controller = self.metadata.live_broker(self.metadata.controller_id)
            endpoint = None if controller is None else controller.endpoints.get(self.listener_name)
            if endpoint is None:
                log.info("controlled shutdown: no controller known yet")
                continue
            try:
                response = yield self._client.send("controlled-shutdown", endpoint[0], endpoint[1], request, 3,
                                                   timeout_ms=30000)
            except Exception as e:
                log.info("controlled shutdown: asking controller {id} failed: {err}",
                         id=controller.node_id, err=e)
                continue
            remaining = ["%s-%d" % (p.topic_name, p.partition_index) for p in response.remaining_partitions]
            if response.error_code == errors.NONE and not remaining:
                log.info("controlled shutdown of broker {id} succeeded", id=self.broker_id)
                return
            log.info("controlled shutdown: {err}, partitions still led here: {left}",
                     err=errors.error_name(response.error_code), left=", ".join(remaining[:10]))
        log.warn("controlled shutdown of broker {id} did not complete: stopping anyway", id=self.broker_id)

    # -- stop ------------------------------------------------------------------------------------------

    @defer.inlineCallbacks
    def stop(self):
        """Controlled shutdown, resign, close the session (the registration goes at once: the
        controller sees this broker leave without waiting for the session timeout)."""
        self._stopping = True
        if self.config["controlled.shutdown.enable"] and self.metadata.broker_epoch != -1:
            yield self._controlled_shutdown()
        self.controller.stop_leader_rebalance()
        yield self.controller.shutdown()
        yield self.channel.shutdown()
        yield self.zk.stop()
