"""Zero copy (seed 000 §6): a 200 MB topic consumed over PLAINTEXT and SSL by confluent-kafka and
kafka-python with equal checksums and bounded broker RSS; under strace, sendfile carries the
records over PLAINTEXT and worker threads' 1 MiB preadv calls over SSL; a slow SSL reader is not
buffered for; a disk error while sending a region is told apart from a broken socket and reaches
the service."""

import os
import socket
import ssl
import struct
import tempfile
import time

from twisted.internet import defer, protocol, reactor
from twisted.internet import ssl as tssl
from twisted.trial import unittest

from kafkatw.config import KafkaConfig
from kafkatw.network.listener import SocketServer
from kafkatw.network.request import Response
from kafkatw.config import Endpoint
from kafkatw.protocol import messages as m
from kafkatw.protocol.parts import FileRegion
from kafkatw.testing import KafkaBrokerMixin

from tests import tls_support as ts
from tests.support import recv_exact
from tests.test_network_support import SERVER_PEM, RawBody, ScriptedHandler, api_versions_frame, frame

MiB = 1024 * 1024
TOTAL = 200 * MiB
VALUE_SIZE = 64 * 1024
RSS_LIMIT = 100 * MiB
TOPIC = "zero-copy"

_DATA = {}  # broker pid -> (count, sha256)


class ZeroCopyBrokerTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    """One broker (PLAINTEXT + SSL) holding a 200 MB single-partition topic."""

    broker_options = {"listeners": ("PLAINTEXT", "SSL")}
    broker_overrides = {"message.max.bytes": 2 * MiB}

    def setUp(self):
        super().setUp()
        pid = self.broker.process.pid
        if pid not in _DATA:
            _DATA[pid] = ts.produce_bulk(self.broker.bootstrap_servers, TOPIC, TOTAL, VALUE_SIZE)
        self.count, self.digest = _DATA[pid]
        self.assertEqual(self.count, TOTAL // VALUE_SIZE)

    def plaintext(self, client):
        if client == "confluent":
            return {"bootstrap.servers": self.broker.bootstrap_servers}
        return {"bootstrap_servers": self.broker.bootstrap_servers}

    def over_ssl(self, client):
        if client == "confluent":
            return {"bootstrap.servers": self.broker.ssl_bootstrap_servers,
                    "security.protocol": "SSL", "ssl.ca.location": self.broker.ssl_ca_path}
        return {"bootstrap_servers": self.broker.ssl_bootstrap_servers,
                "security_protocol": "SSL", "ssl_cafile": self.broker.ssl_ca_path}

    def consume_checked(self, consume, conf):
        watch = ts.RssWatch(self.broker.process.pid)
        try:
            got = consume(conf, TOPIC, self.count)
        finally:
            growth = watch.stop()
        self.assertEqual(got, (self.count, self.digest))
        self.assertLess(growth, RSS_LIMIT, "broker RSS grew by %.1f MB" % (growth / MiB))

    # -- 200 MB, checksums, RSS --------------------------------------------------------------
    def test_confluent_plaintext(self):
        self.consume_checked(ts.confluent_consume, self.plaintext("confluent"))

    def test_confluent_ssl(self):
        self.consume_checked(ts.confluent_consume, self.over_ssl("confluent"))

    def test_kafka_python_plaintext(self):
        self.consume_checked(ts.kafka_python_consume, self.plaintext("kafka-python"))

    def test_kafka_python_ssl(self):
        self.consume_checked(ts.kafka_python_consume, self.over_ssl("kafka-python"))

    # -- what the broker process does, under strace -------------------------------------------
    def traced_consume(self, conf):
        why = ts.strace_unavailable()
        if why:
            raise unittest.SkipTest(why)
        out = tempfile.mktemp(prefix="kafkatw-strace-", suffix=".txt")
        self.addCleanup(lambda: [os.path.exists(p) and os.unlink(p) for p in (out, out + ".stderr")])
        tracer = ts.Strace(self.broker.process.pid, out)
        try:
            got = ts.confluent_consume(conf, TOPIC, self.count)
        finally:
            tracer.stop()
        self.assertEqual(got, (self.count, self.digest))
        return tracer.calls(".log")

    def test_strace_plaintext_sendfile_carries_the_records(self):
        # read_committed (librdkafka's default, named here): the fetch stops at the last stable
        # offset and still goes out as file regions (issue 18)
        calls = self.traced_consume(dict(self.plaintext("confluent"), **{"isolation.level": "read_committed"}))
        sent = sum(result for name, _, _, result in calls if name == "sendfile")
        self.assertGreaterEqual(sent, TOTAL)
        self.assertEqual([c for c in calls if c[0] == "read"], [])
        self.assertEqual([c for c in calls if c[0] == "preadv2"], [])
        preads = [ts.pread_size(args) for name, _, args, _ in calls if name == "pread64"]
        # only batch-header scans (61 bytes) locate the fetch offset; no record body is read
        self.assertEqual([n for n in preads if n > 61], [])
        self.assertLess(sum(preads), 64 * 1024)

    def test_strace_ssl_reads_chunks(self):
        """Over TLS a region is read in THREAD_CHUNK ``preadv`` calls of the worker threads (a
        rest under THREAD_MIN in preads on the reactor); no sendfile, no plain read."""
        from kafkatw.network.tls_protocol import THREAD_CHUNK
        from kafkatw.network.transport import CHUNK_SIZE, THREAD_MIN

        calls = self.traced_consume(self.over_ssl("confluent"))
        self.assertEqual([c for c in calls if c[0] == "sendfile"], [])
        self.assertEqual([c for c in calls if c[0] == "read"], [])
        # strace -s 0 hides a preadv's vector: its result is all it shows
        in_workers = [result for name, _, _, result in calls if name == "preadv2"]
        on_reactor = [(ts.pread_size(args), result) for name, _, args, result in calls
                      if name == "pread64" and ts.pread_size(args) > 61]
        self.assertGreaterEqual(sum(in_workers) + sum(r for _, r in on_reactor), TOTAL)
        self.assertEqual(max(in_workers), THREAD_CHUNK)
        self.assertGreater(sum(1 for n in in_workers if n == THREAD_CHUNK), 0.9 * len(in_workers))
        self.assertEqual([size for size, _ in on_reactor if size >= min(CHUNK_SIZE, THREAD_MIN)], [])
        self.assertGreater(sum(in_workers), 0.9 * TOTAL)  # nearly every byte in the workers

    # -- a slow reader over SSL --------------------------------------------------------------
    def test_slow_ssl_reader_is_not_buffered_for(self):
        limit = 48 * MiB
        body = m.FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=limit, isolation_level=0,
            session_id=0, session_epoch=-1,
            topics=[m.FetchRequest.FetchTopic(topic=TOPIC, partitions=[
                m.FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=limit)])])
        request = frame(1, 11, 5, body, client_id="slow-reader")
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        raw.settimeout(30)
        raw.connect(("127.0.0.1", self.broker.ports["SSL"]))
        ctx = ssl.create_default_context(cafile=self.broker.ssl_ca_path)
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            watch = ts.RssWatch(self.broker.process.pid, interval=0.02)
            s.sendall(request)
            (size,) = struct.unpack(">i", recv_exact(s, 4))
            self.assertGreater(size, 40 * MiB)
            received = bytearray(recv_exact(s, MiB))
            time.sleep(1.5)  # a reader that stalls: the broker must stop, not buffer
            stalled_growth = watch.peak - watch.start
            while len(received) < size:
                received += s.recv(min(size - len(received), 4 * MiB))
            growth = watch.stop()
        self.assertLess(stalled_growth, 16 * MiB, "RSS grew %.1f MB while stalled" % (stalled_growth / MiB))
        self.assertLess(growth, 32 * MiB)
        response = m.FetchResponse.decode(memoryview(received)[4:], 11)  # after correlation id
        [topic] = response.responses
        [part] = topic.partitions
        self.assertEqual(part.error_code, 0)
        records = bytes(part.records)
        self.assertGreater(len(records), 40 * MiB)
        segment = os.path.join(self.broker.data_dir, TOPIC + "-0", "%020d.log" % 0)
        with open(segment, "rb") as f:
            self.assertEqual(records, f.read(len(records)))


# -- transfer failures (in-process SocketServer) ------------------------------------------------
class _BrokenFile:
    """A 'segment' whose reads fail with EISDIR: a directory descriptor stands in for a disk
    that returns errors (sendfile and pread both fail on it)."""

    def __init__(self, directory):
        self.name = os.path.join(directory, "topic-0", "00000000000000000000.log")
        self._fd = os.open(directory, os.O_RDONLY)

    def fileno(self):
        return self._fd

    def close(self):
        os.close(self._fd)


class _Client(protocol.Protocol):
    def __init__(self):
        self.received = 0
        self.first = defer.Deferred()
        self.lost = defer.Deferred()

    def dataReceived(self, data):
        self.received += len(data)
        if not self.first.called:
            self.first.callback(None)

    def connectionLost(self, reason):
        self.lost.callback(None)


