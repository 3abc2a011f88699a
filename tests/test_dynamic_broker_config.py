"""Dynamic broker configs: refused with Kafka's INVALID_REQUEST when they cannot change live
(nothing applied, stored or described), in force as soon as AlterConfigs returns when they can.

Real brokers with confluent-kafka's AdminClient, kafka-python's KafkaAdminClient and kafkatw's
own client; beside them in-process tests of the all-or-nothing update and of each component
that applies a key (request channel, socket server limits, cleaner backoff) with task.Clock.
"""

import json
import os
import socket
import time

from twisted.internet import task
from twisted.trial import unittest
from zope.interface import implementer

from kafkatw.cli.client import KafkaClient, check
from kafkatw.config import ConfigError, KafkaConfig
from kafkatw.config.dynamic import (
    DYNAMIC_BROKER_CONFIGS,
    DynamicBrokerConfig,
    IBrokerReconfigurable,
    split_persisted,
)
from kafkatw.network.channel import RequestChannel
from kafkatw.network.interfaces import IRequestHandler
from kafkatw.protocol import messages
from kafkatw.server.dynamic_config import DynamicProducerStateConfig
from kafkatw.server.replica_manager import ReplicaManager
from kafkatw.storage import LogManager
from kafkatw.testing import KafkaBrokerMixin
from tests.support import closed_by_peer, futures_error, futures_result, poll_until, unique_name

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

INVALID_REQUEST = 42
BROKER = 4


def op(name, value, kind=AlterConfigOpType.SET):
    return ConfigEntry(name, value, incremental_operation=kind)


def refused_message(node, *names):
    return ("Invalid config value for resource ConfigResource(type=BROKER, name='%s'): Cannot "
            "update these configs dynamically: Set(%s)" % (node, ", ".join(names)))


def raw_alter(client, name, configs, validate_only=False):
    """IncrementalAlterConfigs SET of ``configs`` on BROKER ``name`` -> (error code, message)."""
    R = messages.IncrementalAlterConfigsRequest
    resp = client.call(R(validate_only=validate_only, resources=[R.AlterConfigsResource(
        resource_type=BROKER, resource_name=name,
        configs=[R.AlterableConfig(name=k, config_operation=0 if v is not None else 1, value=v)
                 for k, v in configs.items()])]))
    [res] = resp.responses
    return res.error_code, res.error_message


def raw_describe(client, name, keys=None):
    R = messages.DescribeConfigsRequest
    resp = client.call(R(resources=[R.DescribeConfigsResource(
        resource_type=BROKER, resource_name=name, configuration_keys=keys)]))
    [res] = resp.results
    check(res.error_code, res.error_message)
    return {c.name: (c.value, c.config_source) for c in res.configs}


class _Admin(KafkaBrokerMixin):
    def setUp(self):
        super().setUp()
        self.admin = AdminClient({"bootstrap.servers": self.broker.bootstrap_servers})
        self.node = str(futures_result({"c": self.admin.describe_cluster()})["c"].controller.id)

    def describe(self):
        res = ConfigResource("BROKER", self.node)
        return futures_result(self.admin.describe_configs([res]))[res]

    def incremental(self, entries, validate_only=False):
        return self.admin.incremental_alter_configs(
            [ConfigResource("BROKER", self.node, incremental_configs=entries)],
            validate_only=validate_only)

    def stored_layers(self):
        """The dynamic layers as persisted in the metadata store (what a restart applies)."""
        with open(os.path.join(self.broker.data_dir, "__kafkatw_metadata.json")) as f:
            state = json.load(f)
        return state.get("broker_configs", {}), state.get("default_broker_configs", {})


