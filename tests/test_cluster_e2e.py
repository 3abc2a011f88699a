"""Three brokers and ZooKeeper (kafkatw.testing.KafkaCluster) with real clients: metadata from
every broker (kcat -L too), rack-aware topic creation, RF 1 produce/consume across brokers,
configs and deletion through the controller, the controller's failover with epoch fencing, and
elections after broker failures (clean: first live ISR member; none: offline until an ISR
member returns). Skips without ZooKeeper unless KAFKATW_REQUIRE_ZOOKEEPER=1."""

import atexit
import json
import os
import re
import shutil
import subprocess
import time

from twisted.trial import unittest

from kafkatw import testing
from tests.support import unique_name

SESSION_TIMEOUT_MS = 6000  # long enough that a loaded CI machine does not expire sessions
RACKS = ["rack-a", "rack-b", "rack-c"]

_shared = {}


def require_zookeeper():
    if not testing.zookeeper_available():
        if os.environ.get("KAFKATW_REQUIRE_ZOOKEEPER") == "1":
            raise AssertionError("ZooKeeper is required (KAFKATW_REQUIRE_ZOOKEEPER=1) but java or "
                                 "Debian's zookeeper package is missing")
        raise unittest.SkipTest("ZooKeeper (Debian's zookeeper package) is not installed")


def shared_cluster(key, **options):
    """One running cluster per key for the test process (closed at exit)."""
    require_zookeeper()
    cluster = _shared.get(key)
    if cluster is None:
        cluster = _shared[key] = testing.KafkaCluster(brokers=3, racks=RACKS,
                                                      session_timeout_ms=SESSION_TIMEOUT_MS, **options).start()
        atexit.register(cluster.close)
    for b in cluster.brokers.values():
        if not b.running:
            b.start()
    cluster.wait_for_brokers([1, 2, 3])
    return cluster


def admin(bootstrap):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap, name, partitions, rf, configs=None):
    from confluent_kafka.admin import NewTopic

    client = admin(bootstrap)  # kept while waiting: a collected client fails its futures
    futures = client.create_topics([NewTopic(name, partitions, rf, config=configs or {})], operation_timeout=30)
    futures[name].result(60)


def known_partitions(cluster, broker_id, topic):
    """The topic's partitions in ``broker_id``'s metadata, or None while it answers an error."""
    found = cluster.metadata(broker_id, [topic])[2].get(topic)
    return found if isinstance(found, dict) and found else None


