"""The shortened soak (tests/soak.py): 30 s of the mixed workload (every codec, a consumer
group, compaction, retention, topics created and deleted, connections opened and closed)
sampled every 5 s; no client error, a clean broker log, RSS and descriptors not growing.
The hour and its last result: docs/performance.md."""

from twisted.trial import unittest

from kafkatw.testing import KafkaBroker
from tests import soak


class SoakTests(unittest.SynchronousTestCase):
    def test_short_soak(self):
        with KafkaBroker(overrides=soak.BROKER_PROPS) as broker:
            r = soak.run(broker, 30, 5)
        self.assertEqual(r["errors"], [])
        self.assertTrue(r["broker_running"])
        self.assertEqual(r["bad_log_lines"], [])
        self.assertEqual(len(r["samples"]), 6)
        counts = r["counts"]
        self.assertGreater(counts["produced"], 1000)
        self.assertGreater(counts["consumed"], 1000)
        self.assertGreater(counts["topics_churned"], 5)
        self.assertGreater(counts["connections"], 50)
        self.assertTrue(r["verdict"]["rss_bounded"], r["samples"])
        self.assertTrue(r["verdict"]["fds_bounded"], r["samples"])
        self.assertLess(r["verdict"]["max_stall_ms"], 2000, r["samples"])
