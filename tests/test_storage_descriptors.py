"""Storage's descriptor budget: the LRU cache of open segment descriptors and index mappings,
slices that keep their descriptor while sent, the process's descriptor count staying bounded
with many segments, and resource errors (EMFILE) failing one operation while the log dir
stays online."""

import errno
import mmap
import os

from twisted.internet import task
from twisted.trial import unittest

from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError
from kafkatw.protocol.parts import region_done
from kafkatw.protocol.records import iter_batch_headers
from kafkatw.storage import LogManager, descriptors
from kafkatw.storage.file_records import FileRecords
from kafkatw.storage.index import OffsetIndex

from .test_storage_helpers import make_batch


def open_fds(under=None):
    """Descriptors this process holds (on files under ``under`` if given)."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + name)
        except OSError:
            continue
        if under is None or target.startswith(os.path.abspath(under) + os.sep):
            count += 1
    return count


class Owner:
    def __init__(self, name, dropped):
        self.name = name
        self.dropped = dropped

    def _drop_handle(self):
        self.dropped.append(self.name)


class CacheTest(unittest.TestCase):
    def test_least_recently_used_is_dropped_first(self):
        dropped = []
        cache = descriptors.DescriptorCache(2)
        a, b, c = (Owner(n, dropped) for n in "abc")
        cache.opened(a)
        cache.opened(b)
        cache.touch(a)
        cache.opened(c)
        self.assertEqual(dropped, ["b"])
        self.assertEqual((len(cache), cache.evictions), (2, 1))
        cache.closed(a)
        self.assertEqual(len(cache), 1)
        cache.configure(0)  # at least one stays
        self.assertEqual((dropped, len(cache)), (["b"], 1))

    def test_emfile_drops_handles_and_tries_once_more(self):
        dropped = []
        cache = descriptors.DescriptorCache(16)
        for n in range(16):
            cache.opened(Owner(n, dropped))
        calls = []

        def opener():
            calls.append(len(cache))
            if len(calls) == 1:
                raise OSError(errno.EMFILE, "Too many open files")
            return 42

        self.assertEqual(cache.open_retrying(opener), 42)
        self.assertEqual(calls, [16, 14])
        self.assertEqual(dropped, [0, 1])

    def test_emfile_with_nothing_to_drop_and_other_errors_are_raised(self):
        cache = descriptors.DescriptorCache(4)

        def emfile():
            raise OSError(errno.EMFILE, "Too many open files")

        def eio():
            raise OSError(errno.EIO, "Input/output error")

        self.assertEqual(self.assertRaises(OSError, cache.open_retrying, emfile).errno,
                         errno.EMFILE)
        self.assertEqual(self.assertRaises(OSError, cache.open_retrying, eio).errno, errno.EIO)

    def test_resource_errors(self):
        for code in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
            self.assertTrue(descriptors.is_resource_error(OSError(code, "x")))
        self.assertFalse(descriptors.is_resource_error(OSError(errno.EIO, "x")))
        self.assertFalse(descriptors.is_resource_error(ValueError("x")))
        self.assertEqual(descriptors.capacity_for_limit(20000), 8000)
        self.assertEqual(descriptors.capacity_for_limit(10), descriptors.MIN_CAPACITY)


class SmallCacheTest(unittest.TestCase):
    """Storage under a cache of a few descriptors."""

    capacity = 4

    def setUp(self):
        self.cache = descriptors.DescriptorCache(self.capacity)
        old = descriptors.use_cache(self.cache)
        self.addCleanup(descriptors.use_cache, old)
        self.dir = self.mktemp()
        os.makedirs(self.dir)


class FileRecordsTest(SmallCacheTest):
    def test_many_files_with_few_descriptors(self):
        before = open_fds(self.dir)
        files = [FileRecords(os.path.join(self.dir, "%d.log" % i)) for i in range(50)]
        self.assertEqual(open_fds(self.dir), before)  # created, not kept open
        for i, f in enumerate(files):
            f.append(b"record %02d" % i)
            self.assertLessEqual(open_fds(self.dir), before + self.capacity)
        self.assertEqual(sum(f.is_open for f in files), self.capacity)
        for i, f in enumerate(files):
            self.assertEqual(f.read(0, 100), b"record %02d" % i)
        self.assertLessEqual(open_fds(self.dir), before + self.capacity)
        for f in files:
            f.close()
        self.assertEqual(open_fds(self.dir), before)

    def test_a_slice_holds_its_descriptor_only_while_sent(self):
        files = [FileRecords(os.path.join(self.dir, "%d.log" % i)) for i in range(10)]
        for i, f in enumerate(files):
            f.append(b"data of %d" % i)
        regions = [f.slice(0, 100) for f in files]
        before = open_fds(self.dir)
        first = regions[0]
        fd = first.file.fileno()  # the transport starts sending it
        for f in files[1:]:
            f.read(0, 1)  # the cache drops files[0]'s descriptor meanwhile
        self.assertFalse(files[0].is_open)
        self.assertEqual(os.pread(fd, 100, 0), b"data of 0")
        self.assertEqual(first.file.fileno(), fd)
        held = open_fds(self.dir)
        region_done(first)
        self.assertEqual(open_fds(self.dir), held - 1)
        self.assertLessEqual(open_fds(self.dir), before + 1)
        self.assertEqual([r.read() for r in regions], [b"data of %d" % i for i in range(10)])
        self.assertEqual(first.file.name, files[0].path)

    def test_empty_slice_opens_nothing(self):
        f = FileRecords(os.path.join(self.dir, "0.log"))
        region = f.slice(0, 100)
        self.assertEqual(region.count, 0)
        self.assertFalse(f.is_open)


class IndexTest(SmallCacheTest):
    def test_entries_survive_dropped_mappings(self):
        before = open_fds(self.dir)
        indexes = [OffsetIndex(os.path.join(self.dir, "%d.index" % i), 100 * i, 4096)
                   for i in range(20)]
        for n in range(3):
            for i, index in enumerate(indexes):
                index.append(100 * i + 10 * (n + 1), 1000 * n)
                self.assertLessEqual(open_fds(self.dir), before + self.capacity)
        self.assertEqual(sum(ix.is_mapped for ix in indexes), self.capacity)
        for i, index in enumerate(indexes):
            self.assertEqual(index.entries, 3)
            self.assertEqual(index.lookup(100 * i + 25), (100 * i + 20, 1000))
        for index in indexes:
            index.close()
        self.assertEqual(open_fds(self.dir), before)
        # trimmed on close, read back without mapping the tail of zeros
        again = OffsetIndex(indexes[7].path, 700, 4096)
        self.assertEqual(os.path.getsize(again.path), 3 * 8)
        self.assertEqual((again.entries, again.last_entry), (3, (730, 2000)))

    def test_unclean_index_counts_entries_before_the_zeros(self):
        index = OffsetIndex(os.path.join(self.dir, "0.index"), 0, 4096)
        for n in range(5):
            index.append(n + 1, n * 10)
        index.close_handler()  # as a crash leaves it: full length, zeros after the entries
        self.assertEqual(os.path.getsize(index.path), 4096)
        again = OffsetIndex(index.path, 0, 4096)
        self.assertEqual((again.entries, again.last_entry), (5, (5, 40)))


class ManyPartitionsTest(SmallCacheTest):
    capacity = 16

    def test_logs_of_many_partitions_within_the_budget(self):
        clock = task.Clock()
        clock.advance(1_000_000)
        dirs = [os.path.join(self.dir, "d")]
        mgr = LogManager(dirs, {"log.index.interval.bytes": "1"}, reactor=clock)
        mgr.load_logs()
        before = open_fds(self.dir)
        logs = [mgr.get_or_create_log("t", p) for p in range(200)]
        for rounds in range(2):
            for p, lg in enumerate(logs):
                lg.append_as_leader(make_batch(2, timestamp=1_000_000_000 + p), 0)
                self.assertLessEqual(open_fds(self.dir), before + self.capacity)
        # the second batch of each is indexed: every partition's indexes were mapped, 400 mappings
        # and 200 .log descriptors through a cache of 16
        self.assertEqual([lg.active_segment.offset_index.entries for lg in logs], [1] * 200)
        for p, lg in enumerate(logs):
            info = lg.read(2, 10000)
            self.assertEqual(info.records.read(), lg.read(0, 10000).records.read()[
                info.fetch_offset_metadata.relative_position_in_segment:])
            self.assertEqual(lg.log_end_offset, 4)
        del info  # a region read holds its descriptor until it goes
        mgr.shutdown()
        self.assertLessEqual(open_fds(self.dir), before)
        again = LogManager(dirs, {"log.index.interval.bytes": "1"}, reactor=clock)
        again.load_logs()
        self.assertEqual([lg.recovery_log for lg in again.all_logs() if lg.recovery_log], [])
        self.assertEqual(sorted(lg.log_end_offset for lg in again.all_logs()), [4] * 200)
        again.shutdown()


class ResourceErrorTest(SmallCacheTest):
    def test_emfile_fails_the_append_and_the_dir_stays_online(self):
        clock = task.Clock()
        clock.advance(1_000_000)
        mgr = LogManager([os.path.join(self.dir, "d")], {}, reactor=clock)
        mgr.load_logs()
        a = mgr.get_or_create_log("a", 0)
        b = mgr.get_or_create_log("b", 0)
        a.append_as_leader(make_batch(1, timestamp=1_000_000_000), 0)
        b.append_as_leader(make_batch(1, timestamp=1_000_000_000), 0)
        a.active_segment.log._drop_handle()
        real = self.cache.open_retrying

        def no_descriptors(opener):
            raise OSError(errno.EMFILE, "Too many open files")

        self.cache.open_retrying = no_descriptors
        with self.assertRaises(KafkaError) as cm:
            a.append_as_leader(make_batch(1, timestamp=1_000_000_000), 0)
        self.assertEqual(cm.exception.code, errors.KAFKA_STORAGE_ERROR)
        self.assertIn("Too many open files", str(cm.exception))
        with self.assertRaises(KafkaError):
            mgr.get_or_create_log("c", 0)
        b.append_as_leader(make_batch(1, timestamp=1_000_000_000), 0)  # its descriptor is open
        self.assertEqual(mgr.offline_dirs, frozenset())
        self.assertFalse(a.is_offline)
        self.assertEqual(mgr.health()["background_task_failures"],
                         {"log dir operation (the dir stays online)": 2})
        self.cache.open_retrying = real
        self.assertEqual(a.append_as_leader(make_batch(1, timestamp=1_000_000_000), 0).first_offset, 1)
        self.assertEqual(mgr.get_or_create_log("c", 0).log_end_offset, 0)
        mgr.shutdown()


    def test_emfile_at_an_index_page_fails_before_the_log_write(self):
        """An index entry entering a new page first backs it with blocks (pwrite, on a
        descriptor of its own): without a descriptor that must fail the append before the
        batch is written, else the batch stays in the log beyond the log end offset and the
        next append writes its offsets again."""
        clock = task.Clock()
        clock.advance(1_000_000)
        mgr = LogManager([os.path.join(self.dir, "d")], {"log.index.interval.bytes": "1"},
                         reactor=clock)
        mgr.load_logs()
        a = mgr.get_or_create_log("a", 0)
        seg = a.active_segment
        ts = 1_000_000_000
        while (seg.offset_index.entries + 1) * 8 <= mmap.PAGESIZE:
            a.append_as_leader(make_batch(1, timestamp=ts), 0)
            ts += 1
        size, leo = seg.size, a.log_end_offset
        real = self.cache.open_retrying

        def no_descriptors(opener):
            raise OSError(errno.EMFILE, "Too many open files")

        self.cache.open_retrying = no_descriptors
        with self.assertRaises(KafkaError) as cm:
            a.append_as_leader(make_batch(1, timestamp=ts), 0)
        self.assertEqual(cm.exception.code, errors.KAFKA_STORAGE_ERROR)
        self.assertEqual((seg.size, a.log_end_offset), (size, leo))
        self.cache.open_retrying = real
        self.assertEqual(a.append_as_leader(make_batch(1, timestamp=ts), 0).first_offset, leo)
        offsets = [h.base_offset for _pos, h in iter_batch_headers(a.read(0, 1 << 20).records.read())]
        self.assertEqual(offsets, list(range(leo + 1)))
        self.assertFalse(a.is_offline)
        mgr.shutdown()


class DeletedSegmentRegionTest(SmallCacheTest):
    def test_a_slice_of_a_deleted_segment_is_not_a_disk_error(self):
        f = FileRecords(os.path.join(self.dir, "0.log"))
        f.append(b"gone soon")
        region = f.slice(0, 100)
        f.close()
        os.unlink(f.path)
        e = self.assertRaises(OSError, region.file.fileno)
        self.assertEqual(e.errno, errno.ENOENT)
