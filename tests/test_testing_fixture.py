"""kafkatw.testing through its public API only: life cycle, options, failure messages, crashes.

Every test starts real broker processes and talks to them with real clients (kafka-python,
confluent-kafka); the crash test SIGKILLs the broker mid-stream and checks that every
acknowledged record survives at its acknowledged offset. KafkaCluster's state change log
(read from log files written here) and its wait_for's timeout message need no process.
"""

import os
import socket
import time

from twisted.trial import reporter, runner, unittest

from kafkatw.testing import BrokerStartError, KafkaBroker, KafkaBrokerMixin, KafkaCluster, api_versions_ok
from tests.support import poll_until


def _host_port(bootstrap):
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


def _consume_all(bootstrap, topic, partitions=(0,), timeout=30.0):
    """Every record of ``topic`` up to its end offsets, as {partition: [(offset, key, value)]}."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        out = {p: [] for p in partitions}
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < end[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise AssertionError("timed out consuming %s (end offsets %s)" % (topic, end))
            for tp, records in consumer.poll(timeout_ms=200).items():
                out[tp.partition].extend((r.offset, r.key, r.value) for r in records)
        return out
    finally:
        consumer.close()


def _produce(bootstrap, topic, values, partition=0):
    """Send ``values`` with acks=all; returns the acknowledged offsets in order."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)
    try:
        futures = [producer.send(topic, value=v, partition=partition) for v in values]
        return [f.get(timeout=30).offset for f in futures]
    finally:
        producer.close(timeout=5)


def without_keep_data_env(case):
    """The test checks folders are removed: KAFKATW_TESTING_KEEP_DATA unset while it runs."""
    kept = os.environ.pop("KAFKATW_TESTING_KEEP_DATA", None)
    if kept is not None:
        case.addCleanup(os.environ.__setitem__, "KAFKATW_TESTING_KEEP_DATA", kept)


class LifeCycleTests(unittest.SynchronousTestCase):

    def test_context_manager_starts_and_cleans_up(self):
        without_keep_data_env(self)
        with KafkaBroker() as broker:
            host, port = _host_port(broker.bootstrap_servers)
            self.assertEqual(host, "127.0.0.1")
            self.assertEqual(port, broker.port)
            self.assertNotEqual(port, 0)
            self.assertTrue(broker.running)
            self.assertTrue(api_versions_ok(host, port))
            self.assertTrue(os.path.isdir(broker.data_dir))
            self.assertIsNone(broker.ssl_bootstrap_servers)
            work_dir = broker.work_dir
        self.assertFalse(broker.running)
        self.assertFalse(os.path.exists(work_dir))
        self.assertFalse(api_versions_ok(host, port, timeout=0.5))

    def test_keep_data_keeps_the_folder(self):
        broker = KafkaBroker(keep_data=True, topics=["kept"])
        self.addCleanup(__import__("shutil").rmtree, broker.work_dir, True)
        with broker:
            data_dir = broker.data_dir
        self.assertTrue(os.path.isdir(os.path.join(data_dir, "kept-0")))

    def test_keep_data_asked_by_the_environment(self):
        without_keep_data_env(self)
        unkept = KafkaBroker()  # never started: only its folder exists
        unkept.close()
        self.assertFalse(unkept.keep_data)
        self.assertFalse(os.path.exists(unkept.work_dir))
        os.environ["KAFKATW_TESTING_KEEP_DATA"] = "1"
        self.addCleanup(os.environ.pop, "KAFKATW_TESTING_KEEP_DATA", None)
        broker = KafkaBroker()
        self.addCleanup(__import__("shutil").rmtree, broker.work_dir, True)
        self.assertTrue(broker.keep_data)
        broker.close()
        self.assertTrue(os.path.isdir(broker.work_dir))

    def test_given_data_dir_is_never_removed(self):
        data_dir = self.mktemp()
        with KafkaBroker(data_dir=data_dir, topics=["mine"]) as broker:
            self.assertEqual(broker.data_dir, os.path.abspath(data_dir))
        self.assertTrue(os.path.isdir(os.path.join(data_dir, "mine-0")))

    def test_restart_keeps_port_and_data(self):
        with KafkaBroker(topics=["t"]) as broker:
            offsets = _produce(broker.bootstrap_servers, "t", [b"a", b"b", b"c"])
            self.assertEqual(offsets, [0, 1, 2])
            port = broker.port
            broker.restart()
            self.assertEqual(broker.port, port)
            broker.stop()
            self.assertFalse(broker.running)
            broker.start()
            self.assertEqual(broker.port, port)
            got = _consume_all(broker.bootstrap_servers, "t")
            self.assertEqual(got, {0: [(0, None, b"a"), (1, None, b"b"), (2, None, b"c")]})

    def test_topics_created_at_start(self):
        from confluent_kafka.admin import AdminClient

        topics = ["plain", ("three", 3), ("compacted", 2, {"cleanup.policy": "compact"})]
        with KafkaBroker(topics=topics, num_partitions=4) as broker:
            md = AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=10)
            got = {name: sorted(md.topics[name].partitions) for name in ("plain", "three", "compacted")}
            self.assertEqual(got, {"plain": [0, 1, 2, 3], "three": [0, 1, 2], "compacted": [0, 1]})
            from confluent_kafka.admin import ConfigResource

            admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
            resource = ConfigResource(ConfigResource.Type.TOPIC, "compacted")
            configs = admin.describe_configs([resource])[resource].result(timeout=10)
            self.assertEqual(configs["cleanup.policy"].value, "compact")
            broker.restart()  # the same topics again: TOPIC_ALREADY_EXISTS is fine

    def test_request_log_and_log_path(self):
        log_path = os.path.abspath(self.mktemp())
        with KafkaBroker(request_log=True, log_path=log_path) as broker:
            _produce(broker.bootstrap_servers, "logged", [b"x"])
            request_log = broker.request_log_path

            def logged_produce():
                # a line is written once its response has been sent, so it may trail the ack
                with open(request_log) as f:
                    text = f.read()
                return text if '"requestApiKeyName":"PRODUCE"' in text else None

            text = poll_until(logged_produce, 10, message="the PRODUCE line in the request log")
            self.assertIn('"requestApiKeyName":"API_VERSIONS"', text)
        with open(log_path) as f:
            self.assertIn("kafkatw broker 1 started", f.read())


