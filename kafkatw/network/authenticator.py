"""SASL authentication of one connection on a SASL listener (Kafka's ``SaslServerAuthenticator``).

Owns the per-connection state machine: before authentication only ApiVersions (passed on to the
request handler), SaslHandshake and SaslAuthenticate (answered here) are accepted, anything else
closes the connection; raw tokens after a v0 handshake; the session lifetime and re-authentication
of KIP-368. Mechanisms are injected (``kafkatw.security.sasl_config.SaslListener``); this module
never imports ``kafkatw.server`` and knows no mechanism.
"""

import struct

import attr
from twisted.internet import defer
from twisted.logger import Logger

from kafkatw.network.request import Request, Response
from kafkatw.network.wire import API_VERSIONS_KEY, peek_header
from kafkatw.protocol import errors
from kafkatw.security.principal import AuthenticationContext
from kafkatw.security.sasl import CREDENTIAL_LIFETIME_MS, SaslAuthenticationError, SaslError

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36

#: states (Kafka's SaslState, with REAUTH_* folded into a flag)
HANDSHAKE_OR_VERSIONS = "HANDSHAKE_OR_VERSIONS_REQUEST"
AUTHENTICATE = "AUTHENTICATE"
COMPLETE = "COMPLETE"
FAILED = "FAILED"

_SIZE = struct.Struct(">i")


