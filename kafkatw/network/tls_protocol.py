"""The TLS connection wrapper of SSL/SASL_SSL listeners: Twisted's ``TLSMemoryBIOProtocol`` with
small writes aggregated (as Twisted's ``BufferingTLSTransport``), a bulk write for file regions
and a bulk read.

Twisted encrypts a write 16 KiB at a time, each slice copied, each record read out of the
memory BIO into a fresh 32 KiB buffer and written to TCP on its own; it decrypts one record per
``recv`` into a fresh buffer and hands each to the application on its own: per byte, that
Python work costs several times what OpenSSL's encryption does. A region chunk instead goes
through one ``SSL_write`` (OpenSSL cuts the records) whose records are read out of the BIO into
one reused buffer and sent on the socket at once when nothing is queued before them; received
records are decrypted into one reused buffer and handed over together. Handshake, shutdown and
producers stay Twisted's. Listeners use :func:`tls_factory`.
"""

from OpenSSL import SSL
from twisted.protocols.policies import ProtocolWrapper
from twisted.protocols.tls import TLSMemoryBIOFactory, TLSMemoryBIOProtocol
from twisted.python.failure import Failure
from zope.interface import implementer

from kafkatw.network.transport import IBulkWriter

try:
    # pyOpenSSL's own cffi binding: SSL_read and BIO_read straight into our buffers (its
    # recv and bio_read allocate and copy twice per call). Without it, its public methods.
    from OpenSSL._util import ffi as _ffi
    from OpenSSL._util import lib as _lib

    _DIRECT = hasattr(SSL.Connection, "_raise_ssl_error") and hasattr(_lib, "BIO_read")
except ImportError:  # pragma: no cover - another pyOpenSSL layout
    _DIRECT = False

#: Small writes are held until this many bytes (or the next reactor turn), as Twisted's
#: ``_AggregateSmallWrites`` does, so one read's many small answers become few TLS records.
AGGREGATE_BYTES = 64 * 1024

# Ciphertext per TLS record above its plaintext: TLS 1.3 adds 22 bytes (header, content type,
# tag), TLS 1.2 AES-GCM 29; 64 leaves room for any suite a listener may allow.
_RECORD_PLAINTEXT = 16384
_RECORD_OVERHEAD = 64

#: Plaintext decrypted per hand-over to the application (and the TCP read size under TLS).
READ_BYTES = 256 * 1024

# Scratch buffers of the reactor thread, shared by every connection: what is read into them is
# copied out (or sent) before anything else runs.
_SEND_SCRATCH = bytearray(512 * 1024)
_RECV_SCRATCH = bytearray(READ_BYTES)
if _DIRECT:
    _SEND_PTR = _ffi.from_buffer(_SEND_SCRATCH)
    _RECV_PTR = _ffi.from_buffer(_RECV_SCRATCH)


def _idle_tcp(transport):
    """The socket of a TCP transport with nothing queued to write, else None."""
    if (not getattr(transport, "connected", False) or getattr(transport, "disconnecting", True)
            or getattr(transport, "_tempDataBuffer", True)
            or len(transport.dataBuffer) != transport.offset):
        return None
    return transport.getHandle()


@implementer(IBulkWriter)
class KafkaTlsProtocol(TLSMemoryBIOProtocol):
    """One TLS connection; ``write_bulk`` is what :class:`transport.ChunkedSender` uses."""

    def __init__(self, factory, wrappedProtocol, _connectWrapped=True):
        TLSMemoryBIOProtocol.__init__(self, factory, wrappedProtocol, _connectWrapped)
        self._small = []
        self._small_size = 0
        self._flush_call = None
        self._clock = factory.clock

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
        if self._small:
            data = b"".join(self._small) if len(self._small) > 1 else self._small[0]
            self._small = []
            self._small_size = 0
            TLSMemoryBIOProtocol.write(self, data)

    # -- bulk writes -------------------------------------------------------------------------

    def write_bulk(self, data):
        """Encrypt ``data`` (bytes-like, typically a 256 KiB region chunk) and hand its records
        to TCP together, after whatever was written before."""
        self.flush_small_writes()
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
        tcp = self.transport
        while True:
            n = _lib.BIO_read(bio, _SEND_PTR, size)
            if n <= 0:
                return
            sock = _idle_tcp(tcp)
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
        # TCP reads as large as a hand-over: a 1 MiB produce request in 4 reads, not 16
        if hasattr(transport, "bufferSize"):
            transport.bufferSize = READ_BYTES
        TLSMemoryBIOProtocol.makeConnection(self, transport)

    def _flushReceiveBIO(self):
        """Twisted's, but every record available is decrypted into one buffer and handed to
        the application as one piece (up to ``READ_BYTES``)."""
        if not _DIRECT:
            return TLSMemoryBIOProtocol._flushReceiveBIO(self)
        conn = self._tlsConnection
        ssl = conn._ssl
        size = len(_RECV_SCRATCH)
        while not self._lostTLSConnection:
            filled = 0
            end = None  # why reading stopped: "want", "eof" or a Failure
            while filled < size:
                result = _lib.SSL_read(ssl, _RECV_PTR + filled, size - filled)
                if result > 0:
                    filled += result
                    continue
                try:
                    conn._raise_ssl_error(ssl, result)
                    end = "want"  # pragma: no cover - SSL_read <= 0 always raises
                except SSL.WantReadError:
                    end = "want"
                except SSL.ZeroReturnError:
                    end = "eof"
                except SSL.Error:
                    end = Failure()
                break
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
        self.flush_small_writes()
        TLSMemoryBIOProtocol.loseConnection(self)

    def connectionLost(self, reason=None):
        if self._flush_call is not None and self._flush_call.active():
            self._flush_call.cancel()
        self._flush_call = None
        self._small = []
        self._small_size = 0
        TLSMemoryBIOProtocol.connectionLost(self, reason)


class KafkaTlsFactory(TLSMemoryBIOFactory):
    """``TLSMemoryBIOFactory`` making :class:`KafkaTlsProtocol` connections."""

    protocol = KafkaTlsProtocol

    def __init__(self, context_factory, wrapped_factory, clock):
        TLSMemoryBIOFactory.__init__(self, context_factory, False, wrapped_factory, clock)
        self.clock = clock


def tls_factory(context_factory, wrapped_factory, clock):
    """The server-side TLS wrapper of a listener's factory."""
    return KafkaTlsFactory(context_factory, wrapped_factory, clock)
