"""The transaction coordinator in process, on real storage, metadata and group coordinator with
task.Clock: InitProducerId epochs and timeout validation, the state machine through EndTxn and
its markers (the LSO held then released), CONCURRENT_TRANSACTIONS while markers are pending,
fencing a producer whose transaction is open, timeouts, transactional id expiry, transactional
offsets visible only on commit, and a restart between EndTxn and the markers (found in
PrepareCommit at load, finished by re-sending them)."""

import os

from twisted.internet import task
from twisted.trial import unittest

from kafkatw.cluster.metadata import ClusterMetadata
from kafkatw.coordinator.group.coordinator import UNSTABLE_OFFSET, GroupCoordinator
from kafkatw.coordinator.txn import metadata as tm
from kafkatw.coordinator.txn.coordinator import TransactionCoordinator
from kafkatw.coordinator.txn.txn_log import TRANSACTION_STATE_TOPIC_NAME
from kafkatw.protocol import errors
from kafkatw.protocol.records import Record, build_batch, iter_batch_headers
from kafkatw.server.replica_manager import ReplicaManager
from kafkatw.storage.manager import LogManager
from kafkatw.storage.offsets import FetchIsolation

CONFIG = {
    "transaction.state.log.num.partitions": 3,
    "offsets.topic.num.partitions": 3,
    "transaction.max.timeout.ms": 60000,
    "transactional.id.expiration.ms": 3600000,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
    "transaction.remove.expired.transaction.cleanup.interval.ms": 60000,
}


class Node:
    """One broker's storage, metadata and both coordinators on ``base`` (a restart is a new
    Node on the same folder; nothing is shut down first, as after kill -9)."""

    def __init__(self, base, clock):
        self.clock = clock
        log_dir = os.path.join(base, "logs")
        self.metadata = ClusterMetadata.load([log_dir], 1)
        self.lm = LogManager([log_dir], {}, reactor=clock)
        self.lm.load_logs()
        self.rm = ReplicaManager(self.lm, self.metadata, clock)
        self.rm.start()
        for info in list(self.metadata.topics.values()):
            for p in range(info.num_partitions):
                self.lm.get_or_create_log(info.name, p, info.topic_id, info.configs)
        self.metadata.add_listener(self._sync_logs)
        self.group = GroupCoordinator(CONFIG, self.metadata, self.rm, self.lm, clock)
        self.txn = TransactionCoordinator(CONFIG, self.metadata, self.rm, self.lm, clock, self.group)
        self.group.startup()
        self.txn.startup()

    def _sync_logs(self, event, info):
        from kafkatw.cluster.metadata import TOPIC_CREATED

        if event == TOPIC_CREATED:
            for p in range(info.num_partitions):
                self.lm.get_or_create_log(info.name, p, info.topic_id, info.configs)

    def stop(self):
        self.txn.shutdown()
        self.group.shutdown()
        self.rm.shutdown()
        self.lm.shutdown()


