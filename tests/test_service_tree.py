"""The broker's service tree in process, on a ``MemoryReactorClock``: built from config, started
in dependency order, serving a request through its listener, stopped in reverse."""

import json
import os

from twisted.internet import defer
from twisted.internet.address import IPv4Address
from twisted.internet.error import CannotListenError
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.trial import unittest
from zope.interface import implementer

from kafkatw.config import ConfigError, KafkaConfig
from kafkatw.network.transport import ITransportLayer
from kafkatw.protocol import messages as m
from kafkatw.protocol.parts import join_parts
from kafkatw.service import BrokerService, OrderedMultiService, make_broker_service
from kafkatw.storage import checkpoint

from tests.test_network_support import api_versions_frame, frame, split_responses

ORDER = ["threadpool", "metadata", "log-manager", "replica-manager", "group-coordinator",
         "txn-coordinator", "request-handlers", "socket-server", "listener-INTERNAL", "listener-EXTERNAL"]


@implementer(ITransportLayer)
class StringTransportLayer:
    """Writes a response's bytes to a ``StringTransport`` at once (no socket to sendfile to)."""

    security_protocols = ("PLAINTEXT",)
    batch_answers = False

    def send(self, transport, parts):
        raise AssertionError("the connection asks for send_now")

    def send_now(self, transport, parts):
        data = join_parts(parts)
        transport.write(data)
        return len(data)


class ServiceTreeTests(unittest.TestCase):
    def setUp(self):
        self.dir = os.path.abspath(self.mktemp())
        self.ready = os.path.join(self.dir, "ready.json")
        self.props = {
            "listeners": "INTERNAL://127.0.0.1:19092,EXTERNAL://:19093",
            "advertised.listeners": "INTERNAL://127.0.0.1:19092,EXTERNAL://broker.example:19093",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "log.dirs": os.path.join(self.dir, "logs"),
            "background.threads": "3",
            "socket.listen.backlog.size": "77",
            "kafkatw.ready.file": self.ready,
            "listener.name.internal.transport.class": __name__ + ".StringTransportLayer",
            "listener.name.external.transport.class": __name__ + ".StringTransportLayer",
        }
        self.reactor = MemoryReactorClock()

    def broker(self):
        broker = make_broker_service(KafkaConfig.from_properties(self.props), reactor=self.reactor)
        self.events = []
        for child in broker:
            self._record(child)
        return broker

    def _record(self, child):
        start, stop = child.startService, child.stopService

        def started():
            self.events.append(("start", child.name))
            return start()

        def stopped():
            self.events.append(("stop", child.name))
            return stop()

        child.startService, child.stopService = started, stopped

    def connect(self, listener_index):
        port, factory, backlog, interface = self.reactor.tcpServers[listener_index]
        proto = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 50000 + listener_index))
        transport = StringTransport(hostAddress=IPv4Address("TCP", interface or "0.0.0.0", port),
                                    peerAddress=IPv4Address("TCP", "127.0.0.1", 50000 + listener_index))
        proto.makeConnection(transport)
        return proto, transport

    def test_tree_is_built_from_config_before_start(self):
        broker = self.broker()
        self.assertIsInstance(broker, OrderedMultiService)
        self.assertEqual([s.name for s in broker], ORDER)
        self.assertEqual(broker.threadpool.max, 3)  # background.threads
        self.assertEqual(self.reactor.tcpServers, [])
        self.assertFalse(os.path.exists(self.props["log.dirs"]))  # nothing touched yet
        self.assertEqual({type(layer) for layer in broker.transport_layers.values()}, {StringTransportLayer})

    def test_start_serve_stop(self):
        broker = self.broker()
        broker.startService()
        self.assertEqual(self.events, [("start", name) for name in ORDER])
        self.assertTrue(broker.running)
        self.assertTrue(broker.threadpool.started)
        # one listener service per listener, bound through serverFromString("tcp:...")
        self.assertEqual([(p, b, i) for p, _, b, i in self.reactor.tcpServers],
                         [(19092, 77, "127.0.0.1"), (19093, 77, "")])
        with open(self.ready) as f:
            ready = json.load(f)
        self.assertEqual([(x["name"], x["port"]) for x in ready["listeners"]],
                         [("INTERNAL", 19092), ("EXTERNAL", 19093)])

        # a Metadata request on the external listener, answered by the whole tree
        proto, transport = self.connect(1)
        proto.dataReceived(api_versions_frame(1) + frame(3, 12, 2, m.MetadataRequest(topics=None)))
        self.reactor.advance(0)
        answers = split_responses(transport.value())
        self.assertEqual([cid for cid, _ in answers], [1, 2])
        metadata = m.MetadataResponse.decode(answers[1][1][4 + 1:], 12)  # correlation id, header tags
        self.assertEqual([(b.node_id, b.host, b.port) for b in metadata.brokers],
                         [(1, "broker.example", 19093)])
        self.assertEqual(metadata.topics, [])
        self.assertEqual(broker.socket_server.metrics.requests_total["Metadata"], 1)

        self.events = []
        d = broker.stopService()
        self.assertEqual(self.successResultOf(d), None)
        self.assertEqual(self.events, [("stop", name) for name in reversed(ORDER)])
        self.assertTrue(transport.disconnecting)  # the listener closed its connection
        self.assertFalse(broker.threadpool.started)
        marker = os.path.join(self.props["log.dirs"], checkpoint.CLEAN_SHUTDOWN_FILE)
        self.assertTrue(os.path.exists(marker))

    def test_background_threads_is_dynamic(self):
        self.props["background.threads"] = "4"
        broker = self.broker()
        broker.startService()
        self.addCleanup(broker.stopService)
        self.assertEqual(broker.threadpool.max, 4)
        broker.dynamic_config.update(dynamic_broker={"background.threads": "6"})
        self.assertEqual((broker.threadpool.max, broker.config["background.threads"]), (6, 6))

    def test_a_persisted_background_threads_sizes_the_pool_at_start(self):
        broker = self.broker()
        broker.startService()
        self.successResultOf(broker.stopService())
        # persisted as AlterConfigs would (written inline here: this reactor runs no threads)
        from kafkatw.cluster.metadata import ClusterMetadata

        stored = ClusterMetadata.load(broker.config.log_dirs, broker.config.node_id)
        self.successResultOf(stored.set_broker_configs({"background.threads": "2"}))
        broker = self.broker()
        self.assertEqual(broker.threadpool.max, 3)  # the static value, until metadata is read
        broker.startService()
        self.addCleanup(broker.stopService)
        self.assertEqual(broker.threadpool.max, 2)

    def test_a_stop_waits_for_the_one_after_it(self):
        """The socket server closes only after every listener's port has closed."""
        broker = self.broker()
        broker.startService()
        port = broker.socket_server.factories["EXTERNAL"].port
        closing = defer.Deferred()
        port.stopListening = lambda: closing
        self.events = []
        d = broker.stopService()
        self.assertEqual(self.events, [("stop", "listener-EXTERNAL")])
        self.assertNoResult(d)
        closing.callback(None)
        self.assertEqual(self.events, [("stop", name) for name in reversed(ORDER)])
        self.successResultOf(d)

    def test_a_failed_start_stops_what_had_started(self):
        listen = self.reactor.listenTCP

        def listen_tcp(port, factory, backlog=50, interface=""):
            if port == 19093:
                raise CannotListenError(interface, port, OSError(98, "Address already in use"))
            return listen(port, factory, backlog, interface)

        self.reactor.listenTCP = listen_tcp
        broker = self.broker()
        e = self.assertRaises(ConfigError, broker.startService)
        self.assertEqual(str(e), "Socket server failed to bind to 0.0.0.0:19093 (listener EXTERNAL): "
                                 "Address already in use")
        self.assertFalse(broker.running)
        started = ORDER[:-1]
        self.assertEqual(self.events, [("start", name) for name in ORDER] +
                         [("stop", name) for name in reversed(started)])
        self.assertFalse(broker.threadpool.started)
        marker = os.path.join(self.props["log.dirs"], checkpoint.CLEAN_SHUTDOWN_FILE)
        self.assertTrue(os.path.exists(marker))  # the logs had loaded: closed cleanly
        self.assertFalse(os.path.exists(self.ready))

    def test_bad_transport_is_refused_while_building(self):
        self.props["listener.name.external.transport.class"] = "SSH"
        e = self.assertRaises(ConfigError, self.broker)
        self.assertEqual(str(e), "Invalid value SSH for configuration listener.name.external.transport.class: "
                         "no ITransportLayer plug-in is registered under that name (registered: PLAINTEXT, "
                         "SSL) and it is not a dotted Python name")
        self.assertFalse(os.path.exists(self.props["log.dirs"]))

    def test_policy_classes_are_refused_not_ignored(self):
        for key in ("create.topic.policy.class.name", "alter.config.policy.class.name"):
            props = dict(self.props, **{key: "my.pkg.Policy"})
            e = self.assertRaises(ConfigError, BrokerService, KafkaConfig.from_properties(props),
                                  reactor=MemoryReactorClock())
            self.assertEqual(str(e), "Invalid value my.pkg.Policy for configuration %s: kafkatw does not run "
                             "CreateTopics/AlterConfigs policies yet; remove the setting" % key)
        self.assertFalse(os.path.exists(self.props["log.dirs"]))