class RefusedTests(_Admin, unittest.TestCase):
    """Keys Kafka or kafkatw cannot change while the broker runs."""

    def test_incremental_refuses_read_only_key(self):
        for validate_only in (False, True):
            err = futures_error(self.incremental([op("num.network.threads", "5")], validate_only))
            self.assertEqual(err.code(), INVALID_REQUEST)
            self.assertEqual(err.str(), refused_message(self.node, "num.network.threads"))
        entry = self.describe()["num.network.threads"]
        self.assertEqual((entry.value, entry.source, entry.is_read_only),
                         ("3", ConfigSource.DEFAULT_CONFIG.value, True))
        self.assertEqual(self.stored_layers(), ({}, {}))

    def test_refused_key_leaves_the_others_of_the_request_unapplied(self):
        # legacy AlterConfigs: the whole set is refused, the dynamic key in it included
        res = ConfigResource("BROKER", self.node, set_config={
            "log.retention.ms": "1000", "log.dirs": "/elsewhere", "listeners": "PLAINTEXT://:1"})
        err = futures_error(self.admin.alter_configs([res]))
        self.assertEqual(err.code(), INVALID_REQUEST)
        self.assertEqual(err.str(), refused_message(self.node, "listeners", "log.dirs"))
        configs = self.describe()
        self.assertEqual((configs["log.retention.ms"].value, configs["log.retention.ms"].source),
                         (None, ConfigSource.DEFAULT_CONFIG.value))
        self.assertEqual(configs["log.dirs"].value, self.broker.data_dir)
        self.assertEqual(self.stored_layers(), ({}, {}))

    def test_cluster_default_refuses_too(self):
        with KafkaClient(self.broker.bootstrap_servers) as client:
            code, message = raw_alter(client, "", {"log.cleaner.threads": "2"})
            self.assertEqual((code, message), (INVALID_REQUEST, refused_message(
                "", "log.cleaner.threads")))
            self.assertEqual(raw_describe(client, ""), {})
        self.assertEqual(self.stored_layers(), ({}, {}))

    def test_kafka_python_alter_configs(self):
        from kafka.admin import ConfigResource as KPResource, ConfigResourceType, KafkaAdminClient

        client = KafkaAdminClient(bootstrap_servers=self.broker.bootstrap_servers)
        self.addCleanup(client.close)
        # a key Kafka changes live but kafkatw does not (its cleaner runs in one thread):
        # kafka-python reads DescribeConfigs' read-only flag and refuses to send it...
        resource = lambda: KPResource(ConfigResourceType.BROKER, self.node,  # noqa: E731
                                      configs={"log.cleaner.threads": "4"})
        e = self.assertRaises(ValueError, client.alter_configs, [resource()])
        self.assertEqual(str(e), "Unrecognized configs: {'log.cleaner.threads'}")
        # ...and sent anyway, through either API, the broker refuses it
        for incremental in (True, False):
            result = client.alter_configs([resource()], raise_on_unknown=False,
                                          incremental=incremental)
            self.assertEqual(result, {"broker": {self.node: "[Error 42] InvalidRequestError: "
                                                 + refused_message(self.node, "log.cleaner.threads")}})
        self.assertEqual(self.describe()["log.cleaner.threads"].value, "1")

    def test_listener_prefixed_key_is_refused_not_unknown(self):
        name = "listener.name.plaintext.ssl.keystore.location"
        err = futures_error(self.incremental([op(name, "/k.pem")]))
        self.assertEqual((err.code(), err.str()), (INVALID_REQUEST, refused_message(self.node, name)))
        err = futures_error(self.incremental([op("no.such.config", "1")]))
        self.assertEqual((err.code(), err.str()), (40, "Unknown broker config name: no.such.config"))

    def test_bad_value_of_a_dynamic_key_is_invalid_request(self):
        err = futures_error(self.incremental([op("max.connections.per.ip", "-1")]))
        self.assertEqual(err.code(), INVALID_REQUEST)
        self.assertEqual(err.str(), "Invalid config value for resource ConfigResource(type=BROKER,"
                                    " name='%s'): Invalid value -1 for configuration "
                                    "max.connections.per.ip: Value must be at least 0" % self.node)
        self.assertEqual(self.describe()["max.connections.per.ip"].source,
                         ConfigSource.DEFAULT_CONFIG.value)

    def test_every_key_described_dynamic_is_accepted(self):
        configs = self.describe()
        dynamic = {name for name, entry in configs.items() if not entry.is_read_only}
        self.assertEqual(dynamic, set(DYNAMIC_BROKER_CONFIGS))
        current = {name: configs[name].value for name in dynamic if configs[name].value is not None}
        self.assertGreater(len(current), 30)
        with KafkaClient(self.broker.bootstrap_servers) as client:
            self.assertEqual(raw_alter(client, self.node, current, validate_only=True), (0, None))
            # and every read-only key is refused
            read_only = sorted(name for name, e in configs.items()
                               if e.is_read_only and e.value is not None and not e.is_sensitive)
            for name in read_only:
                code, message = raw_alter(client, self.node, {name: configs[name].value},
                                          validate_only=True)
                self.assertEqual((code, message), (INVALID_REQUEST, refused_message(
                    self.node, name)), name)


