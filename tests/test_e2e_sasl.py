"""SASL against a real broker process with real clients: start-up checks (fail closed),
PLAIN and SCRAM-SHA-256/512 over SASL_PLAINTEXT and SASL_SSL with confluent-kafka, kafka-python,
aiokafka, kcat and kafkajs, wrong passwords, unauthenticated requests, the v0 framing, the
principal in the request log, SCRAM users managed with Alter/DescribeUserScramCredentials (admin
client and ``kafkatw users scram``) across a restart, re-authentication, OAUTHBEARER (unsecured
and signed tokens), a SASL-only broker and ``python -m kafkatw.testing --sasl-user``."""

import asyncio
import json
import logging
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

from twisted.trial import unittest
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.protocol import errors
from kafkatw.protocol import messages as m
from kafkatw.testing import BrokerStartError, KafkaBroker, KafkaBrokerMixin
from tests.support import RawClient, closed_by_peer, poll_until, request_log, unique_name

USERS = {"alice": "alice-secret", "bob": "b\"ob=,secret"}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
N = 100
QUIET = logging.getLogger("kafkatw.tests.librdkafka")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


def records(tag, n=N):
    return [(("k%d" % i).encode(), ("%s-%d" % (tag, i)).encode()) for i in range(n)]


class FailClosedTests(SynchronousTestCase):
    """A SASL listener is never served without authentication."""

    def assertRefused(self, broker, expected):
        self.addCleanup(broker.close)
        with self.assertRaises(BrokerStartError) as cm:
            broker.start()
        self.assertIn(expected, cm.exception.reason)
        self.assertNotIn("\n", cm.exception.reason)

    def test_kafka_default_gssapi_is_refused(self):
        self.assertRefused(KafkaBroker(listeners=("PLAINTEXT", "SASL_PLAINTEXT"), sasl_mechanisms=("GSSAPI",)),
                           "Invalid value GSSAPI for configuration sasl.enabled.mechanisms: no "
                           "ISaslServerFactory plug-in is registered")

    def test_plain_without_users_is_refused(self):
        self.assertRefused(KafkaBroker(listeners=("SASL_SSL",), sasl_mechanisms=("PLAIN",)),
                           "SASL mechanism PLAIN on listener SASL_SSL needs "
                           "listener.name.sasl_ssl.plain.sasl.jaas.config")

    def test_no_mechanism_is_refused(self):
        self.assertRefused(KafkaBroker(listeners=("SASL_PLAINTEXT",), sasl_mechanisms=()),
                           "Listener SASL_PLAINTEXT uses SASL_PLAINTEXT but enables no SASL mechanism")


class SaslBrokerMixin(KafkaBrokerMixin):
    broker_options = {"listeners": ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL"), "sasl_users": USERS,
                      "request_log": True}

    def address(self, protocol):
        return {"SASL_PLAINTEXT": self.broker.sasl_bootstrap_servers,
                "SASL_SSL": self.broker.sasl_ssl_bootstrap_servers}[protocol]

    def topic(self, tag):
        from tests.support import create_topic

        name = unique_name(tag)
        create_topic(self.broker, name)
        return name


