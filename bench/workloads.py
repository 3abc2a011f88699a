"""The client side of each benchmark, run in its own process so its CPU is its own:
``python -m bench.workloads NAME '{json args}'`` prints one JSON object of results.

Every timed window records the client's and the broker's CPU seconds (``/proc/<pid>/stat``)
at its start and end. Topic creation and verification stay outside the window.
"""

import gc
import json
import os
import resource
import socket
import struct
import sys
import time

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.procstat import cpu_seconds, rss_bytes, thread_schedstat, threads_schedstat

KIB = 1024
MIB = 1024 * 1024


def _children_cpu():
    """CPU seconds of the child processes this one has waited for."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class Window:
    """Wall time and CPU seconds of this process and the broker over a timed window, and of
    this process's Python thread its time on a CPU and waiting for one (``thread_busy_s``, the
    sum, near ``elapsed_s``: the client's Python thread was the limit, not the broker).

    With ``rdkafka``, the same of librdkafka's busiest broker thread (``rdk_busy_share``), the
    one that compresses a producer's batches and writes them: near 1, it was never blocked on
    the broker's answers (a CPU share on a loaded machine looks like waiting otherwise).

    With ``children``, the client is a child process this one waits for inside the window:
    its CPU (``RUSAGE_CHILDREN``) is the client's."""

    def __init__(self, broker_pid, rdkafka=False, children=False):
        self.broker_pid = broker_pid
        self.rdkafka = rdkafka
        self.children = children
        self.r0 = self.rdk = None

    def __enter__(self):
        self.c0 = _children_cpu() if self.children else cpu_seconds()
        self.b0 = cpu_seconds(self.broker_pid)
        self.s0 = thread_schedstat()
        if self.rdkafka:
            self.r0 = threads_schedstat("rdk:broker")
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.elapsed = time.perf_counter() - self.t0
        self.client_cpu = (_children_cpu() if self.children else cpu_seconds()) - self.c0
        self.broker_cpu = cpu_seconds(self.broker_pid) - self.b0
        s1 = thread_schedstat()
        self.thread_cpu, self.thread_wait = s1[0] - self.s0[0], s1[1] - self.s0[1]
        if self.rdkafka:
            deltas = [(run - self.r0.get(tid, (0.0, 0.0))[0], wait - self.r0.get(tid, (0.0, 0.0))[1])
                      for tid, (run, wait) in threads_schedstat("rdk:broker").items()]
            self.rdk = max(deltas) if deltas else None

    def result(self, **values):
        values.update(elapsed_s=self.elapsed, client_cpu_s=self.client_cpu,
                      broker_cpu_s=self.broker_cpu, thread_cpu_s=self.thread_cpu,
                      thread_wait_s=self.thread_wait, thread_busy_s=self.thread_cpu + self.thread_wait,
                      thread_busy_share=(self.thread_cpu + self.thread_wait) / self.elapsed)
        if self.rdk is not None:
            values.update(rdk_cpu_s=self.rdk[0], rdk_wait_s=self.rdk[1],
                          rdk_busy_share=(self.rdk[0] + self.rdk[1]) / self.elapsed)
        return values


def create_topic(bootstrap, topic, partitions=1, timeout=60.0):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=timeout)
    fs[topic].result(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=5)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.05)
    raise RuntimeError("topic %s not ready" % topic)


def delete_topic(bootstrap, topic):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
    except Exception as e:  # Tansu's memory engine may not delete; the run goes on
        return str(e)
    return None


def end_offsets(bootstrap, topic, partitions):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-wm", "enable.auto.commit": False})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)]
    finally:
        c.close()


def _producer(bootstrap, **extra):
    conf = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "batch.size": MIB,
        "message.max.bytes": 2 * MIB,
        "queue.buffering.max.kbytes": 1024 * 1024,
        "queue.buffering.max.messages": 2000000,
        "compression.type": "none",
        "enable.idempotence": False,
    }
    conf.update(extra)
    return Producer(conf)


TEXT_POOL = 1024  # distinct compressible values cycled by a produce with ``text=True``


