"""The longest reactor iterations of a broker while it does work that used to hold the reactor:
``python -m bench.stalls [--rounds N] [--only NAME ...]``.

Each scenario runs on a fresh broker with the stall probe on (``kafkatw.reactor.stall.probe.ms``,
5 ms) and reports the stalls the probe logged meanwhile: how many (late by 5 ms or more) and
the longest. It prints a Markdown table; it asserts nothing (tests/test_reactor_stalls.py does).
"""

import argparse
import os
import platform
import time

from kafkatw.stall_probe import StallLog
from kafkatw.testing import KafkaBroker, api_versions_ok, create_topics

PROBE_MS = 5


def _broker(**overrides):
    props = {"kafkatw.reactor.stall.probe.ms": PROBE_MS}
    props.update(overrides)
    return KafkaBroker(overrides=props)


def _stalls(broker, mark):
    # an answered request: a reactor iteration began after the work, so the probe has logged
    api_versions_ok("127.0.0.1", broker.port, timeout=10.0)
    return mark.stalls()


def create_1000_partitions():
    with _broker() as broker:
        mark = StallLog(broker.log_path).mark()
        t0 = time.monotonic()
        create_topics("127.0.0.1", broker.port, [("big", 1000, {})], timeout=300.0)
        took = time.monotonic() - t0
        return _stalls(broker, mark), "CreateTopics answered in %.1f s" % took


def delete_1000_partitions():
    from confluent_kafka.admin import AdminClient

    with _broker() as broker:
        create_topics("127.0.0.1", broker.port, [("big", 1000, {})], timeout=300.0)
        _stalls(broker, StallLog(broker.log_path))  # the creation's own stalls are logged
        mark = StallLog(broker.log_path).mark()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        t0 = time.monotonic()
        admin.delete_topics(["big"], operation_timeout=60)["big"].result(timeout=120)
        took = time.monotonic() - t0
        return _stalls(broker, mark), "DeleteTopics answered in %.1f s" % took


def load_offsets(commits=300, partitions=100):
    """``commits`` x ``partitions`` offset commits of one group, a restart, the group's load."""
    from confluent_kafka import Consumer, TopicPartition

    with _broker() as broker:
        create_topics("127.0.0.1", broker.port, [("t", partitions, {})])
        conf = {"bootstrap.servers": broker.bootstrap_servers, "group.id": "g",
                "enable.auto.commit": False}
        consumer = Consumer(conf)
        for i in range(commits):
            consumer.commit(offsets=[TopicPartition("t", p, i + 1) for p in range(partitions)],
                            asynchronous=False)
        consumer.close()
        broker.stop()
        mark = StallLog(broker.log_path).mark()
        broker.start()
        t0 = time.monotonic()
        consumer = Consumer(conf)
        committed = consumer.committed([TopicPartition("t", 0)], timeout=120)
        consumer.close()
        took = time.monotonic() - t0
        assert committed[0].offset == commits, committed
        deadline = time.monotonic() + 60
        while "loaded 1 groups" not in mark.text() and time.monotonic() < deadline:
            time.sleep(0.05)
        return _stalls(broker, mark), "%d commits; group answered %.1f s after the restart" % (
            commits * partitions, took)


def rebuild_producer_state(batches=200000):
    """A partition of ``batches`` idempotent batches written while the broker was down, no
    producer snapshot covering them: the first idempotent produce rebuilds from the log."""
    from confluent_kafka import Producer

    from kafkatw.protocol import records
    from kafkatw.storage import LogConfig, UnifiedLog

    with _broker() as broker:
        create_topics("127.0.0.1", broker.port, [("idem", 1, {})])
        broker.stop()
        path = os.path.join(broker.data_dir, "idem-0")
        lg = UnifiedLog(path, LogConfig.from_props({}, {}))
        per_append = 1000
        for start in range(0, batches, per_append):
            buf = bytearray(b"".join(
                records.build_batch([records.Record(value=b"x")], producer_id=999, producer_epoch=0,
                                    base_sequence=seq, base_timestamp=int(time.time() * 1000))
                for seq in range(start, start + per_append)))
            lg.append_as_leader(buf, 0)
        lg.flush()
        lg.close()
        for name in os.listdir(path):
            if name.endswith(".snapshot"):
                os.unlink(os.path.join(path, name))
        mark = StallLog(broker.log_path).mark()
        broker.start()
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True})
        t0 = time.monotonic()
        producer.produce("idem", b"after")
        assert producer.flush(120) == 0
        took = time.monotonic() - t0
        return _stalls(broker, mark), "%d batches; first idempotent produce took %.1f s" % (batches, took)