def zk_read(cluster, path):
    """(data, stat) of a znode under the cluster's chroot, read with a blocking kazoo client."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=cluster.zookeeper_connect)
    client.start(timeout=20)
    try:
        return client.get(path)
    finally:
        client.stop()
        client.close()


def controller_epoch(cluster):
    return int(zk_read(cluster, "/controller_epoch")[0])


def partition_state(cluster, topic, partition):
    data, stat = zk_read(cluster, "/brokers/topics/%s/partitions/%d/state" % (topic, partition))
    return json.loads(data), stat.version


class ClusterMetadataTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.cluster = shared_cluster("metadata")

    def test_rack_aware_topic_in_every_brokers_metadata_and_kcat(self):
        topic = unique_name("rf3")
        create_topic(self.cluster.broker(2).bootstrap_servers, topic, 6, 3)
        views = []
        for broker_id in (1, 2, 3):
            # broker 2 answered once it knew the leaders; the others learn them right after
            self.cluster.wait_for(lambda: known_partitions(self.cluster, broker_id, topic), 30,
                                  "broker %d to know the topic" % broker_id)
            brokers, controller, topics = self.cluster.metadata(broker_id, [topic])
            self.assertEqual(sorted(brokers), [1, 2, 3])
            self.assertEqual({b: brokers[b][2] for b in brokers}, {1: "rack-a", 2: "rack-b", 3: "rack-c"})
            views.append((controller, topics[topic]))
        self.assertEqual(views[0], views[1])
        self.assertEqual(views[0], views[2])
        partitions = views[0][1]
        self.assertEqual(sorted(partitions), list(range(6)))
        for p, (error, leader, epoch, replicas, isr, offline) in partitions.items():
            self.assertEqual((error, epoch, offline), (0, 0, []))
            self.assertEqual(sorted(replicas), [1, 2, 3])  # one replica per rack
            self.assertEqual((leader, isr), (replicas[0], replicas))
        self.assertEqual(sorted(p[1] for p in partitions.values()), [1, 1, 2, 2, 3, 3])
        kcat = shutil.which("kcat") or shutil.which("kafkacat")
        if kcat is None:
            return
        out = subprocess.run([kcat, "-L", "-b", self.cluster.broker(3).bootstrap_servers, "-t", topic],
                             capture_output=True, text=True, timeout=30).stdout
        self.assertIn(" 3 brokers:", out)
        for broker_id in (1, 2, 3):
            self.assertIn("broker %d at 127.0.0.1:%d" % (broker_id, self.cluster.broker(broker_id).port), out)
        self.assertIn("(controller)", out)
        for p, (_, leader, _, replicas, isr, _) in partitions.items():
            self.assertIn("partition %d, leader %d, replicas: %s, isrs: %s"
                          % (p, leader, ",".join(map(str, replicas)), ",".join(map(str, isr))), out)

    def test_rf1_produce_and_consume_across_brokers(self):
        from confluent_kafka import Consumer, Producer, TopicPartition

        topic = unique_name("rf1")
        create_topic(self.cluster.broker(1).bootstrap_servers, topic, 6, 1)
        # the creating broker answered once it knew the leaders; broker 3 learns them just after
        partitions = self.cluster.wait_for(lambda: known_partitions(self.cluster, 3, topic), 30,
                                           "broker 3 to know the topic")
        self.assertEqual(sorted(p[1] for p in partitions.values()), [1, 1, 2, 2, 3, 3])
        producer = Producer({"bootstrap.servers": self.cluster.broker(1).bootstrap_servers, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5})
        sent = {}
        for i in range(300):
            p = i % 6
            producer.produce(topic, value=b"%d" % i, partition=p)
            sent.setdefault(p, []).append(b"%d" % i)
        self.assertEqual(producer.flush(30), 0)
        consumer = Consumer({"bootstrap.servers": self.cluster.broker(3).bootstrap_servers,
                             "group.id": unique_name("g"), "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, p, 0) for p in range(6)])
        got = {}
        deadline = time.monotonic() + 30
        try:
            while sum(map(len, got.values())) < 300 and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is None or m.error():
                    continue
                got.setdefault(m.partition(), []).append(m.value())
        finally:
            consumer.close()
        self.assertEqual(got, sent)

    def test_topic_configs_apply_to_the_logs_on_every_broker(self):
        """A topic's logs on every leader are made with its configs (LeaderAndIsr comes before
        UpdateMetadata names the topic): max.message.bytes refuses a larger batch everywhere."""
        from confluent_kafka import KafkaError, Producer

        topic = unique_name("maxmsg")
        create_topic(self.cluster.broker(1).bootstrap_servers, topic, 3, 1, {"max.message.bytes": "2000"})
        partitions = self.cluster.wait_for(lambda: known_partitions(self.cluster, 2, topic), 30, "the topic")
        self.assertEqual(sorted(p[1] for p in partitions.values()), [1, 2, 3])
        producer = Producer({"bootstrap.servers": self.cluster.broker(2).bootstrap_servers, "acks": "all",
                             "compression.type": "none", "message.max.bytes": 1000000})
        outcome = {}
        for kind, size in (("small", 100), ("large", 5000)):  # one batch each
            for p in range(3):
                producer.produce(topic, value=b"x" * size, partition=p,
                                 on_delivery=lambda err, msg, k=(kind, p): outcome.setdefault(k, err))
            producer.flush(30)
        self.assertEqual({k: None if e is None else e.code() for k, e in outcome.items()},
                         {**{("small", p): None for p in range(3)},
                          **{("large", p): KafkaError.MSG_SIZE_TOO_LARGE for p in range(3)}})

    def test_create_partitions_and_auto_creation(self):
        from confluent_kafka import Producer
        from confluent_kafka.admin import NewPartitions

        topic = unique_name("grow")
        create_topic(self.cluster.broker(1).bootstrap_servers, topic, 2, 2)
        client = admin(self.cluster.broker(3).bootstrap_servers)
        client.create_partitions([NewPartitions(topic, 5)])[topic].result(60)
        for broker_id in (1, 2, 3):
            partitions = self.cluster.wait_for(
                lambda: (known_partitions(self.cluster, broker_id, topic) or {}).keys() == set(range(5))
                and known_partitions(self.cluster, broker_id, topic), 30, "five partitions on %d" % broker_id)
            for p, (error, leader, _, replicas, isr, _) in partitions.items():
                self.assertEqual((error, len(set(replicas)), leader, isr), (0, 2, replicas[0], replicas))
        auto = unique_name("auto")
        producer = Producer({"bootstrap.servers": self.cluster.broker(2).bootstrap_servers, "acks": "all"})
        done = []
        for p in range(5):
            producer.produce(topic, value=b"grown", partition=p, on_delivery=lambda err, msg: done.append(err))
        producer.produce(auto, value=b"auto", on_delivery=lambda err, msg: done.append(err))
        self.assertEqual(producer.flush(30), 0)
        self.assertEqual(done, [None] * 6)
        self.assertEqual(len(known_partitions(self.cluster, 1, auto)), 1)  # num.partitions, default RF

    def test_configs_and_deletion_reach_every_broker(self):
        from confluent_kafka.admin import ConfigResource

        topic = unique_name("cfg")
        create_topic(self.cluster.broker(1).bootstrap_servers, topic, 3, 1, {"retention.ms": "100000"})
        resource = ConfigResource("TOPIC", topic, set_config={"retention.ms": "123456"})
        client = admin(self.cluster.broker(1).bootstrap_servers)
        client.alter_configs([resource])[resource].result(30)
        client3 = admin(self.cluster.broker(3).bootstrap_servers)

        def described():
            r = ConfigResource("TOPIC", topic)
            entries = client3.describe_configs([r])[r].result(30)
            return entries["retention.ms"].value == "123456"
        self.cluster.wait_for(described, 30, "broker 3 to see the new retention.ms")
        client2 = admin(self.cluster.broker(2).bootstrap_servers)
        client2.delete_topics([topic], operation_timeout=30)[topic].result(60)
        for broker_id in (1, 2, 3):
            self.cluster.wait_for(lambda: topic not in self.cluster.metadata(broker_id)[2], 30,
                                  "broker %d to forget %s" % (broker_id, topic))
        # brokers forget the topic first (LeaderDuringDelete), then the controller removes its znodes
        self.cluster.wait_for(lambda: zk_read_children(self.cluster, "/admin/delete_topics") == [], 30,
                              "the deletion mark to go")
        self.assertNotIn(topic, zk_read_children(self.cluster, "/brokers/topics"))
        self.assertNotIn(topic, zk_read_children(self.cluster, "/config/topics"))

        def logs_gone():
            return not any(d.startswith(topic + "-") and not d.endswith("-delete")
                           for b in self.cluster.brokers.values() for d in os.listdir(b.data_dir))
        self.cluster.wait_for(logs_gone, 30, "the partition logs to be deleted")


def zk_read_children(cluster, path):
    from kazoo.client import KazooClient

    client = KazooClient(hosts=cluster.zookeeper_connect)
    client.start(timeout=20)
    try:
        return client.get_children(path)
    finally:
        client.stop()
        client.close()


class ControllerFailoverTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.cluster = shared_cluster("failover")

    def other_brokers(self, *excluded):
        return [b for b in (1, 2, 3) if b not in excluded]

    def test_killed_controller_is_replaced_and_a_paused_one_is_fenced(self):
        cluster = self.cluster
        topic = unique_name("fence")
        create_topic(cluster.broker(1).bootstrap_servers, topic, 3, 3)
        first = cluster.controller_id()
        epoch = controller_epoch(cluster)
        cluster.broker(first).kill()
        started = time.monotonic()
        survivors = self.other_brokers(first)

        def new_controller():
            ids = {cluster.metadata(b)[1] for b in survivors}
            return ids.pop() if len(ids) == 1 and ids <= set(survivors) else None
        second = cluster.wait_for(new_controller, 30, "a new controller")
        self.assertLess(time.monotonic() - started, SESSION_TIMEOUT_MS / 1000.0 + 10)
        self.assertEqual(controller_epoch(cluster), epoch + 1)
        cluster.broker(first).start()
        cluster.wait_for_brokers([1, 2, 3])
        self.assertEqual(cluster.controller_id(), second)

        # the second controller freezes past its session: the third takes over with epoch + 2
        cluster.broker(second).pause()
        third_candidates = self.other_brokers(second)
        try:
            def third_controller():
                ids = {cluster.metadata(b)[1] for b in third_candidates}
                return ids.pop() if len(ids) == 1 and ids <= set(third_candidates) else None
            third = cluster.wait_for(third_controller, 30, "a controller other than the paused one")
            self.assertEqual(controller_epoch(cluster), epoch + 2)
            before = {p: partition_state(cluster, topic, p) for p in range(3)}
        finally:
            cluster.broker(second).resume()
        # resumed, the old controller finds its session gone: it registers again and follows
        cluster.wait_for_brokers([1, 2, 3])
        self.assertEqual(cluster.controller_id(), third)
        self.assertEqual(controller_epoch(cluster), epoch + 2)
        after = {p: partition_state(cluster, topic, p) for p in range(3)}
        for p in range(3):
            state, _ = after[p]
            self.assertLessEqual(state["controller_epoch"], epoch + 2)
            if before[p][0]["leader"] != -1 and after[p][0]["controller_epoch"] != epoch + 2:
                self.assertEqual(after[p], before[p])  # nobody but the third controller wrote since
        log = open(cluster.broker(second).log_path).read()
        self.assertIn("ZooKeeper session of broker %d expired" % second, log)


class ElectionTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.cluster = shared_cluster("elections")

    def leader_isr(self, topic, partition, broker_id):
        """(leader, sorted ISR, leader epoch, sorted offline replicas) in ``broker_id``'s metadata."""
        _, _, topics = self.cluster.metadata(broker_id, [topic])
        if not isinstance(topics[topic], dict):
            raise ValueError("broker %d answers error %s for %s" % (broker_id, topics[topic], topic))
        _, leader, epoch, _, isr, offline = topics[topic][partition]
        return leader, sorted(isr), epoch, sorted(offline)

    def test_clean_election_then_offline_until_an_isr_member_returns(self):
        cluster = self.cluster
        topic = unique_name("elect")
        create_topic(cluster.broker(1).bootstrap_servers, topic, 1, 3)
        replicas = cluster.wait_for(lambda: known_partitions(cluster, 1, topic), 30, "the topic")[0][3]
        a, b, c = replicas  # assignment order: a leads
        cluster.wait_for(lambda: self.leader_isr(topic, 0, b)[:2] == (a, sorted(replicas)), 30, "b to know it")

        cluster.broker(b).stop()  # a follower leaves: out of the ISR, a keeps leading
        cluster.wait_for(lambda: self.leader_isr(topic, 0, a)[:2] == (a, sorted([a, c])), 30, "ISR without b")
        cluster.broker(a).kill()  # the leader dies: c is the only live ISR member
        state = cluster.wait_for(lambda: self.leader_isr(topic, 0, c)[::3] == (c, sorted([a, b]))
                                 and self.leader_isr(topic, 0, c), 30, "c leading")
        self.assertEqual((state[0], state[1], state[3]), (c, [c], sorted([a, b])))
        self.assertGreaterEqual(state[2], 2)  # a loaded machine may expire a session once more
        cluster.broker(c).stop()  # the last ISR member goes: no leader, c stays in the ISR
        cluster.broker(b).start()  # a stale replica returns: unclean election is off
        cluster.wait_for_brokers([b])
        self.assertEqual(self.leader_isr(topic, 0, b)[:2], (-1, [c]))
        state, _ = partition_state(cluster, topic, 0)
        self.assertEqual((state["leader"], state["isr"]), (-1, [c]))
        # the topic allows an unclean election: the stale replica leads, alone in the ISR
        from confluent_kafka.admin import ConfigResource

        resource = ConfigResource("TOPIC", topic, set_config={"unclean.leader.election.enable": "true"})
        client = admin(cluster.broker(b).bootstrap_servers)
        client.alter_configs([resource])[resource].result(30)
        cluster.wait_for(lambda: self.leader_isr(topic, 0, b)[:2] == (b, [b]), 30, "b leading uncleanly")
        resource = ConfigResource("TOPIC", topic, set_config={"unclean.leader.election.enable": "false"})
        client.alter_configs([resource])[resource].result(30)
        cluster.broker(c).start()  # the old ISR member returns: b leads on
        cluster.wait_for_brokers([b, c])
        cluster.broker(a).start()
        cluster.wait_for_brokers([1, 2, 3])
        leader, isr, _, offline = self.leader_isr(topic, 0, a)
        self.assertEqual((leader, offline), (b, []))
        self.assertIn(b, isr)  # the others rejoin only once the leader says they caught up

    def test_controlled_shutdown_moves_leadership_before_stopping(self):
        cluster = self.cluster
        topic = unique_name("cs")
        create_topic(cluster.broker(1).bootstrap_servers, topic, 3, 3)
        partitions = cluster.wait_for(lambda: known_partitions(cluster, 1, topic), 30, "the topic")
        leaders = {p: s[1] for p, s in partitions.items()}
        stopping, controller = leaders[0], cluster.controller_id()
        cluster.broker(stopping).stop()
        # the controller moved its leadership and took it out of the ISRs while it still ran
        # (a partition of another test that only it can lead may remain: it stops anyway)
        with open(cluster.broker(controller).log_path) as f:
            moved = re.findall(r"controlled shutdown of broker %d: (\d+) partition\(s\) moved" % stopping, f.read())
        self.assertTrue(moved and int(moved[-1]) >= 3, moved)
        survivor = [b for b in (1, 2, 3) if b != stopping][0]

        def moved():
            state = known_partitions(cluster, survivor, topic)
            return all(s[1] != stopping and stopping not in s[4] for s in state.values()) and state
        state = cluster.wait_for(moved, 30, "leaders and ISRs without the stopped broker")
        for p, (_, leader, epoch, replicas, isr, _) in state.items():
            if leaders[p] == stopping:  # the next ISR member in assignment order took over
                self.assertEqual(leader, [r for r in replicas if r != stopping][0])
            else:
                self.assertEqual(leader, leaders[p])
            self.assertEqual(epoch, 1)  # one change: leaving the ISR was not a second one
        cluster.broker(stopping).start()
        cluster.wait_for_brokers([1, 2, 3])

    def test_zookeeper_restart_keeps_the_cluster(self):
        """ZooKeeper down for less than a session: the brokers reconnect (with their sessions,
        so the same registrations and controller, unless a loaded machine reconnects too late)
        and admin requests work again."""
        cluster = self.cluster
        controller, epoch = cluster.controller_id(), controller_epoch(cluster)
        epochs = {b: zk_read(cluster, "/brokers/ids/%d" % b)[1].czxid for b in (1, 2, 3)}
        cluster.zookeeper.kill()
        try:
            # brokers keep answering clients from what they know
            self.assertEqual(sorted(cluster.metadata(2)[0]), [1, 2, 3])
        finally:
            cluster.zookeeper.start()
        topic = unique_name("after-zk")
        create_topic(cluster.broker(3).bootstrap_servers, topic, 3, 3)
        cluster.wait_for(lambda: known_partitions(cluster, 1, topic), 30, "the new topic")
        cluster.wait_for_brokers([1, 2, 3])
        now = {b: zk_read(cluster, "/brokers/ids/%d" % b)[1].czxid for b in (1, 2, 3)}
        if now == epochs:  # every session survived (a loaded machine may reconnect too late)
            self.assertEqual((cluster.controller_id(), controller_epoch(cluster)), (controller, epoch))
        else:  # brokers whose session expired registered again; a new controller has a new epoch
            self.assertGreaterEqual(controller_epoch(cluster), epoch)


class JoiningTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.cluster = shared_cluster("metadata")

    def test_a_broker_of_another_cluster_refuses_to_join(self):
        data = os.path.join(self.cluster.work_dir, "stranger", "kafka-logs")
        os.makedirs(data)
        with open(os.path.join(data, "meta.properties"), "w") as f:
            f.write("version=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\nnode.id=9\n")
        stranger = testing.KafkaBroker(data_dir=data, overrides={
            "broker.id": 9, "zookeeper.connect": self.cluster.zookeeper_connect})
        self.addCleanup(stranger.close)
        with self.assertRaises(testing.BrokerStartError) as e:
            stranger.start()
        self.assertIn("doesn't match stored clusterId AAAAAAAAAAAAAAAAAAAAAA in meta.properties. The broker is "
                      "trying to join the wrong cluster.", e.exception.reason)
        self.assertNotIn(9, self.cluster.metadata()[0])

    def test_cluster_mode_needs_a_broker_id(self):
        broker = testing.KafkaBroker(overrides={"zookeeper.connect": self.cluster.zookeeper_connect})
        self.addCleanup(broker.close)
        with self.assertRaises(testing.BrokerStartError) as e:
            broker.start()
        self.assertEqual(e.exception.reason, "bad broker configuration: broker.id (or node.id) must be set in "
                                             "cluster mode (zookeeper.connect)")


