"""The short form of the wire fuzzer (tests/wire_fuzz.py): 3,000 mutated requests of every
advertised API against a real broker, with a control connection answered throughout; the
broker survives with a clean log and its descriptors and memory back at the baseline. The
long form and its last result: docs/reliability.md."""

from twisted.trial import unittest

from kafkatw.testing import KafkaBroker
from tests import wire_fuzz


class WireFuzzTests(unittest.SynchronousTestCase):
    def test_short_wire_fuzz(self):
        with KafkaBroker(overrides=wire_fuzz.BROKER_PROPS) as broker:
            s = wire_fuzz.run(broker, 3000, connections=8, seed=26, time_limit=120)
        self.assertEqual(s["errors"], [])
        self.assertTrue(s["broker_running"])
        self.assertEqual(s["bad_log_lines"], [])
        self.assertEqual(s["requests"], 3000)
        # every request was answered (with its correlation id), closed or parked
        self.assertGreaterEqual(s["answered"] + s["closed_by_broker"] + s["parked_then_dropped"],
                                3000)
        self.assertLessEqual(s["answered"] + s["parked_then_dropped"], 3000)
        self.assertGreater(s["answered"], 300)
        self.assertGreaterEqual(s["apis"], 25)
        self.assertGreater(s["control_answers"], 0)
        self.assertLess(s["control_max_latency_ms"], 2000)
        self.assertEqual(s["fds_after"], s["fds_before"])
        self.assertLess(s["rss_kb_after"], s["rss_kb_before"] + 40 * 1024)
        # what the fuzzed requests made is gone: nothing left to remove, no group left
        self.assertEqual(s["removed_by_clean_up"]["groups_left"], 0)
        self.assertEqual(s["partition_dirs_at_end_of_clean_up"], 0)
        # with it gone, what is left above the baseline is the allocator's and modules imported
        # on first use (docs/reliability.md: +0.4 MB after 40,000 requests)
        self.assertLess(s["rss_kb_after_clean_up"], s["rss_kb_before"] + 10 * 1024)
