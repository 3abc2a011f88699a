"""The reactor stall probe on a task.Clock: what counts as a stall, what is logged."""

import os

from twisted.internet import task
from twisted.logger import LogLevel, globalLogPublisher
from twisted.trial import unittest

from kafkatw.stall_probe import StallLog, StallProbe


class StallProbeTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.clock = task.Clock()
        self.events = []
        globalLogPublisher.addObserver(self.events.append)
        self.addCleanup(globalLogPublisher.removeObserver, self.events.append)
        self.probe = StallProbe(self.clock, 10)
        self.probe.start()
        self.addCleanup(self.probe.stop)

    def stall_lines(self):
        return [e["late_ms"] for e in self.events
                if e.get("log_namespace") == "kafkatw.stall_probe" and e["log_level"] == LogLevel.warn]

    def test_on_time_ticks_are_not_stalls(self):
        for _ in range(50):
            self.clock.advance(0.010)
        self.assertEqual((self.probe.stalls, self.probe.max_late_ms, self.stall_lines()), (0, 0, []))

    def test_a_late_tick_is_logged_with_its_lateness(self):
        self.clock.advance(0.010)
        self.clock.advance(0.250)  # the reactor was held for 240 ms past the next tick
        self.clock.advance(0.019)  # 9 ms late: under one interval, not a stall
        self.assertEqual(self.stall_lines(), [240])
        self.assertEqual((self.probe.stalls, self.probe.max_late_ms), (1, 240))

    def test_stop_cancels_the_timer(self):
        self.probe.stop()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertFalse(self.probe.running)

    def test_interval_must_be_positive(self):
        self.assertRaises(ValueError, StallProbe, self.clock, 0)


class StallLogTests(unittest.SynchronousTestCase):
    def test_reads_the_stalls_logged_after_the_mark(self):
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("2026-12-01T11:00:00+0000 [kafkatw.stall_probe#warn] reactor stall: 900 ms\n")
        mark = StallLog(path).mark()
        with open(path, "a") as f:
            f.write("2026-12-01T11:00:01+0000 [kafkatw.stall_probe#warn] reactor stall: 12 ms\n"
                    "2026-12-01T11:00:01+0000 [other#info] something else\n"
                    "2026-12-01T11:00:02+0000 [kafkatw.stall_probe#warn] reactor stall: 7 ms\n")
        self.assertEqual(mark.stalls(), [12, 7])
        self.assertEqual(StallLog(path).stalls(), [900, 12, 7])

    def test_a_missing_log_marks_its_start(self):
        self.assertEqual(StallLog(self.mktemp()).mark().start, 0)

    def test_reads_across_the_files_rotated_since_the_mark(self):
        """twistd renames <log> to <log>.1 (and .1 to .2, ...) every 1 MB: a long run's stalls
        were read from the last file only (the million-request fuzz wrote ~600 files)."""
        path = self.mktemp()

        def line(ms):
            return "2026-12-02T01:00:00+0000 [kafkatw.stall_probe#warn] reactor stall: %d ms\n" % ms

        def rotate():
            n = 0
            while os.path.exists("%s.%d" % (path, n + 1)):
                n += 1
            for i in range(n, 0, -1):
                os.rename("%s.%d" % (path, i), "%s.%d" % (path, i + 1))
            os.rename(path, path + ".1")

        with open(path, "w") as f:
            f.write(line(900))
        rotate()
        with open(path, "w") as f:
            f.write(line(800))
        mark = StallLog(path).mark()
        with open(path, "a") as f:
            f.write(line(51))
        rotate()
        with open(path, "w") as f:
            f.write(line(52))
        rotate()
        with open(path, "w") as f:
            f.write(line(53))
        self.assertEqual(mark.stalls(), [51, 52, 53])
