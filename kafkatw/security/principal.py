"""Who a request comes from: Kafka's ``KafkaPrincipal`` value object and the principal builder.

Owns the principal type and its ``Type:name`` text form, ``IPrincipalBuilder``, the default
builder (SASL: the authorization id; SSL: the certificate subject through
``ssl.principal.mapping.rules``; otherwise ANONYMOUS) and choosing each listener's builder from
``principal.builder.class``. It does not authenticate anyone.
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
    ``sasl_mechanism`` and ``authorization_id`` after SASL, ``ssl_peer_dn`` (the client
    certificate's subject as an RFC 2253 string, or None) after TLS.
    """

    security_protocol = attr.ib()
    listener_name = attr.ib()
    client_address = attr.ib(default=("", 0))
    sasl_mechanism = attr.ib(default=None)
    authorization_id = attr.ib(default=None)
    ssl_peer_dn = attr.ib(default=None)


class IPrincipalBuilder(Interface):
    """Kafka's ``KafkaPrincipalBuilder`` (``principal.builder.class``)."""

    def build(context):
        """The :class:`KafkaPrincipal` of an :class:`AuthenticationContext`."""


@implementer(IPrincipalBuilder)
class DefaultPrincipalBuilder:
    """Kafka's ``DefaultKafkaPrincipalBuilder``: ``User:<authorization id>`` after SASL,
    ``User:<mapped subject>`` after TLS alone (``ssl_mapper``: an ``SslPrincipalMapper``; a DN no
    rule maps raises ``NoMatchingRule``), ANONYMOUS otherwise."""

    def __init__(self, ssl_mapper=None):
        self.ssl_mapper = ssl_mapper

    def build(self, context):
        if context.authorization_id is not None:
            return KafkaPrincipal(USER_TYPE, context.authorization_id)
        if context.ssl_peer_dn is not None:
            dn = context.ssl_peer_dn
            return KafkaPrincipal(USER_TYPE, self.ssl_mapper.name(dn) if self.ssl_mapper is not None else dn)
        return ANONYMOUS


def principal_builders(config, listener_names=None):
    """``{listener: IPrincipalBuilder}`` for the TLS and SASL listeners of ``config``.

    ``principal.builder.class`` names one builder for all (a plug-in or dotted name); otherwise
    each listener gets the default builder with its own ``ssl.principal.mapping.rules``
    (``listener.name.<l>.`` override first). A bad rule is a one-line ConfigError.
    """
    from kafkatw import registry
    from kafkatw.config import ConfigError
    from kafkatw.security.ssl_mapping import SslPrincipalMapper

    custom = config.get("principal.builder.class")
    if custom:
        shared = registry.load("principal.builder.class", custom, IPrincipalBuilder)
    out = {}
    for ep in config.listeners:
        if ep.security_protocol == "PLAINTEXT":
            continue
        if listener_names is not None and ep.listener_name not in listener_names:
            continue
        if custom:
            out[ep.listener_name] = shared
            continue
        key = "listener.name.%s.ssl.principal.mapping.rules" % ep.listener_name.lower()
        rules = config.originals.get(key)
        if rules is None:
            key, rules = "ssl.principal.mapping.rules", config["ssl.principal.mapping.rules"]
        try:
            out[ep.listener_name] = DefaultPrincipalBuilder(SslPrincipalMapper(rules))
        except ValueError as e:
            raise ConfigError.invalid(key, rules, str(e)) from None
    return out
