"""Partition reassignment on four brokers and ZooKeeper (issue 20): a partition moves from
[1,2,3] to [2,3,4] under continuous acks=all produce with identical batches on the new replicas
and nothing acknowledged lost; a throttled move takes at least size / rate and lists its adding
and removing replicas meanwhile; a cancelled one returns to [1,2,3] and deletes broker 4's
replica; Kafka's errors; resumption by a new controller; the legacy znode; kafkajs's
alter/listPartitionReassignments; the ``kafkatw partitions reassign`` CLI (--generate,
--execute, --verify, --cancel); DescribeLogDirs per broker and AlterReplicaLogDirs on broker 4's
two log dirs. Skips without ZooKeeper unless KAFKATW_REQUIRE_ZOOKEEPER=1."""

import atexit
import io
import json
import os
import shutil
import tempfile
import time

from twisted.trial import unittest

from kafkatw import testing
from kafkatw.cli import partitions as cli_partitions
from kafkatw.cli.client import KafkaClient
from kafkatw.cli.main import main as cli_main
from kafkatw.nemesis.checker import check_records, read_batches
from kafkatw.nemesis.workload import ProducerWorker, read_back
from kafkatw.protocol import errors, messages
from tests.support import unique_name
from tests.test_cluster_e2e import SESSION_TIMEOUT_MS, require_zookeeper, zk_read

_shared = {}
MB = 1024 * 1024


def cluster():
    require_zookeeper()
    found = _shared.get("cluster")
    if found is None:
        found = testing.KafkaCluster(brokers=4, session_timeout_ms=SESSION_TIMEOUT_MS,
                                     overrides={"replica.fetch.backoff.ms": 200})
        # broker 4 has two log dirs (AlterReplicaLogDirs moves replicas between them)
        found.broker(4).overrides["log.dirs"] = "%s,%s" % log_dirs(found, 4)
        _shared["cluster"] = found.start()
        atexit.register(found.close)
    found.wait_for_brokers([1, 2, 3, 4])
    return found


def log_dirs(cluster, broker_id):
    first = cluster.broker(broker_id).data_dir
    return (first, first + "-2") if broker_id == 4 else (first,)


def create_topic(bootstrap, name, assignment, configs=None):
    from confluent_kafka.admin import AdminClient, NewTopic

    client = AdminClient({"bootstrap.servers": bootstrap})
    futures = client.create_topics([NewTopic(name, len(assignment), replica_assignment=assignment,
                                             config=configs or {})],
                                   operation_timeout=30)
    futures[name].result(60)


