"""A soak of a real broker under a mixed workload (issue 26): producers with every codec,
consumers in a group committing, a compacted topic, a topic with a short retention, admin
churn (topics created and deleted) and connection churn, while the broker's RSS, open
descriptors (other than data files), reactor stalls (the stall probe) and produce latency are
sampled every ``--sample`` seconds. Nothing may grow without bound: after the warm-up the
last samples must not be above the first ones by more than a margin.

``tests/test_e2e_soak.py`` runs a shortened form; the hour is::

    .venv/bin/python -m tests.soak --seconds 3600 --sample 10

which prints the samples and a verdict as JSON (docs/performance.md keeps the last result).
"""

import argparse
import json
import os
import sys
import threading
import time

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from kafkatw.stall_probe import StallLog
from kafkatw.testing import KafkaBroker
from tests.support import API_VERSIONS, RawClient, api_versions_body, rss_kb
from tests.wire_fuzz import bad_log_lines, fd_count

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
BROKER_PROPS = {"kafkatw.reactor.stall.probe.ms": 20, "log.retention.check.interval.ms": 2000,
                "log.segment.delete.delay.ms": 0, "log.cleaner.backoff.ms": 500,
                "group.initial.rebalance.delay.ms": 0}


class Workload:
    def __init__(self, broker):
        self.broker = broker
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.latencies = []  # produce ack latencies (s) since the last sample
        self.counts = {"produced": 0, "consumed": 0, "topics_churned": 0, "connections": 0}
        self.errors = []
        self.threads = []
        self.common = {"bootstrap.servers": broker.bootstrap_servers, "broker.address.family": "v4"}

    def _guard(self, fn):
        def run():
            try:
                fn()
            except Exception as e:  # reported in the result
                self.errors.append("%s: %r" % (fn.__name__, e))
        return run

    def start(self):
        admin = AdminClient(self.common)
        for f in admin.create_topics([
                NewTopic("soak-data", 4, 1),
                NewTopic("soak-compact", 2, 1, config={"cleanup.policy": "compact",
                                                       "segment.bytes": str(1024 * 1024),
                                                       "min.cleanable.dirty.ratio": "0.01"}),
                NewTopic("soak-retention", 2, 1, config={"retention.ms": "3000",
                                                         "segment.bytes": str(1024 * 1024),
                                                         "segment.ms": "1000"})]).values():
            f.result(30)
        for fn in (self.produce, self.consume, self.consume, self.admin_churn,
                   self.connection_churn):
            t = threading.Thread(target=self._guard(fn), daemon=True)
            t.start()
            self.threads.append(t)

    def produce(self):
        producers = [confluent_kafka.Producer(dict(self.common, **{
            "compression.type": codec, "linger.ms": 2, "enable.idempotence": True}))
            for codec in CODECS]
        i = 0

        def acked(sent):
            def cb(err, msg):
                if err is not None:
                    self.errors.append("produce: %s" % (err,))
                    return
                with self.lock:
                    self.latencies.append(time.monotonic() - sent)
                    self.counts["produced"] += 1
            return cb
        while not self.stop.is_set():
            p = producers[i % len(producers)]
            now = time.monotonic()
            p.produce("soak-data", key=b"k%d" % (i % 97), value=b"v" * (i % 900), on_delivery=acked(now))
            p.produce("soak-compact", key=b"c%d" % (i % 50), value=b"%d" % i)
            p.produce("soak-retention", value=b"r" * 200)
            i += 1
            if i % 5 == 0:
                for each in producers:  # serve every producer's delivery callbacks
                    each.poll(0)
                time.sleep(0.01)  # a steady load, not a benchmark
        for p in producers:
            p.flush(30)

    def consume(self):
        c = confluent_kafka.Consumer(dict(self.common, **{
            "group.id": "soak-group", "auto.offset.reset": "earliest",
            "enable.auto.commit": True, "auto.commit.interval.ms": 500}))
        c.subscribe(["soak-data"])
        while not self.stop.is_set():
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                with self.lock:
                    self.counts["consumed"] += 1
        c.close()

    def admin_churn(self):
        admin = AdminClient(self.common)
        n = 0
        while not self.stop.is_set():
            name = "soak-churn-%d" % n
            admin.create_topics([NewTopic(name, 2, 1)])[name].result(30)
            admin.delete_topics([name])[name].result(30)
            n += 1
            with self.lock:
                self.counts["topics_churned"] += 1
            self.stop.wait(0.5)

    def connection_churn(self):
        while not self.stop.is_set():
            c = RawClient(self.broker, "soak-churn")
            c.request(API_VERSIONS, 3, api_versions_body())
            c.close()
            with self.lock:
                self.counts["connections"] += 1
            self.stop.wait(0.05)

    def take_latencies(self):
        with self.lock:
            out, self.latencies = self.latencies, []
        return sorted(out)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(60)


def run(broker, seconds, sample_every):
    """Soak ``broker`` (started with BROKER_PROPS) for ``seconds``; a result dict."""
    pid = broker.process.pid
    stalls = StallLog(broker.log_path).mark()
    work = Workload(broker)
    work.start()
    samples = []
    t0 = time.monotonic()
    next_at = t0 + sample_every
    while time.monotonic() - t0 < seconds:
        time.sleep(max(0.0, next_at - time.monotonic()))
        next_at += sample_every
        lat = work.take_latencies()
        found = stalls.stalls()
        stalls.mark()
        samples.append({
            "t": round(time.monotonic() - t0),
            "rss_kb": rss_kb(pid),
            "fds": fd_count(pid, broker.data_dir),
            "max_stall_ms": max(found) if found else 0,
            "produce_p99_ms": int(lat[int(len(lat) * 0.99) - 1] * 1000) if lat else None,
            "acked": len(lat),
        })
    work.finish()
    result = {"seconds": seconds, "samples": samples, "counts": dict(work.counts),
              "errors": work.errors[:20], "broker_running": broker.running,
              "bad_log_lines": bad_log_lines(broker.log_path)[:20]}
    result["verdict"] = verdict(samples)
    return result


def verdict(samples, warmup=2):
    """Growth of the later half over the samples after the warm-up: RSS within 25% + 20 MB
    of its early peak, descriptors within 8 of theirs."""
    steady = samples[warmup:] or samples
    half = max(1, len(steady) // 2)
    early, late = steady[:half], steady[half:] or steady[-1:]
    rss_limit = max(s["rss_kb"] for s in early) * 1.25 + 20 * 1024
    fd_limit = max(s["fds"] for s in early) + 8
    return {
        "rss_bounded": max(s["rss_kb"] for s in late) <= rss_limit,
        "fds_bounded": max(s["fds"] for s in late) <= fd_limit,
        "max_stall_ms": max(s["max_stall_ms"] for s in samples),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description="Soak a throwaway broker.")
    parser.add_argument("--seconds", type=int, default=3600)
    parser.add_argument("--sample", type=int, default=10)
    args = parser.parse_args(argv)
    with KafkaBroker(overrides=BROKER_PROPS) as broker:
        result = run(broker, args.seconds, args.sample)
    print(json.dumps(result, indent=1))
    v = result["verdict"]
    ok = (v["rss_bounded"] and v["fds_bounded"] and not result["errors"]
          and not result["bad_log_lines"] and result["broker_running"])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
