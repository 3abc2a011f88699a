"""One nemesis run from start to verdict: the cluster, the topic (RF 3, min ISR 2), the workload,
the schedule carried out, healing, the final read, a clean stop and the replicas compared.
Bounded: every wait has a deadline, and a run that cannot finish says where it stopped."""

import collections
import os
import time

import attr

from kafkatw import testing
from kafkatw.nemesis import checker, faults, schedule, workload


@attr.s
class Options:
    seed = attr.ib(default=1)
    brokers = attr.ib(default=3)
    partitions = attr.ib(default=3)
    producers = attr.ib(default=2)
    consumers = attr.ib(default=1)
    rate = attr.ib(default=100)  # values per second per producer
    kinds = attr.ib(default=(schedule.KILL_LEADER,))
    faults = attr.ib(default=None)  # how many faults; else duration_s decides
    duration_s = attr.ib(default=None)
    session_timeout_ms = attr.ib(default=4000)
    hold_s = attr.ib(default=(1.0, 3.0))
    rest_s = attr.ib(default=(2.0, 4.0))
    topic = attr.ib(default="nemesis")
    keep_data = attr.ib(default=False)


@attr.s
class Report:
    options = attr.ib()
    faults = attr.ib(factory=list)  # one line per fault carried out
    verdict = attr.ib(default=None)
    produced = attr.ib(default=0)
    failed = attr.ib(default=0)
    failure_reasons = attr.ib(factory=collections.Counter)  # error text -> deliveries failed with it
    unflushed = attr.ib(default=0)
    ends = attr.ib(factory=dict)
    elapsed_s = attr.ib(default=0.0)
    work_dir = attr.ib(default=None)

    def text(self):
        o = self.options
        lines = ["nemesis seed %d: %d brokers, %d partitions (RF %d, min ISR 2), %d producers at %d/s, "
                 "%d consumers, faults %s, %.0f s" % (o.seed, o.brokers, o.partitions, min(3, o.brokers),
                                                     o.producers, o.rate, o.consumers, ",".join(o.kinds),
                                                     self.elapsed_s),
                 "faults carried out: %d" % len(self.faults)]
        lines += ["  " + f for f in self.faults]
        lines.append("produced %d, delivery failures %d, undelivered at the end %d; log end offsets %s"
                     % (self.produced, self.failed, self.unflushed, self.ends))
        for reason, count in self.failure_reasons.most_common(5):
            lines.append("  delivery failure x%d: %s" % (count, reason))
        v = self.verdict
        if v is not None:
            lines.append("verdict: " + ("OK" if v.ok else "FAILED") + ": " + v.summary())
            for name in ("lost", "duplicates", "reordered", "moved", "divergent", "lagging",
                         "consumer_anomalies", "resent"):
                items = getattr(v, name)
                for line in items[:20]:
                    lines.append("  %s: %s" % (name, line))
                if len(items) > 20:
                    lines.append("  %s: ... %d more" % (name, len(items) - 20))
        return "\n".join(lines)


def run(options, log=print):
    """Carry out one run; returns its :class:`Report` (with ``verdict`` unless it broke first)."""
    began = time.monotonic()
    plan = schedule.make_schedule(options.seed, options.kinds, faults=options.faults,
                                  duration_s=options.duration_s, hold_s=options.hold_s, rest_s=options.rest_s)
    report = Report(options=options)
    rf = min(3, options.brokers)
    cluster = testing.KafkaCluster(
        brokers=options.brokers, session_timeout_ms=options.session_timeout_ms, keep_data=options.keep_data,
        overrides={"default.replication.factor": rf, "min.insync.replicas": min(2, rf),
                   "unclean.leader.election.enable": "false"},
        topics=[(options.topic, options.partitions, {"min.insync.replicas": min(2, rf)})])
    report.work_dir = cluster.work_dir
    producers, consumers = [], []
    try:
        cluster.start()
        log("nemesis: cluster up in %s, %d faults planned" % (cluster.work_dir, len(plan)))
        cluster.wait_for(lambda: _fully_replicated(cluster, options.topic, options.partitions, rf), 60,
                         "every partition of %s to have %d replicas in its ISR" % (options.topic, rf))
        bootstrap = cluster.bootstrap_servers
        producers = [workload.ProducerWorker(i, bootstrap, options.topic, options.partitions, options.rate,
                                             log_path=os.path.join(cluster.work_dir, "producer-%d.log" % i))
                     for i in range(options.producers)]
        consumers = [workload.ConsumerWorker(i, bootstrap, options.topic, options.partitions)
                     for i in range(options.consumers)]
        for w in producers + consumers:
            w.start()
        time.sleep(2.0)  # some data before the first fault
        nemesis = faults.Nemesis(cluster, options.topic, log=log,
                                 session_timeout_s=options.session_timeout_ms / 1000.0)
        for fault in plan:
            report.faults.append(nemesis.apply(fault))
        nemesis.wait_recovered()
        cluster.wait_for(lambda: _fully_replicated(cluster, options.topic, options.partitions, rf), 60,
                         "every partition of %s to have its full ISR again" % options.topic)
        for p in producers:
            report.unflushed += p.stop(60)
        for c in consumers:
            c.stop()
        acked = [a for p in producers for a in p.acked]
        report.produced = sum(p.sent for p in producers)
        report.failed = sum(len(p.failed) for p in producers)
        report.failure_reasons.update(reason for p in producers for _, reason in p.failed)
        cluster.wait_for(lambda: _fully_replicated(cluster, options.topic, options.partitions, rf), 60,
                         "the full ISR after the last writes")
        final, report.ends = workload.read_back(cluster.bootstrap_servers, options.topic, options.partitions)
        for b in cluster.brokers.values():
            b.stop()  # a clean stop: every segment flushed before its files are read
        origins = {}  # {partition: {offset: (producer id, epoch)}}
        divergent, lagging = checker.check_data_dirs({i: b.data_dir for i, b in cluster.brokers.items()},
                                                     options.topic, options.partitions, origins)
        verdict = checker.check_records(acked, final, origins)
        verdict.divergent, verdict.lagging = divergent, lagging
        for c in consumers:
            verdict.consumer_anomalies += checker.consumer_anomalies(c.seen, final)
        report.verdict = verdict
        if not verdict.ok:
            cluster.keep_data = True  # the evidence: segment files and broker logs
        return report
    except BaseException:
        cluster.keep_data = True
        log("nemesis: run broken after %d faults; cluster folder kept: %s" % (len(report.faults), cluster.work_dir))
        raise
    finally:
        for w in producers:
            w._halt.set()
        for w in consumers:
            w._halt.set()
        report.elapsed_s = time.monotonic() - began
        cluster.close()


def _fully_replicated(cluster, topic, partitions, rf):
    """True when every broker's metadata shows each partition led with ``rf`` replicas in its ISR."""
    for broker_id, b in cluster.brokers.items():
        if not b.running:
            return False
        found = cluster.metadata(broker_id, [topic])[2].get(topic)
        if not isinstance(found, dict) or len(found) != partitions:
            return False
        if any(state[0] or state[1] < 0 or len(state[4]) != rf for state in found.values()):
            return False
    return True
