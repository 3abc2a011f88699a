"""Built-in SASL mechanisms and principal builders, as drop-in plug-ins (no import of their code)."""

from kafkatw.registry import PluginDescriptor

_SASL = "kafkatw.security.sasl.ISaslServerFactory"


def _descriptor(interface_name, name, target, description, aliases=()):
    from twisted.python.reflect import namedAny

    return PluginDescriptor(namedAny(interface_name), name, target, description, aliases)


plain = _descriptor(_SASL, "PLAIN", "kafkatw.security.plain.PlainSaslServerFactory",
                    "SASL/PLAIN: JAAS user_<name> passwords or a callback handler")
scram_sha_256 = _descriptor(_SASL, "SCRAM-SHA-256", "kafkatw.security.scram.scram_sha_256",
                            "SASL/SCRAM-SHA-256 against the broker's credential store")
scram_sha_512 = _descriptor(_SASL, "SCRAM-SHA-512", "kafkatw.security.scram.scram_sha_512",
                            "SASL/SCRAM-SHA-512 against the broker's credential store")
default_principal_builder = _descriptor(
    "kafkatw.security.principal.IPrincipalBuilder", "default",
    "kafkatw.security.principal.DefaultPrincipalBuilder",
    "User:<SASL authorization id>, else the TLS subject, else ANONYMOUS",
    aliases=("org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",))
