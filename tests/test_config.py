"""Tests for kafkatw.config: definitions, typing, validators, error wording, .properties parsing,
listeners, retention precedence, describe rows and topic config validation."""

import os

from twisted.logger import Logger, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from kafkatw import config as cfg
from kafkatw.config import kafka_config
from kafkatw.config import (
    BROKER_CONFIG_DEF,
    ConfigError,
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    Endpoint,
    KafkaConfig,
    Password,
    STATIC_BROKER_CONFIG,
    TOPIC_CONFIG_DEF,
    TOPIC_CONFIG_SYNONYMS,
    parse_override,
    parse_properties,
    validate_topic_config,
)


def make(**props):
    """KafkaConfig from keyword props with '_' standing for '.'."""
    return KafkaConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})


class DefaultsTests(SynchronousTestCase):
    def setUp(self):
        self.config = KafkaConfig.from_properties({})

    def test_kafka_defaults(self):
        c = self.config
        expected = {
            "listeners": "PLAINTEXT://127.0.0.1:9092",
            "node.id": 1,
            "num.partitions": 1,
            "default.replication.factor": 1,
            "auto.create.topics.enable": True,
            "delete.topic.enable": True,
            "log.segment.bytes": 1073741824,
            "log.roll.hours": 168,
            "log.retention.hours": 168,
            "log.retention.ms": None,
            "log.retention.bytes": -1,
            "log.retention.check.interval.ms": 300000,
            "log.index.interval.bytes": 4096,
            "log.index.size.max.bytes": 10485760,
            "log.cleanup.policy": ["delete"],
            "log.cleaner.min.cleanable.ratio": 0.5,
            "message.max.bytes": 1048588,
            "compression.type": "producer",
            "socket.request.max.bytes": 104857600,
            "socket.listen.backlog.size": 50,
            "queued.max.requests": 500,
            "num.io.threads": 8,
            "fetch.max.bytes": 57671680,
            "max.incremental.fetch.session.cache.slots": 1000,
            "fetch.purgatory.purge.interval.requests": 1000,
            "connections.max.idle.ms": 600000,
            "max.connections": 2147483647,
            "max.connections.per.ip": 2147483647,
            "offsets.topic.num.partitions": 50,
            "offsets.retention.minutes": 10080,
            "group.initial.rebalance.delay.ms": 3000,
            "group.min.session.timeout.ms": 6000,
            "group.max.session.timeout.ms": 1800000,
            "log.dir": "/tmp/kafka-logs",
            "log.dirs": None,
            "kafkatw.request.log.enable": False,
            "kafkatw.request.log.file": None,
            "ssl.client.auth": "none",
            "sasl.enabled.mechanisms": ["GSSAPI"],
        }
        actual = {name: c[name] for name in expected}
        self.assertEqual(actual, expected)

    def test_derived_defaults(self):
        c = self.config
        self.assertEqual(c.listeners, [Endpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)])
        self.assertEqual(c.advertised_listeners, c.listeners)
        self.assertEqual(c.log_dirs, ["/tmp/kafka-logs"])
        self.assertEqual(c.log_retention_ms, 168 * 3600 * 1000)
        self.assertEqual(c.log_roll_ms, 168 * 3600 * 1000)
        self.assertEqual(c.log_roll_jitter_ms, 0)
        self.assertEqual(c.log_flush_interval_ms, cfg.LONG_MAX)
        self.assertEqual(c.node_id, 1)
        self.assertEqual(c["broker.id"], 1)
        self.assertEqual(c.inter_broker_listener_name, "PLAINTEXT")
        self.assertEqual(c.listener_security_protocol_map, {
            "PLAINTEXT": "PLAINTEXT", "SSL": "SSL",
            "SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL"})
        self.assertEqual(c.unknown, {})
        self.assertEqual(c.originals, {})

    def test_every_source_is_default(self):
        for name in BROKER_CONFIG_DEF.names():
            self.assertEqual(self.config.source(name), DEFAULT_CONFIG, name)

    def test_every_synonym_is_defined(self):
        """Each broker synonym named in the topic table exists with a compatible type."""
        for topic_name, synonyms in TOPIC_CONFIG_SYNONYMS.items():
            self.assertIn(topic_name, TOPIC_CONFIG_DEF)
            for name in synonyms:
                self.assertIn(name, BROKER_CONFIG_DEF, (topic_name, name))

    def test_topic_defaults_match_topic_definitions(self):
        """With broker defaults, derived topic defaults equal the topic table's own defaults."""
        derived = self.config.topic_defaults()
        for key in TOPIC_CONFIG_DEF:
            self.assertEqual(derived[key.name], key.parse(key.default), key.name)
            self.assertIs(type(derived[key.name]), type(key.parse(key.default)), key.name)


