"""Inter-broker TLS: with ``security.inter.broker.protocol=SSL`` the broker's own client
(follower fetches here) speaks TLS with the listener's ``ssl.*`` settings. Three in-process
brokers whose only listener is SSL with client certificates required replicate acks=all
writes exactly; a follower that does not trust the leader's certificate replicates nothing;
an inter-broker listener the client cannot speak is a one-line ConfigError."""

import os

from twisted.internet import defer, reactor, task
from twisted.logger import globalLogPublisher
from twisted.trial import unittest

from kafkatw.config import ConfigError, KafkaConfig
from kafkatw.network.client import inter_broker_tls
from kafkatw.network.listener import SocketServer
from kafkatw.network.tls import context_factories
from kafkatw.protocol import errors
from kafkatw.tls_certs import make_test_pki
from tests import test_replication_network as network
from tests.test_replication import TOPIC, TOPIC_ID, FakeController


class TlsBroker(network.SocketBroker):
    def start(self):
        self.server = SocketServer(self.config.listeners, self.apis, reactor,
                                   ssl_context_factories=context_factories(self.config))
        self.server.start()
        self.port = self.server.bound_port("SSL")
        self.rm.start()

    @defer.inlineCallbacks
    def stop(self):
        yield super().stop()
        # a TLS connection closes with a close_notify exchange: wait until the listener's
        # side is gone too (a bounded poll), so the reactor is clean after the test
        for _ in range(500):
            if not self.server.connections:
                break
            yield task.deferLater(reactor, 0.01, lambda: None)


def tls_props(pki, **extra):
    props = {"listeners": "SSL://127.0.0.1:0", "security.inter.broker.protocol": "SSL",
             "ssl.keystore.type": "PEM", "ssl.keystore.location": pki.broker_keystore,
             "ssl.key.password": pki.key_password, "ssl.truststore.type": "PEM",
             "ssl.truststore.location": pki.ca_cert, "ssl.client.auth": "required",
             "replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "50",
             "min.insync.replicas": "2", "replica.lag.time.max.ms": "10000"}
    props.update(extra)
    return props


class InterBrokerTlsTests(unittest.TestCase):
    timeout = 60

    elect = network.SocketReplicationTests.elect
    poll = network.SocketReplicationTests.poll
    batch = network.SocketReplicationTests.batch
    segment_bytes = network.SocketReplicationTests.segment_bytes

    def start_nodes(self, props_of):
        self.state = {}
        self.controller = FakeController(self.state)
        self.nodes = {}
        for node_id in (1, 2, 3):
            directory = self.mktemp()
            os.makedirs(directory)
            b = TlsBroker(node_id, directory, self.controller, props_of(node_id))
            self.successResultOf(b.metadata.create_topic(TOPIC, 2, topic_id=TOPIC_ID))
            b.start()
            self.addCleanup(b.stop)
            self.nodes[node_id] = b
        # (cleanups run last first) the followers' connections close before any listener
        # stops: a listener's TLS close waits for a close_notify that a muted connection
        # (a parked follower fetch) would not read
        self.addCleanup(self.close_fetchers)

    def close_fetchers(self):
        return defer.gatherResults([b.rm.fetcher_manager.client.close_all()
                                    for b in self.nodes.values()
                                    if b.rm.fetcher_manager is not None])

    def pki(self):
        directory = self.mktemp()
        return make_test_pki(directory)

    @defer.inlineCallbacks
    def test_replication_over_tls_with_client_certificates(self):
        pki = self.pki()
        self.start_nodes(lambda n: tls_props(pki))
        self.assertEqual([b.config.listeners[0].security_protocol for b in self.nodes.values()],
                         ["SSL"] * 3)
        self.elect(0, 1, [1, 2, 3], 0)
        self.elect(1, 2, [1, 2, 3], 0)
        offsets = []
        for i in range(10):
            r = yield self.nodes[1].rm.append_records(
                30000, -1, {(TOPIC, 0): self.batch([b"tls-%d-%d" % (i, j) for j in range(3)])})
            self.assertEqual(r[(TOPIC, 0)].error_code, errors.NONE)
            offsets.append(r[(TOPIC, 0)].base_offset)
            r = yield self.nodes[2].rm.append_records(
                30000, -1, {(TOPIC, 1): self.batch([b"p1-%d" % i])})
            self.assertEqual((r[(TOPIC, 1)].error_code, r[(TOPIC, 1)].base_offset),
                             (errors.NONE, i))
        self.assertEqual(offsets, list(range(0, 30, 3)))
        yield self.poll(lambda: all(self.nodes[n].log(0).high_watermark == 30
                                    and self.nodes[n].log(1).high_watermark == 10
                                    for n in (1, 2, 3)))
        for p in (0, 1):
            expected = self.segment_bytes(1, p)
            self.assertEqual(self.segment_bytes(2, p), expected)
            self.assertEqual(self.segment_bytes(3, p), expected)

    @defer.inlineCallbacks
    def test_a_follower_not_trusting_the_leader_replicates_nothing(self):
        pki = self.pki()
        failures = []

        def observe(event):
            if event.get("log_format", "").startswith("fetch from broker {leader} failed"):
                failures.append(event.get("err"))
        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)
        # broker 3 trusts another CA only: it cannot verify broker 1 (nor 1 verify it)
        self.start_nodes(lambda n: tls_props(pki, **(
            {"ssl.truststore.location": pki.other_ca_cert} if n == 3 else {})))
        self.elect(0, 1, [1, 2], 0)
        r = yield self.nodes[1].rm.append_records(30000, -1, {(TOPIC, 0): self.batch([b"x"])})
        self.assertEqual(r[(TOPIC, 0)].error_code, errors.NONE)
        yield self.poll(lambda: self.nodes[2].log(0).log_end_offset == 1)
        # broker 2 got it through TLS; broker 3's handshakes fail, again and again
        yield self.poll(lambda: len(failures) >= 3)
        self.assertTrue(all("certificate" in (f or "") for f in failures), failures)
        self.assertEqual(self.nodes[3].log(0).log_end_offset, 0)
        fetcher = self.nodes[3].rm.fetcher_manager
        self.assertEqual(list(fetcher.fetchers), [(1, 0)])


class InterBrokerTlsConfigTests(unittest.SynchronousTestCase):
    def config(self, **props):
        base = {"node.id": "1", "log.dirs": self.mktemp()}
        base.update(props)
        return KafkaConfig.from_properties(base)

    def test_plaintext_needs_no_tls(self):
        self.assertIsNone(inter_broker_tls(self.config(listeners="PLAINTEXT://127.0.0.1:0")))

    def test_sasl_inter_broker_listener_is_refused_in_one_line(self):
        pki = make_test_pki(self.mktemp())
        cfg = self.config(**dict(tls_props(pki), listeners="SASL_SSL://127.0.0.1:0",
                                 **{"security.inter.broker.protocol": "SASL_SSL",
                                    "sasl.enabled.mechanisms": "PLAIN"}))
        e = self.assertRaises(ConfigError, inter_broker_tls, cfg)
        self.assertIn("inter.broker.listener.name", str(e))
        self.assertIn("SASL_SSL", str(e))
        self.assertNotIn("\n", str(e))

    def test_a_missing_key_store_is_refused_at_once(self):
        pki = make_test_pki(self.mktemp())
        cfg = self.config(**tls_props(pki, **{"ssl.keystore.location": pki.broker_keystore + "x"}))
        e = self.assertRaises(ConfigError, inter_broker_tls, cfg)
        self.assertIn("ssl.keystore.location", str(e))
