"""How a response (a list of bytes and ``FileRegion`` parts) reaches the socket.

Owns ``ITransportLayer`` (everything a connection asks of its transport layer) and its two
built-in implementations: plaintext (``os.sendfile`` from a pull producer on the TCP
transport; a small answer's regions read into its one ``sendmsg``) and TLS (regions read and encrypted by the TLS transport in worker threads,
``IBulkWriter.write_region``, or small rests in 256 KiB ``os.pread`` chunks; answers of
bytes only encrypted and sent at once, ``IBulkWriter.write_now``). Which
layer a listener uses is chosen by ``kafkatw.network.listener`` through the plug-in registry
(``kafkatw/plugins/transports.py`` names these two). It does not know where regions come
from, nor anything about Kafka.

"Fully written" is learnt from Twisted's pull-producer contract: a non-streaming
producer registered on a ``FileDescriptor`` transport gets ``resumeProducing()`` from
``doWrite`` each time the transport's own buffer has drained to the socket.  So every
response is sent by a producer; it finishes (and its Deferred fires) only when it is
called with nothing left to hand over, i.e. the last part was handed over *and* the
buffer is empty.  ``registerProducer(p, False)`` also calls ``resumeProducing()`` once
synchronously while earlier bytes may still be buffered; that first call only asks for
a write event (``startWriting``), so nothing overtakes bytes written before.
"""

import errno
import os
import socket

from twisted.internet import defer, tcp
from twisted.internet.interfaces import IPullProducer
from twisted.logger import Logger
from zope.interface import Attribute, Interface, implementer

from kafkatw.protocol.parts import FileRegion, region_done

#: a region's file could not be opened for want of a descriptor, or is gone (its segment was
#: deleted before the region's turn): the process or the log, not the disk
_NOT_DISK_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOENT)

CHUNK_SIZE = 256 * 1024
#: TLS: a region's rest of at least this many bytes is read and encrypted in a worker thread
#: (``IBulkWriter.write_region``), so a large fetch leaves the reactor free meanwhile.
THREAD_MIN = 128 * 1024
_IPPROTO_TCP = socket.IPPROTO_TCP
_TCP_CORK = getattr(socket, "TCP_CORK", 3)
SENDFILE_MAX = 1 << 30
#: an answer whose regions hold at most this many bytes together (a consumer's fetch at the
#: log end: a batch or a few) has them read (``os.pread``) into its one send, rather than
#: corked ``sendmsg`` + ``sendfile`` + ``sendmsg`` through a sender: measured on loopback, the
#: copy costs less than the system calls up to ~64 KiB. Larger answers stay zero-copy.
SMALL_REGIONS_MAX = 32 * 1024
#: ... and it has at most this many parts (a ``sendmsg`` takes at most IOV_MAX buffers)
SMALL_ANSWER_PARTS = 64


class ITransportLayer(Interface):
    """Writes one response's parts to a connection's transport (Kafka's ``TransportLayer``).

    One instance serves every connection of a listener; it keeps no per-connection state.
    A failed send fails its Deferred with :class:`TransferError` (``disk_error`` true when the
    file, not the socket, failed: the broker then takes that log dir offline).
    """

    security_protocols = Attribute(
        "The security protocols of the listeners this layer may serve, e.g. ('SSL', 'SASL_SSL'). "
        "A listener refuses a layer not made for its protocol: one that writes to the socket "
        "itself (sendfile) would bypass TLS.")

    batch_answers = Attribute(
        "True when answers given within one read of a connection are best held and handed over "
        "together by one send_now (each send costs a syscall, as plaintext's sendmsg); False "
        "when the transport coalesces writes in its own buffer (TLS).")

    def send(transport, parts):
        """Send ``parts`` (bytes-like and ``FileRegion``) in order; return a Deferred firing
        with the byte count once everything is handed to the kernel (the transport's buffer
        drained), or failing if the connection is lost."""

    def send_now(transport, parts):
        """As :meth:`send`, but return the byte count itself (an ``int``) when everything was
        handed over at once, so the common small answer costs no Deferred; otherwise the
        Deferred of :meth:`send`. A layer that cannot tell returns :meth:`send`'s Deferred."""


