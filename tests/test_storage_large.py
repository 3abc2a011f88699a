"""A 10 GiB log (sparse files) opens without reading it, and serves reads and appends.

After a clean shutdown the loader must not scan segment data: it trusts the checkpoints and
the indexes, so opening costs the same for 10 GiB as for 10 MiB. Each segment here is one
real batch header claiming 1 GiB over a hole, with an index entry pointing at it; nothing
but the headers the read path touches is ever materialised on disk.
"""

import os
import struct
import time

from twisted.internet import task
from twisted.trial import unittest

from kafkatw.storage import FetchIsolation, LogManager, checkpoint
from tests.test_storage_helpers import make_batch

GIB = 1 << 30
SEGMENTS = 10
RECORDS_PER_SEGMENT = 1000


def build_sparse_log(root, topic="big", partition=0, segments=SEGMENTS, segment_bytes=GIB):
    """Write ``segments`` sparse segments of RECORDS_PER_SEGMENT offsets each."""
    d = os.path.join(root, "%s-%d" % (topic, partition))
    os.makedirs(d)
    base = 0
    for _ in range(segments):
        batch = make_batch(1, 10)
        # one batch header claiming the whole segment: base offset, length, last offset
        # delta and record count rewritten; its body is a hole in a sparse file
        struct.pack_into(">qi", batch, 0, base, segment_bytes - 12)
        struct.pack_into(">i", batch, 23, RECORDS_PER_SEGMENT - 1)
        struct.pack_into(">i", batch, 57, RECORDS_PER_SEGMENT)
        with open(os.path.join(d, "%020d.log" % base), "wb") as f:
            f.write(batch[:61])
            f.truncate(segment_bytes)
        for suffix in (".index", ".timeindex"):
            open(os.path.join(d, "%020d%s" % (base, suffix)), "wb").close()
        base += RECORDS_PER_SEGMENT
    checkpoint.write_offsets(os.path.join(root, checkpoint.RECOVERY_POINT_CHECKPOINT),
                             {(topic, partition): base})
    checkpoint.write_offsets(os.path.join(root, checkpoint.REPLICATION_OFFSET_CHECKPOINT),
                             {(topic, partition): base})
    open(os.path.join(root, checkpoint.CLEAN_SHUTDOWN_FILE), "w").close()
    return d, base


class LargeLogOpenTests(unittest.SynchronousTestCase):
    def test_ten_gib_in_ten_segments(self):
        self.check_open(SEGMENTS, GIB)

    def test_ten_gib_in_a_thousand_segments(self):
        self.check_open(1000, 10 * (1 << 20) + 4096)

    def check_open(self, segments, segment_bytes):
        root = self.mktemp()
        os.makedirs(root)
        d, end = build_sparse_log(root, segments=segments, segment_bytes=segment_bytes)
        apparent = sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d))
        self.assertGreaterEqual(apparent, 10 * 10 ** 9)

        clock = task.Clock()
        clock.advance(time.time())
        started = time.perf_counter()
        manager = LogManager([root], {}, reactor=clock)
        manager.load_logs()
        elapsed = time.perf_counter() - started
        log = manager.get_log("big", 0)
        print("opened a %.1f GiB log of %d segments in %.3f s"
              % (apparent / GIB, len(log.segments), elapsed))

        self.assertEqual(len(log.segments), segments)
        self.assertEqual(log.log_end_offset, end)
        # a read in the middle of the 6th segment lands on that segment's single batch
        info = log.read(5500, 1 << 20, FetchIsolation.LOG_END, True)
        self.assertEqual(info.fetch_offset_metadata.segment_base_offset, 5000)
        self.assertEqual(info.fetch_offset_metadata.relative_position_in_segment, 0)
        self.assertTrue(info.first_entry_incomplete or info.records.count > 0)
        appended = log.append_as_leader(make_batch(1, timestamp=int(time.time() * 1000)), 0)
        self.assertEqual(appended.first_offset, end)
        self.assertEqual(log.log_end_offset, end + 1)
        manager.shutdown()
