"""min.insync.replicas on a single node: acks=all is refused when the ISR (this broker alone) is
smaller than the topic's min.insync.replicas, as Kafka's Partition.appendRecordsToLeader does;
acks=1 and acks=0 are not affected, and nothing refused is stored."""

from twisted.trial import unittest

from kafkatw.protocol import errors
from kafkatw.testing import KafkaBrokerMixin
from tests.support import futures_result, unique_name


class MinInsyncReplicasTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    def produce_one(self, topic, acks):
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.broker.bootstrap_servers, "acks": str(acks),
                      "retries": 0, "message.timeout.ms": 5000})
        outcome = []
        p.produce(topic, value=b"v", on_delivery=lambda err, msg: outcome.append(err))
        self.assertEqual(p.flush(10), 0)
        return outcome[0]

    def test_acks_all_needs_min_insync_replicas(self):
        from confluent_kafka import Consumer, TopicPartition
        from confluent_kafka.admin import AdminClient, NewTopic

        topic = unique_name("minisr")
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap_servers})
        futures_result(admin.create_topics([NewTopic(topic, 1, 1, config={"min.insync.replicas": "2"})]))
        err = self.produce_one(topic, -1)
        self.assertIsNotNone(err)
        self.assertEqual(err.code(), errors.NOT_ENOUGH_REPLICAS)
        self.assertIsNone(self.produce_one(topic, 1))
        c = Consumer({"bootstrap.servers": self.broker.bootstrap_servers, "group.id": "g-" + topic})
        self.addCleanup(c.close)
        self.assertEqual(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10), (0, 1))
