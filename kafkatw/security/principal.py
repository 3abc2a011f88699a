"""Who a request comes from: Kafka's ``KafkaPrincipal`` value object and the principal builder.

Owns the principal type and its ``Type:name`` text form, ``IPrincipalBuilder`` and the default
builder (SASL: the authorization id; SSL: the certificate subject; otherwise ANONYMOUS). It does
not authenticate anyone.
"""

import attr
from zope.interface import Interface, implementer

USER_TYPE = "User"


@attr.s(frozen=True, slots=True)
class KafkaPrincipal:
    """A principal: ``principal_type`` ("User") and ``name``; ``str()`` is ``User:name``."""

    principal_type = attr.ib()
    name = attr.ib()
    token_authenticated = attr.ib(default=False, eq=False)

    def __str__(self):
        return "%s:%s" % (self.principal_type, self.name)

    @classmethod
    def from_string(cls, text):
        """``User:alice`` -> ``KafkaPrincipal("User", "alice")``; raises ValueError without a type."""
        kind, sep, name = (text or "").partition(":")
        if not sep or not kind:
            raise ValueError("expected a principal as Type:name, got %r" % (text,))
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


@attr.s(frozen=True, slots=True)
class AuthenticationContext:
    """What a principal builder is told about an authenticated connection.

    ``security_protocol`` and ``listener_name`` of the connection, the client's address,
    ``sasl_mechanism`` and ``authorization_id`` after SASL, ``ssl_principal`` (the certificate's
    principal, or None) after TLS.
    """

    security_protocol = attr.ib()
    listener_name = attr.ib()
    client_address = attr.ib(default=("", 0))
    sasl_mechanism = attr.ib(default=None)
    authorization_id = attr.ib(default=None)
    ssl_principal = attr.ib(default=None)


class IPrincipalBuilder(Interface):
    """Kafka's ``KafkaPrincipalBuilder`` (``principal.builder.class``)."""

    def build(context):
        """The :class:`KafkaPrincipal` of an :class:`AuthenticationContext`."""


@implementer(IPrincipalBuilder)
class DefaultPrincipalBuilder:
    """Kafka's ``DefaultKafkaPrincipalBuilder``: ``User:<authorization id>`` after SASL, the
    certificate's principal after TLS alone, ANONYMOUS otherwise."""

    def build(self, context):
        if context.authorization_id is not None:
            return KafkaPrincipal(USER_TYPE, context.authorization_id)
        if context.ssl_principal is not None:
            return context.ssl_principal
        return ANONYMOUS
