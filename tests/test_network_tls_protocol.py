"""KafkaTlsProtocol over a real loopback TLS connection: small (aggregated) and bulk writes
arrive in the order written, whole, whatever their sizes; a bulk write before the handshake
has finished takes Twisted's buffered path and still arrives in order; after it, a bulk write
never does; received records are handed over together, all of them before a close_notify;
regions read and encrypted in a worker thread keep their place among the writes, and what
arrives or is asked for meanwhile (received bytes, a close) waits for the worker; byte
answers are handed to the kernel at once, behind the small writes held before them; without
pyOpenSSL's private binding, its public methods keep writes and reads whole and in order."""

import os
import socket
import ssl
import struct
import threading

from OpenSSL import SSL
from twisted.internet import defer, protocol, reactor, threads
from twisted.internet.interfaces import IPushProducer
from twisted.trial import unittest
from zope.interface import implementer

from kafkatw.network.framing import LARGE_FRAME, FrameDecoder
from kafkatw.network import tls_protocol
from kafkatw.network.tls import server_context_factory
from kafkatw.network.tls_protocol import THREAD_CHUNK, KafkaTlsProtocol, tls_factory
from kafkatw.network.transport import IBulkWriter, TlsTransportLayer, idle_socket
from kafkatw.tls_certs import make_test_pki


def _read_all(port, cafile, expected, go=None):
    """Connect over TLS and read ``expected`` bytes (fewer if the server closes first); with
    ``go`` (a threading.Event), only once it is set after the handshake."""
    ctx = ssl.create_default_context(cafile=cafile)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            if go is not None and not go.wait(30):
                return b""
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


class _FrameReader(protocol.Protocol):
    """Cuts size-delimited frames, the rest of large ones decrypted straight into them."""

    def connectionMade(self):
        self.factory.transports.append(self.transport)
        self.decoder = FrameDecoder(16 * 1024 * 1024)
        self.factory.installed = self.transport.receive_frames_into(self.decoder, self.received_into)

    def received_into(self, n):
        self.factory.into.append(n)
        self.cut()

    def dataReceived(self, data):
        self.decoder.feed(data)
        self.cut()

    def cut(self):
        while True:
            frame = self.decoder.next_frame()
            if frame is None:
                return
            self.factory.frames.append(bytes(frame))
            if len(self.factory.frames) == self.factory.expected:
                self.transport.write(b"done")

    def connectionLost(self, reason):
        self.factory.lost.callback([reason])