class SaslServerAuthenticator:
    """Drives one :class:`~kafkatw.security.sasl.ISaslServer` per (re-)authentication of ``conn``."""

    log = Logger(namespace="kafkatw.network.authenticator")

    def __init__(self, conn, listener):
        self.conn = conn
        self.listener = listener
        self.state = HANDSHAKE_OR_VERSIONS
        self.mechanism = None
        self.sasl_server = None
        self.kafka_headers = True  # False after a v0 handshake: bare size-prefixed tokens
        self.session_expiry = None  # reactor seconds; None: the session never expires
        self.reauthenticating = False
        self._bad_reauth_mechanism = None
        self._max_size = conn.decoder.max_size
        conn.decoder.max_size = min(self._max_size, listener.max_receive_size)

    @property
    def authenticated(self):
        return self.state == COMPLETE

    # -- entry point from the connection ------------------------------------------------------
    def intercept(self, frame):
        """True if ``frame`` is the authenticator's to answer (or closed the connection)."""
        state = self.state
        if state == COMPLETE:
            api_key = peek_header(frame)[0]
            if api_key == SASL_HANDSHAKE_KEY:
                self.reauthenticating = True
                self._handle_request(frame)
                return True
            if self.session_expiry is not None and self.conn.server.reactor.seconds() >= self.session_expiry:
                self.conn.server.metrics.expired_connections_killed += 1
                self.conn.close("the SASL session expired (connections.max.reauth.ms) and the client "
                                "did not re-authenticate")
                return True
            return False
        if state == FAILED:
            return True
        if state == AUTHENTICATE and not self.kafka_headers:
            self._handle_raw_token(frame)
            return True
        if state == HANDSHAKE_OR_VERSIONS and peek_header(frame)[0] == API_VERSIONS_KEY:
            return False  # answered by the request handler, as on any listener
        self._handle_request(frame)
        return True

    # -- Kafka requests (SaslHandshake, SaslAuthenticate) -----------------------------------------
    def _handle_request(self, frame):
        conn = self.conn
        server = conn.server
        api_key, api_version, correlation_id = peek_header(frame)
        expected = SASL_AUTHENTICATE_KEY if self.state == AUTHENTICATE else SASL_HANDSHAKE_KEY
        if api_key != expected:
            self._fail_closed("unexpected {api} request during SASL {phase}", api=server.wire.api_name(api_key),
                              phase="authentication" if self.state == AUTHENTICATE else "handshake")
            return
        rng = server.supported_versions.get(api_key)
        if rng is None or not rng[0] <= api_version <= rng[1]:
            self._fail_closed("unsupported {api} version {version}", api=server.wire.api_name(api_key),
                              version=api_version)
            return
        try:
            header, body = server.wire.decode_request(frame, api_key, api_version)
        except Exception as e:
            self._fail_closed("cannot decode {api} v{version}: {err}", api=server.wire.api_name(api_key),
                              version=api_version, err=e)
            return
        request = Request(header=header, api_key=api_key, api_version=api_version,
                          correlation_id=correlation_id, client_id=getattr(header, "client_id", None),
                          body=body, size=len(frame), context=conn.context, start_ns=server.clock_ns())
        conn.accept_request(request)
        if api_key == SASL_HANDSHAKE_KEY:
            self._handshake(request)
        else:
            self._authenticate(request)

    def _handshake(self, request):
        from kafkatw.protocol.messages import SaslHandshakeResponse

        mechanism = request.body.mechanism
        enabled = self.listener.enabled
        factory = self.listener.mechanisms.get(mechanism)
        if factory is None:
            self._failed("unsupported SASL mechanism {mechanism!r} (enabled: {enabled})",
                         mechanism=mechanism, enabled=", ".join(enabled))
            self._respond(request, SaslHandshakeResponse(
                error_code=errors.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled), close=True)
            return
        self._bad_reauth_mechanism = None
        if self.reauthenticating and mechanism != self.mechanism:
            # as Kafka: the handshake is answered, the authentication that follows fails
            self._bad_reauth_mechanism = ("SASL mechanism '%s' requested by client is not supported for "
                                          "re-authentication of mechanism '%s'" % (mechanism, self.mechanism))
        else:
            self.mechanism = mechanism
            self.sasl_server = factory.create_server(self._auth_context())
        self.kafka_headers = request.api_version >= 1
        self.state = AUTHENTICATE
        self._respond(request, SaslHandshakeResponse(error_code=errors.NONE, mechanisms=enabled))

    def _authenticate(self, request):
        from kafkatw.protocol.messages import SaslAuthenticateResponse

        def ok(challenge, lifetime_ms):
            body = SaslAuthenticateResponse(error_code=errors.NONE, auth_bytes=challenge)
            if request.api_version >= 1:
                body.session_lifetime_ms = lifetime_ms
            self._respond(request, body)

        def failed(message):
            self._respond(request, SaslAuthenticateResponse(
                error_code=errors.SASL_AUTHENTICATION_FAILED, error_message=message), close=True)

        self._evaluate(bytes(request.body.auth_bytes or b""), ok, failed)

    def _respond(self, request, body, close=False):
        """Answer ``request``; with ``close``, the connection closes
        ``connection.failed.authentication.delay.ms`` later (Kafka's delayed close: a client reads
        the failure before it sees the connection end), reading nothing more meanwhile."""
        conn = self.conn
        if conn.closed:
            return
        now = conn.server.clock_ns()
        request.dequeue_ns = request.dequeue_ns or request.start_ns
        request.api_local_complete_ns = request.api_remote_complete_ns = now
        delay_ms = self.listener.failed_authentication_delay_ms
        conn.send_response(request, Response(body, close_connection=close and delay_ms <= 0))
        if close and delay_ms > 0:
            conn.server.reactor.callLater(delay_ms / 1000.0, conn.close,
                                          "SASL authentication failed (closed after "
                                          "connection.failed.authentication.delay.ms)")

    # -- raw tokens (after a v0 SaslHandshake) -----------------------------------------------------
    def _handle_raw_token(self, frame):
        conn = self.conn
        now = conn.server.clock_ns()
        request = Request(header=None, api_key=SASL_AUTHENTICATE_KEY, api_version=0, correlation_id=-1,
                          client_id=None, body=None, size=len(frame), context=conn.context, start_ns=now,
                          dequeue_ns=now)
        conn.accept_request(request)

        def ok(challenge, lifetime_ms):
            if conn.closed:
                return
            request.api_local_complete_ns = request.api_remote_complete_ns = \
                request.response_dequeue_ns = conn.server.clock_ns()
            conn.send_raw_response(request, [_SIZE.pack(len(challenge)) + challenge])

        def failed(message):
            conn.close("SASL authentication failed")

        self._evaluate(bytes(frame), ok, failed)

    # -- evaluation -----------------------------------------------------------------------------
    def _evaluate(self, token, ok, failed):
        if self._bad_reauth_mechanism is not None:
            self._evaluation_failed(SaslAuthenticationError(self._bad_reauth_mechanism), failed)
            return
        try:
            result = self.sasl_server.evaluate_response(token)
        except Exception as e:
            self._evaluation_failed(e, failed)
            return
        if isinstance(result, defer.Deferred):
            result.addCallbacks(self._evaluated, lambda f: self._evaluation_failed(f.value, failed),
                                callbackArgs=(ok, failed))
            result.addErrback(lambda f: self.log.failure("SASL evaluation failed", f))
        else:
            self._evaluated(result, ok, failed)

    def _evaluated(self, challenge, ok, failed):
        conn = self.conn
        if conn.closed:
            return
        challenge = b"" if challenge is None else bytes(challenge)
        lifetime_ms = 0
        if self.sasl_server.is_complete():
            principal = self.listener.principal_builder.build(self._auth_context(
                authorization_id=self.sasl_server.authorization_id()))
            if self.reauthenticating and principal != conn.context.principal:
                self._evaluation_failed(SaslAuthenticationError(
                    "Cannot change principals during re-authentication from %s.%s: %s.%s" % (
                        conn.context.principal.principal_type, conn.context.principal.name,
                        principal.principal_type, principal.name)), failed)
                return
            lifetime_ms = self._session_lifetime_ms()
            conn.context = attr.evolve(conn.context, principal=principal)
            conn.decoder.max_size = self._max_size
            metrics = conn.server.metrics
            if self.reauthenticating:
                metrics.successful_reauthentication[conn.endpoint.listener_name] += 1
            else:
                metrics.successful_authentication[conn.endpoint.listener_name] += 1
            self.state = COMPLETE
            self.reauthenticating = False
            self.log.debug("SASL {mechanism} authentication of {principal} from {peer} complete",
                           mechanism=self.mechanism, principal=str(principal), peer=self._peer())
        ok(challenge, lifetime_ms)

    def _evaluation_failed(self, error, failed):
        reason = str(error)
        if isinstance(error, SaslAuthenticationError):
            message = str(error)
            reason = error.detail or reason
        else:
            if not isinstance(error, SaslError):
                self.log.failure("SASL mechanism {mechanism} raised", mechanism=self.mechanism)
            # the mechanism's own text may tell whether a user exists: the client gets Kafka's line
            message = ("Authentication failed during %s due to invalid credentials with SASL mechanism %s"
                       % ("re-authentication" if self.reauthenticating else "authentication", self.mechanism))
        self._failed("{phase} failed with SASL mechanism {mechanism}: {reason}",
                     phase="re-authentication" if self.reauthenticating else "authentication",
                     mechanism=self.mechanism, reason=reason)
        failed(message)

    def _failed(self, why, **fields):
        """Count a failed login and log it with the peer (never a secret)."""
        conn = self.conn
        metrics = conn.server.metrics
        if self.reauthenticating:
            metrics.failed_reauthentication[conn.endpoint.listener_name] += 1
        else:
            metrics.failed_authentication[conn.endpoint.listener_name] += 1
        self.state = FAILED
        self.log.info("Failed authentication with {peer} on {listener}: " + why, peer=self._peer(),
                      listener=conn.endpoint.listener_name, **fields)

    def _fail_closed(self, why, **fields):
        self._failed(why, **fields)
        self.conn.close(why, **fields)

    # -- helpers --------------------------------------------------------------------------------
    def _peer(self):
        return "%s:%s" % (self.conn.peer_host, self.conn.peer_port)

    def _auth_context(self, authorization_id=None):
        conn = self.conn
        dn = None
        if conn.endpoint.security_protocol == "SASL_SSL":
            from kafkatw.network.tls import peer_dn

            dn = peer_dn(conn.transport)
        return AuthenticationContext(
            security_protocol=conn.endpoint.security_protocol, listener_name=conn.endpoint.listener_name,
            client_address=(conn.peer_host, conn.peer_port), sasl_mechanism=self.mechanism,
            authorization_id=authorization_id, ssl_peer_dn=dn)

    def _session_lifetime_ms(self):
        """Kafka's ``calcCompletionTimesAndReturnSessionLifetimeMs``; sets the session expiry."""
        now = self.conn.server.reactor.seconds()
        max_reauth = self.listener.reauth_ms.get(self.mechanism) or 0
        expires_ms = self.sasl_server.negotiated_property(CREDENTIAL_LIFETIME_MS)
        if expires_ms is None and max_reauth <= 0:
            self.session_expiry = None
            return 0
        if expires_ms is None:
            lifetime = max_reauth
        elif max_reauth <= 0:
            lifetime = max(0, int(expires_ms - now * 1000))
        else:
            lifetime = max(0, min(int(expires_ms - now * 1000), max_reauth))
        self.session_expiry = now + lifetime / 1000.0
        return lifetime
