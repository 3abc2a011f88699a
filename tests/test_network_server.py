"""The SocketServer on real loopback sockets: seed 003's pipelining example, bad clients
closing only their own connection, the request log written to a file."""

import json
import os
import socket
import struct
import tempfile

from twisted.internet import defer, protocol, reactor, task
from twisted.trial import unittest

from kafkatw.network.listener import SocketServer
from kafkatw.network.request_log import RequestLogger
from kafkatw.network.settings import SocketServerSettings
from kafkatw.protocol import messages as m

from tests.test_network_support import PLAINTEXT, ScriptedHandler, api_versions_frame, frame, split_responses


def kernel_size(option, size):
    """What the kernel reports for a buffer ``option`` set to ``size`` (Linux doubles it)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, option, size)
        return s.getsockopt(socket.SOL_SOCKET, option)


class _Client(protocol.Protocol):
    def __init__(self):
        self.buf = b""
        self.waiters = []
        self.closed = defer.Deferred()

    def dataReceived(self, data):
        self.buf += data
        self._check()

    def responses(self):
        return split_responses(self.buf)

    def wait_for(self, n):
        d = defer.Deferred()
        self.waiters.append((n, d))
        self._check()
        return d

    def _check(self):
        have = len(self.responses())
        for n, d in list(self.waiters):
            if have >= n:
                self.waiters.remove((n, d))
                d.callback(self.responses())

    def connectionLost(self, reason):
        self.closed.callback(None)


class ServerTests(unittest.TestCase):
    timeout = 20

    def start(self, handler, settings=None, request_logger=None):
        server = SocketServer([PLAINTEXT], handler, reactor, settings=settings, request_logger=request_logger)
        server.start()
        self.addCleanup(server.stop)
        return server

    @defer.inlineCallbacks
    def connect(self, server):
        client = _Client()
        yield protocol.ClientCreator(reactor, lambda: client).connectTCP(
            "127.0.0.1", server.bound_port("PLAINTEXT"))
        self.addCleanup(lambda: client.transport.loseConnection())
        return client

    @defer.inlineCallbacks
    def test_seed_003_example_3(self):
        fd, path = tempfile.mkstemp()
        os.close(fd)
        self.addCleanup(os.unlink, path)
        handler = ScriptedHandler(hold={1})
        server = self.start(handler, request_logger=RequestLogger(path=path))
        a = yield self.connect(server)
        b = yield self.connect(server)
        fetch = m.REQUESTS[1](replica_id=-1, max_wait_ms=2000, min_bytes=1)
        a.transport.write(frame(1, 12, 1, fetch, "u04-a") + api_versions_frame(2, client_id="u04-a"))
        # wait until A's Fetch is with the handler
        yield handler.wait_calls(1)
        b.transport.write(api_versions_frame(3, client_id="u04-b", software=("u04", "1.0")))
        got_b = yield b.wait_for(1)
        self.assertEqual([cid for cid, _ in got_b], [3])
        self.assertEqual(a.responses(), [])
        self.assertEqual([r.correlation_id for r in handler.calls], [1, 3])  # A's #2 not even parsed
        handler.release(1)
        got_a = yield a.wait_for(2)
        self.assertEqual([cid for cid, _ in got_a], [1, 2])
        yield server.stop()
        with open(path) as f:
            lines = [json.loads(line.split(":", 1)[1]) for line in f]
        by_corr = {e["requestHeader"]["correlationId"]: e for e in lines}
        self.assertEqual(sorted(by_corr), [1, 2, 3])
        av = by_corr[2]
        self.assertEqual(av["requestHeader"], {"requestApiKey": 18, "requestApiVersion": 3, "correlationId": 2,
                                               "clientId": "u04-a", "requestApiKeyName": "API_VERSIONS"})
        self.assertLess(av["totalTimeMs"], 100)
        self.assertGreaterEqual(by_corr[1]["remoteTimeMs"], 0)
        self.assertEqual(by_corr[3]["clientInformation"], {"softwareName": "u04", "softwareVersion": "1.0"})
        self.assertEqual(by_corr[1]["requestHeader"]["requestApiKeyName"], "FETCH")
        for e in lines:
            self.assertEqual((e["securityProtocol"], e["principal"], e["listener"]),
                             ("PLAINTEXT", "User:ANONYMOUS", "PLAINTEXT"))
            self.assertRegex(e["connection"], r"^127\.0\.0\.1:\d+-127\.0\.0\.1:\d+-0-\d+$")
            for k in ("totalTimeMs", "requestQueueTimeMs", "localTimeMs", "remoteTimeMs", "throttleTimeMs",
                      "responseQueueTimeMs", "sendTimeMs"):
                self.assertIn(k, e)
        self.assertEqual(server.metrics.requests_total["ApiVersions"], 2)
        self.assertEqual(server.metrics.requests_total["Fetch"], 1)

    @defer.inlineCallbacks
    def test_a_muted_connection_stops_reading_at_its_next_read_event(self):
        # no epoll change when a request is parked; bytes that come meanwhile are not read
        handler = ScriptedHandler(hold={1})
        server = self.start(handler)
        client = yield self.connect(server)
        fetch = m.REQUESTS[1](replica_id=-1, max_wait_ms=2000, min_bytes=1)
        client.transport.write(frame(1, 12, 1, fetch, "muted"))
        yield handler.wait_calls(1)
        [conn] = server.connections
        self.assertTrue(conn.mute.muted)
        self.assertFalse(conn._paused)
        self.assertIn(conn.transport, reactor.getReaders())  # still registered for reading
        client.transport.write(api_versions_frame(2))
        for _ in range(500):
            if conn._paused:
                break
            yield task.deferLater(reactor, 0.01, lambda: None)
        self.assertTrue(conn._paused)
        self.assertNotIn(conn.transport, reactor.getReaders())
        self.assertEqual(conn.decoder.buffered, 0)  # the second request is still in the socket
        self.assertEqual(len(handler.calls), 1)
        handler.release(1)
        got = yield client.wait_for(2)
        self.assertEqual([cid for cid, _ in got], [1, 2])
        self.assertFalse(conn._paused)

    @defer.inlineCallbacks
    def test_accepted_sockets_have_the_configured_buffer_sizes(self):
        # Kafka's socket.send.buffer.bytes / socket.receive.buffer.bytes (Kafka's default 100 KiB each,
        # -1 here)
        # on every accepted socket; -1 leaves the kernel's own sizing
        for send, receive in ((48 * 1024, 96 * 1024), (100 * 1024, 100 * 1024), (-1, -1)):
            server = self.start(ScriptedHandler(), settings=SocketServerSettings(
                socket_send_buffer_bytes=send, socket_receive_buffer_bytes=receive))
            client = yield self.connect(server)
            client.transport.write(api_versions_frame(1))
            yield client.wait_for(1)
            [conn] = server.connections
            sock = conn.transport.getHandle()
            got = (sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                   sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
            if send == -1:
                fixed = (kernel_size(socket.SO_SNDBUF, 100 * 1024), kernel_size(socket.SO_RCVBUF, 100 * 1024))
                self.assertNotEqual(got[0], fixed[0])  # the kernel auto-sizes a connected socket
                self.assertNotEqual(got[1], fixed[1])
            else:
                self.assertEqual(got, (kernel_size(socket.SO_SNDBUF, send),
                                       kernel_size(socket.SO_RCVBUF, receive)))
            yield server.stop()

    @defer.inlineCallbacks
    def test_bad_clients_close_only_their_connection(self):
        handler = ScriptedHandler()
        server = self.start(handler, settings=SocketServerSettings(socket_request_max_bytes=1 << 20))
        good = yield self.connect(server)
        bad_inputs = [
            b"\x16\x03\x01\x02\x00garbage-tls-hello" * 3,  # garbage: a huge length
            struct.pack(">i", (1 << 20) + 1) + b"x" * 100,  # oversize length
            struct.pack(">i", 8) + struct.pack(">hhi", 999, 0, 1),  # unknown api key
            frame(3, 12, 1)[:4] + struct.pack(">hhi", 3, 13, 1) + frame(3, 12, 1)[12:],  # Metadata v13
        ]
        bads = []
        for data in bad_inputs:
            c = yield self.connect(server)
            c.transport.write(data)
            bads.append(c)
        truncated = yield self.connect(server)
        truncated.transport.write(api_versions_frame(9)[:-3])
        for i in range(20):
            good.transport.write(api_versions_frame(100 + i))
            yield good.wait_for(i + 1)
        for c in bads:
            yield c.closed
            self.assertEqual(c.responses(), [])
        truncated.transport.loseConnection()
        yield truncated.closed
        self.assertEqual([cid for cid, _ in good.responses()], list(range(100, 120)))
        self.assertNotIn(9, [r.correlation_id for r in handler.calls])

