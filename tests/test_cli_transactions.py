"""``kafkatw transactions`` against a real broker: list and describe an open transaction of a
confluent-kafka producer, describe a partition's producers, and find and abort a hanging
transaction (KIP-664: transactional records the coordinator does not know of, holding the LSO)
so that a read_committed consumer moves on."""

import json
import subprocess
import sys

from twisted.trial import unittest

from kafkatw.testing import KafkaBrokerMixin
from tests.support import PRODUCE, PRODUCE_V, RawClient, produce_body, unique_name
from tests.test_e2e_transactions import create_topic, read_all


def run_cli(bootstrap, *args):
    r = subprocess.run([sys.executable, "-m", "kafkatw.cli", "--bootstrap-server", bootstrap]
                       + list(args), capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


class TransactionsCliTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_overrides = {"transaction.state.log.num.partitions": 3,
                        "transaction.partition.verification.enable": "false"}

    def ok(self, *args):
        rc, out, err = run_cli(self.broker.bootstrap_servers, *args)
        self.assertEqual(rc, 0, "kafkatw %s failed: %s" % (" ".join(args), err))
        return out

    def rows(self, out):
        return [line.split() for line in out.strip().splitlines()[1:]]

    def test_list_describe_open_transaction(self):
        from confluent_kafka import Producer

        bs = self.broker.bootstrap_servers
        topic, tid = unique_name("cli-txn"), unique_name("cli-tid")
        create_topic(bs, topic)
        p = Producer({"bootstrap.servers": bs, "transactional.id": tid,
                      "transaction.timeout.ms": 60000})
        p.init_transactions(20)
        p.begin_transaction()
        p.produce(topic, b"open", partition=1)
        self.assertEqual(p.flush(10), 0)
        rows = [r for r in self.rows(self.ok("transactions", "list")) if r[0] == tid]
        self.assertEqual(len(rows), 1)
        self.assertEqual((rows[0][1], rows[0][3]), ("1", "Ongoing"))
        pid = rows[0][2]
        self.assertEqual([r[0] for r in self.rows(
            self.ok("transactions", "list", "--state", "CompleteCommit")) if r[0] == tid], [])
        (row,) = self.rows(self.ok("transactions", "describe", "--transactional-id", tid))
        self.assertEqual(row[:6], ["1", tid, pid, "0", "Ongoing", "60000"])
        self.assertEqual(row[8], "%s-1" % topic)
        (described,) = json.loads(self.ok("transactions", "describe", "--transactional-id", tid, "--output", "json"))
        self.assertEqual({k: described[k] for k in ("coordinatorId", "transactionalId", "producerId",
                                                    "transactionState", "topicPartitions")},
                         {"coordinatorId": 1, "transactionalId": tid, "producerId": int(pid),
                          "transactionState": "Ongoing", "topicPartitions": "%s-1" % topic})
        (prow,) = self.rows(self.ok("transactions", "describe-producers", "--topic", topic,
                                    "--partition", "1"))
        self.assertEqual((prow[0], prow[1], prow[5]), (pid, "0", "0"))
        # an ongoing transaction its coordinator knows is not hanging, however old
        self.assertEqual(self.rows(self.ok("transactions", "find-hanging", "--topic", topic,
                                           "--max-transaction-timeout", "0")), [])
        p.commit_transaction(20)
        (row,) = self.rows(self.ok("transactions", "describe", "--transactional-id", tid))
        self.assertEqual(row[4], "CompleteCommit")
        rc, _, err = run_cli(bs, "transactions", "describe", "--transactional-id", "nope")
        self.assertEqual(rc, 4)  # the broker answered with an error code
        self.assertIn("TRANSACTIONAL_ID_NOT_FOUND", err)

    def test_abort_hanging_transaction(self):
        bs = self.broker.bootstrap_servers
        topic = unique_name("hanging")
        create_topic(bs, topic, 1)
        c = RawClient(self.broker, "hang")
        try:
            body = produce_body(topic, 0, [b"plain"])
            self.assertEqual(c.request(PRODUCE, PRODUCE_V, body).responses[0]
                             .partition_responses[0].error_code, 0)
            body = produce_body(topic, 0, [b"hung1", b"hung2"], producer_id=4242, producer_epoch=3,
                                base_sequence=0, is_transactional=True)
            body.transactional_id = "unknown-to-the-coordinator"
            self.assertEqual(c.request(PRODUCE, PRODUCE_V, body).responses[0]
                             .partition_responses[0].error_code, 0)
            body = produce_body(topic, 0, [b"after"])
            c.request(PRODUCE, PRODUCE_V, body)
        finally:
            c.close()
        self.assertEqual(read_all(bs, topic, "read_committed", 1), [b"plain"])  # stuck at 1
        (row,) = self.rows(self.ok("transactions", "find-hanging", "--topic", topic,
                                   "--max-transaction-timeout", "0"))
        self.assertEqual(row[:6], [topic, "0", "4242", "3", "-1", "1"])
        self.assertEqual(self.rows(self.ok("transactions", "find-hanging", "--topic", topic)), [])
        rc, _, err = run_cli(bs, "transactions", "abort", "--topic", topic, "--partition", "0",
                             "--start-offset", "7")
        self.assertEqual(rc, 1)
        self.assertIn("no open transaction starts at offset 7", err)
        out = self.ok("transactions", "abort", "--topic", topic, "--partition", "0",
                      "--start-offset", "1")
        self.assertIn("producer 4242 (epoch 3)", out)
        self.assertEqual(read_all(bs, topic, "read_committed", 1), [b"after", b"plain"])
        (prow,) = self.rows(self.ok("transactions", "describe-producers", "--topic", topic,
                                    "--partition", "0"))
        self.assertEqual((prow[0], prow[5]), ("4242", "None"))
        (producer,) = json.loads(self.ok("transactions", "describe-producers", "--topic", topic, "--partition", "0",
                                         "--output", "json"))
        self.assertEqual((producer["producerId"], producer["currentTransactionStartOffset"]), (4242, None))
