"""A three-broker cluster whose only listener is SSL (``security.inter.broker.protocol=SSL``):
the controller's requests, follower fetches and AlterPartition all go over TLS. acks=all
writes to an RF 3 topic are acknowledged with the full ISR, and after the leader stops its
followers serve every record, in order."""

import time

from twisted.trial import unittest

from kafkatw import testing
from tests.test_cluster_e2e import SESSION_TIMEOUT_MS, require_zookeeper
from tests.support import unique_name


class SslOnlyClusterTests(unittest.TestCase):
    timeout = 240

    def setUp(self):
        require_zookeeper()
        self.cluster = testing.KafkaCluster(
            brokers=3, listeners=("SSL",), session_timeout_ms=SESSION_TIMEOUT_MS,
            overrides={"security.inter.broker.protocol": "SSL", "ssl.client.auth": "required"})
        self.addCleanup(self.cluster.close)
        self.cluster.start()

    def client_conf(self):
        b = self.cluster.running_broker()
        return {"bootstrap.servers": ",".join(x.bootstrap_servers for x in self.cluster.brokers.values()
                                              if x.running),
                "security.protocol": "SSL", "ssl.ca.location": b.ssl_ca_path,
                "ssl.certificate.location": b.ssl_client_cert_path,
                "ssl.key.location": b.ssl_client_key_path}

    def partition_state(self, topic):
        return self.cluster.metadata(None, [topic])[2].get(topic, {}).get(0)

    def test_acks_all_over_tls_between_brokers_survives_the_leader(self):
        from confluent_kafka import Consumer, Producer, TopicPartition
        from confluent_kafka.admin import AdminClient, NewTopic

        topic = unique_name("tls")
        admin = AdminClient(self.client_conf())
        admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})],
                            operation_timeout=30)[topic].result(60)
        # every follower fetched over TLS and joined: the full ISR before anything is asserted
        self.cluster.wait_for(lambda: sorted(self.partition_state(topic)[4]) == [1, 2, 3],
                              60, "the full ISR of %s" % topic)
        producer = Producer(dict(self.client_conf(), acks="all", **{"enable.idempotence": True}))
        errors = []
        for i in range(300):
            producer.produce(topic, value=b"v-%d" % i,
                             on_delivery=lambda err, msg: errors.append(err) if err else None)
        self.assertEqual(producer.flush(60), 0)
        self.assertEqual(errors, [])
        leader = self.partition_state(topic)[1]
        self.cluster.brokers[leader].stop()
        self.cluster.wait_for(lambda: self.partition_state(topic)[1] not in (-1, leader),
                              60, "a new leader of %s" % topic)
        # read from the new leader by assignment (no group coordinator involved)
        consumer = Consumer(dict(self.client_conf(), **{"group.id": unique_name("g"),
                                                        "enable.auto.commit": False}))
        self.addCleanup(consumer.close)
        consumer.assign([TopicPartition(topic, 0, 0)])
        values = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
            if len(values) >= 300:
                break
        self.assertEqual(values, [b"v-%d" % i for i in range(300)])
