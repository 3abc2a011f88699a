"""Transport layers: sendfile of a large region between byte parts over a real loopback
socket, and the chunked (TLS-style) writer against a fake pull consumer."""

import hashlib
import os
import socket
import tempfile

from twisted.internet import defer, protocol, reactor
from twisted.trial import unittest

from kafkatw.network.transport import (
    CHUNK_SIZE,
    SMALL_REGIONS_MAX,
    ChunkedSender,
    PlaintextTransportLayer,
    TlsTransportLayer,
    TransferError,
)
from kafkatw.protocol.parts import FileRegion, LazyFile


class _Collector(protocol.Protocol):
    def __init__(self):
        self.chunks = []
        self.done = defer.Deferred()

    def dataReceived(self, data):
        self.chunks.append(data)

    def connectionLost(self, reason):
        self.done.callback(b"".join(self.chunks))


class _Sender(protocol.Protocol):
    def connectionMade(self):
        # Bytes already buffered before the response: the region must not overtake them.
        self.transport.write(self.factory.pre)
        d = PlaintextTransportLayer().send(self.transport, self.factory.parts)
        d.addCallback(self.factory.sent.callback)
        d.addBoth(lambda r: (self.transport.loseConnection(), r)[1])


class SendfileTests(unittest.TestCase):
    timeout = 60

    def _region_file(self, size):
        fd, path = tempfile.mkstemp()
        self.addCleanup(os.unlink, path)
        block = os.urandom(1 << 20)
        with os.fdopen(fd, "wb") as f:
            for i in range(size // len(block)):
                f.write(block[::-1] if i % 2 else block)
            f.write(block[: size % len(block)])
        f = open(path, "rb")
        self.addCleanup(f.close)
        return f

    @defer.inlineCallbacks
    def test_20mb_region_between_byte_parts(self):
        size = 20 * 1024 * 1024 + 123
        f = self._region_file(size)
        head = b"H" * 300000
        tail = b"T" * 1000
        factory = protocol.ServerFactory.forProtocol(_Sender)
        factory.pre = b"P" * 700000
        # region starts at 7 to check positions; a second small region and a bytes part follow
        factory.parts = [head, FileRegion(f, 7, size - 7), b"mid", FileRegion(f, 0, 5), tail]
        if self.region_first:
            factory.pre += head
            factory.parts = factory.parts[1:]
        factory.sent = defer.Deferred()
        port = reactor.listenTCP(0, factory, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        client = _Collector()
        yield protocol.ClientCreator(reactor, lambda: client).connectTCP("127.0.0.1", port.getHost().port)
        got = yield client.done
        nbytes = yield factory.sent
        f.seek(0)
        content = f.read()
        expected = factory.pre + (b"" if self.region_first else head) + content[7:] + b"mid" + content[:5] + tail
        self.assertEqual(len(got), len(expected))
        self.assertEqual(hashlib.sha256(got).hexdigest(), hashlib.sha256(expected).hexdigest())
        self.assertEqual(nbytes, len(expected) - len(factory.pre))

    region_first = False

    def test_region_first_does_not_overtake_buffered_bytes(self):
        # registerProducer's synchronous resumeProducing must not sendfile while the
        # transport still buffers earlier bytes (DESIGN.md's pitfall).
        self.region_first = True
        return self.test_20mb_region_between_byte_parts()


class _SendNow(protocol.Protocol):
    def connectionMade(self):
        sock = self.transport.getHandle()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)  # takes the answer at once
        self.factory.result = PlaintextTransportLayer().send_now(self.transport, self.factory.parts)
        self.factory.cork_after = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK)


class _Counting(protocol.Protocol):
    def __init__(self, expected):
        self.expected = expected
        self.data = b""
        self.done = defer.Deferred()

    def dataReceived(self, data):
        self.data += data
        if len(self.data) >= self.expected and not self.done.called:
            self.done.callback(self.data)


class _Released(LazyFile):
    """A region's file that notes ``region_done``."""

    __slots__ = ("f", "released")

    def __init__(self, f):
        self.f = f
        self.released = 0

    def fileno(self):
        return self.f.fileno()

    def release(self):
        self.released += 1


