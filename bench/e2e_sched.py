"""Where the end-to-end latency samples spend their time, as the scheduler saw it:
``python -m bench.e2e_sched [--trials N] [--count N] [--tree TREE] [--tail-ms 2]`` (root, perf).

Runs ``bench.workloads.e2e_latency`` against a kafkatw broker under ``perf sched record -k mono
-a`` (CLOCK_MONOTONIC: the clock the samples are stamped with) and cuts each sample
[send, receive] at two wake-ups: a producer thread waking the broker (the Produce is in its
socket) and a broker thread waking a consumer thread (the Fetch answer is in the consumer's).
Each piece counts the threads of its own process only, split into

- on a CPU (``sched_stat_runtime``);
- stolen: running, or runnable behind a task, on a vCPU that did not run (the host ran
  something else: the guest's paravirt steal accounting leaves that time out of
  ``sched_stat_runtime``);
- runnable, not running (woken or preempted), by what held the CPU it then ran on: nothing
  (the idle vCPU waking up), the broker, the clients, other processes.

The broker's piece is what it owes a sample, unless the consumer's next Fetch reached it after
the Produce (counted: the broker then waited for the consumer); the other two are the
clients' and the machine's.
Prints Markdown tables; asserts nothing.
"""

import argparse
import bisect
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from bench.brokers import Kafkatw
from bench.workloads import delete_topic, e2e_latency

_EVENT = re.compile(r"^\s*(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:(\w+):\s+(.*)$")
_SWITCH = re.compile(r"prev_comm=.*? prev_pid=(\d+) .*?prev_state=(\S+) ==> next_comm=.*? next_pid=(\d+)")
_RUNTIME = re.compile(r"pid=(\d+) runtime=(\d+)")
_WAKING = re.compile(r"pid=(\d+) ")

PARTS = ("on a CPU", "stolen by the host", "waiting: idle vCPU wake-up", "waiting behind the broker",
         "waiting behind the clients", "waiting behind other processes")
STOLEN = -1  # Timeline.occupants' key for a vCPU's stolen time
#: the hand-offs that cut a sample, and whose threads each piece counts
SEGMENTS = (("producer: send to Produce in the broker's socket", ("producer",)),
            ("broker: to the Fetch answer in the consumer's socket", ("broker",)),
            ("consumer: to poll() returning the record", ("consumer",)))


