"""Every console action against a real broker, over HTTP as the page sends it, each checked with
a real client afterwards: add partitions, alter and reset a topic config, delete records, reset a
group's offsets to an offset and to a timestamp, delete a group, delete a topic; bad parameters
answered with one line; the message browser bounded in bytes.
"""

import json
import time

from twisted.trial import unittest

from kafkatw.testing import KafkaBrokerMixin
from tests.support import poll_until, unique_name
from tests.test_console_security import http

N = 10
# records are 1 s apart from here: an hour ago, well inside the default retention (a timestamp
# older than retention.ms would let a retention check delete the records mid-test)
BASE_TS = (int(time.time()) - 3600) * 1000


class ConsoleActionTests(KafkaBrokerMixin, unittest.TestCase):
    broker_overrides = {"kafkatw.console.listener": "127.0.0.1:0"}
    timeout = 120

    def setUp(self):
        super().setUp()
        self.port = self.broker.console_port
        self.token = http(self.port, "api/session")[1]["csrfToken"]

    def act(self, action, **params):
        params.setdefault("confirm", True)
        return http(self.port, "api/actions/" + action, method="POST", body=params,
                    headers={"X-CSRF-Token": self.token})[:2]

    def admin(self):
        """One admin client per test, kept (a collected client fails its futures)."""
        from confluent_kafka.admin import AdminClient

        if getattr(self, "_admin", None) is None:
            self._admin = AdminClient({"bootstrap.servers": self.broker.bootstrap_servers})
        return self._admin

    def topic(self, partitions=1, records=N):
        name = unique_name("act")
        self.assertEqual(self.act("create-topic", topic=name, partitions=partitions),
                         (200, {"done": "created topic %s with %d partitions" % (name, partitions)}))
        if records:
            from confluent_kafka import Producer

            p = Producer({"bootstrap.servers": self.broker.bootstrap_servers})
            for i in range(records):
                p.produce(name, partition=0, value=b"v%d" % i, timestamp=BASE_TS + 1000 * i)
            self.assertEqual(p.flush(30), 0)
        return name

    def detail(self, name):
        status, doc, _ = http(self.port, "api/topics/" + name)
        self.assertEqual(status, 200)
        return doc

    def test_add_partitions(self):
        name = self.topic(partitions=2, records=0)
        self.assertEqual(self.act("add-partitions", topic=name, partitions=5),
                         (200, {"done": "%s has 5 partitions" % name}))
        md = self.admin().list_topics(name, timeout=10)
        self.assertEqual(sorted(md.topics[name].partitions), [0, 1, 2, 3, 4])
        status, doc = self.act("add-partitions", topic=name, partitions=3)
        self.assertEqual(status, 400)
        self.assertTrue(doc["error"].startswith("add partitions to %s: INVALID_PARTITIONS" % name), doc)

    def test_alter_and_reset_a_config(self):
        name = self.topic(records=0)
        self.assertEqual(self.act("alter-config", topic=name, name="retention.ms", value="3600000"),
                         (200, {"done": "retention.ms of %s set to 3600000" % name}))
        configs = {c["name"]: c for c in self.detail(name)["configs"]}
        self.assertEqual((configs["retention.ms"]["value"], configs["retention.ms"]["isDefault"],
                          configs["retention.ms"]["source"]), ("3600000", False, "topic"))
        from confluent_kafka.admin import ConfigResource

        (future,) = self.admin().describe_configs([ConfigResource("topic", name)]).values()
        self.assertEqual(future.result(15)["retention.ms"].value, "3600000")
        self.assertEqual(self.act("alter-config", topic=name, name="retention.ms", value=None),
                         (200, {"done": "retention.ms of %s reset to its default" % name}))
        configs = {c["name"]: c for c in self.detail(name)["configs"]}
        self.assertEqual((configs["retention.ms"]["value"], configs["retention.ms"]["isDefault"]), ("604800000", True))
        status, doc = self.act("alter-config", topic=name, name="retention.ms", value="soon")
        self.assertEqual(status, 400)
        self.assertIn("INVALID_CONFIG", doc["error"])

    def test_delete_records(self):
        name = self.topic()
        self.assertEqual(self.act("delete-records", topic=name, partition=0, offset=4),
                         (200, {"done": "%s-0 now starts at offset 4" % name, "lowWatermark": 4}))
        (p0,) = self.detail(name)["partitions"]
        self.assertEqual((p0["startOffset"], p0["endOffset"]), (4, N))
        doc = http(self.port, "api/messages/%s?partition=0" % name)[1]
        self.assertEqual([r["offset"] for r in doc["records"]], list(range(4, N)))
        self.assertEqual(self.act("delete-records", topic=name, partition=0, offset="four"),
                         (400, {"error": "offset must be an integer, not 'four'"}))

    def commit(self, group, topic, offset):
        from kafka import KafkaConsumer, TopicPartition
        from kafka.structs import OffsetAndMetadata

        c = KafkaConsumer(bootstrap_servers=self.broker.bootstrap_servers, group_id=group, enable_auto_commit=False)
        try:
            c.commit({TopicPartition(topic, 0): OffsetAndMetadata(offset, "", -1)})
        finally:
            c.close()

    def committed(self, group, topic):
        doc = http(self.port, "api/groups/" + group)[1]
        return {(p["topic"], p["partition"]): (p["committed"], p["lag"]) for p in doc["partitions"]}

    def test_reset_offsets_and_delete_the_group(self):
        name = self.topic()
        group = unique_name("g")
        self.commit(group, name, N)
        self.assertEqual(self.committed(group, name), {(name, 0): (N, 0)})
        self.assertEqual(self.act("reset-offsets", group=group, topic=name, to="offset", offset=3),
                         (200, {"done": "reset %s on %s: 0->3" % (group, name), "offsets": {"0": 3}}))
        self.assertEqual(self.committed(group, name), {(name, 0): (3, N - 3)})
        # the first record at or after a time (records are 1 s apart from BASE_TS)
        self.assertEqual(self.act("reset-offsets", group=group, topic=name, to="timestamp",
                                  timestamp=BASE_TS + 6500)[1]["offsets"], {"0": 7})
        self.assertEqual(self.act("reset-offsets", group=group, topic=name, to="latest")[1]["offsets"], {"0": N})
        # an offset past the end is clamped to it, as Kafka's tool does
        self.assertEqual(self.act("reset-offsets", group=group, topic=name, to="offset", offset=999)[1]["offsets"],
                         {"0": N})
        self.assertEqual(self.act("reset-offsets", group=group, topic=name, to="sometime"),
                         (400, {"error": "to must be earliest, latest, offset or timestamp, not 'sometime'"}))
        # kafka-python's own view of the committed offset
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=self.broker.bootstrap_servers)
        try:
            offsets = admin.list_group_offsets(group)[group]
            self.assertEqual({tp.partition: om.offset for tp, om in offsets.items()}, {0: N})
        finally:
            admin.close()
        self.assertEqual(self.act("delete-group", group=group), (200, {"done": "deleted group %s" % group}))
        groups = http(self.port, "api/groups")[1]["groups"]
        self.assertNotIn(group, [g["groupId"] for g in groups])

    def test_delete_topic(self):
        name = self.topic()
        self.assertEqual(self.act("delete-topic", topic=name), (200, {"done": "deleted topic %s" % name}))
        poll_until(lambda: name not in self.admin().list_topics(timeout=10).topics, timeout=15,
                   message="the topic to be gone")
        self.assertNotIn(name, [t["name"] for t in http(self.port, "api/topics")[1]["topics"]])
        self.assertEqual(self.act("delete-topic", topic=name),
                         (400, {"error": "delete topic %s: UNKNOWN_TOPIC_OR_PARTITION: This server does not host "
                                         "this topic-partition." % name}))

    def test_bad_requests_are_one_line(self):
        self.assertEqual(self.act("create-topic", topic=""), (400, {"error": "topic is required"}))
        self.assertEqual(self.act("create-topic", topic="x", partitions="many"),
                         (400, {"error": "partitions must be an integer, not 'many'"}))
        self.assertEqual(self.act("no-such-action")[0], 404)
        self.assertEqual(http(self.port, "api/no-such-view")[:2], (404, {"error": "no such view"}))
        self.assertEqual(http(self.port, "api/messages/x?partition=-1")[:2],
                         (400, {"error": "partition must be within 0..None"}))
        self.assertEqual(http(self.port, "api/messages/x?offset=1&timestamp=2")[:2],
                         (400, {"error": "give an offset or a timestamp, not both"}))

    def test_browse_is_bounded_in_bytes(self):
        from confluent_kafka import Producer

        name = self.topic(records=0)
        p = Producer({"bootstrap.servers": self.broker.bootstrap_servers, "linger.ms": 0})
        for i in range(20):  # one batch each: 20 batches of a little over 1 KiB
            p.produce(name, partition=0, value=json.dumps({"i": i, "pad": "x" * 1000}).encode())
            p.flush(10)
        doc = http(self.port, "api/messages/%s?partition=0&maxBytes=4096&limit=500" % name)[1]
        self.assertLessEqual(doc["fetchedBytes"], 4096)
        self.assertEqual([r["offset"] for r in doc["records"]], [0, 1, 2])
        self.assertEqual(json.loads(doc["records"][2]["value"]["text"])["i"], 2)
        doc = http(self.port, "api/messages/%s?partition=0&offset=18" % name)[1]
        self.assertEqual([r["offset"] for r in doc["records"]], [18, 19])
        self.assertEqual(http(self.port, "api/messages/%s?partition=0&maxBytes=99" % name)[:2],
                         (400, {"error": "maxBytes must be within 1024..1048576"}))

    def test_overview(self):
        name = self.topic(partitions=3)
        status, doc, _ = http(self.port, "api/overview")
        self.assertEqual(status, 200)
        self.assertEqual(doc["brokers"], [{"id": 1, "host": "127.0.0.1", "port": self.broker.port, "rack": None}])
        self.assertEqual(doc["controllerId"], 1)
        self.assertEqual(doc["listeners"], [{"name": "PLAINTEXT", "securityProtocol": "PLAINTEXT",
                                             "host": "127.0.0.1", "port": self.broker.port}])
        topics = http(self.port, "api/topics")[1]["topics"]
        self.assertIn(name, [t["name"] for t in topics])
        self.assertEqual((doc["topics"], doc["partitions"], doc["underReplicated"], doc["offline"]),
                         (len(topics), sum(t["partitions"] for t in topics), 0, 0))
        (log_dir,) = doc["logDirs"]
        self.assertEqual((log_dir["path"], log_dir["partitions"], log_dir["offline"]),
                         (self.broker.data_dir, doc["partitions"], False))
        self.assertEqual(log_dir["sizeBytes"], sum(t["sizeBytes"] for t in topics))
        self.assertGreater(log_dir["totalBytes"], log_dir["usableBytes"])
        # search is a case-insensitive substring
        found = http(self.port, "api/topics?search=" + name.upper())[1]["topics"]
        self.assertEqual([(t["name"], t["partitions"], t["records"]) for t in found], [(name, 3, N)])
