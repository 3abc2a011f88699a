"""Principals: Kafka's ssl.principal.mapping.rules (in process and on a mutual-TLS broker with
confluent-kafka), a principal.builder.class plug-in, and KafkaPrincipal itself."""

import tempfile
import uuid

from twisted.trial import unittest
from zope.interface import implementer

from kafkatw.config import ConfigError, KafkaConfig
from kafkatw.security.principal import (
    ANONYMOUS,
    AuthenticationContext,
    DefaultPrincipalBuilder,
    IPrincipalBuilder,
    KafkaPrincipal,
    principal_builders,
)
from kafkatw.security.ssl_mapping import NoMatchingRule, SslPrincipalMapper
from kafkatw.testing import KafkaBrokerMixin
from tests.support import poll_until, request_log
from tests.tls_support import MTLS_LISTENERS, MTLS_OVERRIDES

KAFKA_DOC_RULES = ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
                   "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
                   "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
                   "DEFAULT")


@implementer(IPrincipalBuilder)
class TeamPrincipalBuilder:
    """A principal.builder.class plug-in for the tests: ``Team:<user>``."""

    def build(self, context):
        return KafkaPrincipal("Team", context.authorization_id or "nobody")


class MappingRuleTests(unittest.SynchronousTestCase):
    def test_kafka_documentation_examples(self):
        mapper = SslPrincipalMapper(KAFKA_DOC_RULES)
        self.assertEqual(mapper.name("CN=kafka-user,OU=ServiceUsers,O=Unknown"), "kafka-user")
        self.assertEqual(mapper.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US"),
                         "duke@javasoft")
        self.assertEqual(mapper.name("OU=x,CN=Hello.World"), "hello.world")
        self.assertEqual(mapper.name("O=none"), "O=none")

    def test_upper_case_literal_dollar_and_no_match(self):
        mapper = SslPrincipalMapper("RULE:^CN=([^,]*),.*$/$1-$2/U")
        self.assertEqual(mapper.name("CN=client,OU=test"), "CLIENT-$2")
        with self.assertRaises(NoMatchingRule) as cm:
            mapper.name("O=other")
        self.assertEqual(str(cm.exception), "No rules apply to O=other, rules [RULE:^CN=([^,]*),.*$/$1-$2/U]")

    def test_invalid_rules_are_one_config_line(self):
        for rules, text in [("RULE:^CN=(.*)$", "Invalid rule: `RULE:^CN=(.*)$`"),
                            ("RULE:^CN=((.*)$/$1/", "Invalid rule")]:
            config = KafkaConfig.from_properties({"listeners": "SSL://:0", "log.dirs": tempfile.mkdtemp(),
                                                  "ssl.principal.mapping.rules": rules})
            with self.assertRaises(ConfigError) as cm:
                principal_builders(config)
            self.assertIn("for configuration ssl.principal.mapping.rules: " + text, str(cm.exception))

    def test_listener_override_and_builders_per_listener(self):
        config = KafkaConfig.from_properties({
            "listeners": "PLAINTEXT://:0,SSL://:0,INTERNAL://:0", "log.dirs": tempfile.mkdtemp(),
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,INTERNAL:SSL",
            "listener.name.internal.ssl.principal.mapping.rules": "RULE:^CN=([^,]*).*$/$1/"})
        builders = principal_builders(config)
        self.assertEqual(sorted(builders), ["INTERNAL", "SSL"])
        ctx = AuthenticationContext("SSL", "SSL", ssl_peer_dn="CN=a,O=b")
        self.assertEqual(builders["SSL"].build(ctx), KafkaPrincipal("User", "CN=a,O=b"))
        self.assertEqual(builders["INTERNAL"].build(ctx), KafkaPrincipal("User", "a"))
        self.assertEqual(builders["SSL"].build(AuthenticationContext("SSL", "SSL")), ANONYMOUS)

    def test_principal_builder_class_plug_in(self):
        config = KafkaConfig.from_properties({
            "listeners": "SASL_PLAINTEXT://:0", "log.dirs": tempfile.mkdtemp(),
            "principal.builder.class": "tests.test_security_principal.TeamPrincipalBuilder"})
        builder = principal_builders(config)["SASL_PLAINTEXT"]
        self.assertEqual(str(builder.build(AuthenticationContext("SASL_PLAINTEXT", "SASL_PLAINTEXT",
                                                                 authorization_id="alice"))), "Team:alice")
        config = KafkaConfig.from_properties({"listeners": "SSL://:0", "log.dirs": tempfile.mkdtemp(),
                                              "principal.builder.class": "kafkatw.security.ssl_mapping.SslPrincipalMapper"})
        with self.assertRaises(ConfigError) as cm:
            principal_builders(config)
        self.assertIn("does not provide IPrincipalBuilder", str(cm.exception))

    def test_kafka_default_builder_class_name_is_accepted(self):
        config = KafkaConfig.from_properties({
            "listeners": "SSL://:0", "log.dirs": tempfile.mkdtemp(),
            "principal.builder.class": "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"})
        self.assertIsInstance(principal_builders(config)["SSL"], DefaultPrincipalBuilder)

    def test_principal_value(self):
        self.assertEqual(KafkaPrincipal.from_string("User:CN=a,O=b"), KafkaPrincipal("User", "CN=a,O=b"))
        self.assertEqual(str(ANONYMOUS), "User:ANONYMOUS")
        self.assertRaises(ValueError, KafkaPrincipal.from_string, "alice")


class MappedMutualTlsTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    """The MTLS listener maps the client certificate's subject with a listener-prefixed rule."""

    broker_options = {"listeners": MTLS_LISTENERS, "request_log": True}
    broker_overrides = dict(MTLS_OVERRIDES, **{
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=test,.*$/$1-svc/U"})

    def produce(self, conf):
        from confluent_kafka import Producer

        p = Producer(conf)
        delivered = []
        p.produce("mapped", b"v", on_delivery=lambda e, m: delivered.append(e))
        p.flush(10)
        return delivered

    def test_mapped_principal_in_the_request_log(self):
        client_id = "mapped-" + uuid.uuid4().hex[:8]
        conf = {"bootstrap.servers": "127.0.0.1:%d" % self.broker.ports["MTLS"], "security.protocol": "SSL",
                "ssl.ca.location": self.broker.ssl_ca_path, "client.id": client_id,
                "ssl.certificate.location": self.broker.ssl_client_cert_path,
                "ssl.key.location": self.broker.ssl_client_key_path}
        self.assertEqual(self.produce(conf), [None])

        def principals():
            return {e["principal"] for e in request_log(self.broker.request_log_path)
                    if e["requestHeader"]["clientId"] == client_id}

        self.assertEqual(poll_until(principals, message="requests of " + client_id), {"User:CLIENT-SVC"})


class UnmappedCertificateTests(unittest.SynchronousTestCase):
    """A client certificate no rule maps is refused: the connection closes, the log says why."""

    def test_connection_closed(self):
        from confluent_kafka.admin import AdminClient

        from kafkatw.testing import KafkaBroker

        broker = KafkaBroker(listeners=MTLS_LISTENERS, overrides=dict(MTLS_OVERRIDES, **{
            "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=ops,.*$/$1/"})).start()
        self.addCleanup(broker.close)
        errors = []
        admin = AdminClient({"bootstrap.servers": "127.0.0.1:%d" % broker.ports["MTLS"], "security.protocol": "SSL",
                             "ssl.ca.location": broker.ssl_ca_path, "error_cb": errors.append,
                             "ssl.certificate.location": broker.ssl_client_cert_path,
                             "ssl.key.location": broker.ssl_client_key_path, "log_level": 0})
        with self.assertRaises(Exception):
            admin.list_topics(timeout=3)

        def refused():
            with open(broker.log_path) as f:
                return "no principal for the client certificate: No rules apply to CN=client,OU=test,O=kafkatw" \
                    in f.read()

        poll_until(refused, message="the refusal in the broker log")
