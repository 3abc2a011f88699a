"""The SASL mechanism contract: ``ISaslServerFactory`` makes one ``ISaslServer`` per login.

Owns the interfaces every mechanism implements (Java's ``SaslServer``/``SaslServerFactory`` in
Python shape) and the two failures a mechanism raises. It knows no mechanism and no socket.
"""

from zope.interface import Attribute, Interface

#: ``negotiated_property`` key: when the credential expires (epoch ms), e.g. an OAuth token.
CREDENTIAL_LIFETIME_MS = "CREDENTIAL.LIFETIME.MS"


class SaslAuthenticationError(Exception):
    """Authentication failed; the message is safe to send to the client (Kafka's
    ``SaslAuthenticationException``): it names no secret and does not say whether a user exists.
    ``detail``, if given, says more in the broker's log (never a secret either)."""

    def __init__(self, message, detail=None):
        Exception.__init__(self, message)
        self.detail = detail


class SaslError(Exception):
    """A malformed or unexpected token (Java's ``SaslException``); the client is told only that
    authentication failed with this mechanism, the message goes to the broker's log."""


class ISaslServer(Interface):
    """One authentication exchange on one connection."""

    mechanism_name = Attribute("The mechanism, e.g. 'SCRAM-SHA-256'.")

    def evaluate_response(response):
        """Process the client's token (bytes); return the challenge to send (bytes, maybe empty),
        or a Deferred of it. Raise :class:`SaslAuthenticationError` or :class:`SaslError`."""

    def is_complete():
        """True once the exchange has succeeded."""

    def authorization_id():
        """The authenticated (and authorized) user name; only valid once complete."""

    def negotiated_property(name):
        """A negotiated value (``CREDENTIAL_LIFETIME_MS``) or None."""


class ISaslServerFactory(Interface):
    """A configured mechanism on one listener (Kafka's per-mechanism callback handler + factory).

    Plug-ins are built by :func:`kafkatw.registry.load` with the keyword arguments
    ``mechanism``, ``listener_name``, ``jaas`` (the parsed ``sasl.jaas.config`` entries or None),
    ``settings`` (the listener's effective original properties) and ``credentials`` (the SCRAM store).
    """

    mechanism = Attribute("The mechanism name it serves.")

    def create_server(context):
        """A new :class:`ISaslServer` for one connection (``context``: an AuthenticationContext)."""
