"""The broker as a Twisted service: config in, every layer wired, clean start and stop.

Owns the order of start-up (log dirs and metadata, storage recovery, replica manager, request
handlers, then listeners) and of shutdown (listeners first, then storage flush, checkpoints and
the clean-shutdown marker). It holds no broker logic of its own.
"""

import json
import os
import socket

import attr
from twisted.application import service
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.threadpool import ThreadPool

from kafkatw.config import ConfigError
from kafkatw.config.dynamic import DynamicBrokerConfig, split_persisted

log = Logger(namespace="kafkatw.service")


def make_broker_service(config, reactor=None):
    """The broker service for ``config`` (a :class:`kafkatw.config.KafkaConfig`)."""
    return BrokerService(config, reactor=reactor)


def _advertised(endpoints, bound_ports):
    """Advertised endpoints with port 0 replaced by the bound port and an empty host named."""
    out = []
    for ep in endpoints:
        port = bound_ports.get(ep.listener_name, ep.port) if ep.port == 0 else ep.port
        host = ep.host or socket.getfqdn()
        out.append(attr.evolve(ep, host=host, port=port))
    return out


class BrokerService(service.MultiService):
    """One broker (Kafka's ``BrokerServer``), single node, embedded controller."""

    name = "kafkatw-broker"

    def __init__(self, config, reactor=None):
        super().__init__()
        if reactor is None:
            from twisted.internet import reactor
        self.config = config
        self.reactor = reactor
        self.threadpool = None
        self.metadata = None
        self.log_manager = None
        self.replica_manager = None
        self.group_coordinator = None
        self.apis = None
        self.socket_server = None
        self.dynamic_config = None

    # -- start -------------------------------------------------------------------------------
    def startService(self):
        super().startService()
        try:
            self._start()
        except ConfigError:
            raise
        except OSError as e:
            raise ConfigError("cannot start the broker: %s" % (e,))

    def _start(self):
        from kafkatw.cluster.metadata import ClusterMetadata
        from kafkatw.coordinator.group.coordinator import GroupCoordinator
        from kafkatw.network.dynamic import DynamicSocketServerConfig
        from kafkatw.network.listener import SocketServer
        from kafkatw.network.request_log import RequestLogger
        from kafkatw.network.settings import SocketServerSettings
        from kafkatw.server import features
        from kafkatw.server.apis import KafkaApis
        from kafkatw.server.dynamic_config import (
            DynamicLogCleanerConfig,
            DynamicLogConfig,
            DynamicProducerStateConfig,
        )
        from kafkatw.server.fetch_session import FetchManager, FetchSessionCache
        from kafkatw.server.replica_manager import ReplicaManager
        from kafkatw.storage import LogManager

        config = self.config
        for d in config.log_dirs:
            os.makedirs(d, exist_ok=True)
            if not os.access(d, os.W_OK):
                raise ConfigError("log dir %s is not writable" % d)

        # TLS key/trust stores are read before anything starts: a bad file fails fast. The
        # TLS stack (pyOpenSSL, cryptography) is imported only when a listener needs it.
        ssl_context_factories = {}
        if any(ep.security_protocol in ("SSL", "SASL_SSL") for ep in config.listeners):
            from kafkatw.network.tls import context_factories
            ssl_context_factories = context_factories(config)

        self.threadpool = ThreadPool(minthreads=0, maxthreads=4, name="kafkatw-io")
        self.threadpool.start()

        self.metadata = ClusterMetadata.load(config.log_dirs, config.node_id)
        if self.metadata.broker_configs or self.metadata.default_broker_configs:
            # dynamic broker configs (AlterConfigs) persisted by an earlier run
            config = self.config = config.with_dynamic(
                self._persisted_dynamic(self.metadata.broker_configs, "broker"),
                self._persisted_dynamic(self.metadata.default_broker_configs, "default cluster"))
        self.dynamic_config = DynamicBrokerConfig(config)
        self.dynamic_config.add_config_listener(self._config_changed)
        self.log_manager = LogManager(config.log_dirs, config.values(), self.reactor, self.threadpool)
        self.log_manager.load_logs()
        for line in self.log_manager.recovery_summary:
            log.info("recovery: {line}", line=line)

        self.replica_manager = ReplicaManager(self.log_manager, self.metadata, self.reactor, config)
        self.replica_manager.start()
        cache = FetchSessionCache(max_entries=config["max.incremental.fetch.session.cache.slots"])
        fetch_manager = FetchManager(self.reactor, cache)
        # the group coordinator on __consumer_offsets (loads it after start-up)
        self.group_coordinator = GroupCoordinator(config, self.metadata, self.replica_manager,
                                                  self.log_manager, self.reactor)
        self.apis = KafkaApis(config, self.metadata, self.replica_manager, fetch_manager,
                              clock=self.reactor, log_manager=self.log_manager,
                              group_coordinator=self.group_coordinator,
                              supported_features=features.supported_features(),
                              finalized_features=features.finalized_features(),
                              finalized_features_epoch=features.FINALIZED_FEATURES_EPOCH,
                              dynamic_config=self.dynamic_config)
        self.apis.create_missing_logs()
        self.group_coordinator.startup()
        self.log_manager.start()
        self.socket_server = SocketServer(
            config.listeners, self.apis, self.reactor,
            settings=SocketServerSettings.from_config(config),
            request_logger=RequestLogger.from_config(config),
            ssl_context_factories=ssl_context_factories,
            transfer_failure_handler=self._on_transfer_failure,  # seed 000 §6
        )
        self.socket_server.start()
        # the components that apply dynamic broker configs live (AlterConfigs)
        self.dynamic_config.add_reconfigurable(DynamicLogConfig(self.log_manager))
        self.dynamic_config.add_reconfigurable(DynamicLogCleanerConfig(self.log_manager))
        self.dynamic_config.add_reconfigurable(DynamicProducerStateConfig(self.replica_manager))
        self.dynamic_config.add_reconfigurable(DynamicSocketServerConfig(self.socket_server))
        bound = {ep.listener_name: self.socket_server.bound_port(ep.listener_name)
                 for ep in config.listeners}
        config.advertised_listeners = _advertised(config.advertised_listeners, bound)
        for ep in config.advertised_listeners:
            log.info("Broker {node} advertises {name} {proto}://{host}:{port}", node=config.node_id,
                     name=ep.listener_name, proto=ep.security_protocol, host=ep.host, port=ep.port)
        self._write_ready_file(bound)
        log.info("kafkatw broker {node} started (cluster {cluster})", node=config.node_id,
                 cluster=self.metadata.cluster_id)

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
            json.dump({"node_id": self.config.node_id, "pid": os.getpid(), "listeners": listeners}, f)
        os.replace(tmp, path)

    # -- stop --------------------------------------------------------------------------------
    @defer.inlineCallbacks
    def stopService(self):
        yield defer.maybeDeferred(super().stopService)
        if self.socket_server is not None:
            yield self.socket_server.stop()
        if self.group_coordinator is not None:
            self.group_coordinator.shutdown()
        if self.replica_manager is not None:
            self.replica_manager.shutdown()  # producer-state snapshots
        if self.log_manager is not None:
            self.log_manager.shutdown()
        if self.threadpool is not None:
            self.threadpool.stop()
        log.info("kafkatw broker stopped cleanly")
