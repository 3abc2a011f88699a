"""SASL/PLAIN (RFC 4616) on the server: the token check and the credential callback.

Owns parsing ``authzid NUL authcid NUL passwd``, the authorization-id check and the default
callback reading ``user_<name>="<password>"`` options of ``PlainLoginModule`` (Kafka's
``PlainSaslServer`` and ``PlainServerCallbackHandler``). Passwords are never logged.
"""

import hmac

from twisted.internet import defer
from zope.interface import Interface, implementer

from kafkatw import registry
from kafkatw.config import ConfigError
from kafkatw.security.sasl import ISaslServer, ISaslServerFactory, SaslAuthenticationError, SaslError

MECHANISM = "PLAIN"
LOGIN_MODULE = "PlainLoginModule"
CALLBACK_KEY = "plain.sasl.server.callback.handler.class"


class IPlainCallbackHandler(Interface):
    """Checks a PLAIN user name and password (``<l>.plain.sasl.server.callback.handler.class``)."""

    def authenticate(username, password):
        """True if the password is right for the user (or a Deferred of that)."""


@implementer(IPlainCallbackHandler)
class JaasPlainCallbackHandler:
    """Users from the JAAS options ``user_<name>="<password>"`` (Kafka's default)."""

    def __init__(self, jaas=None, **_):
        self.users = {}
        for entry in jaas or ():
            if entry.module_name == LOGIN_MODULE:
                for key, value in entry.options.items():
                    if key.startswith("user_"):
                        self.users[key[len("user_"):]] = value

    def authenticate(self, username, password):
        expected = self.users.get(username)
        given = password.encode("utf-8")
        if expected is None:
            hmac.compare_digest(given, given)  # an unknown user costs what a known one does
            return False
        return hmac.compare_digest(expected.encode("utf-8"), given)


@implementer(ISaslServer)
class PlainSaslServer:
    mechanism_name = MECHANISM

    def __init__(self, callback):
        self._callback = callback
        self._complete = False
        self._authorization_id = None

    def evaluate_response(self, response):
        if self._complete:
            raise SaslError("PLAIN authentication already complete")
        try:
            text = bytes(response).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslError("Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise SaslError("Invalid SASL/PLAIN response: expected 3 tokens, got %d" % (len(parts),))
        authzid, username, password = parts
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        if authzid and authzid != username:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization "
                                          "id that is different from username")
        result = self._callback.authenticate(username, password)

        def checked(ok):
            if not ok:
                raise SaslAuthenticationError("Authentication failed: Invalid username or password")
            self._authorization_id = username
            self._complete = True
            return b""

        if isinstance(result, defer.Deferred):
            return result.addCallback(checked)
        return checked(result)

    def is_complete(self):
        return self._complete

    def authorization_id(self):
        if not self._complete:
            raise SaslError("PLAIN authentication not completed")
        return self._authorization_id

    def negotiated_property(self, name):
        return None


@implementer(ISaslServerFactory)
class PlainSaslServerFactory:
    """PLAIN on one listener: the JAAS users, or the configured callback handler."""

    mechanism = MECHANISM

    def __init__(self, mechanism=MECHANISM, listener_name="", jaas=None, settings=None, credentials=None):
        settings = settings or {}
        prefix = "listener.name.%s." % listener_name.lower()
        callback = settings.get(CALLBACK_KEY)
        if callback:
            self.callback = registry.load(prefix + CALLBACK_KEY, callback, IPlainCallbackHandler,
                                          jaas=jaas, configs=settings)
        else:
            self.callback = JaasPlainCallbackHandler(jaas)
            if not any(e.module_name == LOGIN_MODULE for e in jaas or ()):
                raise ConfigError("SASL mechanism PLAIN on listener %s needs %splain.sasl.jaas.config "
                                  "with %s and user_<name>=\"<password>\" options, or %s%s"
                                  % (listener_name, prefix, LOGIN_MODULE, prefix, CALLBACK_KEY),
                                  prefix + "plain.sasl.jaas.config")
            if not self.callback.users:
                raise ConfigError("SASL mechanism PLAIN on listener %s has no users: %splain.sasl.jaas.config "
                                  "has no user_<name> option" % (listener_name, prefix),
                                  prefix + "plain.sasl.jaas.config")

    def create_server(self, context):
        return PlainSaslServer(self.callback)
