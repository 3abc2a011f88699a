"""The inter-broker client (kafkatw.network.client) against a real broker process, a silent peer
and a closed port: responses matched in order, every pending request failed on loss or timeout."""

import socket

from twisted.internet import defer, protocol, reactor
from twisted.trial import unittest

from kafkatw.network.client import KafkaNetworkClient, NodeUnavailableError, RequestTimeoutError
from kafkatw.protocol import errors, messages
from kafkatw.testing import KafkaBrokerMixin


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class _Silent(protocol.Protocol):
    def dataReceived(self, data):
        self.factory.received.append(data)


class AgainstBrokerTests(KafkaBrokerMixin, unittest.TestCase):
    broker_options = {"topics": [("t", 3)]}

    def setUp(self):
        super().setUp()
        self.client = KafkaNetworkClient(reactor, "test-client", request_timeout_ms=10000)
        self.addCleanup(self.client.close_all)
        self.host, self.port = self.broker.bootstrap_servers.split(":")
        self.port = int(self.port)

    @defer.inlineCallbacks
    def test_pipelined_requests_answered_in_order(self):
        """Fifty Metadata requests of alternating versions on one connection: each Deferred gets
        its own answer (flexible and non-flexible headers alike)."""
        ds = []
        for i in range(50):
            version = 12 if i % 2 else 8
            req = messages.MetadataRequest(
                topics=[messages.MetadataRequest.MetadataRequestTopic(name="t")])
            ds.append(self.client.send(1, self.host, self.port, req, version))
        answers = yield defer.gatherResults(ds)
        self.assertEqual(len(answers), 50)
        for a in answers:
            self.assertEqual([(t.name, t.error_code, len(t.partitions)) for t in a.topics],
                             [("t", errors.NONE, 3)])
        self.assertTrue(self.client.is_connected(1))

    @defer.inlineCallbacks
    def test_api_versions_and_second_key(self):
        """ApiVersions (header v0 response) works, and a second key is a second connection."""
        a = yield self.client.send(1, self.host, self.port, messages.ApiVersionsRequest(
            client_software_name="kafkatw", client_software_version="1"), 3)
        b = yield self.client.send((1, 2), self.host, self.port, messages.ApiVersionsRequest(
            client_software_name="kafkatw", client_software_version="1"), 3)
        self.assertEqual((a.error_code, b.error_code), (errors.NONE, errors.NONE))
        self.assertIn(1, [k.api_key for k in a.api_keys])
        self.assertTrue(self.client.is_connected(1) and self.client.is_connected((1, 2)))


    @defer.inlineCallbacks
    def test_connections_send_without_nagle(self):
        """TCP_NODELAY on every connection: a small request written while the previous one's
        ACK is delayed must not wait for it (follower fetches, acks=all latency)."""
        yield self.client.send(1, self.host, self.port, messages.ApiVersionsRequest(
            client_software_name="kafkatw", client_software_version="1"), 3)
        sock = self.client._connections[1].transport.getHandle()
        self.assertEqual(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), 1)

    @defer.inlineCallbacks
    def test_receive_buffer_of_each_connection(self):
        """replica.socket.receive.buffer.bytes: SO_RCVBUF of a follower's connections to its
        leaders, wired from the broker config; -1 leaves the kernel's own sizing."""
        from kafkatw.config import KafkaConfig
        from kafkatw.server.replica_fetcher import ReplicaFetcherManager
        from tests.test_network_server import kernel_size

        class _ReplicaManager:
            node_id = 2

        config = KafkaConfig.from_properties({"replica.socket.receive.buffer.bytes": "40000"})
        manager = ReplicaFetcherManager.from_config(config, _ReplicaManager(), reactor)
        self.addCleanup(manager.client.close_all)
        default = ReplicaFetcherManager.from_config(KafkaConfig.from_properties({}), _ReplicaManager(),
                                                    reactor)
        self.addCleanup(default.client.close_all)
        self.assertEqual((manager.client.receive_buffer_bytes, default.client.receive_buffer_bytes),
                         (40000, -1))
        for client in (manager.client, KafkaNetworkClient(reactor, "test-client")):
            self.addCleanup(client.close_all)
            yield client.send(1, self.host, self.port, messages.ApiVersionsRequest(
                client_software_name="kafkatw", client_software_version="1"), 3)
            got = client._connections[1].transport.getHandle().getsockopt(socket.SOL_SOCKET,
                                                                          socket.SO_RCVBUF)
            if client is manager.client:
                self.assertEqual(got, kernel_size(socket.SO_RCVBUF, 40000))
            else:
                self.assertNotEqual(got, kernel_size(socket.SO_RCVBUF, 40000))


