"""Scrape cost of the metrics endpoint with many partitions: time per scrape and the longest
reactor stall while scraping.

A broker stand-in (the attributes the exporter reads: logs whose size is a sum over segments
as UnifiedLog's is, committed offsets of consumer groups, request time histograms of 20 APIs,
purgatories) is served by the real ``kafkatw.metrics.web`` resources on a real reactor; another
process scrapes it over HTTP and times each scrape, while a 1 ms LoopingCall in the broker's
process records the longest gap between its runs (a stall of the reactor).

    .venv/bin/python -m bench.metrics_scrape --partitions 10000 --scrapes 5

``--broker`` runs a real broker (``kafkatw.testing``) with that many partitions instead and
measures, during the scrapes and for 3 s before, the round trip of ApiVersions requests sent
back to back on one connection (a reactor stall shows there). A broker keeps about three file
descriptors per partition, so the descriptor limit bounds ``--partitions`` there.
"""

import argparse
import gc
import json
import socket
import struct
import subprocess
import sys
import threading
import time
import types
import urllib.request

from twisted.internet import reactor, task, threads
from twisted.python.threadpool import ThreadPool
from twisted.web import server

from kafkatw.metrics.web import root_resource
from kafkatw.network.metrics import REQUEST_TIME_FIELDS, NetworkMetrics
from kafkatw.server.topic_stats import BrokerTopicStats

CLIENT = r"""
import json, sys, time, urllib.request
port, n = int(sys.argv[1]), int(sys.argv[2])
out = []
for _ in range(n):
    t = time.perf_counter()
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=60).read()
    out.append((time.perf_counter() - t, len(body), body.count(b"\n")))
    time.sleep(0.2)
print(json.dumps(out))
"""


class _Segment:
    def __init__(self, size):
        self.size = size


class _Log:
    def __init__(self, topic, partition):
        self.topic, self.partition = topic, partition
        self._segments = {0: _Segment(1 << 30), 1 << 20: _Segment(12345)}
        self.log_start_offset, self.log_end_offset, self.high_watermark = 0, 2 << 20, 2 << 20
        self.is_offline = False

    @property
    def size(self):
        return sum(s.size for s in self._segments.values())

    @property
    def number_of_segments(self):
        return len(self._segments)


class _Purgatory:
    def __init__(self, name):
        self.name = name

    def watched(self):
        return 0

    def num_delayed(self):
        return 0