class TransferFailureTests(unittest.TestCase):
    timeout = 30

    def serve(self, parts, security_protocol="PLAINTEXT"):
        failures = []
        handler = ScriptedHandler(responder=lambda r: Response(RawBody(parts)))
        ep = Endpoint(security_protocol, security_protocol, "127.0.0.1", 0)
        ctx = {}
        if security_protocol == "SSL":
            ctx = {"SSL": tssl.DefaultOpenSSLContextFactory(SERVER_PEM, SERVER_PEM)}
        server = SocketServer([ep], handler, reactor, ssl_context_factories=ctx,
                              transfer_failure_handler=lambda region, err: failures.append((region, err)))
        server.start()
        self.addCleanup(server.stop)
        return server, failures

    @defer.inlineCallbacks
    def connect(self, server, security_protocol="PLAINTEXT"):
        client = _Client()
        creator = protocol.ClientCreator(reactor, lambda: client)
        port = server.bound_port(security_protocol)
        if security_protocol == "SSL":
            yield creator.connectSSL("127.0.0.1", port, tssl.ClientContextFactory())
        else:
            yield creator.connectTCP("127.0.0.1", port)
        client.transport.write(api_versions_frame(1, version=2))
        defer.returnValue(client)

    @defer.inlineCallbacks
    def wait_closed(self, server):
        deadline = time.monotonic() + 10
        while server.connections and time.monotonic() < deadline:
            d = defer.Deferred()
            reactor.callLater(0.02, d.callback, None)
            yield d
        self.assertEqual(server.connections, set())

    @defer.inlineCallbacks
    def disk_error(self, security_protocol):
        broken = _BrokenFile(tempfile.mkdtemp())
        self.addCleanup(broken.close)
        region = FileRegion(broken, 0, 4096)
        server, failures = self.serve([b"\x00\x00", region], security_protocol)
        client = yield self.connect(server, security_protocol)
        yield client.lost  # the connection is closed
        yield self.wait_closed(server)
        self.assertEqual(len(failures), 1)
        failed_region, err = failures[0]
        self.assertIs(failed_region, region)
        self.assertTrue(err.disk_error)

    def test_disk_error_plaintext_reaches_the_handler(self):
        return self.disk_error("PLAINTEXT")

    def test_disk_error_ssl_reaches_the_handler(self):
        return self.disk_error("SSL")

    @defer.inlineCallbacks
    def test_broken_socket_is_not_a_disk_error(self):
        data = tempfile.TemporaryFile()
        data.truncate(64 * MiB)  # sparse: big enough that the client can leave mid-send
        self.addCleanup(data.close)
        server, failures = self.serve([b"\x00\x00", FileRegion(data, 0, 64 * MiB)])
        client = yield self.connect(server)
        yield client.first
        client.transport.abortConnection()
        yield client.lost
        yield self.wait_closed(server)
        self.assertEqual(failures, [])


class ServiceTransferFailureTests(unittest.SynchronousTestCase):
    def test_disk_error_marks_the_log_dir_offline(self):
        from kafkatw.service import BrokerService

        log_dir = tempfile.mkdtemp()
        service = BrokerService(KafkaConfig.from_properties({"log.dirs": log_dir}))
        calls = []

        class FakeLogManager:
            def handle_dir_failure(self, directory, exc=None):
                calls.append((directory, exc))

        service.log_manager = FakeLogManager()
        broken = _BrokenFile(log_dir)
        self.addCleanup(broken.close)
        err = OSError(5, "Input/output error")
        service._on_transfer_failure(FileRegion(broken, 0, 10), err)
        self.assertEqual(calls, [(os.path.abspath(log_dir), err)])


class TracedCallsTests(unittest.SynchronousTestCase):
    """strace -f prints a call another thread interrupts in two halves; both are counted once."""

    def test_unfinished_and_resumed_halves_are_joined(self):
        lines = [
            "30778 preadv2(3</d/t-0/0.log>,  <unfinished ...>\n",
            "30777 preadv2(3</d/t-0/0.log>,  <unfinished ...>\n",
            "30778 <... preadv2 resumed>[...], 1, 0, 0) = 1048576\n",
            "30776 pread64(3</d/t-0/0.log>, \"\"..., 61, 0) = 61\n",
            "30777 <... preadv2 resumed>[...], 1, 1048576, 0) = 524288\n",
            "30776 read(5<socket:[1]>, \"\"..., 4) = 4\n",
        ]
        from tests.tls_support import traced_calls

        calls = traced_calls(lines)
        self.assertEqual([(name, result) for name, _, _, result in calls],
                         [("preadv2", 1048576), ("pread64", 61), ("preadv2", 524288)])
        self.assertEqual({path for _, path, _, _ in calls}, {"/d/t-0/0.log"})