class CoordinatorTests(unittest.TestCase):
    def setUp(self):
        self.clock = task.Clock()
        self.clock.advance(1700000000)
        self.base = self.mktemp()
        os.makedirs(self.base)
        self.node = Node(self.base, self.clock)
        self.addCleanup(lambda: self.node.stop())
        self.assertEqual(self.node.txn.ensure_state_topic(), errors.NONE)
        self.node.metadata.create_topic("d", 2, {})

    def restart(self):
        """A crash and a new start on the same files; the load runs on the next turns."""
        self.node.txn.shutdown()
        self.node.group.shutdown()
        self.node = Node(self.base, self.clock)

    def turns(self, n=10):
        for _ in range(n):
            self.clock.advance(0)

    def result(self, d):
        return self.successResultOf(d)

    def init(self, tid="tx", timeout=10000, pid=-1, epoch=-1):
        r = self.result(self.node.txn.handle_init_producer_id(tid, timeout, pid, epoch))
        return r.error, r.producer_id, r.producer_epoch

    def data(self, pid, epoch, tp=("d", 0), seq=0, n=2):
        buf = bytearray(build_batch([Record(value=b"v%d" % i) for i in range(n)],
                                    producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                    is_transactional=True))
        return self.node.rm.append_records_now(1000, -1, {tp: buf})[tp].error_code

    def log(self, topic="d", p=0):
        return self.node.lm.get_log(topic, p)

    def headers(self, topic="d", p=0):
        lg = self.log(topic, p)
        data = lg.read(0, 1 << 20, FetchIsolation.LOG_END, True).records.read()
        return [(h.base_offset, h.producer_id, h.producer_epoch, h.is_control)
                for _, h in iter_batch_headers(data)]

    def test_init_producer_id_epochs_and_timeout_checks(self):
        code, pid, epoch = self.init()
        self.assertEqual((code, epoch), (errors.NONE, 0))
        self.assertEqual(self.init(), (errors.NONE, pid, 1))
        self.assertEqual(self.init(timeout=60001)[0], errors.INVALID_TRANSACTION_TIMEOUT)
        self.assertEqual(self.init(timeout=0)[0], errors.INVALID_TRANSACTION_TIMEOUT)
        # KIP-360: the current id/epoch bumps; its retry (the answer lost) gets the same epoch;
        # an older epoch or an unknown id is fenced
        self.assertEqual(self.init(pid=pid, epoch=1), (errors.NONE, pid, 2))
        self.assertEqual(self.init(pid=pid, epoch=1), (errors.NONE, pid, 2))
        self.assertEqual(self.init(pid=pid, epoch=0)[0], errors.PRODUCER_FENCED)
        self.assertEqual(self.init(pid=pid + 100, epoch=0)[0], errors.PRODUCER_FENCED)
        # a fresh producer (no id) bumps and forgets the last epoch: the one it fenced cannot
        # pass for a retry
        self.assertEqual(self.init(), (errors.NONE, pid, 3))
        self.assertEqual(self.init(pid=pid, epoch=2)[0], errors.PRODUCER_FENCED)
        txn = self.node.txn.transactions["tx"]
        self.assertEqual((txn.state, txn.producer_epoch), (tm.EMPTY, 3))

    def test_commit_holds_lso_until_markers(self):
        _, pid, epoch = self.init()
        self.assertEqual(self.result(self.node.txn.handle_add_partitions(
            "tx", pid, epoch, [("d", 0), ("d", 1)])), errors.NONE)
        self.assertEqual(self.data(pid, epoch), errors.NONE)
        self.assertEqual((self.log().high_watermark, self.log().last_stable_offset), (2, 0))
        self.assertEqual(self.result(self.node.txn.handle_end_transaction("tx", pid, epoch, True)),
                         errors.NONE)
        txn = self.node.txn.transactions["tx"]
        self.assertEqual(txn.state, tm.PREPARE_COMMIT)
        self.assertEqual(self.log().last_stable_offset, 0)  # markers not written yet
        self.assertEqual(self.result(self.node.txn.handle_add_partitions(
            "tx", pid, epoch, [("d", 0)])), errors.CONCURRENT_TRANSACTIONS)
        self.assertEqual(self.init()[0], errors.CONCURRENT_TRANSACTIONS)
        self.turns()
        self.assertEqual((txn.state, txn.partitions), (tm.COMPLETE_COMMIT, set()))
        self.assertEqual(self.headers(), [(0, pid, 0, False), (2, pid, 0, True)])
        self.assertEqual(self.headers("d", 1), [(0, pid, 0, True)])
        self.assertEqual(self.log().last_stable_offset, 3)
        self.assertEqual(self.log().active_segment.txn_index.entries, [])
        # a retried commit is answered NONE, an abort now is the wrong state
        self.assertEqual(self.result(self.node.txn.handle_end_transaction("tx", pid, epoch, True)),
                         errors.NONE)
        self.assertEqual(self.result(self.node.txn.handle_end_transaction("tx", pid, epoch, False)),
                         errors.INVALID_TXN_STATE)
        self.assertEqual(self.result(self.node.txn.handle_end_transaction("tx", pid, epoch + 1, True)),
                         errors.PRODUCER_FENCED)

    def test_failed_marker_is_retried_on_its_partition_only(self):
        _, pid, epoch = self.init()
        self.result(self.node.txn.handle_add_partitions("tx", pid, epoch, [("d", 0), ("d", 1)]))
        self.data(pid, epoch, ("d", 0))
        self.data(pid, epoch, ("d", 1))
        self.log("d", 1).mark_offline()  # its markers fail with KAFKA_STORAGE_ERROR
        self.result(self.node.txn.handle_end_transaction("tx", pid, epoch, True))
        self.turns()
        self.clock.advance(0.5)  # retried every 100 ms meanwhile
        txn = self.node.txn.transactions["tx"]
        self.assertEqual(txn.state, tm.PREPARE_COMMIT)
        self.assertEqual(self.log("d", 1).last_stable_offset, 0)
        self.log("d", 1)._offline = False  # the disk is back
        self.clock.advance(0.1)
        self.turns()
        self.assertEqual(txn.state, tm.COMPLETE_COMMIT)
        self.assertEqual(self.headers("d", 0), [(0, pid, 0, False), (2, pid, 0, True)])
        self.assertEqual(self.headers("d", 1), [(0, pid, 0, False), (2, pid, 0, True)])

    def test_restart_between_end_txn_and_markers(self):
        _, pid, epoch = self.init()
        self.result(self.node.txn.handle_add_partitions("tx", pid, epoch, [("d", 0)]))
        self.data(pid, epoch)
        self.assertEqual(self.result(self.node.txn.handle_end_transaction("tx", pid, epoch, True)),
                         errors.NONE)
        self.restart()  # before the markers' reactor turn
        self.assertEqual(self.log().last_stable_offset, 0)
        self.assertEqual(self.init()[0], errors.COORDINATOR_LOAD_IN_PROGRESS)
        self.assertEqual(self.node.txn.handle_list_transactions(),
                         (errors.COORDINATOR_LOAD_IN_PROGRESS, [], []))
        self.turns()
        self.assertEqual(self.node.txn.transactions["tx"].state, tm.COMPLETE_COMMIT)
        self.assertEqual(self.headers(), [(0, pid, 0, False), (2, pid, 0, True)])
        self.assertEqual(self.log().last_stable_offset, 3)

    def test_new_producer_fences_open_transaction(self):
        _, pid, epoch = self.init()
        self.result(self.node.txn.handle_add_partitions("tx", pid, epoch, [("d", 0)]))
        self.data(pid, epoch)
        self.assertEqual(self.init(), (errors.CONCURRENT_TRANSACTIONS, -1, -1))
        self.turns()
        txn = self.node.txn.transactions["tx"]
        self.assertEqual((txn.state, txn.producer_epoch), (tm.COMPLETE_ABORT, 1))
        self.assertEqual(self.headers(), [(0, pid, 0, False), (2, pid, 1, True)])
        self.assertEqual(len(self.log().active_segment.txn_index.entries), 1)
        self.assertEqual(self.init(), (errors.NONE, pid, 2))
        # the zombie: its coordinator calls, its data and its KIP-360 recovery are refused
        self.assertEqual(self.init(pid=pid, epoch=epoch)[0], errors.PRODUCER_FENCED)
        self.assertEqual(self.result(self.node.txn.handle_add_partitions(
            "tx", pid, epoch, [("d", 1)])), errors.PRODUCER_FENCED)
        self.assertEqual(self.data(pid, epoch, seq=2), errors.INVALID_PRODUCER_EPOCH)

    def test_timed_out_transaction_is_aborted(self):
        _, pid, epoch = self.init(timeout=5000)
        self.result(self.node.txn.handle_add_partitions("tx", pid, epoch, [("d", 0)]))
        self.data(pid, epoch)
        self.clock.advance(5)
        self.turns()
        self.assertEqual(self.node.txn.transactions["tx"].state, tm.ONGOING)
        self.clock.advance(1.5)  # past 5 s, and the 1 s check ran
        self.turns()
        txn = self.node.txn.transactions["tx"]
        self.assertEqual((txn.state, txn.producer_epoch), (tm.COMPLETE_ABORT, 1))
        self.assertEqual(self.log().last_stable_offset, 3)
        self.assertEqual(self.result(self.node.txn.handle_end_transaction("tx", pid, epoch, True)),
                         errors.PRODUCER_FENCED)

    def test_transactional_id_expires(self):
        self.node.txn.id_expiration_ms = 10000
        _, pid, _ = self.init()
        self.clock.advance(60)
        self.turns()
        self.assertNotIn("tx", self.node.txn.transactions)
        self.restart()
        self.turns()
        self.assertNotIn("tx", self.node.txn.transactions)
        code, new_pid, epoch = self.init()
        self.assertEqual((code, epoch), (errors.NONE, 0))
        self.assertNotEqual(new_pid, pid)

    def test_txn_offsets_visible_on_commit_only_and_after_load(self):
        group = self.node.group
        self.assertEqual(group.ensure_offsets_topic(), errors.NONE)
        self.turns()
        _, pid, epoch = self.init()
        self.assertEqual(self.result(self.node.txn.handle_add_offsets("tx", pid, epoch, "g")),
                         errors.NONE)
        res = self.result(group.handle_txn_commit_offsets("g", pid, epoch, None, None, -1,
                                                          {("d", 0): (5, -1, "m")}))
        self.assertEqual(res, {("d", 0): errors.NONE})
        self.assertEqual(group.handle_fetch_offsets("g", [("d", 0)])[1], {("d", 0): None})
        # require_stable: the held partition answers UNSTABLE_OFFSET_COMMIT, the group NONE
        # (Kafka's per-partition error; librdkafka retries it, a group error it gives up on)
        self.assertEqual(group.handle_fetch_offsets("g", [("d", 0), ("d", 1)], True),
                         (errors.NONE, {("d", 0): UNSTABLE_OFFSET, ("d", 1): None}))
        group.cleanup_group_metadata()  # an empty group holding only pending offsets stays
        self.assertIn("g", group.groups)
        self.result(self.node.txn.handle_end_transaction("tx", pid, epoch, True))
        self.turns()
        self.assertEqual(group.handle_fetch_offsets("g", [("d", 0)])[1][("d", 0)].offset, 5)
        # a second transaction's offsets are aborted
        self.result(self.node.txn.handle_add_offsets("tx", pid, epoch, "g"))
        self.result(group.handle_txn_commit_offsets("g", pid, epoch, None, None, -1,
                                                    {("d", 0): (9, -1, "")}))
        self.result(self.node.txn.handle_end_transaction("tx", pid, epoch, False))
        self.turns()
        self.assertEqual(group.handle_fetch_offsets("g", [("d", 0)])[1][("d", 0)].offset, 5)
        self.restart()
        self.turns()
        self.assertEqual(self.node.group.handle_fetch_offsets("g", [("d", 0)])[1][("d", 0)].offset, 5)

    def test_describe_and_list(self):
        _, pid, epoch = self.init("a")
        self.init("b")
        self.result(self.node.txn.handle_add_partitions("a", pid, epoch, [("d", 1)]))
        code, txn = self.node.txn.handle_describe_transactions("a")
        self.assertEqual((code, txn.state, txn.partitions), (errors.NONE, tm.ONGOING, {("d", 1)}))
        self.assertEqual(self.node.txn.handle_describe_transactions("nope")[0],
                         errors.TRANSACTIONAL_ID_NOT_FOUND)
        _, unknown, txns = self.node.txn.handle_list_transactions(["Ongoing", "Bogus"])
        self.assertEqual((unknown, [t.transactional_id for t in txns]), (["Bogus"], ["a"]))
        _, _, txns = self.node.txn.handle_list_transactions([], [pid])
        self.assertEqual([t.transactional_id for t in txns], ["a"])
        self.clock.advance(0.5)
        _, _, txns = self.node.txn.handle_list_transactions(["Ongoing"], duration_filter=400)
        self.assertEqual([t.transactional_id for t in txns], ["a"])
        _, _, txns = self.node.txn.handle_list_transactions(["Ongoing"], duration_filter=500)
        self.assertEqual(txns, [])  # running 500 ms: not longer than 500
        # Kafka measures from the start timestamp whatever the state (-1 for "b": kept)
        _, _, txns = self.node.txn.handle_list_transactions(duration_filter=600)
        self.assertEqual([t.transactional_id for t in txns], ["b"])
        self.assertEqual(sorted(t.transactional_id for t in
                                self.node.txn.handle_list_transactions()[2]), ["a", "b"])
        self.assertTrue(self.node.metadata.contains_topic(TRANSACTION_STATE_TOPIC_NAME))
