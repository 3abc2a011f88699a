"""The broker as a tree of Twisted services: config in, every layer wired, clean start and stop.

Owns the tree (thread pool, metadata, log manager, replica manager, group coordinator, request
handlers, socket server, one service per listener), started in that dependency order and
stopped in reverse, each stop awaited before the next; and what needs the whole tree (the
ready file, the advertised port-0 rewrite). It holds no broker logic of its own.
"""

import functools
import gc
import json
import os
import socket
import sys

import attr
from twisted.application import service
from twisted.internet import defer, threads
from twisted.logger import Logger
from twisted.python.threadpool import ThreadPool
from zope.interface import implementer

from kafkatw import crash_points
from kafkatw.config import ConfigError
from kafkatw.config.dynamic import (
    BACKGROUND_THREADS_CONFIGS,
    DynamicBrokerConfig,
    IBrokerReconfigurable,
    split_persisted,
)

log = Logger(namespace="kafkatw.service")


def make_broker_service(config, reactor=None):
    """The broker service for ``config`` (a :class:`kafkatw.config.KafkaConfig`).

    What config alone decides is checked here, before anything starts (a bad TLS store, a
    transport plug-in that cannot be loaded): a :class:`ConfigError`, one line.
    """
    return BrokerService(config, reactor=reactor)


def security_setup(config):
    """The SCRAM credential store (in the metadata log dir), ``{listener: IPrincipalBuilder}`` of
    the TLS and SASL listeners and ``{listener: SaslListener}`` of the SASL ones; a SASL listener
    that cannot authenticate anyone is a ConfigError here, before anything starts (fail closed)."""
    from kafkatw.security.credentials import CredentialStoreError, ScramCredentialStore
    from kafkatw.security.principal import principal_builders
    from kafkatw.security.sasl_config import sasl_listeners

    try:
        store = ScramCredentialStore.in_dir(config.log_dirs[0])
    except CredentialStoreError as e:
        raise ConfigError(str(e), "log.dirs") from None
    builders = principal_builders(config)
    return store, builders, sasl_listeners(config, store, builders)


def _advertised(endpoints, bound_ports):
    """Advertised endpoints with port 0 replaced by the bound port and an empty host named."""
    out = []
    for ep in endpoints:
        port = bound_ports.get(ep.listener_name, ep.port) if ep.port == 0 else ep.port
        host = ep.host or socket.getfqdn()
        out.append(attr.evolve(ep, host=host, port=port))
    return out


class OrderedMultiService(service.MultiService):
    """Children start in the order they were added and stop in reverse, one at a time:
    a child's stop (a Deferred: ports closing) completes before the one it depends on stops.
    A failing stop is logged and the others still run (the clean-shutdown marker matters).

    If a child fails to start, the children already started are stopped (in reverse, without
    waiting for their Deferreds: the reactor may not run yet) and the error is raised; the one
    that failed is not stopped (a half-loaded log must not be marked cleanly shut down)."""

    def startService(self):
        service.Service.startService(self)
        started = []
        try:
            for child in self:
                child.startService()
                started.append(child)
        except BaseException:
            self.running = 0
            for child in reversed(started):
                try:
                    defer.maybeDeferred(child.stopService).addErrback(
                        lambda f, name=child.name: log.failure("stopping {name} failed", f, name=name))
                except Exception:
                    log.failure("stopping {name} failed", name=child.name)
            raise

    @defer.inlineCallbacks
    def stopService(self):
        service.Service.stopService(self)
        for child in reversed(list(self)):
            if not child.running:
                continue
            try:
                yield defer.maybeDeferred(child.stopService)
            except Exception:
                log.failure("stopping {name} failed", name=child.name)


class ThreadPoolService(service.Service):
    """The pool for blocking disk work (Kafka's ``background.threads``); threads start lazily."""

    name = "threadpool"

    def __init__(self, size):
        self.pool = ThreadPool(minthreads=0, maxthreads=size, name="kafkatw-background")

    def startService(self):
        super().startService()
        self.pool.start()

    def stopService(self):
        super().stopService()
        self.pool.stop()


