"""The TLS connection wrapper of SSL/SASL_SSL listeners: Twisted's ``TLSMemoryBIOProtocol`` with
small writes aggregated (as Twisted's ``BufferingTLSTransport``), a bulk write for file regions
and a bulk read.

Twisted encrypts a write 16 KiB at a time, each slice copied, each record read out of the
memory BIO into a fresh 32 KiB buffer and written to TCP on its own; it decrypts one record per
``recv`` into a fresh buffer and hands each to the application on its own: per byte, that
Python work costs several times what OpenSSL's encryption does. A region chunk instead goes
through one ``SSL_write`` (OpenSSL cuts the records) whose records are read out of the BIO into
one reused buffer and sent on the socket at once when nothing is queued before them; a region
of 1 MiB is read, encrypted and sent in a worker thread (``write_region``) while the reactor
serves other connections; a response of bytes only is encrypted and sent at once
(``write_now``); received records are decrypted into one reused buffer and handed over
together. Handshake, shutdown and producers stay Twisted's. Listeners use
:func:`tls_factory`.
"""

import os

from OpenSSL import SSL
from twisted.internet import defer, tcp, threads
from twisted.protocols.policies import ProtocolWrapper
from twisted.protocols.tls import TLSMemoryBIOFactory, TLSMemoryBIOProtocol
from twisted.python.failure import Failure
from zope.interface import implementer

from kafkatw.network.socket_reader import receive_into
from kafkatw.network.transport import IBulkWriter, idle_socket


def _direct_binding():
    """pyOpenSSL's own cffi binding (ffi, lib) when it offers all this module uses of it, else
    (None, None): SSL_read and BIO_read straight into our buffers (its recv and bio_read
    allocate and copy twice per call). Without it, its public methods."""
    try:
        from OpenSSL._util import ffi, lib

        conn = SSL.Connection(SSL.Context(SSL.TLS_METHOD))
    except Exception:  # pragma: no cover - another pyOpenSSL layout
        return None, None
    functions = ("BIO_read", "SSL_read", "SSL_write", "SSL_clear_mode", "SSL_MODE_ENABLE_PARTIAL_WRITE")
    attributes = ("_ssl", "_from_ssl", "_raise_ssl_error")
    if all(hasattr(lib, f) for f in functions) and all(hasattr(conn, a) for a in attributes):
        return ffi, lib
    return None, None  # a pyOpenSSL whose private names moved


_ffi, _lib = _direct_binding()
_DIRECT = _lib is not None

#: Small writes are held until this many bytes (or the next reactor turn), as Twisted's
#: ``_AggregateSmallWrites`` does, so one read's many small answers become few TLS records.
AGGREGATE_BYTES = 64 * 1024

# Ciphertext per TLS record above its plaintext: TLS 1.3 adds 22 bytes (header, content type,
# tag), TLS 1.2 AES-GCM 29; 64 leaves room for those. A TLS 1.2 CBC suite adds up to 85 (IV,
# SHA-384 MAC, padding): what does not fit in a buffer sized with 64 is read out after it.
_RECORD_PLAINTEXT = 16384
_RECORD_OVERHEAD = 64

#: Plaintext decrypted per hand-over to the application.
READ_BYTES = 256 * 1024
#: Ciphertext read per ``recv`` (a 1 MiB produce request in one or two reads: each read is a
#: reactor turn, a copy into the memory BIO and a decryption loop).
SOCKET_READ_BYTES = 1024 * 1024

# Scratch buffers of the reactor thread, shared by every connection: what is read into them is
# copied out (or sent) before anything else runs.
_SEND_SCRATCH = bytearray(512 * 1024)
_RECV_SCRATCH = bytearray(READ_BYTES)
_SOCK_SCRATCH = bytearray(SOCKET_READ_BYTES)  # ciphertext read from a socket
if _DIRECT:
    _SEND_PTR = _ffi.from_buffer(_SEND_SCRATCH)
    _RECV_PTR = _ffi.from_buffer(_RECV_SCRATCH)


