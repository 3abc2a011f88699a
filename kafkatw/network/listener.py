"""Listeners: one Twisted ``ServerFactory`` per endpoint, connection quotas, the SocketServer.

Owns accepting (``socket.listen.backlog.size``, ``max.connections``,
``max.connections.per.ip`` + overrides), connection ids, the choice of each listener's
transport layer (through the plug-in registry, once per listener) and the wiring of
connections to the request channel, request log and metrics; not the handling of requests.
"""

import collections
import time

from twisted.application import service
from twisted.internet import defer
from twisted.internet.endpoints import quoteStringArgument, serverFromString
from twisted.internet.error import CannotListenError
from twisted.internet.protocol import Protocol, ServerFactory
from twisted.logger import Logger
from twisted.python.failure import Failure

from kafkatw import registry
from kafkatw.config import ConfigError
from kafkatw.network.channel import RequestChannel
from kafkatw.network.metrics import NetworkMetrics
from kafkatw.network.request_log import RequestLogger, request_times
from kafkatw.network.settings import SocketServerSettings, listener_prefix
from kafkatw.network.socket_options import set_buffer_sizes
from kafkatw.network.transport import ITransportLayer
from kafkatw.rate import Rate, throttle_time_ms


def server_description(endpoint, backlog):
    """The ``serverFromString`` description of a listener: ``tcp:port=..:interface=..:backlog=..``."""
    return "tcp:port=%d:interface=%s:backlog=%d" % (endpoint.port, quoteStringArgument(endpoint.host or ""),
                                                     backlog)


INT_MAX = 2 ** 31 - 1


