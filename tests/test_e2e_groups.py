"""Consumer groups with real clients against a real broker process: confluent-kafka,
kafka-python and aiokafka groups split a 6-partition topic without overlap; joins, leaves and
a killed member (found by session timeout) rebalance; manual commits make the union of what
was consumed equal what was produced; committed offsets survive kill -9; admin clients list,
describe, reset and delete groups; a static member restarting in time causes no rebalance.
"""

import asyncio
import signal
import subprocess
import sys
import time

from twisted.trial import unittest

from kafkatw.testing import KafkaBroker, KafkaBrokerMixin
from tests.support import poll_until, unique_name

PARTITIONS = 6
OVERRIDES = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "offsets.topic.num.partitions": 10,
}


def create_topic(bootstrap, topic, partitions=PARTITIONS):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the future resolves
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


def produce(bootstrap, topic, count, start=0):
    """``count`` records round-robin over the partitions; returns their values."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = []
    for i in range(start, start + count):
        v = ("v-%d" % i).encode()
        p.produce(topic, v, partition=i % PARTITIONS)
        values.append(v)
    assert p.flush(15) == 0
    return values


def confluent_consumer(bootstrap, group, topic, **extra):
    from confluent_kafka import Consumer

    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
            "topic.metadata.refresh.interval.ms": 1000}
    conf.update(extra)
    c = Consumer(conf)
    c.subscribe([topic])
    return c


def assignment_of(c):
    return sorted(tp.partition for tp in c.assignment())


_CRASH_SCRIPT = r"""
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "session.timeout.ms": 3000, "heartbeat.interval.ms": 300})
c.subscribe([sys.argv[3]])
reported = None
while True:
    c.poll(0.1)
    now = sorted(tp.partition for tp in c.assignment())
    if now != reported:
        reported = now
        print(",".join(map(str, now)), flush=True)
