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
oauthbearer = _descriptor(_SASL, "OAUTHBEARER", "kafkatw.security.oauthbearer.OAuthBearerSaslServerFactory",
                          "SASL/OAUTHBEARER: bearer tokens checked by an IOAuthBearerValidator")
_VALIDATOR = "kafkatw.security.oauthbearer.IOAuthBearerValidator"
unsecured_validator = _descriptor(
    _VALIDATOR, "unsecured", "kafkatw.security.oauthbearer.UnsecuredValidator",
    "unsigned (alg none) tokens, Kafka's default; for development only",
    aliases=("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
             "OAuthBearerUnsecuredValidatorCallbackHandler",
             "org.apache.kafka.common.security.oauthbearer.OAuthBearerUnsecuredValidatorCallbackHandler"))
jwt_validator = _descriptor(
    _VALIDATOR, "jwt", "kafkatw.security.oauthbearer.JwtValidator",
    "signed JWTs (RS256/ES256...) against the JWKS file of sasl.oauthbearer.jwks.endpoint.url",
    aliases=("org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
             "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler"))
default_principal_builder = _descriptor(
    "kafkatw.security.principal.IPrincipalBuilder", "default",
    "kafkatw.security.principal.DefaultPrincipalBuilder",
    "User:<SASL authorization id>, else the TLS subject, else ANONYMOUS",
    aliases=("org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",))