class ConnectionQuotas:
    """Counts connections per IP, per listener and in total, and measures how fast they are
    created (Kafka's ``ConnectionQuotas``, KIP-612).

    Over ``max.connections.per.ip`` (or its override) a connection is refused; at
    ``max.connections`` or ``listener.name.<l>.max.connections`` the listener stops accepting
    until one closes (the kernel backlog holds the rest); over ``max.connection.creation.rate``
    (all listeners but the inter-broker one, when there is another) or
    ``listener.name.<l>.max.connection.creation.rate`` the listener stops accepting for the
    throttle time (at most one window); over its IP's ``connection_creation_rate`` (an ip quota
    entity) a connection is closed unserved after the throttle time. Open connections are never
    touched.
    """

    def __init__(self, settings, ip_connection_rate=None):
        self.settings = settings
        # ip -> its connection_creation_rate quota (the ip entity, else the default ip
        # entity) or None; set with AlterClientQuotas, looked up per accept
        self.ip_connection_rate = ip_connection_rate or (lambda ip: None)
        self._ip_rates = {}  # ip -> (Rate, quota)
        self._ip_rates_checked_ms = 0
        self.listener_count = 1  # the socket server's listeners (see protected_listener)
        self.per_ip = collections.Counter()
        self.per_listener = collections.Counter()
        self.total = 0
        self._rates = {}  # None (broker-wide) or listener name -> Rate

    def limit_for(self, ip):
        return self.settings.max_connections_per_ip_overrides.get(ip, self.settings.max_connections_per_ip)

    def listener_limit(self, listener_name):
        return self.settings.listener_max_connections.get(listener_name, INT_MAX)

    def try_inc(self, listener_name, ip):
        """Count a new connection; return None if accepted, else the reason it is refused."""
        if self.per_ip[ip] >= self.limit_for(ip):
            return "max.connections.per.ip (%d) reached for %s" % (self.limit_for(ip), ip)
        exempt = listener_name == self.settings.inter_broker_listener_name
        if not exempt and self.total >= self.settings.max_connections:
            return "max.connections (%d) reached" % self.settings.max_connections
        if self.per_listener[listener_name] >= self.listener_limit(listener_name):
            return "listener.name.%s.max.connections (%d) reached" % (
                listener_name.lower(), self.listener_limit(listener_name))
        self.per_ip[ip] += 1
        self.per_listener[listener_name] += 1
        self.total += 1
        return None

    def dec(self, ip, listener_name=None):
        self.per_ip[ip] -= 1
        if self.per_ip[ip] <= 0:
            del self.per_ip[ip]
        if listener_name is not None:
            self.per_listener[listener_name] -= 1
        self.total -= 1

    def full(self):
        return self.total >= self.settings.max_connections

    def listener_full(self, listener_name):
        return self.per_listener[listener_name] >= self.listener_limit(listener_name)

    def _rate(self, key):
        rate = self._rates.get(key)
        s = self.settings
        if rate is None or rate.samples_max != s.quota_window_num \
                or rate.window_ms != s.quota_window_size_seconds * 1000:
            rate = self._rates[key] = Rate(s.quota_window_num, s.quota_window_size_seconds * 1000)
        return rate

    def record_ip_connection(self, ip, now_ms):
        """KIP-612 per-IP rate: 0, or the throttle time of a connection over its IP's
        ``connection_creation_rate`` (not counted then: it will not be served)."""
        bound = self.ip_connection_rate(ip)
        if bound is None:
            self._ip_rates.pop(ip, None)
            return 0
        if now_ms - self._ip_rates_checked_ms >= 60000:
            # forget addresses quiet for the whole rate window (their rate is 0 anyway)
            self._ip_rates_checked_ms = now_ms
            for other, (r, _) in list(self._ip_rates.items()):
                if r.measure(now_ms) == 0:
                    del self._ip_rates[other]
        entry = self._ip_rates.get(ip)
        s = self.settings
        if entry is None or entry[1] != bound:
            entry = self._ip_rates[ip] = (Rate(s.quota_window_num, s.quota_window_size_seconds * 1000), bound)
        rate = entry[0]
        rate.record(1, now_ms)
        observed = rate.measure(now_ms)
        if observed <= bound:
            return 0
        rate.record(-1, now_ms)
        throttle = throttle_time_ms(observed, bound, rate.window_size_ms(now_ms))
        return max(1, min(throttle, s.quota_window_size_seconds * 1000))

    def record_connection_creation(self, listener_name, now_ms):
        """Record an accepted connection; the milliseconds the listener must stop accepting
        to stay within its creation rates (0 when within them; a protected inter-broker
        listener is not throttled by the broker-wide rate)."""
        throttle = 0
        limits = []
        listener_rate = self.settings.listener_max_connection_creation_rate.get(listener_name, INT_MAX)
        if listener_rate < INT_MAX:
            limits.append((listener_name, listener_rate))
        broker_rate = self.settings.max_connection_creation_rate
        if broker_rate < INT_MAX and not self.protected_listener(listener_name):
            limits.append((None, broker_rate))
        for key, bound in limits:
            rate = self._rate(key)
            rate.record(1, now_ms)
            observed = rate.measure(now_ms)
            if bound <= 0:
                throttle = max(throttle, rate.window_ms)
            elif observed > bound:
                throttle = max(throttle, throttle_time_ms(observed, bound, rate.window_size_ms(now_ms)))
        return min(throttle, self.settings.quota_window_size_seconds * 1000)  # bounded as Kafka's

    def protected_listener(self, listener_name):
        """Kafka's protectedListener: the inter-broker listener, when there is another one."""
        return listener_name == self.settings.inter_broker_listener_name and self.listener_count > 1


def transport_key(listener_name):
    """The kafkatw property choosing a listener's transport layer (Kafka has none)."""
    return listener_prefix(listener_name) + "transport.class"


def load_transport_layer(endpoint, name=None, configs=None):
    """The verified ``ITransportLayer`` of ``endpoint``: the plug-in ``name`` (a short or
    dotted name) if given, else the one registered under the listener's security protocol.

    Raises :class:`kafkatw.config.ConfigError` (one line naming the key) when it cannot be
    loaded, does not provide the interface or is not made for the listener's protocol.
    """
    value = name or endpoint.security_protocol
    layer = registry.load(transport_key(endpoint.listener_name), value, ITransportLayer,
                          configs=dict(configs or {}))
    return check_transport_layer(endpoint, value, layer)


def check_transport_layer(endpoint, value, layer):
    """``layer`` if it provides ``ITransportLayer`` and serves ``endpoint``'s security protocol
    (fail closed: a plaintext layer on a TLS listener would send records unencrypted)."""
    key = transport_key(endpoint.listener_name)
    registry.check(key, value, ITransportLayer, layer)
    protocols = tuple(layer.security_protocols)
    if endpoint.security_protocol not in protocols:
        raise ConfigError.invalid(key, value, "it serves %s listeners, not %s (listener %s)" % (
            ", ".join(protocols) or "no", endpoint.security_protocol, endpoint.listener_name))
    return layer


