"""Kafka 3.x configs that Kafka 4.0 removed: accepted and ignored with a warning, or refused
with one line naming what replaced them, in server.properties and in topic configs sent by
clients. The client test repeats librdkafka 2.0.2's test 0092 (mixed_msgver) step by step:
one message per batch, and half-way a legacy AlterConfigs of every described config plus
``message.format.version=0.10.0.0``, then all 60 messages consumed.
"""

import time
import uuid

from twisted.trial import unittest

from kafkatw.config import ConfigError, KafkaConfig
from kafkatw.config.removed import (
    IGNORED,
    REFUSED,
    REMOVED_BROKER_CONFIGS,
    REMOVED_BROKER_PREFIXES,
    REMOVED_TOPIC_CONFIGS,
    split_removed,
)
from kafkatw.testing import KafkaBrokerMixin


class TableTests(unittest.SynchronousTestCase):
    def test_topic_configs(self):
        kept, ignored = split_removed({"message.format.version": "0.10.0.0", "retention.ms": "1000",
                                       "message.downconversion.enable": "true"}, REMOVED_TOPIC_CONFIGS)
        self.assertEqual(kept, {"retention.ms": "1000"})
        self.assertEqual([(r.name, r.action) for r in ignored],
                         [("message.format.version", IGNORED), ("message.downconversion.enable", IGNORED)])
        self.assertEqual(ignored[0].message(),
                         "message.format.version is deprecated and ignored: Kafka ignores it from 3.0 on "
                         "(every batch is written in the v2 format) and 4.0 removed it")
        with self.assertRaises(ConfigError) as e:
            split_removed({"message.timestamp.difference.max.ms": "1000"}, REMOVED_TOPIC_CONFIGS)
        self.assertEqual(str(e.exception), "message.timestamp.difference.max.ms was removed in Kafka 4.0: use "
                                           "message.timestamp.before.max.ms and message.timestamp.after.max.ms "
                                           "(KIP-937)")

    def test_every_refusal_names_a_replacement(self):
        for entry in list(REMOVED_TOPIC_CONFIGS.values()) + list(REMOVED_BROKER_CONFIGS.values()):
            if entry.action == REFUSED:
                self.assertTrue(entry.why.startswith("use "), entry)

    def test_zookeeper_family(self):
        kept, ignored = split_removed({"zookeeper.ssl.protocol": "TLSv1.2", "node.id": "1"},
                                      REMOVED_BROKER_CONFIGS, REMOVED_BROKER_PREFIXES)
        self.assertEqual((kept, [r.name for r in ignored]), ({"node.id": "1"}, ["zookeeper.ssl.protocol"]))


class BrokerPropertiesTests(unittest.SynchronousTestCase):
    def test_ignored_with_a_warning_not_as_unknown(self):
        from kafkatw.config import kafka_config

        warned = []
        self.patch(kafka_config.log, "warn", lambda fmt, **kw: warned.append(fmt.format(**kw)))
        config = KafkaConfig.from_properties({
            "log.message.format.version": "2.8", "inter.broker.protocol.version": "3.7",
            "zookeeper.clientCnxnSocket": "x", "zookeeper.connection.timeout.ms": "18000",
            "log.retention.ms": "1000"})
        self.assertEqual(config.unknown, {})
        self.assertEqual(config["log.retention.ms"], 1000)
        self.assertEqual(sorted(w.split(" is ")[0] for w in warned),
                         ["inter.broker.protocol.version", "log.message.format.version",
                          "zookeeper.clientCnxnSocket"])
        self.assertEqual(config["zookeeper.connection.timeout.ms"], 18000)
        self.assertIn("zookeeper.clientCnxnSocket is deprecated and ignored: kafkatw's ZooKeeper client uses only "
                      "zookeeper.connect, its timeouts and zookeeper.max.in.flight.requests", warned)

    def test_refused_in_one_line(self):
        for name, replacement in (("quota.producer.default", "producer_byte_rate=N"),
                                  ("log.message.timestamp.difference.max.ms", "log.message.timestamp.before.max.ms"),
                                  ("delegation.token.master.key", "delegation.token.secret.key")):
            with self.assertRaises(ConfigError) as e:
                KafkaConfig.from_properties({name: "1000"})
            self.assertTrue(str(e.exception).startswith("%s was removed in Kafka 4.0: use " % name), str(e.exception))
            self.assertIn(replacement, str(e.exception))
            self.assertNotIn("\n", str(e.exception))

    def test_zookeeper_tls_and_acls_refused_not_ignored(self):
        """The zookeeper.* family is ignored, but TLS to ZooKeeper and znode ACLs asked for
        and silently not done would leave the cluster open: true is refused, false accepted."""
        for name in ("zookeeper.ssl.client.enable", "zookeeper.set.acl"):
            config = KafkaConfig.from_properties({name: "false"})
            self.assertEqual((config[name], config.ignored_removed), (False, []))
            with self.assertRaises(ConfigError) as e:
                KafkaConfig.from_properties({name: "true"})
            self.assertEqual(str(e.exception).split(":")[0],
                             "Invalid value true for configuration %s" % name)
            self.assertIn("kafkatw's ZooKeeper client has no", str(e.exception))