@implementer(IBrokerReconfigurable)
class DynamicBackgroundThreads:
    """``background.threads`` resizes the pool live (threads beyond the new size end when idle)."""

    reconfigurable_configs = BACKGROUND_THREADS_CONFIGS

    def __init__(self, pool):
        self.pool = pool

    def validate_reconfiguration(self, new_config):
        pass  # the config type already requires at least 1

    def reconfigure(self, old_config, new_config):
        self.pool.adjustPoolsize(maxthreads=new_config["background.threads"])


class _BrokerPart(service.Service):
    """A child that builds one component of ``broker`` when it starts and keeps it there."""

    def __init__(self, broker):
        self.broker = broker


class MetadataService(_BrokerPart):
    """Log dirs, ``meta.properties`` and the topic store; the persisted dynamic broker configs
    in force (``broker.dynamic_config``, to which later components add their live parts)."""

    name = "metadata"

    def startService(self):
        super().startService()
        from kafkatw.cluster.metadata import ClusterMetadata

        b = self.broker
        usable = []
        for i, d in enumerate(b.config.log_dirs):
            try:
                os.makedirs(d, exist_ok=True)
            except OSError as e:
                if i == 0:
                    raise  # the metadata lives there
                # as Kafka: a dir that fails at start is offline, the broker serves the others
                # (the log manager finds it unusable too and says so)
                log.error("log dir {dir} cannot be used: {e}", dir=d, e=e)
                continue
            if not os.access(d, os.W_OK):
                raise ConfigError("log dir %s is not writable" % d)
            usable.append(d)
        meta_existed = any(os.path.exists(os.path.join(d, "meta.properties")) for d in usable)
        b.metadata = ClusterMetadata.load(usable, b.config.node_id, rack=b.config["broker.rack"],
                                          reactor=b.reactor, threadpool=b.threadpool)
        if b.config["zookeeper.connect"]:
            b._start_cluster_mode(meta_existed)
        if b.metadata.broker_configs or b.metadata.default_broker_configs:
            # dynamic broker configs (AlterConfigs) persisted by an earlier run
            b.config = b.config.with_dynamic(
                b._persisted_dynamic(b.metadata.broker_configs, "broker"),
                b._persisted_dynamic(b.metadata.default_broker_configs, "default cluster"))
        b.dynamic_config = DynamicBrokerConfig(b.config)
        b.dynamic_config.add_config_listener(b._config_changed)
        threads = DynamicBackgroundThreads(b.threadpool)
        threads.reconfigure(None, b.config)  # a persisted background.threads
        b.dynamic_config.add_reconfigurable(threads)


def open_file_limit():
    """Raise the soft RLIMIT_NOFILE to the hard limit (Kafka's start scripts leave it to the
    operator; a broker of many partitions needs it), size storage's descriptor cache from it
    and say both."""
    from kafkatw.storage import descriptors

    before, soft, hard = descriptors.raise_open_file_limit()
    capacity = descriptors.capacity_for_limit(soft)
    descriptors.cache.configure(capacity)
    log.info("open file limit {soft} (soft limit was {before}, hard limit {hard}); log segments and "
             "indexes keep at most {capacity} descriptors open", before=before, soft=soft,
             hard=hard, capacity=capacity)


class LogManagerService(_BrokerPart):
    """The logs: recovery at start, then the scheduler (retention, flush, checkpoints, cleaner);
    at stop flush, checkpoints and the clean-shutdown marker."""

    name = "log-manager"

    def startService(self):
        super().startService()
        from kafkatw.server.dynamic_config import DynamicLogCleanerConfig, DynamicLogConfig
        from kafkatw.storage import LogManager

        b = self.broker
        open_file_limit()
        known = getattr(b.metadata, "topics", None) or {}
        b.log_manager = LogManager(b.config.log_dirs, b.config.values(), b.reactor, b.threadpool,
                                   {name: info.configs for name, info in known.items()})
        b.log_manager.load_logs()  # one summary line per log dir; segment detail at debug
        b.log_manager.on_all_dirs_offline = b.all_log_dirs_failed
        b.log_manager.start()
        b.dynamic_config.add_reconfigurable(DynamicLogConfig(b.log_manager))
        b.dynamic_config.add_reconfigurable(DynamicLogCleanerConfig(b.log_manager))

    def stopService(self):
        super().stopService()
        self.broker.log_manager.shutdown()