class FailureMessageTests(unittest.SynchronousTestCase):

    def test_bad_override_is_named(self):
        without_keep_data_env(self)  # the folder's removal is checked
        broker = KafkaBroker(overrides={"num.partitions": "many"})
        with self.assertRaises(BrokerStartError) as cm:
            with broker:
                pass
        self.assertEqual(cm.exception.reason, "bad broker configuration: Invalid value many for "
                         "configuration num.partitions: Not a number of type INT")
        self.assertIn(cm.exception.reason, str(cm.exception))
        self.assertIn("num.partitions", cm.exception.log_tail)
        self.assertFalse(os.path.exists(broker.work_dir))

    def test_port_clash_is_named(self):
        blocker = socket.socket()
        self.addCleanup(blocker.close)
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(1)
        port = blocker.getsockname()[1]
        with self.assertRaises(BrokerStartError) as cm:
            with KafkaBroker(listeners=["PLAINTEXT://127.0.0.1:%d" % port]):
                pass
        self.assertTrue(cm.exception.reason.startswith("port clash: "), cm.exception.reason)
        self.assertIn("127.0.0.1:%d" % port, cm.exception.reason)
        self.assertIn("Address already in use", cm.exception.reason)
        self.assertNotIn("Traceback", str(cm.exception))  # one line from the broker, no traceback

    def test_bad_topic_is_named(self):
        with self.assertRaises(BrokerStartError) as cm:
            with KafkaBroker(topics=[("zero", 0)]):
                pass
        self.assertTrue(cm.exception.reason.startswith("cannot create topics: zero: INVALID_PARTITIONS"),
                        cm.exception.reason)

    def test_start_twice_is_refused(self):
        with KafkaBroker() as broker:
            self.assertRaises(RuntimeError, broker.start)


