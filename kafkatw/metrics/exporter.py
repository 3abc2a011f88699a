"""Prometheus metric families of a running broker, named as the JMX exporter's Kafka rules name
Kafka's MBeans (``kafka.server<type=BrokerTopicMetrics, name=MessagesInPerSec, topic=t>`` ->
``kafka_server_brokertopicmetrics_messagesin_total{topic="t"}``), so dashboards and alerts
written for Kafka work unchanged.

Owns the names and the split of a scrape into a snapshot of the broker's numbers, taken on the
reactor in slices (:func:`take_snapshot`), and the formatting of that snapshot, which touches
no broker object and runs in a thread (:func:`render`). Consumer lag uses kafka_exporter's
names (Kafka's broker has no lag metric).
"""

import attr
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from twisted.internet import defer, task

from kafkatw.network.metrics import REQUEST_TIME_FIELDS

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Partitions read per reactor turn while taking a snapshot (a few ms of work each).
PARTITIONS_PER_TURN = 1000

#: The request log's time fields as Kafka's RequestMetrics histogram names.
_HISTOGRAM_NAMES = {
    "requestQueueTimeMs": "requestqueuetimems", "localTimeMs": "localtimems",
    "remoteTimeMs": "remotetimems", "throttleTimeMs": "throttletimems",
    "responseQueueTimeMs": "responsequeuetimems", "sendTimeMs": "responsesendtimems",
    "totalTimeMs": "totaltimems",
}


@attr.s(slots=True)
class Snapshot:
    """Plain copies of the broker's numbers at one moment (no reference to live objects)."""

    network = attr.ib(default=None)  # NetworkMetrics.snapshot() plus histograms and versions
    request_versions = attr.ib(factory=dict)
    request_times = attr.ib(default=None)  # (buckets, {api: (counts, sums)})
    listeners = attr.ib(factory=list)
    topics = attr.ib(default=None)  # (messages_in, bytes_in, bytes_out)
    offline_dirs = attr.ib(default=0)
    purgatories = attr.ib(factory=list)  # (delayedOperation, watched, delayed)
    bulk = attr.ib(factory=lambda: BulkText())  # the per-partition and per-group samples


def _copy_request_times(histograms):
    if histograms is None:
        return None
    return (histograms.buckets,
            {api: ([list(c) for c in counts], list(sums)) for api, (counts, sums) in histograms.by_api.items()})


def _take_network(snap, broker):
    server = broker.socket_server
    if server is None:
        return
    metrics = server.metrics
    snap.network = metrics.snapshot()
    snap.network["request_queue_size"] = server.channel.size
    snap.request_versions = dict(metrics.requests_by_version)
    snap.request_times = _copy_request_times(metrics.request_times)
    snap.listeners = [ep.listener_name for ep in server.endpoints]


def _take_purgatories(snap, broker):
    found = []
    if broker.replica_manager is not None:
        found.append(broker.replica_manager.fetch_purgatory)
    if broker.group_coordinator is not None:
        found += [broker.group_coordinator.heartbeat_purgatory, broker.group_coordinator.rebalance_purgatory]
    snap.purgatories = [(p.name, p.watched(), p.num_delayed()) for p in found]


def _groups_in_slices(broker, per_turn):
    """Lists of ``(group id, group)`` holding about ``per_turn`` committed offsets each (a group
    is never split: its offsets are read in one turn, straight from its dict)."""
    coordinator = broker.group_coordinator
    if coordinator is None:
        return []
    slices, current, count = [], [], 0
    for item in list(coordinator.groups.items()):
        current.append(item)
        count += len(item[1].offsets)
        if count >= per_turn:
            slices.append(current)
            current, count = [], 0
    if current:
        slices.append(current)
    return slices


