"""Tests for CreateTopics and DeleteTopics on a single node."""

from twisted.internet import defer
from twisted.trial import unittest

from kafkatw.protocol import errors
from kafkatw.protocol.messages import CreateTopicsRequest, DeleteTopicsRequest
from tests.test_server_apis import ApisFixture

CT = CreateTopicsRequest.CreatableTopic
CFG = CreateTopicsRequest.CreatableTopicConfig
ASSIGN = CreateTopicsRequest.CreatableReplicaAssignment
DT = DeleteTopicsRequest.DeleteTopicState


def topic(name, n=-1, rf=-1, configs=(), assignments=()):
    return CT(name=name, num_partitions=n, replication_factor=rf,
              configs=[CFG(name=k, value=v) for k, v in configs], assignments=list(assignments))


class CreateTopicsTests(ApisFixture, unittest.TestCase):
    properties = {"num.partitions": "2"}

    def create(self, topics, version=7, validate_only=False):
        return self.call(CreateTopicsRequest(topics=topics, timeout_ms=1000, validate_only=validate_only),
                         version).body

    def results(self, body):
        return [(t.name, t.error_code, t.error_message) for t in body.topics]

    def test_defaults(self):
        body = self.create([topic("t")])
        (r,) = body.topics
        info = self.metadata.get_topic("t")
        self.assertEqual((r.error_code, r.topic_id, r.num_partitions, r.replication_factor),
                         (0, info.topic_id, 2, 1))
        self.assertEqual(info.num_partitions, 2)
        configs = {c.name: (c.value, c.config_source) for c in r.configs}
        self.assertEqual(configs["cleanup.policy"], ("delete", 5))
        self.assertEqual(len(self.log_manager.created), 2)

    def test_configs_returned_with_source(self):
        body = self.create([topic("t", 1, 1, configs=[("retention.ms", "1000")])])
        configs = {c.name: (c.value, c.config_source) for c in body.topics[0].configs}
        self.assertEqual(configs["retention.ms"], ("1000", 1))
        self.assertEqual(self.metadata.get_topic("t").configs, {"retention.ms": "1000"})

    def test_v4_has_no_configs(self):
        body = self.create([topic("t", 3)], version=4)
        self.assertEqual((body.topics[0].error_code, body.topics[0].configs), (0, []))
        self.assertEqual(self.metadata.partition_count("t"), 3)

    def test_validate_only(self):
        body = self.create([topic("t", 4)], validate_only=True)
        self.assertEqual((body.topics[0].error_code, body.topics[0].num_partitions), (0, 4))
        self.assertIsNone(self.metadata.get_topic("t"))
        self.assertEqual(self.log_manager.created, [])

    def test_validate_only_still_reports_errors(self):
        self.create_topic("t")
        body = self.create([topic("t")], validate_only=True)
        self.assertEqual(body.topics[0].error_code, errors.TOPIC_ALREADY_EXISTS)

    def test_errors(self):
        self.create_topic("exists")
        self.create_topic("a.b")
        body = self.create([
            topic("exists"),
            topic("a_b"),
            topic("bad/name"),
            topic("rf3", 1, 3),
            topic("rf0", 1, 0),
            topic("p0", 0, 1),
            topic("badcfg", configs=[("retention.ms", "abc")]),
            topic("unknowncfg", configs=[("no.such.config", "1")]),
            topic("dup"), topic("dup"),
        ])
        codes = [(r.name, r.error_code) for r in body.topics]
        self.assertEqual(codes, [
            ("exists", errors.TOPIC_ALREADY_EXISTS),
            ("a_b", errors.INVALID_TOPIC_EXCEPTION),
            ("bad/name", errors.INVALID_TOPIC_EXCEPTION),
            ("rf3", errors.INVALID_REPLICATION_FACTOR),
            ("rf0", errors.INVALID_REPLICATION_FACTOR),
            ("p0", errors.INVALID_PARTITIONS),
            ("badcfg", errors.INVALID_CONFIG),
            ("unknowncfg", errors.INVALID_CONFIG),
            ("dup", errors.INVALID_REQUEST),
            ("dup", errors.INVALID_REQUEST),
        ])
        messages_ = {r.name: r.error_message for r in body.topics}
        self.assertEqual(messages_["exists"], "Topic 'exists' already exists.")
        self.assertEqual(messages_["a_b"], "Topic 'a_b' collides with existing topic: a.b")
        self.assertIn("only 1 broker(s) are registered", messages_["rf3"])
        self.assertEqual(messages_["dup"], "Duplicate topic name.")
        self.assertIn("Unknown topic config name: no.such.config", messages_["unknowncfg"])
        self.assertEqual(sorted(self.metadata.topics), ["a.b", "exists"])

    def test_assignments(self):
        body = self.create([
            topic("ok", assignments=[ASSIGN(partition_index=0, broker_ids=[1]),
                                     ASSIGN(partition_index=1, broker_ids=[1])]),
            topic("gap", assignments=[ASSIGN(partition_index=1, broker_ids=[1])]),
            topic("other", assignments=[ASSIGN(partition_index=0, broker_ids=[2])]),
            topic("both", 2, assignments=[ASSIGN(partition_index=0, broker_ids=[1])]),
        ])
        self.assertEqual([r.error_code for r in body.topics],
                         [0, errors.INVALID_REPLICA_ASSIGNMENT, errors.INVALID_REPLICA_ASSIGNMENT,
                          errors.INVALID_REQUEST])
        self.assertEqual(self.metadata.partition_count("ok"), 2)


    def test_answer_waits_until_durable_and_a_failed_write_is_a_storage_error(self):
        writes = []
        self.metadata._run_blocking = lambda fn, *args: writes.append((fn, args)) or self.pending
        self.pending = defer.Deferred()
        d = self.apis.handle(self.request(CreateTopicsRequest(topics=[topic("a"), topic("b")],
                                                              timeout_ms=1000), 7))
        self.assertNoResult(d)  # both staged, one write in flight: nothing answered yet
        self.assertEqual((len(writes), self.metadata.get_topic("a")), (1, None))
        self.pending.errback(OSError(28, "No space left on device"))
        self.flushLoggedErrors(OSError)
        body = self.successResultOf(d).body
        self.assertEqual([(t.name, t.error_code) for t in body.topics],
                         [("a", errors.KAFKA_STORAGE_ERROR), ("b", errors.KAFKA_STORAGE_ERROR)])
        self.assertEqual((self.metadata.get_topic("a"), self.log_manager.created), (None, []))
        del self.metadata._run_blocking  # writes inline again: the names are free
        self.assertEqual([t.error_code for t in self.create([topic("a")]).topics], [errors.NONE])
        self.assertEqual(len(self.log_manager.created), 2)