class TypeTests(SynchronousTestCase):
    def test_int_is_trimmed(self):
        self.assertEqual(make(num_partitions=" 7 ")["num.partitions"], 7)

    def test_int_rejects_text(self):
        e = self.assertRaises(ConfigError, make, num_partitions="abc")
        self.assertEqual(str(e), "Invalid value abc for configuration num.partitions: "
                                 "Not a number of type INT")
        self.assertEqual((e.name, e.value), ("num.partitions", "abc"))

    def test_int_rejects_float_and_python_spellings(self):
        for bad in ("1.5", "1_000", "0x10", ""):
            e = self.assertRaises(ConfigError, make, num_io_threads=bad)
            self.assertIn("Not a number of type INT", str(e))

    def test_int_range_is_32_bit(self):
        self.assertEqual(make(max_connections="2147483647")["max.connections"], 2147483647)
        e = self.assertRaises(ConfigError, make, max_connections="2147483648")
        self.assertIn("Not a number of type INT", str(e))

    def test_long_range_is_64_bit(self):
        c = KafkaConfig.from_properties({"log.retention.bytes": "9223372036854775807"})
        self.assertEqual(c["log.retention.bytes"], 2 ** 63 - 1)
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties,
                              {"log.retention.bytes": "9223372036854775808"})
        self.assertIn("Not a number of type LONG", str(e))

    def test_short(self):
        c = KafkaConfig.from_properties({"offsets.topic.replication.factor": "3"})
        self.assertEqual(c["offsets.topic.replication.factor"], 3)
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties,
                              {"offsets.topic.replication.factor": "40000"})
        self.assertIn("Not a number of type SHORT", str(e))

    def test_boolean(self):
        self.assertIs(make(auto_create_topics_enable=" FALSE ")["auto.create.topics.enable"],
                      False)
        self.assertIs(make(auto_create_topics_enable="True")["auto.create.topics.enable"], True)
        e = self.assertRaises(ConfigError, make, auto_create_topics_enable="yes")
        self.assertEqual(str(e), "Invalid value yes for configuration auto.create.topics.enable: "
                                 "Expected value to be either true or false")

    def test_double(self):
        c = KafkaConfig.from_properties({"log.cleaner.min.cleanable.ratio": "0.25"})
        self.assertEqual(c["log.cleaner.min.cleanable.ratio"], 0.25)
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties,
                              {"log.cleaner.min.cleanable.ratio": "half"})
        self.assertIn("Not a number of type DOUBLE", str(e))

    def test_list(self):
        c = KafkaConfig.from_properties({"log.cleanup.policy": " compact , delete "})
        self.assertEqual(c["log.cleanup.policy"], ["compact", "delete"])
        c = KafkaConfig.from_properties({"ssl.cipher.suites": "  "})
        self.assertEqual(c["ssl.cipher.suites"], [])

    def test_string_is_trimmed(self):
        c = KafkaConfig.from_properties({"log.dirs": "  /a/b  "})
        self.assertEqual(c["log.dirs"], "/a/b")

    def test_password_is_hidden(self):
        c = KafkaConfig.from_properties({"ssl.keystore.password": "s3cret"})
        value = c["ssl.keystore.password"]
        self.assertIsInstance(value, Password)
        self.assertEqual(value.value, "s3cret")
        self.assertEqual(repr(value), "[hidden]")
        self.assertNotIn("s3cret", repr(c.describe(["ssl.keystore.password"])))

    def test_class(self):
        c = KafkaConfig.from_properties({"create.topic.policy.class.name": "my.pkg.Policy"})
        self.assertEqual(c["create.topic.policy.class.name"], "my.pkg.Policy")
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties,
                              {"create.topic.policy.class.name": "not a class"})
        self.assertIn("create.topic.policy.class.name", str(e))

    def test_typed_values_accepted(self):
        c = KafkaConfig.from_properties({"num.partitions": 3, "auto.create.topics.enable": False})
        self.assertEqual((c["num.partitions"], c["auto.create.topics.enable"]), (3, False))
        self.assertRaises(ConfigError, KafkaConfig.from_properties, {"num.partitions": True})


class ValidatorTests(SynchronousTestCase):
    def test_at_least(self):
        e = self.assertRaises(ConfigError, make, num_partitions="0")
        self.assertEqual(str(e), "Invalid value 0 for configuration num.partitions: "
                                 "Value must be at least 1")

    def test_between(self):
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties,
                              {"log.cleaner.min.cleanable.ratio": "1.5"})
        self.assertEqual(str(e), "Invalid value 1.5 for configuration "
                                 "log.cleaner.min.cleanable.ratio: Value must be no more than 1")

    def test_one_of(self):
        e = self.assertRaises(ConfigError, make, compression_type="brotli")
        self.assertEqual(str(e), "Invalid value brotli for configuration compression.type: "
                                 "String must be one of: uncompressed, zstd, lz4, snappy, gzip, "
                                 "producer")

    def test_list_one_of(self):
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties,
                              {"log.cleanup.policy": "delete,shred"})
        self.assertEqual(str(e), "Invalid value delete,shred for configuration log.cleanup.policy: "
                                 "String must be one of: compact, delete")

    def test_special_or_range(self):
        ok = KafkaConfig.from_properties({"compression.gzip.level": "-1"})
        self.assertEqual(ok["compression.gzip.level"], -1)
        ok = KafkaConfig.from_properties({"compression.gzip.level": "9"})
        self.assertEqual(ok["compression.gzip.level"], 9)
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties,
                              {"compression.gzip.level": "0"})
        self.assertEqual(str(e), "Invalid value 0 for configuration compression.gzip.level: "
                                 "Value must be [1,...,9] or -1")

    def test_valid_values_text(self):
        self.assertEqual(BROKER_CONFIG_DEF["num.partitions"].valid_values, "[1,...]")
        self.assertEqual(BROKER_CONFIG_DEF["log.cleaner.min.cleanable.ratio"].valid_values,
                         "[0,...,1]")
        self.assertEqual(BROKER_CONFIG_DEF["log.message.timestamp.type"].valid_values,
                         "[CreateTime, LogAppendTime]")
        self.assertEqual(BROKER_CONFIG_DEF["log.dirs"].valid_values, "")

    def test_error_is_one_line(self):
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties,
                              {"num.partitions": "1\n2"})
        self.assertNotIn("\n", str(e))
        self.assertIn("num.partitions", str(e))

    def test_error_hides_passwords(self):
        e = ConfigError.invalid("ssl.key.password", Password("pw"), "bad")
        self.assertEqual(str(e), "Invalid value [hidden] for configuration ssl.key.password: bad")

    def test_every_default_is_valid(self):
        for table in (BROKER_CONFIG_DEF, TOPIC_CONFIG_DEF):
            for key in table:
                key.parse(key.default)


