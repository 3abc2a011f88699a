"""One client connection: framing, header checks, the mute state machine, ordered responses.

Owns what Kafka's Processor does for one channel (read a request, mute, write the
response, unmute, idle expiry, request log line); the queue and handler concurrency are
the request channel's, the bytes-on-the-wire the transport layer's.

Mute means stop reading: ``transport.pauseProducing()``, on plain TCP at the first read
event while muted (``socket_reader``: nothing is read then either).  Frames that arrived with an
earlier read wait unparsed in the :class:`FrameDecoder` until the connection unmutes,
which happens only after the previous response is fully written (its transport-layer
Deferred fired: last part handed over and the transport buffer drained), after a NoOp
response, or never (close_connection).

Pipelined requests answered synchronously within one read count as written when their
bytes are held for the end of that frame loop: the loop's answers leave in one ``sendmsg``
(plaintext), and if the socket does not take them whole, reading stops until they drain.
"""

import collections
import socket

import attr
from twisted.internet.interfaces import IHandshakeListener
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from zope.interface import implementer

from kafkatw.network import socket_reader
from kafkatw.network.framing import FrameDecoder, InvalidReceive
from kafkatw.protocol.parts import FileRegion
from kafkatw.network.mute import NOT_MUTED, ChannelMute, ChannelMuteEvent
from kafkatw.network.request import Request, RequestContext
from kafkatw.network.wire import (
    API_VERSIONS_KEY,
    HEADER_PREFIX,
    peek_client_id,
    unsupported_api_versions_response,
)


_peek_header = HEADER_PREFIX.unpack_from

RECV_BUFFER_SIZE = 1 << 20
#: held responses are flushed mid-loop past this many bytes
HELD_BYTES_MAX = 256 * 1024