class IBulkWriter(Interface):
    """A transport that takes large writes more cheaply than ``write`` (TLS: one ``SSL_write``
    per chunk instead of Twisted's 16 KiB slices); order with its ordinary writes is kept."""

    def write_bulk(data):
        """Write ``data`` (bytes-like, large) after everything written before it."""

    def flush_small_writes():
        """Hand ordinary writes held for aggregation to the transport underneath now."""

    def write_now(parts):
        """Write the byte ``parts`` after everything written before and hand them to the
        kernel now: True when it took them all, False when some wait in the transport's
        buffer (then wait for it to drain), None when this cannot be done now (then write
        them through a producer)."""

    def write_region(fd, position, size):
        """Read up to ``size`` bytes at ``position`` of the descriptor ``fd`` and write them
        after everything written before, off the reactor thread; a Deferred firing with the
        bytes read (0: the file ended) once written, failing with the read's ``OSError``; or
        None when it cannot now (then the caller reads and calls :meth:`write_bulk`). Nothing
        else may be written until it fires."""


class TransferError(Exception):
    """Sending a part failed; ``disk_error`` tells a file error from a broken socket."""

    def __init__(self, message, disk_error=False, region=None):
        Exception.__init__(self, message)
        self.disk_error = disk_error
        self.region = region  # the FileRegion being sent, if a region failed


def _lowest_transport(transport):
    """The TCP-level transport under wrappers such as ``TLSMemoryBIOProtocol``."""
    while getattr(transport, "wrappedProtocol", None) is not None and getattr(transport, "transport", None) is not None:
        transport = transport.transport
    return transport


class _Sender:
    """Common bookkeeping: remaining parts, the Deferred, stop handling."""

    def __init__(self, transport, parts):
        self.transport = transport
        self.parts = list(parts)
        self.index = 0
        self.region_sent = 0
        self.bytes_sent = 0
        self.done = defer.Deferred()
        self._finished = False
        self._first = True

    def start(self):
        self.transport.registerProducer(self, False)
        return self.done

    def _finish(self, failure=None):
        if self._finished:
            return
        self._finished = True
        try:
            self.transport.unregisterProducer()
        except Exception:  # pragma: no cover - transport already gone
            pass
        if failure is None:
            self.done.callback(self.bytes_sent)
        else:
            self.done.errback(failure)

    def stopProducing(self):
        # Called when the connection is lost with the producer still registered.
        if not self._finished:
            self._finished = True
            self.done.errback(TransferError("connection lost while sending a response"))

    def pauseProducing(self):
        # Only streaming wrappers (TLS's _PullToPush) pause us; pulling stops by itself.
        pass


def _cork(sock, on):
    try:
        sock.setsockopt(_IPPROTO_TCP, _TCP_CORK, on)
    except OSError:
        pass  # a socket already failing: the send itself reports it


def idle_socket(transport, producer_ok=False):
    """The socket of a connected TCP transport with nothing buffered and no producer, else
    None: bytes sent on it now go out after everything written before.

    Anything but a TCP connection itself is None: a wrapper such as TLS forwards attribute
    reads to the TCP transport under it, whose socket must never see its plaintext.
    ``producer_ok``: a registered producer does not count (the TLS layer's own, whose writes
    all reach the TCP buffer in order)."""
    if not isinstance(transport, tcp.Connection) or not transport.connected or transport.disconnecting:
        return None
    if (transport.producer is not None and not producer_ok) or transport._tempDataBuffer \
            or len(transport.dataBuffer) != transport.offset:
        return None
    return transport.socket  # (what getHandle() returns, without the call)


def read_small_regions(parts):
    """``(parts with each region read into bytes, their size in bytes)`` when the answer is
    small (see ``SMALL_REGIONS_MAX``), else None; None too when a read fails or falls short:
    the region then goes through a sender, which meets the error again and reports it."""
    if len(parts) > SMALL_ANSWER_PARTS:
        return None
    out = []
    n = 0
    left = SMALL_REGIONS_MAX
    for part in parts:
        if type(part) is FileRegion:
            count = part.count
            left -= count
            if left < 0:
                return None
            try:
                data = os.pread(part.file.fileno(), count, part.position)
            except OSError:
                return None
            region_done(part)  # (a sender given it after all takes the descriptor again)
            if len(data) != count:
                return None
            part = data
        out.append(part)
        n += len(part)
    return out, n


