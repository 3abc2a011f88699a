"""KafkaTlsProtocol over a real loopback TLS connection: small (aggregated) and bulk writes
arrive in the order written, whole, whatever their sizes; a bulk write before the handshake
has finished takes Twisted's buffered path and still arrives in order; after it, a bulk write
never does; received records are handed over together, all of them before a close_notify."""

import os
import socket
import ssl

from OpenSSL import SSL
from twisted.internet import defer, protocol, reactor, threads
from twisted.trial import unittest

from kafkatw.network.tls import server_context_factory
from kafkatw.network.tls_protocol import KafkaTlsProtocol, tls_factory
from kafkatw.network.transport import IBulkWriter
from kafkatw.tls_certs import make_test_pki


def _read_all(port, cafile, expected):
    ctx = ssl.create_default_context(cafile=cafile)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            got = bytearray()
            while len(got) < expected:
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                got += chunk
            return bytes(got)


class _Writer(protocol.Protocol):
    """Writes the factory's script as soon as the connection is made (before the handshake)."""

    def connectionMade(self):
        self.factory.transports.append(self.transport)
        for kind, data in self.factory.script_before:
            (self.transport.write_bulk if kind == "bulk" else self.transport.write)(data)

    def dataReceived(self, data):
        self.factory.received.append(bytes(data))

    def connectionLost(self, reason):
        self.factory.lost.callback([reason])


def _send_and_close(port, cafile, data):
    """Send ``data`` over TLS, then close_notify, then wait for the server to close."""
    ctx = ssl.create_default_context(cafile=cafile)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        s = ctx.wrap_socket(raw, server_hostname="localhost")
        s.sendall(data)
        s.unwrap()


class TlsProtocolTests(unittest.TestCase):
    def setUp(self):
        pki = make_test_pki(os.path.abspath(self.mktemp()))
        self.cafile = pki.ca_cert
        cfg = {
            "ssl.keystore.type": "PEM", "ssl.keystore.location": None,
            "ssl.keystore.password": None, "ssl.keystore.certificate.chain": None,
            "ssl.keystore.key": None, "ssl.key.password": None,
            "ssl.truststore.type": "PEM", "ssl.truststore.location": None,
            "ssl.truststore.password": None, "ssl.truststore.certificates": None,
            "ssl.client.auth": "none", "ssl.enabled.protocols": ["TLSv1.2", "TLSv1.3"],
            "ssl.cipher.suites": None, "ssl.principal.mapping.rules": None,
        }
        with open(pki.server_cert) as f:
            cfg["ssl.keystore.certificate.chain"] = f.read()
        with open(pki.server_key) as f:
            cfg["ssl.keystore.key"] = f.read()
        self.factory = protocol.ServerFactory.forProtocol(_Writer)
        self.factory.transports = []
        self.factory.script_before = []
        self.factory.received = []
        self.factory.lost = defer.Deferred()
        port = reactor.listenTCP(0, tls_factory(server_context_factory(cfg), self.factory, reactor),
                                 interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.port = port.getHost().port

    @defer.inlineCallbacks
    def run_script(self, script):
        """``script``: [(kind, bytes)] written once the handshake is done; returns what the
        client read."""
        expected = sum(len(d) for _, d in self.factory.script_before + script)
        reading = threads.deferToThread(_read_all, self.port, self.cafile, expected)
        while not self.factory.transports:
            yield _later(0.01)
        tls = self.factory.transports[0]
        self.assertIsInstance(tls, KafkaTlsProtocol)
        self.assertTrue(IBulkWriter.providedBy(tls))
        # the server writes once the client's first bytes (its handshake) have been read
        yield _later(0.2)
        for kind, data in script:
            (tls.write_bulk if kind == "bulk" else tls.write)(data)
        got = yield reading
        tls.loseConnection()
        return got

    @defer.inlineCallbacks
    def test_small_and_bulk_writes_keep_their_order(self):
        rnd = os.urandom(600 * 1024)
        script = [("small", b"header-1"), ("small", b"x" * 100), ("bulk", rnd[:256 * 1024]),
                  ("small", b"between"), ("bulk", memoryview(rnd)[256 * 1024:256 * 1024 + 17]),
                  ("bulk", rnd[300 * 1024:]), ("small", b"tail")]
        got = yield self.run_script(script)
        self.assertEqual(got, b"".join(bytes(d) for _, d in script))

    @defer.inlineCallbacks
    def test_bulk_before_handshake_is_buffered_in_order(self):
        big = os.urandom(100 * 1024)
        self.factory.script_before = [("small", b"early"), ("bulk", big)]
        got = yield self.run_script([("bulk", b"after"), ("small", b"end")])
        self.assertEqual(got, b"early" + big + b"after" + b"end")

    @defer.inlineCallbacks
    def test_bulk_write_after_handshake_encrypts_the_whole_chunk_itself(self):
        # pyOpenSSL's partial-write mode makes one SSL_write take one 16 KiB record: the rest of
        # a chunk must still not fall back to Twisted's sliced write
        fallbacks = []
        original = KafkaTlsProtocol._twisted_write

        def recording(tls, data):
            fallbacks.append(len(data))
            return original(tls, data)

        self.patch(KafkaTlsProtocol, "_twisted_write", recording)
        chunk = os.urandom(256 * 1024)
        script = [("bulk", chunk), ("bulk", chunk[:100 * 1024 + 3]), ("small", b"end")]
        got = yield self.run_script(script)
        self.assertEqual(got, chunk + chunk[:100 * 1024 + 3] + b"end")
        self.assertEqual(fallbacks, [])

    @defer.inlineCallbacks
    def test_received_records_are_handed_over_together_and_before_close_notify(self):
        data = os.urandom(2 * 1024 * 1024 + 5)
        sending = threads.deferToThread(_send_and_close, self.port, self.cafile, data)
        [reason] = yield self.factory.lost
        yield sending
        received = self.factory.received
        self.assertEqual(b"".join(received), data)
        # one record holds at most 16 KiB: larger pieces are several records handed over at once
        self.assertGreater(max(len(p) for p in received), 16 * 1024)
        self.assertLess(len(received), len(data) // (16 * 1024))
        # close_notify ends the connection cleanly (not as a TLS error)
        self.assertFalse(reason.check(SSL.Error), reason)


def _later(seconds):
    d = defer.Deferred()
    reactor.callLater(seconds, d.callback, None)
    return d


