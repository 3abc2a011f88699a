"""kafkatw.crash_points: parsing the config value, and that only the armed point's n-th hit
kills (os.kill replaced, so nothing dies here)."""

import os
import signal

from twisted.trial import unittest

from kafkatw import crash_points
from kafkatw.config import ConfigError, KafkaConfig


class CrashPointTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.kills = []
        self.patch(os, "kill", lambda pid, sig: self.kills.append((pid, sig)))
        self.addCleanup(crash_points.arm, None)

    def test_parse(self):
        self.assertEqual(crash_points.parse("log.roll.after_new_segment"),
                         ("log.roll.after_new_segment", 1))
        self.assertEqual(crash_points.parse("checkpoint.after_tmp_written/x:3"),
                         ("checkpoint.after_tmp_written/x", 3))
        for bad in ("nope", "log.roll.after_new_segment:0", "log.roll.after_new_segment:x"):
            self.assertRaises(ValueError, crash_points.parse, bad)

    def test_config_refuses_unknown_points_in_one_line(self):
        with self.assertRaises(ConfigError) as cm:
            KafkaConfig({"kafkatw.test.crash.point": "log.rol"})
        self.assertNotIn("\n", str(cm.exception))
        self.assertIn("unknown crash point 'log.rol'", str(cm.exception))

    def test_only_the_nth_hit_of_the_armed_point_kills(self):
        crash_points.arm("log.roll.after_new_segment:3")
        crash_points.crash_point("log.roll.before_new_segment")
        crash_points.crash_point("log.roll.after_new_segment")
        crash_points.crash_point("log.roll.after_new_segment")
        self.assertEqual(self.kills, [])
        crash_points.crash_point("log.roll.after_new_segment")
        self.assertEqual(self.kills, [(os.getpid(), signal.SIGKILL)])

    def test_detail(self):
        crash_points.arm("checkpoint.after_tmp_written/replication-offset-checkpoint")
        crash_points.crash_point("checkpoint.after_tmp_written", "leader-epoch-checkpoint")
        self.assertEqual(self.kills, [])
        crash_points.crash_point("checkpoint.after_tmp_written", "replication-offset-checkpoint")
        self.assertEqual(len(self.kills), 1)

    def test_unarmed_never_kills(self):
        crash_points.arm(None)
        for name in crash_points.POINTS:
            crash_points.crash_point(name)
        self.assertEqual(self.kills, [])
