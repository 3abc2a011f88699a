"""The broker's own client: requests to other brokers (controller requests, follower fetches,
AlterPartition), as Kafka's ``NetworkClient`` is to its ``ControllerChannelManager`` and fetchers.

Owns connections keyed by a caller's node key, correlation ids, pipelining in order on one
connection, timeouts, and failing every pending request when a connection is lost. It knows
nothing of what the requests mean: retries and back-off are the caller's. TLS when the
inter-broker listener is SSL (:func:`inter_broker_tls`; the settings are ``network.tls``'s).
"""

import struct

from twisted.internet import defer
from twisted.internet.endpoints import HostnameEndpoint, connectProtocol, wrapClientTLS
from twisted.internet.protocol import Protocol
from twisted.protocols.tls import TLSMemoryBIOProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from kafkatw.network import socket_reader
from kafkatw.network.framing import FrameDecoder, InvalidReceive
from kafkatw.network.socket_options import USE_DEFAULT_BUFFER_SIZE, set_buffer_sizes
from kafkatw.network.transport import idle_socket
from kafkatw.protocol import messages
from kafkatw.protocol.codec import ProtocolDecodeError

log = Logger(namespace="kafkatw.network.client")

_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")

#: bytes asked of the socket per read (as the listener's connections read requests)
RECV_BUFFER_SIZE = 1 << 20

#: A response is cut at this size (a follower fetch answers up to replica.fetch.response.max.bytes).
DEFAULT_MAX_RESPONSE_SIZE = 256 * 1024 * 1024


class NodeUnavailableError(Exception):
    """The connection to a node could not be made, or was lost with this request pending."""


class RequestTimeoutError(Exception):
    """No response within the request timeout (the connection is closed: later responses on it
    could no longer be matched safely)."""


class _Pending:
    __slots__ = ("deferred", "api_key", "version", "timer")

    def __init__(self, deferred, api_key, version, timer):
        self.deferred = deferred
        self.api_key = api_key
        self.version = version
        self.timer = timer


