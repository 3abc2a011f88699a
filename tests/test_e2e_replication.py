"""Replication end to end: three broker processes and ZooKeeper (kafkatw.testing.KafkaCluster),
real clients. An idempotent acks=all producer keeps producing while the partition leader is
killed with SIGKILL and restarted; every acknowledged record is then read exactly once, in
order, and every replica's segment files hold the same batches at the same offsets. A
SIGSTOPped follower leaves the ISR and rejoins after SIGCONT; with two replicas down acks=all
is refused and acks=1 accepted.
"""

import os
import signal
import time

from twisted.trial import unittest

from kafkatw.protocol.records import iter_batch_headers
from kafkatw.testing import KafkaCluster

TOPIC = "replicated"
ROUNDS = int(os.environ.get("KAFKATW_REPLICATION_ROUNDS", "10"))


def _batches(log_dir, topic, partition):
    """{base offset: batch bytes} of a partition's segment files (every segment, in order)."""
    directory = os.path.join(log_dir, "%s-%d" % (topic, partition))
    out = {}
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".log"):
            continue
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        for pos, h in iter_batch_headers(data, allow_partial_tail=True):
            out[h.base_offset] = data[pos:pos + h.size_in_bytes]
    return out


class ReplicatedClusterTests(unittest.TestCase):
    timeout = 600

    def setUp(self):
        self.cluster = KafkaCluster(brokers=3, session_timeout_ms=2000, overrides={
            "min.insync.replicas": 2, "default.replication.factor": 3,
            "replica.lag.time.max.ms": 3000, "replica.fetch.wait.max.ms": 100,
            "replica.fetch.backoff.ms": 200, "num.partitions": 1,
            "offsets.topic.replication.factor": 3})
        self.cluster.start()
        self.addCleanup(self.cluster.close)
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap_servers})
        for f in admin.create_topics([NewTopic(TOPIC, 2, 3)]).values():
            f.result(30)
        self.wait_isr(0, 3)
        self.wait_isr(1, 3)

    def partition_state(self, partition, broker_id=None):
        """(error, leader, epoch, replicas, isr, offline); a broker that does not know the
        topic yet (just restarted) answers as if the partition had no leader."""
        _, _, topics = self.cluster.metadata(broker_id, topics=[TOPIC])
        known = topics.get(TOPIC)
        if not isinstance(known, dict) or partition not in known:
            return (-1, -1, -1, [], [], [])
        return known[partition]

    def wait_isr(self, partition, size, timeout=60):
        return self.cluster.wait_for(
            lambda: len(self.partition_state(partition)[4]) == size
            and self.partition_state(partition)[1] >= 0,
            timeout, "ISR of %s-%d with %d members" % (TOPIC, partition, size), self.explain)

    def explain(self):
        """A failed wait's story: each running broker's view of the partitions, and what the
        controllers, leaders and ISRs did (the work folder is gone after the test)."""
        views = []
        for b in sorted(self.cluster.brokers):
            if self.cluster.broker(b).running:
                try:
                    views.append("broker %d: %r" % (b, [self.partition_state(p, b) for p in (0, 1)]))
                except (OSError, ValueError) as e:  # a refused or half answer: its broker's line
                    views.append("broker %d: %s" % (b, e))
        return "\n".join(views + [self.cluster.state_change_log()])

    def log_dir(self, broker_id):
        return self.cluster.broker(broker_id).data_dir

    def test_leader_killed_and_restarted_under_acks_all_idempotent_load(self):
        from confluent_kafka import Consumer, Producer, TopicPartition

        acked = []  # (partition, offset, value)
        failed = []

        def delivered(err, msg):
            if err is None:
                acked.append((msg.partition(), msg.offset(), msg.value()))
            else:
                failed.append((msg.value(), err))

        producer = Producer({"bootstrap.servers": self.cluster.bootstrap_servers,
                             "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                             "message.timeout.ms": 120000, "retry.backoff.ms": 100,
                             "topic.metadata.refresh.interval.ms": 1000})
        sent = 0

        def produce(n):
            nonlocal sent
            for _ in range(n):
                producer.produce(TOPIC, value=b"v%06d" % sent, partition=sent % 2,
                                 on_delivery=delivered)
                sent += 1
                producer.poll(0)
                time.sleep(0.001)

        for round_ in range(ROUNDS):
            produce(150)
            leader = self.partition_state(0)[1]
            self.cluster.broker(leader).kill()
            produce(150)  # while the leader is gone: retried to the new one
            self.cluster.wait_for(lambda: self.partition_state(0)[1] not in (-1, leader), 60,
                                  "a new leader of %s-0" % TOPIC, self.explain)
            produce(100)
            self.cluster.broker(leader).start()
            self.wait_isr(0, 3)
            self.wait_isr(1, 3)
        self.assertEqual(producer.flush(120), 0)
        self.assertEqual(failed, [])
        self.assertEqual(len(acked), sent)

        # assigned partitions (no group): what is checked is the log, not the coordinator
        consumer = Consumer({"bootstrap.servers": self.cluster.bootstrap_servers,
                             "group.id": "check", "enable.auto.commit": False})
        consumer.assign([TopicPartition(TOPIC, 0, 0), TopicPartition(TOPIC, 1, 0)])
        seen = []
        deadline = time.monotonic() + 120
        while len(seen) < sent and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None or m.error():
                continue
            seen.append((m.partition(), m.offset(), m.value()))
        consumer.close()
        # exactly once, in order per partition, at the offsets acknowledged
        self.assertEqual(len(seen), sent)
        self.assertEqual(sorted(seen), sorted(acked))
        for p in (0, 1):
            values = [v for part, _, v in sorted(seen) if part == p]
            self.assertEqual(values, sorted(values))
        # every replica has the same batches at the same offsets
        for p in (0, 1):
            self.cluster.wait_for(lambda: len({len(_batches(self.log_dir(b), TOPIC, p))
                                               for b in (1, 2, 3)}) == 1, 30,
                                  "replicas of %s-%d at the same end" % (TOPIC, p))
            expected = _batches(self.log_dir(1), TOPIC, p)
            for b in (2, 3):
                self.assertEqual(_batches(self.log_dir(b), TOPIC, p), expected)

    def test_stopped_follower_leaves_the_isr_and_rejoins(self):
        from confluent_kafka import Producer

        _, leader, _, replicas, isr, _ = self.partition_state(0)
        follower = [r for r in replicas if r != leader][0]
        process = self.cluster.broker(follower).process
        os.kill(process.pid, signal.SIGSTOP)
        try:
            producer = Producer({"bootstrap.servers": self.cluster.broker(leader).bootstrap_servers,
                                 "acks": "all", "message.timeout.ms": 60000})
            errors = []
            for i in range(50):
                producer.produce(TOPIC, value=b"x%d" % i, partition=0,
                                 on_delivery=lambda e, m: errors.append(e))
                producer.poll(0.1)
            self.cluster.wait_for(lambda: follower not in self.partition_state(0, leader)[4], 30,
                                  "broker %d out of the ISR" % follower)
            self.assertEqual(producer.flush(30), 0)
            self.assertEqual(errors, [None] * 50)
        finally:
            os.kill(process.pid, signal.SIGCONT)
        self.cluster.wait_for(lambda: follower in self.partition_state(0, leader)[4], 30,
                              "broker %d back in the ISR" % follower)

    def test_two_replicas_down(self):
        from confluent_kafka import KafkaError, Producer

        _, leader, _, replicas, _, _ = self.partition_state(0)
        producer = Producer({"bootstrap.servers": self.cluster.bootstrap_servers, "acks": "all"})
        out = []
        producer.produce(TOPIC, value=b"before", partition=0, on_delivery=lambda e, m: out.append(e))
        producer.flush(30)
        self.assertEqual(out, [None])
        for r in replicas:
            if r != leader:
                self.cluster.broker(r).kill()
        # acks=1 keeps the leader's log moving, so the dead followers fall behind and leave the
        # ISR within replica.lag.time.max.ms (or the controller drops them as dead brokers)
        one = Producer({"bootstrap.servers": self.cluster.broker(leader).bootstrap_servers,
                        "acks": 1, "linger.ms": 0})
        acks_one = []

        def shrunk():
            one.produce(TOPIC, value=b"one", partition=0,
                        on_delivery=lambda e, m: acks_one.append(e))
            one.poll(0.05)
            return self.partition_state(0, leader)[4] == [leader]
        self.cluster.wait_for(shrunk, 60, "the ISR shrunk to the leader")
        self.assertEqual(one.flush(30), 0)
        self.assertTrue(acks_one)
        self.assertEqual(set(acks_one), {None})
        out = []
        strict = Producer({"bootstrap.servers": self.cluster.broker(leader).bootstrap_servers,
                           "acks": "all", "retries": 0})
        strict.produce(TOPIC, value=b"all", partition=0, on_delivery=lambda e, m: out.append(e))
        strict.flush(30)
        self.assertEqual([e.code() for e in out], [KafkaError.NOT_ENOUGH_REPLICAS])
        # kafka-python without a group: nothing waits for a coordinator (the offsets topic
        # cannot be created with two brokers down)
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KTopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.cluster.broker(leader).bootstrap_servers,
                                 group_id=None, enable_auto_commit=False,
                                 consumer_timeout_ms=3000)
        consumer.assign([KTopicPartition(TOPIC, 0)])
        consumer.seek(KTopicPartition(TOPIC, 0), 0)
        got = [m.value for m in consumer]
        # the consumer reads up to the HW: "before"; the acks=1 records wait for the ISR to
        # grow back to min.insync.replicas
        self.assertEqual(got, [b"before"])
        consumer.close()

    def test_only_a_stale_replica_alive_leaves_the_partition_offline(self):
        """Unclean election off: a replica that fell out of the ISR does not become leader when
        it is the only one alive; once an ISR member returns, no acknowledged record is lost."""
        from confluent_kafka import Producer

        _, leader, _, replicas, _, _ = self.partition_state(0)
        stale = [r for r in replicas if r != leader][0]
        self.cluster.broker(stale).kill()
        self.cluster.wait_for(lambda: stale not in self.partition_state(0, leader)[4], 60,
                              "broker %d out of the ISR" % stale)
        producer = Producer({"bootstrap.servers": self.cluster.broker(leader).bootstrap_servers,
                             "acks": "all", "enable.idempotence": True})
        acked = []
        for i in range(200):
            producer.produce(TOPIC, value=b"m%d" % i, partition=0,
                             on_delivery=lambda e, m: acked.append((e, m.offset(), m.value())))
        self.assertEqual(producer.flush(60), 0)
        self.assertEqual([e for e, _, _ in acked], [None] * 200)
        in_sync = [r for r in replicas if r != stale]
        for r in in_sync:
            self.cluster.broker(r).kill()
        self.cluster.broker(stale).start()
        self.cluster.wait_for(lambda: self.partition_state(0, stale)[1] == -1
                              and self.partition_state(0, stale)[0] != 0, 60,
                              "partition 0 offline (leader -1)")
        for r in in_sync:
            self.cluster.broker(r).start()
        self.cluster.wait_for(lambda: self.partition_state(0, stale)[1] in in_sync, 60,
                              "a leader from the ISR")
        self.wait_isr(0, 3)
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KTopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.cluster.bootstrap_servers, group_id=None,
                                 enable_auto_commit=False, consumer_timeout_ms=5000)
        consumer.assign([KTopicPartition(TOPIC, 0)])
        consumer.seek(KTopicPartition(TOPIC, 0), 0)
        got = [(m.offset, m.value) for m in consumer]
        consumer.close()
        self.assertEqual(got, [(o, v) for _, o, v in acked])
        # and the stale replica caught up to the same bytes
        self.cluster.wait_for(lambda: _batches(self.log_dir(stale), TOPIC, 0)
                              == _batches(self.log_dir(in_sync[0]), TOPIC, 0), 30,
                              "the stale replica caught up")
