"""Tests for the Metadata handler: brokers per listener, topics, ids, auto-creation, errors."""

from twisted.trial import unittest

from kafkatw.protocol import errors
from kafkatw.protocol.messages import MetadataRequest
from tests.test_server_apis import ApisFixture

T = MetadataRequest.MetadataRequestTopic


class MetadataTests(ApisFixture, unittest.TestCase):
    def test_brokers_of_the_request_listener(self):
        resp = self.call(MetadataRequest(topics=[]), 12).body
        self.assertEqual([(b.node_id, b.host, b.port, b.rack) for b in resp.brokers],
                         [(1, "broker.example", 19092, None)])
        self.assertEqual((resp.cluster_id, resp.controller_id, resp.topics),
                         (self.metadata.cluster_id, 1, []))
        resp = self.call(MetadataRequest(topics=[]), 12, listener="SECURE").body
        self.assertEqual([b.port for b in resp.brokers], [19093])

    def test_existing_topic(self):
        info = self.create_topic("t", 2)
        resp = self.call(MetadataRequest(topics=[T(name="t")], allow_auto_topic_creation=False), 12).body
        (topic,) = resp.topics
        self.assertEqual((topic.error_code, topic.name, topic.topic_id, topic.is_internal),
                         (0, "t", info.topic_id, False))
        self.assertEqual(topic.topic_authorized_operations, -2147483648)
        self.assertEqual([(p.partition_index, p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes)
                          for p in topic.partitions], [(0, 1, 0, [1], [1]), (1, 1, 0, [1], [1])])

    def test_all_topics(self):
        self.create_topic("b")
        self.create_topic("a")
        for version, topics in [(0, []), (1, None), (12, None)]:
            resp = self.call(MetadataRequest(topics=topics), version).body
            self.assertEqual([t.name for t in resp.topics], ["a", "b"], version)
        self.assertEqual(self.call(MetadataRequest(topics=[]), 1).body.topics, [])

    def test_auto_create(self):
        resp = self.call(MetadataRequest(topics=[T(name="new")], allow_auto_topic_creation=True), 12).body
        self.assertEqual(resp.topics[0].error_code, 0)
        self.assertEqual(len(resp.topics[0].partitions), 1)
        self.assertIsNotNone(self.metadata.get_topic("new"))
        self.assertEqual(self.log_manager.created[0][:2], ("new", 0))

    def test_auto_create_always_allowed_before_v4(self):
        resp = self.call(MetadataRequest(topics=[T(name="old")]), 3).body
        self.assertEqual(resp.topics[0].error_code, 0)

    def test_no_auto_create_when_request_forbids(self):
        resp = self.call(MetadataRequest(topics=[T(name="new")], allow_auto_topic_creation=False), 12).body
        self.assertEqual((resp.topics[0].error_code, resp.topics[0].partitions),
                         (errors.UNKNOWN_TOPIC_OR_PARTITION, []))
        self.assertIsNone(self.metadata.get_topic("new"))

    def test_invalid_topic_name(self):
        resp = self.call(MetadataRequest(topics=[T(name="bad name")]), 12).body
        self.assertEqual(resp.topics[0].error_code, errors.INVALID_TOPIC_EXCEPTION)

    def test_auto_create_collision(self):
        self.create_topic("a.b")
        resp = self.call(MetadataRequest(topics=[T(name="a_b")]), 12).body
        self.assertEqual(resp.topics[0].error_code, errors.INVALID_TOPIC_EXCEPTION)

    def test_authorized_operations_when_asked(self):
        self.create_topic("t")
        resp = self.call(MetadataRequest(topics=[T(name="t")], include_topic_authorized_operations=True), 10).body
        ops = resp.topics[0].topic_authorized_operations
        self.assertEqual(ops, sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11)))

    def test_topic_by_id(self):
        info = self.create_topic("t")
        resp = self.call(MetadataRequest(topics=[T(topic_id=info.topic_id, name=None),
                                                 T(topic_id=b"\x07" * 16, name=None)]), 12).body
        self.assertEqual([(t.name, t.error_code) for t in resp.topics],
                         [("t", 0), (None, errors.UNKNOWN_TOPIC_ID)])

    def test_unknown_listener(self):
        self.create_topic("t")
        resp = self.call(MetadataRequest(topics=[T(name="t")]), 12, listener="OTHER").body
        self.assertEqual(resp.brokers, [])
        self.assertEqual(resp.topics[0].partitions[0].error_code, errors.LISTENER_NOT_FOUND)


