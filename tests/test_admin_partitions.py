"""CreatePartitions, DeleteRecords, DescribeCluster, DescribeLogDirs, OffsetForLeaderEpoch,
DescribeProducers, ElectLeaders and the advertised ApiVersions against a real broker, through
confluent-kafka, kafka-python and (for APIs neither exposes) kafkatw's own wire client."""

from twisted.trial import unittest

from kafkatw.cli.client import KafkaClient
from kafkatw.protocol import messages
from kafkatw.testing import KafkaBrokerMixin
from tests.support import futures_error, futures_result, poll_until, unique_name

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic


class AdminPartitionsTests(KafkaBrokerMixin, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.admin = AdminClient({"bootstrap.servers": self.broker.bootstrap_servers})

    def topic(self, partitions=1):
        name = unique_name("p")
        futures_result(self.admin.create_topics([NewTopic(name, partitions)]))
        return name

    def produce(self, name, n, partition=0, idempotent=False):
        p = Producer({"bootstrap.servers": self.broker.bootstrap_servers, "linger.ms": 0,
                      "enable.idempotence": idempotent})
        for i in range(n):
            p.produce(name, b"v%d" % i, partition=partition)
        self.assertEqual(p.flush(10), 0)

    def wire(self, body):
        with KafkaClient(self.broker.bootstrap_servers) as client:
            return client.request(body)

    def test_create_partitions(self):
        name = self.topic(1)
        futures_result(self.admin.create_partitions([NewPartitions(name, 3)], validate_only=True))
        self.assertEqual(len(self.admin.list_topics(name, timeout=10).topics[name].partitions), 1)
        futures_result(self.admin.create_partitions([NewPartitions(name, 3)]))
        self.assertEqual(sorted(self.admin.list_topics(name, timeout=10).topics[name].partitions), [0, 1, 2])
        self.produce(name, 2, partition=2)
        err = futures_error(self.admin.create_partitions([NewPartitions(name, 2)]))
        self.assertEqual((err.code(), err.str()), (37, "The topic %s currently has 3 partition(s); "
                                                       "2 would not be an increase." % name))
        err = futures_error(self.admin.create_partitions([NewPartitions(name, 3)]))
        self.assertEqual((err.code(), err.str()), (37, "Topic already has 3 partition(s)."))
        err = futures_error(self.admin.create_partitions([NewPartitions("missing-" + name, 3)]))
        self.assertEqual(err.code(), 3)

    def test_kafka_python_create_partitions(self):
        from kafka.admin import KafkaAdminClient, NewPartitions as KPNewPartitions

        name = self.topic(2)
        client = KafkaAdminClient(bootstrap_servers=self.broker.bootstrap_servers)
        self.addCleanup(client.close)
        client.create_partitions({name: KPNewPartitions(5)})
        self.assertEqual(len(self.admin.list_topics(name, timeout=10).topics[name].partitions), 5)

    def test_delete_records(self):
        name = self.topic()
        self.produce(name, 10)
        tp = TopicPartition(name, 0, 4)
        [deleted] = futures_result(self.admin.delete_records([tp])).values()
        self.assertEqual(deleted.low_watermark, 4)
        c = Consumer({"bootstrap.servers": self.broker.bootstrap_servers, "group.id": "g-" + name,
                      "auto.offset.reset": "earliest"})
        self.addCleanup(c.close)
        self.assertEqual(c.get_watermark_offsets(TopicPartition(name, 0), timeout=10), (4, 10))
        c.assign([TopicPartition(name, 0, -2)])  # OFFSET_BEGINNING
        msg = poll_until(lambda: c.poll(0.5), 15.0, 0.0, "the record at the new log start offset")
        self.assertEqual((msg.offset(), msg.value()), (4, b"v4"))
        err = futures_error(self.admin.delete_records([TopicPartition(name, 0, 11)]))
        self.assertEqual(err.code(), 1)  # OFFSET_OUT_OF_RANGE beyond the high watermark
        [deleted] = futures_result(self.admin.delete_records([TopicPartition(name, 0, -1)])).values()
        self.assertEqual(deleted.low_watermark, 10)  # -1: up to the high watermark

    def test_kafka_python_delete_records(self):
        from kafka.admin import KafkaAdminClient
        from kafka.structs import TopicPartition as KPTopicPartition

        name = self.topic()
        self.produce(name, 5)
        client = KafkaAdminClient(bootstrap_servers=self.broker.bootstrap_servers)
        self.addCleanup(client.close)
        out = client.delete_records({KPTopicPartition(name, 0): 3})
        self.assertEqual(out[KPTopicPartition(name, 0)]["low_watermark"], 3)

    def test_describe_cluster(self):
        d = futures_result({"c": self.admin.describe_cluster(include_authorized_operations=True)})["c"]
        md = self.admin.list_topics(timeout=10)
        self.assertEqual(d.cluster_id, md.cluster_id)
        self.assertEqual(d.controller.id, md.controller_id)
        self.assertEqual([(n.id, n.host, n.port) for n in d.nodes],
                         [(md.controller_id, "127.0.0.1", self.broker.port)])
        self.assertEqual(len(d.authorized_operations), 7)

    def test_kafka_python_describe_cluster(self):
        from kafka.admin import KafkaAdminClient

        client = KafkaAdminClient(bootstrap_servers=self.broker.bootstrap_servers)
        self.addCleanup(client.close)
        d = client.describe_cluster()
        self.assertEqual(len(d["brokers"]), 1)
        self.assertEqual(d["brokers"][0]["port"], self.broker.port)
        self.assertEqual(d["controller_id"], d["brokers"][0]["broker_id"])

    def test_describe_log_dirs(self):
        name = self.topic(2)
        self.produce(name, 3, partition=1)
        R = messages.DescribeLogDirsRequest
        resp, version = self.wire(R(topics=[R.DescribableLogDirTopic(topic=name, partitions=[0, 1])]))
        self.assertEqual(version, 4)
        [res] = resp.results
        self.assertEqual(res.error_code, 0)
        self.assertTrue(res.log_dir.endswith("kafka-logs"))
        self.assertGreater(res.total_bytes, 0)
        [topic] = res.topics
        sizes = {p.partition_index: p.partition_size for p in topic.partitions}
        self.assertEqual(sizes[0], 0)
        self.assertGreater(sizes[1], 0)

    def test_offset_for_leader_epoch(self):
        name = self.topic()
        self.produce(name, 4)
        R = messages.OffsetForLeaderEpochRequest
        resp, _ = self.wire(R(replica_id=-1, topics=[R.OffsetForLeaderTopic(topic=name, partitions=[
            R.OffsetForLeaderPartition(partition=0, current_leader_epoch=0, leader_epoch=0),
            R.OffsetForLeaderPartition(partition=7, current_leader_epoch=0, leader_epoch=0)])]))
        [topic] = resp.topics
        got = [(p.partition, p.error_code, p.leader_epoch, p.end_offset) for p in topic.partitions]
        self.assertEqual(got, [(0, 0, 0, 4), (7, 3, -1, -1)])
        resp, _ = self.wire(R(replica_id=-1, topics=[R.OffsetForLeaderTopic(topic=name, partitions=[
            R.OffsetForLeaderPartition(partition=0, current_leader_epoch=5, leader_epoch=0)])]))
        self.assertEqual(resp.topics[0].partitions[0].error_code, 75)  # UNKNOWN_LEADER_EPOCH

    def test_describe_producers(self):
        name = self.topic()
        self.produce(name, 3, idempotent=True)
        R = messages.DescribeProducersRequest
        resp, _ = self.wire(R(topics=[R.TopicRequest(name=name, partition_indexes=[0, 3])]))
        p0, p3 = resp.topics[0].partitions
        self.assertEqual((p0.error_code, len(p0.active_producers)), (0, 1))
        state = p0.active_producers[0]
        self.assertGreaterEqual(state.producer_id, 0)
        self.assertEqual(state.last_sequence, 2)
        self.assertEqual(p3.error_code, 3)

    def test_describe_producers_after_a_crash_waits_for_the_rebuild(self):
        name = self.topic()
        self.produce(name, 3, idempotent=True)
        self.broker.kill()  # no producer snapshot: the state is rebuilt from the log, in slices
        self.broker.start()
        R = messages.DescribeProducersRequest
        resp, _ = self.wire(R(topics=[R.TopicRequest(name=name, partition_indexes=[0])]))
        [p0] = resp.topics[0].partitions
        self.assertEqual((p0.error_code, [s.last_sequence for s in p0.active_producers]), (0, [2]))
        with open(self.broker.log_path) as f:
            self.assertIn("rebuilding producer state of %s-0 from offset 0 to 3" % name, f.read())

    def test_elect_leaders(self):
        from confluent_kafka import ElectionType

        name = self.topic(2)
        out = futures_result({"e": self.admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(name, 0)])})["e"]
        [(tp, err)] = out.items()
        self.assertEqual((tp.topic, tp.partition, err.code()), (name, 0, 84))  # ELECTION_NOT_NEEDED
        R = messages.ElectLeadersRequest
        resp, version = self.wire(R(election_type=0, topic_partitions=[
            R.TopicPartitions(topic=name, partitions=[0, 1, 9])], timeout_ms=1000))
        self.assertEqual(version, 2)
        self.assertEqual(resp.error_code, 0)
        self.assertEqual([(r.partition_id, r.error_code) for r in resp.replica_election_results[0].partition_result],
                         [(0, 84), (1, 84), (9, 3)])
        resp, _ = self.wire(R(election_type=0, topic_partitions=None, timeout_ms=1000))
        self.assertEqual(resp.replica_election_results, [])

    def test_api_versions_advertise_admin_apis(self):
        with KafkaClient(self.broker.bootstrap_servers) as client:
            versions = client.any_connection().api_versions
        expected = {32: (1, 4), 33: (0, 2), 44: (0, 1), 37: (0, 3), 21: (0, 2), 60: (0, 1), 35: (1, 4),
                    23: (2, 4), 61: (0, 0), 43: (0, 2)}
        self.assertEqual({k: versions.get(k) for k in expected}, expected)
        # served keys are exactly the registry's: nothing advertised without a handler
        from kafkatw.server.apis import DEFAULT_HANDLERS
        self.assertEqual(set(versions), {h.API_KEY for h in DEFAULT_HANDLERS})
