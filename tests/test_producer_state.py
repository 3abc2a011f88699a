"""Tests for kafkatw.storage.producer_state: duplicates, sequence/epoch checks, snapshots, rebuild, expiry."""

import os

from twisted.trial import unittest

from kafkatw.protocol import errors
from kafkatw.protocol.records import BatchHeader, TRANSACTIONAL_FLAG_MASK, CONTROL_FLAG_MASK
from kafkatw.storage.producer_state import (
    ProducerStateManager,
    snapshot_file_name,
)


def hdr(pid, epoch, seq, count=1, base_offset=0, ts=1000, attributes=0):
    return BatchHeader(base_offset=base_offset, batch_length=49 + 10 * count, partition_leader_epoch=0,
                       magic=2, crc=0, attributes=attributes, last_offset_delta=count - 1,
                       base_timestamp=ts, max_timestamp=ts, producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, records_count=count)


class ChecksTests(unittest.TestCase):
    def setUp(self):
        self.m = ProducerStateManager(self.mktemp())
        self.offset = 0

    def append(self, h):
        res = self.m.check(h)
        self.assertEqual(res.error, errors.NONE, res.message)
        self.assertIsNone(res.duplicate)
        first = self.offset
        self.offset += h.last_offset_delta + 1
        self.m.update(h, first, self.offset - 1)
        return first

    def test_non_idempotent_always_ok(self):
        self.assertEqual(self.m.check(hdr(-1, -1, -1)).error, errors.NONE)
        self.m.update(hdr(-1, -1, -1), 0, 0)
        self.assertEqual(self.m.producers, {})
        self.assertEqual(self.m.map_end_offset, 1)

    def test_in_sequence_and_duplicates_of_last_five(self):
        offsets = [self.append(hdr(7, 0, seq * 2, count=2)) for seq in range(6)]
        self.assertEqual(offsets, [0, 2, 4, 6, 8, 10])
        self.assertEqual(len(self.m.last_entry(7).batches), 5)
        # batches 1..5 are retained: each answers as a duplicate with its original offsets
        for i in range(1, 6):
            res = self.m.check(hdr(7, 0, i * 2, count=2))
            self.assertEqual(res.error, errors.NONE)
            self.assertEqual((res.duplicate.first_offset, res.duplicate.last_offset),
                             (offsets[i], offsets[i] + 1))
        # batch 0 fell out of the window: out of order
        self.assertEqual(self.m.check(hdr(7, 0, 0, count=2)).error, errors.OUT_OF_ORDER_SEQUENCE_NUMBER)

    def test_gap_is_out_of_order(self):
        self.append(hdr(7, 0, 0, count=3))
        self.assertEqual(self.m.check(hdr(7, 0, 4)).error, errors.OUT_OF_ORDER_SEQUENCE_NUMBER)
        self.assertEqual(self.m.check(hdr(7, 0, 3)).error, errors.NONE)
        # same first seq but different length is not a duplicate
        self.assertEqual(self.m.check(hdr(7, 0, 0, count=2)).error, errors.OUT_OF_ORDER_SEQUENCE_NUMBER)

    def test_sequence_wraps(self):
        self.append(hdr(7, 0, 0x7FFFFFFF - 1, count=2))  # last seq = 2**31-1
        self.assertEqual(self.m.check(hdr(7, 0, 0)).error, errors.NONE)

    def test_fenced_epoch(self):
        self.append(hdr(7, 3, 0))
        res = self.m.check(hdr(7, 2, 1))
        self.assertEqual(res.error, errors.INVALID_PRODUCER_EPOCH)
        self.assertEqual(res.error, 47)

    def test_new_epoch_must_start_at_zero(self):
        self.append(hdr(7, 0, 0))
        self.assertEqual(self.m.check(hdr(7, 1, 5)).error, errors.OUT_OF_ORDER_SEQUENCE_NUMBER)
        self.append(hdr(7, 1, 0))
        self.assertEqual(self.m.last_entry(7).producer_epoch, 1)
        self.assertEqual(len(self.m.last_entry(7).batches), 1)
        # a duplicate of the old epoch is no longer recognised: it is fenced
        self.assertEqual(self.m.check(hdr(7, 0, 0)).error, errors.INVALID_PRODUCER_EPOCH)

    def test_unknown_producer_accepts_any_sequence(self):
        # Kafka 4.0 (KIP-360): no state -> accept, no UNKNOWN_PRODUCER_ID
        self.assertEqual(self.m.check(hdr(9, 0, 42)).error, errors.NONE)

    def test_multi_batch_request_checked_in_order(self):
        self.append(hdr(7, 0, 0))
        ok = self.m.check_batches([hdr(7, 0, 1), hdr(7, 0, 2, count=3), hdr(8, 0, 0)])
        self.assertEqual(ok.error, errors.NONE)
        bad = self.m.check_batches([hdr(7, 0, 1), hdr(7, 0, 3)])
        self.assertEqual(bad.error, errors.OUT_OF_ORDER_SEQUENCE_NUMBER)

    def test_transactional_and_marker(self):
        self.append(hdr(7, 0, 0, attributes=TRANSACTIONAL_FLAG_MASK))
        self.assertEqual(self.m.last_entry(7).current_txn_first_offset, 0)
        self.m.update(hdr(7, 0, -1, attributes=TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK), 1, 1)
        self.assertEqual(self.m.last_entry(7).current_txn_first_offset, -1)
        self.assertEqual(self.m.map_end_offset, 2)

    def test_open_transactions_give_the_first_unstable_offset_and_never_expire(self):
        from kafkatw.storage.producer_state import CompletedTxn

        self.m.producer_id_expiration_ms = 1000
        txn = TRANSACTIONAL_FLAG_MASK
        self.m.update(hdr(7, 0, 0, attributes=txn, ts=5000), 3, 3)
        self.m.update(hdr(8, 0, 0, attributes=txn, ts=5000), 4, 5)
        self.m.update(hdr(7, 0, 1, attributes=txn, ts=5000), 6, 6)
        self.assertEqual((self.m.ongoing_txns, self.m.first_unstable_offset()), ({7: 3, 8: 4}, 3))
        self.assertEqual(self.m.remove_expired_producers(60000), [])
        done = self.m.update(hdr(7, 0, -1, attributes=txn | CONTROL_FLAG_MASK, ts=5000), 7, 7,
                             is_abort=True)
        self.assertEqual(done, CompletedTxn(7, 3, 7, True))
        self.assertEqual(self.m.last_stable_offset(done), 4)  # producer 8's still open
        self.assertEqual(self.m.first_unstable_offset(), 4)
        self.assertEqual(self.m.remove_expired_producers(60000), [7])  # 8 is still in a txn
        done = self.m.update(hdr(8, 0, -1, attributes=txn | CONTROL_FLAG_MASK), 8, 8, is_abort=False)
        self.assertEqual((done, self.m.last_stable_offset(done)), (CompletedTxn(8, 4, 8, False), 9))
        self.assertIsNone(self.m.first_unstable_offset())
        # a marker without an open transaction completes nothing
        self.assertIsNone(self.m.update(hdr(8, 0, -1, attributes=txn | CONTROL_FLAG_MASK), 9, 9))

    def test_expiry(self):
        self.m.producer_id_expiration_ms = 1000
        self.append(hdr(7, 0, 0, ts=5000))
        self.append(hdr(8, 0, 0, ts=5500))
        self.assertEqual(self.m.remove_expired_producers(6000), [7])
        self.assertEqual(list(self.m.producers), [8])
        self.assertEqual(self.m.remove_expired_producers(6499), [])