class ConfluentKafkaSaslTests(SaslBrokerMixin, unittest.SynchronousTestCase):
    """librdkafka through confluent-kafka."""

    def conf(self, protocol, mechanism, user="alice", password=None, **extra):
        conf = {"bootstrap.servers": self.address(protocol), "security.protocol": protocol,
                "sasl.mechanism": mechanism, "sasl.username": user,
                "sasl.password": USERS.get(user, "") if password is None else password, "logger": QUIET}
        if protocol == "SASL_SSL":
            conf["ssl.ca.location"] = self.broker.ssl_ca_path
        conf.update(extra)
        return conf

    def roundtrip(self, protocol, mechanism, user="alice"):
        from confluent_kafka import Consumer, Producer, TopicPartition

        topic = self.topic("cf-%s-%s" % (protocol, mechanism))
        p = Producer(self.conf(protocol, mechanism, user, **{"client.id": "cf-" + topic}))
        delivered = []
        for key, value in records(topic):
            p.produce(topic, value=value, key=key, on_delivery=lambda e, msg: delivered.append(e))
        self.assertEqual(p.flush(30), 0)
        self.assertEqual(delivered, [None] * N)
        c = Consumer(self.conf(protocol, mechanism, user, **{"group.id": "g-" + topic,
                                                            "enable.auto.commit": False}))
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < N and time.monotonic() < deadline:
            for msg in c.consume(N, 1.0):
                self.assertIsNone(msg.error())
                got.append((msg.key(), msg.value()))
        c.close()
        self.assertEqual(got, records(topic))
        return topic

    def test_produce_consume_plain(self):
        self.roundtrip("SASL_PLAINTEXT", "PLAIN")

    def test_produce_consume_scram_sha_256(self):
        self.roundtrip("SASL_PLAINTEXT", "SCRAM-SHA-256", user="bob")

    def test_produce_consume_scram_sha_512(self):
        self.roundtrip("SASL_PLAINTEXT", "SCRAM-SHA-512")

    def test_produce_consume_over_sasl_ssl(self):
        self.roundtrip("SASL_SSL", "SCRAM-SHA-512")
        self.roundtrip("SASL_SSL", "PLAIN", user="bob")

    def test_principal_in_the_request_log(self):
        topic = self.roundtrip("SASL_PLAINTEXT", "SCRAM-SHA-256")

        def entries():
            return [e for e in request_log(self.broker.request_log_path)
                    if e["requestHeader"]["clientId"] == "cf-" + topic]

        found = poll_until(lambda: [e for e in entries() if e["requestHeader"]["requestApiKey"] == 0],
                           message="the produce requests in the request log")
        self.assertEqual({(e["principal"], e["listener"], e["securityProtocol"]) for e in found},
                         {("User:alice", "SASL_PLAINTEXT", "SASL_PLAINTEXT")})
        auth = [e["principal"] for e in entries() if e["requestHeader"]["requestApiKey"] in (17, 36)]
        # per connection a handshake and two SCRAM rounds, all before a principal is known
        self.assertEqual((set(auth), len(auth) % 3, len(auth) > 0), ({"User:ANONYMOUS"}, 0, True))

    def test_wrong_password_is_an_authentication_error_not_a_timeout(self):
        from confluent_kafka import KafkaError, Producer

        for protocol, mechanism in [("SASL_PLAINTEXT", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
                                    ("SASL_SSL", "SCRAM-SHA-512")]:
            seen = []
            p = Producer(self.conf(protocol, mechanism, password="Wr0ng-Pa55", error_cb=seen.append))
            started = time.monotonic()
            poll_until(lambda: p.poll(0.1) is not None and seen or seen, timeout=10,
                       message="an error from %s" % mechanism)
            self.assertLess(time.monotonic() - started, 5)
            self.assertEqual(seen[0].code(), KafkaError._AUTHENTICATION, seen[0])
            expected = ("Authentication failed: Invalid username or password" if mechanism == "PLAIN" else
                        "Authentication failed during authentication due to invalid credentials with "
                        "SASL mechanism " + mechanism)
            self.assertIn(expected, seen[0].str())
            del p
        # each failure logged with the peer, no password (right or wrong) anywhere in the log
        with open(self.broker.log_path) as f:
            log = f.read()
        self.assertIn("Failed authentication with 127.0.0.1:", log)
        for secret in ("Wr0ng-Pa55", "alice-secret", "ob=,secret"):
            self.assertNotIn(secret, log)

    def test_unauthenticated_metadata_is_closed_while_others_keep_working(self):
        host, port = self.broker.sasl_bootstrap_servers.split(":")
        raw = RawClient(self.broker, port=int(port))
        self.addCleanup(raw.close)
        api = raw.request(18, 3, m.ApiVersionsRequest(client_software_name="raw", client_software_version="1"))
        self.assertIn(17, {k.api_key for k in api.api_keys})
        self.assertIn(36, {k.api_key for k in api.api_keys})
        raw.send(3, 12, m.MetadataRequest(topics=None))
        self.assertTrue(closed_by_peer(raw.sock))
        # the plaintext listener and authenticated SASL clients are unaffected
        plain = RawClient(self.broker)
        self.addCleanup(plain.close)
        self.assertEqual(plain.request(3, 12, m.MetadataRequest(topics=None)).brokers[0].node_id, 1)
        self.roundtrip("SASL_PLAINTEXT", "PLAIN")

    def test_unknown_mechanism_answers_the_enabled_list_then_closes(self):
        host, port = self.broker.sasl_bootstrap_servers.split(":")
        raw = RawClient(self.broker, port=int(port))
        self.addCleanup(raw.close)
        resp = raw.request(17, 1, m.SaslHandshakeRequest(mechanism="GSSAPI"))
        self.assertEqual((resp.error_code, resp.mechanisms), (errors.UNSUPPORTED_SASL_MECHANISM, list(MECHANISMS)))
        self.assertTrue(closed_by_peer(raw.sock))

    def test_v0_handshake_then_raw_tokens(self):
        # the pre-KIP-152 framing: after SaslHandshake v0 the tokens travel bare, size-prefixed
        from tests.support import recv_exact

        host, port = self.broker.sasl_bootstrap_servers.split(":")
        raw = RawClient(self.broker, port=int(port))
        self.addCleanup(raw.close)
        resp = raw.request(17, 0, m.SaslHandshakeRequest(mechanism="PLAIN"))
        self.assertEqual((resp.error_code, resp.mechanisms), (errors.NONE, list(MECHANISMS)))
        token = b"\0alice\0alice-secret"
        raw.send_raw(struct.pack(">i", len(token)) + token)
        self.assertEqual(recv_exact(raw.sock, 4), struct.pack(">i", 0))  # PLAIN's empty challenge
        self.assertEqual(raw.request(3, 12, m.MetadataRequest(topics=None)).brokers[0].node_id, 1)

    def test_hostile_input_before_authentication(self):
        host, port = self.broker.sasl_bootstrap_servers.split(":")

        def connect():
            raw = RawClient(self.broker, port=int(port))
            self.addCleanup(raw.close)
            return raw

        # a truncated SCRAM client-first: Kafka's generic failure, then the connection ends
        raw = connect()
        self.assertEqual(raw.request(17, 1, m.SaslHandshakeRequest(mechanism="SCRAM-SHA-256")).error_code, 0)
        resp = raw.request(36, 2, m.SaslAuthenticateRequest(auth_bytes=b"n,,n=alice"))
        self.assertEqual((resp.error_code, resp.error_message), (
            errors.SASL_AUTHENTICATION_FAILED,
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"))
        self.assertTrue(closed_by_peer(raw.sock))
        # a frame above sasl.server.max.receive.size (512 KiB) is refused as soon as its size is read
        raw = connect()
        raw.send_raw(struct.pack(">i", 600 * 1024) + b"\0" * 1024)
        self.assertTrue(closed_by_peer(raw.sock))
        # an unknown API key before authenticating
        raw = connect()
        raw.send_raw(struct.pack(">ihhi", 10, 999, 0, 1) + b"\0\0")
        self.assertTrue(closed_by_peer(raw.sock))
        # none of it touched an authenticated client
        self.roundtrip("SASL_PLAINTEXT", "SCRAM-SHA-256")

    def test_sasl_requests_on_a_plaintext_listener_are_illegal_state(self):
        raw = RawClient(self.broker)
        self.addCleanup(raw.close)
        self.assertEqual(raw.request(17, 1, m.SaslHandshakeRequest(mechanism="PLAIN")).error_code,
                         errors.ILLEGAL_SASL_STATE)
        self.assertEqual(raw.request(36, 2, m.SaslAuthenticateRequest(auth_bytes=b"x")).error_code,
                         errors.ILLEGAL_SASL_STATE)


class KafkaPythonSaslTests(SaslBrokerMixin, unittest.SynchronousTestCase):
    def client_conf(self, mechanism, password="alice-secret", protocol="SASL_PLAINTEXT"):
        conf = {"bootstrap_servers": self.address(protocol), "security_protocol": protocol,
                "sasl_mechanism": mechanism, "sasl_plain_username": "alice", "sasl_plain_password": password}
        if protocol == "SASL_SSL":
            conf["ssl_cafile"] = self.broker.ssl_ca_path
        return conf

    def test_produce_consume_each_mechanism(self):
        for mechanism in MECHANISMS:
            self.roundtrip(mechanism)

    def test_produce_consume_over_sasl_ssl(self):
        self.roundtrip("SCRAM-SHA-512", protocol="SASL_SSL")

    def roundtrip(self, mechanism, protocol="SASL_PLAINTEXT"):
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition

        topic = self.topic("kp-%s-%s" % (protocol, mechanism))
        conf = self.client_conf(mechanism, protocol=protocol)
        p = KafkaProducer(**conf)
        futures = [p.send(topic, key=k, value=v) for k, v in records(topic)]
        self.assertEqual([f.get(timeout=30).offset for f in futures], list(range(N)))
        p.close()
        c = KafkaConsumer(**conf, enable_auto_commit=False, consumer_timeout_ms=10000)
        c.assign([TopicPartition(topic, 0)])
        c.seek(TopicPartition(topic, 0), 0)
        got = []
        for msg in c:
            got.append((msg.key, msg.value))
            if len(got) == N:
                break
        c.close()
        self.assertEqual(got, records(topic))

    def test_wrong_password(self):
        # kafka-python 3 retries its bootstrap until bootstrap_timeout_ms; the cause it logs at
        # once is the broker's SASL_AUTHENTICATION_FAILED answer
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        seen = []

        class Capture(logging.Handler):
            def emit(self, record):
                seen.append((time.monotonic(), record.getMessage()))

        handler = Capture()
        logging.getLogger("kafka").addHandler(handler)
        self.addCleanup(logging.getLogger("kafka").removeHandler, handler)
        for mechanism in MECHANISMS:
            del seen[:]
            started = time.monotonic()
            with self.assertRaises(KafkaError):
                KafkaProducer(**self.client_conf(mechanism, "wrong"), bootstrap_timeout_ms=2000)
            failures = [t - started for t, text in seen
                        if "SaslAuthenticationFailedError: Authentication failed" in text]
            self.assertTrue(failures, seen)
            self.assertLess(failures[0], 1.5)


class AioKafkaSaslTests(SaslBrokerMixin, unittest.SynchronousTestCase):
    def conf(self, mechanism, password="alice-secret", protocol="SASL_PLAINTEXT"):
        conf = dict(bootstrap_servers=self.address(protocol), security_protocol=protocol,
                    sasl_mechanism=mechanism, sasl_plain_username="alice", sasl_plain_password=password)
        if protocol == "SASL_SSL":
            from aiokafka.helpers import create_ssl_context

            conf["ssl_context"] = create_ssl_context(cafile=self.broker.ssl_ca_path)
        return conf

    def test_produce_consume_each_mechanism(self):
        for mechanism in MECHANISMS:
            self.roundtrip(mechanism)

    def test_produce_consume_over_sasl_ssl(self):
        self.roundtrip("SCRAM-SHA-256", protocol="SASL_SSL")

    def roundtrip(self, mechanism, protocol="SASL_PLAINTEXT"):
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

        async def scenario(mechanism, topic):
            producer = AIOKafkaProducer(**self.conf(mechanism, protocol=protocol))
            await producer.start()
            try:
                metas = await asyncio.gather(*[await producer.send(topic, key=k, value=v)
                                               for k, v in records(topic)])
            finally:
                await producer.stop()
            self.assertEqual([md.offset for md in metas], list(range(N)))
            consumer = AIOKafkaConsumer(**self.conf(mechanism, protocol=protocol), enable_auto_commit=False)
            await consumer.start()
            try:
                tp = TopicPartition(topic, 0)
                consumer.assign([tp])
                consumer.seek(tp, 0)
                got = []
                while len(got) < N:
                    batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
                    for msgs in batch.values():
                        got += [(msg.key, msg.value) for msg in msgs]
            finally:
                await consumer.stop()
            return got

        topic = self.topic("aio-%s-%s" % (protocol, mechanism))
        self.assertEqual(asyncio.run(scenario(mechanism, topic)), records(topic))

    def test_wrong_password(self):
        # aiokafka's bootstrap hides the cause behind "Unable to bootstrap"; its connection shows it
        from aiokafka.conn import create_conn
        from aiokafka.errors import SaslAuthenticationFailed

        host, port = self.broker.sasl_bootstrap_servers.split(":")
        for mechanism in MECHANISMS:
            started = time.monotonic()
            with self.assertRaises(SaslAuthenticationFailed) as cm:
                asyncio.run(create_conn(host, int(port), security_protocol="SASL_PLAINTEXT",
                                        sasl_mechanism=mechanism, sasl_plain_username="alice",
                                        sasl_plain_password="wrong"))
            self.assertLess(time.monotonic() - started, 10)
            self.assertIn("Authentication failed", str(cm.exception))


class KcatSaslTests(SaslBrokerMixin, unittest.SynchronousTestCase):
    """Debian's kcat (librdkafka 2.0.2)."""

    def setUp(self):
        if shutil.which("kcat") is None:
            raise unittest.SkipTest("kcat is not installed (apt-get install kcat)")
        super().setUp()

    def kcat(self, mechanism, *args, password="alice-secret", input=None, timeout=60, protocol="SASL_PLAINTEXT"):
        tls = ["-X", "ssl.ca.location=" + self.broker.ssl_ca_path] if protocol == "SASL_SSL" else []
        return subprocess.run(["kcat", "-b", self.address(protocol), "-X", "security.protocol=" + protocol,
                               "-X", "sasl.mechanisms=" + mechanism, "-X", "sasl.username=alice",
                               "-X", "sasl.password=" + password] + tls + list(args),
                              input=input, capture_output=True, timeout=timeout)

    def roundtrip(self, mechanism, protocol="SASL_PLAINTEXT"):
        topic = self.topic("kcat-%s-%s" % (protocol, mechanism))
        lines = b"".join(b"%s:%s\n" % kv for kv in records(topic))
        proc = self.kcat(mechanism, "-P", "-t", topic, "-K", ":", input=lines, protocol=protocol)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        proc = self.kcat(mechanism, "-C", "-t", topic, "-o", "beginning", "-e", "-c", str(N), "-f", "%k:%s\n",
                         protocol=protocol)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stdout, lines)

    def test_produce_consume_each_mechanism(self):
        for mechanism in MECHANISMS:
            self.roundtrip(mechanism)

    def test_produce_consume_over_sasl_ssl(self):
        self.roundtrip("SCRAM-SHA-256", protocol="SASL_SSL")

    def test_wrong_password(self):
        for mechanism in MECHANISMS:
            proc = self.kcat(mechanism, "-L", "-m", "5", password="wrong", timeout=30)
            self.assertNotEqual(proc.returncode, 0)
            self.assertIn(b"Authentication failed", proc.stderr)


class ScramAdminTests(unittest.SynchronousTestCase):
    """A SCRAM user made with AlterUserScramCredentials logs in, survives a restart, is deleted."""

    def setUp(self):
        self.broker = KafkaBroker(listeners=("PLAINTEXT", "SASL_PLAINTEXT"), sasl_users={"alice": "alice-secret"},
                                  sasl_mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512")).start()
        self.addCleanup(self.broker.close)

    def admin(self):
        from confluent_kafka.admin import AdminClient

        # an authenticated admin over SASL: alice manages the other users (kept alive: a
        # destroyed AdminClient fails its pending futures)
        self._admin = AdminClient({"bootstrap.servers": self.broker.sasl_bootstrap_servers,
                                   "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                                   "sasl.username": "alice", "sasl.password": "alice-secret", "logger": QUIET})
        return self._admin

    def login_error(self, user, password, mechanism="SCRAM-SHA-256"):
        """None if ``user`` can fetch metadata over SASL, else the authentication error text."""
        from confluent_kafka.admin import AdminClient

        seen = []
        admin = AdminClient({"bootstrap.servers": self.broker.sasl_bootstrap_servers,
                             "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                             "sasl.username": user, "sasl.password": password, "logger": QUIET,
                             "error_cb": seen.append})
        try:
            admin.list_topics(timeout=5)
            return None
        except Exception as e:
            deadline = time.monotonic() + 5
            while not seen and time.monotonic() < deadline:
                admin.poll(0.1)  # serves error_cb
            return " ".join(str(x) for x in seen) or str(e)

    def describe(self, users=None):
        futures = self.admin().describe_user_scram_credentials(users)
        if users is None:
            return {u: sorted((i.mechanism.name, i.iterations) for i in d.scram_credential_infos)
                    for u, d in futures.result(timeout=10).items()}
        out = {}
        for user, f in futures.items():
            try:
                out[user] = sorted((i.mechanism.name, i.iterations) for i in f.result(timeout=10).scram_credential_infos)
            except Exception as e:
                out[user] = e.args[0].code()
        return out

    def test_lifecycle_across_a_restart(self):
        from confluent_kafka import KafkaError
        from confluent_kafka.admin import (
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialDeletion,
            UserScramCredentialUpsertion,
        )

        self.assertIsNotNone(self.login_error("carol", "carol-secret"))
        futures = self.admin().alter_user_scram_credentials([
            UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                         b"carol-secret"),
            UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 1000),
                                         b"dave-secret")])
        futures["carol"].result(timeout=10)
        with self.assertRaises(Exception) as cm:
            futures["dave"].result(timeout=10)
        self.assertEqual(cm.exception.args[0].code(), KafkaError.UNACCEPTABLE_CREDENTIAL)
        self.assertEqual(cm.exception.args[0].str(), "Too few iterations")

        self.assertIsNone(self.login_error("carol", "carol-secret"))
        self.assertIn("invalid credentials with SASL mechanism SCRAM-SHA-256",
                      self.login_error("carol", "wrong"))
        self.assertEqual(self.describe(), {"alice": [("SCRAM_SHA_256", 4096), ("SCRAM_SHA_512", 4096)],
                                           "carol": [("SCRAM_SHA_256", 8192)]})
        self.assertEqual(self.describe(["carol", "nobody"]),
                         {"carol": [("SCRAM_SHA_256", 8192)], "nobody": KafkaError.RESOURCE_NOT_FOUND})

        self.broker.restart()
        self.assertIsNone(self.login_error("carol", "carol-secret"))
        with open(os.path.join(self.broker.data_dir, "__kafkatw_scram_credentials.json"), "rb") as f:
            self.assertNotIn(b"carol-secret", f.read())

        futures = self.admin().alter_user_scram_credentials([
            UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)])
        futures["carol"].result(timeout=10)
        self.assertIn("invalid credentials with SASL mechanism SCRAM-SHA-256",
                      self.login_error("carol", "carol-secret"))
        futures = self.admin().alter_user_scram_credentials([
            UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)])
        with self.assertRaises(Exception) as cm:
            futures["carol"].result(timeout=10)
        self.assertEqual(cm.exception.args[0].code(), KafkaError.RESOURCE_NOT_FOUND)