def text_values(size, count=TEXT_POOL, seed=1):
    """``count`` distinct ``size``-byte values of words drawn from a 256-word vocabulary of
    random hex: compressible like log lines or JSON (lz4 about 3:1, zstd about 4.5:1), but
    no two values alike, so a batch compresses as its records do, not as one repeated value."""
    import random

    rnd = random.Random(seed)
    words = [rnd.randbytes(rnd.randint(2, 8)).hex() for _ in range(256)]
    values = []
    for _ in range(count):
        out = []
        n = 0
        while n < size:
            w = rnd.choice(words)
            out.append(w)
            n += len(w) + 1
        values.append(" ".join(out).encode()[:size])
    return values


def compression_ratio(values, codec, batch_bytes):
    """Uncompressed / compressed size of the first ``batch_bytes`` of ``values`` under ``codec``
    (kafkatw's codecs, as Kafka's clients write them; the client's own batches differ by a few
    record headers)."""
    from kafkatw.protocol import compression

    sample = b"".join(values)[:batch_bytes]
    return len(sample) / len(compression.compress(compression.CODEC_IDS[codec], sample))


def produce(bootstrap, broker_pid, topic, acks=1, size=1024, seconds=5.0, max_bytes=3 << 30,
            partitions=1, create=True, compression="none", batch_size=MIB, text=False, linger_ms=5,
            rate_mb_s=None):
    """As many ``size``-byte values as the client sends in ``seconds`` (or ``max_bytes``):
    one random value repeated, or with ``text`` a pool of compressible ones (:func:`text_values`),
    sent with ``compression`` in batches of ``batch_size`` (``linger_ms`` long enough to fill them:
    a client slowed by compressing otherwise sends them part full, more requests per GB);
    ``rate_mb_s`` paces the values sent (so codecs whose clients compress at different speeds
    reach the broker at one request rate). ``bytes`` counts uncompressed values."""
    if create:
        create_topic(bootstrap, topic, partitions)
    failed = [0]

    def on_error(err, msg):
        failed[0] += 1

    p = _producer(bootstrap, acks=acks, **{"delivery.report.only.error": True, "on_delivery": on_error,
                                           "compression.type": compression, "batch.size": batch_size,
                                           "linger.ms": linger_ms})
    values = text_values(size) if text else [os.urandom(size)]
    mask = len(values) - 1  # a power of two
    max_n = max_bytes // size
    sent = 0
    pp = p.produce
    poll = p.poll
    chunk = 64 if rate_mb_s else 1000
    with Window(broker_pid, rdkafka=True) as w:
        start = time.perf_counter()
        deadline = start + seconds
        while sent < max_n:
            for _ in range(chunk):
                try:
                    pp(topic, values[sent & mask])
                except BufferError:
                    poll(0.001)
                    continue
                sent += 1
            poll(0)
            now = time.perf_counter()
            if now >= deadline:
                break
            if rate_mb_s:  # (poll returns early when it serves an event: wait out the rest)
                due = start + sent * size / (rate_mb_s * 1e6)
                while now < due:
                    poll(due - now)
                    now = time.perf_counter()
        left = p.flush(120)
    ends = end_offsets(bootstrap, topic, partitions)
    if left or failed[0] or sum(ends) != sent:
        # counted as what the log holds; the discrepancy is reported, not hidden
        sys.stderr.write("produced %d, %d left in queue, %d failed deliveries, log end offsets sum %d\n"
                         % (sent, left, failed[0], sum(ends)))
    stored = min(sent, sum(ends))
    nbytes = stored * size
    extra = {"compression_ratio": compression_ratio(values, compression, batch_size)} if text else {}
    return w.result(messages=stored, bytes=nbytes, mb_s=nbytes / w.elapsed / 1e6,
                    msgs_s=stored / w.elapsed, sent=sent, failed=failed[0], log_end=sum(ends), **extra)