class TlsProtocolTests(unittest.TestCase):
    direct = True  # pyOpenSSL's private binding in use

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
        self.tls_factory = tls_factory(server_context_factory(cfg), self.factory, reactor)
        port = reactor.listenTCP(0, self.tls_factory, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.port = port.getHost().port

    @defer.inlineCallbacks
    def run_script(self, script):
        """``script``: [(kind, bytes)] written once the handshake is done; returns what the
        client read."""
        expected = sum(len(d) for _, d in self.factory.script_before + script)
        reading = threads.deferToThread(_read_all, self.port, self.cafile, expected)
        tls = yield self.connected()  # the script is written after the handshake
        self.assertIsInstance(tls, KafkaTlsProtocol)
        self.assertTrue(IBulkWriter.providedBy(tls))
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
    def test_byte_answers_are_handed_to_the_kernel_at_once_in_order(self):
        """``TlsTransportLayer.send_now`` of bytes: encrypted and sent at once behind the small
        writes held before it, its byte count returned; what the socket does not take whole
        is a Deferred of the drain; a registered producer leaves it to the producer path."""
        big = os.urandom(24 * 1024 * 1024)  # more than loopback's socket buffers take
        expected = b"held" + b"answer-1" + big + b"tail"
        go = threading.Event()
        reading = threads.deferToThread(_read_all, self.port, self.cafile, len(expected), go)
        self.addCleanup(go.set)
        tls = yield self.connected()
        yield self.idle(tls.transport)
        layer = TlsTransportLayer()
        tls.write(b"held")  # aggregated, not yet encrypted: must go first
        n = layer.send_now(tls, [b"ans", bytearray(b"wer-1")])
        if self.direct:
            self.assertEqual(n, 8)
        else:  # the producer path
            self.assertIsInstance(n, defer.Deferred)
            self.assertEqual((yield n), 8)
        d = layer.send_now(tls, [memoryview(big)])
        self.assertIsInstance(d, defer.Deferred)
        self.assertFalse(d.called)  # the client reads nothing yet
        go.set()
        self.assertEqual((yield d), len(big))
        if self.direct:
            self.assertEqual(layer.send_now(tls, [b"tail"]), 4)
            tls.registerProducer(_Idle(), True)
            self.assertIsNone(tls.write_now([b"more"]))
            tls.unregisterProducer()
        else:
            self.assertEqual((yield layer.send_now(tls, [b"tail"])), 4)
        self.assertEqual((yield reading), expected)
        tls.loseConnection()

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

    @defer.inlineCallbacks
    def connected(self):
        """The server's TLS protocol once its handshake is done."""
        for _ in range(3000):
            if self.factory.transports and self.factory.transports[0]._handshakeDone:
                return self.factory.transports[0]
            yield _later(0.01)
        self.fail("no TLS handshake within 30 s")

    @defer.inlineCallbacks
    def idle(self, tcp, producer_ok=False):
        """Once the handshake's last records (session tickets) are written out: the TCP
        connection's socket, nothing queued on it."""
        for _ in range(3000):
            sock = idle_socket(tcp, producer_ok)
            if sock is not None:
                return sock
            yield _later(0.01)
        self.fail("the TCP connection under TLS still had bytes queued after 30 s")

    def region_file(self, size):
        data = os.urandom(size)
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(data)
        f = open(path, "rb")
        self.addCleanup(f.close)
        return data, f.fileno()

    @defer.inlineCallbacks
    def test_regions_in_a_worker_keep_their_place_among_writes(self):
        data, fd = self.region_file(THREAD_CHUNK * 2 + 12345)
        expected = b"head" + data[:THREAD_CHUNK] + b"during" + data[THREAD_CHUNK:] + b"tail"
        reading = threads.deferToThread(_read_all, self.port, self.cafile, len(expected))
        tls = yield self.connected()
        tls.write(b"head")
        d = tls.write_region(fd, 0, len(data))
        self.assertIsNotNone(d)
        self.assertIsNone(tls.write_region(fd, 0, len(data)))  # one job at a time
        tls.write(b"during")  # held until the region is written
        sent = yield d
        self.assertEqual(sent, THREAD_CHUNK)
        while sent < len(data):
            n = yield tls.write_region(fd, sent, len(data) - sent)
            sent += n
        self.assertEqual(sent, len(data))
        self.assertEqual((yield tls.write_region(fd, sent, 100)), 0)  # end of the file
        tls.write(b"tail")
        got = yield reading
        tls.loseConnection()
        self.assertEqual(got, expected)

    @defer.inlineCallbacks
    def test_a_workers_descriptor_of_the_socket_is_closed_with_its_job(self):
        """A worker sends on its own duplicate descriptor of the socket, closed once its job
        is done: one per job in flight, not one more per connection for its lifetime."""
        data, fd = self.region_file(THREAD_CHUNK)
        socks = []
        run = self.tls_factory.run_in_thread

        def recording(f, *args):
            socks.append(args[-1])
            return run(f, *args)

        self.tls_factory.run_in_thread = recording
        reading = threads.deferToThread(_read_all, self.port, self.cafile, len(data))
        tls = yield self.connected()
        yield self.idle(tls.transport, producer_ok=True)
        self.assertEqual((yield tls.write_region(fd, 0, len(data))), len(data))
        [sock] = socks
        self.assertIsInstance(sock, socket.socket)
        self.assertEqual(sock.fileno(), -1)  # closed
        self.assertEqual((yield reading), data)
        tls.loseConnection()

    @defer.inlineCallbacks
    def test_bytes_received_and_a_close_during_a_region_wait_for_it(self):
        data, fd = self.region_file(THREAD_CHUNK)
        jobs = []

        def held_job(f, *args):
            jobs.append((f, args, defer.Deferred()))
            return jobs[-1][2]

        self.tls_factory.run_in_thread = held_job
        ctx = ssl.create_default_context(cafile=self.cafile)
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        client = ctx.wrap_socket(raw, server_hostname="localhost", do_handshake_on_connect=False)
        self.addCleanup(client.close)
        handshake = threads.deferToThread(client.do_handshake)
        tls = yield self.connected()
        yield handshake
        d = tls.write_region(fd, 0, len(data))
        self.assertEqual(len(jobs), 1)
        yield threads.deferToThread(client.sendall, b"ping")
        for _ in range(3000):
            if tls._held_in:
                break
            yield _later(0.01)
        self.assertEqual(self.factory.received, [])  # the worker owns the TLS state
        tls.loseConnection()  # waits for the region
        self.assertFalse(self.factory.lost.called)
        f, args, job = jobs[0]
        threads.deferToThread(f, *args).chainDeferred(job)
        self.assertEqual((yield d), len(data))
        yield _later(0)  # the held bytes are replayed right after the region's Deferred fires
        self.assertEqual(b"".join(self.factory.received), b"ping")

        def read_to_close():
            got = bytearray()
            while True:
                chunk = client.recv(1 << 20)
                if not chunk:
                    return bytes(got)
                got += chunk

        got = yield threads.deferToThread(read_to_close)  # to the server's close_notify
        self.assertEqual(got, data)
        client.close()
        yield self.factory.lost

    @defer.inlineCallbacks
    def test_idle_socket_is_never_the_tls_wrappers(self):
        """transport.idle_socket (bytes straight to the socket) answers for the TCP connection
        under TLS, never for the TLS wrapper (which forwards attribute reads to it: plaintext
        would reach the socket), nor for a connection that is gone."""
        reading = threads.deferToThread(_read_all, self.port, self.cafile, 3)
        tls = yield self.connected()
        tcp = tls.transport
        yield self.idle(tcp)
        self.assertIs(idle_socket(tcp), tcp.getHandle())
        self.assertIsNone(idle_socket(tls))
        tls.write(b"end")
        self.assertEqual((yield reading), b"end")
        tls.loseConnection()
        yield self.factory.lost
        self.assertIsNone(idle_socket(tcp))

    @defer.inlineCallbacks
    def test_records_beyond_the_workers_buffer_follow_in_order(self):
        """A TLS 1.2 CBC suite with a SHA-384 MAC adds up to 85 bytes a record, more than the
        worker's ciphertext buffer allows for: the records that do not fit in it follow, in
        order."""
        data, fd = self.region_file(THREAD_CHUNK)
        outcomes = []
        run = self.tls_factory.run_in_thread

        def recording(f, *args):
            return run(f, *args).addCallback(lambda outcome: outcomes.append(outcome) or outcome)

        self.tls_factory.run_in_thread = recording

        def read():
            ctx = ssl.create_default_context(cafile=self.cafile)
            ctx.maximum_version = ssl.TLSVersion.TLSv1_2
            ctx.set_ciphers("ECDHE-ECDSA-AES256-SHA384")
            with socket.create_connection(("127.0.0.1", self.port), timeout=30) as raw:
                with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                    got = bytearray()
                    while len(got) < len(data) + 3:
                        chunk = s.recv(1 << 20)
                        if not chunk:
                            break
                        got += chunk
                    return s.cipher()[0], bytes(got)

        reading = threads.deferToThread(read)
        tls = yield self.connected()
        self.assertEqual((yield tls.write_region(fd, 0, len(data))), len(data))
        tls.write(b"end")
        cipher, got = yield reading
        tls.loseConnection()
        self.assertEqual(cipher, "ECDHE-ECDSA-AES256-SHA384")
        self.assertEqual(got, data + b"end")
        [(_, taken, filled, sent, rest)] = outcomes
        self.assertEqual(taken, len(data))
        self.assertGreater(len(rest), 0)  # the buffer was full: this is the path under test
        self.assertEqual(sent, 0)  # not sent from the worker: the rest must follow it

    @defer.inlineCallbacks
    def test_a_failed_read_in_the_worker_fails_the_region(self):
        reading = threads.deferToThread(_read_all, self.port, self.cafile, 3)
        tls = yield self.connected()
        r, w = os.pipe()
        os.close(r)
        os.close(w)  # a descriptor number that is closed: EBADF
        with self.assertRaises(OSError):
            yield tls.write_region(r, 0, THREAD_CHUNK)
        tls.write(b"end")  # the connection still works
        self.assertEqual((yield reading), b"end")
        tls.loseConnection()

    @defer.inlineCallbacks
    def send_frames(self):
        """Frames large and small sent over TLS to a :class:`_FrameReader`: those sent."""
        self.factory.protocol = _FrameReader
        self.factory.frames, self.factory.into = [], []
        frames = [os.urandom(3 * 1024 * 1024), b"small-one", os.urandom(LARGE_FRAME * 2 + 7),
                  os.urandom(100)]
        self.factory.expected = len(frames)
        wire = b"".join(struct.pack(">i", len(f)) + f for f in frames)

        def exchange():
            ctx = ssl.create_default_context(cafile=self.cafile)
            with socket.create_connection(("127.0.0.1", self.port), timeout=30) as raw:
                with ctx.wrap_socket(raw, server_hostname="localhost") as c:
                    c.sendall(wire)
                    return c.recv(4)

        self.assertEqual((yield threads.deferToThread(exchange)), b"done")
        yield self.factory.lost  # the client's close seen: nothing left in the reactor
        return frames

    @defer.inlineCallbacks
    def test_large_frames_are_decrypted_straight_into_their_buffers(self):
        frames = yield self.send_frames()
        self.assertTrue(self.factory.installed)
        self.assertEqual(self.factory.frames, frames)
        # most of the large frames' bytes were decrypted into them, not handed over as data
        self.assertGreater(sum(self.factory.into), 0.8 * (len(frames[0]) + len(frames[2])))


class PublicMethodsTests(TlsProtocolTests):
    """The same connection on pyOpenSSL's public methods only (``tls_protocol._DIRECT`` off, as
    on a pyOpenSSL whose private binding moved): small and bulk writes keep their order and
    content, a region is left to the caller (read on the reactor) and frames are cut from the
    data handed over. Tests of what only the direct path does are skipped."""

    direct = False

    def setUp(self):
        TlsProtocolTests.setUp(self)
        self.patch(tls_protocol, "_DIRECT", False)

    def direct_path_only(self):
        raise unittest.SkipTest("what only the direct path does")

    test_received_records_are_handed_over_together_and_before_close_notify = direct_path_only
    test_regions_in_a_worker_keep_their_place_among_writes = direct_path_only
    test_bytes_received_and_a_close_during_a_region_wait_for_it = direct_path_only
    test_a_failed_read_in_the_worker_fails_the_region = direct_path_only
    test_records_beyond_the_workers_buffer_follow_in_order = direct_path_only
    test_a_workers_descriptor_of_the_socket_is_closed_with_its_job = direct_path_only
    test_large_frames_are_decrypted_straight_into_their_buffers = direct_path_only

    @defer.inlineCallbacks
    def test_frames_are_cut_from_data_handed_over(self):
        frames = yield self.send_frames()
        self.assertFalse(self.factory.installed)
        self.assertEqual(self.factory.frames, frames)
        self.assertEqual(self.factory.into, [])

    @defer.inlineCallbacks
    def test_a_region_is_left_to_the_caller_and_writes_still_go(self):
        data, fd = self.region_file(THREAD_CHUNK)
        reading = threads.deferToThread(_read_all, self.port, self.cafile, 3)
        tls = yield self.connected()
        self.assertIsNone(tls.write_region(fd, 0, len(data)))
        tls.write(b"end")
        self.assertEqual((yield reading), b"end")
        tls.loseConnection()

@implementer(IPushProducer)
class _Idle:
    def pauseProducing(self):
        pass

    def resumeProducing(self):
        pass

    def stopProducing(self):
        pass


def _later(seconds):
    d = defer.Deferred()
    reactor.callLater(seconds, d.callback, None)
    return d




class DirectBindingTests(unittest.SynchronousTestCase):
    def test_a_pyopenssl_without_the_private_names_gets_the_public_methods(self):
        """Every private name the direct path uses is probed at import: one missing means
        the public methods, not an AttributeError at a connection's first region."""
        self.assertIsNotNone(tls_protocol._direct_binding()[1])

        class Moved:  # a Connection whose private attributes are named otherwise
            def __init__(self, context):
                self._ssl_moved = context

        self.patch(SSL, "Connection", Moved)
        self.assertEqual(tls_protocol._direct_binding(), (None, None))