class UnknownKeyTests(SynchronousTestCase):
    def setUp(self):
        self.events = []
        self.patch(kafka_config, "log", Logger(namespace="kafkatw.config", observer=self.events.append))

    def test_unknown_key_warns_and_is_kept(self):
        c = KafkaConfig.from_properties({"num.partitions": "2", "no.such.thing": "x"})
        self.assertEqual(c.unknown, {"no.such.thing": "x"})
        self.assertEqual(c.originals, {"num.partitions": "2", "no.such.thing": "x"})
        self.assertEqual([formatEvent(e) for e in self.events],
                         ["The configuration 'no.such.thing' was supplied but isn't a known "
                          "config."])
        self.assertEqual(self.events[0]["log_level"].name, "warn")
        self.assertRaises(KeyError, lambda: c["no.such.thing"])

    def test_kafka_keys_of_unimplemented_features_warn_with_the_feature(self):
        c = KafkaConfig.from_properties({"controller.quorum.voters": "1@h:9093",
                                         "sasl.kerberos.min.time.before.relogin": "58000"})
        self.assertEqual(c.unknown, {})
        self.assertEqual(c.unimplemented, ["controller.quorum.voters",
                                           "sasl.kerberos.min.time.before.relogin"])
        self.assertEqual(c["sasl.kerberos.min.time.before.relogin"], 58000)  # typed like Kafka's
        self.assertRaises(KeyError, lambda: c["controller.quorum.voters"])
        self.assertEqual([formatEvent(e) for e in self.events], [
            "controller.quorum.voters is a Kafka broker config that kafkatw ignores: it does not "
            "implement KRaft: kafkatw's cluster mode runs on ZooKeeper",
            "sasl.kerberos.min.time.before.relogin is accepted for Kafka compatibility and has no "
            "effect: kafkatw does not implement Kerberos (SASL/GSSAPI)"])
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties,
                              {"sasl.login.refresh.window.factor": "2"})
        self.assertEqual(str(e), "Invalid value 2 for configuration sasl.login.refresh.window.factor: "
                                 "Value must be no more than 1.0")

    def test_a_dynamic_change_does_not_repeat_the_start_up_warnings(self):
        c = KafkaConfig.from_properties({"no.such.thing": "x", "controller.quorum.voters": "1@h:9093"})
        self.assertEqual(len(self.events), 2)
        d = c.with_dynamic(dynamic_broker={"log.retention.ms": "1000"})
        self.assertEqual(d["log.retention.ms"], 1000)
        self.assertEqual((d.unknown, d.unimplemented), (c.unknown, c.unimplemented))
        self.assertEqual(len(self.events), 2)

    def test_listener_prefixed_keys_are_not_unknown(self):
        c = KafkaConfig.from_properties(
            {"listener.name.ssl.ssl.keystore.location": "/k.pem"})
        self.assertEqual(c.unknown, {})
        self.assertEqual(self.events, [])
        self.assertEqual(c.with_prefix("listener.name.ssl."), {"ssl.keystore.location": "/k.pem"})