def stand_in(partitions, groups):
    logs = [_Log("topic-%04d" % (i // 10), i % 10) for i in range(partitions)]
    by_tp = {(lg.topic, lg.partition): lg for lg in logs}
    offsets = [(lg.topic, lg.partition) for lg in logs]
    per_group = max(1, len(offsets) // max(groups, 1))
    group_map = {}
    for g in range(groups):
        owned = offsets[g * per_group:(g + 1) * per_group]
        group_map["group-%d" % g] = types.SimpleNamespace(
            offsets={tp: types.SimpleNamespace(offset=1 << 20) for tp in owned})
    metrics = NetworkMetrics(request_times=True)
    for api in range(20):
        for version in range(3):
            metrics.record_request("Api%d" % api, 1.0, version, {f: 0.3 * version for f in REQUEST_TIME_FIELDS})
    stats = BrokerTopicStats()
    for lg in logs:
        stats.record_append(lg.topic, 10, 1000)
        stats.bytes_out[lg.topic] += 1000
    return types.SimpleNamespace(
        socket_server=types.SimpleNamespace(metrics=metrics, channel=types.SimpleNamespace(size=0),
                                            endpoints=[types.SimpleNamespace(listener_name="PLAINTEXT")],
                                            listening=lambda: {"PLAINTEXT": True}),
        log_manager=types.SimpleNamespace(all_logs=lambda: list(logs), offline_dirs=frozenset(), online_dirs=["/d"],
                                          get_log=lambda t, p: by_tp.get((t, p))),
        replica_manager=types.SimpleNamespace(topic_stats=stats, fetch_purgatory=_Purgatory("Fetch")),
        group_coordinator=types.SimpleNamespace(groups=group_map, heartbeat_purgatory=_Purgatory("Heartbeat"),
                                                rebalance_purgatory=_Purgatory("Rebalance"),
                                                is_loading=lambda: False),
        txn_coordinator=types.SimpleNamespace(is_loading=lambda: False),
        apis=None, running=1)


def _round_trips(host, port, stop, out):
    """ApiVersions v0 back to back (1 ms apart) until ``stop``; seconds each into ``out``."""
    body = struct.pack(">hhih", 18, 0, 1, 5) + b"bench"
    with socket.create_connection((host, port)) as sock:
        while not stop.is_set():
            started = time.perf_counter()
            sock.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
            sock.recv(size, socket.MSG_WAITALL)
            out.append(time.perf_counter() - started)
            time.sleep(0.001)


def _measure_round_trips(host, port, work):
    stop, out = threading.Event(), []
    thread = threading.Thread(target=_round_trips, args=(host, port, stop, out))
    thread.start()
    try:
        result = work()
    finally:
        stop.set()
        thread.join()
    out.sort()
    return result, out[-1] * 1000, out[int(len(out) * 0.99)] * 1000


def real_broker(args):
    from kafkatw.stall_probe import StallLog
    from kafkatw.testing import KafkaBroker, create_topics

    broker = KafkaBroker(overrides={"kafkatw.metrics.listener": "127.0.0.1:0", "kafkatw.reactor.stall.probe.ms": 5},
                         fork_server=False, start_timeout=120)
    broker.start()
    try:
        host, port = broker.bootstrap_servers.split(":")
        port = int(port)
        started = time.monotonic()
        topics = 10
        create_topics(host, port, [("bench-%02d" % i, args.partitions // topics, {}) for i in range(topics)],
                      timeout=600)
        print("%d partitions created in %.1f s" % (args.partitions, time.monotonic() - started))
        stall_log = StallLog(broker.log_path).mark()
        _, idle_max, idle_p99 = _measure_round_trips(host, port, lambda: time.sleep(3))
        idle_stalls = stall_log.stalls()
        stall_log.mark()

        def scrapes():
            runs = []
            for _ in range(args.scrapes):
                started = time.perf_counter()
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % broker.metrics_port, timeout=60) as r:
                    body = r.read()
                runs.append(((time.perf_counter() - started) * 1000, body.count(b"\n")))
                time.sleep(0.3)
            return runs

        runs, busy_max, busy_p99 = _measure_round_trips(host, port, scrapes)
        busy_stalls = stall_log.stalls()
    finally:
        broker.close()
    times = sorted(t for t, _ in runs)
    print("%d lines a scrape; scrape ms: %s (median %.0f)"
          % (runs[-1][1], " / ".join("%.0f" % t for t in times), times[len(times) // 2]))
    print("ApiVersions round trip while scraping: max %.1f ms, p99 %.1f ms (idle before: max %.1f, p99 %.1f)"
          % (busy_max, busy_p99, idle_max, idle_p99))
    print("the broker's stall probe (5 ms): %d stalls while scraping, longest %d ms (idle before: %d, longest %d ms)"
          % (len(busy_stalls), max(busy_stalls or [0]), len(idle_stalls), max(idle_stalls or [0])))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=10000)
    parser.add_argument("--groups", type=int, default=100, help="groups committing to all partitions between them")
    parser.add_argument("--scrapes", type=int, default=5)
    parser.add_argument("--broker", action="store_true", help="scrape a real broker with that many partitions")
    args = parser.parse_args(argv)
    if args.broker:
        return real_broker(args)

    broker = stand_in(args.partitions, args.groups)
    gc.collect()
    gc.freeze()  # as BrokerService does once started: the long-lived heap is not scanned again
    pool = ThreadPool(minthreads=0, maxthreads=2, name="bench-metrics")
    pool.start()
    port = reactor.listenTCP(0, server.Site(root_resource(broker, reactor, pool)), interface="127.0.0.1")
    gaps = []
    last = [time.perf_counter()]

    def probe():
        now = time.perf_counter()
        gaps.append(now - last[0])
        last[0] = now

    loop = task.LoopingCall(probe)
    loop.start(0.001)
    result = {}

    def scrape():
        time.sleep(2.0)  # the probe alone first: the machine's own stalls
        result["idle_gap_ms"] = max(gaps) * 1000 if gaps else 0.0
        gaps.clear()
        last[0] = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", CLIENT, str(port.getHost().port), str(args.scrapes)],
                             check=True, stdout=subprocess.PIPE, text=True).stdout
        return json.loads(out)

    def done(runs):
        result["runs"] = runs
        result["max_gap_ms"] = max(gaps) * 1000 if gaps else 0.0
        reactor.stop()

    def failed(f):
        result["error"] = f.getErrorMessage()
        reactor.stop()

    reactor.callWhenRunning(lambda: threads.deferToThread(scrape).addCallbacks(done, failed))
    reactor.run()
    loop.running and loop.stop()
    pool.stop()
    if "error" in result:
        raise SystemExit(result["error"])
    times = sorted(t * 1000 for t, _, _ in result["runs"])
    _, size, lines = result["runs"][-1]
    print("partitions %d, committed offsets %d: %d lines, %.1f MB per scrape"
          % (args.partitions, args.partitions, lines, size / 1e6))
    print("scrape ms: %s (median %.0f)" % (" / ".join("%.0f" % t for t in times), times[len(times) // 2]))
    print("longest reactor stall while scraping: %.1f ms (while idle, 2 s before: %.1f ms)"
          % (result["max_gap_ms"], result["idle_gap_ms"]))


if __name__ == "__main__":
    main()
