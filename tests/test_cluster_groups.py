"""Consumer groups on a three-broker cluster (ZooKeeper mode): the group coordinator is the
leader of the group's ``__consumer_offsets`` partition and moves with it. A SIGKILLed
coordinator: FindCoordinator answers the new leader, committed offsets are all there, the
group (classic and KIP-848) re-forms and consumes on without losing a record. A rolling
restart (SIGTERM, start, back in every ISR, broker after broker) under idempotent acks=all
production and confluent-kafka and kafka-python groups: nothing lost or duplicated, every
delivery acknowledged, committed positions end at the log end. Skips without ZooKeeper unless
KAFKATW_REQUIRE_ZOOKEEPER=1."""

import threading
import time

from twisted.trial import unittest

from kafkatw.coordinator.group.offsets_log import partition_for
from kafkatw.protocol import messages as m
from tests.support import RawClient, unique_name
from tests.test_cluster_e2e import create_topic, shared_cluster

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 3
PARTITIONS = 3
OVERRIDES = {"offsets.topic.num.partitions": OFFSETS_PARTITIONS, "default.replication.factor": 3,
             "min.insync.replicas": 2, "group.initial.rebalance.delay.ms": 0,
             "replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 200,
             "group.consumer.heartbeat.interval.ms": 1000,
             "group.consumer.min.heartbeat.interval.ms": 1000}


def cluster():
    return shared_cluster("groups", overrides=OVERRIDES)


def find_coordinator(broker, group):
    """(error code, node id) of FindCoordinator v4 for ``group`` asked of ``broker``."""
    client = RawClient(broker, "find-coordinator", timeout=10)
    try:
        body = client.request(10, 4, m.FindCoordinatorRequest(key_type=0, coordinator_keys=[group]))
    finally:
        client.close()
    c = body.coordinators[0]
    return c.error_code, c.node_id


def partitions_of(cluster_, topic, broker_id=None):
    found = cluster_.metadata(broker_id, [topic])[2].get(topic)
    return found if isinstance(found, dict) else {}


def wait_full_isr(cluster_, topics, ids=(1, 2, 3), timeout=150):
    """Until every partition of ``topics`` has a leader and all of ``ids`` in its ISR (a
    restarted broker catches up on every partition first: on a loaded CI machine that took
    over 60 s once); a timeout names the partitions still short."""
    short = []

    def full():
        del short[:]
        for topic in topics:
            parts = partitions_of(cluster_, topic)
            if not parts:
                short.append((topic, "no partitions"))
                continue
            for p, (error, leader, _, _, isr, _) in sorted(parts.items()):
                if error or leader < 0 or sorted(isr) != sorted(ids):
                    short.append(("%s-%d" % (topic, p), error, leader, sorted(isr)))
        return not short
    try:
        cluster_.wait_for(full, timeout, "full ISRs of %s" % (topics,))
    except AssertionError as e:
        # the story of the short partitions (and of the brokers coming and going) in every
        # broker's log: why a replica stayed out
        names = [s[0] for s in short[:10]] + ["brokers", "controlled shutdown"]
        raise AssertionError("%s; short: %s\n%s" % (e, short[:10], cluster_.state_change_log(
            lines=120, containing=names)))


def offsets_leader(cluster_, group, broker_id=None):
    """The leader of ``group``'s offsets partition in a broker's metadata (-1: none known)."""
    found = partitions_of(cluster_, OFFSETS_TOPIC, broker_id).get(partition_for(group, OFFSETS_PARTITIONS))
    return -1 if found is None else found[1]