def take_snapshot(broker, clock, per_turn=PARTITIONS_PER_TURN):
    """Deferred :class:`Snapshot` of ``broker`` (the service whose components it reads), read on
    the reactor ``per_turn`` partitions (or committed group offsets) at a time, one slice a
    reactor turn, so a scrape of many partitions never holds the reactor for long."""
    snap = Snapshot()
    _take_network(snap, broker)
    if broker.replica_manager is not None:
        stats = broker.replica_manager.topic_stats
        snap.topics = (dict(stats.messages_in), dict(stats.bytes_in), dict(stats.bytes_out))
    _take_purgatories(snap, broker)
    logs_manager = broker.log_manager
    if logs_manager is None:
        return defer.succeed(snap)
    snap.offline_dirs = len(logs_manager.offline_dirs)
    logs = logs_manager.all_logs()
    groups = _groups_in_slices(broker, per_turn)
    bulk = snap.bulk
    if len(logs) <= per_turn and len(groups) <= 1:
        bulk.add_logs(logs)
        for group_slice in groups:
            bulk.add_groups(logs_manager, group_slice)
        return defer.succeed(snap)

    def slices():
        for start in range(0, len(logs), per_turn):
            bulk.add_logs(logs[start:start + per_turn])
            yield None
        for group_slice in groups:
            bulk.add_groups(logs_manager, group_slice)
            yield None

    # one slice per reactor turn (the default cooperator runs slices for up to 10 ms a turn)
    cooperator = task.Cooperator(terminationPredicateFactory=lambda: lambda: True,
                                 scheduler=lambda work: clock.callLater(0, work))
    return cooperator.cooperate(slices()).whenDone().addCallback(lambda _: snap)


def _counter(name, doc, labels, values):
    family = CounterMetricFamily(name, doc, labels=labels)
    for key, value in sorted(values.items()):
        family.add_metric(key if isinstance(key, tuple) else (key,), value)
    return family


def _gauge(name, doc, labels=(), rows=()):
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    for labels_values, value in rows:
        family.add_metric(labels_values, value)
    return family


def families(snap):
    """The metric families of ``snap`` with a handful of samples each (pure: runs in a thread);
    the per-partition ones are :class:`BulkText`'s."""
    out = []
    net = snap.network
    if net is not None:
        out.append(_counter("kafka_network_requestmetrics_requests",
                            "Completed requests by API and version (RequestsPerSec).",
                            ["request", "version"],
                            {(api, str(v)): n for (api, v), n in snap.request_versions.items()}))
        out.append(_gauge("kafka_network_requestchannel_requestqueuesize",
                          "Requests waiting for a handler (RequestQueueSize).", (),
                          [((), net["request_queue_size"])]))
        prefix = "kafka_server_socket_server_metrics_"
        out += [
            _gauge(prefix + "connection_count", "Open connections by listener (connection-count).",
                   ["listener"], [((name,), net["connections"].get(name, 0)) for name in snap.listeners]),
            _counter(prefix + "connection_creation", "Connections accepted by listener.", ["listener"],
                     {name: net["connections_created"].get(name, 0) for name in snap.listeners}),
            _counter(prefix + "connection_close", "Connections closed by listener.", ["listener"],
                     {name: net["connections_closed"].get(name, 0) for name in snap.listeners}),
            _counter(prefix + "failed_authentication",
                     "Failed authentications (refused TLS handshakes or certificates, SASL) by listener.",
                     ["listener"], {name: net["failed_authentication"].get(name, 0) for name in snap.listeners}),
            _counter(prefix + "successful_authentication", "Successful SASL authentications by listener.",
                     ["listener"], {name: net["successful_authentication"].get(name, 0) for name in snap.listeners}),
            _counter(prefix + "failed_reauthentication", "Failed SASL re-authentications (KIP-368) by listener.",
                     ["listener"], {name: net["failed_reauthentication"].get(name, 0) for name in snap.listeners}),
            _counter(prefix + "successful_reauthentication", "Successful SASL re-authentications by listener.",
                     ["listener"],
                     {name: net["successful_reauthentication"].get(name, 0) for name in snap.listeners}),
            _gauge(prefix + "expired_connections_killed_count",
                   "Connections closed because their SASL session expired without re-authentication.", (),
                   [((), net["expired_connections_killed"])]),
            _counter(prefix + "connection_rejected", "Connections refused by connection quotas, by listener.",
                     ["listener"], {name: net["connections_rejected"].get(name, 0) for name in snap.listeners}),
            _counter("kafka_server_socket_server_metrics_incoming_byte", "Bytes read from clients.", [],
                     {(): net["bytes_in"]}),
            _counter("kafka_server_socket_server_metrics_outgoing_byte", "Bytes written to clients.", [],
                     {(): net["bytes_out"]}),
        ]
    if snap.purgatories or net is not None:
        out += [
            _gauge("kafka_server_delayedoperationpurgatory_purgatorysize",
                   "Operations watched in a purgatory (PurgatorySize).", ["delayedOperation"],
                   [((name,), watched) for name, watched, _ in snap.purgatories]),
            _gauge("kafka_server_delayedoperationpurgatory_numdelayedoperations",
                   "Operations waiting on a timer (NumDelayedOperations).", ["delayedOperation"],
                   [((name,), delayed) for name, _, delayed in snap.purgatories]),
        ]
    out += _log_families(snap)
    return out


