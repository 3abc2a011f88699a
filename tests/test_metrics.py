"""The operations endpoint (``kafkatw.metrics.listener``): a real broker is produced to and
consumed from by real clients, then scraped over HTTP; the Prometheus text must parse with
``prometheus_client.parser`` and carry exact counts under the JMX exporter's Kafka names.
/healthz turns unhealthy when the only log dir goes offline (a real I/O error while creating a
partition). In-process tests check the snapshot's slicing with ``task.Clock`` and the
readiness rules.
"""

import json
import os
import types
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import task
from twisted.trial import unittest

from kafkatw.config import ConfigError
from kafkatw.metrics import exporter
from kafkatw.metrics.web import health, parse_listener, readiness
from kafkatw.network.metrics import REQUEST_TIME_FIELDS, NetworkMetrics
from kafkatw.server.topic_stats import BrokerTopicStats
from kafkatw.testing import KafkaBroker, KafkaBrokerMixin

TOPIC = "metered"
N = 12  # records produced, one request each


def get(port, path):
    """(status, body text) of an HTTP GET on the metrics listener."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/%s" % (port, path), timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def samples(text):
    """{(sample name, frozenset(labels)): value} of a Prometheus text scrape."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(scraped, name, **labels):
    return scraped[(name, frozenset(labels.items()))]


