"""Quiet failure of background work (issue 26): a task that keeps failing logs its first
failure with the cause, then one line at doubling intervals, and counts every failure; the
log manager's scheduled work and the group coordinator's offsets-topic creation use it."""

import errno
import os

from twisted.internet import task
from twisted.logger import LogLevel, formatEvent, globalLogPublisher
from twisted.trial import unittest

from kafkatw.background_failures import FailingTask, FailingTasks
from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError
from kafkatw.storage import LogManager, checkpoint

from .test_storage_helpers import make_batch


class LogCapture:
    """Every log event while the test runs; ``lines(ns)`` formats those of one namespace
    prefix at error level or above (what an operator would see as trouble)."""

    def __init__(self, case):
        self.events = []
        globalLogPublisher.addObserver(self.events.append)
        case.addCleanup(globalLogPublisher.removeObserver, self.events.append)

    def lines(self, namespace="kafkatw", level=LogLevel.error):
        return [formatEvent(e) for e in self.events
                if e.get("log_namespace", "").startswith(namespace)
                and e.get("log_level") is not None and e["log_level"] >= level]

    def tracebacks(self):
        return [e for e in self.events if "log_failure" in e]

    def info(self, namespace):
        return [formatEvent(e) for e in self.events
                if e.get("log_namespace", "").startswith(namespace)
                and e.get("log_level") == LogLevel.info]


class FailingTaskTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.clock = task.Clock()
        self.logs = LogCapture(self)

    def test_first_failure_then_doubling_intervals(self):
        """One failure a second for 1000 s: the first line, then lines at 10, 30, 70, 150,
        310, 630 s (intervals 10, 20, 40, ... capped at 600), each counting what it covers."""
        t = FailingTask("retention", self.clock)
        for _ in range(1000):
            t.failed(OSError(errno.ENOSPC, "No space left on device"))
            self.clock.advance(1)
        lines = self.logs.lines("kafkatw.background")
        self.assertEqual(len(lines), 7)
        self.assertEqual(t.failures, 1000)
        self.assertEqual(t.logged, 7)
        self.assertEqual(lines[0], "retention failed: OSError: [Errno 28] No space left on "
                                   "device (repeats are logged at increasing intervals)")
        self.assertEqual(lines[1], "retention still failing: 10 more failure(s) in the last 10 s, "
                                   "11 in a row; last cause: OSError: [Errno 28] No space left "
                                   "on device")
        self.assertIn("20 more failure(s) in the last 20 s, 31 in a row", lines[2])
        self.assertIn("320 more failure(s) in the last 320 s, 631 in a row", lines[6])
        self.assertEqual(self.logs.tracebacks(), [])

    def test_unexpected_error_has_one_traceback(self):
        t = FailingTask("flush", self.clock)
        for _ in range(50):
            try:
                {}["missing"]
            except KeyError:
                t.failed()
            self.clock.advance(1)
        self.assertEqual(len(self.logs.tracebacks()), 1)
        self.assertEqual(len(self.flushLoggedErrors(KeyError)), 1)
        self.assertEqual(len(self.logs.lines("kafkatw.background")), 3)  # first, at 10 s, 30 s

    def test_success_resets_and_is_said_once(self):
        t = FailingTask("checkpoints", self.clock)
        t.failed(KafkaError(errors.KAFKA_STORAGE_ERROR, "offline"))
        t.failed(KafkaError(errors.KAFKA_STORAGE_ERROR, "offline"))
        t.succeeded()
        t.succeeded()
        self.assertEqual(self.logs.info("kafkatw.background"),
                         ["checkpoints succeeded again after 2 failure(s)"])
        t.failed(KafkaError(errors.KAFKA_STORAGE_ERROR, "offline"))
        self.assertEqual(len(self.logs.lines("kafkatw.background")), 2)  # a new run logs again
        self.assertEqual((t.failures, t.consecutive), (3, 1))

    def test_tasks_by_name_and_snapshot(self):
        tasks = FailingTasks(self.clock)
        self.assertIs(tasks["a"], tasks["a"])
        tasks["a"].failed(OSError("x"))
        tasks["b"]  # never failed: not in the counters
        self.assertEqual(tasks.snapshot(), {"a": 1})


class LogManagerQuietTests(unittest.TestCase):
    def setUp(self):
        self.clock = task.Clock()
        self.clock.advance(1_000_000)
        self.logs = LogCapture(self)
        self.dir = os.path.abspath(self.mktemp())

    def make(self, props=None):
        mgr = LogManager([self.dir], props or {}, reactor=self.clock)
        mgr.load_logs()
        return mgr

    def test_failing_scheduled_work_logs_quietly(self):
        """Retention raising every second for ten minutes: 5 lines (0, 10, 30, 70, 150, 310 s
        minus the first's own), one traceback, a counter of 600."""
        mgr = self.make({"log.retention.check.interval.ms": "1000"})

        fixed = []

        def broken():
            if not fixed:
                raise ValueError("retention bug")
        mgr.cleanup_logs = broken
        mgr.start()
        self.addCleanup(mgr.shutdown)
        for _ in range(600):
            self.clock.advance(1)
        self.assertEqual(mgr.task_failures.snapshot(), {"retention": 600})
        self.assertEqual(len(self.logs.tracebacks()), 1)
        self.assertEqual(len(self.flushLoggedErrors(ValueError)), 1)
        lines = self.logs.lines("kafkatw.background")
        self.assertEqual(len(lines), 6)
        self.assertTrue(lines[-1].startswith("retention still failing: 160 more failure(s)"),
                        lines[-1])
        fixed.append(True)
        self.clock.advance(1)
        self.assertEqual(self.logs.info("kafkatw.background"),
                         ["retention succeeded again after 600 failure(s)"])

    def test_new_dir_logs_initialised(self):
        mgr = self.make()
        mgr.shutdown()
        self.assertEqual(self.logs.info("kafkatw.storage.manager"),
                         ["initialised new log dir %s" % self.dir])

    def test_unclean_stop_is_one_summary_line_per_dir(self):
        """Forty segments recovered with a torn tail: one info line with the numbers; the
        per-segment detail only at debug level."""
        mgr = self.make({"log.segment.bytes": "1100"})
        lg = mgr.get_or_create_log("a", 0)
        for _ in range(40):
            lg.append_as_leader(make_batch(2, 400, timestamp=1), 0)
        lg.flush()
        lg.close()  # no clean-shutdown marker
        with open(os.path.join(self.dir, checkpoint.RECOVERY_POINT_CHECKPOINT), "w") as f:
            f.write("0\n1\na 0 0\n")
        seg_paths = sorted(p for p in os.listdir(lg.dir) if p.endswith(".log"))
        with open(os.path.join(lg.dir, seg_paths[-1]), "ab") as f:
            f.write(b"\x00" * 17)  # a torn write
        del self.logs.events[:]
        mgr2 = self.make({"log.segment.bytes": "1100"})
        self.addCleanup(mgr2.shutdown)
        info = self.logs.info("kafkatw.storage")
        self.assertEqual(len(info), 1, info)
        self.assertRegex(info[0], r"^recovered %s after an unclean stop: 1 log\(s\), %d "
                                  r"segment\(s\) recovered, 17 byte\(s\) truncated, in \d+ ms$"
                         % (self.dir, len(seg_paths)))
        debug = [e for e in self.logs.events if e.get("log_level") == LogLevel.debug
                 and e.get("log_namespace", "").startswith("kafkatw.storage.log")]
        self.assertEqual(len(debug), 1)
        self.assertIn("truncated 17 bytes", formatEvent(debug[0]))