#: What one worker job of ``write_region`` reads and encrypts (OpenSSL and ``pread`` release
#: the GIL: the reactor meanwhile serves other connections).
THREAD_CHUNK = 1024 * 1024
_THREAD_OUT = THREAD_CHUNK + (THREAD_CHUNK // _RECORD_PLAINTEXT + 1) * _RECORD_OVERHEAD
#: Spare (plaintext, ciphertext) buffer pairs kept for the next jobs (one per job in flight).
_SPARE_BUFFERS = 4


def _encrypt_region(conn, fd, position, size, plain, out, sock):
    """In a worker thread, the connection's sole user meanwhile: read ``size`` bytes at
    ``position`` of ``fd`` into ``plain``, encrypt them into ``conn``'s send BIO, read the
    records into ``out`` and send what ``sock`` (a duplicate of the connection's socket, or
    None when bytes are queued before these) takes. Returns (plaintext bytes read, plaintext
    bytes encrypted, ciphertext bytes in ``out``, ciphertext bytes sent, any ciphertext that
    did not fit in ``out``)."""
    view = memoryview(plain)[:size]
    got = os.preadv(fd, [view], position)
    if not got:
        return 0, 0, 0, 0, None
    taken = KafkaTlsProtocol._encrypt(conn, view[:got], got)
    filled = 0
    rest = None
    bio = conn._from_ssl
    with _ffi.from_buffer(out) as ptr:
        while filled < len(out):
            n = _lib.BIO_read(bio, ptr + filled, len(out) - filled)
            if n <= 0:
                break
            filled += n
    if filled == len(out):
        rest = []
        while True:
            try:
                rest.append(conn.bio_read(65536))
            except SSL.WantReadError:
                break
    sent = 0
    if sock is not None and filled and not rest:
        try:
            sent = sock.send(memoryview(out)[:filled])
        except OSError:
            sent = 0  # full (the reactor queues the rest) or broken (the reactor meets it)
    return got, taken, filled, sent, rest


def _read_records(conn, ptr, size):
    """``SSL_read`` records into ``ptr`` (``size`` bytes) until it is full or OpenSSL stops:
    (bytes read, None when full, else "want" (more ciphertext needed), "eof" (close_notify)
    or a Failure)."""
    ssl = conn._ssl
    filled = 0
    while filled < size:
        result = _lib.SSL_read(ssl, ptr + filled, size - filled)
        if result > 0:
            filled += result
            continue
        try:
            conn._raise_ssl_error(ssl, result)
        except SSL.WantReadError:
            return filled, "want"
        except SSL.ZeroReturnError:
            return filled, "eof"
        except SSL.Error:
            return filled, Failure()
        return filled, "want"  # pragma: no cover - SSL_read <= 0 always raises
    return filled, None


@implementer(IBulkWriter)
class KafkaTlsProtocol(TLSMemoryBIOProtocol):
    """One TLS connection; ``write_bulk`` is what :class:`transport.ChunkedSender` uses."""

    def __init__(self, factory, wrappedProtocol, _connectWrapped=True):
        TLSMemoryBIOProtocol.__init__(self, factory, wrappedProtocol, _connectWrapped)
        self._small = []
        self._small_size = 0
        self._flush_call = None
        self._clock = factory.clock
        # A worker job owns the SSL object: what would touch it meanwhile waits
        self._job = None
        self._held_in = None  # ciphertext received during a job
        self._after_job = []  # ends (lose, abort, connectionLost) asked for during a job
        self._frames = None  # (decoder, received_into) of receive_frames_into

    # -- small writes, aggregated --------------------------------------------------------------

    def write(self, data):
        if not data:
            return
        self._small.append(bytes(data))
        self._small_size += len(data)
        if self._small_size >= AGGREGATE_BYTES:
            self.flush_small_writes()
        elif self._flush_call is None:
            self._flush_call = self._clock.callLater(0, self._scheduled_flush)

    def writeSequence(self, iovec):
        self.write(b"".join(iovec))

    def _scheduled_flush(self):
        self._flush_call = None
        self.flush_small_writes()

    def flush_small_writes(self):
        """Encrypt what small writes hold now (before anything written after them)."""
        if self._flush_call is not None:
            if self._flush_call.active():
                self._flush_call.cancel()
            self._flush_call = None
        if self._small and self._job is None:
            data = b"".join(self._small) if len(self._small) > 1 else self._small[0]
            self._small = []
            self._small_size = 0
            self._write_records(data)

    # -- bulk writes -------------------------------------------------------------------------

    def write_bulk(self, data):
        """Encrypt ``data`` (bytes-like, typically a 256 KiB region chunk) and hand its records
        to TCP together, after whatever was written before."""
        self.flush_small_writes()
        self._write_records(data)

    def _write_records(self, data):
        """Encrypt ``data`` in one ``SSL_write`` and send its records on the socket when
        nothing waits before them (else behind what does)."""
        if self._lostTLSConnection:
            return
        view = memoryview(data)
        total = len(view)
        if self._appSendBuffer:
            # bytes wait for a handshake step: these go behind them, through Twisted
            self._twisted_write(bytes(view))
            return
        conn = self.getHandle()
        sent = self._encrypt(conn, view, total)
        if sent:
            self._flush_records(conn, sent)
        if sent < total:
            # WantReadError (a handshake step pending) or a broken session: Twisted's own write
            # buffers the bytes behind those waiting, or tears the connection down
            self._twisted_write(bytes(view[sent:]))

    def _bypass_ready(self):
        """True when the SSL object may be written past Twisted's write now: the private
        binding is there, no worker job owns it, the handshake is done with nothing waiting
        for a step of it, and the connection is neither lost nor aborted."""
        return (_DIRECT and self._job is None and self._handshakeDone and not self._appSendBuffer
                and not self._lostTLSConnection and not self._aborted)

    def write_now(self, parts):
        """Encrypt the byte ``parts`` (a small response) after everything written before and
        hand the records to TCP now: True when the kernel took them all (the TCP transport
        buffers nothing), False when some wait in its buffer (it drains them); None when
        this cannot be done now (a worker job, a handshake step, a producer registered here
        or on the TCP transport): the caller then writes through a producer. Without it each
        answer went through a pull producer, a Cooperator turn and a drain wait."""
        tcp_transport = self.transport
        if (not self._bypass_ready() or self._producer is not None
                or not isinstance(tcp_transport, tcp.Connection) or tcp_transport.producer is not None):
            return None
        self.write_bulk(parts[0] if len(parts) == 1 else b"".join(parts))
        return idle_socket(tcp_transport) is not None

    def write_region(self, fd, position, size):
        """Read ``size`` bytes at ``position`` of ``fd`` and write them encrypted, the reading
        and encryption in a worker thread; a Deferred firing with the plaintext bytes read
        (0: the file ended) once the records are handed to TCP, or None when the connection
        cannot hand its TLS state to a thread now (the caller writes synchronously)."""
        if not self._bypass_ready() or self.factory.run_in_thread is None:
            return None
        self.flush_small_writes()
        factory = self.factory
        buffers = factory.spare.pop() if factory.spare else (bytearray(THREAD_CHUNK), bytearray(_THREAD_OUT))
        sock = idle_socket(self.transport, producer_ok=True)
        if sock is not None:
            # the worker sends on its own descriptor of the socket, closed once it is done: the
            # reactor may close its own meanwhile (a reset), never one that a new connection
            # could then reuse
            try:
                sock = sock.dup()
            except OSError:
                sock = None  # (out of descriptors) the reactor sends the records
        result = defer.Deferred()
        self._job = result
        self._held_in = []
        if self._producer is not None:
            self._producer.pauseProducing()  # its pulls wait for the job
        d = factory.run_in_thread(_encrypt_region, self._tlsConnection, fd, position,
                                  min(size, THREAD_CHUNK), buffers[0], buffers[1], sock)
        d.addBoth(self._region_encrypted, result, buffers, sock)
        return result

    def _region_encrypted(self, outcome, result, buffers, sock):
        self._job = None
        if sock is not None:
            sock.close()
        if isinstance(outcome, Failure):
            self._release_buffers(buffers)
            result.errback(outcome)
        else:
            got, taken, filled, sent, rest = outcome
            if sent < filled:
                self._send_ciphertext(memoryview(buffers[1])[sent:], filled - sent)
            for records in rest or ():
                self.transport.write(records)
            if taken < got:
                # an SSL error: Twisted's write meets it and tears the connection down
                self._twisted_write(bytes(memoryview(buffers[0])[taken:got]))
            self._release_buffers(buffers)
            result.callback(got)
        self._resume_after_job()

    def _release_buffers(self, buffers):
        if len(self.factory.spare) < _SPARE_BUFFERS:
            self.factory.spare.append(buffers)

    def _resume_after_job(self):
        """Replay what waited for the job: received bytes, small writes, ends; then let the
        producer pull again."""
        if self._job is not None:
            return
        held, self._held_in = self._held_in, None
        if held:
            self.dataReceived(b"".join(held))
            if self._job is not None:
                return
        if self._small and self._flush_call is None:
            self.flush_small_writes()
        ends, self._after_job = self._after_job, []
        for end in ends:
            end()
        producer = self._producer
        if producer is not None and self._job is None and not getattr(self.transport, "producerPaused", False):
            producer.resumeProducing()

    def _twisted_write(self, data):
        """Twisted's write (16 KiB slices): for what the bulk path cannot take."""
        TLSMemoryBIOProtocol.write(self, data)

    @staticmethod
    def _encrypt(conn, view, total):
        """``SSL_write`` ``view`` into the send BIO; the plaintext bytes taken. pyOpenSSL sets
        SSL_MODE_ENABLE_PARTIAL_WRITE, so each call takes one record: loop, stop at an error."""
        sent = 0
        if _DIRECT:
            ssl = conn._ssl
            with _ffi.from_buffer(view) as ptr:
                while sent < total:
                    n = _lib.SSL_write(ssl, ptr + sent, total - sent)
                    if n <= 0:
                        break
                    sent += n
            return sent
        while sent < total:
            try:
                sent += conn.send(view[sent:])
            except SSL.Error:
                break
        return sent

    def _flush_records(self, conn, plaintext):
        if not _DIRECT:
            return self._flush_records_public(conn, plaintext)
        bio = conn._from_ssl
        view = memoryview(_SEND_SCRATCH)
        size = len(_SEND_SCRATCH)
        while True:
            n = _lib.BIO_read(bio, _SEND_PTR, size)
            if n <= 0:
                return
            self._send_ciphertext(view, n)

    def _send_ciphertext(self, view, n):
        """Send ``view[:n]`` on the socket if nothing is queued before it; queue the rest."""
        tcp = self.transport
        sock = idle_socket(tcp, producer_ok=True)
        sent = 0
        if sock is not None:
            try:
                sent = sock.send(view[:n])
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                sent = 0  # the transport meets the error on its next write and closes
        if sent < n:
            tcp.write(bytes(view[sent:n]))

    def _flush_records_public(self, conn, plaintext):
        size = plaintext + (plaintext // _RECORD_PLAINTEXT + 1) * _RECORD_OVERHEAD
        records = []
        while True:
            try:
                records.append(conn.bio_read(size))
            except SSL.WantReadError:
                break
            size = 4096
        if len(records) == 1:
            self.transport.write(records[0])
        elif records:
            self.transport.writeSequence(records)

    # -- reading -----------------------------------------------------------------------------

    def makeConnection(self, transport):
        # Twisted's own reads (without the private binding; with it, _make_reader's 1 MiB
        # reads replace them) as large as a hand-over: a 1 MiB produce request in 4, not 16
        if hasattr(transport, "bufferSize"):
            transport.bufferSize = READ_BYTES
        TLSMemoryBIOProtocol.makeConnection(self, transport)
        if _DIRECT and isinstance(transport, tcp.Connection):
            transport.doRead = self._make_reader(transport.socket)
        if _DIRECT and self._tlsConnection is not None:
            # pyOpenSSL's partial-write mode makes SSL_write stop after one record; a memory
            # BIO never blocks, so without it one call encrypts a whole chunk (one release of
            # the GIL, not 64 per MiB)
            _lib.SSL_clear_mode(self._tlsConnection._ssl, _lib.SSL_MODE_ENABLE_PARTIAL_WRITE)

    def dataReceived(self, data):
        if self._job is not None:
            self._held_in.append(bytes(data))  # ``data`` may be a view of a reused buffer
            return
        TLSMemoryBIOProtocol.dataReceived(self, data)

    def _make_reader(self, sock):
        """The TCP transport's ``doRead``: ciphertext is received into one reused buffer and
        given to the memory BIO from there (Twisted's makes a new 256 KiB bytes per read)."""
        view = memoryview(_SOCK_SCRATCH)

        def doRead():
            n = receive_into(sock, _SOCK_SCRATCH)
            if type(n) is not int:
                return n
            self.dataReceived(view[:n])
            return None

        return doRead

    def receive_frames_into(self, decoder, received_into):
        """Decrypt the rest of ``decoder``'s large frames straight into them (its
        ``receive_view``), calling ``received_into(n)`` after ``n`` bytes went in, as
        ``network.socket_reader`` does on plain TCP. False when this pyOpenSSL cannot."""
        if not _DIRECT:
            return False
        self._frames = (decoder, received_into)
        return True

    def _flushReceiveBIO(self):
        """Twisted's, but every record available is decrypted into one buffer (the rest of a
        large frame itself, or a scratch buffer) and handed over as one piece."""
        if not _DIRECT:
            return TLSMemoryBIOProtocol._flushReceiveBIO(self)
        conn = self._tlsConnection
        frames = self._frames
        while not self._lostTLSConnection:
            view = frames[0].receive_view() if frames is not None and not self._aborted else None
            if view is not None:
                with _ffi.from_buffer(view) as ptr:
                    filled, end = _read_records(conn, ptr, len(view))
                if filled:
                    frames[0].received_into(filled)
                    frames[1](filled)
            else:
                filled, end = _read_records(conn, _RECV_PTR, len(_RECV_SCRATCH))
                if filled and not self._aborted:
                    ProtocolWrapper.dataReceived(self, bytes(memoryview(_RECV_SCRATCH)[:filled]))
            if end == "want":
                break
            if end == "eof":
                # TLS shut down (close_notify): as Twisted, reply and let the transport's
                # reason reach the application
                self._shutdownTLS()
                self._tlsShutdownFinished(None)
            elif end is not None:
                self._tlsShutdownFinished(end)
        self._flushSendBIO()

    # -- ends --------------------------------------------------------------------------------

    def loseConnection(self):
        if self._job is not None:
            self._after_job.append(self.loseConnection)
            return
        self.flush_small_writes()
        TLSMemoryBIOProtocol.loseConnection(self)

    def abortConnection(self):
        if self._job is not None:
            self._after_job.append(self.abortConnection)
            return
        TLSMemoryBIOProtocol.abortConnection(self)

    def _shutdownTLS(self):
        if self._job is not None:
            self._after_job.append(self._shutdownTLS)
            return
        TLSMemoryBIOProtocol._shutdownTLS(self)

    def connectionLost(self, reason=None):
        if self._job is not None:
            self._after_job.append(lambda: self.connectionLost(reason))
            return
        if self._flush_call is not None and self._flush_call.active():
            self._flush_call.cancel()
        self._flush_call = None
        self._small = []
        self._small_size = 0
        TLSMemoryBIOProtocol.connectionLost(self, reason)


class KafkaTlsFactory(TLSMemoryBIOFactory):
    """``TLSMemoryBIOFactory`` making :class:`KafkaTlsProtocol` connections."""

    protocol = KafkaTlsProtocol

    def __init__(self, context_factory, wrapped_factory, clock, run_in_thread=None):
        TLSMemoryBIOFactory.__init__(self, context_factory, False, wrapped_factory, clock)
        self.clock = clock
        self.spare = []  # ciphertext buffers of finished jobs
        if run_in_thread is None and hasattr(clock, "getThreadPool"):
            def run_in_thread(f, *args):
                return threads.deferToThreadPool(clock, clock.getThreadPool(), f, *args)
        self.run_in_thread = run_in_thread  # None (a fake clock): regions stay on the reactor


def tls_factory(context_factory, wrapped_factory, clock, run_in_thread=None):
    """The server-side TLS wrapper of a listener's factory; ``run_in_thread(f, *args)``
    returns a Deferred of ``f(*args)`` run in a worker thread (default: the reactor's pool)."""
    return KafkaTlsFactory(context_factory, wrapped_factory, clock, run_in_thread)
