"""Built-in SASL mechanisms, OAUTHBEARER validators and principal builders, as drop-in plug-ins.

Only names live here (and the light interface modules): an implementation is imported when
config names it.
"""

from kafkatw.registry import PluginDescriptor
from kafkatw.security.oauthbearer import IOAuthBearerValidator
from kafkatw.security.principal import IPrincipalBuilder
from kafkatw.security.sasl import ISaslServerFactory

plain = PluginDescriptor(ISaslServerFactory, "PLAIN", "kafkatw.security.plain.PlainSaslServerFactory",
                         "SASL/PLAIN: JAAS user_<name> passwords or a callback handler")
scram_sha_256 = PluginDescriptor(ISaslServerFactory, "SCRAM-SHA-256", "kafkatw.security.scram.scram_sha_256",
                                 "SASL/SCRAM-SHA-256 against the broker's credential store")
scram_sha_512 = PluginDescriptor(ISaslServerFactory, "SCRAM-SHA-512", "kafkatw.security.scram.scram_sha_512",
                                 "SASL/SCRAM-SHA-512 against the broker's credential store")
oauthbearer = PluginDescriptor(ISaslServerFactory, "OAUTHBEARER",
                               "kafkatw.security.oauthbearer.OAuthBearerSaslServerFactory",
                               "SASL/OAUTHBEARER: bearer tokens checked by an IOAuthBearerValidator")
unsecured_validator = PluginDescriptor(
    IOAuthBearerValidator, "unsecured", "kafkatw.security.oauthbearer.UnsecuredValidator",
    "unsigned (alg none) tokens, Kafka's default; for development only",
    aliases=("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
             "OAuthBearerUnsecuredValidatorCallbackHandler",
             "org.apache.kafka.common.security.oauthbearer.OAuthBearerUnsecuredValidatorCallbackHandler"))
jwt_validator = PluginDescriptor(
    IOAuthBearerValidator, "jwt", "kafkatw.security.oauthbearer.JwtValidator",
    "signed JWTs (RS256/ES256...) against the JWKS file of sasl.oauthbearer.jwks.endpoint.url",
    aliases=("org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
             "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler"))
default_principal_builder = PluginDescriptor(
    IPrincipalBuilder, "default", "kafkatw.security.principal.DefaultPrincipalBuilder",
    "User:<SASL authorization id>, else the mapped TLS subject, else ANONYMOUS",
    aliases=("org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",))