class ReplicaManagerService(_BrokerPart):
    """Leadership of the loaded partitions, produce/fetch; producer snapshots at stop."""

    name = "replica-manager"

    def startService(self):
        super().startService()
        from kafkatw.server.dynamic_config import DynamicProducerStateConfig, DynamicReplicationQuotaConfig
        from kafkatw.server.replica_manager import ReplicaManager

        b = self.broker
        b.replica_manager = ReplicaManager(b.log_manager, b.metadata, b.reactor, b.config)
        b.replica_manager.start()
        b.dynamic_config.add_reconfigurable(DynamicProducerStateConfig(b.replica_manager))
        b.dynamic_config.add_reconfigurable(DynamicReplicationQuotaConfig(b.replica_manager))

    def stopService(self):
        super().stopService()
        self.broker.replica_manager.shutdown()


class GroupCoordinatorService(_BrokerPart):
    """Consumer groups on ``__consumer_offsets`` (its partitions load in slices after start)."""

    name = "group-coordinator"

    def startService(self):
        super().startService()
        from kafkatw.coordinator.group.coordinator import GroupCoordinator

        b = self.broker
        b.group_coordinator = GroupCoordinator(b.config, b.metadata, b.replica_manager, b.log_manager,
                                               b.reactor)
        b.group_coordinator.startup()

    def stopService(self):
        super().stopService()
        self.broker.group_coordinator.shutdown()


class TransactionCoordinatorService(_BrokerPart):
    """Transactions on ``__transaction_state`` (its partitions load one per reactor turn; prepared
    commits and aborts found there get their markers again)."""

    name = "txn-coordinator"

    def startService(self):
        super().startService()
        from kafkatw.coordinator.txn.coordinator import TransactionCoordinator

        b = self.broker
        channels = {}
        if b.cluster is not None:
            channels = self._cluster_channels(b)
        b.txn_coordinator = TransactionCoordinator(b.config, b.metadata, b.replica_manager,
                                                   b.log_manager, b.reactor, b.group_coordinator,
                                                   **channels)
        b.txn_coordinator.startup()

    @staticmethod
    def _cluster_channels(b):
        """The coordinator's reach to other brokers: markers to their partitions' leaders and
        KIP-890 verification with their coordinators, over one client on the inter-broker
        listener (a connection per broker)."""
        from kafkatw.coordinator.txn.marker_channel import TransactionMarkerChannelManager
        from kafkatw.coordinator.txn.verification import RemoteVerifier
        from kafkatw.network.client import KafkaNetworkClient, inter_broker_tls

        timeout_ms = b.config["request.timeout.ms"]
        listener = b.config.inter_broker_listener_name
        client = KafkaNetworkClient(b.reactor, "broker-%d-txn-coordinator" % b.config.node_id,
                                    request_timeout_ms=timeout_ms, tls=inter_broker_tls(b.config))
        return {"marker_channel": TransactionMarkerChannelManager(
                    b.metadata, b.replica_manager, b.group_coordinator, b.config.node_id, client,
                    listener, timeout_ms),
                "verifier": RemoteVerifier(b.metadata, client, listener, timeout_ms)}

    def stopService(self):
        super().stopService()
        return self.broker.txn_coordinator.shutdown()