class SizesTests(unittest.SynchronousTestCase):
    def test_pool_size_default_is_kafkas_background_threads(self):
        broker = BrokerService(KafkaConfig.from_properties({"log.dirs": "/nonexistent"}),
                               reactor=MemoryReactorClock())
        self.assertEqual(broker.threadpool.max, 10)


class ServerDescriptionTests(unittest.SynchronousTestCase):
    """A listener's host survives ``serverFromString`` quoting (IPv6 colons, empty = all)."""

    def listen(self, host):
        from kafkatw.network.listener import server_description
        from kafkatw.config import Endpoint
        from twisted.internet.endpoints import serverFromString
        from twisted.internet.protocol import ServerFactory

        reactor = MemoryReactorClock()
        description = server_description(Endpoint("L", "PLAINTEXT", host, 9092), 50)
        serverFromString(reactor, description).listen(ServerFactory())
        return description, reactor.tcpServers[0][2:]

    def test_hosts(self):
        self.assertEqual(self.listen("127.0.0.1"), ("tcp:port=9092:interface=127.0.0.1:backlog=50",
                                                    (50, "127.0.0.1")))
        self.assertEqual(self.listen("::1"), (r"tcp:port=9092:interface=\:\:1:backlog=50", (50, "::1")))
        self.assertEqual(self.listen(""), ("tcp:port=9092:interface=:backlog=50", (50, "")))