class PropertiesParsingTests(SynchronousTestCase):
    def test_separators_and_comments(self):
        text = ("# comment\n"
                "! also a comment\n"
                "\n"
                "   \t\n"
                "a=1\n"
                "b : 2\n"
                "c 3\n"
                "  d=  spaced value  \n"
                "e=\n"
                "f\n"
                "g=x=y:z\n")
        self.assertEqual(parse_properties(text), {
            "a": "1", "b": "2", "c": "3", "d": "spaced value  ", "e": "", "f": "", "g": "x=y:z"})

    def test_continuation(self):
        text = "listeners=PLAINTEXT://:1,\\\n    SSL://:2\nnext=ok\n"
        self.assertEqual(parse_properties(text),
                         {"listeners": "PLAINTEXT://:1,SSL://:2", "next": "ok"})

    def test_continued_line_starting_with_hash_is_value(self):
        self.assertEqual(parse_properties("a=x\\\n#y\n"), {"a": "x#y"})

    def test_comment_line_does_not_continue(self):
        self.assertEqual(parse_properties("# c \\\na=1\n"), {"a": "1"})

    def test_even_backslashes_do_not_continue(self):
        self.assertEqual(parse_properties("a=x\\\\\nb=2\n"), {"a": "x\\", "b": "2"})

    def test_continuation_at_end_of_file(self):
        self.assertEqual(parse_properties("a=x\\"), {"a": "x"})

    def test_escapes(self):
        text = "k\\=ey\\ 1=t\\tn\\nu\\u00e9\\q\n"
        self.assertEqual(parse_properties(text), {"k=ey 1": "t\tn\nu\u00e9q"})

    def test_malformed_unicode_escape(self):
        e = self.assertRaises(ConfigError, parse_properties, "a=\\u12\n", "f.properties")
        self.assertEqual(str(e), "Malformed \\uxxxx encoding in f.properties line 1")

    def test_line_endings(self):
        self.assertEqual(parse_properties("a=1\r\nb=2\rc=3"), {"a": "1", "b": "2", "c": "3"})

    def test_last_duplicate_wins(self):
        self.assertEqual(parse_properties("a=1\na=2\n"), {"a": "2"})

    def test_parse_override(self):
        self.assertEqual(parse_override("log.dirs=/a=b"), ("log.dirs", "/a=b"))
        self.assertEqual(parse_override(" k =v"), ("k", "v"))
        self.assertRaises(ConfigError, parse_override, "novalue")
        self.assertRaises(ConfigError, parse_override, "=v")


class FileTests(SynchronousTestCase):
    def write(self, text, mode="w", encoding="utf-8"):
        path = self.mktemp()
        with open(path, mode, encoding=encoding) as f:
            f.write(text)
        return path

    def test_from_file_with_overrides(self):
        path = self.write("num.partitions=3\nlog.dirs=/x\n")
        c = KafkaConfig.from_file(path, overrides=["num.partitions=5", "node.id=4"])
        self.assertEqual((c["num.partitions"], c.log_dirs, c.node_id), (5, ["/x"], 4))
        self.assertEqual(c.source("num.partitions"), STATIC_BROKER_CONFIG)
        self.assertEqual(c.source_file, path)

    def test_from_file_without_path_uses_defaults(self):
        c = KafkaConfig.from_file(None, overrides=[("num.partitions", "2")])
        self.assertEqual(c["num.partitions"], 2)

    def test_missing_file(self):
        e = self.assertRaises(ConfigError, KafkaConfig.from_file, "/nonexistent/k.properties")
        self.assertEqual(str(e), "Cannot read config file /nonexistent/k.properties: "
                                 "No such file or directory")

    def test_latin1_file(self):
        path = self.write("broker.rack=r\u00e9\n", encoding="iso-8859-1")
        self.assertEqual(KafkaConfig.from_file(path)["broker.rack"], "r\u00e9")

    def test_sample_server_properties(self):
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        path = os.path.join(here, "etc", "server.properties")
        c = KafkaConfig.from_file(path)
        self.assertEqual(c.unknown, {})
        self.assertEqual(c.listeners, [Endpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)])
        self.assertEqual(c.log_dirs, ["data/kafka-logs"])
        self.assertEqual(c["num.partitions"], 1)
        self.assertIs(c.request_log_enabled, False)
        self.assertEqual(c["offsets.topic.replication.factor"], 1)