def consume(bootstrap, broker_pid, topic, expected, size=1024, timeout=120.0, isolation="read_committed"):
    """Read ``expected`` records of partition 0 from offset 0 with assign(), at ``isolation``
    (librdkafka's default, read_committed, or read_uncommitted: on data without transactions
    the two should cost the same, issue 18).

    16 MiB fetches, librdkafka's own prefetch queue limits and no cyclic GC in the window: with 64 MiB fetches and a
    1 GiB queue (this workload's first settings) librdkafka mmaps a fresh buffer for every
    response and runs far ahead of the application, page-faulting ~3x more (690k vs 200k
    minor faults per 2 GB) for the same throughput.
    """
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "bench-consume",
        "enable.auto.commit": False,
        "fetch.max.bytes": 16 * MIB,
        "max.partition.fetch.bytes": 16 * MIB,
        "receive.message.max.bytes": 32 * MIB,
        "fetch.queue.backoff.ms": 10,
        "isolation.level": isolation,
    })
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    cons = c.consume
    # confluent-kafka's Message objects are tracked by the cyclic GC: with 100,000 per
    # consume() call the client's Python thread spent ~30% in collections that free nothing
    # (py-spy --native: Message_traverse, gc_collect_main); they die by reference count.
    gc.disable()
    with Window(broker_pid) as w:
        deadline = time.perf_counter() + timeout
        while got < expected and time.perf_counter() < deadline:
            msgs = cons(100000, 1.0)
            if msgs:
                last = msgs[-1]
                if last.error() is not None:
                    raise RuntimeError(str(last.error()))
                got = last.offset() + 1
    gc.enable()
    c.close()
    if got < expected:
        raise RuntimeError("consumed %d of %d" % (got, expected))
    nbytes = got * size
    return w.result(messages=got, bytes=nbytes, mb_s=nbytes / w.elapsed / 1e6)


def fetch_raw(bootstrap, broker_pid, topic, expected, size=1024, max_bytes=16 * MIB):
    """Read ``expected`` records of partition 0 from offset 0 with back-to-back Fetch v11
    requests (``max_bytes`` each, as the consumer above) that only walk batch headers to find
    the next offset: what a broker delivers to a client that does not parse records. Waits up
    to 500 ms per fetch: Tansu answers ``max_wait_ms=0`` fetches empty."""
    from bench.zero_copy import raw_fetch

    host, port = bootstrap.rsplit(":", 1)
    with Window(broker_pid) as w:
        raw_fetch(host, int(port), expected, topic=topic, max_bytes=max_bytes, max_wait_ms=500)
    nbytes = expected * size
    return w.result(messages=expected, bytes=nbytes, mb_s=nbytes / w.elapsed / 1e6)


def produce_c(bootstrap, broker_pid, topic, size=100, count=6000000):
    """``count`` values of ``size`` bytes sent by librdkafka's C benchmark client
    (:mod:`bench.rdkafka_c`), acks=1 and the settings of :func:`produce`; the client's CPU is
    that child process's. The rate is the program's own (first produce to last delivery report);
    the CPU window also holds its start and metadata exchange (a few ms)."""
    from bench import rdkafka_c

    rdkafka_c.binary()  # built outside the window
    create_topic(bootstrap, topic)
    with Window(broker_pid, children=True) as w:
        r = rdkafka_c.produce(bootstrap, topic, count, size)
    if r["failed"] or r["delivered"] != count:
        raise RuntimeError("sent %d: %d delivered, %d failed" % (count, r["delivered"], r["failed"]))
    # kept, not checked: Tansu lists a lower end offset than it has (3,000,000 delivered and
    # read back whole by consume_c, 2,994,089 listed); consume_c reads all ``count`` or fails
    (end,) = end_offsets(bootstrap, topic, 1)
    nbytes = count * size
    return w.result(messages=count, bytes=nbytes, mb_s=nbytes / r["ms"] / 1e3, msgs_s=count / r["ms"] * 1e3,
                    log_end=end)