class KafkaClientProtocol(Protocol):
    """One connection: writes framed requests, matches responses by correlation id in order."""

    def __init__(self, client_id, max_response_size=DEFAULT_MAX_RESPONSE_SIZE,
                 receive_buffer_bytes=USE_DEFAULT_BUFFER_SIZE):
        self.client_id = client_id
        self.receive_buffer_bytes = receive_buffer_bytes
        self._decoder = FrameDecoder(max_response_size)
        self._next_correlation = 0
        self._pending = {}  # correlation id -> _Pending
        self._closed = None  # the reason once the connection is gone
        self.on_lost = None  # called once with the protocol when the connection ends
        self.address = None  # (host, port), set once connected

    def connectionMade(self):
        tcp = self.transport
        if isinstance(tcp, TLSMemoryBIOProtocol):
            tcp = tcp.transport
        # requests are small and answered at once: Nagle's algorithm would hold the next one
        # back until the previous write is acknowledged (a delayed ACK: tens of ms)
        tcp.setTcpNoDelay(True)
        handle = getattr(tcp, "getHandle", None)
        if handle is not None:
            # Kafka sizes it before connecting; here the handshake already chose the window
            # scale from the default (larger) buffer, which a smaller one still fits
            set_buffer_sizes(handle(), receive_bytes=self.receive_buffer_bytes)
        if hasattr(tcp, "bufferSize"):
            # a follower's fetch answer (up to replica.fetch.max.bytes per partition) in one
            # or two reads and reactor turns instead of sixteen of Twisted's 64 KiB
            tcp.bufferSize = RECV_BUFFER_SIZE
            # and the rest of a large answer straight into its frame (one copy, the kernel's)
            # (plain TCP only: under TLS the socket's bytes are ciphertext)
            socket_reader.install(self.transport, self._decoder, self._bytes_in)

    @property
    def usable(self):
        """True while requests can be sent (connected and not lost)."""
        return self._closed is None and self.transport is not None

    def send(self, request, version, timeout_s, reactor):
        """A Deferred of the decoded response body of ``request`` at ``version``."""
        if self._closed is not None:
            return defer.fail(NodeUnavailableError(self._closed))
        api_key = request.API_KEY
        correlation = self._next_correlation
        self._next_correlation = (correlation + 1) & 0x7FFFFFFF
        header = messages.RequestHeader(
            request_api_key=api_key, request_api_version=version,
            correlation_id=correlation, client_id=self.client_id)
        body = header.encode_bytes(messages.request_header_version(api_key, version))
        parts = [bytes(p) for p in request.encode(version)]  # a FileRegion is a TypeError here
        size = len(body) + sum(len(p) for p in parts)
        d = defer.Deferred()
        timer = reactor.callLater(timeout_s, self._timed_out, correlation)
        self._pending[correlation] = _Pending(d, api_key, version, timer)
        data = [_SIZE.pack(size), body] + parts
        sock = idle_socket(self.transport)  # None under TLS
        if sock is None:
            self.transport.writeSequence(data)
            return d
        # nothing queued before it: handed to the kernel now, not at the next reactor turn
        # (a follower's next fetch is what moves the leader's HW; acks=all waits for it)
        try:
            sent = sock.sendmsg(data)
        except OSError:
            sent = 0  # the transport meets the error on its own write and closes as usual
        if sent < size + 4:
            self.transport.write(b"".join(data)[sent:])
        return d

    def _timed_out(self, correlation):
        pending = self._pending.pop(correlation, None)
        if pending is None:
            return
        pending.timer = None
        pending.deferred.errback(RequestTimeoutError(
            "no response to %s v%d in time" % (messages.API_NAMES.get(pending.api_key), pending.version)))
        self.transport.abortConnection()

    def dataReceived(self, data):
        self._decoder.feed(data)
        self._bytes_in(len(data))

    def _bytes_in(self, _n):
        """More bytes are in the decoder: answer every complete frame."""
        while self._closed is None:
            try:
                frame = self._decoder.next_frame()
            except InvalidReceive as e:
                log.warn("closing a connection with an invalid response frame: {e}", e=e)
                self.transport.abortConnection()
                return
            if frame is None:
                return
            self._frame_received(frame)

    def _frame_received(self, frame):
        (correlation,) = _CORRELATION.unpack_from(frame, 0)
        pending = self._pending.pop(correlation, None)
        if pending is None:
            log.warn("closing a connection: a response with unknown correlation id {c}", c=correlation)
            self.transport.abortConnection()
            return
        if pending.timer is not None and pending.timer.active():
            pending.timer.cancel()
        try:
            view = memoryview(frame)
            _, pos = messages.ResponseHeader.decode_from(
                view, 0, messages.response_header_version(pending.api_key, pending.version))
            response = messages.RESPONSES[pending.api_key].decode(view[pos:], pending.version)
        except (ProtocolDecodeError, ValueError, struct.error) as e:
            pending.deferred.errback(NodeUnavailableError("malformed response: %s" % (e,)))
            self.transport.abortConnection()
            return
        pending.deferred.callback(response)

    def connectionLost(self, reason=None):
        self._closed = "connection lost: %s" % (reason.getErrorMessage() if reason else "closed")
        pending, self._pending = self._pending, {}
        for p in pending.values():
            if p.timer is not None and p.timer.active():
                p.timer.cancel()
            p.deferred.errback(NodeUnavailableError(self._closed))
        if self.on_lost is not None:
            on_lost, self.on_lost = self.on_lost, None
            on_lost(self)


def inter_broker_tls(config):
    """For ``config`` (a KafkaConfig): None when its inter-broker listener is PLAINTEXT, else a
    function of a host name giving the client TLS options to reach another broker's SSL
    listener of that name with this broker's ``ssl.*`` settings of it. Checked at once (a
    wrong trust or key store is a one-line ConfigError at start-up, not a failing fetch)."""
    if config is None or not hasattr(config, "listeners"):
        return None
    name = getattr(config, "inter_broker_listener_name", None)
    protocol = {ep.listener_name: ep.security_protocol for ep in config.listeners}.get(name)
    if protocol in (None, "PLAINTEXT"):
        return None
    from kafkatw.config import ConfigError
    from kafkatw.network import tls

    if protocol != "SSL":
        raise ConfigError.invalid("inter.broker.listener.name", name,
                                  "kafkatw's inter-broker client speaks PLAINTEXT and SSL, "
                                  "not %s" % protocol)
    cfg = tls.listener_ssl_config(config, name)
    tls.client_tls_options(cfg, "localhost", name)  # fails now, not on the first connection
    cache = {}

    def options_for(host):
        options = cache.get(host)
        if options is None:
            options = cache[host] = tls.client_tls_options(cfg, host, name)
        return options
    return options_for


