"""Produce throughput of a three-broker cluster (kafkatw.testing.KafkaCluster with ZooKeeper):
the same confluent-kafka acks=all load on a topic of replication factor 1 and on one of
replication factor 3 (min.insync.replicas 2), each partition led by every broker in turn. What
docs/performance.md "Replication cost" reports (issue 19: RF 3 at least half of RF 1).

    python -m bench.cluster                  # 6 partitions, 1 KiB records, 8 s per topic, 3 runs
    python -m bench.cluster --seconds 4 --runs 1
"""

import argparse
import statistics
import sys
import time


def produce(bootstrap, topic, seconds, size, partitions):
    """Acknowledged bytes per second over ``seconds`` of acks=all producing (idempotent)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "batch.size": 256 * 1024, "queue.buffering.max.kbytes": 256 * 1024,
                         "compression.type": "none"})
    value = b"x" * size
    acked = [0]
    failed = []

    def delivered(err, msg):
        if err is None:
            acked[0] += 1
        else:
            failed.append(err)
    # warm up: connections, metadata, producer id
    producer.produce(topic, value=value, partition=0, on_delivery=delivered)
    if producer.flush(30) or failed or acked[0] != 1:
        raise RuntimeError("the first record to %s was not acknowledged: %s" % (topic, failed))
    acked[0] = 0
    i = 0
    start = time.monotonic()
    deadline = start + seconds
    while time.monotonic() < deadline:
        try:
            producer.produce(topic, value=value, partition=i % partitions, on_delivery=delivered)
            i += 1
        except BufferError:
            producer.poll(0.001)
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(60)
    elapsed = time.monotonic() - start
    if left:
        raise RuntimeError("%d records not acknowledged within a minute" % left)
    if failed:
        raise RuntimeError("%d records failed: %s" % (len(failed), failed[0]))
    return acked[0] * size / elapsed


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--size", type=int, default=1024, help="record value bytes")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)

    from confluent_kafka.admin import AdminClient, NewTopic

    from kafkatw.testing import KafkaCluster

    results = {1: [], 3: []}
    rf_topics = {1: "bench-rf1", 3: "bench-rf3"}
    with KafkaCluster(brokers=3, racks=["rack-a", "rack-b", "rack-c"],
                      overrides={"min.insync.replicas": 2}) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        # RF 1 cannot meet min.insync.replicas 2: that topic says 1
        futures = admin.create_topics([NewTopic(name, args.partitions, rf, config={"min.insync.replicas": str(min(rf, 2))})
                                       for rf, name in rf_topics.items()])
        for future in futures.values():
            future.result(60)
        for name in rf_topics.values():
            cluster.wait_for(lambda: all(isinstance(cluster.metadata(b, [name])[2].get(name), dict)
                                         for b in (1, 2, 3)), 30, "every broker to know " + name)
        for run in range(args.runs):
            for rf in (1, 3):
                rate = produce(cluster.bootstrap_servers, rf_topics[rf], args.seconds, args.size, args.partitions)
                results[rf].append(rate)
                print("run %d RF %d: %.1f MB/s" % (run + 1, rf, rate / 1e6))
                sys.stdout.flush()
    m1, m3 = statistics.median(results[1]), statistics.median(results[3])
    print("median RF 1 %.1f MB/s, RF 3 %.1f MB/s: RF 3 is %.0f%% of RF 1" % (m1 / 1e6, m3 / 1e6, 100 * m3 / m1))


if __name__ == "__main__":
    main()