class ImmediateSendTests(unittest.TestCase):
    @defer.inlineCallbacks
    def test_request_to_an_idle_connection_is_sent_at_once(self):
        """A request on a connected, idle socket is in the kernel when send() returns (a
        follower's next fetch moves the leader's HW: it must not wait for a reactor turn);
        one sent behind a buffered write keeps its place."""
        factory = protocol.ServerFactory.forProtocol(_Silent)
        factory.received = []
        port = reactor.listenTCP(0, factory, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        client = KafkaNetworkClient(reactor, "test-client", request_timeout_ms=10000)
        self.addCleanup(client.close_all)
        p = port.getHost().port
        client.send(3, "127.0.0.1", p, messages.ApiVersionsRequest(), 0).addErrback(lambda _: None)
        yield _until(lambda: factory.received)  # connected, the first request arrived
        conn = client._connections[3]
        got = len(b"".join(factory.received))
        client.send(3, "127.0.0.1", p, messages.ApiVersionsRequest(), 0).addErrback(lambda _: None)
        # nothing left in Twisted's buffers for a later reactor turn: the kernel has it
        self.assertEqual((conn.transport._tempDataBuffer, conn.transport.dataBuffer), ([], b""))
        yield _until(lambda: len(b"".join(factory.received)) > got)
        client.close_all()


def _until(condition, timeout=10.0):
    """A Deferred firing once ``condition()`` is true (polled each reactor turn, bounded)."""
    from twisted.internet import task
    import time

    deadline = time.monotonic() + timeout

    def check():
        if condition():
            loop.stop()
        elif time.monotonic() > deadline:
            loop.stop()
            raise AssertionError("condition not met in %.0f s" % timeout)

    loop = task.LoopingCall(check)
    return loop.start(0.01)


class FailureTests(unittest.TestCase):
    def setUp(self):
        self.client = KafkaNetworkClient(reactor, "test-client", request_timeout_ms=300,
                                         connect_timeout_ms=2000)
        self.addCleanup(self.client.close_all)

    @defer.inlineCallbacks
    def test_connection_refused(self):
        port = _free_port()
        with self.assertRaises(NodeUnavailableError) as cm:
            yield self.client.send(5, "127.0.0.1", port, messages.ApiVersionsRequest(), 0)
        self.assertIn("cannot connect to 127.0.0.1:%d" % port, str(cm.exception))

    @defer.inlineCallbacks
    def test_timeout_then_loss_fails_every_pending(self):
        """A peer that never answers: the first request times out, which closes the connection,
        so the others pending on it fail as unavailable; the peer saw both requests."""
        factory = protocol.ServerFactory.forProtocol(_Silent)
        factory.received = []
        port = reactor.listenTCP(0, factory, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        p = port.getHost().port
        first = self.client.send(7, "127.0.0.1", p, messages.ApiVersionsRequest(), 0)
        second = self.client.send(7, "127.0.0.1", p, messages.ApiVersionsRequest(), 0,
                                  timeout_ms=60000)
        with self.assertRaises(RequestTimeoutError):
            yield first
        with self.assertRaises(NodeUnavailableError):
            yield second
        self.assertEqual(len(b"".join(factory.received)) > 0, True)
        self.assertFalse(self.client.is_connected(7))

    @defer.inlineCallbacks
    def test_closed_client_refuses(self):
        yield self.client.close_all()
        with self.assertRaises(NodeUnavailableError):
            yield self.client.send(1, "127.0.0.1", 1, messages.ApiVersionsRequest(), 0)