#: Per-topic counters: (name without _total, help, index in Snapshot.topics).
_TOPIC_COUNTERS = (
    ("kafka_server_brokertopicmetrics_messagesin", "Messages appended, by topic (MessagesInPerSec).", 0),
    ("kafka_server_brokertopicmetrics_bytesin", "Bytes appended, by topic (BytesInPerSec).", 1),
    ("kafka_server_brokertopicmetrics_bytesout", "Record bytes fetched, by topic (BytesOutPerSec).", 2),
)


def topic_text(topics):
    """The per-topic counters as Prometheus text (one sample per topic and family)."""
    if topics is None:
        return ""
    out = []
    for name, doc, index in _TOPIC_COUNTERS:
        out.append("# HELP %s_total %s\n# TYPE %s_total counter\n" % (name, doc, name))
        out.extend(['%s_total{topic="%s"} %d\n' % (name, _label_value(topic), n)
                    for topic, n in sorted(topics[index].items())])
    return "".join(out)


def histogram_text(request_times):
    """The request time histograms (per API, one per request log time) as Prometheus text."""
    if request_times is None:
        return ""
    buckets, by_api = request_times
    bounds = ['%r"} ' % float(b) for b in buckets] + ['+Inf"} ']
    out = []
    for i, field in enumerate(REQUEST_TIME_FIELDS):
        name = "kafka_network_requestmetrics_" + _HISTOGRAM_NAMES[field]
        out.append("# HELP %s %s of completed requests by API, milliseconds (the request log's %s).\n"
                   "# TYPE %s histogram\n" % (name, field, field, name))
        for api in sorted(by_api):
            counts, sums = by_api[api]
            head = '%s_bucket{request="%s",le="' % (name, _label_value(api))
            running = 0
            for bound, n in zip(bounds, counts[i]):
                running += n
                out.append("%s%s%d\n" % (head, bound, running))
            out.append('%s_count{request="%s"} %d\n%s_sum{request="%s"} %r\n'
                       % (name, _label_value(api), running, name, _label_value(api), float(sums[i])))
    return "".join(out)


def _log_families(snap):
    offline = snap.bulk.offline_partitions
    return [
        _gauge("kafka_server_replicamanager_partitioncount", "Partitions led by this broker.", (),
               [((), snap.bulk.partitions)]),
        # a single node is the whole ISR of each partition it has
        _gauge("kafka_server_replicamanager_underreplicatedpartitions",
               "Partitions whose ISR is smaller than their replicas.", (), [((), 0)]),
        _gauge("kafka_controller_kafkacontroller_offlinepartitionscount",
               "Partitions without a leader: their log dir is offline.", (), [((), offline)]),
        _gauge("kafka_log_logmanager_offlinelogdirectorycount", "Log dirs offline after an I/O error.", (),
               [((), snap.offline_dirs)]),
    ]