def consume_c(bootstrap, broker_pid, topic, expected, size=100):
    """``expected`` records of partition 0 read by librdkafka's C benchmark client (the simple
    consumer's callback loop, 16 MiB fetches as :func:`consume`)."""
    from bench import rdkafka_c

    rdkafka_c.binary()
    with Window(broker_pid, children=True) as w:
        r = rdkafka_c.consume(bootstrap, topic, expected, timeout=120)
    if r["messages"] != expected:
        raise RuntimeError("consumed %d of %d" % (r["messages"], expected))
    nbytes = expected * size
    return w.result(messages=expected, bytes=nbytes, mb_s=nbytes / r["ms"] / 1e3,
                    msgs_s=expected / r["ms"] * 1e3)


def _percentiles(samples_ms):
    s = sorted(samples_ms)
    n = len(s)
    return {"p50_ms": s[n // 2], "p99_ms": s[min(n - 1, int(n * 0.99))], "max_ms": s[-1]}


def sync_latency(bootstrap, broker_pid, topic, count=2000, size=100):
    """``count`` single produces, each flushed before the next."""
    create_topic(bootstrap, topic)
    p = _producer(bootstrap, acks=1, **{"linger.ms": 0})
    value = os.urandom(size)
    for _ in range(20):  # connection and metadata warm-up
        p.produce(topic, value)
        p.flush(10)
    samples = []
    with Window(broker_pid) as w:
        for _ in range(count):
            t0 = time.perf_counter_ns()
            p.produce(topic, value)
            p.flush(10)
            samples.append((time.perf_counter_ns() - t0) / 1e6)
    return w.result(**_percentiles(samples))


def e2e_latency(bootstrap, broker_pid, topic, count=500, interval_s=0.010, keep_samples=False):
    """A consumer parked at the log end; ``count`` records ``interval_s`` apart; receive - send.

    The producer runs in its own process (``e2e_producer``) so it never holds this process's
    GIL when a record arrives; both stamp ``CLOCK_MONOTONIC``, which is system-wide.
    ``keep_samples``: the result also holds each sample's ``[sent_ns, received_ns]`` and the
    producer's pid (``bench.e2e_sched`` lines them up with the scheduler's events).
    """
    import subprocess

    create_topic(bootstrap, topic)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-e2e", "enable.auto.commit": False,
                  "fetch.queue.backoff.ms": 10, "fetch.wait.max.ms": 500})
    c.assign([TopicPartition(topic, 0, OFFSET_END)])
    # warm up: a record that the consumer must see (its fetch position is set by then)
    p = _producer(bootstrap, acks=1, **{"linger.ms": 0})
    deadline = time.monotonic() + 30
    seen = False
    while not seen and time.monotonic() < deadline:
        p.produce(topic, struct.pack(">q", 0))
        p.flush(10)
        m = c.poll(1.0)
        seen = m is not None and m.error() is None
    if not seen:
        raise RuntimeError("consumer never received the warm-up record")
    del p
    while c.poll(0.2) is not None:
        pass

    args = json.dumps({"bootstrap": bootstrap, "topic": topic, "count": count, "interval_s": interval_s})
    samples = []
    with Window(broker_pid) as w:
        proc = subprocess.Popen([sys.executable, "-m", "bench.workloads", "e2e_producer", args],
                                stdout=subprocess.PIPE)
        end = time.monotonic() + count * interval_s + 30
        while len(samples) < count and time.monotonic() < end:
            m = c.poll(0.5)
            if m is None or m.error() is not None:
                continue
            now = time.monotonic_ns()
            sent = struct.unpack(">q", m.value())[0]
            if sent:
                samples.append((sent, now))
        proc.communicate(timeout=60)
    c.close()
    if len(samples) < count:
        raise RuntimeError("received %d of %d" % (len(samples), count))
    r = w.result(**_percentiles([(now - sent) / 1e6 for sent, now in samples]))
    if keep_samples:
        r.update(samples=samples, producer_pid=proc.pid)
    return r