class ClusterHelperTests(unittest.SynchronousTestCase):
    """KafkaCluster's helpers that need no process."""

    def test_lines_in_time_order_each_brokers_own_order_within_a_second(self):
        """The logs' times are whole seconds: a second's lines keep their file's order (the
        controller's decision before the follower's reaction), not the order of their text."""
        directory = self.mktemp()
        os.makedirs(directory)
        files = {
            1: ["2026-12-02T01:00:01+0000 [kafkatw.server.partition#info] 1: leader of t-0",
                "2026-12-02T01:00:01+0000 [kafkatw.service#info] not a state change",
                "2026-12-02T01:00:02+0000 [kafkatw.server.alter_partition#info] 1: ISR asked"],
            2: ["2026-12-02T01:00:00+0000 [kafkatw.server.replica_manager#info] 2: started",
                "2026-12-02T01:00:01+0000 [kafkatw.server.partition#info] 2: became follower",
                "2026-12-02T01:00:01+0000 [kafkatw.controller#info] 2: elected t-0 leader 1"]}
        brokers = {}
        for broker_id, lines in files.items():
            path = os.path.join(directory, "broker-%d.log" % broker_id)
            with open(path, "w") as f:
                f.write("\n".join(lines) + "\n")
            brokers[broker_id] = type("B", (), {"log_path": path})
        cluster = type("C", (), {"brokers": brokers})
        self.assertEqual(KafkaCluster.state_change_log(cluster).splitlines(), [
            "[broker 2] " + files[2][0], "[broker 1] " + files[1][0], "[broker 2] " + files[2][1],
            "[broker 2] " + files[2][2], "[broker 1] " + files[1][2]])
        self.assertEqual(KafkaCluster.state_change_log(cluster, lines=2).splitlines(),
                         ["[broker 2] " + files[2][2], "[broker 1] " + files[1][2]])
        self.assertEqual(KafkaCluster.state_change_log(cluster, containing=["t-0", "ISR"]).splitlines(),
                         ["[broker 1] " + files[1][0], "[broker 2] " + files[2][2],
                          "[broker 1] " + files[1][2]])

    def test_a_timeout_is_reported_even_when_explaining_it_fails(self):
        def explain():
            raise ValueError("truncated answer")

        with self.assertRaises(AssertionError) as cm:
            KafkaCluster.wait_for(None, lambda: 0, 0.1, "the ISR", explain)
        self.assertEqual(str(cm.exception), "timed out after 0 s waiting for the ISR (last answer: 0)\n"
                                            "(explaining it failed: ValueError('truncated answer'))")
        with self.assertRaises(AssertionError) as cm:
            KafkaCluster.wait_for(None, lambda: 0, 0.1, "the ISR", lambda: "broker 1: []")
        self.assertEqual(str(cm.exception), "timed out after 0 s waiting for the ISR (last answer: 0)\n"
                                            "broker 1: []")


class ZooKeeperStartFailureTests(unittest.SynchronousTestCase):
    """ZooKeeperServer tells a port taken from another failure by this start's own log lines:
    its log is appended to by every attempt, and an earlier attempt's "Address already in use"
    made any later failure look like a port clash (retried, then misnamed)."""

    def test_an_earlier_attempts_port_clash_is_not_this_ones(self):
        import subprocess
        import sys
        import tempfile

        from kafkatw import testing

        self.patch(testing, "zookeeper_available", lambda: True)
        popen = subprocess.Popen
        exits = []

        def fake_java(args, **kwargs):  # a process that fails as Java does, at once
            exits.append(args[-1])
            script = "import sys; print('java.io.IOException: No snapshot found'); sys.exit(3)"
            return popen([sys.executable, "-c", script], **kwargs)

        self.patch(testing.subprocess, "Popen", fake_java)
        work = tempfile.mkdtemp(prefix="kafkatw-zk-test-")
        self.addCleanup(__import__("shutil").rmtree, work, True)
        with open(os.path.join(work, "zookeeper.log"), "w") as f:
            f.write("java.net.BindException: Address already in use\n")  # an earlier attempt's
        zk = testing.ZooKeeperServer(work_dir=work, port=2, start_timeout=20)
        with self.assertRaises(BrokerStartError) as cm:
            zk.start()
        self.assertEqual(str(cm.exception).splitlines()[0], "ZooKeeper exited with status 3")
        self.assertEqual(len(exits), 1)