class CorkTests(unittest.TestCase):
    """Bytes + region + bytes of one response are corked into one segment, then uncorked; a
    small answer's region is read into its one ``sendmsg`` instead."""

    timeout = 30

    def _file(self, content):
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(content)
        f = open(path, "rb")
        self.addCleanup(f.close)
        return f

    @defer.inlineCallbacks
    def _send_now(self, parts, expected_size):
        factory = protocol.ServerFactory.forProtocol(_SendNow)
        factory.parts = parts
        port = reactor.listenTCP(0, factory, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        client = _Counting(expected_size)
        conn = yield protocol.ClientCreator(reactor, lambda: client).connectTCP(
            "127.0.0.1", port.getHost().port)
        self.addCleanup(conn.transport.loseConnection)
        got = yield client.done
        return factory, got

    def _sendfile_calls(self):
        calls = []
        real = os.sendfile

        def sendfile(*args):
            calls.append(args)
            return real(*args)

        self.patch(os, "sendfile", sendfile)
        return calls

    @defer.inlineCallbacks
    def test_a_mixed_response_goes_at_once_and_leaves_the_socket_uncorked(self):
        records = os.urandom(SMALL_REGIONS_MAX + 7)  # too large to be read: sendfile
        f = self._file(b"0123456789" + records)
        sendfile_calls = self._sendfile_calls()
        factory, got = yield self._send_now([b"head", FileRegion(f, 10, len(records)), b"tail"],
                                            len(records) + 8)
        self.assertEqual(got, b"head" + records + b"tail")
        self.assertEqual(factory.result, len(records) + 8)  # all handed to the kernel at once
        self.assertEqual(factory.cork_after, 0)
        self.assertEqual(len(sendfile_calls), 1)

    @defer.inlineCallbacks
    def test_a_small_answer_has_its_region_read_into_one_send(self):
        released = _Released(self._file(b"0123456789RECORDS"))
        sendfile_calls = self._sendfile_calls()
        factory, got = yield self._send_now([b"\x00\x00\x00\x10head", FileRegion(released, 10, 7), b"tail"], 19)
        self.assertEqual(got, b"\x00\x00\x00\x10headRECORDStail")
        self.assertEqual(factory.result, 19)  # all handed to the kernel at once
        self.assertEqual(sendfile_calls, [])
        self.assertEqual(released.released, 1)  # region_done: its descriptor may go

    @defer.inlineCallbacks
    def test_a_small_region_the_file_does_not_hold_fails_as_a_sent_one(self):
        # the read falls short: the region goes to the sender, whose sendfile meets the end
        f = self._file(b"0123456789")
        factory = protocol.ServerFactory.forProtocol(_SendNow)
        factory.parts = [b"head", FileRegion(f, 5, 100), b"tail"]
        port = reactor.listenTCP(0, factory, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        client = _Collector()
        yield protocol.ClientCreator(reactor, lambda: client).connectTCP("127.0.0.1", port.getHost().port)
        yield client.done  # the connection is aborted
        self.assertIsInstance(factory.result, defer.Deferred)
        failure = yield self.assertFailure(factory.result, TransferError)
        self.assertFalse(failure.disk_error)


class _SendNowBytes(protocol.Protocol):
    def connectionMade(self):
        result = PlaintextTransportLayer().send_now(self.transport, self.factory.parts)
        self.factory.result = result
        if isinstance(result, defer.Deferred):
            result.addCallback(self.factory.sent.callback)
        else:
            self.factory.sent.callback(result)
        self.factory.sent.addBoth(lambda r: (self.transport.loseConnection(), r)[1])


class SendNowBytesTests(unittest.TestCase):
    """Byte parts to an idle socket: one ``sendmsg`` and the count itself; what the socket does
    not take waits in the transport and the count comes in a Deferred."""

    timeout = 60

    @defer.inlineCallbacks
    def _send(self, parts):
        factory = protocol.ServerFactory.forProtocol(_SendNowBytes)
        factory.parts = parts
        factory.sent = defer.Deferred()
        port = reactor.listenTCP(0, factory, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        client = _Collector()
        yield protocol.ClientCreator(reactor, lambda: client).connectTCP("127.0.0.1", port.getHost().port)
        got = yield client.done
        nbytes = yield factory.sent
        return factory.result, nbytes, got

    @defer.inlineCallbacks
    def test_a_small_answer_is_sent_at_once(self):
        parts = [b"\x00\x00\x00\x09", bytearray(b"head"), b"", memoryview(b"body!")]
        result, nbytes, got = yield self._send(parts)
        self.assertEqual(result, 13)  # an int: no Deferred
        self.assertEqual(nbytes, 13)
        self.assertEqual(got, b"\x00\x00\x00\x09headbody!")

    @defer.inlineCallbacks
    def test_what_the_socket_does_not_take_follows_in_order(self):
        block = os.urandom(1 << 20)
        parts = [b"first"] + [block[::-1] if i % 2 else block for i in range(24)] + [b"last"]
        result, nbytes, got = yield self._send(parts)
        self.assertIsInstance(result, defer.Deferred)  # 24 MiB do not fit a socket buffer
        expected = b"".join(parts)
        self.assertEqual(nbytes, len(expected))
        self.assertEqual(len(got), len(expected))
        self.assertEqual(hashlib.sha256(got).hexdigest(), hashlib.sha256(expected).hexdigest())


class _FakeConsumer:
    """A pull consumer like FileDescriptor: resumeProducing whenever the test 'drains'."""

    def __init__(self):
        self.writes = []
        self.producer = None
        self.writing = False
        self.disconnected = False

    def registerProducer(self, producer, streaming):
        assert self.producer is None, "producer already registered"
        self.producer = producer
        if not streaming:
            producer.resumeProducing()

    def unregisterProducer(self):
        self.producer = None

    def write(self, data):
        self.writes.append(bytes(data))

    def startWriting(self):
        self.writing = True

    def loseConnection(self):
        self.disconnected = True

    def drain(self):
        """doWrite with the buffer emptied: wake the registered pull producer."""
        self.writing = False
        if self.producer is not None:
            self.producer.resumeProducing()


class ChunkedSenderTests(unittest.SynchronousTestCase):
    def test_chunks_follow_back_pressure_and_order(self):
        data = os.urandom(5 * CHUNK_SIZE + 100)
        fd, path = tempfile.mkstemp()
        self.addCleanup(os.unlink, path)
        os.write(fd, data)
        os.close(fd)
        f = open(path, "rb")
        self.addCleanup(f.close)
        tr = _FakeConsumer()
        d = TlsTransportLayer().send(tr, [b"head", FileRegion(f, 10, len(data) - 10), b"tail"])
        results = []
        d.addCallback(results.append)
        # each pull writes at most one chunk (never the whole region)
        steps = 0
        while isinstance(tr.producer, ChunkedSender) and steps < 100:
            before = len(tr.writes)
            tr.drain()
            steps += 1
            self.assertLessEqual(sum(len(w) for w in tr.writes[before:]), CHUNK_SIZE + len(b"head"))
        self.assertTrue(all(len(w) <= CHUNK_SIZE for w in tr.writes if w not in (b"head", b"tail")))
        self.assertEqual(b"".join(tr.writes), b"head" + data[10:] + b"tail")
        # the drain waiter is registered now: done only after the buffer drained
        self.assertEqual(results, [])
        self.assertIsNotNone(tr.producer)
        self.assertTrue(tr.writing)
        tr.drain()
        self.assertEqual(results, [4 + len(data) - 10 + 4])
        self.assertIsNone(tr.producer)

    def test_connection_lost_fails_the_send(self):
        f = tempfile.TemporaryFile()
        f.write(b"x" * 100000)
        f.flush()
        self.addCleanup(f.close)
        tr = _FakeConsumer()
        sender = ChunkedSender(tr, [FileRegion(f, 0, 100000)])
        d = sender.start()
        failures = []
        d.addErrback(failures.append)
        tr.producer.stopProducing()
        self.assertEqual(len(failures), 1)