def read_events(perf_data):
    """(time_ns, cpu, event, tid of the running task, fields) from ``perf script``; also
    {tid: tgid} of every task switched out."""
    out = subprocess.run(["perf", "script", "-i", perf_data, "-F", "pid,tid,cpu,time,event,trace"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True, text=True).stdout
    events, tgid = [], {}
    for line in out.splitlines():
        m = _EVENT.match(line)
        if m is None:
            continue
        pid, tid, cpu, t, name, rest = m.groups()
        events.append((int(float(t) * 1e9), int(cpu), name, int(tid), rest))
        if name == "sched_switch":
            tgid[int(tid)] = int(pid)  # the event fires in the task switched out
    return events, tgid


class Timeline:
    """Runs, steal, waits and wake-ups of every task, replayed from the events in time order."""

    def __init__(self, events):
        self.runs = []     # (t0, t1, cpu, tid (0: idle), share of t1 - t0 the task really ran)
        self.waits = []    # (t0, t1, tid, cpu it then ran on): runnable, not running
        self.wakings = []  # (t, waker tid, woken tid)
        cur, mark, pending = {}, {}, {}
        for t, cpu, name, running, rest in events:
            if name == "sched_stat_runtime":
                m = _RUNTIME.search(rest)
                tid, ran = int(m.group(1)), int(m.group(2))
                if cur.get(cpu) == tid and t > mark[cpu]:
                    wall = t - mark[cpu]
                    self.runs.append((mark[cpu], t, cpu, tid, min(1.0, ran / wall)))
                    mark[cpu] = t
            elif name == "sched_switch":
                m = _SWITCH.search(rest)
                prev, state, nxt = int(m.group(1)), m.group(2), int(m.group(3))
                if cur.get(cpu) == prev and t > mark[cpu]:
                    self.runs.append((mark[cpu], t, cpu, prev, 1.0))
                if prev and state.startswith("R"):
                    pending[prev] = t  # preempted: runnable from now on
                cur[cpu], mark[cpu] = nxt, t
                since = pending.pop(nxt, None)
                if since is not None and nxt:
                    self.waits.append((since, t, nxt, cpu))
            elif name == "sched_waking":
                tid = int(_WAKING.search(rest).group(1))
                pending.setdefault(tid, t)
                self.wakings.append((t, running, tid))
        self.runs.sort()
        self.waits.sort()
        self._run_t0 = [r[0] for r in self.runs]
        self._wait_t0 = [w[0] for w in self.waits]
        self._waking_t = [w[0] for w in self.wakings]
        self.longest = max([r[1] - r[0] for r in self.runs] + [w[1] - w[0] for w in self.waits] + [0])

    def _from(self, starts, t0):
        return bisect.bisect_left(starts, t0 - self.longest)

    def first_waking(self, t0, t1, role, waker, woken):
        """When in [t0, t1] a thread of ``waker`` first woke one of ``woken`` (roles), or None."""
        for t, by, tid in self.wakings[bisect.bisect_left(self._waking_t, t0):]:
            if t > t1:
                break
            if role(by) == waker and role(tid) == woken:
                return t
        return None

    def occupants(self, cpu, t0, t1):
        """{tid: ns} of what held ``cpu`` in [t0, t1] (tid 0: the vCPU was idle; STOLEN: the
        host did not run it, whichever task was current)."""
        got = {}
        for r0, r1, c, tid, ran in self.runs[self._from(self._run_t0, t0):]:
            if r0 > t1:
                break
            if c == cpu:
                o = min(r1, t1) - max(r0, t0)
                if o > 0:
                    got[tid] = got.get(tid, 0) + o * ran
                    got[STOLEN] = got.get(STOLEN, 0) + o * (1 - ran)
        return got

    def split(self, t0, t1, role, whose):
        """The parts (``PARTS``, ms) of [t0, t1] for the threads whose ``role(tid)`` is in ``whose``."""
        parts = dict.fromkeys(PARTS, 0.0)
        for r0, r1, cpu, tid, ran in self.runs[self._from(self._run_t0, t0):]:
            if r0 > t1:
                break
            o = min(r1, t1) - max(r0, t0)
            if o <= 0 or not tid or role(tid) not in whose:
                continue
            parts["on a CPU"] += o * ran / 1e6
            parts["stolen by the host"] += o * (1 - ran) / 1e6
        for w0, w1, tid, cpu in self.waits[self._from(self._wait_t0, t0):]:
            if w0 > t1:
                break
            a, b = max(w0, t0), min(w1, t1)
            if b <= a or role(tid) not in whose:
                continue
            held = self.occupants(cpu, a, b)
            total = sum(held.values()) or 1
            for other, ns in held.items():
                who = role(other)
                key = ("stolen by the host" if other == STOLEN else
                       "waiting: idle vCPU wake-up" if other == 0 else
                       "waiting behind the broker" if who == "broker" else
                       "waiting behind the clients" if who else "waiting behind other processes")
                parts[key] += (b - a) * ns / total / 1e6
        return parts

    def segments(self, sent, received, role):
        """``([(ms, parts)] of SEGMENTS, late)`` for one sample (``late``: the consumer's next
        Fetch reached the broker after the Produce), or None if a hand-off is not seen
        (the Produce reaching a broker that was not asleep wakes nobody: then the producer's
        piece is empty and the broker's counts both processes' threads)."""
        delivered = self.first_waking(sent, received, role, "broker", "consumer")
        if delivered is None:
            return None
        arrived = self.first_waking(sent, delivered, role, "producer", "broker")
        cuts = [(sent, arrived or sent, ("producer",)),
                (arrived or sent, delivered, ("broker",) if arrived else ("producer", "broker")),
                (delivered, received, ("consumer",))]
        # the consumer woke the broker in between: its next Fetch came after the Produce
        late = self.first_waking(arrived or sent, delivered, role, "consumer", "broker") is not None
        return [((b - a) / 1e6, self.split(a, b, role, whose)) for a, b, whose in cuts], late


def median(xs):
    return statistics.median(xs) if xs else 0.0


def report(samples, timeline, role, tail_ms, out=sys.stdout):
    """A Markdown table: the medians of the three pieces over all samples, and for the samples
    above ``tail_ms`` the sums of each piece's parts."""
    rows = []
    for sent, received in samples:
        got = timeline.segments(sent, received, role)
        if got is not None:
            rows.append(((received - sent) / 1e6, got[0], got[1]))
    tail = [r for r in rows if r[0] > tail_ms]
    out.write("%d of %d samples cut at both hand-offs; %d above %g ms, of which %d with the consumer's "
              "next Fetch reaching the broker after the Produce\n\n" % (
                  len(rows), len(samples), len(tail), tail_ms, sum(1 for r in tail if r[2])))
    out.write("| ms | " + " | ".join(name for name, _ in SEGMENTS) + " | share |\n")
    out.write("|---|" + "---:|" * (len(SEGMENTS) + 1) + "\n")
    out.write("| all samples: median of the piece | " + " | ".join(
        "%.3f" % median([r[1][i][0] for r in rows]) for i in range(len(SEGMENTS))) + " | |\n")
    whole = sum(r[0] for r in tail)
    sums = [sum(r[1][i][0] for r in tail) for i in range(len(SEGMENTS))]
    out.write("| > %g ms: sum of the piece | " % tail_ms + " | ".join("%.1f" % x for x in sums) + " | |\n")
    attributed = sum(sum(p.values()) for r in tail for _, p in r[1])
    for k in PARTS:
        xs = [sum(r[1][i][1][k] for r in tail) for i in range(len(SEGMENTS))]
        out.write("| - %s | " % k + " | ".join("%.1f" % x for x in xs) + " | %.0f%% |\n" % (100 * sum(xs) / (attributed or 1)))
    rest = [sums[i] - sum(sum(r[1][i][1].values()) for r in tail) for i in range(len(SEGMENTS))]
    out.write("| - the rest: asleep (a blocking call; the broker: a Fetch not there yet), or threads overlapping (< 0) | "
              + " | ".join("%.1f" % x for x in rest) + " | |\n")
    out.write("\n(samples above %g ms: %.1f ms in all, of which %.1f ms attributed)\n" % (tail_ms, whole, attributed))
    return rows


def trial(broker, count, workdir):
    perf_data = os.path.join(workdir, "sched-%s.data" % uuid.uuid4().hex[:6])
    perf = subprocess.Popen(["perf", "sched", "record", "-k", "mono", "-a", "-o", perf_data],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # perf's file appears once it runs; the topic and the warm-up record come before the
    # first sample all the same
    deadline = time.monotonic() + 10
    while not os.path.exists(perf_data) and time.monotonic() < deadline:
        time.sleep(0.05)
    topic = "e2e-" + uuid.uuid4().hex[:8]
    try:
        r = e2e_latency(broker.bootstrap, broker.pid, topic, count=count, keep_samples=True)
    finally:
        perf.send_signal(signal.SIGINT)
        perf.wait(60)
        delete_topic(broker.bootstrap, topic)
    events, tgid = read_events(perf_data)
    os.unlink(perf_data)
    procs = {broker.pid: "broker", os.getpid(): "consumer", r["producer_pid"]: "producer"}

    def role(tid):
        return procs.get(tgid.get(tid, tid))

    return r, Timeline(events), role


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--count", type=int, default=500)
    ap.add_argument("--tree", help="another kafkatw checkout to run as the broker (PYTHONPATH)")
    ap.add_argument("--tail-ms", type=float, default=2.0)
    a = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="e2e-sched-")
    broker = Kafkatw(tree=a.tree).start()
    samples = []
    try:
        for i in range(a.trials):
            r, timeline, role = trial(broker, a.count, workdir)
            sys.stdout.write("trial %d: p50 %.2f p99 %.2f max %.2f ms, load average %.2f\n" % (
                i + 1, r["p50_ms"], r["p99_ms"], r["max_ms"], os.getloadavg()[0]))
            samples.append((r["samples"], timeline, role))
    finally:
        broker.stop()
        os.rmdir(workdir)
    for i, (s, timeline, role) in enumerate(samples):
        sys.stdout.write("\ntrial %d\n" % (i + 1))
        report(s, timeline, role, a.tail_ms)


if __name__ == "__main__":
    main()
