"""Faults against a real broker process (issue 26): background work that keeps failing is
logged quietly, and start-up says one line per log dir about what it found (new, clean,
recovered)."""

import os

from twisted.trial import unittest

from kafkatw.protocol import errors
from kafkatw.protocol import messages as m
from kafkatw.testing import KafkaBroker
from tests.support import RawClient, poll_until

FIND_COORDINATOR = 10


def log_lines(broker):
    with open(broker.log_path, errors="replace") as f:
        return f.read().splitlines()


def find_coordinator(client, key, key_type=0):
    body = client.request(FIND_COORDINATOR, 3, m.FindCoordinatorRequest(key=key, key_type=key_type))
    return body.error_code


class QuietFailureTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.broker = KafkaBroker().start()
        self.addCleanup(self.broker.close)

    def test_offsets_topic_creation_failing_is_quiet(self):
        """Every metadata write fails (its tmp file's name is taken by a directory): 200
        FindCoordinator retries for groups and 100 for transactions get
        COORDINATOR_NOT_AVAILABLE and the log holds one line for the failing write, one for
        each failing creation, no traceback; once the cause is gone the topics are created
        and that is said once each."""
        blocker = os.path.join(self.broker.data_dir, "__kafkatw_metadata.json.tmp")
        os.mkdir(blocker)
        c = RawClient(self.broker, "quiet")
        self.addCleanup(c.close)
        codes = [find_coordinator(c, "g%d" % i) for i in range(200)]
        codes += [find_coordinator(c, "t%d" % i, key_type=1) for i in range(100)]
        self.assertEqual(set(codes), {errors.COORDINATOR_NOT_AVAILABLE})
        os.rmdir(blocker)
        poll_until(lambda: find_coordinator(c, "g") == errors.NONE, timeout=20,
                   message="FindCoordinator answering once the metadata can be written")
        poll_until(lambda: find_coordinator(c, "t", key_type=1) == errors.NONE, timeout=20,
                   message="a transaction coordinator once the metadata can be written")
        lines = log_lines(self.broker)
        self.assertEqual([x for x in lines if "Traceback" in x], [])
        failed = [x for x in lines if " failed" in x and "kafkatw.background" in x]
        self.assertEqual(len(failed), 3, failed)
        self.assertIn("writing __kafkatw_metadata.json failed: IsADirectoryError", failed[0])
        self.assertIn("creating __consumer_offsets failed", failed[1])
        self.assertIn("creating __transaction_state failed", failed[2])
        again = [x for x in lines if "succeeded again after" in x]
        self.assertEqual(len(again), 3, again)


class StartupSummaryTests(unittest.SynchronousTestCase):
    def test_new_clean_and_recovered_dirs(self):
        broker = KafkaBroker(topics=[("t", 3)])
        self.addCleanup(broker.close)
        broker.start()
        lines = log_lines(broker)
        self.assertEqual([x for x in lines if "log dir" in x and "kafkatw.storage" in x
                          and ("initialised" in x or "recovered" in x or "loaded" in x)],
                         [x for x in lines if "initialised new log dir %s" % broker.data_dir in x])
        self.assertEqual(len([x for x in lines if "initialised new log dir" in x]), 1)
        broker.restart()
        lines = log_lines(broker)
        self.assertEqual(len([x for x in lines if "after a clean shutdown" in x]), 1)
        broker.kill()
        broker.start()
        lines = log_lines(broker)
        recovered = [x for x in lines if "after an unclean stop" in x]
        self.assertEqual(len(recovered), 1, recovered)
        self.assertRegex(recovered[0], r"recovered %s after an unclean stop: 3 log\(s\), \d+ "
                                       r"segment\(s\) recovered, 0 byte\(s\) truncated"
                         % broker.data_dir)
        # each segment's detail is at debug level only
        detail = [x for x in lines if ": segment " in x]
        self.assertEqual(len(detail), 3, detail)
        self.assertEqual([x for x in detail if "#debug]" not in x], [])
        self.assertEqual([x for x in lines if "recovery:" in x], [])
