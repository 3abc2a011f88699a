"""Who is using the console: HTTP basic credentials checked against the broker's SASL users
(PLAIN's callback, SCRAM's credential store), the principal built by that listener's principal
builder, and CSRF tokens for actions.

Owns deciding whether the console asks for credentials (whenever the broker has a SASL
listener or an authorizer: fail closed, never silently open) and keeping passwords out of
memory beyond the check (a success is remembered for a minute by a keyed hash, never the
password). Authorization is not here: the requests carry the principal to the authorizer.
"""

import hashlib
import hmac
import os
import time

from twisted.internet import defer, threads
from twisted.logger import Logger

from kafkatw.config import ConfigError
from kafkatw.security.principal import ANONYMOUS, AuthenticationContext
from kafkatw.security.sasl import SaslAuthenticationError, SaslError
from kafkatw.security.scram import MECHANISMS as SCRAM_MECHANISMS
from kafkatw.security.scram import credential_from_salted_password, salted_password

log = Logger(namespace="kafkatw.console")

LISTENER_KEY = "kafkatw.console.listener"
#: How long a checked password is remembered (PBKDF2 costs milliseconds; pages poll).
REMEMBER_SECONDS = 60.0


class OpenAccess:
    """No SASL listener and no authorizer: every request is ANONYMOUS, as on a PLAINTEXT listener."""

    required = False
    mechanisms = ()

    def __init__(self, endpoint):
        self.listener_name = endpoint.listener_name
        self.security_protocol = endpoint.security_protocol

    def authenticate(self, user, password, host):
        return defer.succeed(ANONYMOUS)


class SaslUsers:
    """The users of one SASL listener (its enabled PLAIN and SCRAM mechanisms)."""

    required = True

    def __init__(self, sasl_listener, scram_credentials, run_blocking, clock=time.monotonic):
        self.listener = sasl_listener
        self.listener_name = sasl_listener.listener_name
        self.security_protocol = sasl_listener.security_protocol
        self.mechanisms = [name for name in sasl_listener.enabled if name == "PLAIN" or name in SCRAM_MECHANISMS]
        self.scram_credentials = scram_credentials
        self.run_blocking = run_blocking
        self.clock = clock
        self._key = os.urandom(32)
        self._remembered = {}  # keyed hash of (user, password) -> (principal, expiry)

    def _digest(self, user, password):
        return hmac.new(self._key, b"%s\0%s" % (user.encode("utf-8"), password.encode("utf-8")),
                        hashlib.sha256).digest()

    @defer.inlineCallbacks
    def authenticate(self, user, password, host):
        """A Deferred of the principal, or of None when no mechanism accepts the password."""
        if not user or not password:
            return None
        digest = self._digest(user, password)
        now = self.clock()
        hit = self._remembered.get(digest)
        if hit is not None and hit[1] > now:
            return hit[0]
        for name in self.mechanisms:
            ok = yield self._check(name, user, password)
            if ok:
                context = AuthenticationContext(security_protocol=self.security_protocol,
                                                listener_name=self.listener.listener_name,
                                                client_address=(host, 0), sasl_mechanism=name,
                                                authorization_id=user)
                principal = self.listener.principal_builder.build(context)
                if len(self._remembered) > 1000:
                    self._remembered = {k: v for k, v in self._remembered.items() if v[1] > now}
                self._remembered[digest] = (principal, now + REMEMBER_SECONDS)
                return principal
        log.info("console login failed for user {user} from {host}", user=user, host=host)
        return None

    @defer.inlineCallbacks
    def _check(self, name, user, password):
        if name == "PLAIN":
            server = self.listener.mechanisms[name].create_server(AuthenticationContext(
                security_protocol=self.security_protocol, listener_name=self.listener.listener_name))
            try:
                yield defer.maybeDeferred(server.evaluate_response,
                                          b"\0%s\0%s" % (user.encode("utf-8"), password.encode("utf-8")))
            except (SaslAuthenticationError, SaslError):
                return False
            return server.is_complete() and server.authorization_id() == user
        stored = self.scram_credentials.get(user, name) if self.scram_credentials is not None else None
        if stored is None:
            return False
        mechanism = SCRAM_MECHANISMS[name]
        derived = yield self.run_blocking(_derive, mechanism, password, stored.salt, stored.iterations)
        return hmac.compare_digest(derived.stored_key, stored.stored_key)


def _derive(mechanism, password, salt, iterations):
    return credential_from_salted_password(mechanism, salted_password(mechanism, password, salt, iterations),
                                           salt, iterations)


def access_for(broker):
    """How the console authenticates on ``broker`` (a BrokerService): SASL users of its first
    SASL listener; open only when the broker has neither a SASL listener nor an authorizer."""
    listeners = [broker.sasl_listeners[ep.listener_name] for ep in broker.config.listeners
                 if ep.listener_name in broker.sasl_listeners]
    for listener in listeners:
        users = SaslUsers(listener, broker.scram_credentials,
                          lambda fn, *args: threads.deferToThreadPool(broker.reactor, broker.threadpool, fn, *args))
        if users.mechanisms:
            return users
    if listeners or broker.authorizer is not None:
        raise ConfigError("Invalid value %s for configuration %s: the broker authenticates clients or authorizes "
                          "requests, but no SASL listener has PLAIN or SCRAM users the console could check "
                          "passwords against" % (broker.config[LISTENER_KEY], LISTENER_KEY), LISTENER_KEY)
    return OpenAccess(broker.config.listeners[0])


class CsrfTokens:
    """A token per principal (an HMAC under a per-process key): pages read it from
    ``/api/session`` and send it in ``X-CSRF-Token`` with every action; another site's form
    cannot read it (same-origin policy) and so cannot act with the browser's credentials."""

    HEADER = b"x-csrf-token"

    def __init__(self, key=None):
        self._key = key or os.urandom(32)

    def token(self, principal):
        return hmac.new(self._key, str(principal).encode("utf-8"), hashlib.sha256).hexdigest()

    def valid(self, principal, given):
        if not given:
            return False
        if isinstance(given, bytes):
            given = given.decode("ascii", "replace")
        return hmac.compare_digest(self.token(principal), given)