class RequestHandlersService(_BrokerPart):
    """``KafkaApis`` with its fetch sessions; a log for every known partition."""

    name = "request-handlers"

    def startService(self):
        super().startService()
        from kafkatw.server import features
        from kafkatw.server.apis import DEFAULT_HANDLERS, KafkaApis
        from kafkatw.server.handlers import consumer_groups
        from kafkatw.server.fetch_session import FetchManager, FetchSessionCache
        from kafkatw.security.quota import ClientQuotaEntity
        from kafkatw.server.quota import QuotaManagers

        b = self.broker
        cache = FetchSessionCache(max_entries=b.config["max.incremental.fetch.session.cache.slots"])
        quotas = QuotaManagers.from_config(b.config, b.quota_callback)
        quotas.load({ClientQuotaEntity(entity): values for entity, values in b.metadata.client_quotas.items()})
        handlers, table = DEFAULT_HANDLERS, features.FEATURES
        if "consumer" not in b.config["group.coordinator.rebalance.protocols"]:
            # clients pick the group protocol from ApiVersions: offer KIP-848 only when enabled
            handlers = tuple(h for h in DEFAULT_HANDLERS if h not in consumer_groups.HANDLERS)
            table = features.without_consumer_groups(table)
        b.apis = KafkaApis(b.config, b.metadata, b.replica_manager, FetchManager(b.reactor, cache),
                           clock=b.reactor, log_manager=b.log_manager, handlers=handlers,
                           group_coordinator=b.group_coordinator,
                           txn_coordinator=b.txn_coordinator,
                           supported_features=features.supported_features(table),
                           finalized_features=features.finalized_features(table),
                           finalized_features_epoch=features.FINALIZED_FEATURES_EPOCH,
                           dynamic_config=b.dynamic_config, scram_credentials=b.scram_credentials,
                           quotas=quotas, authorizer=b.authorizer)
        if b.cluster is not None:
            from kafkatw.server.handlers import controller_requests

            from kafkatw.server.handlers import reassignments

            for handler in controller_requests.HANDLERS + reassignments.HANDLERS:
                b.apis.register(handler)
            b.apis.controller = b.cluster.controller
            b.cluster.on_registered.append(b._registered)
            b.log_manager.dir_offline_listeners.append(b.cluster.log_dir_failed)
            # client quotas set through any broker (and those in the store at start) apply here
            b.metadata.quota_listeners.append(
                lambda changes: controller_requests.apply_quota_changes(b.apis.quotas, changes))
            from kafkatw.server.handlers.admin_configs import apply_stored_broker_configs

            b.metadata.broker_config_listeners.append(
                lambda default, configs: apply_stored_broker_configs(b.apis, default, configs))
            b.metadata.add_listener(b._cluster_topic_event)
        b.apis.delete_stray_logs()  # of topics deleted just before a crash
        b.apis.create_missing_logs()


@attr.s(frozen=True)
class AuthorizerServerInfo:
    """What an authorizer's ``start`` is told (Kafka's ``AuthorizerServerInfo``, plus where the
    built-in one keeps its ACLs and how it runs blocking writes)."""

    cluster_id = attr.ib()
    broker_id = attr.ib()
    config = attr.ib()
    log_dirs = attr.ib()
    run_blocking = attr.ib()
    reactor = attr.ib()
    #: cluster mode: the cluster coordinator (ZooKeeper), where the built-in one keeps the ACLs
    coordination_store = attr.ib(default=None)


class AuthorizerService(_BrokerPart):
    """Starts the configured authorizer (its ACLs loaded) before any listener serves, stops it last."""

    name = "authorizer"

    def startService(self):
        super().startService()
        b = self.broker
        info = AuthorizerServerInfo(
            cluster_id=b.metadata.cluster_id, broker_id=b.config.node_id, config=b.config,
            log_dirs=list(b.config.log_dirs), reactor=b.reactor,
            run_blocking=functools.partial(threads.deferToThreadPool, b.reactor, b.threadpool),
            coordination_store=b.cluster.zk if b.cluster is not None else None)
        try:
            d = b.authorizer.start(info)
        except ValueError as e:  # an unreadable ACL store: one line, nothing served
            raise ConfigError("cannot start the authorizer: %s" % (e,), "authorizer.class.name") from None
        if isinstance(d, defer.Deferred):
            # the listeners accept once it fires (SocketServerService), as Kafka's wait for the
            # authorizer's start futures; a failure keeps them closed. Every Deferred waits there:
            # ``called`` is also true of one paused on a Deferred still running, and one already
            # failed must keep them closed too (it was only logged)
            b.authorizer_started = d

    def stopService(self):
        super().stopService()
        return self.broker.authorizer.stop()


class SocketServerService(_BrokerPart):
    """The request channel, connection quotas and request log the listeners share."""

    name = "socket-server"

    def startService(self):
        super().startService()
        from kafkatw.network.dynamic import DynamicSocketServerConfig
        from kafkatw.network.listener import SocketServer
        from kafkatw.network.metrics import NetworkMetrics
        from kafkatw.network.request_log import RequestLogger
        from kafkatw.network.settings import SocketServerSettings

        b = self.broker
        b.socket_server = SocketServer(
            b.config.listeners, b.apis, b.reactor, settings=SocketServerSettings.from_config(b.config),
            request_logger=RequestLogger.from_config(b.config),
            # request time histograms cost a few microseconds a request: only when exported
            metrics=NetworkMetrics(request_times=bool(b.config["kafkatw.metrics.listener"])),
            ssl_context_factories=b.ssl_context_factories,
            transfer_failure_handler=b._on_transfer_failure,  # seed 000 §6
            transport_layers=b.transport_layers,
            sasl_listeners=b.sasl_listeners,
            principal_builders=b.principal_builders,
            ip_connection_rate=b.apis.quotas.ip_connection_rate,
        )
        if b.authorizer_started is not None:
            b.socket_server.hold_accepting_until(b.authorizer_started)
        b.dynamic_config.add_reconfigurable(DynamicSocketServerConfig(b.socket_server))

    def stopService(self):
        super().stopService()
        return self.broker.socket_server.close()


