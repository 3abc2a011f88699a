"""The fuzzer's view of where memory is held (tests/memhook/malloc_stats.py), in process."""

from twisted.trial import unittest

from tests.memhook import malloc_stats


class MallocStatsTests(unittest.SynchronousTestCase):
    def test_small_objects_count_in_pymalloc_large_ones_in_glibc(self):
        before = malloc_stats.stats(trim=False)
        small = [bytearray(100) for _ in range(50000)]  # ~7.6 MB of pymalloc blocks
        large = [bytearray(4096) for _ in range(1000)]  # 4 MB from glibc's heap
        during = malloc_stats.stats(trim=False)
        grew_small = (during["pymalloc"]["allocated_blocks_bytes"]
                      - before["pymalloc"]["allocated_blocks_bytes"])
        grew_large = during["glibc"]["in_use_bytes"] - before["glibc"]["in_use_bytes"]
        self.assertGreater(grew_small, 7 * 1024 * 1024)
        self.assertGreater(grew_large, 4 * 1000 * 1024)
        self.assertGreater(during["pymalloc"]["arenas"], before["pymalloc"]["arenas"])
        del small, large
        after = malloc_stats.stats(trim=True)
        self.assertLess(after["pymalloc"]["allocated_blocks_bytes"],
                        before["pymalloc"]["allocated_blocks_bytes"] + 1024 * 1024)
        self.assertIsInstance(after["rss_kb_after_malloc_trim"], int)
        self.assertEqual(after["mappings"]["deleted_files"], 0)
        self.assertGreaterEqual(after["glibc"]["arenas"], 1)