class CrashTests(unittest.SynchronousTestCase):
    """produce (acks=all) -> kill() -> start() -> every acknowledged record is there."""

    def test_acknowledged_records_survive_sigkill(self):
        from confluent_kafka import Producer

        with KafkaBroker(topics=[("crash", 2)]) as broker:
            producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all",
                                 "linger.ms": 1, "message.timeout.ms": 3000,
                                 "reconnect.backoff.max.ms": 100})
            acked = []  # (partition, offset, value)

            def on_delivery(err, msg):
                if err is None:
                    acked.append((msg.partition(), msg.offset(), msg.value()))

            for i in range(600):
                producer.produce("crash", value=b"v%d" % i, partition=i % 2, on_delivery=on_delivery)
                producer.poll(0)
            self.assertEqual(producer.flush(30), 0)
            self.assertEqual(len(acked), 600)
            # more records in flight while the broker dies
            for i in range(600, 2600):
                producer.produce("crash", value=b"v%d" % i, partition=i % 2, on_delivery=on_delivery)
                producer.poll(0)
            broker.kill()
            producer.flush(10)  # unacknowledged sends time out
            self.assertFalse(broker.running)

            broker.start()
            got = _consume_all(broker.bootstrap_servers, "crash", partitions=(0, 1))
            for partition in (0, 1):
                offsets = [o for o, _, _ in got[partition]]
                self.assertEqual(offsets, list(range(len(offsets))))  # no holes after recovery
            stored = {(p, o): v for p in (0, 1) for o, _, v in got[p]}
            missing = [(p, o, v) for p, o, v in acked if stored.get((p, o)) != v]
            self.assertEqual(missing, [])
            self.assertGreaterEqual(len(stored), len(acked))


class _Probe:
    """Records each test's broker (a mixin client run inside the tests below)."""

    seen = []

    def test_one(self):
        self.seen.append((self.broker, self.broker.running, self.broker.bootstrap_servers))

    def test_two(self):
        self.seen.append((self.broker, self.broker.running, self.broker.bootstrap_servers))


class MixinTests(unittest.SynchronousTestCase):

    def run_probe(self, scope):
        class Probe(KafkaBrokerMixin, _Probe, unittest.SynchronousTestCase):
            broker_scope = scope
            broker_options = {"topics": ["probe"]}
            seen = []

        result = reporter.TestResult()
        runner.TestSuite([Probe("test_one"), Probe("test_two")]).run(result)
        self.assertEqual((result.errors, result.failures), ([], []))
        return Probe.seen

    def test_scope_test_gives_each_test_its_own_broker(self):
        seen = self.run_probe("test")
        self.assertEqual([running for _, running, _ in seen], [True, True])
        self.assertIsNot(seen[0][0], seen[1][0])
        self.assertEqual([b.running for b, _, _ in seen], [False, False])  # closed after each

    def test_scope_class_shares_one_broker(self):
        seen = self.run_probe("class")
        self.assertIs(seen[0][0], seen[1][0])
        self.assertEqual(seen[0][2], seen[1][2])
        self.assertTrue(seen[0][0].running)
        seen[0][0].close()


class SslListenerTests(unittest.SynchronousTestCase):

    def test_ssl_listener_with_throwaway_ca_and_client_auth(self):
        from confluent_kafka import Producer

        options = dict(listeners=("PLAINTEXT", "SSL"), topics=["tls"],
                       overrides={"ssl.client.auth": "required"})
        with KafkaBroker(**options) as broker:
            self.assertNotEqual(broker.ssl_bootstrap_servers, broker.bootstrap_servers)
            self.assertTrue(os.path.exists(broker.ssl_ca_path))
            producer = Producer({
                "bootstrap.servers": broker.ssl_bootstrap_servers, "security.protocol": "SSL",
                "ssl.ca.location": broker.ssl_ca_path,
                "ssl.certificate.location": broker.ssl_client_cert_path,
                "ssl.key.location": broker.ssl_client_key_path,
            })
            acked = []
            for v in (b"s0", b"s1"):
                producer.produce("tls", v, on_delivery=lambda err, msg: acked.append((err, msg.offset())))
            self.assertEqual(producer.flush(15), 0)
            self.assertEqual(acked, [(None, 0), (None, 1)])
            got = _consume_all(broker.bootstrap_servers, "tls")
            self.assertEqual(got, {0: [(0, None, b"s0"), (1, None, b"s1")]})
            ssl_port = broker.ssl_bootstrap_servers
            broker.restart()
            self.assertEqual(broker.ssl_bootstrap_servers, ssl_port)  # same port, same CA
            host, port = _host_port(broker.ssl_bootstrap_servers)
            self.assertTrue(api_versions_ok(host, port, ssl_context=broker.ssl_context()))


    def test_a_sasl_ssl_first_listener_is_reached_as_the_cluster_fixture_does(self):
        # KafkaCluster asks its brokers' Metadata on _main_address with main_ssl_context (None
        # for a SASL_SSL listener: plain TCP to a TLS port) and no login at all
        from kafkatw.testing import cluster_metadata

        with KafkaBroker(listeners=("SASL_SSL",), sasl_users={"admin": "secret"}) as broker:
            self.assertIsNotNone(broker.main_ssl_context())
            self.assertEqual(broker.main_sasl(), ("PLAIN", "admin", "secret"))
            brokers, controller, _ = cluster_metadata(*broker._main_address(),
                                                      ssl_context=broker.main_ssl_context(),
                                                      sasl=broker.main_sasl())
            self.assertEqual((sorted(brokers), controller), ([1], 1))
        with KafkaBroker(listeners=("PLAINTEXT", "SASL_SSL"), sasl_users={"admin": "secret"}) as broker:
            self.assertEqual((broker.main_ssl_context(), broker.main_sasl()), (None, None))