def committed(bootstrap, group, topic):
    """{partition: committed offset} of ``group`` (OffsetFetch, without joining); None while
    the coordinator does not answer."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    except KafkaException:
        return None
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in tps if not tp.error}


class Production:
    """An idempotent acks=all producer recording every delivery report."""

    def __init__(self, bootstrap, topic):
        from confluent_kafka import Producer

        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 5})
        self.acked = {}  # (partition, offset) -> value
        self.failed = []
        self.sent = 0

    def _report(self, err, msg):
        if err is not None:
            self.failed.append(err)
        else:
            self.acked[(msg.partition(), msg.offset())] = msg.value()

    def produce(self, n):
        for _ in range(n):
            self.producer.produce(self.topic, value=b"v%d" % self.sent, partition=self.sent % PARTITIONS,
                                  on_delivery=self._report)
            self.sent += 1
            self.producer.poll(0)

    def flush(self, timeout=90):
        return self.producer.flush(timeout)

    def ends(self):
        """{partition: log end} as the acknowledged records say (they are all there is)."""
        out = {p: 0 for p in range(PARTITIONS)}
        for p, o in self.acked:
            out[p] = max(out[p], o + 1)
        return out


class GroupFailoverTests(unittest.TestCase):
    timeout = 300

    def setUp(self):
        self.cluster = cluster()

    def drive(self, consumers, consumed, done, timeout, what):
        """Poll and commit (synchronously, after each batch) with every consumer in turn until
        ``done()``; records are kept by (partition, offset)."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for c in consumers:
                msgs = c.consume(100, 0.2)
                for msg in msgs:
                    if msg.error() is None:
                        consumed[(msg.partition(), msg.offset())] = msg.value()
                if any(msg.error() is None for msg in msgs):
                    try:
                        c.commit(asynchronous=False)
                    except KafkaException:
                        pass  # a rebalance or the coordinator moving: committed again later
            if done():
                return
        self.fail("timed out after %d s waiting for %s" % (timeout, what))

    def failover(self, protocol):
        from confluent_kafka import Consumer

        cl = self.cluster
        bootstrap = cl.bootstrap_servers
        topic, group = unique_name("gf"), unique_name("g")
        create_topic(bootstrap, topic, PARTITIONS, 3)
        production = Production(bootstrap, topic)
        production.produce(300)
        self.assertEqual(production.flush(), 0)
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "group.protocol": protocol}
        if protocol == "classic":
            conf.update({"session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
        consumers = [Consumer(conf) for _ in range(2)]
        self.addCleanup(lambda: [c.close() for c in consumers])
        for c in consumers:
            c.subscribe([topic])
        wait_full_isr(cl, [topic, OFFSETS_TOPIC])
        consumed = {}
        ends = production.ends()
        self.drive(consumers, consumed, lambda: committed(bootstrap, group, topic) == ends, 90,
                   "the first 300 records consumed and committed")
        self.assertEqual(consumed, production.acked)

        # FindCoordinator from every broker names the offsets partition's leader (each broker
        # answers from its own metadata cache: polled until all of them know it)
        leader = offsets_leader(cl, group)
        def named():
            found = [find_coordinator(cl.broker(b), group) for b in (1, 2, 3)]
            return found == [(0, leader)] * 3
        cl.wait_for(named, 30, "every broker to name %d as the coordinator" % leader)
        cl.broker(leader).kill()
        live = [b for b in (1, 2, 3) if b != leader]

        def moved():
            new = offsets_leader(cl, group, live[0])
            return new not in (-1, leader) and all(
                find_coordinator(cl.broker(b), group) == (0, new) for b in live) and new
        new_leader = cl.wait_for(moved, 60, "the group coordinator to move from %d" % leader)
        self.assertIn(new_leader, live)
        live_bootstrap = ",".join(cl.broker(b).bootstrap_servers for b in live)
        # every committed offset is there at the new coordinator
        self.assertEqual(cl.wait_for(lambda: committed(live_bootstrap, group, topic) == ends, 60,
                                     "the committed offsets at the new coordinator"), True)

        production.produce(300)
        self.assertEqual(production.flush(), 0)
        self.assertEqual(production.failed, [])
        self.assertEqual(len(production.acked), 600)
        ends = production.ends()
        self.assertEqual(sum(ends.values()), 600)

        def all_in():
            # the group re-formed: its two members share the partitions, and all is committed
            assigned = sorted(tp.partition for c in consumers for tp in c.assignment())
            return assigned == list(range(PARTITIONS)) and \
                committed(live_bootstrap, group, topic) == ends
        self.drive(consumers, consumed, all_in, 120,
                   "all 600 records consumed and committed after the failover")
        self.assertEqual(consumed, production.acked)

    def test_classic_group_survives_the_coordinator_kill(self):
        self.failover("classic")

    def test_consumer_group_survives_the_coordinator_kill(self):
        self.failover("consumer")


def confluent_group(bootstrap, topic, group, consumed, stop):
    """A confluent-kafka member of ``group``: poll, keep records by (partition, offset), commit
    synchronously after each batch (at least once: a rebalance may hand records out again)."""
    from confluent_kafka import Consumer, KafkaException

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
                  "heartbeat.interval.ms": 1000})
    c.subscribe([topic])
    try:
        while not stop.is_set():
            good = [msg for msg in c.consume(200, 0.2) if msg.error() is None]
            for msg in good:
                consumed[(msg.partition(), msg.offset())] = msg.value()
            if good:
                try:
                    c.commit(asynchronous=False)
                except KafkaException:
                    pass
    finally:
        c.close()


