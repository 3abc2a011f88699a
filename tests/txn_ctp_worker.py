"""A consume-transform-produce worker for tests.test_e2e_transactions, run as a child process
so a test can kill -9 it mid-transaction: it reads ``input`` in group ``group`` with
read_committed, writes each value upper-cased to ``output`` and commits the consumed offsets
with send_offsets_to_transaction, ``batch`` records per transaction.

Usage: python -m tests.txn_ctp_worker BOOTSTRAP INPUT OUTPUT GROUP TXN_ID TOTAL BATCH CRASH_AFTER
It exits 0 once the group's committed offsets cover TOTAL records; with CRASH_AFTER > 0 it
SIGKILLs itself in the middle of transaction number CRASH_AFTER + 1 (records produced and
flushed, offsets not yet sent), printing "crashing after N committed" first (N records are
covered by the committed transactions).
"""

import os
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def main(bootstrap, topic_in, topic_out, group, txn_id, total, batch, crash_after):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "session.timeout.ms": 6000})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 10000, "linger.ms": 5})
    producer.init_transactions(30)
    consumer.subscribe([topic_in])
    done_txns = 0
    consumed = committed_total(consumer, topic_in)
    deadline = time.monotonic() + 90
    while consumed < total and time.monotonic() < deadline:
        msgs = consumer.consume(batch, 1.0)
        msgs = [m for m in msgs if m.error() is None]
        if not msgs:
            continue
        producer.begin_transaction()
        for m in msgs:
            producer.produce(topic_out, m.value().upper(), partition=m.partition())
        if crash_after and done_txns == crash_after:
            producer.flush(10)
            print("crashing after %d committed" % consumed, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        done_txns += 1
        consumed += len(msgs)
    consumer.close()
    print("done %d" % consumed, flush=True)
    return 0 if consumed >= total else 1


def committed_total(consumer, topic):
    """Records before the group's committed offsets (0 where none)."""
    md = consumer.list_topics(topic, 10).topics[topic]
    tps = [TopicPartition(topic, p) for p in md.partitions]
    try:
        committed = consumer.committed(tps, 10)
    except KafkaException:
        return 0
    return sum(max(tp.offset, 0) for tp in committed)


if __name__ == "__main__":
    a = sys.argv[1:]
    sys.exit(main(a[0], a[1], a[2], a[3], a[4], int(a[5]), int(a[6]), int(a[7])))