@implementer(IPullProducer)
class PlaintextSender(_Sender):
    """Bytes through ``transport.write``; regions with ``os.sendfile`` on the socket.

    When the transport buffers nothing, :meth:`start` hands the parts to the kernel at once
    (``sendmsg`` of each run of byte parts, ``sendfile`` of each region) and fires without
    a reactor turn or epoll change; only what the socket does not take waits for a write
    event through the producer.
    """

    log = Logger(namespace="kafkatw.network.transport")

    def start(self):
        result = self.start_now()
        if result is self.done:
            return result
        self.done.callback(result)
        return self.done

    def start_now(self):
        """The byte count when everything went to the kernel at once (``done`` is then never
        fired), else ``done``, firing when the rest has been written."""
        sock = idle_socket(self.transport)
        if sock is None:
            self.transport.registerProducer(self, False)
            return self.done
        parts = self.parts
        return self.start_on(sock, len(parts) > 1 and any(type(p) is FileRegion for p in parts))

    def start_on(self, sock, cork):
        """:meth:`start_now` on the idle socket ``sock`` of the transport; ``cork``: the parts
        mix bytes and regions."""
        self._first = False
        if cork:
            # bytes + region + bytes leave as one segment (one wake-up of the reader)
            # instead of one per syscall under TCP_NODELAY
            _cork(sock, 1)
            try:
                sent = self._send_now(sock)
            finally:
                _cork(sock, 0)
        else:
            sent = self._send_now(sock)
        if sent:
            self._finished = True
            return self.bytes_sent
        if self._finished:
            return self.done  # a region failed; the Deferred has failed
        self._first = True  # the rest waits for the buffer to drain
        self.transport.registerProducer(self, False)
        return self.done

    def _send_now(self, sock):
        """Send parts while the socket takes them; True when all are sent. A byte run the
        socket takes only partly is left in the transport's buffer."""
        parts = self.parts
        count = len(parts)
        i = self.index
        while i < count:
            part = parts[i]
            if type(part) is FileRegion:
                self.index = i
                if not self._sendfile(part, wake=False):
                    return False
                i = self.index
                continue
            run = []
            n = 0
            while i < count:
                part = parts[i]
                if type(part) is FileRegion:
                    break
                size = len(part)
                if size:
                    run.append(part)
                    n += size
                i += 1
            self.index = i
            if not run:
                continue
            try:
                sent = sock.sendmsg(run)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                sent = 0  # let the transport meet the error and close as usual
            self.bytes_sent += n
            if sent < n:
                rest = b"".join(run)[sent:]
                self.transport.write(rest)
                return False
        return True

    def resumeProducing(self):
        if self._finished:
            return
        if self._first:
            # registerProducer's synchronous call: the buffer may hold earlier bytes.
            self._first = False
            self.transport.startWriting()
            return
        # Here the transport's buffer is empty (called from doWrite).
        parts = self.parts
        while self.index < len(parts):
            part = parts[self.index]
            if isinstance(part, FileRegion):
                if not self._sendfile(part):
                    return  # partial send: woken again when writable
                continue
            # Write the run of consecutive byte parts, then wait for the drain.
            run = []
            while self.index < len(parts) and not isinstance(parts[self.index], FileRegion):
                if len(parts[self.index]):
                    run.append(bytes(parts[self.index]) if not isinstance(parts[self.index], bytes) else parts[self.index])
                self.index += 1
            if run:
                n = sum(len(b) for b in run)
                self.bytes_sent += n
                self.transport.writeSequence(run)
                return
        self._finish()

    def _sendfile(self, region, wake=True):
        """Send what the socket takes of ``region``; True when the region is complete.
        ``wake`` asks the transport for a write event on a partial send."""
        sock_fd = self.transport.getHandle().fileno()
        while self.region_sent < region.count:
            remaining = region.count - self.region_sent
            try:
                n = os.sendfile(sock_fd, region.file.fileno(), region.position + self.region_sent,
                                min(remaining, SENDFILE_MAX))
            except BlockingIOError:
                if wake:
                    self.transport.startWriting()
                return False
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                self._fail_region(region, e)
                return False
            if n == 0:
                # The file ended before the region did (truncated segment).
                self._fail_region(region, OSError(errno.EIO, "file shorter than region"))
                return False
            self.region_sent += n
            self.bytes_sent += n
            if n < remaining:
                if wake:
                    self.transport.startWriting()
                return False
        self.index += 1
        self.region_sent = 0
        region_done(region)
        return True

    def _fail_region(self, region, err):
        # Tell a disk error from a broken socket by re-reading the range (seed 000).
        disk_error = False
        try:
            os.pread(region.file.fileno(), 1, region.position + self.region_sent)
        except OSError as e:
            disk_error = e.errno not in _NOT_DISK_ERRNOS
        region_done(region)
        self.log.warn("sendfile failed: {err} (disk_error={disk})", err=err, disk=disk_error)
        self._finished = True
        self.done.errback(TransferError(str(err), disk_error=disk_error, region=region))
        try:
            self.transport.unregisterProducer()
        finally:
            self.transport.abortConnection() if hasattr(self.transport, "abortConnection") else self.transport.loseConnection()