class ListenerTests(SynchronousTestCase):
    def test_several_listeners(self):
        c = KafkaConfig.from_properties({
            "listeners": "PLAINTEXT://:9092, ssl://localhost:9093,INTERNAL://[::1]:9094",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,internal:sasl_ssl",
        })
        self.assertEqual(c.listeners, [
            Endpoint("PLAINTEXT", "PLAINTEXT", "", 9092),
            Endpoint("SSL", "SSL", "localhost", 9093),
            Endpoint("INTERNAL", "SASL_SSL", "::1", 9094),
        ])
        self.assertEqual(str(c.listeners[2]), "INTERNAL://[::1]:9094")
        self.assertEqual(c.inter_broker_listener_name, "PLAINTEXT")

    def test_name_absent_from_map(self):
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties,
                              {"listeners": "CLIENT://:9092"})
        self.assertTrue(str(e).startswith(
            "Invalid value CLIENT://:9092 for configuration listeners: No security protocol "
            "defined for listener CLIENT"), str(e))

    def test_duplicate_names(self):
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties,
                              {"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"})
        self.assertEqual(str(e), "Invalid value PLAINTEXT://:1,PLAINTEXT://:2 for configuration "
                                 "listeners: Each listener must have a different name")

    def test_duplicate_ports(self):
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties,
                              {"listeners": "PLAINTEXT://:1,SSL://:1"})
        self.assertIn("Each listener must have a different port", str(e))

    def test_port_zero_may_repeat(self):
        c = KafkaConfig.from_properties({"listeners": "PLAINTEXT://:0,SSL://:0"})
        self.assertEqual([e.port for e in c.listeners], [0, 0])

    def test_unparsable(self):
        for bad in ("localhost:9092", "PLAINTEXT://host", "PLAINTEXT://host:port"):
            e = self.assertRaises(ConfigError, KafkaConfig.from_properties, {"listeners": bad})
            self.assertIn("Unable to parse", str(e))
            self.assertIn("configuration listeners", str(e))

    def test_port_out_of_range(self):
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties,
                              {"listeners": "PLAINTEXT://:70000"})
        self.assertIn("port 70000 of listener PLAINTEXT is not between 0 and 65535", str(e))

    def test_empty_listeners(self):
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties, {"listeners": ""})
        self.assertIn("at least one listener is required", str(e))

    def test_bad_protocol_map(self):
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties,
                              {"listener.security.protocol.map": "PLAINTEXT:TLS"})
        self.assertIn("security protocol TLS of listener PLAINTEXT is not one of", str(e))
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties,
                              {"listener.security.protocol.map": "PLAINTEXT"})
        self.assertIn("must be of the form LISTENER_NAME:SECURITY_PROTOCOL", str(e))

    def test_advertised_listeners(self):
        c = KafkaConfig.from_properties({"listeners": "PLAINTEXT://:9092",
                                         "advertised.listeners": "PLAINTEXT://broker1:19092"})
        self.assertEqual(c.advertised_listeners,
                         [Endpoint("PLAINTEXT", "PLAINTEXT", "broker1", 19092)])
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties,
                              {"advertised.listeners": "SSL://h:1"})
        self.assertIn("listener SSL is not defined in listeners", str(e))
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties,
                              {"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"})
        self.assertIn("cannot use the nonroutable meta-address 0.0.0.0", str(e))
        c = KafkaConfig.from_properties({"listeners": "PLAINTEXT://0.0.0.0:9092"})
        self.assertEqual(c.listeners[0].host, "0.0.0.0")
        self.assertEqual(c.advertised_listeners[0].host, "")

    def test_inter_broker_listener(self):
        c = KafkaConfig.from_properties({"listeners": "SSL://:9093"})
        self.assertEqual(c.inter_broker_listener_name, "SSL")
        c = KafkaConfig.from_properties({"listeners": "PLAINTEXT://:1,SSL://:2",
                                         "inter.broker.listener.name": "ssl"})
        self.assertEqual(c.inter_broker_listener_name, "SSL")
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties,
                              {"inter.broker.listener.name": "SSL"})
        self.assertIn("inter.broker.listener.name", str(e))

    def assertOnlyDefaultAccepted(self, props, key, default, value, message):
        """``key`` left unset reads ``default``; set to ``value`` it stops the config with
        exactly ``message`` (accepted but not honoured is refused)."""
        self.assertEqual(KafkaConfig.from_properties(props)[key], default)
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties, dict(props, **{key: value}))
        self.assertEqual(str(e), "Invalid value %s for configuration %s: %s" % (value, key, message))

    def test_a_bound_on_queued_request_bytes_is_refused_not_ignored(self):
        key = "queued.max.request.bytes"
        self.assertEqual(KafkaConfig.from_properties({key: "-1"})[key], -1)
        self.assertOnlyDefaultAccepted({}, key, -1, "104857600",
                                       "kafkatw bounds queued requests by count (queued.max.requests), "
                                       "not by bytes; only -1 is accepted")

    def test_early_start_listeners_are_refused_not_ignored(self):
        """Kafka's listeners named there accept before the authorizer has started; every
        listener of kafkatw waits for it."""
        self.assertOnlyDefaultAccepted({"listeners": "PLAINTEXT://:1"}, "early.start.listeners", None,
                                       "PLAINTEXT", "kafkatw starts no listener early: every listener "
                                       "accepts once the authorizer has started")

    def test_a_control_plane_listener_is_refused_not_ignored(self):
        """Kafka would send the controller's requests there; kafkatw's take the inter-broker
        listener whatever it says."""
        props = {"listeners": "PLAINTEXT://:1,CONTROL://:2",
                 "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROL:PLAINTEXT"}
        self.assertOnlyDefaultAccepted(props, "control.plane.listener.name", None, "CONTROL",
                                       "kafkatw has no separate control plane listener: controller "
                                       "traffic uses inter.broker.listener.name")