class DeleteTopicsTests(ApisFixture, unittest.TestCase):
    def test_by_name(self):
        info = self.create_topic("t", 2)
        body = self.call(DeleteTopicsRequest(topic_names=["t", "nope"], timeout_ms=1000), 5).body
        self.assertEqual([(r.name, r.error_code) for r in body.responses],
                         [("t", 0), ("nope", errors.UNKNOWN_TOPIC_OR_PARTITION)])
        self.assertIsNone(self.metadata.get_topic("t"))
        self.assertEqual(self.log_manager.deleted, [("t", 0), ("t", 1)])
        self.assertNotIn(info.topic_id, [self.metadata.topic_id(n) for n in self.metadata.topics])

    def test_by_id(self):
        info = self.create_topic("t")
        unknown = b"\x05" * 16
        body = self.call(DeleteTopicsRequest(topics=[DT(name=None, topic_id=info.topic_id),
                                                     DT(name=None, topic_id=unknown)], timeout_ms=1000), 6).body
        self.assertEqual([(r.name, r.topic_id, r.error_code) for r in body.responses],
                         [("t", info.topic_id, 0), (None, unknown, errors.UNKNOWN_TOPIC_ID)])
        self.assertIsNone(self.metadata.get_topic("t"))

    def test_v6_by_name_returns_id(self):
        info = self.create_topic("t")
        body = self.call(DeleteTopicsRequest(topics=[DT(name="t")], timeout_ms=1000), 6).body
        self.assertEqual((body.responses[0].topic_id, body.responses[0].error_code), (info.topic_id, 0))

    def test_invalid_requests(self):
        info = self.create_topic("t")
        body = self.call(DeleteTopicsRequest(topics=[DT(name="t", topic_id=info.topic_id), DT(name=None)],
                                             timeout_ms=1000), 6).body
        self.assertEqual([r.error_code for r in body.responses], [errors.INVALID_REQUEST] * 2)
        self.assertIsNotNone(self.metadata.get_topic("t"))


class DeleteTopicsDisabledTests(ApisFixture, unittest.TestCase):
    properties = {"delete.topic.enable": "false"}

    def test_disabled(self):
        self.create_topic("t")
        body = self.call(DeleteTopicsRequest(topic_names=["t"], timeout_ms=1000), 4).body
        self.assertEqual(body.responses[0].error_code, errors.TOPIC_DELETION_DISABLED)
        self.assertIsNotNone(self.metadata.get_topic("t"))