def produce_bulk(bootstrap, topic, total_bytes, value_size=16 * 1024):
    """``total_bytes`` of distinct incompressible values to partition 0, acks=all."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                         "batch.size": 512 * 1024, "compression.type": "none", "log_level": 2})
    filler = os.urandom(value_size)
    failures = []
    for i in range(total_bytes // value_size):
        value = b"bulk-%d-" % i + filler
        while True:
            try:
                producer.produce(topic, value=value, partition=0,
                                 on_delivery=lambda err, msg: err and failures.append(err))
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(120) == 0, "bulk produce did not finish"
    assert not failures, failures[:3]


class Cli:
    def __init__(self, bootstrap, work_dir):
        self.bootstrap = bootstrap
        self.work_dir = work_dir

    def file(self, name, doc):
        path = os.path.join(self.work_dir, name)
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    def run(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        status = cli_main(["partitions", "reassign", "--bootstrap-server", self.bootstrap] + list(argv),
                          stdout=out, stderr=err)
        return status, out.getvalue(), err.getvalue()


def plan(topic, replicas, partition=0):
    return {"version": 1, "partitions": [{"topic": topic, "partition": partition, "replicas": replicas}]}


class ReassignmentTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.cluster = cluster()
        self.bootstrap = self.cluster.broker(1).bootstrap_servers
        self.cli = Cli(self.bootstrap, tempfile.mkdtemp(prefix="reassign-"))
        self.addCleanup(shutil.rmtree, self.cli.work_dir, True)
        self.client = KafkaClient(self.bootstrap)
        self.addCleanup(self.client.close)

    # -- helpers ---------------------------------------------------------------------------------

    def replicas_everywhere(self, topic, replicas, isr=None):
        """Until every broker's metadata has ``replicas`` (in order) and ISR ``isr`` (sorted) for p0."""
        def agreed():
            for b in (1, 2, 3, 4):
                found = self.cluster.metadata(b, [topic])[2].get(topic)
                if not isinstance(found, dict) or 0 not in found:
                    return False
                _, leader, _, rs, in_sync, _ = found[0]
                if list(rs) != replicas or sorted(in_sync) != sorted(isr or replicas) or leader not in rs:
                    return False
            return True
        self.cluster.wait_for(agreed, 60, "replicas %s of %s-0 in every broker's metadata" % (replicas, topic))

    def partition_dir(self, broker_id, topic):
        """The partition's directory on the broker (in whichever log dir holds it)."""
        paths = [os.path.join(d, "%s-0" % topic) for d in log_dirs(self.cluster, broker_id)]
        return next((p for p in paths if os.path.exists(p)), paths[0])

    def ongoing(self):
        return cli_partitions.list_reassignments(self.client)

    def wait_completed(self, plan_file, timeout):
        def completed():
            status, out, _ = self.cli.run("--verify", "--reassignment-json-file", plan_file)
            return out if status == 0 and "is completed" in out else False
        return self.cluster.wait_for(completed, timeout, "the reassignment to complete")

    def assert_identical_replicas(self, topic, brokers):
        """Every broker of ``brokers`` holds the same batches (offsets, CRCs) as the others."""
        def same():
            found = {b: read_batches(self.partition_dir(b, topic)) for b in brokers}
            first = found[brokers[0]]
            return found if first and all(v == first for v in found.values()) else False
        found = self.cluster.wait_for(same, 60, "identical batches of %s-0 on brokers %s" % (topic, brokers))
        return found[brokers[0]]

    # -- tests -----------------------------------------------------------------------------------

    def test_move_under_load_keeps_every_acknowledged_record_identical_on_the_new_replicas(self):
        topic = unique_name("move")
        create_topic(self.bootstrap, topic, [[1, 2, 3]], {"min.insync.replicas": "2"})
        self.replicas_everywhere(topic, [1, 2, 3])
        produce_bulk(self.bootstrap, topic, 6 * MB)
        worker = ProducerWorker(0, self.cluster.bootstrap_servers, topic, 1, rate=200)
        worker.start()
        try:
            self.cluster.wait_for(lambda: len(worker.acked) >= 50, 30, "the producer to be acknowledged")
            path = self.cli.file("move.json", plan(topic, [2, 3, 4]))
            status, out, err = self.cli.run("--execute", "--reassignment-json-file", path)
            self.assertEqual((status, err), (0, ""))
            self.assertIn('"replicas":[1,2,3]', out)  # the rollback plan
            self.assertIn("Successfully started partition reassignments for: %s-0" % topic, out)
            self.wait_completed(path, 90)
            acked_during = len(worker.acked)
            self.cluster.wait_for(lambda: len(worker.acked) >= acked_during + 50, 30,
                                  "acknowledgements after the move")
        finally:
            left = worker.stop(60)
        self.assertEqual(left, 0)
        self.assertEqual(worker.failed, [])
        self.replicas_everywhere(topic, [2, 3, 4])
        self.assertEqual(self.ongoing(), {})
        self.cluster.wait_for(lambda: not os.path.exists(self.partition_dir(1, topic)), 30,
                              "broker 1's replica to be deleted")
        batches = self.assert_identical_replicas(topic, [2, 3, 4])
        final, ends = read_back(self.bootstrap, topic, 1)
        self.assertEqual(batches[-1][1] + 1, ends[0])
        verdict = check_records(worker.acked, final)
        self.assertEqual((verdict.lost, verdict.moved, verdict.duplicates, verdict.reordered), ([], [], [], []))
        self.assertEqual(verdict.acked, len(worker.acked))
        self.assertGreaterEqual(len(final[0]), 6 * MB // (16 * 1024) + 100)
        # the topic znode is clean again
        znode = json.loads(zk_read(self.cluster, "/brokers/topics/%s" % topic)[0])
        self.assertEqual((znode["partitions"], znode["adding_replicas"], znode["removing_replicas"]),
                         ({"0": [2, 3, 4]}, {}, {}))

    def test_throttled_move_takes_size_over_rate_and_lists_its_progress(self):
        topic = unique_name("throttled")
        create_topic(self.bootstrap, topic, [[1, 2, 3]])
        self.replicas_everywhere(topic, [1, 2, 3])
        size, rate = 30 * MB, 1200 * 1024  # >= 25 s at the rate
        produce_bulk(self.bootstrap, topic, size)
        path = self.cli.file("throttled.json", plan(topic, [2, 3, 4]))
        started = time.monotonic()
        status, out, err = self.cli.run("--execute", "--reassignment-json-file", path, "--throttle", str(rate))
        self.assertEqual((status, err), (0, ""))
        self.assertIn("The inter-broker throttle limit was set to %d B/s on brokers 1,2,3,4" % rate, out)
        self.assertEqual(self.ongoing(), {(topic, 0): ([2, 3, 4, 1], [4], [1])})
        status, listed, _ = self.cli.run("--list")
        self.assertIn("%s-0: replicas: 2,3,4,1. adding: 4. removing: 1." % topic, listed)
        configs = self.topic_configs(topic)
        self.assertEqual((configs["leader.replication.throttled.replicas"],
                          configs["follower.replication.throttled.replicas"]), ("0:1,0:2,0:3", "0:4"))
        status, out, _ = self.cli.run("--verify", "--reassignment-json-file", path)
        self.assertEqual(status, 1)
        self.assertIn("Reassignment of partition %s-0 is still in progress." % topic, out)
        # a partition added meanwhile leaves the reassignment's state in the topic znode alone
        from confluent_kafka.admin import AdminClient, NewPartitions

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_partitions([NewPartitions(topic, 2)], operation_timeout=30)[topic].result(60)
        znode = json.loads(zk_read(self.cluster, "/brokers/topics/%s" % topic)[0])
        self.assertEqual((znode["partitions"]["0"], znode["adding_replicas"], znode["removing_replicas"]),
                         ([2, 3, 4, 1], {"0": [4]}, {"0": [1]}))
        self.assertEqual(sorted(znode["partitions"]), ["0", "1"])
        out = self.wait_completed(path, 120)
        elapsed = time.monotonic() - started
        self.assertGreaterEqual(elapsed, 20.0)
        self.assertIn("Clearing broker-level throttles on brokers 1,2,3,4", out)
        self.assertIn("Clearing topic-level throttles on topic %s" % topic, out)
        configs = self.topic_configs(topic)
        self.assertNotIn("leader.replication.throttled.replicas", configs)
        self.replicas_everywhere(topic, [2, 3, 4])
        self.assert_identical_replicas(topic, [2, 3, 4])

    def topic_configs(self, topic):
        """The topic's non-default configs (DescribeConfigs)."""
        R = messages.DescribeConfigsRequest
        resp = self.client.call(R(resources=[R.DescribeConfigsResource(resource_type=2, resource_name=topic,
                                                                       configuration_keys=None)],
                                  include_synonyms=False, include_documentation=False))
        (res,) = resp.results
        self.assertEqual(res.error_code, 0)
        return {c.name: c.value for c in res.configs if c.config_source == 1}  # DYNAMIC_TOPIC_CONFIG

    def test_cancel_midway_restores_the_old_assignment_and_deletes_the_added_replica(self):
        topic = unique_name("cancel")
        create_topic(self.bootstrap, topic, [[1, 2, 3]])
        self.replicas_everywhere(topic, [1, 2, 3])
        produce_bulk(self.bootstrap, topic, 4 * MB)
        path = self.cli.file("cancel.json", plan(topic, [2, 3, 4]))
        status, out, err = self.cli.run("--execute", "--reassignment-json-file", path, "--throttle", "100000")
        self.assertEqual((status, err), (0, ""))
        self.cluster.wait_for(lambda: os.path.exists(self.partition_dir(4, topic)), 30,
                              "broker 4's new replica")
        self.assertEqual(self.ongoing(), {(topic, 0): ([2, 3, 4, 1], [4], [1])})
        status, out, err = self.cli.run("--cancel", "--reassignment-json-file", path)
        self.assertEqual((status, err), (0, ""))
        self.assertIn("Successfully cancelled partition reassignments for: %s-0" % topic, out)
        self.assertIn("Clearing topic-level throttles on topic %s" % topic, out)
        self.assertEqual(self.ongoing(), {})
        # ORS back, in Kafka's order: RS [2,3,4,1] less the adding replicas (the rollback plan
        # --execute printed restores [1,2,3] itself)
        self.replicas_everywhere(topic, [2, 3, 1])
        self.cluster.wait_for(lambda: not os.path.exists(self.partition_dir(4, topic)), 30,
                              "broker 4's replica to be deleted")
        znode = json.loads(zk_read(self.cluster, "/brokers/topics/%s" % topic)[0])
        self.assertEqual((znode["partitions"], znode["adding_replicas"], znode["removing_replicas"]),
                         ({"0": [2, 3, 1]}, {}, {}))
        self.assert_identical_replicas(topic, [1, 2, 3])
        # nothing left to cancel
        results = cli_partitions.alter_reassignments(self.client, {(topic, 0): None})
        self.assertEqual(results[(topic, 0)][0], errors.NO_REASSIGNMENT_IN_PROGRESS)

    def test_errors_as_kafka(self):
        topic = unique_name("errors")
        create_topic(self.bootstrap, topic, [[1, 2]])
        self.replicas_everywhere(topic, [1, 2])
        results = cli_partitions.alter_reassignments(self.client, {
            (topic, 0): [1, 9], (topic, 1): [1, 2], ("no-such-topic", 0): [1], (topic, 5): [2]})
        self.assertEqual({tp: code for tp, (code, _) in results.items()}, {
            (topic, 0): errors.INVALID_REPLICA_ASSIGNMENT, (topic, 1): errors.UNKNOWN_TOPIC_OR_PARTITION,
            ("no-such-topic", 0): errors.UNKNOWN_TOPIC_OR_PARTITION, (topic, 5): errors.UNKNOWN_TOPIC_OR_PARTITION})
        self.assertIn("brokers that are not alive", results[(topic, 0)][1])
        results = cli_partitions.alter_reassignments(self.client, {(topic, 0): [2, 2]})
        self.assertEqual(results[(topic, 0)][0], errors.INVALID_REPLICA_ASSIGNMENT)
        # a broker that is not the controller answers NOT_CONTROLLER
        controller = self.client.metadata([]).controller_id
        other = next(b for b in (1, 2, 3, 4) if b != controller)
        R = messages.ListPartitionReassignmentsRequest
        resp = self.client.call(R(timeout_ms=1000, topics=None), self.client.node(other))
        self.assertEqual(resp.error_code, errors.NOT_CONTROLLER)
        R = messages.AlterPartitionReassignmentsRequest
        resp = self.client.call(R(timeout_ms=1000, topics=[R.ReassignableTopic(name=topic, partitions=[
            R.ReassignablePartition(partition_index=0, replicas=[2, 1])])]), self.client.node(other))
        self.assertEqual(resp.error_code, errors.NOT_CONTROLLER)
        # reordering the replicas is a reassignment that completes at once
        results = cli_partitions.alter_reassignments(self.client, {(topic, 0): [2, 1]})
        self.assertEqual(results[(topic, 0)], (errors.NONE, None))
        self.replicas_everywhere(topic, [2, 1])

    def test_generate_proposes_a_plan_over_the_broker_list(self):
        topic = unique_name("generate")
        create_topic(self.bootstrap, topic, [[1, 2], [2, 3], [3, 1]])
        path = self.cli.file("topics.json", {"version": 1, "topics": [{"topic": topic}]})
        status, out, err = self.cli.run("--generate", "--topics-to-move-json-file", path, "--broker-list", "2,4")
        self.assertEqual((status, err), (0, ""))
        current_text, proposed_text = out.split("Proposed partition reassignment configuration\n")
        current = json.loads(current_text.split("\n")[1])
        proposed = json.loads(proposed_text)
        self.assertEqual([(e["partition"], e["replicas"]) for e in current["partitions"]],
                         [(0, [1, 2]), (1, [2, 3]), (2, [3, 1])])
        self.assertEqual([e["partition"] for e in proposed["partitions"]], [0, 1, 2])
        for e in proposed["partitions"]:
            self.assertEqual((e["topic"], sorted(e["replicas"]), e["log_dirs"]), (topic, [2, 4], ["any", "any"]))
        status, _, err = self.cli.run("--generate", "--topics-to-move-json-file", path, "--broker-list", "2")
        self.assertEqual(status, 1)
        self.assertIn("replication factor 2 is more than the 1 broker(s) listed", err)

    def test_a_new_controller_resumes_a_reassignment_from_zookeeper(self):
        controller = self.client.metadata([]).controller_id
        a, b, c = [x for x in (1, 2, 3, 4) if x != controller]
        topic = unique_name("failover")
        create_topic(self.bootstrap, topic, [[a, b]])
        self.replicas_everywhere(topic, [a, b])
        produce_bulk(self.bootstrap, topic, 3 * MB)
        path = self.cli.file("failover.json", plan(topic, [b, c]))
        status, out, err = self.cli.run("--execute", "--reassignment-json-file", path, "--throttle", "100000")
        self.assertEqual((status, err), (0, ""))
        self.assertEqual(self.ongoing(), {(topic, 0): ([b, c, a], [c], [a])})
        self.cluster.broker(controller).stop()
        survivor = KafkaClient(self.cluster.broker(a).bootstrap_servers)
        self.addCleanup(survivor.close)
        self.cluster.wait_for(lambda: survivor.metadata([]).controller_id not in (-1, controller), 60,
                              "another controller")
        # the new controller read the reassignment from the topic znode
        self.assertEqual(cli_partitions.list_reassignments(survivor), {(topic, 0): ([b, c, a], [c], [a])})
        self.cluster.broker(controller).start()
        self.cluster.wait_for_brokers([1, 2, 3, 4])
        cli_partitions.clear_throttles(survivor, [topic], [a, b, c], io.StringIO())
        self.wait_completed(path, 90)
        self.replicas_everywhere(topic, [b, c])
        self.cluster.wait_for(lambda: not os.path.exists(self.partition_dir(a, topic)), 30,
                              "broker %d's replica to be deleted" % a)
        self.assert_identical_replicas(topic, [b, c])

    def test_the_legacy_reassign_partitions_znode_is_honoured_and_removed(self):
        from kazoo.client import KazooClient

        topic = unique_name("legacy")
        create_topic(self.bootstrap, topic, [[1, 2]])
        self.replicas_everywhere(topic, [1, 2])
        produce_bulk(self.bootstrap, topic, 1 * MB)
        zk = KazooClient(hosts=self.cluster.zookeeper_connect)
        zk.start(timeout=20)
        self.addCleanup(zk.close)
        self.addCleanup(zk.stop)
        zk.create("/admin/reassign_partitions", json.dumps({"version": 1, "partitions": [
            {"topic": topic, "partition": 0, "replicas": [3, 4]}]}).encode(), makepath=True)
        self.replicas_everywhere(topic, [3, 4])
        self.cluster.wait_for(lambda: zk.exists("/admin/reassign_partitions") is None, 30,
                              "/admin/reassign_partitions to be removed")
        self.assert_identical_replicas(topic, [3, 4])

    def test_describe_log_dirs_answers_each_brokers_own_replicas(self):
        topic = unique_name("logdirs")
        create_topic(self.bootstrap, topic, [[1, 2, 3]])
        self.replicas_everywhere(topic, [1, 2, 3])
        produce_bulk(self.bootstrap, topic, 1 * MB)
        self.assert_identical_replicas(topic, [1, 2, 3])
        R = messages.DescribeLogDirsRequest
        seen = {}
        for b in (1, 2, 3, 4):
            resp = self.client.call(R(topics=[R.DescribableLogDirTopic(topic=topic, partitions=[0])]),
                                    self.client.node(b))
            self.assertEqual(resp.error_code, errors.NONE)
            self.assertEqual([(r.error_code, r.log_dir) for r in resp.results],
                             [(errors.NONE, d) for d in log_dirs(self.cluster, b)])
            seen[b] = [(t.name, p.partition_index, p.partition_size, p.offset_lag)
                       for r in resp.results for t in r.topics for p in t.partitions]
        size = sum(os.path.getsize(os.path.join(self.partition_dir(1, topic), n))
                   for n in os.listdir(self.partition_dir(1, topic)) if n.endswith(".log"))
        self.assertGreaterEqual(size, 1 * MB)
        self.assertEqual(seen, {1: [(topic, 0, size, 0)], 2: [(topic, 0, size, 0)], 3: [(topic, 0, size, 0)],
                                4: []})

    def describe_log_dirs(self, broker_id, topic):
        """``[(log dir, size, offset lag, is future)]`` of the topic's partition 0 on the broker."""
        R = messages.DescribeLogDirsRequest
        resp = self.client.call(R(topics=[R.DescribableLogDirTopic(topic=topic, partitions=[0])]),
                                self.client.node(broker_id))
        self.assertEqual(resp.error_code, errors.NONE)
        return [(r.log_dir, p.partition_size, p.offset_lag, p.is_future_key)
                for r in resp.results for t in r.topics for p in t.partitions]

    def alter_log_dir(self, broker_id, path, topic, partitions=(0,)):
        R = messages.AlterReplicaLogDirsRequest
        resp = self.client.call(R(dirs=[R.AlterReplicaLogDir(path=path, topics=[
            R.AlterReplicaLogDirTopic(name=topic, partitions=list(partitions))])]), self.client.node(broker_id))
        return {(t.topic_name, p.partition_index): p.error_code for t in resp.results for p in t.partitions}

    def test_a_replica_the_controller_created_moves_to_another_log_dir_under_load(self):
        topic = unique_name("logdir-move")
        create_topic(self.bootstrap, topic, [[1, 4]], {"min.insync.replicas": "2"})
        self.replicas_everywhere(topic, [1, 4])
        produce_bulk(self.bootstrap, topic, 3 * MB)
        ((source, _, _, _),) = self.describe_log_dirs(4, topic)
        (target,) = [d for d in log_dirs(self.cluster, 4) if d != source]
        self.assertEqual(self.alter_log_dir(4, target + "-nope", topic), {(topic, 0): errors.LOG_DIR_NOT_FOUND})
        self.assertEqual(self.alter_log_dir(4, target, "no-such-topic"),
                         {("no-such-topic", 0): errors.REPLICA_NOT_AVAILABLE})
        self.assertEqual(self.alter_log_dir(4, source, topic), {(topic, 0): errors.NONE})  # already there
        worker = ProducerWorker(1, self.cluster.bootstrap_servers, topic, 1, rate=200)
        worker.start()
        try:
            self.cluster.wait_for(lambda: len(worker.acked) >= 50, 30, "the producer to be acknowledged")
            self.assertEqual(self.alter_log_dir(4, target, topic), {(topic, 0): errors.NONE})
            self.cluster.wait_for(lambda: [e[0] for e in self.describe_log_dirs(4, topic)] == [target], 60,
                                  "the replica to be in %s only" % target)
            moved_at = len(worker.acked)
            self.cluster.wait_for(lambda: len(worker.acked) >= moved_at + 50, 30, "acknowledgements after the move")
        finally:
            left = worker.stop(60)
        self.assertEqual((left, worker.failed), (0, []))
        self.assertFalse(os.path.exists(os.path.join(source, "%s-0" % topic)))
        self.assertTrue(os.path.exists(os.path.join(target, "%s-0" % topic)))
        batches = self.assert_identical_replicas(topic, [1, 4])
        final, ends = read_back(self.bootstrap, topic, 1)
        self.assertEqual(batches[-1][1] + 1, ends[0])
        verdict = check_records(worker.acked, final)
        self.assertEqual((verdict.lost, verdict.moved, verdict.duplicates), ([], [], []))
        ((where, size, lag, future),) = self.describe_log_dirs(4, topic)
        self.assertEqual((where, lag, future), (target, 0, False))

    def test_kafkajs_alters_and_lists_a_reassignment(self):
        from tests.test_e2e_kafkajs import kafkajs_ready, run_js

        kafkajs_ready()
        topic = unique_name("kafkajs")
        create_topic(self.bootstrap, topic, [[1, 2]])
        self.replicas_everywhere(topic, [1, 2])
        produce_bulk(self.bootstrap, topic, 1 * MB)
        # throttled (20 s at the rate) so it is still running when kafkajs lists it
        brokers = cli_partitions.set_throttles(self.client, {(topic, 0): [2, 3]}, {(topic, 0): [1, 2]}, 50000)
        self.addCleanup(cli_partitions.clear_throttles, self.client, [topic], brokers, io.StringIO())
        listed = run_js("reassign.js", self.bootstrap, topic, "2,3")
        self.assertEqual(listed, {"topics": [{"name": topic, "partitions": [
            {"partition": 0, "replicas": [2, 3, 1], "addingReplicas": [3], "removingReplicas": [1]}]}]})
        cli_partitions.clear_throttles(self.client, [topic], brokers, io.StringIO())
        self.replicas_everywhere(topic, [2, 3])
        self.assert_identical_replicas(topic, [2, 3])

    def broker_config(self, broker_id, name):
        """``(value, source)`` of a broker config as ``broker_id`` describes itself."""
        R = messages.DescribeConfigsRequest
        resp = self.client.call(R(resources=[R.DescribeConfigsResource(resource_type=4, resource_name=str(broker_id),
                                                                       configuration_keys=[name])],
                                  include_synonyms=False, include_documentation=False), self.client.node(broker_id))
        (res,) = resp.results
        self.assertEqual(res.error_code, 0)
        ((found),) = [(c.value, c.config_source) for c in res.configs if c.name == name]
        return found

    def alter_broker(self, broker_id, name, value, target=None):
        """IncrementalAlterConfigs of broker ``target`` ('' for the cluster default) sent to ``broker_id``."""
        R = messages.IncrementalAlterConfigsRequest
        op = 0 if value is not None else 1
        resp = self.client.call(R(resources=[R.AlterConfigsResource(
            resource_type=4, resource_name=str(broker_id) if target is None else target,
            configs=[R.AlterableConfig(name=name, config_operation=op, value=value)])], validate_only=False),
            self.client.node(broker_id))
        self.assertEqual([(r.error_code, r.error_message) for r in resp.responses], [(0, None)])

    def test_dynamic_broker_configs_are_kept_in_zookeeper_and_the_default_reaches_every_broker(self):
        name = "follower.replication.throttled.rate"
        four = self.cluster.broker(4)
        four.stop()  # it learns the default at its next start
        self.addCleanup(lambda: four.running or four.start())
        self.alter_broker(1, name, "12345", target="")
        self.addCleanup(self.alter_broker, 1, name, None, "")
        znode = json.loads(zk_read(self.cluster, "/config/brokers/<default>")[0])
        self.assertEqual(znode, {"version": 1, "config": {name: "12345"}})
        for b in (1, 2, 3):  # DYNAMIC_DEFAULT_BROKER_CONFIG
            self.cluster.wait_for(lambda: self.broker_config(b, name) == ("12345", 3), 30,
                                  "broker %d to take the cluster default" % b)
        four.start()
        self.cluster.wait_for_brokers([1, 2, 3, 4])
        self.assertEqual(self.broker_config(4, name), ("12345", 3))
        self.alter_broker(2, name, "777")
        self.addCleanup(self.alter_broker, 2, name, None)
        self.assertEqual(json.loads(zk_read(self.cluster, "/config/brokers/2")[0]),
                         {"version": 1, "config": {name: "777"}})
        self.assertEqual(self.broker_config(2, name), ("777", 2))  # DYNAMIC_BROKER_CONFIG
        self.assertEqual(self.broker_config(3, name), ("12345", 3))
        self.alter_broker(1, name, None, target="")
        self.cluster.wait_for(lambda: self.broker_config(3, name) == (str(2 ** 63 - 1), 5), 30,  # DEFAULT_CONFIG
                              "broker 3 back to the static default")