class DerivedTests(SynchronousTestCase):
    def test_retention_precedence(self):
        self.assertEqual(make(log_retention_hours="1").log_retention_ms, 3600000)
        self.assertEqual(KafkaConfig.from_properties(
            {"log.retention.hours": "1", "log.retention.minutes": "2"}).log_retention_ms, 120000)
        self.assertEqual(KafkaConfig.from_properties(
            {"log.retention.hours": "1", "log.retention.minutes": "2",
             "log.retention.ms": "5"}).log_retention_ms, 5)

    def test_retention_negative_is_unlimited(self):
        self.assertEqual(make(log_retention_ms="-1").log_retention_ms, -1)
        self.assertEqual(make(log_retention_minutes="-5").log_retention_ms, -1)
        self.assertEqual(make(log_retention_hours="-1").log_retention_ms, -1)

    def test_retention_zero_is_refused(self):
        e = self.assertRaises(ConfigError, make, log_retention_ms="0")
        self.assertIn("configuration log.retention.ms", str(e))
        e = self.assertRaises(ConfigError, make, log_retention_hours="0")
        self.assertIn("configuration log.retention.hours", str(e))

    def test_roll(self):
        self.assertEqual(make(log_roll_hours="2").log_roll_ms, 7200000)
        self.assertEqual(KafkaConfig.from_properties(
            {"log.roll.hours": "2", "log.roll.ms": "1000"}).log_roll_ms, 1000)
        self.assertRaises(ConfigError, make, log_roll_hours="0")

    def test_topic_defaults_follow_broker_synonyms(self):
        c = KafkaConfig.from_properties({"log.retention.minutes": "3", "log.roll.ms": "10",
                                         "message.max.bytes": "100",
                                         "log.flush.scheduler.interval.ms": "7",
                                         "log.cleanup.policy": "compact"})
        d = c.topic_defaults()
        self.assertEqual((d["retention.ms"], d["segment.ms"], d["max.message.bytes"],
                          d["flush.ms"], d["cleanup.policy"]),
                         (180000, 10, 100, 7, ["compact"]))

    def test_node_id_and_broker_id(self):
        self.assertEqual(make(broker_id="5").node_id, 5)
        self.assertEqual(make(node_id="6").node_id, 6)
        self.assertEqual(make(node_id="6")["broker.id"], 6)
        self.assertEqual(make(node_id="6", broker_id="6").node_id, 6)
        e = self.assertRaises(ConfigError, make, node_id="6", broker_id="7")
        self.assertEqual(str(e), "broker.id (7) must be equal to node.id (6)")
        self.assertRaises(ConfigError, make, node_id="-1")

    def test_log_dirs(self):
        self.assertEqual(make(log_dir="/one").log_dirs, ["/one"])
        c = KafkaConfig.from_properties({"log.dir": "/one", "log.dirs": "/a, b/c ,"})
        self.assertEqual(c.log_dirs, ["/a", "b/c"])
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties, {"log.dirs": "/a,/a/"})
        self.assertIn("a directory is listed twice", str(e))
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties, {"log.dirs": " , "})
        self.assertIn("at least one directory", str(e))

    def test_replica_fetch_wait_within_socket_timeout_and_lag(self):
        self.assertEqual(make(replica_fetch_wait_max_ms="1000", replica_socket_timeout_ms="1000",
                              replica_lag_time_max_ms="1000")["replica.fetch.wait.max.ms"], 1000)
        e = self.assertRaises(ConfigError, make, replica_fetch_wait_max_ms="2000",
                              replica_socket_timeout_ms="1000")
        self.assertIn("must not be greater than replica.socket.timeout.ms (1000)", str(e))
        e = self.assertRaises(ConfigError, make, replica_fetch_wait_max_ms="2000",
                              replica_lag_time_max_ms="1000")
        self.assertIn("must not be greater than replica.lag.time.max.ms (1000)", str(e))

    def test_ip_overrides(self):
        c = KafkaConfig.from_properties(
            {"max.connections.per.ip.overrides": "127.0.0.1:5, host.example:7, ::1:2"})
        self.assertEqual(c.max_connections_per_ip_overrides,
                         {"127.0.0.1": 5, "host.example": 7, "::1": 2})
        e = self.assertRaises(ConfigError, KafkaConfig.from_properties,
                              {"max.connections.per.ip.overrides": "hostonly"})
        self.assertIn("must be of the form host:count", str(e))

    def test_super_users_and_request_log(self):
        c = KafkaConfig.from_properties({"super.users": "User:a; User:b;",
                                         "kafkatw.request.log.enable": "true",
                                         "kafkatw.request.log.file": "r.log"})
        self.assertEqual(c.super_users, ["User:a", "User:b"])
        self.assertEqual((c.request_log_enabled, c.request_log_file), (True, "r.log"))