#: Kafka's policy plug-ins kafkatw does not run: set, they would be accepted and ignored, so a
#: topic a policy should refuse would be created anyway. Fail closed until they exist.
UNSUPPORTED_POLICIES = ("create.topic.policy.class.name", "alter.config.policy.class.name")


def refuse_unsupported_policies(config):
    for key in UNSUPPORTED_POLICIES:
        if config[key]:
            raise ConfigError.invalid(key, config[key], "kafkatw does not run CreateTopics/AlterConfigs "
                                      "policies yet; remove the setting")


class BrokerService(OrderedMultiService):
    """One broker (Kafka's ``BrokerServer``), single node, embedded controller."""

    name = "kafkatw-broker"

    def __init__(self, config, reactor=None):
        super().__init__()
        refuse_unsupported_policies(config)
        self.scram_credentials, self.principal_builders, self.sasl_listeners = security_setup(config)
        from kafkatw.security.quota import load_quota_callback
        self.quota_callback = load_quota_callback(config)  # a bad client.quota.callback.class stops here
        from kafkatw.security.authorizer import load_authorizer
        self.authorizer = load_authorizer(config)  # a wrong authorizer.class.name stops start-up here
        if reactor is None:
            from twisted.internet import reactor
        from kafkatw.network.listener import ListenerService, load_transport_layer
        from kafkatw.network.settings import SocketServerSettings

        self.config = config
        self.reactor = reactor
        self.halt = os._exit  # all log dirs offline (tests replace it)
        crash_points.arm(config["kafkatw.test.crash.point"])
        self.metadata = None
        self.dynamic_config = None
        self.log_manager = None
        self.replica_manager = None
        self.group_coordinator = None
        self.txn_coordinator = None
        self.apis = None
        self.socket_server = None
        self.authorizer_started = None  # the authorizer's start() Deferred, if it gave one
        self.stall_probe = None
        self.cluster = None  # controller.registration.ClusterMembership in cluster mode
        self._cluster_connected = None

        # Decided by config alone, so checked before anything starts. The TLS stack (pyOpenSSL,
        # cryptography) is imported only when a listener needs it.
        self.ssl_context_factories = {}
        if any(ep.security_protocol in ("SSL", "SASL_SSL") for ep in config.listeners):
            from kafkatw.network.tls import context_factories
            self.ssl_context_factories = context_factories(config)
        settings = SocketServerSettings.from_config(config)
        self.transport_layers = {
            ep.listener_name: load_transport_layer(ep, settings.transport_classes.get(ep.listener_name),
                                                   settings.listener_configs.get(ep.listener_name))
            for ep in config.listeners}

        pool = ThreadPoolService(config["background.threads"])
        self.threadpool = pool.pool
        # SCRAM credential writes (AlterUserScramCredentials) fsync in the pool, not on the reactor
        self.scram_credentials.run_blocking = functools.partial(threads.deferToThreadPool, reactor, pool.pool)
        for child in (pool, MetadataService(self), LogManagerService(self), ReplicaManagerService(self),
                      GroupCoordinatorService(self), TransactionCoordinatorService(self)) + \
                ((AuthorizerService(self),) if self.authorizer is not None else ()) + \
                (RequestHandlersService(self), SocketServerService(self)):
            child.setServiceParent(self)
        for ep in config.listeners:
            ListenerService(lambda: self.socket_server, ep).setServiceParent(self)
        self.metrics_service = None
        if config["kafkatw.metrics.listener"]:
            # imported only when configured: twisted.web and prometheus_client cost idle memory
            from kafkatw.metrics.web import MetricsService, parse_listener

            host, port = parse_listener(config["kafkatw.metrics.listener"])
            self.metrics_service = MetricsService(self, host, port)
            self.metrics_service.setServiceParent(self)
        self.console_service = None
        if config["kafkatw.console.listener"]:
            # imported only when configured, like the metrics endpoint
            from kafkatw.console.web import ConsoleService, parse_listener as parse_console_listener

            host, port = parse_console_listener(config["kafkatw.console.listener"])
            self.console_service = ConsoleService(self, host, port)
            self.console_service.setServiceParent(self)

    # -- start -------------------------------------------------------------------------------
    def startService(self):
        try:
            super().startService()
        except ConfigError:
            raise
        except OSError as e:
            raise ConfigError("cannot start the broker: %s" % (e,))
        config = self.config
        bound = {ep.listener_name: self.socket_server.bound_port(ep.listener_name)
                 for ep in config.listeners}
        config.advertised_listeners = _advertised(config.advertised_listeners, bound)
        for ep in config.advertised_listeners:
            log.info("Broker {node} advertises {name} {proto}://{host}:{port}", node=config.node_id,
                     name=ep.listener_name, proto=ep.security_protocol, host=ep.host, port=ep.port)
        # What start-up made (the codec, config, opened logs) lives as long as the broker: out
        # of the collector's sight, a full collection scans only what came later (on the
        # build machine one took ~60 ms and held every thread, the reactor's too; now ~3 ms).
        # Garbage is collected first: frozen objects are never collected.
        gc.collect()
        gc.freeze()
        if config["kafkatw.reactor.stall.probe.ms"] > 0:
            # from here on nothing may hold the reactor: clients are being served
            from kafkatw.stall_probe import StallProbe
            self.stall_probe = StallProbe(self.reactor, config["kafkatw.reactor.stall.probe.ms"])
            self.stall_probe.start()
        if self.cluster is not None:
            # Kafka's startup: the ports are bound (their numbers are advertised) but nobody is
            # served until this broker is registered; ready after that
            self.socket_server.set_accepting(False)
            d = self._cluster_connected
            d.addCallback(lambda _: self.cluster.register(config.advertised_listeners))
            # dynamic broker configs set in ZooKeeper while this broker was down
            d.addCallback(lambda _: self.metadata.load_broker_configs().addErrback(
                lambda f: log.failure("reading dynamic broker configs from ZooKeeper failed", f)))
            d.addCallback(lambda _: self.socket_server.set_accepting(True))
            d.addCallback(lambda _: self._write_ready_file(bound))
            d.addCallback(lambda _: log.info("kafkatw broker {node} started in cluster {cluster}",
                                             node=config.node_id, cluster=self.metadata.cluster_id))
            d.addErrback(self._cluster_failed)
            return
        self._write_ready_file(bound)
        log.info("kafkatw broker {node} started (cluster {cluster})", node=config.node_id,
                 cluster=self.metadata.cluster_id)

    # -- cluster mode ------------------------------------------------------------------------------
    def _start_cluster_mode(self, meta_existed):
        """``zookeeper.connect`` is set: the metadata is the controller's (a cache fed by
        UpdateMetadata), this node's own state stays in the embedded store; connecting starts
        now, registration waits for the bound listeners."""
        from kafkatw import registry
        from kafkatw.cluster.interfaces import IClusterCoordinator
        from kafkatw.cluster.zk_metadata import ZkClusterMetadata
        from kafkatw.controller.registration import ClusterMembership
        from kafkatw.network.client import KafkaNetworkClient, inter_broker_tls

        config = self.config
        if not config.is_set("node.id") and not config.is_set("broker.id"):
            raise ConfigError("broker.id (or node.id) must be set in cluster mode (zookeeper.connect)",
                              "broker.id")
        run_blocking = functools.partial(threads.deferToThreadPool, self.reactor, self.threadpool)
        zk = registry.load("kafkatw.cluster.coordinator.class", config["kafkatw.cluster.coordinator.class"],
                           IClusterCoordinator, reactor=self.reactor, config=config, run_blocking=run_blocking)
        local = self.metadata
        self.metadata = ZkClusterMetadata(local, zk, self.reactor, rack=config["broker.rack"],
                                          default_replication_factor=config["default.replication.factor"])
        client = KafkaNetworkClient(self.reactor, "broker-%d-controller" % config.node_id,
                                    request_timeout_ms=config["controller.socket.timeout.ms"],
                                    tls=inter_broker_tls(config))
        self.cluster = ClusterMembership(self.reactor, config, zk, self.metadata, client, meta_existed)
        self._cluster_connected = self.cluster.connect()

    def _registered(self, broker_epoch):
        """A (new) registration: the replica manager's requests carry this broker epoch."""
        self.replica_manager.broker_epoch = broker_epoch

    def _cluster_topic_event(self, event, info):
        """A topic config changed through another broker: the logs here take it."""
        from kafkatw.cluster.metadata import TOPIC_CONFIGS_CHANGED

        if event == TOPIC_CONFIGS_CHANGED and self.log_manager is not None:
            self.log_manager.update_log_config(info.name, info.configs)

    def _cluster_failed(self, failure):
        """Joining the cluster failed (ZooKeeper unreachable, the wrong cluster): one line, exit."""
        message = failure.getErrorMessage() if failure.check(ConfigError) else None
        if message is None:
            log.failure("joining the cluster failed", failure)
            message = "joining the cluster failed: %s" % (failure.getErrorMessage(),)
        self._halt_with_line(message, 2)

    def _persisted_dynamic(self, props, which):
        kept, ignored = split_persisted(props, self.config.definitions)
        for name, why in sorted(ignored.items()):
            log.error("Dynamic {which} config {name} will be ignored: {why}", which=which,
                      name=name, why=why)
        return kept

    def _config_changed(self, config):
        """A dynamic broker config update is in force: holders of the config see the new one."""
        self.config = config
        if self.replica_manager is not None:
            self.replica_manager.config = config

    def all_log_dirs_failed(self, log_dirs):
        """Every log dir is offline: nothing can be stored or served, so the broker halts at
        once with one line saying why (Kafka's LogManager.handleLogDirFailure, Exit.halt(1)); a
        clean shutdown could write nothing anyway. Acknowledged data is on disk already. The
        halt is a reactor turn later, so the request that met the failure may still be answered
        (Kafka's handler thread runs apart from the request too)."""
        message = "Shutdown broker because all log dirs in %s have failed" % ", ".join(log_dirs)
        self._halt_with_line(message, 1)

    def _halt_with_line(self, message, status):
        """Log ``message`` as critical, write it as one line to the real stderr (twistd has
        redirected sys.stderr into the log) and halt with ``status`` a reactor turn later."""
        log.critical("{message}", message=message)
        stderr = sys.__stderr__
        if stderr is not None:
            try:
                stderr.write("kafkatw: %s\n" % message)
                stderr.flush()
            except (OSError, ValueError):
                pass
        self.reactor.callLater(0, self.halt, status)

    def _on_transfer_failure(self, region, error):
        """A disk error while sending a fetched FileRegion: its log dir goes offline (KAFKA-16304)."""
        name = getattr(getattr(region, "file", None), "name", None)
        if not isinstance(name, str) or self.log_manager is None:
            return
        log_dir = os.path.dirname(os.path.dirname(os.path.abspath(name)))
        log.error("disk error sending {file} to a client: {err}", file=name, err=error)
        self.log_manager.handle_dir_failure(log_dir, error)

    def _write_ready_file(self, bound):
        path = self.config["kafkatw.ready.file"]
        if not path:
            return
        listeners = [{"name": ep.listener_name, "security_protocol": ep.security_protocol,
                      "host": ep.host, "port": bound[ep.listener_name]} for ep in self.config.listeners]
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            info = {"node_id": self.config.node_id, "pid": os.getpid(), "listeners": listeners}
            if self.metrics_service is not None:
                info["metrics_port"] = self.metrics_service.bound_port()
            if self.console_service is not None:
                info["console_port"] = self.console_service.bound_port()
            json.dump(info, f)
        os.replace(tmp, path)

    # -- stop --------------------------------------------------------------------------------
    @defer.inlineCallbacks
    def stopService(self):
        if self.stall_probe is not None:
            self.stall_probe.stop()  # shutdown flushes on the reactor thread, by design
        if self.cluster is not None:
            try:
                yield self.cluster.stop()
            except Exception:
                log.failure("leaving the cluster failed")
        yield super().stopService()
        log.info("kafkatw broker stopped cleanly")
