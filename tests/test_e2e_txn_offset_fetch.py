"""OffsetFetch with require_stable (KIP-447) while a transaction holds a group's offsets, on the
wire against a real broker: the held partition answers UNSTABLE_OFFSET_COMMIT, the others their
committed offsets, and the group's (v2-v7) or each group's (v8+) error stays NONE, as Kafka's.
librdkafka retries a partition's UNSTABLE_OFFSET_COMMIT but returns a group-level one to the
application (librdkafka's own test 0103, do_test_empty_txn, failed on that)."""

from twisted.trial import unittest

from kafkatw.protocol import errors
from kafkatw.protocol import messages as m
from kafkatw.testing import KafkaBrokerMixin
from tests.support import RawClient, poll_until, unique_name
from tests.test_e2e_transactions import create_topic

OVERRIDES = {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3}


class UnstableOffsetFetchTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_overrides = OVERRIDES

    def producer(self):
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.broker.bootstrap_servers,
                      "transactional.id": unique_name("tx")})
        p.init_transactions(30)
        return p

    def send_offsets(self, producer, group, offsets):
        from confluent_kafka import Consumer, TopicPartition

        # the group's metadata as a consumer of it hands it over (it need not join)
        consumer = Consumer({"bootstrap.servers": self.broker.bootstrap_servers, "group.id": group})
        try:
            metadata = consumer.consumer_group_metadata()
        finally:
            consumer.close()
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [TopicPartition(t, p, o) for (t, p), o in offsets.items()], metadata, 30)

    def fetch(self, version, group, topic):
        R = m.OffsetFetchRequest
        client = RawClient(self.broker)
        try:
            if version >= 8:
                body = R(require_stable=True, groups=[R.OffsetFetchRequestGroup(
                    group_id=group, topics=[R.OffsetFetchRequestTopics(name=topic, partition_indexes=[0, 1])])])
                group_answer = client.request(9, version, body).groups[0]
                top, topics = group_answer.error_code, group_answer.topics
            else:
                body = R(group_id=group, require_stable=True,
                         topics=[R.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 1])])
                answer = client.request(9, version, body)
                top, topics = answer.error_code, answer.topics
        finally:
            client.close()
        return top, [(p.partition_index, p.committed_offset, p.error_code) for t in topics for p in t.partitions]

    def test_held_partition_is_unstable_the_group_is_not(self):
        topic, group = unique_name("t"), unique_name("g")
        create_topic(self.broker.bootstrap_servers, topic, 2)
        p = self.producer()
        self.send_offsets(p, group, {(topic, 0): 3, (topic, 1): 7})
        p.commit_transaction(30)
        self.send_offsets(p, group, {(topic, 0): 5})  # left open: holds partition 0 only
        for version in (7, 8):
            self.assertEqual(self.fetch(version, group, topic),
                             (errors.NONE, [(0, -1, errors.UNSTABLE_OFFSET_COMMIT), (1, 7, errors.NONE)]),
                             version)
        p.commit_transaction(30)
        # EndTxn answers once the commit is decided; the offsets apply with its marker, soon after
        for version in (7, 8):
            poll_until(lambda: self.fetch(version, group, topic)
                       == (errors.NONE, [(0, 5, errors.NONE), (1, 7, errors.NONE)]),
                       timeout=30, message="the committed offsets, stable (v%d)" % version)
        p.flush(10)
        del p  # gone before the class's broker stops at exit: no reconnect noise
