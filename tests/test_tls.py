"""SSL listeners: ``ssl.*`` config to a TLS context (``kafkatw.network.tls``), one-line errors for
bad key/trust stores, and a real broker serving confluent-kafka and kafka-python over SSL, mutual
TLS with a client certificate (principal in the request log), a client without one refused."""

import json
import os
import socket
import ssl
import struct
import tempfile
import time
import uuid

from twisted.trial import unittest

from kafkatw.config import ConfigError, KafkaConfig
from kafkatw.network import tls
from kafkatw.network.request import ANONYMOUS_PRINCIPAL
from kafkatw.testing import BrokerStartError, KafkaBroker, KafkaBrokerMixin
from kafkatw.tls_certs import CLIENT_PRINCIPAL, make_test_pki

from tests.support import poll_until, recv_exact
from tests.tls_support import MTLS_LISTENERS, MTLS_OVERRIDES

_PKI = {}


def pki():
    if "pki" not in _PKI:
        _PKI["dir"] = tempfile.mkdtemp(prefix="kafkatw-tls-test-")
        _PKI["pki"] = make_test_pki(_PKI["dir"])
    return _PKI["pki"]


def config(**props):
    base = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": pki().server_keystore,
            "ssl.key.password": pki().key_password}
    base.update({k.replace("_", "."): v for k, v in props.items()})
    return KafkaConfig.from_properties({k: v for k, v in base.items() if v is not None})


def read(path):
    with open(path) as f:
        return f.read()