class DescribeTests(SynchronousTestCase):
    def test_rows(self):
        c = KafkaConfig.from_properties({"num.partitions": "3"})
        rows = {r.name: r for r in c.describe()}
        self.assertEqual(set(rows), set(BROKER_CONFIG_DEF.names()))
        np = rows["num.partitions"]
        self.assertEqual((np.value, np.source, np.source_name, np.is_default, np.read_only,
                          np.is_sensitive, np.config_type, np.default),
                         ("3", STATIC_BROKER_CONFIG, "STATIC_BROKER_CONFIG", False, True,
                          False, 3, "1"))
        self.assertTrue(np.documentation)
        self.assertEqual(rows["log.cleanup.policy"].value, "delete")
        self.assertEqual(rows["auto.create.topics.enable"].value, "true")
        self.assertEqual(rows["log.retention.ms"].value, None)
        self.assertEqual(rows["log.cleaner.min.cleanable.ratio"].value, "0.5")
        self.assertIs(rows["log.retention.hours"].read_only, False)

    def test_dynamic_layers_and_synonyms(self):
        c = KafkaConfig.from_properties({"log.retention.minutes": "10"}).with_dynamic(
            dynamic_broker={"log.retention.ms": "1000"},
            dynamic_default={"log.retention.ms": "2000", "num.io.threads": "4"})
        self.assertEqual(c.log_retention_ms, 1000)
        self.assertEqual(c.source("log.retention.ms"), DYNAMIC_BROKER_CONFIG)
        self.assertEqual(c.source("num.io.threads"), DYNAMIC_DEFAULT_BROKER_CONFIG)
        (row,) = c.describe(["log.retention.ms"], include_synonyms=True)
        self.assertEqual([(s.name, s.value, s.source) for s in row.synonyms], [
            ("log.retention.ms", "1000", DYNAMIC_BROKER_CONFIG),
            ("log.retention.ms", "2000", DYNAMIC_DEFAULT_BROKER_CONFIG),
            ("log.retention.minutes", "10", STATIC_BROKER_CONFIG),
            ("log.retention.hours", "168", DEFAULT_CONFIG),
        ])

    def test_dynamic_values_are_validated(self):
        c = KafkaConfig.from_properties({})
        e = self.assertRaises(ConfigError, c.with_dynamic, dynamic_broker={"num.io.threads": "0"})
        self.assertIn("num.io.threads", str(e))

    def test_unknown_names_skipped(self):
        self.assertEqual(KafkaConfig.from_properties({}).describe(["nope"]), [])


class TopicConfigTests(SynchronousTestCase):
    def test_typed(self):
        typed = validate_topic_config({"retention.ms": "-1", "cleanup.policy": "compact,delete",
                                       "min.cleanable.dirty.ratio": "0.1",
                                       "preallocate": "true", "segment.bytes": "1048576",
                                       "message.timestamp.type": "LogAppendTime"})
        self.assertEqual(typed, {"retention.ms": -1, "cleanup.policy": ["compact", "delete"],
                                 "min.cleanable.dirty.ratio": 0.1, "preallocate": True,
                                 "segment.bytes": 1048576,
                                 "message.timestamp.type": "LogAppendTime"})

    def test_none_passes_through(self):
        self.assertEqual(validate_topic_config({"retention.ms": None}), {"retention.ms": None})

    def test_unknown_name(self):
        e = self.assertRaises(ConfigError, validate_topic_config, {"retention.days": "1"})
        self.assertEqual(str(e), "Unknown topic config name: retention.days")

    def test_bad_values(self):
        cases = {
            "retention.ms": ("-2", "Value must be at least -1"),
            "segment.bytes": ("1024", "Value must be at least 1048576"),
            "cleanup.policy": ("remove", "String must be one of: compact, delete"),
            "max.message.bytes": ("big", "Not a number of type INT"),
            "min.cleanable.dirty.ratio": ("2", "Value must be no more than 1"),
            "unclean.leader.election.enable": ("maybe", "Expected value to be either true or "
                                                        "false"),
        }
        for name, (value, reason) in cases.items():
            e = self.assertRaises(ConfigError, validate_topic_config, {name: value})
            self.assertEqual(str(e), "Invalid value %s for configuration %s: %s"
                             % (value, name, reason))

    def test_compaction_lag_conflict(self):
        e = self.assertRaises(ConfigError, validate_topic_config,
                              {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
        self.assertEqual(str(e), "conflict topic config setting min.compaction.lag.ms (10) > "
                                 "max.compaction.lag.ms (5)")


class OneTopicTableTests(SynchronousTestCase):
    """The topic configs are defined once (kafkatw.config.topic); storage's LogConfig, the
    DescribeConfigs defaults and the AlterConfigs validation all read that table."""

    def test_log_config_has_exactly_the_table(self):
        from kafkatw.storage import LogConfig

        values = LogConfig().to_dict()
        self.assertEqual(sorted(values), sorted(TOPIC_CONFIG_DEF.names()))
        for key in TOPIC_CONFIG_DEF:
            default = key.parse(key.default)
            self.assertEqual(values[key.name], tuple(default) if isinstance(default, list)
                             else default, key.name)

    def test_broker_defaults_resolve_the_same_for_storage_and_describe(self):
        from kafkatw.storage import LogConfig

        config = KafkaConfig.from_properties({
            "log.retention.minutes": "30", "log.roll.hours": "2", "log.cleanup.policy": "compact",
            "log.cleaner.min.cleanable.ratio": "0.25", "compression.type": "zstd",
            "log.flush.scheduler.interval.ms": "5000", "message.max.bytes": "2000000"})
        described = config.topic_defaults()
        stored = LogConfig.from_props(config.values()).to_dict()
        expected = {"retention.ms": 30 * 60000, "segment.ms": 2 * 3600000,
                    "min.cleanable.dirty.ratio": 0.25, "compression.type": "zstd",
                    "flush.ms": 5000, "max.message.bytes": 2000000}
        for name, value in expected.items():
            self.assertEqual((described[name], stored[name]), (value, value), name)
        self.assertEqual(described["cleanup.policy"], ["compact"])
        self.assertEqual(stored["cleanup.policy"], ("compact",))
        self.assertEqual(set(described), set(stored))
        # unlimited retention from any synonym is -1
        config = KafkaConfig.from_properties({"log.retention.hours": "-1"})
        self.assertEqual(config.topic_defaults()["retention.ms"], -1)
        self.assertEqual(LogConfig.from_props(config.values()).retention_ms, -1)

    def test_log_config_values_as_attributes(self):
        """Every value of the table is an attribute in Python spelling (a slot: see LogConfig),
        an unknown config one too where a name can spell it, kept verbatim."""
        from kafkatw.storage import LogConfig

        config = LogConfig({"segment.bytes": "2048", "cleanup.policy": "compact,delete",
                            "custom.thing": "x", "odd_name": 1})
        for key in TOPIC_CONFIG_DEF:
            self.assertEqual(getattr(config, key.name.replace(".", "_")), config.get(key.name))
        self.assertEqual(config.segment_bytes, 2048)
        self.assertEqual((config.compact, config.delete, config.log_append_time), (True, True, False))
        self.assertEqual((config.custom_thing, config.get("odd_name")), ("x", 1))
        self.assertEqual(vars(config), {"custom_thing": "x"})

    def test_log_config_validates_with_the_table(self):
        from kafkatw.storage import LogConfig

        e = self.assertRaises(ConfigError, LogConfig, {"compression.type": "brotli"})
        self.assertEqual(str(e), "Invalid value brotli for configuration compression.type: String "
                                 "must be one of: uncompressed, zstd, lz4, snappy, gzip, producer")
        e = self.assertRaises(ConfigError, LogConfig, {"retention.ms": "soon"})
        self.assertEqual(str(e), "Invalid value soon for configuration retention.ms: Not a number "
                                 "of type LONG")
        self.assertRaises(ConfigError, LogConfig, {"min.cleanable.dirty.ratio": 1.5})

    def test_segment_floor_is_lower_for_storage_than_for_admins(self):
        from kafkatw.storage import LogConfig

        self.assertEqual(LogConfig({"segment.bytes": "14"}).segment_bytes, 14)
        e = self.assertRaises(ConfigError, LogConfig, {"segment.bytes": 13})
        self.assertEqual(str(e), "Invalid value 13 for configuration segment.bytes: Value must be "
                                 "at least 14")
        self.assertRaises(ConfigError, validate_topic_config, {"segment.bytes": "14"})


def _imports(path):
    """Names of the kafkatw modules a source file imports (relative imports resolved)."""
    import ast

    package = os.path.relpath(os.path.dirname(path), _ROOT).replace(os.sep, ".")
    out = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                out.add(base + ("." + node.module if node.module else ""))
            else:
                out.add(node.module)
    return {name for name in out if name == "kafkatw" or name.startswith("kafkatw.")}


_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(cfg.__file__))))


