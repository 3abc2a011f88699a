"""FileRecords offset search: exact answers, and a caught-up reader's next search reading only
the batches after the last one it found (the search hint), which truncation must forget."""

import os
import shutil
import tempfile

from twisted.trial import unittest

from kafkatw.protocol.records import Record, build_batch
from kafkatw.storage.file_records import FileRecords


def batch(base_offset, n_records=1, value_size=10):
    recs = [Record(key=None, value=b"v" * value_size, timestamp=1000) for _ in range(n_records)]
    return build_batch(recs, base_offset=base_offset)


class SearchTest(unittest.TestCase):
    def setUp(self):
        d = tempfile.mkdtemp(prefix="kafkatw-file-records-")
        self.addCleanup(shutil.rmtree, d, True)
        self.records = FileRecords(os.path.join(d, "00000000000000000000.log"))
        self.addCleanup(self.records.close)
        self.positions = []
        for i in range(100):  # batches of 2 records: offsets 2i and 2i+1
            self.positions.append(self.records.size_in_bytes())
            self.records.append(batch(2 * i, n_records=2))
        self.reads = []
        real = self.records.read_header

        def counting(position, end=None):
            self.reads.append(position)
            return real(position, end)

        self.records.read_header = counting

    def search(self, offset, start=0):
        found = self.records.search_for_offset_from_position(offset, start)
        return None if found is None else (found[0], found[1].base_offset)

    def test_every_offset_found_at_its_batch(self):
        for offset in range(200):
            self.assertEqual(self.search(offset), (self.positions[offset // 2], offset // 2 * 2))
        self.assertIsNone(self.search(200))

    def test_next_offset_of_a_caught_up_reader_reads_from_the_last_batch_found(self):
        self.assertEqual(self.search(150), (self.positions[75], 150))
        self.assertEqual(len(self.reads), 76)
        del self.reads[:]
        self.assertEqual(self.search(151), (self.positions[75], 150))
        self.assertEqual(self.reads, [self.positions[75]])
        del self.reads[:]
        self.assertEqual(self.search(152), (self.positions[76], 152))
        self.assertEqual(self.reads, [self.positions[75], self.positions[76]])

    def test_an_earlier_offset_scans_from_the_start_position_again(self):
        self.search(150)
        del self.reads[:]
        self.assertEqual(self.search(10), (self.positions[5], 10))
        self.assertEqual(self.reads, self.positions[:6])

    def test_a_later_start_position_than_the_hint_wins(self):
        self.search(20)
        del self.reads[:]
        self.assertEqual(self.search(180, start=self.positions[88]), (self.positions[90], 180))
        self.assertEqual(self.reads, self.positions[88:91])

    def test_appends_after_the_hint_are_found(self):
        self.assertIsNone(self.search(200))
        self.search(198)
        self.records.append(batch(200, n_records=3))
        self.assertEqual(self.search(202), (self.positions[-1] + len(batch(0, n_records=2)), 200))

    def test_truncation_below_the_hint_forgets_it(self):
        self.assertEqual(self.search(160), (self.positions[80], 160))
        self.records.truncate_to(self.positions[40])
        # re-append other batches from offset 80: one batch of 50 records, larger than before
        self.records.append(batch(80, n_records=50))
        self.records.append(batch(130, n_records=50))
        second = self.positions[40] + len(batch(80, n_records=50))
        self.assertEqual(self.search(160), (second, 130))
        self.assertEqual(self.search(100), (self.positions[40], 80))

    def test_truncation_above_the_hint_keeps_answers_exact(self):
        self.search(20)
        self.records.truncate_to(self.positions[50])
        self.assertEqual(self.search(21), (self.positions[10], 20))
        self.assertIsNone(self.search(100))


class AppendTest(unittest.TestCase):
    """An append writes the buffer it is given (bytes, bytearray or a memoryview of part of
    one) in one pwrite, and the rest after a short write."""

    def setUp(self):
        d = tempfile.mkdtemp(prefix="kafkatw-file-records-")
        self.addCleanup(shutil.rmtree, d, True)
        self.records = FileRecords(os.path.join(d, "00000000000000000000.log"))
        self.addCleanup(self.records.close)

    def test_buffers_of_every_kind_are_written_at_the_end(self):
        one, two, three = batch(0), batch(1), batch(2)
        outer = bytearray(b"xx" + two + b"yy")
        for buf in (one, memoryview(outer)[2:2 + len(two)], bytearray(three)):
            self.assertEqual(self.records.append(buf), len(buf))
        self.assertEqual(self.records.size_in_bytes(), len(one) + len(two) + len(three))
        self.assertEqual(self.records.read(0, self.records.size_in_bytes()), one + two + three)

    def test_a_short_write_is_followed_by_the_rest(self):
        real = os.pwrite
        calls = []

        def short(fd, data, offset):
            calls.append((bytes(data), offset))
            return real(fd, bytes(data)[:5], offset)

        self.patch(os, "pwrite", short)
        data = batch(0)
        self.records.append(data)
        self.assertEqual(self.records.size_in_bytes(), len(data))
        self.assertEqual(calls[0], (bytes(data), 0))
        self.assertEqual(calls[1], (bytes(data)[5:], 5))
        self.assertEqual(len(calls), (len(data) + 4) // 5)
        self.patch(os, "pwrite", real)
        self.assertEqual(self.records.read(0, len(data)), data)

    def test_a_write_of_nothing_raises(self):
        self.patch(os, "pwrite", lambda fd, data, offset: 0)
        self.assertRaises(OSError, self.records.append, batch(0))
        self.assertEqual(self.records.size_in_bytes(), 0)