def e2e_producer(bootstrap, topic, count, interval_s):
    """The sending side of ``e2e_latency``: ``count`` records carrying ``monotonic_ns``."""
    p = _producer(bootstrap, acks=1, **{"linger.ms": 0})
    p.produce(topic, struct.pack(">q", 0))  # connection and metadata warm-up: not a sample
    p.flush(10)
    time.sleep(interval_s)
    for _ in range(count):
        p.produce(topic, struct.pack(">q", time.monotonic_ns()))
        p.poll(0)
        time.sleep(interval_s)
    p.flush(10)
    return {"sent": count}


def request_rate_worker(bootstrap, topic, seconds, size=100, window=64):
    """One of the request-rate processes: one 100 B message per Produce request."""
    p = _producer(bootstrap, acks=1, **{"linger.ms": 0, "batch.num.messages": 1})
    value = os.urandom(size)
    done = [0]

    def cb(err, msg):
        if err is None:
            done[0] += 1

    p.produce(topic, value, on_delivery=cb)
    p.flush(10)
    done[0] = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while time.perf_counter() < deadline:
        if len(p) >= window:  # a bounded window in flight, as a real application would keep
            p.poll(0.001)
            continue
        p.produce(topic, value, on_delivery=cb)
        p.poll(0)
    n_at_deadline = done[0]
    elapsed = time.perf_counter() - t0
    p.purge(in_queue=True, in_flight=False)
    p.flush(30)
    return {"acked": n_at_deadline, "elapsed_s": elapsed}


def request_rate(bootstrap, broker_pid, topic, processes=8, seconds=4.0):
    import subprocess

    create_topic(bootstrap, topic)
    args = json.dumps({"bootstrap": bootstrap, "topic": topic, "seconds": seconds})
    with Window(broker_pid) as w:
        procs = [subprocess.Popen([sys.executable, "-m", "bench.workloads", "request_rate_worker", args],
                                  stdout=subprocess.PIPE) for _ in range(processes)]
        outs = [json.loads(pr.communicate()[0].decode().strip().splitlines()[-1]) for pr in procs]
    total = sum(o["acked"] for o in outs)
    elapsed = max(o["elapsed_s"] for o in outs)
    return w.result(requests=total, requests_s=total / elapsed)


def partitions_produce(bootstrap, broker_pid, topic, partitions, seconds=3.0, size=1024):
    """Produce 1 KiB values (acks=1) spread over ``partitions`` partitions."""
    r = produce(bootstrap, broker_pid, topic, acks=1, size=size, seconds=seconds,
                partitions=partitions, create=False)
    return r


def create_partitions_topic(bootstrap, topic, partitions):
    t0 = time.perf_counter()
    create_topic(bootstrap, topic, partitions, timeout=120)
    return time.perf_counter() - t0


def idle_connections(bootstrap, broker_pid, count=1000):
    """RSS of the broker before and after ``count`` connections that each made one request."""
    host, port = bootstrap.rsplit(":", 1)
    port = int(port)
    rss0 = rss_bytes(broker_pid)
    body = struct.pack(">hhih", 18, 0, 1, 5) + b"bench"
    frame = struct.pack(">i", len(body)) + body
    socks = []
    try:
        for _ in range(count):
            s = socket.create_connection((host, port), timeout=10)
            s.sendall(frame)
            socks.append(s)
        for s in socks:  # every connection answered: the broker has set it up completely
            head = s.recv(4)
            (n,) = struct.unpack(">i", head)
            while n > 0:
                n -= len(s.recv(n))
        time.sleep(0.5)
        rss1 = rss_bytes(broker_pid)
    finally:
        for s in socks:
            s.close()
    return {"rss_before_mb": rss0 / 1e6, "rss_after_mb": rss1 / 1e6, "rss_delta_mb": (rss1 - rss0) / 1e6}


WORKLOADS = {f.__name__: f for f in (produce, consume, fetch_raw, produce_c, consume_c, sync_latency, e2e_latency, e2e_producer, request_rate,
                                     request_rate_worker, partitions_produce, create_partitions_topic,
                                     idle_connections)}


def main(argv):
    name, args = argv[1], json.loads(argv[2])
    result = WORKLOADS[name](**args)
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main(sys.argv)