class ClientQuotaTests(unittest.SynchronousTestCase):
    """Client quotas live in ZooKeeper (/config/users, /config/clients): set through one broker,
    every broker describes (and applies) them, also after a restart."""

    def setUp(self):
        self.cluster = shared_cluster("metadata")

    def quotas(self, broker_id, user):
        from kafkatw.protocol import messages as m
        from tests.support import RawClient

        R = m.DescribeClientQuotasRequest
        client = RawClient(self.cluster.broker(broker_id))
        try:
            resp = client.request(48, 1, R(components=[R.ComponentData(entity_type="user", match_type=0,
                                                                        match=user)], strict=False))
        finally:
            client.close()
        self.assertEqual(resp.error_code, 0)
        return {tuple((e.entity_type, e.entity_name) for e in entry.entity):
                {v.key: v.value for v in entry.values} for entry in resp.entries}

    def test_quotas_set_through_one_broker_reach_every_broker(self):
        from kafkatw.protocol import messages as m
        from tests.support import RawClient

        user = unique_name("u")
        A = m.AlterClientQuotasRequest
        client = RawClient(self.cluster.broker(1))
        self.addCleanup(client.close)
        resp = client.request(49, 1, A(entries=[A.EntryData(
            entity=[A.EntityData(entity_type="user", entity_name=user),
                    A.EntityData(entity_type="client-id", entity_name="app 1")],
            ops=[A.OpData(key="producer_byte_rate", value=2048, remove=False),
                 A.OpData(key="request_percentage", value=12.5, remove=False)])], validate_only=False))
        self.assertEqual([e.error_code for e in resp.entries], [0])
        expected = {(("client-id", "app 1"), ("user", user)): {"producer_byte_rate": 2048.0,
                                                                 "request_percentage": 12.5}}
        for broker_id in (1, 2, 3):
            self.cluster.wait_for(lambda: self.quotas(broker_id, user) == expected, 30,
                                  "broker %d to describe the quota" % broker_id)
        data, _ = zk_read(self.cluster, "/config/users/%s/clients/app%%201" % user)
        self.assertEqual(json.loads(data)["config"], {"producer_byte_rate": "2048", "request_percentage": "12.5"})
        self.cluster.broker(3).restart()
        self.cluster.wait_for_brokers([1, 2, 3])
        self.assertEqual(self.quotas(3, user), expected)