@implementer(IPullProducer)
class ChunkedSender(_Sender):
    """FileSender-style: one chunk of a region per ``resumeProducing``: a ``write_region`` job
    (the TLS transport reads and encrypts up to 1 MiB in a worker; pulls wait for it) when at
    least ``thread_min`` bytes are left, else one 256 KiB ``os.pread``.

    Registered as a pull producer on the (TLS) transport, which pauses it while its
    buffer is above the high-water mark, so a large region never sits whole in memory.
    Completion waits for the TCP transport underneath to drain (:class:`DrainWaiter`).
    """

    def __init__(self, transport, parts, chunk_size=CHUNK_SIZE, thread_min=None):
        _Sender.__init__(self, transport, parts)
        self.chunk_size = chunk_size
        self._draining = False
        self._bulk = transport if IBulkWriter.providedBy(transport) else None
        #: regions' chunks of at least this many bytes go through ``write_region`` (None: never)
        self.thread_min = thread_min if self._bulk is not None else None
        self._in_thread = False  # a write_region is under way: pulls wait for it

    def resumeProducing(self):
        if self._finished or self._draining or self._in_thread:
            return
        parts = self.parts
        while self.index < len(parts):
            part = parts[self.index]
            if isinstance(part, FileRegion):
                remaining = part.count - self.region_sent
                try:
                    fd = part.file.fileno()
                    if self.thread_min is not None and remaining >= self.thread_min:
                        d = self._bulk.write_region(fd, part.position + self.region_sent, remaining)
                        if d is not None:
                            self._in_thread = True
                            d.addCallbacks(self._region_written, self._region_failed,
                                           callbackArgs=(part,), errbackArgs=(part,))
                            return
                    chunk = os.pread(fd, min(self.chunk_size, remaining), part.position + self.region_sent)
                except OSError as e:
                    self._read_failed(part, e)
                    return
                if not chunk:
                    self._truncated(part)
                    return
                self._advance(part, len(chunk))
                if self._bulk is not None:
                    self._bulk.write_bulk(chunk)
                else:
                    self.transport.write(chunk)
                return
            if len(part):
                self.bytes_sent += len(part)
                self.transport.write(bytes(part))
            self.index += 1
        # Everything handed over: unregister and wait for the TCP buffer to drain.
        self._draining = True
        self._finished = True
        if self._bulk is not None:
            self._bulk.flush_small_writes()  # the tail may sit in TLS's aggregation
        self.transport.unregisterProducer()
        d = wait_for_drain(_lowest_transport(self.transport))
        d.addCallback(lambda _: self.bytes_sent)
        d.chainDeferred(self.done)

    def _advance(self, part, n):
        self.region_sent += n
        self.bytes_sent += n
        if self.region_sent == part.count:
            self.index += 1
            self.region_sent = 0
            region_done(part)

    def _region_written(self, n, part):
        self._in_thread = False
        if self._finished:
            region_done(part)  # the connection went while the chunk was being encrypted
        elif n:
            self._advance(part, n)
        else:
            self._truncated(part)

    def _region_failed(self, failure, part):
        self._in_thread = False
        if self._finished:
            region_done(part)
        elif failure.check(OSError):
            self._read_failed(part, failure.value)
        else:
            self._fail(part, TransferError("writing a region failed: %s" % (failure.value,),
                                           region=part))

    def _read_failed(self, part, e):
        self._fail(part, TransferError(str(e), disk_error=e.errno not in _NOT_DISK_ERRNOS, region=part))

    def _truncated(self, part):
        # Truncated under us (as Kafka's "truncated during write"): not a disk error.
        self._fail(part, TransferError("file shorter than region", disk_error=False, region=part))

    def _fail(self, part, error):
        region_done(part)
        self._finished = True
        self.transport.unregisterProducer()
        self.done.errback(error)
        self.transport.loseConnection()


