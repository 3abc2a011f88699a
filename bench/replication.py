"""Replication cost: produce throughput with acks=all to RF 3 (min.insync.replicas 2) against
RF 1, on the same three brokers and ZooKeeper (``kafkatw.testing.KafkaCluster``), rounds
interleaved so both see the same machine. Issue 19 asks RF 3 for at least 50% of RF 1.

    .venv/bin/python -m bench.replication --messages 400000 --size 1024 --rounds 3
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

from bench.machine import page_cache_write_cost
from bench.procstat import cpu_seconds, threads_cpu_seconds, user_system_seconds
from kafkatw.testing import KafkaCluster


def produce(bootstrap, topic, messages, size, acks, idempotence=True, max_in_flight=None,
            sticky=False, threads_cpu=None):
    """Seconds to produce ``messages`` values of ``size`` bytes and have every one acknowledged.

    An idempotent librdkafka producer keeps one ProduceRequest in flight per partition (it
    counts messages, not requests, against its window of 5: librdkafka PR #4989), so with
    ``idempotence`` each partition moves one batch per round trip; without it requests queue
    up behind the one the broker is serving (one at a time per connection, as Kafka's muting).
    While that one request waits, librdkafka 2.16's idempotent producer busy-polls (poll()
    with a zero timeout, one broker thread at a time): CPU the brokers on this machine lose,
    more the longer acks=all waits. ``max_in_flight``: librdkafka's
    ``max.in.flight.requests.per.connection`` (its default if None).

    ``sticky``: librdkafka's sticky partitioner (its default), which sends every keyless value
    of a ``2 * linger.ms`` window to one partition picked at random: at this rate runs of tens
    of thousands of values, so the partitions' shares differ by chance and an RF 3 round lasts
    as long as its largest share takes to replicate, the other leaders idle meanwhile.
    Otherwise each value goes to a random partition (``sticky.partitioning.linger.ms=0``), the
    shares equal within a fraction of a percent. ``threads_cpu``: a list to which the CPU
    seconds of librdkafka's broker threads over the timed window are appended (where its busy
    wait runs)."""
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 50,
            "batch.size": 1000000, "enable.idempotence": idempotence and acks == "all",
            "queue.buffering.max.messages": 1000000, "compression.type": "none"}
    if max_in_flight is not None:
        conf["max.in.flight.requests.per.connection"] = max_in_flight
    if not sticky:
        conf["sticky.partitioning.linger.ms"] = 0
    producer = Producer(conf)
    value = b"x" * size
    errors = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(err)
    # connected, metadata known and the producer id given before the clock starts: the
    # figure is the replicated throughput, not the client's start-up (which is a larger share
    # of a faster, shorter RF 1 round)
    producer.produce(topic, value=value, on_delivery=delivered)
    if producer.flush(60):
        raise RuntimeError("the warm-up record was not acknowledged")
    broker_threads_before = threads_cpu_seconds("rdk:broker")
    start = time.monotonic()
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, value=value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    elapsed = time.monotonic() - start
    if threads_cpu is not None:  # before the producer (and its threads) goes
        threads_cpu.append(threads_cpu_seconds("rdk:broker") - broker_threads_before)
    if left or errors:
        raise RuntimeError("%d unacknowledged, %d failed (%s)" % (left, len(errors), errors[:1]))
    return elapsed


def pin(pid, cpus):
    """Every thread of ``pid`` (a JVM's and a broker's pool threads included) on ``cpus``."""
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass


def create(bootstrap, topic, partitions, rf, configs=None):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, rf, config=configs or {})]).values():
        f.result(60)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.replication", description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--no-idempotence", dest="idempotence", action="store_false",
                        help="acks=all without idempotence (librdkafka then pipelines requests)")
    parser.add_argument("--max-in-flight", type=int, default=None,
                        help="max.in.flight.requests.per.connection for both topics (with "
                             "--no-idempotence and 1: one request in flight per partition, as "
                             "the idempotent producer has, without its busy wait)")
    parser.add_argument("--split-cpus", action="store_true",
                        help="brokers and ZooKeeper on CPU 0, this producer on CPU 1: clients and "
                             "brokers on separate CPUs, as on separate machines, so the client's "
                             "busy wait does not take the brokers' CPU")
    parser.add_argument("--client-nice", type=int, default=0,
                        help="run this producer at this niceness above the brokers' (e.g. 19): its "
                             "busy wait then only takes CPU the brokers leave idle, as a client "
                             "on another machine would")
    parser.add_argument("--sticky", action="store_true",
                        help="librdkafka's sticky partitioner (its default; the bench's until "
                             "session 9), whose random 100 ms runs load the partitions unevenly, "
                             "instead of a random partition per value")
    args = parser.parse_args(argv)
    # what a broker's append costs the kernel here: each replica pays it for each byte
    write_cost = [page_cache_write_cost(tempfile.gettempdir())]
    with KafkaCluster(brokers=3, overrides={"kafkatw.request.log.enable": "false",
                                            "log.segment.bytes": 1 << 30}) as cluster:
        bootstrap = cluster.bootstrap_servers
        create(bootstrap, "rf1", args.partitions, 1)
        create(bootstrap, "rf3", args.partitions, 3, {"min.insync.replicas": "2"})
        time.sleep(2)  # leaders elected, followers fetching
        if args.split_cpus:
            for pid in [b.process.pid for b in cluster.brokers.values()] + [cluster.zookeeper.process.pid]:
                pin(pid, {0})
            os.sched_setaffinity(0, {1})  # librdkafka's threads start from this one
        if args.client_nice:
            os.nice(args.client_nice)  # this thread's, inherited by librdkafka's threads
        mb = args.messages * args.size / 1e6
        rates = {"rf1": [], "rf3": []}
        cpu = {"rf1": [], "rf3": []}  # broker CPU seconds (all three) per MB produced
        system_cpu = {"rf1": [], "rf3": []}  # of it, in the kernel (copies, page cache growth)
        # this process's CPU seconds per MB: the produce loop and librdkafka's threads (their
        # busy wait shares the machine's CPUs with the brokers)
        client_cpu = {"rf1": [], "rf3": []}
        spin_cpu = {"rf1": [], "rf3": []}  # of it, librdkafka's broker threads'
        pids = [b.process.pid for b in cluster.brokers.values()]
        loads = [os.getloadavg()[0]]  # the machine may be shared: the figures say how busy
        for r in range(args.rounds):
            for topic in ("rf1", "rf3"):
                before = [user_system_seconds(pid) for pid in pids]
                spin = []
                client_before = cpu_seconds()
                seconds = produce(bootstrap, topic, args.messages, args.size, "all",
                                  args.idempotence, args.max_in_flight,
                                  args.sticky, spin)
                client_used = cpu_seconds() - client_before
                after = [user_system_seconds(pid) for pid in pids]
                system = sum(a[1] - b[1] for a, b in zip(after, before))
                used = sum(a[0] - b[0] for a, b in zip(after, before)) + system
                rates[topic].append(mb / seconds)
                cpu[topic].append(used / mb)
                system_cpu[topic].append(system / mb)
                client_cpu[topic].append(client_used / mb)
                spin_cpu[topic].append(spin[0] / mb)
                loads.append(os.getloadavg()[0])
                print("round %d %s: %.1f MB/s, brokers %.3f CPU s/MB (system %.3f), producer %.3f "
                      "CPU s/MB (librdkafka's broker threads %.3f), load average %.1f"
                      % (r + 1, topic, mb / seconds, used / mb, system / mb, client_used / mb,
                         spin[0] / mb, loads[-1]), file=sys.stderr)
    write_cost.append(page_cache_write_cost(tempfile.gettempdir()))
    rf1, rf3 = statistics.median(rates["rf1"]), statistics.median(rates["rf3"])
    print("| topic | MB/s per round | median MB/s | brokers' CPU s/MB (median) | of it system "
          "| producer CPU s/MB (median) | of it librdkafka's broker threads |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for topic in ("rf1", "rf3"):
        print("| %s | %s | %.1f | %.3f | %.3f | %.3f | %.3f |" % (
            "RF 1, acks=all" if topic == "rf1" else "RF 3, min ISR 2, acks=all",
            " / ".join("%.1f" % x for x in rates[topic]), statistics.median(rates[topic]),
            statistics.median(cpu[topic]), statistics.median(system_cpu[topic]),
            statistics.median(client_cpu[topic]), statistics.median(spin_cpu[topic])))
    print("\nRF 3 / RF 1: %.0f%%; 1-minute load average %.1f-%.1f during the run"
          % (100.0 * rf3 / rf1, min(loads), max(loads)))
    print("page cache writes on this machine, before and after the run (CPU s/GB of os.write "
          "into new pages / into cached pages): %.2f / %.2f, %.2f / %.2f"
          % (write_cost[0]["new_pages_cpu_s_per_gb"], write_cost[0]["cached_pages_cpu_s_per_gb"],
             write_cost[1]["new_pages_cpu_s_per_gb"], write_cost[1]["cached_pages_cpu_s_per_gb"]))


if __name__ == "__main__":
    main()