class UnimplementedFeatureTests(_Admin, unittest.TestCase):
    """Kafka's broker configs of features kafkatw does not implement, answered as Kafka does."""

    broker_scope = "test"

    def test_kafka_keys_of_unimplemented_features(self):
        # librdkafka's 0081 AlterConfigs sets this one on a broker: Kafka lets a listener's SASL
        # settings change live; kafkatw has no Kerberos, so it stores it and changes nothing
        res = ConfigResource("BROKER", self.node, set_config={
            "sasl.kerberos.min.time.before.relogin": "58000"})
        futures_result(self.admin.alter_configs([res]))
        entry = self.describe()["sasl.kerberos.min.time.before.relogin"]
        self.assertEqual((entry.value, entry.source, entry.is_read_only),
                         ("58000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False))
        self.assertEqual(self.stored_layers(), ({"sasl.kerberos.min.time.before.relogin": "58000"}, {}))
        with KafkaClient(self.broker.bootstrap_servers) as client:
            # a bad value is refused as Kafka's, naming the key
            self.assertEqual(raw_alter(client, self.node, {"sasl.kerberos.min.time.before.relogin": "x"}),
                             (INVALID_REQUEST, "Invalid config value for resource ConfigResource("
                              "type=BROKER, name='%s'): Invalid value x for configuration "
                              "sasl.kerberos.min.time.before.relogin: Not a number of type LONG"
                              % self.node))
            # a listener's setting is per broker in Kafka: not at the cluster-default level
            self.assertEqual(raw_alter(client, "", {"sasl.kerberos.service.name": "kafka"}), (
                INVALID_REQUEST, "Invalid config value for resource ConfigResource(type=BROKER, "
                "name=''): Cannot update these configs at default cluster level, broker id must be "
                "specified: Set(sasl.kerberos.service.name)"))
            # a Kafka config that is not dynamic in Kafka either: Kafka's answer
            self.assertEqual(raw_alter(client, self.node, {"controller.quorum.voters": "1@h:9093"}),
                             (INVALID_REQUEST, refused_message(self.node, "controller.quorum.voters")))
        self.assertEqual(self.stored_layers(), ({"sasl.kerberos.min.time.before.relogin": "58000"}, {}))


class InForceTests(_Admin, unittest.TestCase):
    """Accepted keys take effect before the response is sent."""

    broker_scope = "test"
    broker_overrides = {"log.retention.check.interval.ms": 200, "log.segment.delete.delay.ms": 0}

    def test_message_max_bytes_admits_a_bigger_batch_for_an_existing_topic(self):
        topic = unique_name("t")
        futures_result(self.admin.create_topics([NewTopic(topic, 1)]))
        producer = Producer({"bootstrap.servers": self.broker.bootstrap_servers,
                             "message.max.bytes": 4 * 1024 * 1024, "compression.type": "none",
                             "retries": 0, "linger.ms": 0})
        value = os.urandom(2 * 1024 * 1024)

        def produce():
            outcome = []
            producer.produce(topic, value, partition=0,
                             on_delivery=lambda err, msg: outcome.append(err and err.name()))
            producer.flush(20)
            return outcome

        self.assertEqual(produce(), ["MSG_SIZE_TOO_LARGE"])
        futures_result(self.incremental([op("message.max.bytes", str(3 * 1024 * 1024))]))
        self.assertEqual(produce(), [None])
        entry = self.describe()["message.max.bytes"]
        self.assertEqual((entry.value, entry.source),
                         (str(3 * 1024 * 1024), ConfigSource.DYNAMIC_BROKER_CONFIG.value))
        self.assertEqual(self.stored_layers(), ({"message.max.bytes": str(3 * 1024 * 1024)}, {}))
        # deleting it puts the static default back in force at once
        futures_result(self.incremental([op("message.max.bytes", None, AlterConfigOpType.DELETE)]))
        self.assertEqual(produce(), ["MSG_SIZE_TOO_LARGE"])

    def test_broker_retention_deletes_old_segments_of_an_existing_topic(self):
        from confluent_kafka import Consumer, TopicPartition
        from kafka.admin import ConfigResource as KPResource, ConfigResourceType, KafkaAdminClient

        topic = unique_name("t")
        futures_result(self.admin.create_topics([NewTopic(topic, 1, config={"segment.ms": "1000"})]))
        producer = Producer({"bootstrap.servers": self.broker.bootstrap_servers, "linger.ms": 0})
        hour_ago = int(time.time() * 1000) - 3600 * 1000
        for i in range(3):  # old timestamps roll a segment per batch
            producer.produce(topic, b"v%d" % i, partition=0, timestamp=hour_ago + i)
            self.assertEqual(producer.flush(10), 0)
        consumer = Consumer({"bootstrap.servers": self.broker.bootstrap_servers, "group.id": topic})
        self.addCleanup(consumer.close)
        low = lambda: consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0]  # noqa: E731
        self.assertEqual(low(), 0)
        client = KafkaAdminClient(bootstrap_servers=self.broker.bootstrap_servers)
        self.addCleanup(client.close)
        result = client.alter_configs([KPResource(ConfigResourceType.BROKER, self.node,
                                                  configs={"log.retention.ms": "600000"})])
        self.assertEqual(result, {"broker": {self.node: "OK"}})
        # the topic has no retention override: the new broker default is its retention now
        entry = futures_result(self.admin.describe_configs([ConfigResource("TOPIC", topic)]))
        [configs] = entry.values()
        self.assertEqual((configs["retention.ms"].value, configs["retention.ms"].source),
                         ("600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value))
        poll_until(lambda: low() == 3, 15.0, 0.05, "log start offset 3 after retention")

    def test_max_connections_per_ip_refuses_the_next_connection(self):
        host, port = self.broker.bootstrap_servers.split(",")[0].rsplit(":", 1)
        with KafkaClient(self.broker.bootstrap_servers) as client:
            self.assertEqual(raw_alter(client, self.node, {"max.connections.per.ip": "1"}), (0, None))
            sock = socket.create_connection((host, int(port)), timeout=5)
            self.addCleanup(sock.close)
            self.assertTrue(closed_by_peer(sock))
            # the open connection stays; the cluster default level works the same way
            self.assertEqual(raw_describe(client, self.node, ["max.connections.per.ip"]),
                             {"max.connections.per.ip": ("1", 2)})
            self.assertEqual(raw_alter(client, self.node, {"max.connections.per.ip": None}), (0, None))
            self.assertEqual(raw_alter(client, "", {"max.connections.per.ip.overrides":
                                                    "%s:1" % host}), (0, None))
            sock = socket.create_connection((host, int(port)), timeout=5)
            self.addCleanup(sock.close)
            self.assertTrue(closed_by_peer(sock))
            self.assertEqual(raw_alter(client, "", {"max.connections.per.ip.overrides": None}),
                             (0, None))
        with KafkaClient(self.broker.bootstrap_servers) as other:  # connections welcome again
            self.assertEqual(raw_describe(other, ""), {})
        self.assertEqual(self.stored_layers(), ({}, {}))


class RestartTests(_Admin, unittest.TestCase):
    broker_scope = "test"

    def test_stored_keys_that_cannot_apply_are_ignored_at_start(self):
        futures_result(self.incremental([op("log.retention.ms", "3600000")]))
        self.broker.stop()
        path = os.path.join(self.broker.data_dir, "__kafkatw_metadata.json")
        with open(path) as f:
            state = json.load(f)
        state["broker_configs"].update({"log.dirs": "/elsewhere", "num.io.threads": "0"})
        with open(path, "w") as f:
            json.dump(state, f)
        self.broker.start()
        self.admin = AdminClient({"bootstrap.servers": self.broker.bootstrap_servers})
        configs = self.describe()
        self.assertEqual((configs["log.retention.ms"].value, configs["log.retention.ms"].source),
                         ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value))
        self.assertEqual((configs["num.io.threads"].value, configs["num.io.threads"].source),
                         ("8", ConfigSource.DEFAULT_CONFIG.value))
        self.assertEqual(configs["log.dirs"].value, self.broker.data_dir)
        log_text = "\n".join(self.broker.log_tail(400).splitlines())
        self.assertIn("Dynamic broker config log.dirs will be ignored: not a dynamic config",
                      log_text)
        self.assertIn("Dynamic broker config num.io.threads will be ignored: Invalid value 0 for "
                      "configuration num.io.threads: Value must be at least 1", log_text)


# -- in process ---------------------------------------------------------------------------------

@implementer(IBrokerReconfigurable)
class Recorder:
    def __init__(self, names, fail_validate=False, fail_reconfigure=False):
        self.reconfigurable_configs = frozenset(names)
        self.fail_validate = fail_validate
        self.fail_reconfigure = fail_reconfigure
        self.calls = []

    def validate_reconfiguration(self, new_config):
        if self.fail_validate:
            raise ConfigError("cannot apply %s" % sorted(self.reconfigurable_configs))

    def reconfigure(self, old_config, new_config):
        if self.fail_reconfigure:
            raise RuntimeError("boom")
        self.calls.append({n: new_config[n] for n in self.reconfigurable_configs})


class DynamicBrokerConfigTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.dynamic = DynamicBrokerConfig(KafkaConfig.from_properties({"num.io.threads": "4"}))
        self.seen = []
        self.dynamic.add_config_listener(lambda c: self.seen.append(c["num.io.threads"]))

    def test_key_without_a_component_is_refused(self):
        e = self.assertRaises(ConfigError, self.dynamic.update, dynamic_broker={"num.io.threads": "2"})
        self.assertEqual(str(e), "Cannot update these configs dynamically: Set(num.io.threads)")
        self.assertEqual(self.dynamic.current["num.io.threads"], 4)
        self.assertEqual(self.seen, [])

    def test_applied_then_current(self):
        io = Recorder(["num.io.threads"])
        other = Recorder(["max.connections"])
        self.dynamic.add_reconfigurable(io)
        self.dynamic.add_reconfigurable(other)
        new = self.dynamic.update(dynamic_broker={"num.io.threads": "2"})
        self.assertIs(self.dynamic.current, new)
        self.assertEqual((io.calls, other.calls, self.seen), ([{"num.io.threads": 2}], [], [2]))
        self.assertEqual(new.dynamic_broker, {"num.io.threads": "2"})

    def test_validate_only_applies_nothing(self):
        io = Recorder(["num.io.threads"])
        self.dynamic.add_reconfigurable(io)
        new = self.dynamic.update(dynamic_default={"num.io.threads": "2"}, validate_only=True)
        self.assertEqual(new["num.io.threads"], 2)  # a cluster default outranks the static value
        self.assertEqual((io.calls, self.seen, self.dynamic.current.dynamic_default), ([], [], {}))
        self.assertEqual(self.dynamic.current["num.io.threads"], 4)

    def test_validation_failure_changes_nothing(self):
        ok = Recorder(["num.io.threads"])
        bad = Recorder(["max.connections"], fail_validate=True)
        self.dynamic.add_reconfigurable(ok)
        self.dynamic.add_reconfigurable(bad)
        old = self.dynamic.current
        e = self.assertRaises(ConfigError, self.dynamic.update,
                              dynamic_broker={"num.io.threads": "2", "max.connections": "9"})
        self.assertEqual(str(e), "cannot apply ['max.connections']")
        self.assertIs(self.dynamic.current, old)
        self.assertEqual((ok.calls, bad.calls, self.seen), ([], [], []))

    def test_failed_reconfigure_puts_back_what_was_applied(self):
        first = Recorder(["num.io.threads"])
        second = Recorder(["max.connections"], fail_reconfigure=True)
        self.dynamic.add_reconfigurable(first)
        self.dynamic.add_reconfigurable(second)
        old = self.dynamic.current
        e = self.assertRaises(ConfigError, self.dynamic.update,
                              dynamic_broker={"num.io.threads": "2", "max.connections": "9"})
        self.assertEqual(str(e), "Invalid dynamic configuration: boom")
        self.assertIs(self.dynamic.current, old)
        self.assertEqual(first.calls, [{"num.io.threads": 2}, {"num.io.threads": 4}])
        self.assertEqual(self.seen, [2, 4])

    def test_bad_value_names_the_key(self):
        self.dynamic.add_reconfigurable(Recorder(["num.io.threads"]))
        e = self.assertRaises(ConfigError, self.dynamic.update, dynamic_broker={"num.io.threads": "0"})
        self.assertEqual(str(e), "Invalid value 0 for configuration num.io.threads: Value must be "
                                 "at least 1")

    def test_only_dynamic_keys_may_be_registered(self):
        self.assertRaises(AssertionError, self.dynamic.add_reconfigurable, Recorder(["log.dirs"]))
        self.assertRaises(Exception, self.dynamic.add_reconfigurable, object())

    def test_kafka_dynamic_keys_of_unimplemented_features_need_no_component(self):
        from twisted.logger import formatEvent, globalLogPublisher

        events = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        new = self.dynamic.update(dynamic_broker={"ssl.keymanager.algorithm": "PKIX"})
        self.assertEqual(new["ssl.keymanager.algorithm"], "PKIX")
        self.assertIs(self.dynamic.current, new)
        # accepted, and said to change nothing (once: setting the same value again is no change)
        self.dynamic.update(dynamic_broker={"ssl.keymanager.algorithm": "PKIX"})
        said = [formatEvent(e) for e in events if e.get("log_namespace") == "kafkatw.config.dynamic"]
        self.assertEqual(said, ["ssl.keymanager.algorithm is accepted for Kafka compatibility and has "
                                "no effect: kafkatw does not implement Java security providers and "
                                "JSSE: kafkatw's TLS is OpenSSL"])
        e = self.assertRaises(ConfigError, self.dynamic.update,
                              dynamic_default={"ssl.keymanager.algorithm": "PKIX"})
        self.assertEqual(str(e), "Cannot update these configs at default cluster level, broker id "
                                 "must be specified: Set(ssl.keymanager.algorithm)")
        # the cleaner's throttle is a cluster-level config in Kafka
        new = self.dynamic.update(dynamic_default={"log.cleaner.io.max.bytes.per.second": "1000"})
        self.assertEqual(new["log.cleaner.io.max.bytes.per.second"], 1000.0)
        e = self.assertRaises(ConfigError, self.dynamic.update,
                              dynamic_broker={"group.share.enable": "true"})
        self.assertEqual(str(e), "Cannot update these configs dynamically: Set(group.share.enable)")

    def test_persisted_non_dynamic_or_invalid_keys_are_ignored(self):
        kept, ignored = split_persisted(
            {"log.retention.ms": "5", "log.dirs": "/x", "num.io.threads": "0"},
            self.dynamic.current.definitions)
        self.assertEqual(kept, {"log.retention.ms": "5"})
        self.assertEqual(ignored, {
            "log.dirs": "not a dynamic config",
            "num.io.threads": "Invalid value 0 for configuration num.io.threads: Value must be at "
                              "least 1"})


class StoreFailureTests(unittest.SynchronousTestCase):
    def test_a_layer_that_cannot_be_stored_is_not_in_force(self):
        from types import SimpleNamespace

        from kafkatw.server.handlers import admin_configs

        class Metadata:
            def set_broker_configs(self, configs, default=False):
                raise OSError("No space left on device")

        config = KafkaConfig.from_properties({})
        dynamic = DynamicBrokerConfig(config)
        io = Recorder(["num.io.threads"])
        dynamic.add_reconfigurable(io)
        apis = SimpleNamespace(config=config, dynamic_config=dynamic, metadata=Metadata(), node_id=1)
        dynamic.add_config_listener(lambda c: setattr(apis, "config", c))
        self.assertRaises(OSError, admin_configs._apply_broker, apis, False, {"num.io.threads": "2"},
                          False)
        self.assertEqual((apis.config["num.io.threads"], apis.config.dynamic_broker), (8, {}))
        self.assertIs(dynamic.current, apis.config)
        self.assertEqual(io.calls, [{"num.io.threads": 2}, {"num.io.threads": 8}])


@implementer(IRequestHandler)
class _Handler:
    """Keeps every request waiting (its Deferred in ``pending``)."""

    def __init__(self):
        self.pending = []

    def api_versions(self):
        return {}

    def handle(self, request):
        from twisted.internet import defer

        d = defer.Deferred()
        self.pending.append((request, d))
        return d

    def handle_now(self, request):
        return self.handle(request)


class ComponentTests(unittest.SynchronousTestCase):
    def test_more_io_threads_take_waiting_requests_at_once(self):
        handler = _Handler()
        channel = RequestChannel(handler, lambda: 0, queued_max_requests=10, num_io_threads=1)

        class Req:
            api_local_complete_ns = None

        class Conn:
            def send_response(self, request, response):
                pass

        for _ in range(3):
            channel.send_request(Req(), Conn())
        self.assertEqual((len(handler.pending), channel.size), (1, 2))
        channel.resize(3)
        self.assertEqual((len(handler.pending), channel.size), (3, 0))

    def test_cleaner_backoff_applies_to_the_next_pass(self):
        clock = task.Clock()
        directory = self.mktemp()
        manager = LogManager([directory], {"log.cleaner.backoff.ms": 15000}, clock)
        manager.load_logs()
        manager.start()
        self.addCleanup(manager.shutdown)
        passes = []
        manager.cleaner.run_once = lambda: passes.append(clock.seconds())
        manager.set_cleaner_backoff(1000)
        clock.advance(1.0)
        self.assertEqual(passes, [1.0])
        clock.pump([1.0] * 14)
        self.assertEqual(passes, [float(t) for t in range(1, 16)])  # the 15 s loop is gone

    def test_replication_throttle_rates_are_in_force_at_once(self):
        """leader/follower.replication.throttled.rate through DynamicBrokerConfig reach the
        replica manager's two quotas: set per broker, from the cluster default, and removed."""
        from kafkatw.server.dynamic_config import DynamicReplicationQuotaConfig
        from tests.test_server_replica_manager import FakeLogManager, FakeMetadata

        clock = task.Clock()
        metadata = FakeMetadata({"t": 2})
        metadata.topic_configs = lambda topic: {"leader.replication.throttled.replicas": "0:1,1:2",
                                                "follower.replication.throttled.replicas": "*"}
        rm = ReplicaManager(FakeLogManager(self.mktemp()), metadata, clock, {})
        dynamic = DynamicBrokerConfig(KafkaConfig.from_properties({}))
        dynamic.add_reconfigurable(DynamicReplicationQuotaConfig(rm))
        leader, follower = rm.leader_quota, rm.follower_quota
        self.assertTrue(leader.unlimited and follower.unlimited)
        self.assertFalse(leader.throttles("t", 0, in_sync=False))  # no rate: nothing throttled

        dynamic.update(dynamic_broker={"leader.replication.throttled.rate": "1000",
                                       "follower.replication.throttled.rate": "2000"})
        self.assertEqual((leader.rate, follower.rate), (1000, 2000))
        self.assertTrue(leader.throttles("t", 0, in_sync=False))
        self.assertFalse(leader.throttles("t", 0, in_sync=True))  # in-sync replicas never are
        self.assertFalse(leader.throttles("t", 1, in_sync=False))  # 1:2 names another broker
        self.assertTrue(follower.throttles("t", 1, in_sync=False))
        # the bucket starts empty: the first window's bytes are all there is
        self.assertFalse(leader.is_quota_exceeded())
        leader.record(1001)
        self.assertTrue(leader.is_quota_exceeded())
        clock.advance(1.01)
        self.assertFalse(leader.is_quota_exceeded())

        # the cluster default applies where the broker sets nothing; deleting ends the throttle
        dynamic.update(dynamic_broker={}, dynamic_default={"leader.replication.throttled.rate": "500"})
        dynamic.update(dynamic_broker={})
        self.assertEqual((leader.rate, follower.unlimited), (500, True))
        dynamic.update(dynamic_default={})
        self.assertTrue(leader.unlimited)
        leader.record(10 ** 9)
        self.assertFalse(leader.is_quota_exceeded())

    def test_producer_id_expiration_applies_to_loaded_partitions(self):
        from tests.test_server_replica_manager import FakeLogManager, FakeMetadata, batch

        clock = task.Clock()
        rm = ReplicaManager(FakeLogManager(self.mktemp()), FakeMetadata({"t": 1}), clock,
                            {"producer.id.expiration.ms": 60000,
                             "producer.id.expiration.check.interval.ms": 500})
        rm.start()
        self.addCleanup(rm.shutdown)
        clock.advance(1)  # now = 1000 ms
        self.successResultOf(rm.append_records(1000, -1, {("t", 0): batch(pid=5, epoch=0, seq=0,
                                                                           ts=1000)}))
        DynamicProducerStateConfig(rm).reconfigure(None, KafkaConfig.from_properties(
            {"producer.id.expiration.ms": "1000"}))
        clock.advance(0.5)
        self.assertIn(5, rm.producer_state("t", 0).producers)
        clock.advance(0.5)  # idle for 1000 ms: gone at the next check, not after 60 s
        self.assertNotIn(5, rm.producer_state("t", 0).producers)
        self.assertEqual(rm.producer_id_expiration_ms, 1000)