def recompress(messages=100000):
    """gzip batches of up to 10,000 small records into a zstd topic: each is recompressed."""
    from confluent_kafka import Producer

    with _broker() as broker:
        create_topics("127.0.0.1", broker.port, [("z", 1, {"compression.type": "zstd"})])
        mark = StallLog(broker.log_path).mark()
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "compression.type": "gzip",
                             "linger.ms": 200, "batch.num.messages": 10000, "batch.size": 4 << 20,
                             "enable.idempotence": False})
        t0 = time.monotonic()
        for i in range(messages):
            while True:
                try:
                    producer.produce("z", b"value-%08d" % i)
                    break
                except BufferError:
                    producer.poll(0.05)
        assert producer.flush(120) == 0
        took = time.monotonic() - t0
        return _stalls(broker, mark), "%d records in %.1f s" % (messages, took)


def compacted(messages=300000):
    """Small keyed records (1,000 keys) into a compacted topic of 1 MiB segments: each
    append checks every record's key, and the cleaner compacts meanwhile."""
    from confluent_kafka import Producer

    with _broker(**{"log.cleaner.backoff.ms": 500}) as broker:
        create_topics("127.0.0.1", broker.port, [("c", 1, {
            "cleanup.policy": "compact", "segment.bytes": "1048576",
            "min.cleanable.dirty.ratio": "0.01"})])
        mark = StallLog(broker.log_path).mark()
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 50,
                             "compression.type": "none"})
        t0 = time.monotonic()
        for i in range(messages):
            while True:
                try:
                    producer.produce("c", b"v" * 20, key=b"k%d" % (i % 1000))
                    break
                except BufferError:
                    producer.poll(0.05)
        assert producer.flush(120) == 0
        took = time.monotonic() - t0
        deadline = time.monotonic() + 30
        while mark.text().count("cleaned c-0") < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        return _stalls(broker, mark), "%d records in %.1f s, %d cleaner passes" % (
            messages, took, mark.text().count("cleaned c-0"))


SCENARIOS = [
    ("CreateTopics, 1,000 partitions", create_1000_partitions),
    ("DeleteTopics, 1,000 partitions", delete_1000_partitions),
    ("__consumer_offsets load, 30,000 commits", load_offsets),
    ("producer state rebuild, 200,000 batches", rebuild_producer_state),
    ("gzip -> zstd recompression, 100,000 records", recompress),
    ("compacted topic, 300,000 keyed records", compacted),
]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.stalls", description=__doc__)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--only", nargs="*", help="scenarios whose name contains one of these")
    args = ap.parse_args(argv)
    print("%s, %d CPUs, probe every %d ms\n" % (platform.platform(), os.cpu_count(), PROBE_MS))
    print("| scenario | round | stalls >= %d ms | longest (ms) | note |" % PROBE_MS)
    print("|---|---:|---:|---:|---|")
    for name, fn in SCENARIOS:
        if args.only and not any(o.lower() in name.lower() for o in args.only):
            continue
        for r in range(args.rounds):
            stalls, note = fn()
            print("| %s | %d | %d | %d | %s |" % (name, r + 1, len(stalls), max(stalls, default=0), note),
                  flush=True)


if __name__ == "__main__":
    main()