@implementer(IHandshakeListener)
class KafkaConnection(Protocol):
    log = Logger(namespace="kafkatw.network.connection")

    # Instances keep 29 attributes (with Twisted's transport, factory and connected): CPython
    # 3.11 shares the keys of at most that many among a class's instances (the first instance
    # gets 30 - 1); one more gives every connection a dict of its own and unspecialised
    # attribute reads (+3.6k instructions per request). Rare states are class defaults:
    #: accepted while its listener waits out a connection creation rate (KIP-612): nothing
    #: is read until the listener releases it, as if it were still in the accept backlog
    waiting_for_accept = False

    def __init__(self, server, endpoint, peer_host, peer_port, transport_layer):
        self.server = server
        self.endpoint = endpoint
        self.transport_layer = transport_layer  # the listener's ITransportLayer
        self.peer_host = peer_host
        self.peer_port = peer_port
        self.connection_id = None
        self.context = None
        self.decoder = FrameDecoder(server.settings.socket_request_max_bytes)
        self.mute = ChannelMute()
        self.closing = False
        self.closed = False
        self._paused = False
        # reads go through socket_reader, which stops them at the first read event while muted:
        # a mute then changes nothing on the socket (see _process_frames)
        self._mute_stops_reads = False
        self.last_activity_ns = 0  # the last read or write (server.clock_ns), for idle expiry
        self._idle_call = None
        self._throttle_call = None
        self.in_flight = None  # the request being handled / answered
        self.authenticator = None  # SASL listeners: network.authenticator.SaslServerAuthenticator
        self._processing = False  # inside _process_frames (a synchronous answer loops, not recurses)
        # Byte-only responses answered inside one frame loop are held and handed to the
        # kernel together when the loop ends (one sendmsg, one segment, one client wake-up
        # for a pipelined burst) instead of one sendmsg each. Only where the layer asks for
        # it (batch_answers: plaintext; TLS coalesces in its own buffer); a held send the
        # socket does not take whole stops reading until it drains, as a response in flight.
        self._can_hold = transport_layer.batch_answers
        self._held = None  # parts held in this loop, in order
        self._held_bytes = 0
        self._held_drain = None  # Deferred of a held send still draining
        self._handshake_done = False  # TLS only: handshakeCompleted was called
        # when each chunk still (partly) in the decoder was read: (bytes read up to its end, ns),
        # so a frame cut later (behind a request in flight) knows how long it waited; only the
        # request log reports it (pipelineWaitMs), so without one nothing is tracked per read
        self._arrivals = collections.deque() if server.request_logger.enabled else None
        self._bytes_read = 0

    # -- connection life ------------------------------------------------------

    def connectionMade(self):
        server = self.server
        handle = getattr(self.transport, "getHandle", None)
        if handle is not None:
            sock = handle()
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except (OSError, AttributeError):
                pass
            # one recv per MiB instead of sixteen: fewer syscalls and dataReceived calls
            # for large produce requests (bytes are copied once into the frame either way)
            self.transport.bufferSize = RECV_BUFFER_SIZE
            # and the rest of a large request straight into its frame (one copy, the kernel's)
            self._mute_stops_reads = socket_reader.install(self.transport, self.decoder, self.dataReceived,
                                                           self.mute, self._pause)
        host = self.transport.getHost()
        self.connection_id = "%s:%d-%s:%d-%d-%d" % (
            host.host, host.port, self.peer_host, self.peer_port, 0, server.next_connection_seq(self.endpoint))
        self.context = RequestContext(
            connection_id=self.connection_id,
            listener_name=self.endpoint.listener_name,
            security_protocol=self.endpoint.security_protocol,
            client_address=(self.peer_host, self.peer_port),
        )
        self.last_activity_ns = server.clock_ns()
        self._schedule_idle(server.settings.connections_max_idle_ms / 1000.0)
        self.authenticator = server.authenticator_for(self)
        server.connection_made(self)
        if self.waiting_for_accept:
            self._pause()

    def release_accept(self):
        """The listener's creation-rate throttle let this connection in: start reading."""
        self.waiting_for_accept = False
        if not self.closing:
            self._process_frames()

    def handshakeCompleted(self):
        """TLS is up (before any request can arrive): the principal is the client
        certificate's subject through the listener's principal builder and
        ``ssl.principal.mapping.rules`` (ANONYMOUS without one); no rule for it: closed."""
        if self.context is not None:
            try:
                principal = self.server.tls_principal(self)
            except Exception as e:
                self.server.metrics.failed_authentication[self.endpoint.listener_name] += 1
                self.close("no principal for the client certificate: {err}", err=e)
                return
            self.context = attr.evolve(self.context, principal=principal)
        self._handshake_done = True

    def connectionLost(self, reason=None):
        if self.closed:
            return
        self.closed = True
        self.closing = True
        for call in (self._idle_call, self._throttle_call):
            if call is not None and call.active():
                call.cancel()
        self._idle_call = self._throttle_call = None
        self.server.channel.cancel(self)
        if self._failed_tls_handshake(reason):
            self.server.metrics.failed_authentication[self.endpoint.listener_name] += 1
        self.server.connection_lost(self)

    def _failed_tls_handshake(self, reason):
        """Lost before the TLS handshake completed, by a TLS error (a certificate refused):
        Kafka counts it as a failed authentication."""
        if self._handshake_done or self.endpoint.security_protocol not in ("SSL", "SASL_SSL"):
            return False
        error = getattr(reason, "value", None)
        return type(error).__module__.startswith("OpenSSL")

    def close(self, why, **fields):
        """Close this connection (only this one) with a log line naming the peer."""
        if self.closing:
            return
        if self._held and not self.closed:
            self._flush_held()  # answers given before the reason to close still go out
        self.closing = True
        self.log.info("Closing connection {connection_id} from {peer}: " + why,
                      connection_id=self.connection_id, peer="%s:%d" % (self.peer_host, self.peer_port), **fields)
        self.transport.loseConnection()
        lower = getattr(self.transport, "transport", None)
        if lower is not None and getattr(self.transport, "wrappedProtocol", None) is self:
            # TLS: loseConnection sent close_notify and waits for the peer's, which a muted
            # (paused) connection never reads. Like Kafka, close the socket without waiting.
            lower.loseConnection()

    # -- idle expiry (connections.max.idle.ms) -------------------------------

    def _schedule_idle(self, delay):
        if self.server.settings.connections_max_idle_ms is None or self.server.settings.connections_max_idle_ms < 0:
            return
        self._idle_call = self.server.reactor.callLater(delay, self._check_idle)

    def _check_idle(self):
        self._idle_call = None
        if self.closing:
            return
        idle_s = self.server.settings.connections_max_idle_ms / 1000.0
        if self.in_flight is not None:
            self._schedule_idle(idle_s)  # a request is being answered: not idle
            return
        idle_for = (self.server.clock_ns() - self.last_activity_ns) / 1e9
        if idle_for >= idle_s:
            self.close("idle for {idle_ms:.0f} ms (connections.max.idle.ms)", idle_ms=idle_for * 1000)
        else:
            self._schedule_idle(idle_s - idle_for)

    # -- reading ------------------------------------------------------------

    def dataReceived(self, data):
        """``data`` was read: feed the decoder, then cut and handle frames. ``socket_reader``
        calls this with an ``int`` instead: that many bytes were received straight into the
        decoder. (One method for both ways in: one call per read, not a feed and a count.)"""
        if self.closing:
            return
        if type(data) is int:
            n = data
        else:
            n = len(data)
            self.decoder.feed(data)
        server = self.server
        server.metrics.bytes_in += n
        now = self.last_activity_ns = server.clock_ns()
        if self._arrivals is not None:
            self._bytes_read += n
            self._arrivals.append((self._bytes_read, now))
        self._process_frames(now)

    def _pause(self):
        if not self._paused:
            self._paused = True
            self.transport.pauseProducing()

    def _resume(self):
        if self._paused and not self.closing:
            self._paused = False
            self.transport.resumeProducing()

    def _process_frames(self, now=None):
        """Cut and handle frames while not muted (at most one request outstanding).

        ``now``: the clock's reading of the read that calls this, the moment the first frame
        it cuts is taken up; a later frame of the loop (after an answer) reads the clock.

        Reading stops (``pauseProducing``) only if a request is still outstanding when the
        loop ends: a request answered synchronously costs no epoll change; on plain TCP not
        even then, but at the first read event while muted, if one comes. (The cutting loop
        is here, not in a method of its own: it runs per read.)"""
        if self._processing:
            return
        self._processing = True
        mute = self.mute
        decoder = self.decoder
        try:
            # (``mute.muted`` inline; no next_frame call with nothing buffered: after the last
            # frame of a read, or when an answer unmutes an idle connection)
            while decoder.buffered and mute.state is NOT_MUTED and not self.closing and self._held_drain is None:
                try:
                    frame = decoder.next_frame()
                except InvalidReceive as e:
                    self.server.metrics.invalid_frames += 1
                    self.close("invalid frame size {size} (socket.request.max.bytes={max_size})",
                               size=e.size, max_size=e.max_size)
                    break
                if frame is None:
                    break
                self._handle_frame(frame, now)
                now = None
        finally:
            self._processing = False
            if self._held:
                self._flush_held()
        if mute.state is NOT_MUTED and self._held_drain is None:
            if self._paused:
                self._resume()
        elif not self.closing and (self._held_drain is not None or not self._mute_stops_reads):
            self._pause()

    def _read_ns(self):
        """When the last byte of the frame just cut was read from the socket (None when no
        request log wants it)."""
        arrivals = self._arrivals
        if arrivals is None:
            return None
        consumed = self._bytes_read - self.decoder.buffered
        while arrivals[0][0] < consumed:
            arrivals.popleft()
        return arrivals[0][1]

    def _handle_frame(self, frame, now):
        if self.authenticator is not None and self.authenticator.intercept(frame):
            return  # SASL: answered (or refused) before any request reaches the channel
        server = self.server
        if now is None:
            now = server.clock_ns()
        read_ns = None if self._arrivals is None else self._read_ns()
        api_key, api_version, correlation_id = _peek_header(frame, 0)  # (peek_header inline)
        rng = server.supported_versions.get(api_key)  # (the server's api_versions(), no call)
        if api_key == API_VERSIONS_KEY and rng is not None and not (rng[0] <= api_version <= rng[1]):
            # Kafka lets ApiVersions of any version through and answers UNSUPPORTED_VERSION
            # in a v0 body, so the client can negotiate down.
            request = Request(header=None, api_key=api_key, api_version=api_version,
                              correlation_id=correlation_id, client_id=peek_client_id(frame),
                              body=None, size=len(frame), context=self.context, start_ns=now,
                              read_ns=read_ns, dequeue_ns=now, api_local_complete_ns=now, api_remote_complete_ns=now)
            self._received(request)
            request.response_dequeue_ns = now
            self._write(request, None, [unsupported_api_versions_response(correlation_id, rng)])
            return
        if rng is None or not (rng[0] <= api_version <= rng[1]):
            self.close("unsupported API {api_key} version {api_version} (correlation {cid})",
                       api_key=api_key, api_version=api_version, cid=correlation_id)
            return
        try:
            header, body = server.wire.decode_request(frame, api_key, api_version)
        except Exception as e:
            self.close("cannot decode {api_key} v{api_version} (correlation {cid}): {err}",
                       api_key=api_key, api_version=api_version, cid=correlation_id, err=e)
            return
        if api_key == API_VERSIONS_KEY and api_version >= 3:
            name = getattr(body, "client_software_name", None)
            version = getattr(body, "client_software_version", None)
            if name or version:
                # KIP-511: recorded on the channel, seen by this and later requests.
                self.context = attr.evolve(self.context, client_software_name=name or "unknown",
                                           client_software_version=version or "unknown")
        # (positional, in Request's field order: no keyword matching per request)
        request = Request(header, api_key, api_version, correlation_id,
                          getattr(header, "client_id", None), body, len(frame), self.context, now, read_ns)
        self.mute.request_received()  # (_received inline)
        self.in_flight = request
        server.channel.send_request(request, self)

    def _received(self, request):
        self.mute.request_received()  # mute(), then REQUEST_RECEIVED
        self.in_flight = request

    # the SASL authenticator answers on this connection with the same mute and write path
    accept_request = _received

    def send_raw_response(self, request, parts):
        """Write ``parts`` as the answer to ``request`` (no header: a v0 SASL token)."""
        self._write(request, None, parts)

    # -- writing ------------------------------------------------------------

    def send_response(self, request, response):
        """Called by the request channel with the handler's response, at once after it noted
        ``request.api_remote_complete_ns``."""
        if self.closed or request is not self.in_flight:
            return  # connection gone: the response is dropped, as Kafka does
        server = self.server
        # no response queue (Kafka's between its handler and network threads): the answer is
        # taken up when it completed, that reading's moment (no clock read of its own)
        request.response_dequeue_ns = request.api_remote_complete_ns
        request.throttle_time_ms = response.throttle_time_ms or 0
        if request.throttle_time_ms > 0:
            self._start_throttle(request.throttle_time_ms)
        if response.noop:
            self._written(0, request, response)  # nothing to send: complete now
            return
        if response.body is None:
            request.response_complete_ns = request.response_dequeue_ns
            self._log_request(request, response)
            self.close("the handler asked to close the connection")
            return
        try:
            parts = server.wire.encode_response(request, response.body)
        except Exception as e:
            self.log.failure("cannot encode the response to {api_key} v{api_version}",
                             api_key=request.api_key, api_version=request.api_version)
            self.close("cannot encode response: {err}", err=e)
            return
        self._write(request, response, parts)

    def handler_failed(self, request, failure):
        if not self.closed:
            self.close("the request handler failed: {err}", err=failure.getErrorMessage())

    def _write(self, request, response, parts):
        # held only if something may follow in this loop: an answer held already, or bytes of
        # another frame buffered (a lone request's answer goes out at once, nothing to join)
        if self._processing and self._can_hold and (self._held or self.decoder.buffered):
            n = 0
            for part in parts:
                if type(part) is FileRegion:
                    break
                n += len(part)
            else:
                # held until the frame loop ends; for the mute state machine it is sent
                if self._held is None:
                    self._held = list(parts)
                else:
                    self._held.extend(parts)
                self._held_bytes += n
                try:
                    self._written(n, request, response)
                except Exception:
                    self.log.failure("after-send processing failed")
                if self._held_bytes >= HELD_BYTES_MAX and self._held:
                    self._flush_held()
                return
        held_bytes = 0
        if self._held:
            parts = self._held + list(parts)  # in order, in one send; counted when held
            held_bytes = self._held_bytes
            self._held = None
            self._held_bytes = 0
        d = self.transport_layer.send_now(self.transport, parts)
        if type(d) is int:
            # everything went to the kernel at once: no Deferred
            try:
                self._written(d - held_bytes, request, response)
            except Exception:
                self.log.failure("after-send processing failed")
            return
        if held_bytes:
            d.addCallback(lambda n: n - held_bytes)
        d.addCallbacks(self._written, self._send_failed, callbackArgs=(request, response))
        d.addErrback(lambda f: self.log.failure("after-send processing failed", f))

    def _send_failed(self, failure):
        """A send failed: tell the transfer failure handler of a disk error, close."""
        err = failure.value
        handler = self.server.transfer_failure_handler
        if getattr(err, "disk_error", False) and handler is not None:
            try:
                handler(err.region, err)
            except Exception:
                self.log.failure("transfer failure handler failed")
        if not self.closing:
            self.close("sending the response failed: {err}", err=failure.getErrorMessage())

    def _flush_held(self):
        """Hand the held responses to the kernel; if the socket does not take them whole,
        stop reading until they have drained (no new request before then)."""
        parts = self._held
        self._held = None
        self._held_bytes = 0
        d = self.transport_layer.send_now(self.transport, parts)
        if type(d) is int:
            return
        self._held_drain = d

        def drained(_):
            self._held_drain = None
            if not self.closing:
                self._process_frames()

        def failed(failure):
            self._held_drain = None
            self._send_failed(failure)

        d.addCallbacks(drained, failed)
        d.addErrback(lambda f: self.log.failure("after-send processing failed", f))

    def _written(self, nbytes, request, response):
        """The response is fully written (or there was none): RESPONSE_SENT, maybe unmute.
        (One call per response: the completion steps are here, not in a second method.)"""
        server = self.server
        server.metrics.bytes_out += nbytes
        request.response_complete_ns = server.clock_ns()
        if response is not None and response.close_connection:
            self._log_request(request, response)
            self.close("the handler asked to close the connection")
            return
        self.last_activity_ns = request.response_complete_ns
        server.request_completed(request, response)  # (_log_request, inline)
        self.in_flight = None
        # RESPONSE_SENT, then maybe_unmute(); inside the frame loop (an answer given at once)
        # the loop itself goes on; with nothing buffered and reading not paused (a parked
        # fetch's answer, as a rule) the loop would have nothing to do
        if self.mute.response_sent() and not self._processing and (self.decoder.buffered or self._paused):
            self._process_frames()

    def _log_request(self, request, response):
        self.server.request_completed(request, response)

    # -- throttling (quota violations mute the channel for the throttle time) ---

    def _start_throttle(self, throttle_ms):
        self.mute.handle_event(ChannelMuteEvent.THROTTLE_STARTED)
        self._throttle_call = self.server.reactor.callLater(throttle_ms / 1000.0, self._end_throttle)

    def _end_throttle(self):
        self._throttle_call = None
        if self.closing:
            return
        self.mute.handle_event(ChannelMuteEvent.THROTTLE_ENDED)
        if self.mute.maybe_unmute():
            self._process_frames()
