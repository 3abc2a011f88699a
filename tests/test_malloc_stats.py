"""The fuzzer's view of where memory is held (tests/memhook/malloc_stats.py), measured in a
fresh interpreter: in a trial worker that has run other tests, free room in old arenas can
take the new blocks and other threads (a client library's, a thread pool's) allocate and free
meanwhile, so the figures would say more of the earlier tests than of the probe."""

import json
import os
import subprocess
import sys

from twisted.trial import unittest

_PROBE = r"""
import json
from tests.memhook import malloc_stats
before = malloc_stats.stats(trim=False)
small = [bytearray(100) for _ in range(50000)]  # ~7.6 MB of pymalloc blocks
large = [bytearray(4096) for _ in range(1000)]  # 4 MB from glibc's heap
during = malloc_stats.stats(trim=False)
del small, large
after = malloc_stats.stats(trim=True)
print(json.dumps({"before": before, "during": during, "after": after}))
"""


class MallocStatsTests(unittest.SynchronousTestCase):
    def test_small_objects_count_in_pymalloc_large_ones_in_glibc(self):
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        out = subprocess.run([sys.executable, "-c", _PROBE], cwd=root, env=env, check=True,
                             capture_output=True, text=True, timeout=120).stdout
        seen = json.loads(out.splitlines()[-1])
        before, during, after = seen["before"], seen["during"], seen["after"]
        grew_small = (during["pymalloc"]["allocated_blocks_bytes"]
                      - before["pymalloc"]["allocated_blocks_bytes"])
        grew_large = during["glibc"]["in_use_bytes"] - before["glibc"]["in_use_bytes"]
        self.assertGreater(grew_small, 7 * 1024 * 1024)
        self.assertGreater(grew_large, 4 * 1000 * 1024)
        self.assertGreater(during["pymalloc"]["arenas"], before["pymalloc"]["arenas"])
        self.assertLess(after["pymalloc"]["allocated_blocks_bytes"],
                        before["pymalloc"]["allocated_blocks_bytes"] + 1024 * 1024)
        self.assertIsInstance(after["rss_kb_after_malloc_trim"], int)
        self.assertEqual(after["mappings"]["deleted_files"], 0)
        self.assertGreaterEqual(after["glibc"]["arenas"], 1)
