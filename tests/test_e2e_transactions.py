"""Transactions with real clients against a real broker process: confluent-kafka, kafka-python
and aiokafka transactional producers commit and abort (read_committed consumers see exactly the
committed records, read_uncommitted ones everything; so does kcat), a second producer with the same
transactional id fences the first, a transaction left open by a killed client is aborted after
its timeout (the LSO moves on), consume-transform-produce with send_offsets_to_transaction stays
exactly-once across a kill -9 of the worker (confluent-kafka) and works in kafkajs, and a
transactional write its transaction does not cover is refused (KIP-890 part 1).
"""

import os
import signal
import subprocess
import sys
import time

from twisted.trial import unittest

from kafkatw.testing import KafkaBrokerMixin
from tests.support import poll_until, unique_name

OVERRIDES = {
    "transaction.state.log.num.partitions": 5,
    "offsets.topic.num.partitions": 5,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 300,
}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def create_topic(bootstrap, topic, partitions=2):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


def read_all(bootstrap, topic, isolation, partitions=2, timeout=20.0):
    """Every value of ``topic`` up to each partition's end (EOF) with ``isolation``."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("reader"),
                  "isolation.level": isolation, "enable.partition.eof": True,
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got, eof = [], set()
        deadline = time.monotonic() + timeout
        while len(eof) < partitions and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    eof.add(m.partition())
                continue
            eof.discard(m.partition())
            got.append(m.value())
        assert len(eof) == partitions, "no EOF on %s within %.0f s" % (topic, timeout)
        return sorted(got)
    finally:
        c.close()


def values(prefix, n):
    return [("%s%d" % (prefix, i)).encode() for i in range(n)]


class ConfluentTransactionTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_overrides = OVERRIDES

    def producer(self, txn_id, **extra):
        from confluent_kafka import Producer

        conf = {"bootstrap.servers": self.broker.bootstrap_servers, "transactional.id": txn_id,
                "linger.ms": 5}
        conf.update(extra)
        p = Producer(conf)
        p.init_transactions(20)
        return p

    def test_commit_and_abort(self):
        bs = self.broker.bootstrap_servers
        topic = unique_name("txn")
        create_topic(bs, topic)
        p = self.producer(unique_name("tid"))
        committed, aborted = values("c", 6), values("a", 4)
        p.begin_transaction()
        for i, v in enumerate(committed):
            p.produce(topic, v, partition=i % 2)
        p.commit_transaction(20)
        p.begin_transaction()
        for i, v in enumerate(aborted):
            p.produce(topic, v, partition=i % 2)
        self.assertEqual(p.flush(10), 0)  # sent, so the abort has records to mark
        p.abort_transaction(20)
        p.begin_transaction()
        p.produce(topic, b"last", partition=0)
        p.commit_transaction(20)
        self.assertEqual(read_all(bs, topic, "read_committed"), sorted(committed + [b"last"]))
        self.assertEqual(read_all(bs, topic, "read_uncommitted"),
                         sorted(committed + aborted + [b"last"]))

    def test_kcat_reads_committed_only(self):
        """Debian's kcat (librdkafka 2.0.2) consumes read_committed by default: aborted records
        are skipped, the partition's end is the LSO (offsets of markers and aborted records are
        not shown), and -X isolation.level=read_uncommitted shows everything."""
        import shutil

        if shutil.which("kcat") is None:
            raise unittest.SkipTest("kcat is not installed (apt-get install kcat)")
        bs = self.broker.bootstrap_servers
        topic = unique_name("kcat-txn")
        create_topic(bs, topic, 1)
        p = self.producer(unique_name("tid"))
        p.begin_transaction()
        p.produce(topic, b"c0", partition=0)
        p.commit_transaction(20)  # c0 at 0, marker at 1
        p.begin_transaction()
        p.produce(topic, b"a0", partition=0)
        self.assertEqual(p.flush(10), 0)
        p.abort_transaction(20)  # a0 at 2, marker at 3
        p.begin_transaction()
        p.produce(topic, b"c1", partition=0)
        p.commit_transaction(20)  # c1 at 4, marker at 5

        def kcat(*extra):
            proc = subprocess.run(["kcat", "-b", bs, "-C", "-t", topic, "-o", "beginning", "-e",
                                   "-f", "%o:%s\n", *extra], capture_output=True, timeout=60)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            return proc.stdout.decode().split()

        self.assertEqual(kcat(), ["0:c0", "4:c1"])
        self.assertEqual(kcat("-X", "isolation.level=read_uncommitted"), ["0:c0", "2:a0", "4:c1"])

    def test_zombie_is_fenced(self):
        from confluent_kafka import KafkaException

        bs = self.broker.bootstrap_servers
        topic = unique_name("zombie")
        create_topic(bs, topic)
        tid = unique_name("tid")
        old = self.producer(tid)
        old.begin_transaction()
        old.produce(topic, b"zombie", partition=0)
        self.assertEqual(old.flush(10), 0)
        new = self.producer(tid)  # aborts the old producer's transaction, bumping the epoch
        new.begin_transaction()
        new.produce(topic, b"new", partition=1)
        new.commit_transaction(20)
        old.produce(topic, b"zombie2", partition=0)
        with self.assertRaises(KafkaException) as cm:
            old.commit_transaction(10)
        err = cm.exception.args[0]
        self.assertTrue(err.fatal(), err)
        self.assertIn(err.code(), (err._FENCED, err.PRODUCER_FENCED, err.INVALID_PRODUCER_EPOCH), err)
        self.assertEqual(read_all(bs, topic, "read_committed"), [b"new"])

    def test_open_transaction_of_killed_client_times_out(self):
        bs = self.broker.bootstrap_servers
        topic = unique_name("hang")
        create_topic(bs, topic, 1)
        script = (
            "import os, signal\n"
            "from confluent_kafka import Producer\n"
            "p = Producer({'bootstrap.servers': %r, 'transactional.id': %r,\n"
            "              'transaction.timeout.ms': 2000, 'message.timeout.ms': 2000})\n"
            "p.init_transactions(20)\n"
            "p.begin_transaction()\n"
            "p.produce(%r, b'hung', partition=0)\n"
            "assert p.flush(10) == 0\n"
            "print('sent', flush=True)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n" % (bs, unique_name("tid"), topic))
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
        self.assertEqual(proc.stdout.strip(), b"sent", proc.stderr[-2000:])
        self.assertEqual(proc.returncode, -signal.SIGKILL)
        from confluent_kafka import Producer

        plain = Producer({"bootstrap.servers": bs})
        plain.produce(topic, b"after", partition=0)
        self.assertEqual(plain.flush(10), 0)
        # read_committed is stuck at the hung transaction's first offset (its EOF comes at
        # the LSO, with nothing read) until the coordinator aborts it (timeout 2 s, checked
        # every 300 ms); then it sees the later record only
        poll_until(lambda: read_all(bs, topic, "read_committed", 1) == [b"after"], timeout=30,
                   interval=0.2, message="the hung transaction to be aborted")
        self.assertEqual(read_all(bs, topic, "read_uncommitted", 1), [b"after", b"hung"])

    def test_consume_transform_produce_exactly_once_across_worker_kill(self):
        from confluent_kafka import Consumer, Producer, TopicPartition

        bs = self.broker.bootstrap_servers
        topic_in, topic_out = unique_name("in"), unique_name("out")
        group, tid = unique_name("ctp"), unique_name("ctp-tid")
        create_topic(bs, topic_in)
        create_topic(bs, topic_out)
        p = Producer({"bootstrap.servers": bs})
        inputs = values("x", 60)
        for i, v in enumerate(inputs):
            p.produce(topic_in, v, partition=i % 2)
        self.assertEqual(p.flush(10), 0)
        cmd = [sys.executable, "-m", "tests.txn_ctp_worker", bs, topic_in, topic_out, group, tid,
               str(len(inputs)), "10"]
        first = subprocess.run(cmd + ["2"], capture_output=True, timeout=120, cwd=ROOT)
        self.assertEqual(first.returncode, -signal.SIGKILL, first.stderr[-3000:])
        self.assertIn(b"crashing after ", first.stdout)
        before_crash = int(first.stdout.split(b"crashing after ")[1].split()[0])
        self.assertGreaterEqual(before_crash, 2)  # two transactions of at least one record

        def committed_sum():
            c = Consumer({"bootstrap.servers": bs, "group.id": group})
            try:
                got = c.committed([TopicPartition(topic_in, 0), TopicPartition(topic_in, 1)], 10)
            finally:
                c.close()
            return sum(max(tp.offset, 0) for tp in got)

        # the group's offsets are where the last committed transaction left them
        self.assertEqual(committed_sum(), before_crash)
        second = subprocess.run(cmd + ["0"], capture_output=True, timeout=120, cwd=ROOT)
        self.assertEqual(second.returncode, 0, second.stdout + second.stderr[-3000:])
        self.assertEqual(read_all(bs, topic_out, "read_committed"),
                         sorted(v.upper() for v in inputs))
        c = Consumer({"bootstrap.servers": bs, "group.id": group})
        try:
            committed = c.committed([TopicPartition(topic_in, 0), TopicPartition(topic_in, 1)], 10)
        finally:
            c.close()
        self.assertEqual([tp.offset for tp in committed], [30, 30])


class VerificationTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    """KIP-890 part 1: a transactional write to a partition its transaction does not hold is
    refused, so no stray write can open a transaction that nobody ends."""

    broker_overrides = OVERRIDES

    def test_unverified_transactional_produce_is_refused(self):
        from tests.support import PRODUCE, PRODUCE_V, RawClient, produce_body
        from kafkatw.protocol import errors

        bs = self.broker.bootstrap_servers
        topic = unique_name("verify")
        create_topic(bs, topic, 1)
        c = RawClient(self.broker, "verify")

        def produce(tid, pid, epoch):
            body = produce_body(topic, 0, [b"x"], producer_id=pid, producer_epoch=epoch,
                                base_sequence=0, is_transactional=True)
            body.transactional_id = tid
            return c.request(PRODUCE, PRODUCE_V, body).responses[0].partition_responses[0].error_code

        try:
            # transactional records without a transactional id: refused, as Kafka does
            self.assertEqual(produce(None, 4242, 0), errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            self.assertEqual(produce("never-initialized", 4242, 0), errors.INVALID_PRODUCER_ID_MAPPING)
            # an initialized producer whose transaction does not hold the partition
            from confluent_kafka import Producer

            tid = unique_name("tid")
            p = Producer({"bootstrap.servers": bs, "transactional.id": tid})
            p.init_transactions(20)
            from kafkatw.protocol import messages as m

            resp = c.request(22, 4, m.InitProducerIdRequest(transactional_id=tid,
                                                            transaction_timeout_ms=60000,
                                                            producer_id=-1, producer_epoch=-1))
            self.assertEqual(resp.error_code, errors.NONE)
            self.assertEqual(produce(tid, resp.producer_id, resp.producer_epoch),
                             errors.INVALID_TXN_STATE)
        finally:
            c.close()
        self.assertEqual(read_all(bs, topic, "read_uncommitted", 1), [])


def _write_prepare_commit(data_dir, transactional_id):
    """Append, to the stopped broker's ``__transaction_state-0``, the PrepareCommit record an
    EndTxn(commit) of ``transactional_id``'s ongoing transaction writes before its markers:
    the state a kill -9 right after answering EndTxn leaves on disk."""
    from kafkatw.coordinator.txn import metadata as tm
    from kafkatw.coordinator.txn import txn_log
    from kafkatw.coordinator.group.offsets_log import iter_log_records
    from kafkatw.storage.log import UnifiedLog

    lg = UnifiedLog(os.path.join(data_dir, "__transaction_state-0"), needs_recovery=True)
    try:
        state = None
        for key, value in iter_log_records(lg, lg.log_start_offset, lg.log_end_offset, 1 << 20):
            if txn_log.decode_key(key) == transactional_id:
                state = txn_log.decode_value(transactional_id, value)
        assert state is not None and state.state == tm.ONGOING, state
        transit = state.prepare_abort_or_commit(tm.PREPARE_COMMIT, int(time.time() * 1000))
        lg.append_as_leader(bytearray(txn_log.build_record_batch(
            transactional_id, transit, int(time.time() * 1000))), 0)
        lg.flush()
    finally:
        lg.close()


class BrokerKillTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_scope = "test"
    broker_overrides = dict(OVERRIDES, **{"transaction.state.log.num.partitions": 1})

    def test_markers_written_after_restart_from_prepare_commit(self):
        bs = self.broker.bootstrap_servers
        topic, tid = unique_name("kill"), unique_name("tid")
        create_topic(bs, topic)
        script = (
            "import os, signal\n"
            "from confluent_kafka import Producer\n"
            "p = Producer({'bootstrap.servers': %r, 'transactional.id': %r})\n"
            "p.init_transactions(20)\n"
            "p.begin_transaction()\n"
            "for i in range(4):\n"
            "    p.produce(%r, b'k%%d' %% i, partition=i %% 2)\n"
            "assert p.flush(10) == 0\n"
            "print('sent', flush=True)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n" % (bs, tid, topic))
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
        self.assertEqual(proc.stdout.strip(), b"sent", proc.stderr[-2000:])
        self.assertEqual(read_all(bs, topic, "read_committed"), [])
        self.broker.kill()
        _write_prepare_commit(self.broker.data_dir, tid)
        self.broker.start()
        # loading finds PrepareCommit and writes the markers: the records are committed
        poll_until(lambda: read_all(bs, topic, "read_committed") == values("k", 4), timeout=30,
                   interval=0.2, message="the markers of the prepared commit")
        from kafkatw.protocol import messages as m
        from tests.support import RawClient

        c = RawClient(self.broker, "kill")
        try:
            state = poll_until(lambda: c.request(65, 0, m.DescribeTransactionsRequest(
                transactional_ids=[tid])).transaction_states[0].transaction_state == "CompleteCommit",
                timeout=10, message="CompleteCommit")
        finally:
            c.close()
        self.assertTrue(state)


class ProtocolTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    """What is advertised (item 7 of the issue: no KIP-890 part 2), and request versions'
    shapes and error mappings, spoken raw."""

    broker_overrides = OVERRIDES

    def test_advertised_versions_and_features(self):
        from kafkatw.protocol import messages as m
        from tests.support import RawClient

        c = RawClient(self.broker, "versions")
        try:
            resp = c.request(18, 3, m.ApiVersionsRequest(client_software_name="t",
                                                         client_software_version="1"))
        finally:
            c.close()
        got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        self.assertEqual(got[0][1], 11)  # Produce
        self.assertEqual(got[26], (0, 4))  # EndTxn
        self.assertEqual(got[28], (0, 4))  # TxnOffsetCommit
        self.assertEqual(got[24], (0, 5))  # AddPartitionsToTxn
        self.assertEqual(got[25], (0, 4))  # AddOffsetsToTxn
        self.assertEqual((got[65], got[66]), ((0, 0), (0, 1)))
        self.assertNotIn("transaction.version", [f.name for f in resp.finalized_features])
        self.assertNotIn("transaction.version", [f.name for f in resp.supported_features])

    def test_add_partitions_versions(self):
        from kafkatw.protocol import errors, messages as m
        from tests.support import RawClient

        bs = self.broker.bootstrap_servers
        topic = unique_name("apt")
        create_topic(bs, topic)
        c = RawClient(self.broker, "apt")
        R = m.AddPartitionsToTxnRequest
        try:
            # the first FindCoordinator creates __transaction_state (COORDINATOR_NOT_AVAILABLE
            # until that is durable, as Kafka answers on a fresh cluster)
            poll_until(lambda: c.request(10, 1, m.FindCoordinatorRequest(
                key="apt-tid", key_type=1)).error_code == errors.NONE, timeout=10,
                message="the transaction coordinator")
            init = poll_until(lambda: (lambda r: r if r.error_code == errors.NONE else None)(
                c.request(22, 4, m.InitProducerIdRequest(
                    transactional_id="apt-tid", transaction_timeout_ms=60000, producer_id=-1,
                    producer_epoch=-1))), timeout=10, message="InitProducerId")
            pid, epoch = init.producer_id, init.producer_epoch
            # v3: one transaction; an unknown partition fails the whole request
            resp = c.request(24, 3, R(v3_and_below_transactional_id="apt-tid",
                                      v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                                      v3_and_below_topics=[R.AddPartitionsToTxnTopic(
                                          name=topic, partitions=[0, 7])]))
            codes = {(r.partition_index, r.partition_error_code)
                     for t in resp.results_by_topic_v3_and_below for r in t.results_by_partition}
            self.assertEqual(codes, {(0, errors.OPERATION_NOT_ATTEMPTED),
                                     (7, errors.UNKNOWN_TOPIC_OR_PARTITION)})
            resp = c.request(24, 3, R(v3_and_below_transactional_id="apt-tid",
                                      v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                                      v3_and_below_topics=[R.AddPartitionsToTxnTopic(
                                          name=topic, partitions=[0])]))
            self.assertEqual(resp.results_by_topic_v3_and_below[0].results_by_partition[0]
                             .partition_error_code, errors.NONE)
            # v1 knows a fenced producer as INVALID_PRODUCER_EPOCH, v3 as PRODUCER_FENCED
            for version, code in ((1, errors.INVALID_PRODUCER_EPOCH), (3, errors.PRODUCER_FENCED)):
                resp = c.request(24, version, R(
                    v3_and_below_transactional_id="apt-tid", v3_and_below_producer_id=pid,
                    v3_and_below_producer_epoch=epoch + 5,
                    v3_and_below_topics=[R.AddPartitionsToTxnTopic(name=topic, partitions=[1])]))
                self.assertEqual(resp.results_by_topic_v3_and_below[0].results_by_partition[0]
                                 .partition_error_code, code)
            # v4 verify-only (what a partition leader asks): in the transaction or not
            resp = c.request(24, 4, R(transactions=[R.AddPartitionsToTxnTransaction(
                transactional_id="apt-tid", producer_id=pid, producer_epoch=epoch, verify_only=True,
                topics=[R.AddPartitionsToTxnTopic(name=topic, partitions=[0, 1])])]))
            self.assertEqual(resp.error_code, errors.NONE)
            codes = {(r.partition_index, r.partition_error_code)
                     for t in resp.results_by_transaction[0].topic_results
                     for r in t.results_by_partition}
            self.assertEqual(codes, {(0, errors.NONE), (1, errors.INVALID_TXN_STATE)})
            resp = c.request(26, 3, m.EndTxnRequest(transactional_id="apt-tid", producer_id=pid,
                                                    producer_epoch=epoch, committed=False))
            self.assertEqual(resp.error_code, errors.NONE)
            resp = c.request(65, 0, m.DescribeTransactionsRequest(transactional_ids=["apt-tid"]))
            self.assertIn(resp.transaction_states[0].transaction_state,
                          ("PrepareAbort", "CompleteAbort"))
        finally:
            c.close()


class KafkajsTransactionTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_overrides = OVERRIDES

    def test_consume_transform_produce(self):
        from confluent_kafka import Consumer, Producer, TopicPartition

        from tests.test_e2e_kafkajs import kafkajs_ready, run_js

        kafkajs_ready()
        bs = self.broker.bootstrap_servers
        topic_in, topic_out, group = unique_name("js-in"), unique_name("js-out"), unique_name("js-g")
        create_topic(bs, topic_in)
        create_topic(bs, topic_out)
        p = Producer({"bootstrap.servers": bs})
        inputs = values("j", 20)
        for i, v in enumerate(inputs):
            p.produce(topic_in, v, partition=i % 2)
        self.assertEqual(p.flush(10), 0)
        self.assertEqual(run_js("txn.js", bs, topic_in, topic_out, group, len(inputs)),
                         {"processed": 20, "aborted": 1})
        self.assertEqual(read_all(bs, topic_out, "read_committed"), sorted(v.upper() for v in inputs))
        self.assertEqual(read_all(bs, topic_out, "read_uncommitted"),
                         sorted([b"ABORTED"] + [v.upper() for v in inputs]))
        c = Consumer({"bootstrap.servers": bs, "group.id": group})
        try:
            committed = c.committed([TopicPartition(topic_in, 0), TopicPartition(topic_in, 1)], 10)
        finally:
            c.close()
        self.assertEqual([tp.offset for tp in committed], [10, 10])


class AiokafkaTransactionTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_overrides = OVERRIDES

    def test_commit_and_abort(self):
        import asyncio

        from aiokafka import AIOKafkaProducer

        bs = self.broker.bootstrap_servers
        topic = unique_name("aio-txn")
        create_topic(bs, topic)

        async def run():
            p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=unique_name("aio-tid"))
            await p.start()
            try:
                async with p.transaction():
                    for i, v in enumerate(values("c", 4)):
                        await p.send_and_wait(topic, v, partition=i % 2)
                await p.begin_transaction()
                for i, v in enumerate(values("a", 2)):
                    await p.send_and_wait(topic, v, partition=i % 2)
                await p.abort_transaction()
            finally:
                await p.stop()

        asyncio.run(run())
        self.assertEqual(read_all(bs, topic, "read_committed"), values("c", 4))
        self.assertEqual(read_all(bs, topic, "read_uncommitted"), sorted(values("c", 4) + values("a", 2)))


class KafkaPythonTransactionTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_overrides = OVERRIDES

    def test_commit_and_abort(self):
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition

        bs = self.broker.bootstrap_servers
        topic = unique_name("kp-txn")
        create_topic(bs, topic)
        p = KafkaProducer(bootstrap_servers=bs, transactional_id=unique_name("kp-tid"))
        try:
            p.init_transactions()
            p.begin_transaction()
            for i, v in enumerate(values("c", 4)):
                p.send(topic, v, partition=i % 2)
            p.commit_transaction()
            p.begin_transaction()
            for i, v in enumerate(values("a", 3)):
                p.send(topic, v, partition=i % 2)
            p.flush()
            p.abort_transaction()
        finally:
            p.close()
        self.assertEqual(read_all(bs, topic, "read_committed"), values("c", 4))
        # kafka-python's own consumer defaults to read_uncommitted: it sees both
        c = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, consumer_timeout_ms=3000)
        try:
            c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            c.seek_to_beginning()
            got = sorted(m.value for m in c)
        finally:
            c.close()
        self.assertEqual(got, sorted(values("c", 4) + values("a", 3)))
        c = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, consumer_timeout_ms=3000,
                          isolation_level="read_committed")
        try:
            c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            c.seek_to_beginning()
            got = sorted(m.value for m in c)
        finally:
            c.close()
        self.assertEqual(got, values("c", 4))