class KafkaNetworkClient:
    """Connections to other brokers by node key (a node id, or ``(node id, index)`` for a
    second connection to the same node); one connection per key, made on first use.
    ``tls``: None (plain TCP) or :func:`inter_broker_tls`'s function of a host name."""

    def __init__(self, reactor, client_id, request_timeout_ms=30000, connect_timeout_ms=10000,
                 max_response_size=DEFAULT_MAX_RESPONSE_SIZE, tls=None,
                 receive_buffer_bytes=USE_DEFAULT_BUFFER_SIZE):
        self.tls = tls
        self.receive_buffer_bytes = receive_buffer_bytes  # SO_RCVBUF of each connection
        self.reactor = reactor
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.max_response_size = max_response_size
        self._connections = {}  # key -> KafkaClientProtocol
        self._connecting = {}  # key -> ((host, port), [Deferred waiting for the protocol])
        self._closing = False

    def is_connected(self, key):
        conn = self._connections.get(key)
        return conn is not None and conn.usable

    def send(self, key, host, port, request, version, timeout_ms=None):
        """A Deferred of the decoded response; fails with NodeUnavailableError or
        RequestTimeoutError. Requests to one key go out, and are answered, in order."""
        timeout_s = (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000.0
        d = self._connection(key, host, port)
        d.addCallback(lambda conn: conn.send(request, version, timeout_s, self.reactor))
        return d

    def _connection(self, key, host, port):
        if self._closing:
            return defer.fail(NodeUnavailableError("client closed"))
        conn = self._connections.get(key)
        if conn is not None:
            if conn.usable and conn.address == (host, port):
                return defer.succeed(conn)
            self._drop(key, conn)
        waiting = self._connecting.get(key)
        if waiting is not None and waiting[0] == (host, port):
            d = defer.Deferred()
            waiting[1].append(d)
            return d
        d = defer.Deferred()
        self._connecting[key] = ((host, port), [d])
        proto = KafkaClientProtocol(self.client_id, self.max_response_size, self.receive_buffer_bytes)
        endpoint = HostnameEndpoint(self.reactor, host, port, timeout=self.connect_timeout_ms / 1000.0)
        if self.tls is not None:
            endpoint = wrapClientTLS(self.tls(host), endpoint)
        connecting = connectProtocol(endpoint, proto)
        connecting.addBoth(self._connected, key, (host, port), proto)
        return d

    def _connected(self, result, key, address, proto):
        entry = self._connecting.get(key)
        if entry is None or entry[0] != address:
            # superseded by a connection to another address, or the client closed meanwhile
            if not isinstance(result, Failure):
                result.transport.abortConnection()
            return None
        del self._connecting[key]
        waiters = entry[1]
        if isinstance(result, Failure):
            reason = result.value
            exc = NodeUnavailableError("cannot connect to %s:%d: %s" % (address[0], address[1], reason))
            for w in waiters:
                w.errback(exc)
            return None
        proto.address = address
        proto.on_lost = lambda p: self._lost(key, p)
        self._connections[key] = proto
        for w in waiters:
            w.callback(proto)
        return None

    def _lost(self, key, proto):
        if self._connections.get(key) is proto:
            del self._connections[key]

    def _drop(self, key, conn):
        if self._connections.get(key) is conn:
            del self._connections[key]
        if conn.transport is not None:
            conn.transport.abortConnection()

    def close(self, key):
        """Close the connection of ``key`` (its pending requests fail)."""
        conn = self._connections.pop(key, None)
        if conn is not None and conn.transport is not None:
            conn.transport.abortConnection()
        entry = self._connecting.pop(key, None)
        if entry is not None:
            for w in entry[1]:
                w.errback(NodeUnavailableError("connection closed before it was made"))

    def close_all(self):
        """Close every connection; a Deferred firing once they are all gone."""
        self._closing = True
        for key in list(self._connecting):
            self.close(key)
        waits = []
        for key, conn in list(self._connections.items()):
            if conn.transport is not None:
                d = defer.Deferred()
                previous = conn.on_lost

                def lost(p, d=d, previous=previous):
                    if previous is not None:
                        previous(p)
                    d.callback(None)

                conn.on_lost = lost
                waits.append(d)
                conn.transport.abortConnection()
        self._connections.clear()
        return defer.DeferredList(waits).addCallback(lambda _: None)