class _ThrottledConnection(Protocol):
    """A connection over its IP's creation rate: read nothing, close after the throttle time."""

    def __init__(self, reactor, throttle_ms):
        self.reactor = reactor
        self.throttle_ms = throttle_ms
        self.call = None

    def connectionMade(self):
        self.transport.pauseProducing()
        self.call = self.reactor.callLater(self.throttle_ms / 1000.0, self.transport.loseConnection)

    def connectionLost(self, reason=None):
        if self.call is not None and self.call.active():
            self.call.cancel()


class KafkaListenerFactory(ServerFactory):
    """The factory of one listener; refuses connections over the quotas."""

    log = Logger(namespace="kafkatw.network.listener")

    def __init__(self, server, endpoint, transport_layer):
        self.server = server
        self.endpoint = endpoint
        self.transport_layer = transport_layer
        self.seq = 0
        self.port = None
        self.reading = True  # the port accepts (not paused by a connection quota)
        self.throttled_call = None  # a creation-rate pause of this listener
        self.waiting = collections.deque()  # connections accepted during that pause, in order
        self.stopped = False

    def buildProtocol(self, addr):
        from kafkatw.network.connection import KafkaConnection

        host = getattr(addr, "host", "?")
        throttle = self.server.quotas.record_ip_connection(host, int(self.server.reactor.seconds() * 1000))
        if throttle > 0:
            # Kafka closes a connection over its IP's creation rate after the throttle time,
            # unserved, so a client reconnecting at once does not spin
            self.server.metrics.connections_rejected[self.endpoint.listener_name] += 1
            self.log.info("Throttling connection from {peer} on {listener} for {ms} ms "
                          "(connection_creation_rate of {host})",
                          peer="%s:%s" % (host, getattr(addr, "port", "?")),
                          listener=self.endpoint.listener_name, ms=throttle, host=host)
            return _ThrottledConnection(self.server.reactor, throttle)
        refused = self.server.quotas.try_inc(self.endpoint.listener_name, host)
        if refused is not None:
            self.server.metrics.connections_rejected[self.endpoint.listener_name] += 1
            self.log.info("Refusing connection from {peer} on {listener}: {why}",
                          peer="%s:%s" % (host, getattr(addr, "port", "?")),
                          listener=self.endpoint.listener_name, why=refused)
            return None
        conn = KafkaConnection(self.server, self.endpoint, host, getattr(addr, "port", 0),
                               self.transport_layer)
        conn.factory = self
        if self.throttled_call is not None:
            # Twisted accepts a burst in one loop, past a stopReading: the ones after the
            # throttle started wait unread, and are let in one by one as the rate allows
            conn.waiting_for_accept = True
            self.waiting.append(conn)
            self.server.after_accept()
        else:
            self.server.after_accept(self)
        return conn