class ProcessModeTests(unittest.SynchronousTestCase):
    """The fork server (default) and plain twistd subprocesses behave the same."""

    def check_mode(self, fork_server):
        with KafkaBroker(fork_server=fork_server, topics=["m"]) as broker:
            process = broker.process
            self.assertIsNone(process.poll())
            with open("/proc/%d/cmdline" % process.pid, "rb") as f:
                self.assertIn(b"python", f.read())
            self.assertEqual(_produce(broker.bootstrap_servers, "m", [b"1"]), [0])
            broker.kill()
            self.assertEqual(process.returncode, -9)
            broker.start()
            process = broker.process
            self.assertEqual(_consume_all(broker.bootstrap_servers, "m"), {0: [(0, None, b"1")]})
            broker.stop()
            # a clean stop: twistd shuts down, then re-raises SIGTERM as its exit status
            self.assertEqual(process.returncode, -15)
            self.assertIn("kafkatw broker stopped cleanly", broker.log_tail())

    def test_fork_server(self):
        from kafkatw import testing_forkserver

        if not testing_forkserver.available():
            raise unittest.SkipTest("no pidfd on this platform")
        KafkaBroker().close()  # the fork server warms up while a first broker starts
        from kafkatw import testing

        self.assertTrue(testing._fork_server().ready(timeout=60))
        self.check_mode(True)
        with KafkaBroker() as broker:
            self.assertIsInstance(broker.process, testing_forkserver.ForkedProcess)

    def test_plain_subprocess(self):
        self.check_mode(False)
        with KafkaBroker(fork_server=False) as broker:
            self.assertIsInstance(broker.process, __import__("subprocess").Popen)

    def test_bad_config_through_the_fork_server(self):
        from kafkatw import testing

        if testing._fork_server() is None or not testing._fork_server().ready(timeout=60):
            raise unittest.SkipTest("no fork server")
        with self.assertRaises(BrokerStartError) as cm:
            KafkaBroker(overrides={"log.retention.hours": "x"}).__enter__()
        self.assertIn("log.retention.hours", cm.exception.reason)

    def test_many_starts(self):
        # Ten brokers one after another, each answering on the port it bound. (The kernel may
        # hand a port 0 bind the same free port twice, so distinct ports are not a property.)
        answered = 0
        for _ in range(10):
            with KafkaBroker() as broker:
                host, port = _host_port(broker.bootstrap_servers)
                self.assertTrue(api_versions_ok(host, port))
                answered += 1
            self.assertFalse(api_versions_ok(host, port, timeout=0.5))
        self.assertEqual(answered, 10)


class ForkedProcessTests(unittest.TestCase):
    """A broker that exits (a refused config) and is reaped by the fork server before the
    client opens its pidfd still reports its status, instead of ProcessLookupError."""

    def test_already_reaped_process_reports_its_status(self):
        import subprocess
        import sys

        from kafkatw.testing_forkserver import ForkedProcess

        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()  # reaped: its pid names no process now
        status = self.mktemp()
        with open(status, "w") as f:
            f.write("2")
        proc = ForkedProcess(gone.pid, status)
        proc.kill()  # nothing to signal: no error
        self.assertEqual(proc.poll(), 2)
        self.assertEqual(proc.wait(1), 2)