class MetadataAutoCreateDisabledTests(ApisFixture, unittest.TestCase):
    properties = {"auto.create.topics.enable": "false", "num.partitions": "3"}

    def test_disabled(self):
        resp = self.call(MetadataRequest(topics=[T(name="new")]), 12).body
        self.assertEqual(resp.topics[0].error_code, errors.UNKNOWN_TOPIC_OR_PARTITION)


class MetadataNumPartitionsTests(ApisFixture, unittest.TestCase):
    properties = {"num.partitions": "3"}

    def test_num_partitions(self):
        resp = self.call(MetadataRequest(topics=[T(name="new")]), 12).body
        self.assertEqual(len(resp.topics[0].partitions), 3)


class MetadataCacheTests(ApisFixture, unittest.TestCase):
    """A topic's answer is encoded once per version and reused until the topic changes."""

    def raw(self, body, version):
        """The handler's own response (not re-decoded)."""
        return self.successResultOf(self.apis.handle(self.request(body, version))).body

    def plain(self, resp, version):
        from kafkatw.protocol.messages import MetadataResponse

        copy = MetadataResponse(throttle_time_ms=resp.throttle_time_ms, brokers=resp.brokers,
                                cluster_id=resp.cluster_id, controller_id=resp.controller_id,
                                topics=[t.struct for t in resp.topics],
                                cluster_authorized_operations=resp.cluster_authorized_operations)
        return copy.encode_bytes(version)

    def test_cached_bytes_are_the_encoding_of_every_version(self):
        self.create_topic("t", 3)
        for version in range(0, 13):
            first = self.raw(MetadataRequest(topics=None if version else []), version)
            again = self.raw(MetadataRequest(topics=None if version else []), version)
            self.assertIs(again.topics[0], first.topics[0], version)
            self.assertEqual(again.encode_bytes(version), self.plain(first, version), version)
            self.assertEqual(len(first.topics[0].partitions), 3)

    def test_a_change_of_the_topic_is_answered_at_once(self):
        self.create_topic("t", 2)
        before = self.call(MetadataRequest(topics=[T(name="t")]), 12).body.topics[0]
        self.successResultOf(self.metadata.create_partitions("t", 5))
        after = self.call(MetadataRequest(topics=[T(name="t")]), 12).body.topics[0]
        self.assertEqual([p.partition_index for p in after.partitions], [0, 1, 2, 3, 4])
        self.assertEqual(len(before.partitions), 2)
        self.successResultOf(self.metadata.delete_topic("t"))
        self.create_topic("t", 1)
        resp = self.call(MetadataRequest(topics=[T(name="t")], allow_auto_topic_creation=False), 12).body
        self.assertEqual(len(resp.topics[0].partitions), 1)
        self.assertEqual(resp.topics[0].topic_id, self.metadata.get_topic("t").topic_id)

    def test_a_deleted_topics_answers_go_with_it(self):
        """The cached answers of a deleted topic are dropped at once (a fuzzed topic of 3,000
        partitions kept ~4 MB of answers per version until the cache outgrew its bound)."""
        from kafkatw.server.handlers import metadata as handler

        self.create_topic("gone", 3)
        self.create_topic("kept", 1)
        for version in (4, 9, 12):
            self.call(MetadataRequest(topics=None), version)
        ours = sorted(name for meta_id, name in handler._topic_cache if meta_id == id(self.metadata))
        self.assertEqual(ours, ["gone", "kept"])
        self.assertEqual(len(handler._topic_cache[(id(self.metadata), "gone")]), 3)
        self.successResultOf(self.metadata.delete_topic("gone"))
        ours = sorted(name for meta_id, name in handler._topic_cache if meta_id == id(self.metadata))
        self.assertEqual(ours, ["kept"])