class ReauthenticationTests(unittest.SynchronousTestCase):
    """KIP-368 with connections.max.reauth.ms=2000: librdkafka re-authenticates on its own."""

    def test_client_reauthenticates_and_keeps_producing(self):
        from confluent_kafka import Producer

        broker = KafkaBroker(listeners=("PLAINTEXT", "SASL_PLAINTEXT"), sasl_users={"alice": "alice-secret"},
                             sasl_mechanisms=("SCRAM-SHA-256",), topics=["reauth"], request_log=True,
                             overrides={"connections.max.reauth.ms": 2000}).start()
        self.addCleanup(broker.close)
        client_id = unique_name("reauth")
        p = Producer({"bootstrap.servers": broker.sasl_bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
                      "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": "alice-secret",
                      "client.id": client_id, "logger": QUIET})
        delivered = []
        deadline = time.monotonic() + 5.5
        i = 0
        while time.monotonic() < deadline:
            p.produce("reauth", b"v%d" % i, on_delivery=lambda e, msg: delivered.append(e))
            i += 1
            p.poll(0.1)
        self.assertEqual(p.flush(10), 0)
        self.assertEqual(delivered, [None] * i)

        def handshakes():
            entries = [e for e in request_log(broker.request_log_path)
                       if e["requestHeader"]["clientId"] == client_id]
            return [e for e in entries if e["requestHeader"]["requestApiKey"] == 17]

        # at least one login per connection and then a re-authentication every ~2 s on the
        # connection that keeps producing, each as alice on the same connection
        found = poll_until(lambda: len({e["connection"] for e in handshakes()}) < len(handshakes()) and handshakes(),
                           message="a re-authentication handshake")
        by_conn = {}
        for e in found:
            by_conn.setdefault(e["connection"], []).append(e["principal"])
        self.assertTrue(any(len(v) >= 2 and v[1:] == ["User:alice"] * (len(v) - 1) for v in by_conn.values()),
                        by_conn)
        with open(broker.log_path) as f:
            self.assertNotIn("the SASL session expired", f.read())