class ContextConfigTests(unittest.SynchronousTestCase):
    """From broker properties to a pyOpenSSL context, and the errors on the way."""

    def assertConfigError(self, props, *fragments):
        with self.assertRaises(ConfigError) as cm:
            tls.context_factories(KafkaConfig.from_properties(props) if isinstance(props, dict) else props)
        text = str(cm.exception)
        self.assertNotIn("\n", text)
        for fragment in fragments:
            self.assertIn(fragment, text)
        return text

    def test_pem_keystore_file_with_key_password(self):
        factories = tls.context_factories(config())
        self.assertEqual(list(factories), ["SSL"])
        self.assertEqual(factories["SSL"].client_auth, "none")
        ctx = factories["SSL"].getContext()
        self.assertIs(ctx, factories["SSL"].getContext())

    def test_inline_pem_chain_and_key(self):
        cfg = config(**{"ssl.keystore.location": None, "ssl.key.password": None,
                        "ssl.keystore.certificate.chain": read(pki().server_cert),
                        "ssl.keystore.key": read(pki().server_key),
                        "ssl.truststore.type": "PEM",
                        "ssl.truststore.certificates": read(pki().ca_cert),
                        "ssl.client.auth": "requested"})
        self.assertEqual(tls.context_factories(cfg)["SSL"].client_auth, "requested")

    def test_listener_prefix_overrides_the_broker_value(self):
        props = {"listeners": "PLAINTEXT://:0,SSL://:0,MTLS://:0",
                 "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
                 "ssl.keystore.type": "PEM", "ssl.keystore.location": pki().server_keystore,
                 "ssl.key.password": pki().key_password, "ssl.truststore.type": "PEM",
                 "ssl.truststore.location": pki().ca_cert,
                 "listener.name.mtls.ssl.client.auth": "required",
                 "listener.name.mtls.ssl.enabled.protocols": "TLSv1.3"}
        cfg = KafkaConfig.from_properties(props)
        mtls = tls.listener_ssl_config(cfg, "MTLS")
        self.assertEqual(mtls["ssl.client.auth"], "required")
        self.assertEqual(mtls["ssl.enabled.protocols"], ["TLSv1.3"])
        plain_ssl = tls.listener_ssl_config(cfg, "SSL")
        self.assertEqual(plain_ssl["ssl.client.auth"], "none")
        self.assertEqual(plain_ssl["ssl.enabled.protocols"], ["TLSv1.2", "TLSv1.3"])
        factories = tls.context_factories(cfg)
        self.assertEqual(sorted(factories), ["MTLS", "SSL"])
        self.assertEqual(factories["MTLS"].client_auth, "required")

    def test_missing_keystore_file(self):
        missing = os.path.join(pki().ca_cert + ".nope")
        self.assertConfigError(config(**{"ssl.keystore.location": missing}),
                               "ssl.keystore.location", missing, "cannot read the file")

    def test_wrong_key_password(self):
        self.assertConfigError(config(**{"ssl.key.password": "wrong"}),
                               "ssl.keystore.location", "ssl.key.password")

    def test_encrypted_key_without_password(self):
        self.assertConfigError(config(**{"ssl.key.password": None}), "ssl.key.password")

    def test_file_without_a_key(self):
        self.assertConfigError(config(**{"ssl.keystore.location": pki().ca_cert}),
                               "ssl.keystore.location", "no PEM private key")

    def test_key_not_matching_the_certificate(self):
        cfg = config(**{"ssl.keystore.location": None, "ssl.key.password": None,
                        "ssl.keystore.certificate.chain": read(pki().server_cert),
                        "ssl.keystore.key": read(pki().client_key)})
        text = self.assertConfigError(cfg, "usable key and certificate")
        self.assertNotIn("PRIVATE KEY", text)  # secrets never printed

    def test_jks_is_refused(self):
        self.assertConfigError(config(**{"ssl.keystore.type": "JKS"}),
                               "ssl.keystore.type", "PEM and PKCS12")

    def test_no_keystore(self):
        self.assertConfigError(config(**{"ssl.keystore.location": None}),
                               "ssl.keystore.location", "ssl.keystore.certificate.chain")

    def test_client_auth_without_truststore(self):
        self.assertConfigError(config(**{"ssl.client.auth": "required"}),
                               "ssl.client.auth", "ssl.truststore.location")

    def test_missing_truststore_file(self):
        self.assertConfigError(config(**{"ssl.truststore.type": "PEM",
                                         "ssl.truststore.location": "/nonexistent/ca.pem",
                                         "ssl.client.auth": "required"}),
                               "ssl.truststore.location", "/nonexistent/ca.pem")

    def test_unknown_protocol(self):
        self.assertConfigError(config(**{"ssl.enabled.protocols": "TLSv1.2,TLSv9"}),
                               "ssl.enabled.protocols", "TLSv9")

    def test_unknown_cipher_suite(self):
        self.assertConfigError(config(**{"ssl.cipher.suites": "TLS_NOPE_WITH_NOTHING"}),
                               "ssl.cipher.suites", "TLS_NOPE_WITH_NOTHING")

    def test_kafka_cipher_names(self):
        self.assertEqual(tls.openssl_cipher_name("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
                         "ECDHE-RSA-AES128-GCM-SHA256")
        self.assertEqual(tls.openssl_cipher_name("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"),
                         "ECDHE-ECDSA-CHACHA20-POLY1305")
        self.assertEqual(tls.openssl_cipher_name("TLS_RSA_WITH_AES_256_CBC_SHA"), "AES256-SHA")
        self.assertEqual(tls.openssl_cipher_name("ECDHE-RSA-AES256-GCM-SHA384"),
                         "ECDHE-RSA-AES256-GCM-SHA384")
        cfg = config(**{"ssl.cipher.suites":
                        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384"})
        self.assertIn("SSL", tls.context_factories(cfg))

    def test_principal_is_the_rfc2253_subject(self):
        from cryptography import x509

        with open(pki().client_cert, "rb") as f:
            cert = x509.load_pem_x509_certificates(f.read())[0]
        self.assertEqual(str(tls.principal_from_certificate(cert)), "User:CN=client,OU=test,O=kafkatw")
        self.assertEqual(tls.principal_from_certificate(None), ANONYMOUS_PRINCIPAL)

    def test_broker_refuses_to_start_with_a_missing_keystore(self):
        broker = KafkaBroker(listeners=("PLAINTEXT", "SSL"),
                             overrides={"ssl.keystore.location": "/nonexistent/server.pem"})
        self.addCleanup(broker.close)
        with self.assertRaises(BrokerStartError) as cm:
            broker.start()
        self.assertIn("ssl.keystore.location", cm.exception.reason)
        self.assertIn("/nonexistent/server.pem", cm.exception.reason)


def api_versions_request(correlation_id=7):
    client_id = b"tls-test"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


class SslBrokerTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    """A broker with PLAINTEXT, SSL (no client auth) and MTLS (client certificate required)."""

    broker_options = {"listeners": MTLS_LISTENERS, "request_log": True}
    broker_overrides = MTLS_OVERRIDES

    def address(self, name):
        return "127.0.0.1:%d" % self.broker.ports[name]

    def confluent_conf(self, listener="SSL", client_cert=False):
        conf = {"bootstrap.servers": self.address(listener), "security.protocol": "SSL",
                "ssl.ca.location": self.broker.ssl_ca_path, "client.id": "tls-" + uuid.uuid4().hex[:8]}
        if client_cert:
            conf["ssl.certificate.location"] = self.broker.pki.client_cert
            conf["ssl.key.location"] = self.broker.pki.client_key
        return conf

    def confluent_roundtrip(self, conf, n=50):
        import confluent_kafka

        topic = "tls-" + uuid.uuid4().hex[:8]
        values = [b"value-%d-" % i + b"x" * i for i in range(n)]
        producer = confluent_kafka.Producer(dict(conf, **{"linger.ms": 5}))
        delivered = []
        for v in values:
            producer.produce(topic, v, partition=0,
                             on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
        self.assertEqual(producer.flush(30), 0)
        self.assertEqual(delivered, [(None, i) for i in range(n)])
        consumer = confluent_kafka.Consumer(dict(conf, **{"group.id": "g-" + topic,
                                                          "enable.auto.commit": False}))
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            self.assertIsNone(msg.error())
            got.append((msg.offset(), msg.value()))
        consumer.close()
        self.assertEqual(got, list(enumerate(values)))

    def request_log_with(self, client_id, api_names):
        """The client's request-log entries once they name every API of ``api_names`` (a line
        is written when its request completes, which may be after the client saw the answer)."""
        def complete():
            entries = self.request_log(client_id)
            return entries if set(api_names) <= {e["requestHeader"]["requestApiKeyName"] for e in entries} else None
        return poll_until(complete, 30, message="request log entries of %s for %s" % (client_id, sorted(api_names)))

    def request_log(self, client_id):
        entries = []
        for line in read(self.broker.request_log_path).splitlines():
            if line.startswith("Completed request:"):
                entry = json.loads(line[len("Completed request:"):])
                if entry["requestHeader"]["clientId"] == client_id:
                    entries.append(entry)
        return entries

    def test_confluent_produce_and_consume_over_ssl(self):
        conf = self.confluent_conf("SSL")
        self.confluent_roundtrip(conf)
        entries = self.request_log_with(conf["client.id"], {"PRODUCE"})
        self.assertEqual({(e["listener"], e["securityProtocol"], e["principal"]) for e in entries},
                         {("SSL", "SSL", str(ANONYMOUS_PRINCIPAL))})

    def test_kafka_python_produce_and_consume_over_ssl(self):
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition

        topic = "tls-kp-" + uuid.uuid4().hex[:8]
        common = {"bootstrap_servers": self.address("SSL"), "security_protocol": "SSL",
                  "ssl_cafile": self.broker.ssl_ca_path}
        producer = KafkaProducer(**common)
        values = [b"kp-%d" % i * (i + 1) for i in range(40)]
        offsets = [producer.send(topic, v, partition=0).get(30).offset for v in values]
        producer.close()
        self.assertEqual(offsets, list(range(40)))
        consumer = KafkaConsumer(enable_auto_commit=False, **common)
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend((r.offset, r.value) for r in records)
        consumer.close()
        self.assertEqual(got, list(enumerate(values)))

    def test_mutual_tls_principal_from_the_client_certificate(self):
        conf = self.confluent_conf("MTLS", client_cert=True)
        self.confluent_roundtrip(conf, n=10)
        entries = self.request_log_with(conf["client.id"], {"PRODUCE", "FETCH", "METADATA"})
        self.assertEqual({(e["listener"], e["securityProtocol"], e["principal"]) for e in entries},
                         {("MTLS", "SSL", CLIENT_PRINCIPAL)})
        self.assertEqual(CLIENT_PRINCIPAL, "User:CN=client,OU=test,O=kafkatw")

    def test_kafka_python_with_client_certificate(self):
        from kafka import KafkaProducer

        client_id = "kp-mtls-" + uuid.uuid4().hex[:8]
        producer = KafkaProducer(bootstrap_servers=self.address("MTLS"), security_protocol="SSL",
                                 ssl_cafile=self.broker.ssl_ca_path, client_id=client_id,
                                 ssl_certfile=self.broker.pki.client_cert,
                                 ssl_keyfile=self.broker.pki.client_key)
        self.assertEqual(producer.send("tls-kp-mtls", b"v", partition=0).get(30).offset >= 0, True)
        producer.close()
        principals = {e["principal"] for e in self.request_log_with(client_id, {"PRODUCE"})}
        self.assertEqual(principals, {CLIENT_PRINCIPAL})

    def mtls_socket(self, with_cert):
        ctx = ssl.create_default_context(cafile=self.broker.ssl_ca_path)
        if with_cert:
            ctx.load_cert_chain(self.broker.pki.client_cert, self.broker.pki.client_key)
        raw = socket.create_connection(("127.0.0.1", self.broker.ports["MTLS"]), timeout=10)
        return ctx.wrap_socket(raw, server_hostname="localhost")

    def test_mtls_refuses_a_client_without_certificate(self):
        # TLS 1.3: the client finishes its handshake first; the server's refusal (an alert,
        # then close) arrives on the first read. No request is ever answered.
        with self.assertRaises((ssl.SSLError, ConnectionError, OSError)):
            with self.mtls_socket(with_cert=False) as s:
                s.sendall(api_versions_request())
                recv_exact(s, 4)
        # The same listener answers a client that presents its certificate.
        with self.mtls_socket(with_cert=True) as s:
            s.sendall(api_versions_request(9))
            (size,) = struct.unpack(">i", recv_exact(s, 4))
            correlation_id, error_code = struct.unpack_from(">ih", recv_exact(s, size))
        self.assertEqual((correlation_id, error_code), (9, 0))

    def test_client_with_an_untrusted_certificate_is_refused(self):
        other = make_test_pki(os.path.join(_PKI.get("dir") or tempfile.mkdtemp(), "other"))
        ctx = ssl.create_default_context(cafile=self.broker.ssl_ca_path)
        ctx.load_cert_chain(other.client_cert, other.client_key)  # signed by another CA
        with self.assertRaises((ssl.SSLError, ConnectionError, OSError)):
            raw = socket.create_connection(("127.0.0.1", self.broker.ports["MTLS"]), timeout=10)
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                s.sendall(api_versions_request())
                recv_exact(s, 4)