class ScrapeTests(KafkaBrokerMixin, unittest.TestCase):
    broker_scope = "test"  # exact counts: nothing else talks to this broker
    broker_overrides = {"kafkatw.metrics.listener": "127.0.0.1:0"}
    broker_options = {"topics": [(TOPIC, 2)]}

    def produce(self, count, start=0):
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.broker.bootstrap_servers, acks=1, linger_ms=0)
        try:
            for i in range(start, start + count):  # .get() each: one Produce request per record
                producer.send(TOPIC, b"value-%d" % i, partition=i % 2).get(timeout=10)
        finally:
            producer.close()

    def consume_and_commit(self, group, count):
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(TOPIC, bootstrap_servers=self.broker.bootstrap_servers, group_id=group,
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 consumer_timeout_ms=15000)
        try:
            got = []
            for record in consumer:
                got.append(record.value)
                if len(got) == count:
                    break
            consumer.commit()
        finally:
            consumer.close()
        return got

    def test_scrape_after_producing_and_consuming(self):
        self.produce(N)
        self.assertEqual(len(self.consume_and_commit("metered-group", N)), N)
        consumed = samples(get(self.broker.metrics_port, "metrics")[1])
        sizes = sum(value(consumed, "kafka_log_log_size", topic=TOPIC, partition=str(p)) for p in (0, 1))
        self.assertEqual(value(consumed, "kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC), sizes)
        # every batch went out to the consumer (once, unless it fetched one again)
        self.assertGreaterEqual(value(consumed, "kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC),
                                sizes)
        self.produce(3, start=N)  # after the commit: the group lags by these
        status, text = get(self.broker.metrics_port, "metrics")
        self.assertEqual(status, 200)
        scraped = samples(text)
        self.assertEqual(value(scraped, "kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC), N + 3)
        ends = {p: value(scraped, "kafka_log_log_logendoffset", topic=TOPIC, partition=str(p)) for p in (0, 1)}
        self.assertEqual(ends, {0: 8, 1: 7})  # records alternate between the two partitions
        sizes = sum(value(scraped, "kafka_log_log_size", topic=TOPIC, partition=str(p)) for p in (0, 1))
        # one batch per request, nothing deleted: the bytes appended are the logs' bytes
        self.assertEqual(value(scraped, "kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC), sizes)
        produce = {labels: v for (name, labels), v in scraped.items()
                   if name == "kafka_network_requestmetrics_requests_total" and ("request", "Produce") in labels}
        self.assertEqual(sum(produce.values()), N + 3)
        for field in ("totaltimems", "requestqueuetimems", "localtimems", "responsesendtimems"):
            self.assertEqual(value(scraped, "kafka_network_requestmetrics_%s_count" % field, request="Produce"),
                             N + 3, field)
            self.assertEqual(value(scraped, "kafka_network_requestmetrics_%s_bucket" % field, request="Produce",
                                   le="+Inf"), N + 3, field)
        lag = {p: value(scraped, "kafka_consumergroup_lag", consumergroup="metered-group", topic=TOPIC,
                        partition=str(p)) for p in (0, 1)}
        self.assertEqual(lag, {0: 2, 1: 1})
        committed = {p: value(scraped, "kafka_consumergroup_current_offset", consumergroup="metered-group",
                              topic=TOPIC, partition=str(p)) for p in (0, 1)}
        self.assertEqual(committed, {0: 6, 1: 6})
        self.assertGreaterEqual(value(scraped, "kafka_server_socket_server_metrics_connection_creation_total",
                                      listener="PLAINTEXT"), 2)
        self.assertIn(("kafka_server_socket_server_metrics_connection_count", frozenset({("listener", "PLAINTEXT")})),
                      scraped)
        self.assertEqual(value(scraped, "kafka_server_socket_server_metrics_failed_authentication_total",
                               listener="PLAINTEXT"), 0)
        for op in ("Fetch", "Produce", "Heartbeat", "Rebalance"):
            self.assertIn(("kafka_server_delayedoperationpurgatory_purgatorysize",
                           frozenset({("delayedOperation", op)})), scraped)
        self.assertEqual(value(scraped, "kafka_network_requestchannel_requestqueuesize"), 0)
        self.assertEqual(value(scraped, "kafka_server_replicamanager_underreplicatedpartitions"), 0)
        self.assertEqual(value(scraped, "kafka_controller_kafkacontroller_offlinepartitionscount"), 0)
        self.assertGreater(value(scraped, "process_resident_memory_bytes"), 0)
        self.assertGreater(value(scraped, "process_open_fds"), 0)

    def test_health_and_readiness(self):
        status, body = get(self.broker.metrics_port, "healthz")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["listeners"], {"PLAINTEXT": True})
        status, body = get(self.broker.metrics_port, "readyz")
        self.assertEqual((status, json.loads(body)), (200, {
            "status": "ok", "started": True, "logsLoaded": True, "groupCoordinatorLoaded": True,
            "transactionCoordinatorLoaded": True}))
        self.assertEqual(get(self.broker.metrics_port, "nothing-here")[0], 404)


class OfflineLogDirTests(unittest.TestCase):
    """A log dir goes offline through a real I/O error: a file where a new partition's directory
    must go."""

    def create_doomed_topic(self, broker, partitions):
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        self.addCleanup(admin.close)
        try:
            admin.create_topics([NewTopic("doomed", partitions, 1)])
        except Exception:
            pass  # KAFKA_STORAGE_ERROR, however the client reports it

    def test_healthz_lists_an_offline_log_dir_while_another_serves(self):
        work = os.path.abspath(self.mktemp())
        dirs = [os.path.join(work, "a"), os.path.join(work, "b")]
        broker = KafkaBroker(overrides={"kafkatw.metrics.listener": "127.0.0.1:0", "log.dirs": ",".join(dirs)})
        self.addCleanup(broker.close)
        broker.start()
        self.assertEqual(get(broker.metrics_port, "healthz")[0], 200)
        for p in (0, 1):  # two partitions, one in each dir: the one placed in a fails
            with open(os.path.join(dirs[0], "doomed-%d" % p), "w") as f:
                f.write("in the way\n")
        self.create_doomed_topic(broker, 2)
        status, body = get(broker.metrics_port, "healthz")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["logDirs"], {"online": [dirs[1]], "offline": [dirs[0]]})
        scraped = samples(get(broker.metrics_port, "metrics")[1])
        self.assertEqual(value(scraped, "kafka_log_logmanager_offlinelogdirectorycount"), 1)

    def test_healthz_fails_when_the_only_log_dir_goes_offline(self):
        import time

        broker = KafkaBroker(overrides={"kafkatw.metrics.listener": "127.0.0.1:0"})
        self.addCleanup(broker.close)
        broker.start()
        self.assertEqual(get(broker.metrics_port, "healthz")[0], 200)
        process = broker.process
        with open(os.path.join(broker.data_dir, "doomed-0"), "w") as f:
            f.write("in the way\n")
        self.create_doomed_topic(broker, 1)
        # with no log dir left the broker halts (Kafka's LogManager): the probe gets no answer
        deadline = time.monotonic() + 15
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(process.returncode, 1)
        with self.assertRaises(OSError):
            get(broker.metrics_port, "healthz")


class FailedAuthenticationTests(unittest.TestCase):
    def test_a_refused_tls_handshake_counts(self):
        import socket
        import ssl
        import time

        broker = KafkaBroker(overrides={"kafkatw.metrics.listener": "127.0.0.1:0"}, listeners=("PLAINTEXT", "SSL"))
        self.addCleanup(broker.close)
        broker.start()
        host, port = broker.ssl_bootstrap_servers.split(":")
        for _ in range(2):  # a client that does not trust the broker's CA aborts the handshake
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                with self.assertRaises(ssl.SSLError):
                    ssl.create_default_context().wrap_socket(sock, server_hostname="localhost")
        deadline = time.monotonic() + 10
        while True:
            scraped = samples(get(broker.metrics_port, "metrics")[1])
            failed = value(scraped, "kafka_server_socket_server_metrics_failed_authentication_total", listener="SSL")
            if failed == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(failed, 2)
        self.assertEqual(value(scraped, "kafka_server_socket_server_metrics_failed_authentication_total",
                               listener="PLAINTEXT"), 0)


class ConfigTests(unittest.SynchronousTestCase):
    def test_port_in_use_is_one_line_and_exit_2(self):
        import socket
        import subprocess

        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        self.addCleanup(taken.close)
        port = taken.getsockname()[1]
        work = os.path.abspath(self.mktemp())
        os.makedirs(work)
        broker = KafkaBroker(data_dir=os.path.join(work, "logs"),
                             overrides={"kafkatw.metrics.listener": "127.0.0.1:%d" % port})
        self.addCleanup(broker.close)
        argv = broker.command()
        proc = subprocess.run(argv, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=60)
        self.assertEqual((proc.returncode, proc.stderr), (2, (
            "kafkatw: Invalid value 127.0.0.1:%d for configuration kafkatw.metrics.listener: cannot listen "
            "there: [Errno 98] Address already in use\n" % port)))


    def test_kafkas_metrics_keys_are_known(self):
        from kafkatw.config import KafkaConfig

        config = KafkaConfig.from_properties({
            "metric.reporters": "org.apache.kafka.common.metrics.JmxReporter", "metrics.num.samples": "3",
            "metrics.sample.window.ms": "10000", "metrics.recording.level": "DEBUG"})
        self.assertEqual(config.unknown, {})
        with self.assertRaises(ConfigError):
            KafkaConfig.from_properties({"metrics.recording.level": "LOUD"})
        # a reporter class kafkatw would not run is refused, not ignored
        with self.assertRaises(ConfigError) as e:
            KafkaConfig.from_properties({"metric.reporters": "org.apache.kafka.common.metrics.JmxReporter,"
                                                             "com.example.StatsdReporter"})
        self.assertEqual(str(e.exception), "Invalid value org.apache.kafka.common.metrics.JmxReporter,"
                         "com.example.StatsdReporter for configuration metric.reporters: kafkatw runs no "
                         "metric reporter classes; export metrics with kafkatw.metrics.listener")

    def test_listener_value(self):
        self.assertEqual(parse_listener("127.0.0.1:9404"), ("127.0.0.1", 9404))
        self.assertEqual(parse_listener(":9404"), ("", 9404))
        self.assertEqual(parse_listener("[::1]:0"), ("::1", 0))
        for bad in ("9404", "host:", "host:port", "h:70000"):
            with self.assertRaises(ConfigError) as e:
                parse_listener(bad)
            self.assertEqual(str(e.exception), "Invalid value %s for configuration kafkatw.metrics.listener: "
                                               "expected HOST:PORT, e.g. 127.0.0.1:9404" % bad)


# -- in process ------------------------------------------------------------------------------

class _Log:
    reads = 0  # how many partitions' sizes were read, all logs together

    def __init__(self, topic, partition, end=10, offline=False):
        self.topic, self.partition = topic, partition
        self.log_start_offset, self.log_end_offset = 0, end
        self.high_watermark, self.number_of_segments, self.is_offline = end, 1, offline

    @property
    def size(self):
        _Log.reads += 1
        return 100 * self.log_end_offset


class _Purgatory:
    def __init__(self, name):
        self.name = name

    def watched(self):
        return 2

    def num_delayed(self):
        return 1


def fake_broker(partitions, groups=0):
    logs = [_Log("t%d" % (i // 100), i % 100) for i in range(partitions)]
    by_tp = {(lg.topic, lg.partition): lg for lg in logs}
    lookups = []

    def log_view(topic, partition):
        lookups.append((topic, partition))
        return by_tp.get((topic, partition))

    log_manager = types.SimpleNamespace(log_views=lambda: list(logs), offline_dirs=frozenset(),
                                        online_dirs=["/d"], log_view=log_view, lookups=lookups)
    coordinator = types.SimpleNamespace(
        groups={"g%d" % g: types.SimpleNamespace(offsets={(lg.topic, lg.partition): types.SimpleNamespace(offset=4)
                                                          for lg in logs}) for g in range(groups)},
        heartbeat_purgatory=_Purgatory("Heartbeat"), rebalance_purgatory=_Purgatory("Rebalance"),
        is_loading=lambda: False)
    metrics = NetworkMetrics(request_times=True)
    metrics.record_request("Produce", 3.0, 9, {f: 3.0 for f in REQUEST_TIME_FIELDS})
    socket_server = types.SimpleNamespace(metrics=metrics, channel=types.SimpleNamespace(size=0),
                                          endpoints=[types.SimpleNamespace(listener_name="PLAINTEXT")],
                                          listening=lambda: {"PLAINTEXT": True})
    replica_manager = types.SimpleNamespace(topic_stats=BrokerTopicStats(), fetch_purgatory=_Purgatory("Fetch"),
                                            produce_purgatory=_Purgatory("Produce"),
                                            under_replicated_partitions=lambda: 2)
    return types.SimpleNamespace(socket_server=socket_server, log_manager=log_manager, running=1,
                                 replica_manager=replica_manager, group_coordinator=coordinator,
                                 txn_coordinator=types.SimpleNamespace(is_loading=lambda: False), apis=None)


class SnapshotTests(unittest.SynchronousTestCase):
    def test_many_partitions_are_read_one_slice_per_reactor_turn(self):
        clock = task.Clock()
        broker = fake_broker(5000, groups=3)
        d = exporter.take_snapshot(broker, clock, per_turn=2000)
        read = []
        while not d.called:
            # one reactor turn: run only the call pending now (Clock.advance would also run
            # the next slice, scheduled for the same time)
            (call,) = clock.getDelayedCalls()
            clock.calls.remove(call)
            before = (_Log.reads, len(broker.log_manager.lookups))
            call.func(*call.args, **call.kw)
            read.append((_Log.reads - before[0], len(broker.log_manager.lookups) - before[1]))
        # 5000 partitions in 3 slices, then each group's 5000 committed offsets in a turn of its
        # own (a group is not split), one slice a turn, and a last turn that finds nothing left
        self.assertEqual(read, [(2000, 0), (2000, 0), (1000, 0), (0, 5000), (0, 5000), (0, 5000), (0, 0)])
        snap = d.result
        self.assertEqual((snap.bulk.partitions, snap.bulk.groups), (5000, 15000))
        scraped = samples(exporter.render(snap).decode())
        self.assertEqual(value(scraped, "kafka_server_replicamanager_partitioncount"), 5000)
        self.assertEqual(value(scraped, "kafka_server_replicamanager_underreplicatedpartitions"), 2)
        self.assertEqual(value(scraped, "kafka_log_log_logendoffset", topic="t49", partition="99"), 10)
        self.assertEqual(value(scraped, "kafka_consumergroup_lag", consumergroup="g0", topic="t3", partition="7"), 6)

    def test_the_reactor_part_reads_no_process_files(self):
        """The process metrics list /proc/self/fd (50-120 ms with 18,000 descriptors): they are
        process_text's, run in the thread pool, never the reactor turns' render_parts."""
        d = exporter.take_snapshot(fake_broker(10), task.Clock())
        reactor_part = b"".join(exporter.render_parts(d.result)).decode()
        self.assertNotIn("process_open_fds", reactor_part)
        self.assertIn("kafka_log_log_size", reactor_part)
        self.assertIn("process_open_fds", exporter.process_text().decode())

    def test_client_quotas_by_user_and_client_id(self):
        broker = fake_broker(1)
        broker.apis = types.SimpleNamespace(quotas=types.SimpleNamespace(snapshot=lambda: {
            "producer_byte_rate": [{"user": "alice", "client-id": "loader", "recorded_total": 5000000,
                                    "throttle_time_ms_total": 2500, "throttle_count": 3, "rate": 1048576.0}],
            "request_percentage": [{"user": None, "client-id": "poller", "recorded_total": 12.5,
                                    "throttle_time_ms_total": 0, "throttle_count": 0, "rate": 0.5}]}))
        scraped = samples(exporter.render(exporter.take_snapshot(broker, task.Clock()).result).decode())
        alice = {"user": "alice", "client_id": "loader"}
        self.assertEqual(value(scraped, "kafka_server_produce_byte_rate", **alice), 1048576.0)
        self.assertEqual(value(scraped, "kafka_server_produce_throttle_time_ms_total", **alice), 2500)
        self.assertEqual(value(scraped, "kafka_server_produce_throttled_responses_total", **alice), 3)
        self.assertEqual(value(scraped, "kafka_server_request_request_time", user="", client_id="poller"), 0.5)

    def test_few_partitions_at_once(self):
        d = exporter.take_snapshot(fake_broker(10), task.Clock())
        self.assertEqual(d.result.bulk.partitions, 10)

    def test_label_values_are_escaped(self):
        bulk = exporter.BulkText()
        group = types.SimpleNamespace(offsets={("t", 0): types.SimpleNamespace(offset=1)})
        log_manager = types.SimpleNamespace(log_view=lambda topic, partition: _Log(topic, partition, end=3))
        bulk.add_groups(log_manager, [('a "quoted"\\group\n', group)])
        bulk.add_topics(['odd"topic'], ({'odd"topic': 5}, {}, {}))
        scraped = samples(bulk.text().decode())
        self.assertEqual(value(scraped, "kafka_server_brokertopicmetrics_messagesin_total", topic='odd"topic'), 5)
        self.assertEqual(value(scraped, "kafka_server_brokertopicmetrics_bytesin_total", topic='odd"topic'), 0)
        self.assertEqual(value(scraped, "kafka_consumergroup_lag", consumergroup='a "quoted"\\group\n',
                               topic="t", partition="0"), 2)


class HealthRulesTests(unittest.SynchronousTestCase):
    def test_ready_only_once_coordinators_are_loaded(self):
        broker = fake_broker(1)
        self.assertEqual(readiness(broker)[0], True)
        broker.group_coordinator.is_loading = lambda: True
        self.assertEqual(readiness(broker), (False, {"started": True, "logsLoaded": True,
                                                    "groupCoordinatorLoaded": False,
                                                    "transactionCoordinatorLoaded": True}))
        broker.group_coordinator = None
        self.assertEqual(readiness(broker)[0], False)
        broker = fake_broker(1)
        broker.txn_coordinator.is_loading = lambda: True
        self.assertEqual(readiness(broker)[1]["transactionCoordinatorLoaded"], False)
        self.assertEqual(readiness(broker)[0], False)

    def test_unhealthy_when_a_listener_stopped(self):
        broker = fake_broker(1)
        self.assertEqual(health(broker)[0], True)
        broker.socket_server.listening = lambda: {"PLAINTEXT": False}
        self.assertEqual(health(broker)[0], False)


class TopicStatsTests(unittest.SynchronousTestCase):
    def test_counts_per_topic_and_their_views(self):
        stats = BrokerTopicStats()
        stats.record_append("a", 3, 300)
        stats.record_append("a", 2, 150)
        stats.record_append("b", 1, 70)
        fetched = types.SimpleNamespace(records_size=90)
        stats.record_fetch([(("a", 0), fetched), (("c", 1), fetched),
                            (("b", 0), types.SimpleNamespace(records_size=0))])
        self.assertEqual(stats.messages_in, {"a": 5, "b": 1})
        self.assertEqual(stats.bytes_in, {"a": 450, "b": 70})
        self.assertEqual(stats.bytes_out, {"a": 90, "c": 90})  # only topics with bytes answered
        self.assertEqual(stats.messages_in["never"], 0)
        stats.remove("a")
        self.assertEqual((stats.messages_in, stats.bytes_out), ({"b": 1}, {"c": 90}))


class NetworkMetricsTests(unittest.SynchronousTestCase):
    def test_request_counts_per_api_and_version_and_time_totals(self):
        metrics = NetworkMetrics()
        metrics.record_request("Produce", 3.0, 9)
        metrics.record_request("Produce", 1.5, 9)
        metrics.record_request("Produce", 0.5, 7)
        metrics.record_request("Fetch", 2.0)  # no version: counted per API only
        self.assertEqual(metrics.requests_total, {"Produce": 3, "Fetch": 1})
        self.assertEqual(metrics.requests_by_version, {("Produce", 9): 2, ("Produce", 7): 1})
        self.assertEqual(metrics.request_time_ms_total, {"Produce": 5.0, "Fetch": 2.0})
        self.assertEqual((metrics.requests_total["Metadata"], metrics.request_time_ms_total["Metadata"]), (0, 0))
        snap = metrics.snapshot()
        self.assertEqual((snap["requests_total"], snap["request_time_ms_total"]),
                         ({"Produce": 3, "Fetch": 1}, {"Produce": 5.0, "Fetch": 2.0}))
