"""Broker CPU per GB over TLS: produce and consume through an SSL listener, with the broker's
CPU split into its reactor thread and the rest (worker threads). ``python -m bench.tls [--mb 200]``.

Produce: a confluent-kafka producer over SSL (64 KiB values in 1 MiB batches, acks=1). Consume:
the raw SSL Fetch loop of ``bench.zero_copy`` and a confluent-kafka consumer over SSL. A
PLAINTEXT producer and raw Fetch loop run beside them (the zero-copy path). Prints a Markdown table;
asserts nothing.
"""

import argparse
import os
import platform
import ssl
import statistics
import sys
import time

from bench import zero_copy
from bench.procstat import cpu_seconds, threads_cpu, user_system_seconds

MIB = 1024 * 1024


def timed(pid, fn, *args):
    """(bytes, seconds, process CPU, reactor-thread CPU, process system CPU) of ``fn(*args)``;
    the reactor thread is the main thread (tid == pid). The system share holds the kernel's
    copies, and for produce the page cache's growth (on a VM, the host's first touch of it)."""
    t0 = threads_cpu(pid)
    c0 = cpu_seconds(pid)
    s0 = user_system_seconds(pid)[1]
    start = time.perf_counter()
    nbytes = fn(*args)
    elapsed = time.perf_counter() - start
    cpu = cpu_seconds(pid) - c0
    system = user_system_seconds(pid)[1] - s0
    main = threads_cpu(pid).get(pid, 0.0) - t0.get(pid, 0.0)
    return nbytes, elapsed, cpu, main, system


def ssl_produce(conf, total, value_size=64 * 1024):
    import confluent_kafka

    producer = confluent_kafka.Producer(dict({
        "linger.ms": 20, "batch.size": MIB, "compression.type": "none", "acks": 1,
        "queue.buffering.max.kbytes": 256 * 1024, "enable.idempotence": False}, **conf))
    value = os.urandom(value_size)
    count = total // value_size
    for _ in range(count):
        while True:
            try:
                producer.produce(zero_copy.TOPIC, value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise RuntimeError("produce did not finish")
    return count * value_size


def main(argv=None):
    from kafkatw.testing import KafkaBroker

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="data per round in MB (MiB)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="", help="run only the workloads whose name holds this")
    args = parser.parse_args(argv)
    total = args.mb * MIB
    rows = []
    with KafkaBroker(listeners=("PLAINTEXT", "SSL"), overrides={"message.max.bytes": 2 * MIB}) as b:
        pid = b.process.pid
        ssl_conf = {"bootstrap.servers": b.ssl_bootstrap_servers, "security.protocol": "SSL",
                    "ssl.ca.location": b.ssl_ca_path}
        ctx = ssl.create_default_context(cafile=b.ssl_ca_path)
        host, ssl_port = b.ssl_bootstrap_servers.rsplit(":", 1)
        produced = 0
        workloads = [
            ("confluent-kafka producer, SSL", lambda: ssl_produce(ssl_conf, total)),
            ("confluent-kafka producer, PLAINTEXT",
             lambda: ssl_produce({"bootstrap.servers": b.bootstrap_servers}, total)),
            ("raw Fetch loop, SSL", lambda: zero_copy.raw_fetch(host, int(ssl_port), produced, ctx)),
            ("confluent-kafka consumer, SSL", lambda: zero_copy.confluent_read(ssl_conf, produced)),
            ("raw Fetch loop, PLAINTEXT", lambda: zero_copy.raw_fetch("127.0.0.1", b.port, produced)),
        ]
        workloads = [(name, fn) for name, fn in workloads if args.only in name]
        if not any("producer" in name for name, _ in workloads):
            # readers only: something to read, produced untimed
            produced = ssl_produce({"bootstrap.servers": b.bootstrap_servers}, total) // (64 * 1024)
        for _ in range(args.rounds):
            for name, fn in workloads:
                rows.append((name,) + timed(pid, fn))
                if "producer" in name:
                    produced += total // (64 * 1024)
    by_name = {}
    for name, nbytes, elapsed, cpu, main_cpu, system in rows:
        gb = nbytes / 1e9
        by_name.setdefault(name, []).append((nbytes / elapsed / 1e6, cpu / gb, main_cpu / gb,
                                             system / gb))
    print("| workload | MB/s (median) | broker CPU s/GB per round | median | reactor thread s/GB (median) "
          "| system s/GB (median) |")
    print("|---|---:|---|---:|---:|---:|")
    for name, results in by_name.items():
        print("| %s | %.0f | %s | %.2f | %.2f | %.2f |" % (
            name, statistics.median(r[0] for r in results),
            " / ".join("%.2f" % r[1] for r in results),
            statistics.median(r[1] for r in results),
            statistics.median(r[2] for r in results),
            statistics.median(r[3] for r in results)))
    print()
    print("Load average at the end: %s. Machine: %s, %d CPUs, Python %s." % (
        " ".join("%.1f" % x for x in os.getloadavg()), platform.machine(), os.cpu_count(),
        platform.python_version()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
