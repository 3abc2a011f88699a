"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs against a real broker, through
confluent-kafka's AdminClient and kafka-python's KafkaAdminClient: sources, synonyms, validation,
live effect (retention deletes segments, max.message.bytes admits a 5 MB record) and restarts."""

import glob
import os
import time

from twisted.trial import unittest

from kafkatw.cli.client import KafkaClient, KafkaResponseError, check
from kafkatw.protocol import messages
from kafkatw.testing import KafkaBrokerMixin
from tests.support import futures_error, futures_result, poll_until, unique_name

from confluent_kafka import Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)


class _Admin(KafkaBrokerMixin):
    def setUp(self):
        super().setUp()
        self.admin = AdminClient({"bootstrap.servers": self.broker.bootstrap_servers})

    def topic(self, configs=None, partitions=1):
        name = unique_name("t")
        futures_result(self.admin.create_topics([NewTopic(name, partitions, config=configs or {})]))
        return name

    def describe(self, rtype, name):
        res = ConfigResource(rtype, name)
        return futures_result(self.admin.describe_configs([res]))[res]

    def incremental(self, rtype, name, entries, validate_only=False):
        return self.admin.incremental_alter_configs(
            [ConfigResource(rtype, name, incremental_configs=entries)], validate_only=validate_only)

    def node_id(self):
        return futures_result({"c": self.admin.describe_cluster()})["c"].controller.id


def raw_describe(broker, rtype, name, keys):
    """DescribeConfigs through kafkatw's own client (confluent-kafka can't name "" or other ids)."""
    R = messages.DescribeConfigsRequest
    with KafkaClient(broker.bootstrap_servers) as client:
        resp = client.call(R(resources=[R.DescribeConfigsResource(
            resource_type=rtype, resource_name=name, configuration_keys=keys)], include_synonyms=True))
    [res] = resp.results
    check(res.error_code, res.error_message)
    return res.configs


def raw_incremental(broker, rtype, name, key, value):
    R = messages.IncrementalAlterConfigsRequest
    with KafkaClient(broker.bootstrap_servers) as client:
        resp = client.call(R(resources=[R.AlterConfigsResource(
            resource_type=rtype, resource_name=name,
            configs=[R.AlterableConfig(name=key, config_operation=0, value=value)])]))
    [res] = resp.responses
    check(res.error_code, res.error_message)


def op(name, value, kind=AlterConfigOpType.SET):
    return ConfigEntry(name, value, incremental_operation=kind)


class DescribeConfigsTests(_Admin, unittest.TestCase):
    broker_overrides = {"log.retention.hours": 100}

    def test_topic_sources_values_and_synonyms(self):
        name = self.topic({"retention.ms": "123456"})
        configs = self.describe("TOPIC", name)
        entry = configs["retention.ms"]
        self.assertEqual(entry.value, "123456")
        self.assertEqual(entry.source, ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
        self.assertFalse(entry.is_default)
        # confluent-kafka keys synonyms by name (the last row of a name wins)
        self.assertEqual(sorted(entry.synonyms), ["log.retention.hours", "retention.ms"])
        self.assertEqual(entry.synonyms["retention.ms"].source, ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
        rows = raw_describe(self.broker, 2, name, ["retention.ms"])
        self.assertEqual([(s.name, s.value, s.source) for s in rows[0].synonyms], [
            ("retention.ms", "123456", 1), ("log.retention.hours", "100", 4),
            ("log.retention.hours", "168", 5)])
        # a broker-set synonym gives the default's value and source
        seg = configs["segment.ms"]
        self.assertEqual((seg.value, seg.source), ("604800000", ConfigSource.DEFAULT_CONFIG.value))
        self.assertEqual(configs["segment.bytes"].value, "1073741824")
        self.assertEqual(configs["cleanup.policy"].value, "delete")
        self.assertFalse(configs["cleanup.policy"].is_read_only)
        from kafkatw.config import TOPIC_CONFIG_DEF
        self.assertEqual(sorted(configs), sorted(TOPIC_CONFIG_DEF.names()))

    def test_topic_default_from_static_broker_config(self):
        name = self.topic()
        entry = self.describe("TOPIC", name)["retention.ms"]
        self.assertEqual(entry.value, str(100 * 3600 * 1000))
        self.assertEqual(entry.source, ConfigSource.STATIC_BROKER_CONFIG.value)

    def test_unknown_topic(self):
        res = ConfigResource("TOPIC", "no-such-topic")
        self.assertEqual(futures_error(self.admin.describe_configs([res])).code(), 3)  # UNKNOWN_TOPIC_OR_PARTITION

    def test_broker_configs(self):
        configs = self.describe("BROKER", str(self.node_id()))
        hours = configs["log.retention.hours"]
        self.assertEqual((hours.value, hours.source), ("100", ConfigSource.STATIC_BROKER_CONFIG.value))
        self.assertFalse(hours.is_read_only)
        self.assertTrue(configs["log.dirs"].is_read_only)
        self.assertEqual(configs["num.partitions"].source, ConfigSource.DEFAULT_CONFIG.value)
        sensitive = [c for c in configs.values() if c.is_sensitive]
        self.assertTrue(sensitive)
        self.assertTrue(all(c.value is None for c in sensitive))

    def test_other_broker_id_is_invalid_request(self):
        with self.assertRaises(KafkaResponseError) as cm:
            raw_describe(self.broker, 4, str(self.node_id() + 99), None)
        self.assertEqual(cm.exception.code, 42)  # INVALID_REQUEST

    def test_kafka_python_describe(self):
        from kafka.admin import ConfigResource as KPResource, ConfigResourceType, KafkaAdminClient

        name = self.topic({"segment.ms": "99999"})
        client = KafkaAdminClient(bootstrap_servers=self.broker.bootstrap_servers)
        self.addCleanup(client.close)
        resp = client.describe_configs([KPResource(ConfigResourceType.TOPIC, name)])
        entry = resp["topic"][name]["segment.ms"]
        self.assertEqual((entry["value"], entry["config_source"], entry["config_type"]),
                         ("99999", "DYNAMIC_TOPIC_CONFIG", "LONG"))


class AlterConfigsTests(_Admin, unittest.TestCase):
    broker_overrides = {"log.retention.check.interval.ms": 200, "log.segment.delete.delay.ms": 0}

    def test_incremental_set_append_subtract_delete(self):
        name = self.topic()
        futures_result(self.incremental("TOPIC", name, [op("retention.ms", "5000"),
                                                op("cleanup.policy", "compact", AlterConfigOpType.APPEND)]))
        configs = self.describe("TOPIC", name)
        self.assertEqual(configs["retention.ms"].value, "5000")
        self.assertEqual(configs["cleanup.policy"].value, "delete,compact")
        futures_result(self.incremental("TOPIC", name, [op("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT),
                                                op("retention.ms", None, AlterConfigOpType.DELETE)]))
        configs = self.describe("TOPIC", name)
        self.assertEqual(configs["cleanup.policy"].value, "compact")
        self.assertEqual((configs["retention.ms"].value, configs["retention.ms"].source),
                         ("604800000", ConfigSource.DEFAULT_CONFIG.value))

    def test_invalid_configs_name_the_key(self):
        name = self.topic()
        err = futures_error(self.incremental("TOPIC", name, [op("retention.ms", "soon")]))
        self.assertEqual(err.code(), 40)  # INVALID_CONFIG
        self.assertIn("retention.ms", err.str())
        err = futures_error(self.incremental("TOPIC", name, [op("no.such.config", "1")]))
        self.assertEqual(err.code(), 40)
        self.assertIn("no.such.config", err.str())
        err = futures_error(self.incremental("TOPIC", name, [op("retention.ms", "1", AlterConfigOpType.APPEND)]))
        self.assertEqual(err.code(), 40)
        self.assertIn("retention.ms", err.str())
        self.assertEqual(self.describe("TOPIC", name)["retention.ms"].source, ConfigSource.DEFAULT_CONFIG.value)

    def test_validate_only_changes_nothing(self):
        name = self.topic()
        futures_result(self.incremental("TOPIC", name, [op("retention.ms", "5000")], validate_only=True))
        self.assertEqual(self.describe("TOPIC", name)["retention.ms"].value, "604800000")

    def test_legacy_alter_configs_replaces_the_set(self):
        name = self.topic({"retention.ms": "5000", "segment.ms": "7000"})
        res = ConfigResource("TOPIC", name, set_config={"segment.ms": "8000"})
        futures_result(self.admin.alter_configs([res]))
        configs = self.describe("TOPIC", name)
        self.assertEqual(configs["segment.ms"].value, "8000")
        self.assertEqual(configs["retention.ms"].source, ConfigSource.DEFAULT_CONFIG.value)

    def test_kafka_python_alter_configs(self):
        from kafka.admin import ConfigResource as KPResource, ConfigResourceType, KafkaAdminClient

        name = self.topic()
        client = KafkaAdminClient(bootstrap_servers=self.broker.bootstrap_servers)
        self.addCleanup(client.close)
        client.alter_configs([KPResource(ConfigResourceType.TOPIC, name, configs={"retention.bytes": "777777"})])
        self.assertEqual(self.describe("TOPIC", name)["retention.bytes"].value, "777777")

    def test_broker_dynamic_config(self):
        node = str(self.node_id())
        futures_result(self.incremental("BROKER", node, [op("log.retention.ms", "86400000")]))
        entry = self.describe("BROKER", node)["log.retention.ms"]
        self.assertEqual((entry.value, entry.source), ("86400000", ConfigSource.DYNAMIC_BROKER_CONFIG.value))
        # topics without an override follow it
        topic_entry = self.describe("TOPIC", self.topic())["retention.ms"]
        self.assertEqual((topic_entry.value, topic_entry.source),
                         ("86400000", ConfigSource.DYNAMIC_BROKER_CONFIG.value))
        err = futures_error(self.incremental("BROKER", node, [op("log.dirs", "/elsewhere")]))
        self.assertEqual(err.code(), 42)  # INVALID_REQUEST, as Kafka refuses read-only keys
        self.assertEqual(err.str(), "Invalid config value for resource ConfigResource(type=BROKER, "
                                    "name='%s'): Cannot update these configs dynamically: "
                                    "Set(log.dirs)" % node)
        futures_result(self.incremental("BROKER", node, [op("log.retention.ms", None, AlterConfigOpType.DELETE)]))
        self.assertEqual(self.describe("BROKER", node)["log.retention.ms"].source,
                         ConfigSource.DEFAULT_CONFIG.value)

    def test_lowering_retention_ms_deletes_old_segments(self):
        name = self.topic({"segment.ms": "1000"})
        producer = Producer({"bootstrap.servers": self.broker.bootstrap_servers, "linger.ms": 0})
        hour_ago = int(time.time() * 1000) - 3600 * 1000
        for i in range(3):
            producer.produce(name, b"v%d" % i, partition=0, timestamp=hour_ago + i)
            self.assertEqual(producer.flush(10), 0)
        part_dir = os.path.join(self.broker.data_dir, "%s-0" % name)
        logs = lambda: sorted(glob.glob(os.path.join(part_dir, "*.log")))  # noqa: E731
        self.assertEqual(len(logs()), 3)  # old timestamps roll a segment per batch
        tp = TopicPartition(name, 0)
        self.assertEqual(self._low(tp), 0)
        futures_result(self.incremental("TOPIC", name, [op("retention.ms", "600000")]))
        poll_until(lambda: self._low(tp) == 3, 15.0, 0.05, "log start offset 3 after retention")
        poll_until(lambda: len(logs()) == 1, 15.0, 0.05, "old segment files deleted")

    def _low(self, tp):
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": self.broker.bootstrap_servers, "group.id": "x"})
        try:
            return c.get_watermark_offsets(tp, timeout=10)[0]
        finally:
            c.close()

    def test_raising_max_message_bytes_admits_5mb_record(self):
        name = self.topic()
        big = os.urandom(5 * 1024 * 1024)
        producer = Producer({"bootstrap.servers": self.broker.bootstrap_servers,
                             "message.max.bytes": 8 * 1024 * 1024, "compression.type": "none",
                             "retries": 0})
        outcome = []
        producer.produce(name, big, partition=0, on_delivery=lambda err, msg: outcome.append(err))
        producer.flush(20)
        self.assertEqual(len(outcome), 1)
        self.assertIsNotNone(outcome[0])
        self.assertEqual(outcome[0].name(), "MSG_SIZE_TOO_LARGE")
        futures_result(self.incremental("TOPIC", name, [op("max.message.bytes", str(6 * 1024 * 1024))]))
        outcome.clear()
        producer.produce(name, big, partition=0, on_delivery=lambda err, msg: outcome.append((err, msg.offset())))
        producer.flush(20)
        self.assertEqual(outcome, [(None, 0)])
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": self.broker.bootstrap_servers, "group.id": "g-" + name,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.addCleanup(c.close)
        c.assign([TopicPartition(name, 0, 0)])
        msg = poll_until(lambda: c.poll(0.5), 15.0, 0.05, "the 5 MB record")
        self.assertIsNone(msg.error())
        self.assertEqual(msg.value(), big)


class ConfigRestartTests(_Admin, unittest.TestCase):
    broker_scope = "test"

    def test_configs_survive_restart(self):
        name = self.topic()
        node = str(self.node_id())
        futures_result(self.incremental("TOPIC", name, [op("retention.ms", "4242000")]))
        futures_result(self.incremental("BROKER", node, [op("log.retention.bytes", "123456789")]))
        raw_incremental(self.broker, 4, "", "log.cleaner.backoff.ms", "16000")  # the cluster default
        self.broker.restart()
        self.admin = AdminClient({"bootstrap.servers": self.broker.bootstrap_servers})
        topic_entry = self.describe("TOPIC", name)["retention.ms"]
        self.assertEqual((topic_entry.value, topic_entry.source),
                         ("4242000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value))
        configs = self.describe("BROKER", node)
        self.assertEqual((configs["log.retention.bytes"].value, configs["log.retention.bytes"].source),
                         ("123456789", ConfigSource.DYNAMIC_BROKER_CONFIG.value))
        self.assertEqual((configs["log.cleaner.backoff.ms"].value, configs["log.cleaner.backoff.ms"].source),
                         ("16000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value))
        defaults = raw_describe(self.broker, 4, "", None)
        self.assertEqual([(c.name, c.value, c.config_source) for c in defaults],
                         [("log.cleaner.backoff.ms", "16000", 3)])
        # the topic default follows the dynamic broker config
        self.assertEqual(self.describe("TOPIC", name)["retention.bytes"].value, "123456789")