class ControllerRequestTests(unittest.SynchronousTestCase):
    """AlterPartition on the controller and the brokers' epoch checks, over the wire."""

    def setUp(self):
        self.cluster = shared_cluster("metadata")

    def rf3_topic(self):
        topic = unique_name("ap")
        create_topic(self.cluster.broker(1).bootstrap_servers, topic, 1, 3)
        for broker_id in (1, 2, 3):
            self.cluster.wait_for(lambda: known_partitions(self.cluster, broker_id, topic), 30, "the topic")
        data, _ = zk_read(self.cluster, "/brokers/topics/" + topic)
        from kafkatw.protocol.uuids import uuid_from_base64

        return topic, uuid_from_base64(json.loads(data)["topic_id"])

    def raw(self, broker_id):
        from tests.support import RawClient

        client = RawClient(self.cluster.broker(broker_id))
        self.addCleanup(client.close)
        return client

    def alter(self, to, topic_id, broker_id, broker_epoch, leader_epoch, partition_epoch, isr):
        from kafkatw.protocol import messages as m

        R = m.AlterPartitionRequest
        body = R(broker_id=broker_id, broker_epoch=broker_epoch, topics=[R.TopicData(topic_id=topic_id, partitions=[
            R.PartitionData(partition_index=0, leader_epoch=leader_epoch, new_isr=isr,
                            partition_epoch=partition_epoch)])])
        return self.raw(to).request(56, 2, body)

    def test_alter_partition_on_the_controller(self):
        from kafkatw.protocol import errors

        topic, topic_id = self.rf3_topic()
        state, version = partition_state(self.cluster, topic, 0)
        leader, epoch, isr = state["leader"], state["leader_epoch"], state["isr"]
        leader_epoch_zk = zk_read(self.cluster, "/brokers/ids/%d" % leader)[1].czxid
        controller = self.cluster.controller_id()
        other = [b for b in (1, 2, 3) if b != controller][0]
        shrunk = [b for b in isr if b != [r for r in isr if r != leader][-1]]

        resp = self.alter(other, topic_id, leader, leader_epoch_zk, epoch, version, shrunk)
        self.assertEqual(resp.error_code, errors.NOT_CONTROLLER)
        resp = self.alter(controller, topic_id, leader, leader_epoch_zk - 1, epoch, version, shrunk)
        self.assertEqual(resp.error_code, errors.STALE_BROKER_EPOCH)
        follower = [b for b in isr if b != leader][0]
        follower_epoch = zk_read(self.cluster, "/brokers/ids/%d" % follower)[1].czxid
        for args, code in (((follower, follower_epoch, epoch, version, shrunk), errors.NOT_LEADER_OR_FOLLOWER),
                           ((leader, leader_epoch_zk, epoch - 1, version, shrunk), errors.FENCED_LEADER_EPOCH),
                           ((leader, leader_epoch_zk, epoch, version + 1, shrunk), errors.INVALID_UPDATE_VERSION),
                           ((leader, leader_epoch_zk, epoch, version, [leader, 99]), errors.INELIGIBLE_REPLICA)):
            resp = self.alter(controller, topic_id, *args)
            self.assertEqual((resp.error_code, resp.topics[0].partitions[0].error_code), (0, code), args)
        self.assertEqual(partition_state(self.cluster, topic, 0), (state, version))

        resp = self.alter(controller, topic_id, leader, leader_epoch_zk, epoch, version, shrunk)
        p = resp.topics[0].partitions[0]
        self.assertEqual((resp.error_code, p.error_code, p.leader_id, p.leader_epoch, p.isr, p.partition_epoch),
                         (0, 0, leader, epoch, shrunk, version + 1))
        now, now_version = partition_state(self.cluster, topic, 0)
        self.assertEqual((now["isr"], now["leader_epoch"], now_version), (shrunk, epoch, version + 1))
        for broker_id in (1, 2, 3):
            self.cluster.wait_for(
                lambda: known_partitions(self.cluster, broker_id, topic)[0][4] == shrunk, 30,
                "broker %d to see the ISR %s" % (broker_id, shrunk))
        # the same request again names a partition epoch that is gone
        resp = self.alter(controller, topic_id, leader, leader_epoch_zk, epoch, version, isr)
        self.assertEqual(resp.topics[0].partitions[0].error_code, errors.INVALID_UPDATE_VERSION)

    def test_controlled_shutdown_requests(self):
        from kafkatw.protocol import errors
        from kafkatw.protocol import messages as m

        controller = self.cluster.controller_id()
        other = [b for b in (1, 2, 3) if b != controller][0]
        epoch = zk_read(self.cluster, "/brokers/ids/%d" % other)[1].czxid
        resp = self.raw(other).request(7, 3, m.ControlledShutdownRequest(broker_id=other, broker_epoch=epoch))
        self.assertEqual(resp.error_code, errors.NOT_CONTROLLER)
        resp = self.raw(controller).request(7, 3, m.ControlledShutdownRequest(broker_id=other,
                                                                               broker_epoch=epoch - 1))
        self.assertEqual((resp.error_code, resp.remaining_partitions), (errors.STALE_BROKER_EPOCH, []))
        resp = self.raw(controller).request(7, 3, m.ControlledShutdownRequest(broker_id=99, broker_epoch=1))
        self.assertEqual(resp.error_code, errors.BROKER_NOT_AVAILABLE)

    def test_brokers_refuse_stale_controller_and_broker_epochs(self):
        from kafkatw.protocol import errors
        from kafkatw.protocol import messages as m

        topic, topic_id = self.rf3_topic()
        epoch = controller_epoch(self.cluster)
        broker_epoch = zk_read(self.cluster, "/brokers/ids/2")[1].czxid
        before = known_partitions(self.cluster, 2, topic)
        client = self.raw(2)
        um = m.UpdateMetadataRequest
        state = um.UpdateMetadataPartitionState(partition_index=0, controller_epoch=epoch - 1, leader=-1,
                                                leader_epoch=99, isr=[], zk_version=99, replicas=[1, 2, 3])
        for controller_ep, broker_ep, code in ((epoch - 1, broker_epoch, errors.STALE_CONTROLLER_EPOCH),
                                               (epoch, broker_epoch - 1, errors.STALE_BROKER_EPOCH)):
            body = um(controller_id=1, controller_epoch=controller_ep, broker_epoch=broker_ep, topic_states=[
                um.UpdateMetadataTopicState(topic_name=topic, topic_id=topic_id, partition_states=[state])],
                live_brokers=[])
            self.assertEqual(client.request(6, 7, body).error_code, code)
        la = m.LeaderAndIsrRequest
        body = la(controller_id=1, controller_epoch=epoch - 1, broker_epoch=broker_epoch, topic_states=[
            la.LeaderAndIsrTopicState(topic_name=topic, topic_id=topic_id, partition_states=[
                la.LeaderAndIsrPartitionState(partition_index=0, controller_epoch=epoch - 1, leader=2,
                                              leader_epoch=99, isr=[2], partition_epoch=99,
                                              replicas=[1, 2, 3])])])
        resp = client.request(4, 6, body)
        self.assertEqual((resp.error_code, [p.error_code for t in resp.topics for p in t.partition_errors]),
                         (errors.STALE_CONTROLLER_EPOCH, [errors.STALE_CONTROLLER_EPOCH]))
        sr = m.StopReplicaRequest
        body = sr(controller_id=1, controller_epoch=epoch - 1, broker_epoch=broker_epoch, topic_states=[
            sr.StopReplicaTopicState(topic_name=topic, partition_states=[
                sr.StopReplicaPartitionState(partition_index=0, leader_epoch=99, delete_partition=True)])])
        self.assertEqual(client.request(5, 3, body).error_code, errors.STALE_CONTROLLER_EPOCH)
        self.assertEqual(known_partitions(self.cluster, 2, topic), before)
        self.assertTrue(os.path.isdir(os.path.join(self.cluster.broker(2).data_dir, topic + "-0")))
