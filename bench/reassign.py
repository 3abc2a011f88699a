"""Issue 20's reassignment check at full size on four brokers and ZooKeeper
(``kafkatw.testing.KafkaCluster``): a partition holding ``--mb`` MB moves from [1,2,3] to
[2,3,4] under a continuous acks=all producer, unthrottled and then with ``--throttle-mb``
MB/s; a third throttled move is cancelled midway. It reports each move's time, whether the new
replicas hold identical batches, whether any acknowledged record was lost, and whether the
cancel restored [1,2,3] (as a set: Kafka orders it RS less the adding replicas).

    .venv/bin/python -m bench.reassign --mb 100 --throttle-mb 5
"""

import argparse
import io
import os
import sys
import time

from kafkatw.cli import partitions as cli
from kafkatw.cli.client import KafkaClient
from kafkatw.nemesis.checker import check_records, read_batches
from kafkatw.nemesis.workload import ProducerWorker, read_back
from kafkatw.testing import KafkaCluster

MB = 1024 * 1024


def create_topic(bootstrap, name, replicas):
    from confluent_kafka.admin import AdminClient, NewTopic

    client = AdminClient({"bootstrap.servers": bootstrap})
    client.create_topics([NewTopic(name, 1, replica_assignment=[replicas])], operation_timeout=30)[name].result(60)


def produce_bulk(bootstrap, topic, total, value_size=64 * 1024):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                         "batch.size": 1000000, "compression.type": "none", "log_level": 2})
    filler = os.urandom(value_size)
    for i in range(total // value_size):
        while True:
            try:
                producer.produce(topic, value=b"bulk-%d-" % i + filler, partition=0)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(600):
        raise SystemExit("bulk produce did not finish")


def wait(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise SystemExit("timed out waiting for %s" % what)


def replicas_of(client, topic):
    md = client.metadata([topic])
    (t,) = md.topics
    return list(t.partitions[0].replica_nodes), sorted(t.partitions[0].isr_nodes)


def move(cluster, client, topic, target, throttle, cancel_after=None):
    """Seconds from --execute to completion (or to the cancel's return)."""
    current = {(topic, 0): replicas_of(client, topic)[0]}
    plan = {(topic, 0): target}
    started = time.monotonic()
    if throttle is not None:
        cli.set_throttles(client, plan, current, throttle)
    results = cli.alter_reassignments(client, plan)
    assert results[(topic, 0)][0] == 0, results
    if cancel_after is not None:
        time.sleep(cancel_after)
        ongoing = cli.list_reassignments(client)
        print("  listed before the cancel: %s" % ongoing)
        results = cli.alter_reassignments(client, {(topic, 0): None})
        assert results[(topic, 0)][0] == 0, results
    else:
        wait(lambda: not cli.list_reassignments(client) and replicas_of(client, topic)[0] == target, 3600,
             "the move of %s" % topic)
    elapsed = time.monotonic() - started
    if throttle is not None:
        cli.clear_throttles(client, [topic], [1, 2, 3, 4], io.StringIO())
    return elapsed


def identical(cluster, topic, brokers):
    def same():
        found = {b: read_batches(os.path.join(cluster.broker(b).data_dir, "%s-0" % topic)) for b in brokers}
        first = found[brokers[0]]
        return first and all(v == first for v in found.values())
    try:
        wait(same, 120, "identical replicas")
        return True
    except SystemExit:
        return False


def one_move(cluster, client, name, mb, throttle):
    topic = "%s-%d" % (name, int(time.time()))
    create_topic(cluster.bootstrap_servers, topic, [1, 2, 3])
    wait(lambda: replicas_of(client, topic)[1] == [1, 2, 3], 60, "the topic's ISR")
    t0 = time.monotonic()
    produce_bulk(cluster.bootstrap_servers, topic, mb * MB)
    print("%s: %d MB produced in %.1f s" % (topic, mb, time.monotonic() - t0))
    worker = ProducerWorker(0, cluster.bootstrap_servers, topic, 1, rate=200)
    worker.start()
    try:
        elapsed = move(cluster, client, topic, [2, 3, 4], throttle)
    finally:
        left = worker.stop(120)
    wait(lambda: replicas_of(client, topic) == ([2, 3, 4], [2, 3, 4]), 120, "the full ISR")
    same = identical(cluster, topic, [2, 3, 4])
    final, _ = read_back(cluster.bootstrap_servers, topic, 1, timeout_s=300)
    verdict = check_records(worker.acked, final)
    print("  moved in %.1f s (%s); identical batches on 2,3,4: %s; under load %d acknowledged, %d failed, "
          "%d unsent, lost %d, moved %d, duplicated %d"
          % (elapsed, "unthrottled" if throttle is None else "throttle %d B/s" % throttle, same,
             len(worker.acked), len(worker.failed), left, len(verdict.lost), len(verdict.moved),
             len(verdict.duplicates)))
    return elapsed, same and not (verdict.lost or verdict.moved or verdict.duplicates)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--throttle-mb", type=float, default=5.0)
    args = ap.parse_args(argv)
    throttle = int(args.throttle_mb * MB)
    cluster = KafkaCluster(brokers=4, session_timeout_ms=10000).start()
    ok = True
    try:
        client = KafkaClient(cluster.bootstrap_servers, timeout=60)
        _, good = one_move(cluster, client, "unthrottled", args.mb, None)
        ok &= good
        elapsed, good = one_move(cluster, client, "throttled", args.mb, throttle)
        ok &= good
        floor = args.mb / args.throttle_mb
        print("  throttled move took %.1f s; size / rate = %.1f s: %s"
              % (elapsed, floor, "OK" if elapsed >= floor * 0.95 else "TOO FAST"))
        ok &= elapsed >= floor * 0.95
        topic = "cancelled-%d" % int(time.time())
        create_topic(cluster.bootstrap_servers, topic, [1, 2, 3])
        produce_bulk(cluster.bootstrap_servers, topic, args.mb * MB)
        move(cluster, client, topic, [2, 3, 4], throttle, cancel_after=floor / 2)
        replicas = wait(lambda: (lambda r: r if sorted(r[0]) == [1, 2, 3] and r[1] == [1, 2, 3] else None)(
            replicas_of(client, topic)), 120, "the cancel")
        gone = wait(lambda: not os.path.exists(os.path.join(cluster.broker(4).data_dir, "%s-0" % topic)), 60,
                    "broker 4's replica to go")
        print("%s: cancelled midway: replicas %s, ISR %s, broker 4's replica deleted: %s; identical on 1,2,3: %s"
              % (topic, replicas[0], replicas[1], gone, identical(cluster, topic, [1, 2, 3])))
        client.close()
    finally:
        cluster.close()
    print("verdict: %s" % ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