class ReauthenticationConsumerTests(unittest.SynchronousTestCase):
    """KIP-368, the issue's two checks: a consumer keeps consuming across several
    re-authentications, and a raw connection that does not re-authenticate is closed."""

    def setUp(self):
        self.broker = KafkaBroker(listeners=("PLAINTEXT", "SASL_PLAINTEXT"), sasl_users={"alice": "alice-secret"},
                                  sasl_mechanisms=("PLAIN", "SCRAM-SHA-512"), topics=["reauth-c"],
                                  request_log=True, overrides={"connections.max.reauth.ms": 2000}).start()
        self.addCleanup(self.broker.close)

    def test_consumer_keeps_consuming_across_reauthentications(self):
        from confluent_kafka import Consumer, Producer

        p = Producer({"bootstrap.servers": self.broker.bootstrap_servers, "logger": QUIET})
        client_id = unique_name("reauth-consumer")
        c = Consumer({"bootstrap.servers": self.broker.sasl_bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
                      "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "alice-secret",
                      "client.id": client_id, "group.id": unique_name("g"), "auto.offset.reset": "earliest",
                      "logger": QUIET})
        self.addCleanup(c.close)
        c.subscribe(["reauth-c"])
        got = []
        sent = 0
        deadline = time.monotonic() + 7.0  # more than three 2 s sessions
        while time.monotonic() < deadline:
            p.produce("reauth-c", b"r%d" % sent)
            sent += 1
            p.poll(0)
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        self.assertEqual(p.flush(10), 0)
        poll_until(lambda: (got.extend(m.value() for m in c.consume(100, 0.2) if m.error() is None)
                            or len(got) >= sent), timeout=20, message="every record consumed")
        self.assertEqual(got, [b"r%d" % i for i in range(sent)])

        def handshakes():
            return [e for e in request_log(self.broker.request_log_path)
                    if e["requestHeader"]["clientId"] == client_id and e["requestHeader"]["requestApiKey"] == 17]

        per_conn = {}
        for e in handshakes():
            per_conn.setdefault(e["connection"], []).append(e["principal"])
        # some connection (the fetching one) logged in and then re-authenticated at least twice
        self.assertTrue(any(len(v) >= 3 for v in per_conn.values()), per_conn)
        with open(self.broker.log_path) as f:
            self.assertNotIn("the SASL session expired", f.read())

    def test_raw_connection_that_does_not_reauthenticate_is_closed(self):
        host, port = self.broker.sasl_bootstrap_servers.split(":")
        raw = RawClient(self.broker, port=int(port))
        self.addCleanup(raw.close)
        self.assertEqual(raw.request(17, 1, m.SaslHandshakeRequest(mechanism="PLAIN")).error_code, errors.NONE)
        auth = raw.request(36, 2, m.SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"))
        self.assertEqual(auth.error_code, errors.NONE)
        self.assertTrue(0 < auth.session_lifetime_ms <= 2000, auth.session_lifetime_ms)
        self.assertEqual(raw.request(3, 12, m.MetadataRequest(topics=None)).brokers[0].node_id, 1)
        start = time.monotonic()
        poll_until(lambda: time.monotonic() - start > auth.session_lifetime_ms / 1000.0 + 0.2, timeout=10,
                   message="the session lifetime to pass")
        raw.send(3, 12, m.MetadataRequest(topics=None))
        self.assertTrue(closed_by_peer(raw.sock))
        # other connections are unaffected
        plain = RawClient(self.broker)
        self.addCleanup(plain.close)
        self.assertEqual(plain.request(3, 12, m.MetadataRequest(topics=None)).brokers[0].node_id, 1)


OAUTH_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"


class OAuthBearerTests(unittest.SynchronousTestCase):
    """OAUTHBEARER with confluent-kafka: Kafka's unsecured validator, then signed JWTs (JWKS file)."""

    def start(self, **overrides):
        props = {"listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": OAUTH_JAAS}
        props.update(overrides)
        broker = KafkaBroker(listeners=("PLAINTEXT", "SASL_PLAINTEXT"), sasl_mechanisms=("OAUTHBEARER",),
                             topics=["tokens"], request_log=True, overrides=props).start()
        self.addCleanup(broker.close)
        return broker

    def produce(self, broker, **conf):
        """``(delivery errors, client errors)`` of one record produced with ``conf``."""
        from confluent_kafka import Producer

        seen = []
        p = Producer(dict({"bootstrap.servers": broker.sasl_bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
                           "sasl.mechanism": "OAUTHBEARER", "logger": QUIET, "error_cb": seen.append,
                           "message.timeout.ms": 5000}, **conf))
        delivered = []
        p.produce("tokens", b"t", on_delivery=lambda e, msg: delivered.append(e))
        p.flush(8)
        return delivered, seen

    def principals(self, broker, client_id):
        return {e["principal"] for e in request_log(broker.request_log_path)
                if e["requestHeader"]["clientId"] == client_id and e["requestHeader"]["requestApiKey"] == 0}

    def test_unsecured_tokens(self):
        broker = self.start()
        delivered, errs = self.produce(broker, **{"enable.sasl.oauthbearer.unsecure.jwt": True,
                                                  "sasl.oauthbearer.config": "principal=carol",
                                                  "client.id": "unsecured"})
        self.assertEqual((delivered, errs), ([None], []))
        self.assertEqual(poll_until(lambda: self.principals(broker, "unsecured")), {"User:carol"})

    def test_required_scope_missing_is_an_authentication_error(self):
        broker = self.start(**{"listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
                               OAUTH_JAAS[:-1] + ' unsecuredValidatorRequiredScope="kafka";'})
        delivered, errs = self.produce(broker, **{"enable.sasl.oauthbearer.unsecure.jwt": True,
                                                  "sasl.oauthbearer.config": "principal=carol scope=other"})
        self.assertEqual([e.code() for e in delivered], [-192])  # _MSG_TIMED_OUT: never authenticated
        self.assertIn('{"status":"insufficient_scope","scope":"kafka"}', " ".join(e.str() for e in errs))

    def test_signed_tokens_against_a_jwks_file(self):
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding, rsa

        from tests.test_security_mechanisms import b64url, jws

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        numbers = key.public_key().public_numbers()
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        jwks = os.path.join(directory, "jwks.json")
        with open(jwks, "w") as f:
            f.write('{"keys": [{"kty": "RSA", "kid": "k1", "n": "%s", "e": "%s"}]}'
                    % (b64url(numbers.n.to_bytes(256, "big")), b64url(numbers.e.to_bytes(3, "big"))))
        broker = self.start(**{
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
            "sasl.oauthbearer.jwks.endpoint.url": "file:" + jwks,
            "sasl.oauthbearer.expected.audience": "kafka"})

        def token(claims):
            def cb(config):
                now = time.time()
                body = dict({"sub": "dave", "iat": int(now), "exp": int(now) + 300, "aud": "kafka"}, **claims)
                signed = jws({"alg": "RS256", "kid": "k1"}, body,
                             lambda data: key.sign(data, padding.PKCS1v15(), hashes.SHA256()))
                return signed, now + 300
            return cb

        delivered, errs = self.produce(broker, oauth_cb=token({}), **{"client.id": "signed"})
        self.assertEqual((delivered, errs), ([None], []))
        self.assertEqual(poll_until(lambda: self.principals(broker, "signed")), {"User:dave"})
        delivered, errs = self.produce(broker, oauth_cb=token({"aud": "elsewhere"}))
        self.assertIn('{"status":"invalid_token"}', " ".join(e.str() for e in errs))
        with open(broker.log_path) as f:
            self.assertIn("audience (aud) is not an expected one", f.read())


class CliTests(unittest.SynchronousTestCase):
    """``kafkatw users scram`` and ``--command-config`` with SASL settings, as a user runs them."""

    def setUp(self):
        self.broker = KafkaBroker(listeners=("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL"),
                                  sasl_users={"alice": "alice-secret"}, topics=["cli"]).start()
        self.addCleanup(self.broker.close)
        self.dir = os.path.abspath(self.mktemp())
        os.makedirs(self.dir)

    def config(self, name, **props):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write("".join("%s=%s\n" % kv for kv in props.items()))
        return path

    def cli(self, bootstrap, config, *args, stdin=None):
        from tests.test_cli_commands import run_cli

        return run_cli(bootstrap, "--command-config", config, *args, stdin=stdin)

    def test_users_scram_lifecycle_over_sasl(self):
        sasl = self.broker.sasl_bootstrap_servers
        admin = self.config("admin.properties", **{
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                'username="alice" password="alice-secret";'})
        erin = self.config("erin.properties", **{
            "security.protocol": "SASL_SSL", "ssl.ca.location": self.broker.ssl_ca_path,
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "erin", "sasl.password": "erin-secret"})
        rc, out, err = self.cli(sasl, admin, "users", "scram", "set", "--user", "erin", "--mechanism",
                                "SCRAM-SHA-512", "--iterations", "8192", "--password", "-", stdin="erin-secret\n")
        self.assertEqual((rc, out), (0, "Set SCRAM-SHA-512 credential of user erin (8192 iterations).\n"), err)
        rc, out, err = self.cli(sasl, admin, "users", "scram", "describe", "--user", "erin")
        self.assertEqual((rc, out.split()), (0, ["USER", "MECHANISM", "ITERATIONS", "erin", "SCRAM-SHA-512", "8192"]),
                         err)
        rc, out, err = self.cli(sasl, admin, "users", "scram", "describe", "--user", "erin", "--output", "json")
        self.assertEqual((rc, json.loads(out)), (0, [{"user": "erin", "mechanism": "SCRAM-SHA-512",
                                                      "iterations": 8192}]), err)
        rc, out, err = self.cli(self.broker.sasl_ssl_bootstrap_servers, erin, "topics", "list")
        self.assertEqual((rc, out), (0, "cli\n"), err)
        rc, out, err = self.cli(sasl, admin, "users", "scram", "delete", "--user", "erin", "--mechanism",
                                "SCRAM-SHA-512")
        self.assertEqual(rc, 0, err)
        rc, out, err = self.cli(self.broker.sasl_ssl_bootstrap_servers, erin, "topics", "list")
        self.assertEqual(rc, 1)
        self.assertIn("SASL authentication failed: Authentication failed during authentication due to invalid "
                      "credentials with SASL mechanism SCRAM-SHA-512", err)
        rc, out, err = self.cli(sasl, admin, "users", "scram", "set", "--user", "erin", "--iterations", "100",
                                "--password", "x")
        self.assertEqual(rc, 4)  # the broker answered with an error code
        self.assertIn("UNACCEPTABLE_CREDENTIAL", err)
        self.assertIn("Too few iterations", err)

    def test_wrong_password_and_missing_settings_are_one_line(self):
        sasl = self.broker.sasl_bootstrap_servers
        wrong = self.config("wrong.properties", **{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                                   "sasl.username": "alice", "sasl.password": "nope"})
        rc, out, err = self.cli(sasl, wrong, "topics", "list")
        self.assertEqual((rc, err.count("\n")), (1, 1))
        self.assertIn("SASL authentication failed: Authentication failed: Invalid username or password", err)
        partial = self.config("partial.properties", **{"security.protocol": "SASL_PLAINTEXT",
                                                       "sasl.mechanism": "SCRAM-SHA-256"})
        rc, out, err = self.cli(sasl, partial, "topics", "list")
        self.assertEqual(rc, 1)
        self.assertIn("SASL needs sasl.username and sasl.password", err)


class KafkaJsSaslTests(SaslBrokerMixin, unittest.SynchronousTestCase):
    """kafkajs (Node.js) over SASL_PLAINTEXT and SASL_SSL with each mechanism."""

    def setUp(self):
        from tests.test_e2e_kafkajs import kafkajs_ready

        kafkajs_ready()
        super().setUp()

    def run_sasl(self, protocol, mechanism, password="alice-secret"):
        from tests.test_e2e_kafkajs import run_js

        topic = self.topic("js-" + mechanism)
        env = {"KAFKAJS_SASL_MECHANISM": mechanism.lower(), "KAFKAJS_SASL_USERNAME": "alice",
               "KAFKAJS_SASL_PASSWORD": password, "KAFKAJS_LOG_LEVEL": "NOTHING"}
        if protocol == "SASL_SSL":
            env["KAFKAJS_SSL_CA"] = self.broker.ssl_ca_path
        return topic, run_js("sasl.js", self.address(protocol), topic, "g-" + topic, env=env)

    def test_produce_consume_each_mechanism(self):
        for protocol, mechanism in [("SASL_PLAINTEXT", m) for m in MECHANISMS] + [("SASL_SSL", "SCRAM-SHA-256")]:
            topic, out = self.run_sasl(protocol, mechanism)
            self.assertEqual(out, {"records": [[i, "k%d" % i, "v%d" % i] for i in range(N)]}, (protocol, mechanism))

    def test_wrong_password(self):
        for mechanism in MECHANISMS:
            _, out = self.run_sasl("SASL_PLAINTEXT", mechanism, password="wrong")
            expected = ("Authentication failed: Invalid username or password" if mechanism == "PLAIN" else
                        "Authentication failed during authentication due to invalid credentials with SASL "
                        "mechanism " + mechanism)
            self.assertEqual(out["error"]["name"], "KafkaJSSASLAuthenticationError", out)
            self.assertIn(expected, out["error"]["message"])


class SaslOnlyBrokerTests(unittest.SynchronousTestCase):
    """A broker with only a SASL_SSL listener starts, creates its topics (logged in) and serves."""

    def test_start_topics_and_produce(self):
        from confluent_kafka.admin import AdminClient

        broker = KafkaBroker(listeners=("SASL_SSL",), sasl_users={"zoe": "zoe-secret"},
                             sasl_mechanisms=("SCRAM-SHA-256",), topics=[("only", 3)]).start()
        self.addCleanup(broker.close)
        self.assertEqual((broker.bootstrap_servers, set(broker.ports)), (broker.sasl_ssl_bootstrap_servers, {"SASL_SSL"}))
        admin = AdminClient({"bootstrap.servers": broker.sasl_ssl_bootstrap_servers, "security.protocol": "SASL_SSL",
                             "ssl.ca.location": broker.ssl_ca_path, "sasl.mechanism": "SCRAM-SHA-256",
                             "sasl.username": "zoe", "sasl.password": "zoe-secret", "logger": QUIET})
        topics = admin.list_topics(timeout=10).topics
        self.assertEqual(len(topics["only"].partitions), 3)


class ThrowawayBrokerTests(unittest.SynchronousTestCase):
    """``python -m kafkatw.testing --sasl-user`` prints SASL addresses a client can log in to."""

    def test_sasl_user_at_the_shell(self):
        from confluent_kafka.admin import AdminClient

        proc = subprocess.Popen([sys.executable, "-m", "kafkatw.testing", "--sasl-user", "ann=ann-pw"],
                                stdout=subprocess.PIPE, text=True)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        lines = []
        while not lines or not lines[-1].startswith("log:"):
            line = proc.stdout.readline()
            self.assertTrue(line, "exited early: %r" % (lines,))
            lines.append(line.strip())
        sasl = [l for l in lines if l.startswith("sasl_plaintext:")]
        self.assertEqual(len(sasl), 1, lines)
        self.assertTrue(sasl[0].endswith("users=ann"), sasl)
        bootstrap = sasl[0].split()[1].split("=", 1)[1]
        admin = AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "ann", "sasl.password": "ann-pw",
                             "logger": QUIET})
        self.assertIsNotNone(admin.list_topics(timeout=10).brokers)
        proc.send_signal(signal.SIGINT)
        self.assertEqual(proc.wait(timeout=30), 0)