"""


class ConfluentGroupTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_overrides = OVERRIDES

    def poll_all(self, consumers, seen, want, timeout=30.0):
        """Poll round-robin, committing each record after processing, until ``want`` values."""
        deadline = time.monotonic() + timeout
        while len(seen) < want and time.monotonic() < deadline:
            for c in consumers:
                msg = c.poll(0.05)
                if msg is None or msg.error():
                    continue
                seen.append((id(c), msg.partition(), msg.value()))
                c.commit(message=msg, asynchronous=False)
        return seen

    def wait_balanced(self, consumers, seen=None, timeout=30.0):
        """Poll until the partitions are split over all ``consumers``; a record that arrives
        meanwhile is processed as :meth:`poll_all` does (kept in ``seen``, committed)."""

        def balanced():
            for c in consumers:
                msg = c.poll(0.05)
                if msg is None or msg.error():
                    continue
                if seen is None:
                    raise AssertionError("unexpected record while balancing: %r" % (msg.value(),))
                seen.append((id(c), msg.partition(), msg.value()))
                c.commit(message=msg, asynchronous=False)
            parts = [assignment_of(c) for c in consumers]
            flat = sorted(p for ps in parts for p in ps)
            return flat == list(range(PARTITIONS)) and all(parts)

        poll_until(balanced, timeout, message="a balanced assignment")
        return [assignment_of(c) for c in consumers]

    def test_split_join_leave_and_commit(self):
        topic, group = unique_name("cg"), unique_name("g")
        bs = self.broker.bootstrap_servers
        create_topic(bs, topic)
        produced = produce(bs, topic, 300)
        consumers = [confluent_consumer(bs, group, topic) for _ in range(3)]
        self.addCleanup(lambda: [c.close() for c in consumers])
        early = []  # read while the group was still rebalancing (owners may change)
        parts = self.wait_balanced(consumers, early)
        self.assertEqual(sorted(len(p) for p in parts), [2, 2, 2])
        late = self.poll_all(consumers, [], 300 - len(early))
        seen = early + late
        self.assertEqual(sorted(v for _, _, v in seen), sorted(produced))
        # once balanced, each partition is read only by the consumer it is assigned to
        assigned = {p: id(c) for c in consumers for p in assignment_of(c)}
        for cid, p, _ in late:
            self.assertEqual(cid, assigned[p], "partition %d read by a consumer it is not assigned to" % p)
        # a member joins
        consumers.append(confluent_consumer(bs, group, topic))
        parts = self.wait_balanced(consumers)
        self.assertEqual(sorted(len(p) for p in parts), [1, 1, 2, 2])
        # a member leaves (LeaveGroup on close)
        consumers.pop(0).close()
        self.wait_balanced(consumers)
        more = produce(bs, topic, 60, start=300)
        seen2 = self.poll_all(consumers, [], 60)
        self.assertEqual(sorted(v for _, _, v in seen2), sorted(more))
        # committed offsets: every record
        committed = consumers[0].committed([__import__("confluent_kafka").TopicPartition(topic, p)
                                            for p in range(PARTITIONS)], timeout=10)
        self.assertEqual([tp.offset for tp in committed], [60] * PARTITIONS)

    def test_crashed_member_found_by_session_timeout(self):
        topic, group = unique_name("crash"), unique_name("g")
        bs = self.broker.bootstrap_servers
        create_topic(bs, topic)
        proc = subprocess.Popen([sys.executable, "-c", _CRASH_SCRIPT, bs, group, topic],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        local = confluent_consumer(bs, group, topic, **{"session.timeout.ms": 3000})
        self.addCleanup(local.close)

        def split():
            local.poll(0.05)
            return len(assignment_of(local)) == 3

        poll_until(split, 30, message="a 3/3 split")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        t0 = time.monotonic()

        def all_mine():
            local.poll(0.05)
            return assignment_of(local) == list(range(PARTITIONS))

        poll_until(all_mine, 30, message="the survivor to own every partition")
        # the crash is noticed by the session timeout (3 s), not before
        self.assertGreater(time.monotonic() - t0, 2.0)
        self.assertIn("has failed, removing it from the group", self.broker.log_tail(400))

    def test_static_member_restart_causes_no_rebalance(self):
        topic, group = unique_name("static"), unique_name("g")
        bs = self.broker.bootstrap_servers
        create_topic(bs, topic)
        assigns = []
        a = confluent_consumer(bs, group, topic, **{"group.instance.id": "a", "session.timeout.ms": 10000})
        b = confluent_consumer(bs, group, topic, **{"group.instance.id": "b", "session.timeout.ms": 10000})
        b.subscribe([topic], on_assign=lambda c, ps: assigns.append(sorted(p.partition for p in ps)))
        self.addCleanup(b.close)
        self.wait_balanced([a, b])
        before = assignment_of(a)
        rebalances = self.broker.log_tail(2000).count("Preparing to rebalance group %s " % group)
        n_assigns = len(assigns)
        a.close()  # a static member sends no LeaveGroup
        a = confluent_consumer(bs, group, topic, **{"group.instance.id": "a", "session.timeout.ms": 10000})
        self.addCleanup(a.close)

        def has_partitions():
            a.poll(0.05)
            b.poll(0.05)
            return assignment_of(a) != []

        poll_until(has_partitions, 20, message="the restarted static member's assignment")
        self.assertEqual(assignment_of(a), before)
        for _ in range(20):
            b.poll(0.05)
        self.assertEqual(len(assigns), n_assigns)
        self.assertEqual(self.broker.log_tail(2000).count("Preparing to rebalance group %s " % group),
                         rebalances)

    def test_admin_list_describe_reset_delete(self):
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
        from confluent_kafka.admin import AdminClient

        topic, group = unique_name("adm"), unique_name("g")
        bs = self.broker.bootstrap_servers
        create_topic(bs, topic)
        produce(bs, topic, 60)
        admin = AdminClient({"bootstrap.servers": bs})
        c = confluent_consumer(bs, group, topic, **{"client.id": "adm-client"})
        seen = []
        self.wait_balanced([c], seen)
        self.poll_all([c], seen, 60)
        listed = admin.list_consumer_groups().result(10)
        self.assertIn((group, "STABLE"), [(g.group_id, g.state.name) for g in listed.valid])
        desc = admin.describe_consumer_groups([group])[group].result(10)
        self.assertEqual((desc.state.name, desc.partition_assignor, len(desc.members)),
                         ("STABLE", "range", 1))
        self.assertEqual(desc.members[0].client_id, "adm-client")
        self.assertEqual(sorted(tp.partition for tp in desc.members[0].assignment.topic_partitions),
                         list(range(PARTITIONS)))
        offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
        self.assertEqual(sorted((tp.topic, tp.partition, tp.offset) for tp in offsets.topic_partitions),
                         [(topic, p, 10) for p in range(PARTITIONS)])
        # a non-empty group can't be reset or deleted
        fut = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, 0, 3)])])[group]
        self.assertEqual([tp.error.code() for tp in fut.result(10).topic_partitions], [25])  # UNKNOWN_MEMBER_ID
        err = self.assertRaises(Exception, admin.delete_consumer_groups([group])[group].result, 10)
        self.assertEqual(err.args[0].code(), 68)  # NON_EMPTY_GROUP
        c.close()
        res = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, p, 3) for p in range(PARTITIONS)])])[group].result(10)
        self.assertEqual([tp.error for tp in res.topic_partitions], [None] * PARTITIONS)
        c2 = confluent_consumer(bs, group, topic)
        self.addCleanup(c2.close)
        seen = self.poll_all([c2], [], 42)
        self.assertEqual(sorted(v for _, _, v in seen),
                         sorted(("v-%d" % i).encode() for i in range(60) if i // PARTITIONS >= 3))
        c2.close()
        admin.delete_consumer_groups([group])[group].result(10)
        listed = admin.list_consumer_groups().result(10)
        self.assertNotIn(group, [g.group_id for g in listed.valid])
        offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, 0)])])[group].result(10)
        self.assertEqual([tp.offset for tp in offsets.topic_partitions], [-1001])


class RestartTests(unittest.SynchronousTestCase):
    """Committed offsets and group metadata survive a clean stop and kill -9."""

    def test_offsets_survive_restart_and_kill(self):
        from confluent_kafka import TopicPartition

        broker = KafkaBroker(overrides=OVERRIDES).start()
        self.addCleanup(broker.close)
        bs = broker.bootstrap_servers
        topic, group = unique_name("rs"), unique_name("g")
        create_topic(bs, topic)
        produce(bs, topic, 120)
        c = confluent_consumer(bs, group, topic)
        taken = 0
        deadline = time.monotonic() + 30
        while taken < 50 and time.monotonic() < deadline:
            msg = c.poll(0.1)
            if msg is not None and not msg.error():
                taken += 1
                c.commit(message=msg, asynchronous=False)
        committed = {tp.partition: tp.offset for tp in c.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)}
        self.assertEqual(sum(max(o, 0) for o in committed.values()), 50)
        c.close()
        for how in ("stop", "kill"):
            broker.kill() if how == "kill" else broker.stop()
            broker.start()
            bs = broker.bootstrap_servers
            produce(bs, topic, PARTITIONS)  # a record after each committed position
            c = confluent_consumer(bs, group, topic)
            first = {}
            deadline = time.monotonic() + 30
            while len(first) < PARTITIONS and time.monotonic() < deadline:
                msg = c.poll(0.1)
                if msg is not None and not msg.error():
                    first.setdefault(msg.partition(), msg.offset())
            c.close()
            self.assertEqual(first, {p: max(committed[p], 0) for p in range(PARTITIONS)}, how)


class KafkaPythonGroupTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_overrides = OVERRIDES

    def test_group_split_commit_and_admin(self):
        from kafka import KafkaConsumer, TopicPartition
        from kafka.admin import KafkaAdminClient
        from kafka.structs import OffsetAndMetadata

        topic, group = unique_name("kp"), unique_name("g")
        bs = self.broker.bootstrap_servers
        create_topic(bs, topic)
        produced = produce(bs, topic, 120)
        consumers = [KafkaConsumer(topic, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
                                   enable_auto_commit=False, session_timeout_ms=6000,
                                   heartbeat_interval_ms=300, consumer_timeout_ms=100) for _ in range(2)]
        self.addCleanup(lambda: [c.close() for c in consumers])
        seen = []
        per_consumer = [set(), set()]
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            for i, c in enumerate(consumers):
                batch = c.poll(timeout_ms=50)
                for tp, msgs in batch.items():
                    for msg in msgs:
                        seen.append(msg.value)
                        per_consumer[i].add(tp.partition)
                if batch:
                    c.commit()
            parts = [sorted(tp.partition for tp in c.assignment()) for c in consumers]
            if len(seen) >= 120 and all(parts) and sorted(parts[0] + parts[1]) == list(range(PARTITIONS)):
                break
        self.assertEqual(sorted(seen), sorted(produced))
        self.assertEqual(sorted(len(p) for p in parts), [3, 3])
        self.assertFalse(set(parts[0]) & set(parts[1]))
        admin = KafkaAdminClient(bootstrap_servers=bs)
        self.addCleanup(admin.close)
        self.assertEqual([(g["group_id"], g["group_state"]) for g in admin.list_groups() if g["group_id"] == group],
                         [(group, "Stable")])
        desc = admin.describe_groups([group])[group]
        self.assertEqual((desc["group_state"], desc["protocol_data"], len(desc["members"])), ("Stable", "range", 2))
        assigned = sorted(p for mem in desc["members"] for a in mem["member_assignment"]["assigned_partitions"]
                          for p in a["partitions"])
        self.assertEqual(assigned, list(range(PARTITIONS)))
        offsets = admin.list_group_offsets({group: None})[group]
        self.assertEqual({tp.partition: om.offset for tp, om in offsets.items()},
                         {p: 20 for p in range(PARTITIONS)})
        for c in consumers:
            c.close()
        result = admin.alter_group_offsets(group, {TopicPartition(topic, 0): OffsetAndMetadata(7, "", -1)})
        self.assertEqual([r.__name__ for r in result.values()], ["NoError"])
        self.assertEqual(admin.list_group_offsets({group: [TopicPartition(topic, 0)]})[group][
            TopicPartition(topic, 0)].offset, 7)
        self.assertEqual(admin.delete_groups([group, group + "-none"]),
                         {group: "OK", group + "-none": "GroupIdNotFoundError"})
        self.assertNotIn(group, [g["group_id"] for g in admin.list_groups()])


class AIOKafkaGroupTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_overrides = OVERRIDES

    def test_group_split_and_commit(self):
        from aiokafka import AIOKafkaConsumer

        topic, group = unique_name("aio"), unique_name("g")
        bs = self.broker.bootstrap_servers
        create_topic(bs, topic)
        produced = produce(bs, topic, 120)

        async def scenario():
            consumers = [AIOKafkaConsumer(topic, bootstrap_servers=bs, group_id=group,
                                          auto_offset_reset="earliest", enable_auto_commit=False,
                                          session_timeout_ms=6000, heartbeat_interval_ms=300)
                         for _ in range(2)]
            for c in consumers:
                await c.start()
            seen = []
            try:
                deadline = time.monotonic() + 40
                while time.monotonic() < deadline:
                    for c in consumers:
                        batch = await c.getmany(timeout_ms=50)
                        for tp, msgs in batch.items():
                            seen.extend(m.value for m in msgs)
                        if batch:
                            await c.commit()
                    parts = [sorted(tp.partition for tp in c.assignment()) for c in consumers]
                    if len(seen) >= 120 and all(parts) and \
                            sorted(parts[0] + parts[1]) == list(range(PARTITIONS)):
                        break
                committed = [await consumers[0].committed(tp) for tp in
                             sorted(consumers[0].assignment(), key=lambda tp: tp.partition)]
                return seen, parts, committed
            finally:
                for c in consumers:
                    await c.stop()

        seen, parts, committed = asyncio.run(scenario())
        self.assertEqual(sorted(seen), sorted(produced))
        self.assertEqual(sorted(len(p) for p in parts), [3, 3])
        self.assertFalse(set(parts[0]) & set(parts[1]))
        self.assertEqual(committed, [20, 20, 20])