@implementer(IPullProducer)
class DrainWaiter:
    """Fires ``done`` once a ``FileDescriptor`` transport's write buffer is empty."""

    def __init__(self, transport):
        self.transport = transport
        self.done = defer.Deferred()
        self._first = True
        self._fired = False

    def resumeProducing(self):
        if self._fired:
            return
        if self._first:
            self._first = False
            self.transport.startWriting()
            return
        self._fired = True
        self.transport.unregisterProducer()
        self.done.callback(None)

    def stopProducing(self):
        if not self._fired:
            self._fired = True
            self.done.errback(TransferError("connection lost before the response drained"))


def wait_for_drain(transport):
    """Deferred firing when ``transport``'s buffer has drained (or failing on loss)."""
    if getattr(transport, "registerProducer", None) is None or getattr(transport, "startWriting", None) is None:
        return defer.succeed(None)  # a transport we cannot watch (tests' StringTransport)
    waiter = DrainWaiter(transport)
    transport.registerProducer(waiter, False)
    return waiter.done


@implementer(ITransportLayer)
class PlaintextTransportLayer:
    """PLAINTEXT / SASL_PLAINTEXT: regions go out with ``os.sendfile`` (but a small answer's,
    :func:`read_small_regions`)."""

    security_protocols = ("PLAINTEXT", "SASL_PLAINTEXT")
    batch_answers = True

    def send(self, transport, parts):
        return PlaintextSender(transport, parts).start()

    def send_now(self, transport, parts):
        """As :meth:`send`, but the byte count itself (an ``int``) when the socket took
        everything at once: the common small response costs no Deferred.

        Byte parts to an idle socket (every small answer, a small fetch answer's regions read
        into them) go out in one ``sendmsg`` here, without a sender object and its Deferred;
        what the socket does not take, and larger regions, go through :class:`PlaintextSender`."""
        sock = idle_socket(transport)
        if sock is None:
            return PlaintextSender(transport, parts).start_now()
        n = 0
        for part in parts:
            if type(part) is FileRegion:
                small = read_small_regions(parts)
                if small is None:  # zero copy: sendfile
                    return PlaintextSender(transport, parts).start_on(sock, len(parts) > 1)
                parts, n = small
                break
            n += len(part)
        try:
            sent = sock.sendmsg(parts)
        except (BlockingIOError, InterruptedError, OSError):
            sent = 0  # the sender retries; on an error it lets the transport meet it and close
        if sent == n:
            return n
        rest = b"".join(parts)[sent:]
        sender = PlaintextSender(transport, [rest])
        sender.bytes_sent = sent
        return sender.start_now()


@implementer(ITransportLayer)
class TlsTransportLayer:
    """SSL / SASL_SSL: regions are read and encrypted in worker threads (``thread_min=None``:
    on the reactor, 256 KiB chunks) and written through TLS; answers of bytes only are
    encrypted and sent at once (``IBulkWriter.write_now``)."""

    security_protocols = ("SSL", "SASL_SSL")
    batch_answers = False  # TLS coalesces in its own buffer

    def __init__(self, chunk_size=CHUNK_SIZE, thread_min=THREAD_MIN):
        self.chunk_size = chunk_size
        self.thread_min = thread_min

    def send(self, transport, parts):
        return ChunkedSender(transport, parts, self.chunk_size, self.thread_min).start()

    def send_now(self, transport, parts):
        """As :meth:`send`, but a response of bytes only is encrypted and handed to TCP at
        once (``IBulkWriter.write_now``): its byte count when the kernel took it all, else a
        Deferred of the TCP buffer's drain. Regions, and a connection busy with a handshake
        step, a region or a producer, go through :class:`ChunkedSender`."""
        write_now = getattr(transport, "write_now", None)
        if write_now is not None:
            n = 0
            for part in parts:
                if type(part) is FileRegion:
                    return self.send(transport, parts)
                n += len(part)
            done = write_now(parts)
            if done:
                return n
            if done is not None:
                d = wait_for_drain(_lowest_transport(transport))
                d.addCallback(lambda _: n)
                return d
        return self.send(transport, parts)
