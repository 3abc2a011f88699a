"""Interleaved rounds: every workload runs against kafkatw then Tansu (A B A B ...) in each
of N rounds, each trial in a fresh client process and on a fresh topic; then medians,
min-max, the kafkatw/Tansu ratio and CPU seconds per GB. The machine's ceilings are measured
once per round in the same run. Owns the plan and the report, not the workloads."""

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from bench import machine
from bench.brokers import Kafkatw, KafkatwStart, Tansu
from bench.procstat import rss_bytes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GB = 1e9


def call(name, **args):
    out = subprocess.run([sys.executable, "-m", "bench.workloads", name, json.dumps(args)],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    if out.returncode != 0:
        tail = out.stderr.decode(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError("%s failed: %s" % (name, " | ".join(tail)))
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def topic(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def per_gb(r):
    """Add client/broker CPU seconds per GB to a throughput result."""
    if r.get("bytes"):
        r["client_cpu_s_per_gb"] = r["client_cpu_s"] / (r["bytes"] / GB)
        r["broker_cpu_s_per_gb"] = r["broker_cpu_s"] / (r["bytes"] / GB)
    return r


class Plan:
    """The workloads in run order; each ``(name, fn(broker, state) -> metrics dict)``."""

    def __init__(self, quick):
        self.quick = quick
        q = quick
        self.produce_s = 2.0 if q else 5.0
        self.small_s = 2.0 if q else 4.0
        self.sync_count = 500 if q else 2000
        self.e2e_count = 200 if q else 500
        self.rate_s = 2.0 if q else 4.0
        self.part_s = 1.5 if q else 3.0
        self.partition_counts = (1, 1000) if q else (1, 100, 1000)
        self.small_c_count = 2000000 if q else 6000000
        #: rows that read back the topic their producing row keeps for them (READS_BACK)
        self.readers = set(READS_BACK)

    def workloads(self):
        w = [
            ("produce 1 KiB acks=1", self.produce_acks1),
            ("consume 1 KiB", self.consume),
            ("consume 1 KiB read_uncommitted", self.consume_uncommitted),
            ("consume 1 KiB, raw Fetch loop (no record parsing)", self.consume_raw),
            ("produce 1 KiB acks=all", self.produce_acks_all),
            ("produce 100 B acks=1", self.produce_small),
            (CONSUME_SMALL, self.consume_small),
            (PRODUCE_SMALL_C, self.produce_small_c),
            (CONSUME_SMALL_C, self.consume_small_c),
            ("sync produce latency 100 B", self.sync_latency),
            ("end-to-end latency", self.e2e),
            ("request rate (8 procs, 1 msg/request)", self.request_rate),
        ]
        for codec in COMPRESSED_CODECS:
            w.append((COMPRESSED_ROW % codec, self._compressed(codec)))
        for n in self.partition_counts:
            w.append(("produce 1 KiB, %d partitions" % n, self._partitions(n)))
        w.append(("1,000 idle connections", self.idle))
        return w

    def produce_acks1(self, b, state):
        t = topic("p1")
        r = per_gb(call("produce", bootstrap=b.bootstrap, broker_pid=b.pid, topic=t, acks=1,
                        seconds=self.produce_s))
        state["consume_topic"] = (t, r["messages"])
        state["produced_bytes"] = r["bytes"]
        return r

    def consume(self, b, state):
        t, n = state["consume_topic"]
        return per_gb(call("consume", bootstrap=b.bootstrap, broker_pid=b.pid, topic=t, expected=n))

    def consume_uncommitted(self, b, state):
        t, n = state["consume_topic"]
        return per_gb(call("consume", bootstrap=b.bootstrap, broker_pid=b.pid, topic=t, expected=n,
                           isolation="read_uncommitted"))

    def consume_raw(self, b, state):
        t, n = state.pop("consume_topic")
        try:
            return per_gb(call("fetch_raw", bootstrap=b.bootstrap, broker_pid=b.pid, topic=t, expected=n))
        finally:
            self.delete(b, t)

    def produce_acks_all(self, b, state):
        t = topic("pall")
        try:
            return per_gb(call("produce", bootstrap=b.bootstrap, broker_pid=b.pid, topic=t, acks=-1,
                               seconds=self.produce_s))
        finally:
            self.delete(b, t)

    def produce_small(self, b, state):
        return self._produce_kept(b, state, CONSUME_SMALL, "produce", "p100", acks=1, size=100,
                                  seconds=self.small_s)

    def consume_small(self, b, state):
        """The 100 B topic just produced, read back as ``consume`` reads the 1 KiB one."""
        return self._consume_kept(b, state, CONSUME_SMALL, "consume", size=100)

    def produce_small_c(self, b, state):
        """The 100 B produce sent by librdkafka's C benchmark client (bench.rdkafka_c): what the
        brokers do when the client costs librdkafka's own CPU, not a Python loop's."""
        return self._produce_kept(b, state, CONSUME_SMALL_C, "produce_c", "pc100", size=100,
                                  count=self.small_c_count)

    def consume_small_c(self, b, state):
        """The topic of PRODUCE_SMALL_C read back by the C client."""
        return self._consume_kept(b, state, CONSUME_SMALL_C, "consume_c", size=100)

    def _produce_kept(self, b, state, reader, workload, prefix, **args):
        """``workload`` on a fresh topic, kept in ``state`` for the row ``reader`` when the plan
        runs it (deleted otherwise)."""
        t = topic(prefix)
        try:
            r = per_gb(call(workload, bootstrap=b.bootstrap, broker_pid=b.pid, topic=t, **args))
            if reader in self.readers:
                state[reader], t = (t, r["messages"]), None
            return r
        finally:
            if t is not None:
                self.delete(b, t)

    def _consume_kept(self, b, state, reader, workload, **args):
        t, n = state.pop(reader)
        try:
            return per_gb(call(workload, bootstrap=b.bootstrap, broker_pid=b.pid, topic=t, expected=n, **args))
        finally:
            self.delete(b, t)

    def sync_latency(self, b, state):
        t = topic("sync")
        try:
            return call("sync_latency", bootstrap=b.bootstrap, broker_pid=b.pid, topic=t,
                        count=self.sync_count)
        finally:
            self.delete(b, t)

    def e2e(self, b, state):
        t = topic("e2e")
        try:
            return call("e2e_latency", bootstrap=b.bootstrap, broker_pid=b.pid, topic=t,
                        count=self.e2e_count)
        finally:
            self.delete(b, t)

    def request_rate(self, b, state):
        t = topic("rate")
        try:
            return call("request_rate", bootstrap=b.bootstrap, broker_pid=b.pid, topic=t,
                        seconds=self.rate_s)
        finally:
            self.delete(b, t)

    def diagnostics(self):
        """Workloads run only when ``--only`` names them: they explain a row, not the broker."""
        return [(PACED_ROW % codec, self._compressed(codec, PACED_MB_S)) for codec in COMPRESSED_CODECS]

    def _compressed(self, codec, rate_mb_s=None):
        def run(b, state):
            t = topic("pz" + codec)
            try:
                return per_gb(call("produce", bootstrap=b.bootstrap, broker_pid=b.pid, topic=t, acks=1,
                                   seconds=max(self.produce_s, 4.0) if rate_mb_s else self.produce_s,
                                   compression=codec, batch_size=64 * 1024, text=True, linger_ms=100,
                                   rate_mb_s=rate_mb_s))
            finally:
                self.delete(b, t)
        return run

    def _partitions(self, n):
        def run(b, state):
            t = topic("parts%d" % n)
            try:
                create_s = call("create_partitions_topic", bootstrap=b.bootstrap, topic=t, partitions=n)
                r = per_gb(call("partitions_produce", bootstrap=b.bootstrap, broker_pid=b.pid, topic=t,
                                partitions=n, seconds=self.part_s))
                r["create_topic_s"] = create_s
                return r
            finally:
                self.delete(b, t)
        return run

    def idle(self, b, state):
        return call("idle_connections", bootstrap=b.bootstrap, broker_pid=b.pid, count=1000)

    @staticmethod
    def delete(b, t):
        try:
            from bench.workloads import delete_topic

            delete_topic(b.bootstrap, t)
        except Exception:
            pass


#: Issue 23 item 3: 100 B records read back (the topic of "produce 100 B acks=1" of the same round).
CONSUME_SMALL = "consume 100 B"
#: The same two with librdkafka's C benchmark client (the Python client limits the rows above).
PRODUCE_SMALL_C = "produce 100 B acks=1, librdkafka C client"
CONSUME_SMALL_C = "consume 100 B, librdkafka C client"
#: read-back row -> the row whose topic it reads
READS_BACK = {CONSUME_SMALL: "produce 100 B acks=1", CONSUME_SMALL_C: PRODUCE_SMALL_C}

#: Issue 23 item 5: compressed produce against the same workload uncompressed (compressible 1 KiB
#: values in 64 KiB batches, acks=1, linger.ms 100 so that every codec's batches are full); CPU per
#: GB counts the uncompressed value bytes.
COMPRESSED_CODECS = ("none", "lz4", "zstd")
COMPRESSED_ROW = "produce 1 KiB text, 64 KiB batches, compression %s"
#: The same paced to one rate for every codec: librdkafka compresses zstd at a fraction of the
#: uncompressed rate, and the broker's CPU per request grows as the request rate falls (each
#: request wakes it alone), which the unpaced rows count as the codec's cost. Run with
#: ``--only "batches at"`` (not in the default plan).
PACED_MB_S = 8
PACED_ROW = "produce 1 KiB text, 64 KiB batches at %d MB/s, compression %%s" % PACED_MB_S

# metric name -> (label, unit, higher is better)
HEADLINE = {
    "mb_s": ("MB/s", True),
    "msgs_s": ("msgs/s", True),
    "requests_s": ("requests/s", True),
    "p50_ms": ("p50 ms", False),
    "p99_ms": ("p99 ms", False),
    "max_ms": ("max ms", False),
    "client_cpu_s_per_gb": ("client CPU s/GB", False),
    "broker_cpu_s_per_gb": ("broker CPU s/GB", False),
    "rss_before_mb": ("RSS before MB", False),
    "rss_delta_mb": ("RSS +1000 conns MB", False),
    "create_topic_s": ("create topic s", False),
    "compression_ratio": ("compression ratio (64 KiB sample)", True),
    "thread_busy_share": ("client Python thread on or waiting for a CPU / window", False),
    "rdk_busy_share": ("client librdkafka broker thread on or waiting for a CPU / window", False),
}
#: shown only for the rows of METRICS_OF that list them
LISTED_ONLY = {"thread_busy_share", "rdk_busy_share"}
METRICS_OF = {
    "produce 100 B acks=1": ["msgs_s", "mb_s", "client_cpu_s_per_gb", "broker_cpu_s_per_gb", "thread_busy_share"],
    CONSUME_SMALL: ["mb_s", "client_cpu_s_per_gb", "broker_cpu_s_per_gb", "thread_busy_share"],
    PRODUCE_SMALL_C: ["msgs_s", "mb_s", "client_cpu_s_per_gb", "broker_cpu_s_per_gb"],
    CONSUME_SMALL_C: ["msgs_s", "mb_s", "client_cpu_s_per_gb", "broker_cpu_s_per_gb"],
}
for _codec in COMPRESSED_CODECS:
    METRICS_OF[COMPRESSED_ROW % _codec] = ["mb_s", "client_cpu_s_per_gb", "broker_cpu_s_per_gb",
                                           "rdk_busy_share"] + (
        ["compression_ratio"] if _codec != "none" else [])
    METRICS_OF[PACED_ROW % _codec] = ["mb_s", "broker_cpu_s_per_gb"]


def summarize(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def fmt(x):
    if x is None:
        return "-"
    if abs(x) >= 1000:
        return "%.0f" % x
    if abs(x) >= 10:
        return "%.1f" % x
    return "%.2f" % x


def report(results, machine_rounds, idle_rss, out=sys.stdout, other="tansu"):
    """The table of medians; ``other`` names the second broker (Tansu, or a baseline kafkatw tree)."""
    label = "Tansu" if other == "tansu" else other
    lines = ["| workload | metric | kafkatw median (min-max) | %s median (min-max) | kafkatw/%s |" % (label, label),
             "|---|---|---|---|---|"]
    summary = {}
    for wl, per_broker in results.items():
        keys = METRICS_OF.get(wl)
        if keys is None:
            keys = [k for k in HEADLINE if k not in LISTED_ONLY
                    and any(k in r for rs in per_broker.values() for r in rs if "error" not in r)]
        for k in keys:
            cells = []
            meds = {}
            for name in ("kafkatw", other):
                rs = per_broker.get(name, [])
                s = summarize([r.get(k) for r in rs if "error" not in r])
                summary.setdefault(wl, {}).setdefault(name, {})[k] = s
                errs = [r["error"] for r in rs if "error" in r]
                if s is None:
                    cells.append("failed: %s" % (errs[0][:60] if errs else "-"))
                else:
                    meds[name] = s["median"]
                    cells.append("%s (%s-%s)" % (fmt(s["median"]), fmt(s["min"]), fmt(s["max"])))
            ratio = (meds["kafkatw"] / meds[other]) if len(meds) == 2 and meds[other] else None
            lines.append("| %s | %s | %s | %s | %s |" % (wl, HEADLINE[k][0], cells[0], cells[1],
                                                        "%.2fx" % ratio if ratio is not None else "-"))
    lines.append("")
    lines.append("| machine limit | median (min-max) |")
    lines.append("|---|---|")
    for key, label in (("append", "raw append, os.write 1 MiB chunks, MB/s"),
                       ("sendfile", "sendfile loopback -> recv_into, MB/s")):
        s = summarize([m[key]["mb_s"] for m in machine_rounds if key in m])
        summary.setdefault("machine", {})[key] = s
        if s:
            lines.append("| %s | %s (%s-%s) |" % (label, fmt(s["median"]), fmt(s["min"]), fmt(s["max"])))
    s = summarize([m["start_1000"]["s"] for m in machine_rounds if "start_1000" in m])
    summary.setdefault("machine", {})["start_1000"] = s
    if s:
        lines.append("| kafkatw start to first answer, 1,000 partitions on disk, s | %s (%s-%s) |"
                     % (fmt(s["median"]), fmt(s["min"]), fmt(s["max"])))
    lines.append("")
    lines.append("Idle RSS at start: " + ", ".join("%s %.1f MB" % (k, v / 1e6) for k, v in idle_rss.items()))
    k = summary.get("produce 1 KiB acks=1", {}).get("kafkatw", {}).get("mb_s")
    a = summary.get("machine", {}).get("append")
    s = summary.get("machine", {}).get("sendfile")
    c = summary.get("consume 1 KiB", {}).get("kafkatw", {}).get("mb_s")
    if k and a:
        lines.append("kafkatw produce acks=1 / raw append: %.0f%%" % (100 * k["median"] / a["median"]))
    if c and s:
        lines.append("kafkatw consume / sendfile ceiling: %.0f%%" % (100 * c["median"] / s["median"]))
    for name in ("kafkatw", other):
        for row, label in ((COMPRESSED_ROW, ""), (PACED_ROW, " at %d MB/s" % PACED_MB_S)):
            cpu = {codec: summary.get(row % codec, {}).get(name, {}).get("broker_cpu_s_per_gb")
                   for codec in COMPRESSED_CODECS}
            if cpu["none"] and any(cpu[c] for c in COMPRESSED_CODECS[1:]):
                lines.append("%s broker CPU per GB, compressed / uncompressed (64 KiB batches%s): %s" % (
                    name, label, ", ".join("%s %.2fx" % (c, cpu[c]["median"] / cpu["none"]["median"])
                                           for c in COMPRESSED_CODECS[1:] if cpu[c])))
    text = "\n".join(lines)
    out.write(text + "\n")
    return text, summary


def run(quick=False, rounds=3, only=None, json_path=None, baseline=None):
    """``baseline``: a kafkatw tree to run as the second broker instead of Tansu (A/B of two
    commits in one run, interleaved)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    plan = Plan(quick)
    candidates = plan.workloads() + (plan.diagnostics() if only else [])
    workloads = [(n, f) for n, f in candidates if not only or any(o in n for o in only)]
    names = [n for n, _ in workloads]
    if any(n.startswith("consume 1 KiB") for n in names) and "produce 1 KiB acks=1" not in names:
        workloads.insert(0, ("produce 1 KiB acks=1", plan.produce_acks1))
    plan.readers = {n for n in names if n in READS_BACK}
    for reader in plan.readers:  # a read-back row brings the row that produces its topic
        writer = READS_BACK[reader]
        if writer not in [n for n, _ in workloads]:
            at = [n for n, _ in workloads].index(reader)
            workloads.insert(at, (writer, dict(plan.workloads())[writer]))
    # the machine's append and sendfile ceilings (1 GiB each) frame the 1 KiB produce and consume rows
    ceilings = any(n == "produce 1 KiB acks=1" or n.startswith("consume 1 KiB") for n, _ in workloads)
    kt = Kafkatw().start()
    ta = (Kafkatw(tree=baseline) if baseline else Tansu()).start()
    brokers = [kt, ta]
    idle_rss = {b.name: rss_bytes(b.pid) for b in brokers}
    results = {n: {b.name: [] for b in brokers} for n, _ in workloads}
    machine_rounds = []
    state = {b.name: {} for b in brokers}
    t_start = time.monotonic()
    starter = None
    try:
        starter = KafkatwStart(1000) if not only or any("start" in o for o in only) else None
    except Exception as e:
        sys.stderr.write("start-with-partitions measurement unavailable: %s\n" % e)
    try:
        for rnd in range(rounds):
            if isinstance(ta, Tansu) and rss_bytes(ta.pid) > 3 * GB:  # Tansu keeps records in memory
                ta.stop()
                ta.start()
            for name, fn in workloads:
                for b in brokers:
                    t0 = time.monotonic()
                    try:
                        r = fn(b, state[b.name])
                    except Exception as e:
                        r = {"error": str(e)}
                    results[name][b.name].append(r)
                    sys.stderr.write("round %d %-40s %-8s %5.1fs %s\n" % (
                        rnd + 1, name, b.name, time.monotonic() - t0,
                        json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()})))
            m = {}
            folder = kt.work
            try:
                if not ceilings:
                    raise RuntimeError("not measured: no workload selected compares with them")
                size = max(1 << 30, (state["kafkatw"].get("produced_bytes") or 0) // (1 << 20) * (1 << 20))
                if quick:
                    size = 1 << 30
                m["append"] = machine.append_rate(folder, size)
                m["sendfile"] = machine.sendfile_rate(folder, (512 if quick else 1024) << 20)
            except Exception as e:
                m["error"] = str(e)
            if starter is not None:
                try:
                    m["start_1000"] = {"s": statistics.median(starter.measure() for _ in range(3))}
                except Exception as e:
                    m["start_error"] = str(e)
            machine_rounds.append(m)
            sys.stderr.write("round %d machine %s\n" % (rnd + 1, json.dumps(m)))
    finally:
        for b in brokers:
            b.stop()
        if starter is not None:
            starter.close()
    sys.stderr.write("total %.0f s\n" % (time.monotonic() - t_start))
    text, summary = report(results, machine_rounds, idle_rss, other=ta.name)
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"results": results, "machine": machine_rounds, "idle_rss": idle_rss,
                       "summary": summary, "quick": quick, "rounds": rounds}, f, indent=1)
    return summary