#: The per-partition families, in the order of :class:`BulkText`'s lines.
_PARTITION_GAUGES = (
    ("kafka_log_log_size", "Bytes of a partition's log (Log Size)."),
    ("kafka_log_log_logstartoffset", "First offset of a partition's log (LogStartOffset)."),
    ("kafka_log_log_logendoffset", "Log end offset of a partition (LogEndOffset)."),
    ("kafka_log_log_numlogsegments", "Segments of a partition's log (NumLogSegments)."),
)
_GROUP_GAUGES = (
    ("kafka_consumergroup_current_offset", "Committed offset of a group."),
    ("kafka_consumergroup_lag", "High watermark minus the group's committed offset."),
)


def _label_value(text):
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class BulkText:
    """The families with a sample per partition or per group and partition, as Prometheus text
    lines, added a slice at a time on the reactor (reading and formatting in one pass, no copy).

    Written here rather than through prometheus_client, whose exposition costs about 25 us a
    sample (1.5 s for 10,000 partitions): one string template per sample, label values escaped
    once per topic or group."""

    def __init__(self):
        self.partitions = 0
        self.offline_partitions = 0
        self.groups = 0
        self._partition_lines = tuple([] for _ in _PARTITION_GAUGES)
        self._group_lines = tuple([] for _ in _GROUP_GAUGES)
        self._topic_labels = {}

    def add_logs(self, logs):
        sizes, starts, ends, segments = self._partition_lines
        labels = self._topic_labels
        for lg in logs:
            label = labels.get(lg.topic)
            if label is None:
                label = labels[lg.topic] = '{topic="%s",partition="' % _label_value(lg.topic)
            label = '%s%d"} ' % (label, lg.partition)
            sizes.append("kafka_log_log_size%s%d\n" % (label, lg.size))
            starts.append("kafka_log_log_logstartoffset%s%d\n" % (label, lg.log_start_offset))
            ends.append("kafka_log_log_logendoffset%s%d\n" % (label, lg.log_end_offset))
            segments.append("kafka_log_log_numlogsegments%s%d\n" % (label, lg.number_of_segments))
            if lg.is_offline:
                self.offline_partitions += 1
        self.partitions += len(logs)

    def add_groups(self, log_manager, groups):
        """``groups``: [(group id, group)]; each committed offset's lag is against the HW."""
        for group_id, group in groups:
            for (topic, partition), committed in group.offsets.items():
                lg = log_manager.get_log(topic, partition)
                if lg is not None:
                    self.add_group_offset(group_id, topic, partition, committed.offset, lg.high_watermark)

    def add_group_offset(self, group_id, topic, partition, committed, high_watermark):
        current, lag = self._group_lines
        label = '{consumergroup="%s",topic="%s",partition="%d"} ' % (
            _label_value(group_id), _label_value(topic), partition)
        current.append("kafka_consumergroup_current_offset%s%d\n" % (label, committed))
        lag.append("kafka_consumergroup_lag%s%d\n" % (label, max(0, high_watermark - committed)))
        self.groups += 1

    def text(self):
        out = []
        for (name, doc), lines in zip(_PARTITION_GAUGES + _GROUP_GAUGES, self._partition_lines + self._group_lines):
            out.append("# HELP %s %s\n# TYPE %s gauge\n" % (name, doc, name))
            out.extend(lines)
        return "".join(out).encode("utf-8")


class _Families:
    """A one-shot collector: the families of one snapshot."""

    def __init__(self, snap):
        self.snap = snap

    def collect(self):
        return families(self.snap)


def render(snap, process=True):
    """Prometheus text (bytes) of ``snap`` and, with ``process``, of this process (CPU, memory,
    descriptors, GC). Touches no broker object: callers run it in a thread."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(snap))
    if process:
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
    extra = topic_text(snap.topics) + histogram_text(snap.request_times)
    return generate_latest(registry) + extra.encode("utf-8") + snap.bulk.text()
