"""Transport layers are plug-ins: a listener takes its layer from the registry by its security
protocol, or the one ``listener.name.<l>.transport.class`` names, verified once per listener."""

from twisted.internet import defer, protocol, reactor
from twisted.trial import unittest
from zope.interface import implementer

from kafkatw import registry
from kafkatw.config import ConfigError, KafkaConfig
from kafkatw.network.listener import SocketServer, load_transport_layer, transport_key
from kafkatw.config import Endpoint
from kafkatw.network.settings import SocketServerSettings
from kafkatw.network.transport import ITransportLayer, PlaintextTransportLayer, TlsTransportLayer
from kafkatw.protocol.parts import parts_size

from tests.test_network_server import _Client
from tests.test_network_support import PLAINTEXT, ScriptedHandler, api_versions_frame


@implementer(ITransportLayer)
class CountingLayer(PlaintextTransportLayer):
    """Plaintext, counting what it is asked to send and what it was configured with."""

    instances = []

    def __init__(self):
        self.bytes = 0
        self.configs = None
        CountingLayer.instances.append(self)

    def configure(self, configs):
        self.configs = configs

    def send_now(self, transport, parts):
        self.bytes += parts_size(parts)
        return PlaintextTransportLayer.send_now(self, transport, parts)


@implementer(ITransportLayer)
class SendOnlyLayer:
    """Declares the interface but has no ``send_now`` nor ``batch_answers``."""

    def send(self, transport, parts):
        raise AssertionError("never used")


class BuiltInTests(unittest.TestCase):
    def test_security_protocols_name_the_built_ins(self):
        for proto, cls in (("PLAINTEXT", PlaintextTransportLayer), ("SASL_PLAINTEXT", PlaintextTransportLayer),
                           ("SSL", TlsTransportLayer), ("SASL_SSL", TlsTransportLayer)):
            layer = load_transport_layer(Endpoint("L", proto, "127.0.0.1", 0))
            self.assertIs(type(layer), cls, proto)
        self.assertEqual(registry.plugin_names(ITransportLayer), ["PLAINTEXT", "SSL"])

    def test_batch_answers(self):
        self.assertIs(PlaintextTransportLayer.batch_answers, True)
        self.assertIs(TlsTransportLayer.batch_answers, False)

    def test_a_listener_name_picks_another_layer(self):
        layer = load_transport_layer(Endpoint("L", "SASL_PLAINTEXT", "h", 0), __name__ + ".CountingLayer")
        self.assertIs(type(layer), CountingLayer)

    def test_a_plaintext_layer_never_serves_a_tls_listener(self):
        e = self.assertRaises(ConfigError, load_transport_layer, Endpoint("EXTERNAL", "SSL", "h", 0),
                              "plaintext")
        self.assertEqual(str(e), "Invalid value plaintext for configuration listener.name.external."
                         "transport.class: it serves PLAINTEXT, SASL_PLAINTEXT listeners, not SSL "
                         "(listener EXTERNAL)")

    def test_nor_the_tls_layer_a_plaintext_one(self):
        e = self.assertRaises(ConfigError, load_transport_layer, Endpoint("L", "PLAINTEXT", "h", 0), "SSL")
        self.assertIn("it serves SSL, SASL_SSL listeners, not PLAINTEXT (listener L)", str(e))


class SettingsTests(unittest.TestCase):
    def test_per_listener_key_and_configs(self):
        config = KafkaConfig.from_properties({
            "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "listener.name.external.transport.class": __name__ + ".CountingLayer",
            "listener.name.external.counting.file": "/x",
            "counting.file": "/default",
        })
        settings = SocketServerSettings.from_config(config)
        self.assertEqual(settings.transport_classes, {"EXTERNAL": __name__ + ".CountingLayer"})
        self.assertEqual(settings.listener_configs["EXTERNAL"]["counting.file"], "/x")
        self.assertEqual(settings.listener_configs["INTERNAL"]["counting.file"], "/default")
        self.assertEqual(transport_key("EXTERNAL"), "listener.name.external.transport.class")


class RefusedTests(unittest.TestCase):
    def server(self, name, layers=None):
        settings = SocketServerSettings(transport_classes={"PLAINTEXT": name} if name else {})
        return SocketServer([PLAINTEXT], ScriptedHandler(), reactor, settings=settings,
                            transport_layers=layers)

    def test_unknown_short_name(self):
        e = self.assertRaises(ConfigError, self.server("TCP").start)
        self.assertEqual(str(e).count("\n"), 0)
        self.assertIn("listener.name.plaintext.transport.class", str(e))
        self.assertIn("registered: PLAINTEXT, SSL", str(e))

    def test_object_missing_a_method_is_refused(self):
        e = self.assertRaises(ConfigError, self.server(__name__ + ".SendOnlyLayer").start)
        self.assertIn("listener.name.plaintext.transport.class", str(e))
        self.assertIn("does not provide ITransportLayer", str(e))
        self.assertIn("send_now", str(e))

    def test_injected_layer_is_verified_too(self):
        e = self.assertRaises(ConfigError, self.server(None, {"PLAINTEXT": SendOnlyLayer()}).start)
        self.assertIn("does not provide ITransportLayer", str(e))
        e = self.assertRaises(ConfigError, self.server(None, {"PLAINTEXT": TlsTransportLayer()}).start)
        self.assertIn("it serves SSL, SASL_SSL listeners, not PLAINTEXT", str(e))

    def test_object_not_declaring_the_interface_is_refused(self):
        e = self.assertRaises(ConfigError, self.server("collections.OrderedDict").start)
        self.assertIn("does not provide ITransportLayer", str(e))


class LoopbackTests(unittest.TestCase):
    """A dotted name chosen by config carries the answers of a real listener."""

    timeout = 20

    @defer.inlineCallbacks
    def test_configured_layer_serves_every_connection_of_its_listener(self):
        CountingLayer.instances = []
        config = KafkaConfig.from_properties({
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "listener.name.plaintext.transport.class": __name__ + ".CountingLayer",
            "listener.name.plaintext.counting.note": "hi",
        })
        server = SocketServer(config.listeners, ScriptedHandler(), reactor,
                              settings=SocketServerSettings.from_config(config))
        server.start()
        self.addCleanup(server.stop)
        self.assertEqual(len(CountingLayer.instances), 1)  # loaded at start, not per connection
        layer = CountingLayer.instances[0]
        self.assertEqual(layer.configs["counting.note"], "hi")
        clients = []
        for cid in (1, 2):
            client = _Client()
            yield protocol.ClientCreator(reactor, lambda c=client: c).connectTCP(
                "127.0.0.1", server.bound_port("PLAINTEXT"))
            self.addCleanup(client.transport.loseConnection)
            client.transport.write(api_versions_frame(cid) + api_versions_frame(cid + 10))
            clients.append(client)
        got = []
        for c in clients:
            got.append((yield c.wait_for(2)))
        self.assertEqual([[cid for cid, _ in g] for g in got], [[1, 11], [2, 12]])
        self.assertEqual(len(CountingLayer.instances), 1)
        self.assertEqual(layer.bytes, sum(len(c.buf) for c in clients))