def kafka_python_group(bootstrap, topic, group, consumed, stop):
    """The same with kafka-python's KafkaConsumer, which joins only once it knows the topic's
    partitions.

    kafka-python (3.0.12) can lose a rejoin: a leader that joined before its metadata held
    the topic rejoins when the partitions appear; computing that rejoin's assignment clears
    its reason to rejoin, so when poll()'s timeout ends before the SyncGroup answer (an
    acks=all write to ``__consumer_offsets``, slower while a restarted follower catches up),
    no later poll() collects the answer: the member stays rebalancing without heartbeats,
    the coordinator expires it after the session timeout and it never joins again. Knowing
    the partitions before the first JoinGroup leaves no such rejoin; a poll of a second
    (it returns as soon as records come) leaves any other rejoin more time to finish."""
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    c = KafkaConsumer(topic, bootstrap_servers=bootstrap.split(","), group_id=group,
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      session_timeout_ms=10000, heartbeat_interval_ms=1000)
    try:
        # a metadata fetch while subscribed: the coordinator's snapshot of the topic's
        # partitions is taken from it (the topic exists: create_topic waited for it)
        deadline = time.monotonic() + 60
        while not c.partitions_for_topic(topic):
            if time.monotonic() > deadline:
                raise AssertionError("kafka-python never saw the partitions of %s" % topic)
            time.sleep(0.2)
        while not stop.is_set():
            batch = c.poll(timeout_ms=1000)
            for tp, records in batch.items():
                for r in records:
                    consumed[(tp.partition, r.offset)] = r.value
            if batch:
                try:
                    c.commit()
                except KafkaError:
                    pass
    finally:
        c.close()


class RollingRestartTests(unittest.TestCase):
    timeout = 900

    def test_rolling_restart_under_production_and_two_groups(self):
        """Issue 20's check: SIGTERM, start and wait for every ISR, broker after broker, while
        an idempotent acks=all producer and two groups (confluent-kafka, kafka-python) run."""
        cl = cluster()
        bootstrap = cl.bootstrap_servers
        topic = unique_name("roll")
        create_topic(bootstrap, topic, PARTITIONS, 3)
        # start from a healthy cluster: the offsets topic exists (the first FindCoordinator
        # creates it) and, like the topic, has every broker in every ISR (earlier tests may
        # have killed a broker that is still catching up)
        cl.wait_for(lambda: find_coordinator(cl.broker(1), topic)[0] == 0, 60, "the offsets topic")
        wait_full_isr(cl, [topic, OFFSETS_TOPIC])
        production = Production(bootstrap, topic)
        stop_producing, stop_consuming = threading.Event(), threading.Event()

        def produce():
            while not stop_producing.is_set():
                production.produce(10)
                time.sleep(0.05)
            production.flushed = production.flush()

        groups = {unique_name("ck"): ({}, confluent_group), unique_name("kp"): ({}, kafka_python_group)}
        threads = [threading.Thread(target=produce)] + [
            threading.Thread(target=run, args=(bootstrap, topic, group, consumed, stop_consuming))
            for group, (consumed, run) in groups.items()]
        for t in threads:
            t.start()

        def stop_all():
            stop_producing.set()
            stop_consuming.set()
            for t in threads:
                t.join(60)
        self.addCleanup(stop_all)
        for group, (consumed, _) in groups.items():
            try:
                cl.wait_for(lambda: len(consumed) > 0, 60, "group %s to consume" % group)
            except AssertionError as e:
                raise AssertionError("%s; FindCoordinator answers %s" % (
                    e, [find_coordinator(cl.broker(b), group) for b in (1, 2, 3)]))
        for broker_id in (1, 2, 3):
            cl.broker(broker_id).stop()
            cl.broker(broker_id).start()
            cl.wait_for_brokers([1, 2, 3])
            wait_full_isr(cl, [topic, OFFSETS_TOPIC])
        time.sleep(1)  # production goes on a little after the last restart (not a synchronisation)
        stop_producing.set()
        threads[0].join(120)
        self.assertFalse(threads[0].is_alive())
        self.assertEqual((production.flushed, production.failed), (0, []))
        self.assertEqual(len(production.acked), production.sent)
        self.assertEqual(len(set(production.acked.values())), production.sent)
        ends = production.ends()
        self.assertEqual(sum(ends.values()), production.sent)  # no gaps, nothing else in the log
        for group in groups:
            cl.wait_for(lambda: committed(bootstrap, group, topic) == ends, 90,
                        "group %s to commit the log end %s" % (group, ends))
        stop_consuming.set()
        for t in threads[1:]:
            t.join(60)
            self.assertFalse(t.is_alive())
        for group, (consumed, _) in groups.items():
            self.assertEqual(consumed, production.acked, group)
            self.assertEqual(committed(bootstrap, group, topic), ends)  # lag 0
