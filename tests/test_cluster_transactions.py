"""Transactions on three brokers and ZooKeeper with confluent-kafka: the coordinator is the
leader of the id's ``__transaction_state`` partition (RF 3), markers reach partition leaders on
other brokers (commit: a read_committed consumer sees exactly the committed records; abort:
none), the producer goes on on a new coordinator after its coordinator is SIGKILLed between and
inside transactions, a commit left in PrepareCommit by a killed coordinator is completed by the
next one, consume-transform-produce with send_offsets_to_transaction works with the group's
and the transaction's coordinators on different brokers, and producer ids handed out by
different brokers never collide (blocks from ``/latest_producer_id_block``). Skips without ZooKeeper unless KAFKATW_REQUIRE_ZOOKEEPER=1."""

import json
import time

from twisted.trial import unittest

from kafkatw.coordinator.txn.txn_log import partition_for
from kafkatw.protocol import messages as m
from tests.support import RawClient, poll_until, unique_name
from tests.test_cluster_e2e import create_topic, known_partitions, shared_cluster, zk_read

STATE_PARTITIONS = 6
#: armed on every broker: only the coordinator of this id ever reaches the point
CRASH_TID = "txn-crash-after-prepare"
OVERRIDES = {
    "transaction.state.log.num.partitions": STATE_PARTITIONS,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "offsets.topic.num.partitions": 6,
    "offsets.topic.replication.factor": 3,
    "group.initial.rebalance.delay.ms": 0,
    "kafkatw.test.crash.point": "txn.end.after_prepare/" + CRASH_TID,
}
WAIT = 60
OFFSET_INVALID = -1001  # librdkafka: no committed offset


def values(prefix, n):
    return [("%s%d" % (prefix, i)).encode() for i in range(n)]


class ClusterTransactionTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.cluster = shared_cluster("transactions", overrides=OVERRIDES)

    # -- helpers ---------------------------------------------------------------------------
    def topic_led_everywhere(self, partitions=3):
        """An RF 3 topic whose partitions' leaders are all three brokers, with its full ISR."""
        topic = unique_name("txn")
        create_topic(self.cluster.broker(1).bootstrap_servers, topic, partitions, 3)

        def full():
            found = known_partitions(self.cluster, 1, topic)
            if not found or len(found) != partitions:
                return None
            if any(sorted(isr) != [1, 2, 3] or leader < 0
                   for _, leader, _, _, isr, _ in found.values()):
                return None
            return found
        found = self.cluster.wait_for(full, WAIT, "the full ISR of %s" % topic)
        self.assertEqual(sorted(leader for _, leader, _, _, _, _ in found.values()), [1, 2, 3])
        return topic

    def producer(self, tid, **extra):
        from confluent_kafka import Producer

        conf = {"bootstrap.servers": self.cluster.bootstrap_servers, "transactional.id": tid,
                "linger.ms": 5, "transaction.timeout.ms": 60000}
        conf.update(extra)
        p = Producer(conf)
        p.init_transactions(WAIT)
        return p

    def read_committed(self, topic, partitions, expected_count, timeout=WAIT):
        """Every value of ``topic`` a read_committed consumer sees once the last offset of each
        partition is behind it (the LSO reached), sorted."""
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.cluster.bootstrap_servers,
                      "group.id": unique_name("reader"), "isolation.level": "read_committed",
                      "enable.partition.eof": True, "enable.auto.commit": False})
        try:
            c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
            got, eof = [], set()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and not (len(eof) == partitions
                                                       and len(got) >= expected_count):
                msg = c.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().code() == -191:  # _PARTITION_EOF
                        eof.add(msg.partition())
                    continue
                eof.discard(msg.partition())
                got.append(msg.value())
            return sorted(got)
        finally:
            c.close()

    def find_coordinator(self, broker_id, tid):
        c = RawClient(self.cluster.broker(broker_id), "find")
        try:
            r = c.request(10, 3, m.FindCoordinatorRequest(key=tid, key_type=1))
            return r.error_code, r.node_id
        finally:
            c.close()

    def state_leaders(self):
        found = None
        for b in self.cluster.brokers.values():
            if b.running:
                found = known_partitions(self.cluster, int(b.overrides["broker.id"]),
                                         "__transaction_state")
                break
        return {p: v[1] for p, v in (found or {}).items()}

    def wait_state_topic_full(self):
        """Every ``__transaction_state`` partition led with its full ISR (after a restart).
        The topic must exist already: only a transactional FindCoordinator creates it."""
        def full():
            found = known_partitions(self.cluster, 1, "__transaction_state")
            return found and len(found) == STATE_PARTITIONS and all(
                leader > 0 and sorted(isr) == [1, 2, 3] for _, leader, _, _, isr, _ in found.values())
        self.cluster.wait_for(full, WAIT, "the full ISR of __transaction_state")

    # -- tests -----------------------------------------------------------------------------
    def test_commit_and_abort_with_leaders_on_every_broker(self):
        topic = self.topic_led_everywhere()
        tid = unique_name("tid")
        p = self.producer(tid)
        # the coordinator is the state partition's leader, whichever broker is asked (each
        # answers from its own metadata cache: polled until an UpdateMetadata reached all)
        coordinator = self.state_leaders()[partition_for(tid, STATE_PARTITIONS)]
        self.cluster.wait_for(lambda: {self.find_coordinator(b, tid) for b in (1, 2, 3)}
                              == {(0, coordinator)}, WAIT, "every broker to name %d" % coordinator)
        committed, aborted = values("c", 9), values("a", 6)
        p.begin_transaction()
        for i, v in enumerate(committed):
            p.produce(topic, v, partition=i % 3)
        p.commit_transaction(WAIT)
        p.begin_transaction()
        for i, v in enumerate(aborted):
            p.produce(topic, v, partition=i % 3)
        self.assertEqual(p.flush(WAIT), 0)  # written, so the abort has records to mark
        p.abort_transaction(WAIT)
        p.begin_transaction()
        p.produce(topic, b"last", partition=2)
        p.commit_transaction(WAIT)
        self.assertEqual(self.read_committed(topic, 3, 10), sorted(committed + [b"last"]))

    def test_producer_ids_from_every_broker_are_distinct(self):
        from confluent_kafka import Producer

        ids = []
        for broker_id in (1, 2, 3, 1, 2, 3):
            c = RawClient(self.cluster.broker(broker_id), "pid")
            try:
                r = c.request(22, 4, m.InitProducerIdRequest(
                    transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                    producer_epoch=-1))
            finally:
                c.close()
            self.assertEqual((r.error_code, r.producer_epoch), (0, 0))
            ids.append(r.producer_id)
        self.assertEqual(len(set(ids)), 6, ids)
        block = json.loads(zk_read(self.cluster, "/latest_producer_id_block")[0])
        self.assertEqual(sorted(block), ["block_end", "block_start", "broker", "version"])
        self.assertEqual(int(block["block_end"]) - int(block["block_start"]), 999)
        self.assertGreaterEqual(int(block["block_start"]), 2000)  # three brokers took a block
        # idempotent producers bootstrapped to each broker write through their own ids
        topic = self.topic_led_everywhere()
        for broker_id in (1, 2, 3):
            prod = Producer({"bootstrap.servers": self.cluster.broker(broker_id).bootstrap_servers,
                             "enable.idempotence": True, "acks": "all", "linger.ms": 5})
            for i in range(3):
                prod.produce(topic, b"b%d-%d" % (broker_id, i), partition=i)
            self.assertEqual(prod.flush(WAIT), 0)
        seen = set()
        for p in range(3):
            leader = known_partitions(self.cluster, 1, topic)[p][1]
            c = RawClient(self.cluster.broker(leader), "producers")
            try:
                r = c.request(61, 0, m.DescribeProducersRequest(topics=[
                    m.DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[p])]))
            finally:
                c.close()
            part = r.topics[0].partitions[0]
            self.assertEqual(part.error_code, 0)
            self.assertEqual(len(part.active_producers), 3)
            seen |= {a.producer_id for a in part.active_producers}
        self.assertEqual(len(seen), 3)
        self.assertFalse(seen & set(ids))

    def describe(self, broker_id, tid):
        c = RawClient(self.cluster.broker(broker_id), "describe")
        try:
            return c.request(65, 0, m.DescribeTransactionsRequest(
                transactional_ids=[tid])).transaction_states[0]
        finally:
            c.close()

    def new_coordinator(self, tid, dead):
        """The broker leading ``tid``'s state partition once ``dead`` no longer does, as every
        live broker's FindCoordinator answers."""
        live = [b for b in (1, 2, 3) if b != dead]

        def moved():
            answers = {self.find_coordinator(b, tid) for b in live}
            if len(answers) == 1:
                code, node = answers.pop()
                if code == 0 and node in live:
                    return node
            return None
        return self.cluster.wait_for(moved, WAIT, "a new coordinator for %s" % tid)

    def restart(self, broker_id):
        self.cluster.broker(broker_id).start()
        self.cluster.wait_for_brokers([1, 2, 3])
        self.wait_state_topic_full()

    def test_coordinator_killed_between_and_inside_transactions(self):
        from confluent_kafka import KafkaException

        topic = self.topic_led_everywhere()
        tid = unique_name("tid")
        p = self.producer(tid)
        committed = values("a", 6)
        p.begin_transaction()
        for i, v in enumerate(committed):
            p.produce(topic, v, partition=i % 3)
        p.commit_transaction(WAIT)
        # between transactions: the next one runs on the new coordinator
        first = self.state_leaders()[partition_for(tid, STATE_PARTITIONS)]
        self.cluster.broker(first).kill()
        p.begin_transaction()
        for i, v in enumerate(values("b", 6)):
            p.produce(topic, v, partition=i % 3)
        p.commit_transaction(WAIT)
        committed += values("b", 6)
        second = self.new_coordinator(tid, first)
        self.restart(first)
        # inside a transaction: its records are written and its partitions added when the
        # coordinator dies; it commits on the next one, or the producer aborts or starts afresh
        p.begin_transaction()
        for i, v in enumerate(values("c", 6)):
            p.produce(topic, v, partition=i % 3)
        self.assertEqual(p.flush(WAIT), 0)
        self.cluster.broker(second).kill()
        try:
            p.commit_transaction(WAIT)
            committed += values("c", 6)
        except KafkaException as e:
            if e.args[0].txn_requires_abort():
                p.abort_transaction(WAIT)
            else:
                p = self.producer(tid)  # fences the old epoch, aborting what was open
        p.begin_transaction()
        p.produce(topic, b"last", partition=0)
        p.commit_transaction(WAIT)
        committed.append(b"last")
        third = self.new_coordinator(tid, second)
        self.assertEqual(self.read_committed(topic, 3, len(committed)), sorted(committed))
        self.assertEqual(self.describe(third, tid).transaction_state, "CompleteCommit")
        self.restart(second)

    def test_prepare_commit_completed_by_the_next_coordinator(self):
        """The coordinator dies (the armed crash point) right after PrepareCommit is in the
        state log on the ISR, before any marker: the next leader of the partition loads it,
        sends the markers and completes the commit; the producer's retried EndTxn succeeds."""
        topic = self.topic_led_everywhere()
        # init_transactions makes the state topic exist (created on the first FindCoordinator
        # of a transactional id): this test may be the first of the class on its cluster
        p = self.producer(CRASH_TID)
        self.wait_state_topic_full()
        first = self.state_leaders()[partition_for(CRASH_TID, STATE_PARTITIONS)]
        records = values("p", 9)
        p.begin_transaction()
        for i, v in enumerate(records):
            p.produce(topic, v, partition=i % 3)
        self.assertEqual(p.flush(WAIT), 0)
        p.commit_transaction(WAIT)
        poll_until(lambda: not self.cluster.broker(first).running, timeout=5,
                   message="the coordinator to have crashed at the point")
        second = self.new_coordinator(CRASH_TID, first)
        self.assertEqual(self.read_committed(topic, 3, len(records)), sorted(records))
        self.assertEqual(self.describe(second, CRASH_TID).transaction_state, "CompleteCommit")
        self.restart(first)

    def test_send_offsets_to_transaction_with_coordinators_on_different_brokers(self):
        """Consume-transform-produce: the group's offsets partition and the transaction's state
        partition are led by different brokers, so TxnOffsetCommit is verified with the other
        broker and the offsets' marker is a WriteTxnMarkers to it. Committed offsets appear with
        the commit; an aborted transaction's offsets never do."""
        from confluent_kafka import Consumer, Producer, TopicPartition

        from kafkatw.coordinator.group.offsets_log import partition_for as offsets_partition

        source, sink = self.topic_led_everywhere(), self.topic_led_everywhere()
        self.cluster.wait_for(lambda: known_partitions(self.cluster, 1, "__consumer_offsets") or
                              self.find_group_coordinator("warm-up"), WAIT, "__consumer_offsets")
        tid = unique_name("tid")
        p = self.producer(tid)  # __transaction_state exists from here on
        leaders = self.state_leaders()
        offsets_leaders = {p: v[1] for p, v in known_partitions(
            self.cluster, 1, "__consumer_offsets").items()}
        group = next(g for g in (unique_name("g") for _ in range(100))
                     if offsets_leaders[offsets_partition(g, 6)]
                     != leaders[partition_for(tid, STATE_PARTITIONS)])
        plain = Producer({"bootstrap.servers": self.cluster.bootstrap_servers, "acks": "all"})
        for i, v in enumerate(values("in", 9)):
            plain.produce(source, v, partition=i % 3)
        self.assertEqual(plain.flush(WAIT), 0)
        consumer = Consumer({"bootstrap.servers": self.cluster.bootstrap_servers, "group.id": group,
                             "enable.auto.commit": False, "isolation.level": "read_committed"})
        try:
            consumer.assign([TopicPartition(source, p, 0) for p in range(3)])
            got = []
            deadline = time.monotonic() + WAIT
            while len(got) < 9 and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None and not msg.error():
                    got.append(msg)
            self.assertEqual(len(got), 9)
            ends = [TopicPartition(source, part, 3) for part in (1, 2)]  # partition 0: aborted
            # aborted: neither the output nor the offsets
            p.begin_transaction()
            p.produce(sink, b"aborted", partition=0)
            p.send_offsets_to_transaction([TopicPartition(source, 0, 1)],
                                          consumer.consumer_group_metadata(), WAIT)
            p.abort_transaction(WAIT)
            p.begin_transaction()
            for msg in got:
                p.produce(sink, b"out-" + msg.value(), partition=msg.partition())
            p.send_offsets_to_transaction(ends, consumer.consumer_group_metadata(), WAIT)
            p.commit_transaction(WAIT)
        finally:
            consumer.close()
        expected = sorted(b"out-" + v for v in values("in", 9))
        self.assertEqual(self.read_committed(sink, 3, 9), expected)
        checker = Consumer({"bootstrap.servers": self.cluster.bootstrap_servers, "group.id": group,
                            "enable.auto.commit": False})
        try:
            def offsets():
                found = sorted((tp.partition, tp.offset) for tp in checker.committed(
                    [TopicPartition(source, part) for part in range(3)], timeout=10))
                return found if all(o == 3 for part, o in found if part) else None
            committed = poll_until(offsets, timeout=WAIT, interval=0.2,
                                   message="the committed transaction's offsets")
            self.assertEqual(committed, [(0, OFFSET_INVALID), (1, 3), (2, 3)])
        finally:
            checker.close()

    def find_group_coordinator(self, group):
        c = RawClient(self.cluster.broker(1), "find")
        try:
            r = c.request(10, 3, m.FindCoordinatorRequest(key=group, key_type=0))
            return r.error_code == 0
        finally:
            c.close()
