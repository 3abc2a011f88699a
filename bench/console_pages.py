"""Answer time of each web console page with many partitions, against a real broker.

A broker (``kafkatw.testing``, ``kafkatw.reactor.stall.probe.ms=5``) with ``--topics`` topics of
``--partitions-per-topic`` partitions, a record in each partition, and ``--groups`` consumer
groups committing to a topic each; then each console API is asked ``--rounds`` times over HTTP,
every page once a round, rounds 1.1 s apart (past the console's one-second read cache), and
the median and the largest time of each page are printed, with the longest reactor stall the
broker logged meanwhile. A broker keeps about three descriptors a partition, so the descriptor
limit (``ulimit -n``) bounds the total.

    .venv/bin/python -m bench.console_pages --topics 60 --partitions-per-topic 100
    .venv/bin/python -m bench.console_pages --topics 1 --partitions-per-topic 6000
"""

import argparse
import json
import re
import statistics
import time
import urllib.request

from kafkatw.testing import KafkaBroker


def populate(broker, topics, per_topic, groups):
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    names = ["t%04d" % i for i in range(topics)]
    for start in range(0, topics, 10):
        for f in admin.create_topics([NewTopic(n, per_topic, 1) for n in names[start:start + 10]],
                                     request_timeout=300).values():
            f.result(600)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 20})
    for n in names:
        for p in range(per_topic):
            producer.produce(n, partition=p, value=json.dumps({"topic": n, "partition": p}).encode())
        producer.poll(0)
    assert producer.flush(300) == 0
    for g in range(groups):
        topic = names[g % topics]
        c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g%03d" % g})
        deadline = time.monotonic() + 120
        while True:  # the first commit waits for the coordinator (__consumer_offsets is created)
            try:
                c.commit(offsets=[TopicPartition(topic, p, 1) for p in range(per_topic)], asynchronous=False)
                break
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        c.close()
    return names


def timed(port, path):
    t = time.perf_counter()
    with urllib.request.urlopen("http://127.0.0.1:%d/api/%s" % (port, path), timeout=120) as r:
        body = r.read()
    return (time.perf_counter() - t) * 1000, len(body)


def stalls(log_path, since):
    found = []
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in f.readlines()[since:]:
            m = re.search(r"reactor stall: (\d+) ms", line)
            if m:
                found.append(int(m.group(1)))
    return found


def main():
    ap = argparse.ArgumentParser(prog="python -m bench.console_pages", description=__doc__)
    ap.add_argument("--topics", type=int, default=60)
    ap.add_argument("--partitions-per-topic", type=int, default=100)
    ap.add_argument("--groups", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    overrides = {"kafkatw.console.listener": "127.0.0.1:0", "kafkatw.reactor.stall.probe.ms": "5"}
    with KafkaBroker(overrides=overrides, start_timeout=600) as broker:
        names = populate(broker, a.topics, a.partitions_per_topic, a.groups)
        pages = ["overview", "topics", "topics?search=%s" % names[-1][:4], "topics/" + names[0], "groups",
                 "groups/g000", "messages/%s?partition=0" % names[0]]
        time.sleep(5)  # what the population left behind (group loads, checkpoints) settles
        with open(broker.log_path, encoding="utf-8", errors="replace") as f:
            since = len(f.readlines())
        print("%d topics x %d partitions = %d partitions, %d groups"
              % (a.topics, a.partitions_per_topic, a.topics * a.partitions_per_topic, a.groups))
        print("%-28s %10s %10s %10s" % ("page", "median ms", "max ms", "bytes"))
        times = {page: [] for page in pages}
        sizes = {}
        for _ in range(a.rounds):  # every page once a round, rounds 1.1 s apart (past the read cache)
            for page in pages:
                ms, sizes[page] = timed(broker.console_port, page)
                times[page].append(ms)
            time.sleep(1.1)
        for page in pages:
            print("%-28s %10.1f %10.1f %10d" % (page[:28], statistics.median(times[page]), max(times[page]),
                                                sizes[page]))
        found = stalls(broker.log_path, since)
        print("reactor stalls >= 5 ms while the pages were read: %d, longest %s ms"
              % (len(found), max(found) if found else "-"))


if __name__ == "__main__":
    main()
