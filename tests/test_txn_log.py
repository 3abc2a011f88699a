"""The log side of transactions against real storage: producer state tracks open transactions,
the LSO is the first offset of the earliest one, ABORT markers fill the ``.txnindex`` (kept by
restarts, rebuilt by recovery), READ_COMMITTED fetches stop at the LSO with the aborted list,
ListOffsets READ_COMMITTED answers the LSO, and clients cannot write control batches."""

import os

from twisted.internet import defer, task
from twisted.trial import unittest

from kafkatw.protocol import errors
from kafkatw.protocol.records import (ABORT, COMMIT, Record, build_batch, build_control_batch,
                                      iter_batch_headers)
from kafkatw.server.replica_manager import FetchParams, PartitionData, ReplicaManager
from kafkatw.storage.manager import LogManager
from kafkatw.storage.offsets import ORIGIN_COORDINATOR
from kafkatw.storage.txn_index import AbortedTxn

from tests.test_server_replica_manager import FakeMetadata

TP = ("t", 0)


class TxnLogTests(unittest.TestCase):
    def setUp(self):
        self.clock = task.Clock()
        self.clock.advance(1700000000)
        self.dir = self.mktemp()
        self.open()

    def open(self):
        self.md = FakeMetadata({"t": 1})
        self.lm = LogManager([self.dir], {}, reactor=self.clock)
        self.lm.load_logs()
        self.rm = ReplicaManager(self.lm, self.md, self.clock)
        self.rm.start()

    def close(self):
        self.rm.shutdown()
        self.lm.shutdown()

    def data(self, pid, n=2, seq=0, txn=True):
        recs = [Record(key=b"k%d" % i, value=b"v%d" % i) for i in range(n)]
        return bytearray(build_batch(recs, base_timestamp=1700000000000, producer_id=pid,
                                     producer_epoch=0, base_sequence=seq, is_transactional=txn))

    def append(self, buf, origin="client"):
        r = self.rm.append_records_now(1000, -1, {TP: buf}, origin=origin)
        if isinstance(r, defer.Deferred):  # waits for the producer state, rebuilt in slices
            for _ in range(100):
                self.clock.advance(0)
            r = self.successResultOf(r)
        r = r[TP]
        self.assertEqual(r.error_code, errors.NONE, r.error_message)
        return r.base_offset

    def marker(self, pid, kind):
        return self.append(bytearray(build_control_batch(kind, 0, pid, 0)), ORIGIN_COORDINATOR)

    def fetch(self, offset, isolation):
        d = self.rm.fetch_messages(FetchParams(max_wait_ms=0, isolation_level=isolation),
                                   [(TP, PartitionData(offset))])
        return self.successResultOf(d)[0][1]

    @property
    def log(self):
        return self.lm.get_log(*TP)

    def offsets_in(self, data):
        raw = data.records.read() if hasattr(data.records, "read") else bytes(data.records)
        return [(h.base_offset, h.producer_id, h.is_control) for _, h in iter_batch_headers(raw)]

    def test_lso_aborted_index_and_read_committed_fetch(self):
        self.assertEqual(self.append(self.data(7)), 0)          # txn A of 7: 0-1
        self.assertEqual(self.append(self.data(8)), 2)          # txn B of 8: 2-3
        self.assertEqual(self.append(self.data(-1, txn=False)), 4)  # plain: 4-5
        self.assertEqual((self.log.high_watermark, self.log.last_stable_offset), (6, 0))
        committed = self.fetch(0, 1)
        self.assertEqual((committed.last_stable_offset, len(committed.records)), (0, 0))
        self.assertEqual(committed.aborted_transactions, [])
        uncommitted = self.fetch(0, 0)
        self.assertEqual(len(self.offsets_in(uncommitted)), 3)
        self.assertIsNone(uncommitted.aborted_transactions)
        self.assertEqual(self.marker(7, ABORT), 6)
        self.assertEqual(self.log.last_stable_offset, 2)  # B still open
        self.assertEqual(self.marker(8, COMMIT), 7)
        self.assertEqual(self.log.last_stable_offset, 8)
        seg = self.log.active_segment
        self.assertEqual(seg.txn_index.entries, [AbortedTxn(7, 0, 6, 2)])
        self.assertTrue(os.path.exists(seg.txn_index.path))
        self.assertEqual(os.path.getsize(seg.txn_index.path), 34)
        committed = self.fetch(0, 1)
        self.assertEqual(committed.aborted_transactions, [(7, 0)])
        self.assertEqual(self.offsets_in(committed),
                         [(0, 7, False), (2, 8, False), (4, -1, False), (6, 7, True), (7, 8, True)])
        # a fetch from past the aborted range gets no entry
        self.assertEqual(self.fetch(7, 1).aborted_transactions, [])
        # ListOffsets: latest is the LSO for READ_COMMITTED
        self.append(self.data(9))  # open txn at 8-9
        self.assertEqual(self.rm.fetch_offset_for_timestamp(TP, -1, 1).offset, 8)
        self.assertEqual(self.rm.fetch_offset_for_timestamp(TP, -1, 0).offset, 10)

    def test_lso_never_below_the_log_start(self):
        self.append(self.data(7))                      # open at 0-1
        self.append(self.data(-1, txn=False))          # 2-3
        self.assertEqual(self.log.last_stable_offset, 0)
        self.log.delete_records_before(1)
        self.assertEqual(self.log.last_stable_offset, 1)
        self.assertEqual(self.fetch(1, 1).last_stable_offset, 1)

    def test_clients_cannot_write_control_batches(self):
        buf = bytearray(build_control_batch(COMMIT, 0, 7, 0))
        r = self.rm.append_records_now(1000, -1, {TP: buf})[TP]
        self.assertEqual(r.error_code, errors.INVALID_RECORD)
        self.assertEqual(self.log.log_end_offset, 0)

    def test_open_transaction_survives_clean_restart(self):
        self.append(self.data(-1, txn=False))
        self.append(self.data(7))
        self.assertEqual(self.log.last_stable_offset, 2)
        self.close()
        self.open()
        self.assertEqual((self.log.high_watermark, self.log.last_stable_offset), (4, 2))
        self.marker(7, ABORT)
        self.assertEqual(self.log.last_stable_offset, 5)
        self.assertEqual(self.fetch(0, 1).aborted_transactions, [(7, 2)])

    def test_open_transaction_survives_crash_before_any_roll(self):
        self.append(self.data(-1, txn=False))
        self.append(self.data(7))
        # kill -9: no shutdown, so no snapshot at the log end; the one taken when the
        # partition's producer state was first made (at offset 2) is replayed from
        self.open()
        self.assertEqual((self.log.high_watermark, self.log.last_stable_offset), (4, 2))

    def test_logs_without_producers_are_not_read_at_start(self):
        self.append(self.data(-1, txn=False))
        self.close()
        self.open()
        self.assertEqual(self.rm._producer_states, {})
        self.assertEqual(self.log.last_stable_offset, 2)

    def test_recovery_rebuilds_txn_index(self):
        self.append(self.data(7))
        self.append(self.data(8))
        self.marker(7, ABORT)
        self.marker(8, ABORT)
        path = self.log.active_segment.txn_index.path
        self.close()
        os.unlink(path)
        # an unclean stop: no clean-shutdown marker, so the segment is recovered
        for name in os.listdir(self.dir):
            if name.startswith(".kafka_cleanshutdown"):
                os.unlink(os.path.join(self.dir, name))
        os.unlink(os.path.join(self.log.dir, "00000000000000000000.index"))
        self.open()
        self.assertEqual(self.log.active_segment.txn_index.entries,
                         [AbortedTxn(7, 0, 4, 2), AbortedTxn(8, 2, 5, 6)])
        self.assertEqual(os.path.getsize(path), 68)
        self.assertEqual(self.fetch(0, 1).aborted_transactions, [(7, 0), (8, 2)])

    def test_stale_markers_are_refused(self):
        self.append(self.data(7))
        # producer 7 is at epoch 0: a marker of epoch 0 from coordinator epoch 3 ends it
        self.append(bytearray(build_control_batch(ABORT, 3, 7, 0)), ORIGIN_COORDINATOR)
        entry = self.rm.producer_state(*TP).last_entry(7)
        self.assertEqual(entry.coordinator_epoch, 3)
        for buf, code in ((build_control_batch(COMMIT, 2, 7, 0), errors.TRANSACTION_COORDINATOR_FENCED),
                          (build_control_batch(COMMIT, 3, 7, 1), errors.NONE)):
            r = self.rm.append_records_now(1000, -1, {TP: bytearray(buf)},
                                           origin=ORIGIN_COORDINATOR)[TP]
            self.assertEqual(r.error_code, code)
        r = self.rm.append_records_now(1000, -1, {TP: bytearray(build_control_batch(ABORT, 3, 7, 0))},
                                       origin=ORIGIN_COORDINATOR)[TP]
        self.assertEqual(r.error_code, errors.INVALID_PRODUCER_EPOCH)
        self.assertEqual(self.log.log_end_offset, 4)

    def test_corrupt_txn_index_is_rebuilt_even_below_the_recovery_point(self):
        self.append(self.data(7))
        self.marker(7, ABORT)
        path = self.log.active_segment.txn_index.path
        self.close()  # clean: nothing would be recovered
        with open(path, "ab") as f:
            f.write(b"torn")
        self.open()
        self.assertEqual(self.log.active_segment.txn_index.entries, [AbortedTxn(7, 0, 2, 3)])
        self.assertEqual(os.path.getsize(path), 34)

    def test_truncation_drops_index_entries(self):
        self.append(self.data(7))
        self.marker(7, ABORT)
        self.append(self.data(8))
        self.marker(8, ABORT)
        self.assertEqual(len(self.log.active_segment.txn_index.entries), 2)
        self.log.truncate_to(4)
        self.assertEqual(self.log.active_segment.txn_index.entries, [AbortedTxn(7, 0, 2, 3)])