class PackageTests(SynchronousTestCase):
    def test_package_re_exports_each_module_s_public_names(self):
        from kafkatw.config import broker, dynamic, listeners, properties, topic, types

        self.assertEqual(sorted(cfg.__all__), sorted(set(cfg.__all__)))
        for name in cfg.__all__:
            self.assertTrue(hasattr(cfg, name), name)
        self.assertIs(cfg.KafkaConfig, kafka_config.KafkaConfig)
        self.assertIs(cfg.TOPIC_CONFIG_DEF, topic.TOPIC_CONFIG_DEF)
        self.assertIs(cfg.BROKER_CONFIG_DEF, broker.BROKER_CONFIG_DEF)
        self.assertIs(cfg.parse_properties, properties.parse_properties)
        self.assertIs(cfg.Endpoint, listeners.Endpoint)
        self.assertIs(cfg.ConfigError, types.ConfigError)
        self.assertIs(cfg.DYNAMIC_BROKER_CONFIGS, dynamic.DYNAMIC_BROKER_CONFIGS)


class LayeringTests(SynchronousTestCase):
    """docs/architecture.md: storage imports protocol and the config definitions that import
    nothing else of the broker (kafkatw.config.types and kafkatw.config.topic), and the leaf
    kafkatw.background_failures."""

    def test_config_definitions_import_nothing_else(self):
        config_dir = os.path.dirname(cfg.__file__)
        self.assertEqual(_imports(os.path.join(config_dir, "types.py")), set())
        self.assertEqual(_imports(os.path.join(config_dir, "topic.py")), {"kafkatw.config.types"})
        self.assertEqual(_imports(os.path.join(_ROOT, "kafkatw", "background_failures.py")), set())
        self.assertEqual(_imports(os.path.join(_ROOT, "kafkatw", "crash_points.py")), set())

    def test_storage_imports_only_protocol_and_config_definitions(self):
        storage_dir = os.path.join(_ROOT, "kafkatw", "storage")
        allowed = ("kafkatw.protocol", "kafkatw.storage", "kafkatw.config.types",
                   "kafkatw.config.topic", "kafkatw.background_failures",
                   "kafkatw.crash_points")
        for name in sorted(os.listdir(storage_dir)):
            if name.endswith(".py"):
                bad = [m for m in _imports(os.path.join(storage_dir, name))
                       if not any(m == a or m.startswith(a + ".") for a in allowed)]
                self.assertEqual(bad, [], name)
