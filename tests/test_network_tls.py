"""An SSL listener end to end: the SocketServer over Twisted TLS sends a response whose
parts include a 3 MB FileRegion in 32 KiB chunks; the client receives it byte-identical."""

import os
import tempfile

from twisted.internet import defer, protocol, reactor, ssl
from twisted.trial import unittest

from kafkatw.network.listener import SocketServer
from kafkatw.network.request import Response
from kafkatw.config import Endpoint
from kafkatw.protocol.parts import FileRegion, join_parts

from tests.test_network_support import SERVER_PEM, RawBody, ScriptedHandler, api_versions_frame, split_responses


class _Client(protocol.Protocol):
    def __init__(self, want):
        self.want = want
        self.buf = bytearray()
        self.done = defer.Deferred()

    def dataReceived(self, data):
        self.buf += data
        if len(self.buf) >= self.want and not self.done.called:
            self.done.callback(bytes(self.buf))


class TlsListenerTests(unittest.TestCase):
    timeout = 30

    @defer.inlineCallbacks
    def test_region_over_tls(self):
        data = os.urandom(3 * 1024 * 1024 + 17)
        f = tempfile.TemporaryFile()
        f.write(data)
        f.flush()
        self.addCleanup(f.close)
        body = RawBody([b"\x00\x00", FileRegion(f, 0, len(data)), b"\x01"])
        handler = ScriptedHandler(responder=lambda r: Response(body))
        ctx = ssl.DefaultOpenSSLContextFactory(SERVER_PEM, SERVER_PEM)
        ep = Endpoint("SSL", "SSL", "127.0.0.1", 0)
        server = SocketServer([ep], handler, reactor, ssl_context_factories={"SSL": ctx})
        server.start()
        self.addCleanup(server.stop)
        expected_len = 4 + 4 + 2 + len(data) + 1  # size, correlation id (header v0), body
        client = _Client(expected_len)
        yield protocol.ClientCreator(reactor, lambda: client).connectSSL(
            "127.0.0.1", server.bound_port("SSL"), ssl.ClientContextFactory())
        self.addCleanup(lambda: client.transport.loseConnection())
        client.transport.write(api_versions_frame(42, version=2))
        got = yield client.done
        [(cid, payload)] = split_responses(got)
        self.assertEqual(cid, 42)
        self.assertEqual(payload[4:], join_parts(body.parts))
        self.assertEqual(handler.calls[0].context.security_protocol, "SSL")