class SocketServer:
    """All listeners of a broker with their shared request channel (Kafka's ``SocketServer``).

    ``endpoints``: objects with ``listener_name``, ``security_protocol``, ``host``,
    ``port``.  ``handler`` provides ``IRequestHandler``.  ``reactor`` provides
    ``listenTCP``, ``callLater`` and ``seconds``; ``clock_ns`` gives the
    nanosecond marks of the request log (``time.monotonic_ns`` by default).
    ``ssl_context_factories`` maps a listener name to a TLS context factory.
    ``transfer_failure_handler(region, error)`` is told when sending a ``FileRegion`` failed
    on a disk error (Kafka's ``TransferFailureHandler``: the service marks the log dir offline).
    ``sasl_listeners`` maps a SASL listener's name to its ``security.sasl_config.SaslListener``
    (mechanisms, re-authentication, principal builder); a SASL listener without one is refused.
    ``principal_builders`` maps a TLS listener's name to the ``IPrincipalBuilder`` that turns a
    client certificate into the principal (``ssl.principal.mapping.rules``).
    ``transport_layers`` maps a listener name to the ``ITransportLayer`` it uses (injected:
    verified, not loaded); any other listener loads its layer from the registry as
    ``settings.transport_classes`` / its security protocol name it, given
    ``settings.listener_configs`` of that listener.
    """

    log = Logger(namespace="kafkatw.network.socket_server")

    def __init__(self, endpoints, handler, reactor, settings=None, clock_ns=None, wire=None,
                 request_logger=None, metrics=None, ssl_context_factories=None,
                 transfer_failure_handler=None, transport_layers=None, sasl_listeners=None,
                 principal_builders=None, ip_connection_rate=None):
        self.endpoints = list(endpoints)
        self.handler = handler
        self.reactor = reactor
        self.settings = settings or SocketServerSettings()
        self.clock_ns = clock_ns or time.monotonic_ns
        if wire is None:
            from kafkatw.network.wire import MessagesWire

            wire = MessagesWire()
        self.wire = wire
        self.request_logger = request_logger or RequestLogger(enabled=False)
        self.metrics = metrics or NetworkMetrics()
        self.ssl_context_factories = ssl_context_factories or {}
        self.transfer_failure_handler = transfer_failure_handler
        self.transport_layers = dict(transport_layers or {})
        self.sasl_listeners = sasl_listeners or {}
        self.principal_builders = principal_builders or {}
        self.quotas = ConnectionQuotas(self.settings, ip_connection_rate)
        self.quotas.listener_count = len(self.endpoints)
        self.channel = RequestChannel(handler, self.clock_ns, self.settings.queued_max_requests,
                                      self.settings.num_io_threads, self.metrics)
        self.factories = {}
        self.held = False  # no listener accepts until a start-up Deferred fires (hold_accepting_until)
        self.connections = set()
        #: the handler's {api_key: (lo, hi)}, the one dict it keeps current (read per request)
        self.supported_versions = handler.api_versions()
        #: Kafka's startProcessingRequests: a cluster-mode broker binds its listeners (to
        #: advertise their ports) but accepts nobody until it is registered
        self.accepting_enabled = True

    # -- lifecycle ----------------------------------------------------------

    def start(self):
        """Bind every listener; return ``{listener_name: port object}``."""
        for ep in self.endpoints:
            self.listen(ep)
        return {name: f.port for name, f in self.factories.items()}

    def listen(self, endpoint):
        """Bind one listener on the server endpoint :func:`server_description` names; its port.

        An SSL/SASL_SSL listener's factory is wrapped in TLS here, as ``reactor.listenSSL``
        would, without depending on whether the reactor's module found pyOpenSSL when it was
        imported (``kafkatw.tap`` imports it without, when the config has no SSL listener).
        TCP endpoints listen at once, so a failure (port in use) is raised here.
        """
        if endpoint.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL") \
                and endpoint.listener_name not in self.sasl_listeners:
            # fail closed: a SASL listener is never served without authentication
            raise ValueError("listener %s (%s) has no SASL configuration"
                             % (endpoint.listener_name, endpoint.security_protocol))
        factory = self.factory_for(endpoint)
        listening = factory
        if endpoint.security_protocol in ("SSL", "SASL_SSL"):
            ctx = self.ssl_context_factories.get(endpoint.listener_name)
            if ctx is None:
                raise ValueError("listener %s needs an SSL context factory" % endpoint.listener_name)
            from kafkatw.network.tls_protocol import tls_factory

            listening = tls_factory(ctx, factory, self.reactor)
        description = server_description(endpoint, self.settings.socket_listen_backlog_size)
        outcome = []
        serverFromString(self.reactor, description).listen(listening).addBoth(outcome.append)
        if not outcome:
            raise ValueError("listener %s (%s) did not bind at once" % (endpoint.listener_name, description))
        if isinstance(outcome[0], Failure):
            if outcome[0].check(CannotListenError):
                # Kafka: "Socket server failed to bind to host:port: Address already in use."
                reason = outcome[0].value.socketError
                reason = getattr(reason, "strerror", None) or str(reason)
                raise ConfigError("Socket server failed to bind to %s:%d (listener %s): %s"
                                  % (endpoint.host or "0.0.0.0", endpoint.port,
                                     endpoint.listener_name, reason), "listeners")
            outcome[0].raiseException()
        factory.port = outcome[0]
        # Kafka sets SO_RCVBUF on the server socket (an accepted socket's window scale is fixed
        # at its handshake) and SO_SNDBUF on each accepted one; Linux gives an accepted socket
        # the buffer sizes of its listening socket, so both are set here, before any accept
        sock = getattr(factory.port, "socket", None)  # None on a test reactor's fake port
        if sock is not None:
            set_buffer_sizes(sock, self.settings.socket_send_buffer_bytes,
                             self.settings.socket_receive_buffer_bytes)
        self.log.info("Listening on {listener} {proto}://{host}:{port}", listener=endpoint.listener_name,
                      proto=endpoint.security_protocol, host=endpoint.host or "",
                      port=factory.port.getHost().port)
        if self.held or not self.accepting_enabled:
            self._refresh_accepting()
        return factory.port

    def hold_accepting_until(self, d):
        """Bind as usual but accept no connection until ``d`` fires (Kafka's listeners wait for
        the authorizer's start futures): clients wait in the listen backlog. If ``d`` fails the
        listeners stay closed (fail closed) and the failure is logged."""
        self.held = True
        self._refresh_accepting()

        def ready(result):
            self.held = False
            self._refresh_accepting()
            return result

        def failed(f):
            self.log.failure("start-up failed; the listeners accept no connection", f)

        d.addCallbacks(ready, failed)

    def factory_for(self, endpoint):
        """The (new) factory of ``endpoint``, registered but not listening (tests use it directly).

        Its transport layer is loaded and verified here, once for the listener's connections."""
        name = endpoint.listener_name
        layer = self.transport_layers.get(name)
        if layer is None:
            layer = load_transport_layer(endpoint, self.settings.transport_classes.get(name),
                                         self.settings.listener_configs.get(name))
        else:
            check_transport_layer(endpoint, type(layer).__name__, layer)
        self.transport_layers[name] = layer
        factory = KafkaListenerFactory(self, endpoint, layer)
        self.factories[endpoint.listener_name] = factory
        return factory

    def bound_port(self, listener_name):
        """The actual port of a listener (useful with port 0)."""
        return self.factories[listener_name].port.getHost().port

    def listening(self):
        """``{listener name: True while its port accepts connections}`` (health checks)."""
        out = {}
        for ep in self.endpoints:
            factory = self.factories.get(ep.listener_name)
            port = factory.port if factory is not None else None
            out[ep.listener_name] = bool(port is not None and port.connected)
        return out

    def stop_listener(self, listener_name):
        """Stop accepting on one listener and close its connections; Deferred of the port closing."""
        factory = self.factories.get(listener_name)
        port = factory.port if factory is not None else None
        if factory is not None:
            factory.stopped = True  # no longer resumed by the connection quotas
            if factory.throttled_call is not None and factory.throttled_call.active():
                factory.throttled_call.cancel()
            factory.throttled_call = None
        d = defer.maybeDeferred(port.stopListening) if port is not None else defer.succeed(None)
        for conn in list(self.connections):
            if conn.endpoint.listener_name == listener_name:
                # close(), not the transport's loseConnection: over TLS that waits for the
                # peer's close_notify, which a connection muted by a parked request never reads
                conn.close("listener {listener} stopped", listener=listener_name)
        return d

    def close(self):
        """Release what the listeners share (the request log file); after they stopped."""
        self.request_logger.close()

    def stop(self):
        """Stop every listener and close all connections; Deferred fires when the ports are closed."""
        ds = [self.stop_listener(name) for name in list(self.factories)]
        self.close()
        return defer.DeferredList(ds)

    # -- used by connections ------------------------------------------------

    def authenticator_for(self, conn):
        """A SASL authenticator for a new connection on a SASL listener, else None."""
        listener = self.sasl_listeners.get(conn.endpoint.listener_name)
        if listener is None:
            return None
        from kafkatw.network.authenticator import SaslServerAuthenticator

        return SaslServerAuthenticator(conn, listener)

    def tls_principal(self, conn):
        """The principal of a TLS connection once its handshake is done: the listener's
        principal builder on the client certificate's subject (raises if no rule maps it)."""
        from kafkatw.network.tls import peer_dn
        from kafkatw.security.principal import AuthenticationContext, DefaultPrincipalBuilder

        builder = self.principal_builders.get(conn.endpoint.listener_name) or DefaultPrincipalBuilder()
        return builder.build(AuthenticationContext(
            security_protocol=conn.endpoint.security_protocol, listener_name=conn.endpoint.listener_name,
            client_address=(conn.peer_host, conn.peer_port), ssl_peer_dn=peer_dn(conn.transport)))

    def next_connection_seq(self, endpoint):
        factory = self.factories.get(endpoint.listener_name)
        if factory is None:
            return 0
        seq = factory.seq
        factory.seq += 1
        return seq

    def update_settings(self, settings):
        """New limits from a dynamic broker config: connection limits count from the next
        accept (open connections stay, as in Kafka) and ``num.io.threads`` from the next
        dispatch."""
        self.settings = settings
        self.quotas.settings = settings
        self.channel.resize(settings.num_io_threads)
        self._refresh_accepting()

    def after_accept(self, factory=None):
        """Kafka's Acceptor waits for a slot when max.connections (or its listener's) is
        reached, and waits out the throttle time of a connection creation rate: stop accepting
        (the kernel backlog holds new connections) until then."""
        if factory is not None:
            self._record_creation(factory)
        self._refresh_accepting()

    def _throttle_ended(self, factory):
        factory.throttled_call = None
        while factory.waiting and factory.throttled_call is None:
            conn = factory.waiting.popleft()
            if conn.closing:
                continue
            conn.release_accept()
            self._record_creation(factory)
        self._refresh_accepting()

    def _record_creation(self, factory):
        now_ms = int(self.reactor.seconds() * 1000)
        throttle = self.quotas.record_connection_creation(factory.endpoint.listener_name, now_ms)
        if throttle > 0 and factory.throttled_call is None:
            self.metrics.connection_creation_throttles[factory.endpoint.listener_name] += 1
            factory.throttled_call = self.reactor.callLater(throttle / 1000.0, self._throttle_ended, factory)

    def set_accepting(self, enabled):
        """Accept connections or not (bound ports stay bound; callers wait in the backlog)."""
        self.accepting_enabled = enabled
        self._refresh_accepting()

    def _refresh_accepting(self):
        full = self.quotas.full()
        for name, f in self.factories.items():
            if f.port is None or f.stopped:
                continue
            paused = (self.held or not self.accepting_enabled
                      or (full and name != self.settings.inter_broker_listener_name)
                      or self.quotas.listener_full(name) or f.throttled_call is not None)
            if paused and f.reading:
                f.reading = False
                f.port.stopReading()
            elif not paused and not f.reading:
                f.reading = True
                f.port.startReading()

    def connection_made(self, conn):
        self.connections.add(conn)
        name = conn.endpoint.listener_name
        self.metrics.connections[name] += 1
        self.metrics.connections_created[name] += 1

    def connection_lost(self, conn):
        if conn in self.connections:
            self.connections.discard(conn)
            name = conn.endpoint.listener_name
            self.metrics.connections[name] -= 1
            self.metrics.connections_closed[name] += 1
        self.quotas.dec(conn.peer_host, conn.endpoint.listener_name)
        self._refresh_accepting()

    def request_completed(self, request, response):
        api_name = self.wire.api_names[request.api_key]  # (api_name() without its call)
        # (a conditional, not max(0, ...): the builtin parses keywords, ~1.1k instructions more)
        elapsed_ns = (request.response_complete_ns or request.start_ns) - request.start_ns
        total_ms = elapsed_ns / 1e6 if elapsed_ns > 0 else 0.0
        times = request_times(request) if self.metrics.request_times is not None else None
        self.metrics.record_request(api_name, total_ms, request.api_version, times)
        if self.request_logger.enabled:
            self.request_logger.log_request(request, api_name, response)


class ListenerService(service.Service):
    """One listener as a service: binds at start, stops accepting and closes its connections
    at stop. ``socket_server`` is a callable giving the :class:`SocketServer` it belongs to,
    which exists only once the services before it (the request handlers) have started."""

    def __init__(self, socket_server, endpoint):
        self.socket_server = socket_server
        self.endpoint = endpoint
        self.name = "listener-" + endpoint.listener_name

    def startService(self):
        super().startService()
        self.socket_server().listen(self.endpoint)

    def stopService(self):
        super().stopService()
        return self.socket_server().stop_listener(self.endpoint.listener_name)