class ClientTests(KafkaBrokerMixin, unittest.TestCase):
    def admin(self):
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.broker.bootstrap_servers})

    def test_librdkafka_0092_mixed_msgver(self):
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import ConfigResource

        topic = "mixed-msgver-" + uuid.uuid4().hex[:8]
        producer = Producer({"bootstrap.servers": self.broker.bootstrap_servers})
        for i in range(60):
            producer.produce(topic, b"message-%d" % i, partition=0)
            self.assertEqual(producer.flush(30), 0)  # one message per batch
            if i == 30:
                admin = self.admin()
                (described,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
                configs = {name: entry.value for name, entry in described.result().items()}
                self.assertNotIn("message.format.version", configs)
                configs["message.format.version"] = "0.10.0.0"
                (altered,) = admin.alter_configs([ConfigResource("topic", topic, set_config=configs)]).values()
                self.assertIsNone(altered.result())  # legacy AlterConfigs, as the test uses
        consumer = Consumer({"bootstrap.servers": self.broker.bootstrap_servers, "group.id": topic,
                             "auto.offset.reset": "earliest"})
        self.addCleanup(consumer.close)
        consumer.subscribe([topic])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 60 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        self.assertEqual(got, [b"message-%d" % i for i in range(60)])
        admin = self.admin()
        (described,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
        self.assertNotIn("message.format.version", described.result())
        with open(self.broker.log_path) as f:
            warnings = [line for line in f if "Topic %s: message.format.version is deprecated and ignored" % topic
                        in line]
        self.assertEqual(len(warnings), 1)

    def test_dynamic_broker_config_says_what_became_of_it(self):
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        admin = self.admin()
        resource = ConfigResource("broker", "1", incremental_configs=[
            ConfigEntry("log.message.format.version", "2.8", incremental_operation=AlterConfigOpType.SET)])
        (future,) = admin.incremental_alter_configs([resource]).values()
        with self.assertRaises(KafkaException) as e:
            future.result()
        self.assertEqual(e.exception.args[0].str(),
                         "log.message.format.version is deprecated and ignored: Kafka ignores it from 3.0 on "
                         "(every batch is written in the v2 format) and 4.0 removed it")

    def test_create_topic_refusal_names_the_replacement(self):
        from confluent_kafka import KafkaError as ClientKafkaError
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic

        topic = "difference-" + uuid.uuid4().hex[:8]
        admin = self.admin()  # kept: a collected client fails its futures
        (future,) = admin.create_topics(
            [NewTopic(topic, 1, 1, config={"message.timestamp.difference.max.ms": "60000"})]).values()
        with self.assertRaises(KafkaException) as e:
            future.result()
        error = e.exception.args[0]
        self.assertEqual(error.code(), ClientKafkaError.INVALID_CONFIG)
        self.assertEqual(error.str(), "message.timestamp.difference.max.ms was removed in Kafka 4.0: use "
                                      "message.timestamp.before.max.ms and message.timestamp.after.max.ms (KIP-937)")
        created = "format-" + uuid.uuid4().hex[:8]
        (future,) = admin.create_topics(
            [NewTopic(created, 1, 1, config={"message.format.version": "2.8", "retention.ms": "123000"})]).values()
        self.assertIsNone(future.result())