class SnapshotTests(unittest.TestCase):
    def setUp(self):
        self.dir = self.mktemp()
        os.makedirs(self.dir)

    def fill(self, m):
        off = 0
        for pid in (1, 2):
            for seq in range(7):
                h = hdr(pid, 4, seq, base_offset=off, ts=100 + off)
                m.update(h, off, off)
                off += 1
        return off

    def test_round_trip(self):
        m = ProducerStateManager(self.dir)
        end = self.fill(m)
        path = m.take_snapshot()
        self.assertEqual(os.path.basename(path), snapshot_file_name(end))
        self.assertEqual(os.path.basename(path), "%020d.snapshot" % end)
        m2 = ProducerStateManager(self.dir)
        self.assertEqual(m2.load(0, end), end)
        self.assertEqual(sorted(m2.producers), [1, 2])
        for pid in (1, 2):
            self.assertEqual(m2.last_entry(pid).batches, m.last_entry(pid).batches)
            self.assertEqual(m2.last_entry(pid).producer_epoch, 4)
        # duplicates survive the restart
        self.assertEqual(m2.check(hdr(2, 4, 6)).duplicate.first_offset, 13)

    def test_corrupt_snapshot_falls_back_to_older_then_rebuild(self):
        m = ProducerStateManager(self.dir)
        m.update(hdr(1, 0, 0), 0, 0)
        m.take_snapshot()  # at 1
        m.update(hdr(1, 0, 1, base_offset=1), 1, 1)
        path = m.take_snapshot()  # at 2
        with open(path, "r+b") as f:
            f.seek(20)
            b = f.read(1)
            f.seek(20)
            f.write(bytes([b[0] ^ 0xFF]))
        m2 = ProducerStateManager(self.dir)
        self.assertEqual(m2.load(0, 2), 1)
        self.assertFalse(os.path.exists(path))
        self.assertEqual(m2.last_entry(1).last_seq, 0)
        # replay the log from 1: header at offset 0 is skipped, 1 applied
        n = m2.rebuild([(0, hdr(1, 0, 0, base_offset=0)), (70, hdr(1, 0, 1, base_offset=1))])
        self.assertEqual(n, 1)
        self.assertEqual(m2.last_entry(1).last_seq, 1)
        self.assertEqual(m2.map_end_offset, 2)

    def test_snapshot_beyond_log_end_is_dropped(self):
        m = ProducerStateManager(self.dir)
        m.update(hdr(1, 0, 0), 0, 0)
        m.take_snapshot(5)
        m2 = ProducerStateManager(self.dir)
        self.assertEqual(m2.load(0, 3), 0)
        self.assertEqual(m2.snapshot_offsets(), [])
        self.assertEqual(m2.producers, {})

    def test_rebuild_without_snapshot(self):
        m = ProducerStateManager(self.dir)
        self.assertEqual(m.load(0, 10), 0)
        headers = [hdr(5, 1, i * 2, count=2, base_offset=i * 2) for i in range(5)]
        self.assertEqual(m.rebuild(headers), 5)
        self.assertEqual(m.check(hdr(5, 1, 8, count=2)).duplicate.first_offset, 8)
        self.assertEqual(m.check(hdr(5, 1, 10)).error, errors.NONE)

    def test_load_forgets_producers_below_log_start(self):
        m = ProducerStateManager(self.dir)
        m.update(hdr(1, 0, 0), 0, 0)
        m.update(hdr(2, 0, 0, base_offset=5), 5, 5)
        m.take_snapshot()
        m2 = ProducerStateManager(self.dir)
        self.assertEqual(m2.load(3, 6), 6)
        self.assertEqual(list(m2.producers), [2])

    def test_delete_snapshots_before(self):
        m = ProducerStateManager(self.dir)
        for off in (1, 5, 9):
            m.take_snapshot(off)
        m.delete_snapshots_before(5)
        self.assertEqual(m.snapshot_offsets(), [5, 9])
        self.assertEqual(m.latest_snapshot_offset(), 9)

    def test_decode_rejects_garbage(self):
        with self.assertRaises(ValueError):
            ProducerStateManager.decode_snapshot(b"nope" * 10)
        good = ProducerStateManager(self.dir).encode_snapshot()
        self.assertEqual(ProducerStateManager.decode_snapshot(good), {})
        with self.assertRaises(ValueError):
            ProducerStateManager.decode_snapshot(good + b"\0")
