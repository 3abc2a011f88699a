"""The TLS connection wrapper of SSL/SASL_SSL listeners: Twisted's ``TLSMemoryBIOProtocol`` with
small writes aggregated (as Twisted's ``BufferingTLSTransport``) and a bulk write for file regions.

Twisted encrypts a write 16 KiB at a time, each slice copied, each record read out of the
memory BIO into a fresh 32 KiB buffer and written to TCP on its own: per byte, that Python work
costs several times what OpenSSL's encryption does. A region chunk instead goes through one
``SSL_write`` (OpenSSL cuts the records) and one BIO read sized for it, then one TCP write.
Handshake, reading, shutdown and producers stay Twisted's. Listeners use :func:`tls_factory`.
"""

from OpenSSL import SSL
from twisted.protocols.tls import TLSMemoryBIOFactory, TLSMemoryBIOProtocol
from zope.interface import implementer

from kafkatw.network.transport import IBulkWriter

#: Small writes are held until this many bytes (or the next reactor turn), as Twisted's
#: ``_AggregateSmallWrites`` does, so one read's many small answers become few TLS records.
AGGREGATE_BYTES = 64 * 1024

# Ciphertext per TLS record above its plaintext: TLS 1.3 adds 22 bytes (header, content type,
# tag), TLS 1.2 AES-GCM 29; 64 leaves room for any suite a listener may allow.
_RECORD_PLAINTEXT = 16384
_RECORD_OVERHEAD = 64


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
        """Encrypt ``data`` (bytes-like, typically a 256 KiB region chunk) in one ``SSL_write``
        and hand the records to TCP in one write, after whatever was written before."""
        self.flush_small_writes()
        view = memoryview(data)
        conn = self.getHandle()
        try:
            sent = conn.send(view)
        except SSL.Error:
            # WantReadError (a handshake step pending) or a broken session: Twisted's own write
            # buffers the bytes behind those waiting, or tears the connection down
            TLSMemoryBIOProtocol.write(self, bytes(view))
            return
        self._flush_records(conn, sent)
        if sent < len(view):
            TLSMemoryBIOProtocol.write(self, bytes(view[sent:]))

    def _flush_records(self, conn, plaintext):
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
