"""LogManager and LogCleaner: load with/without the clean-shutdown marker, checkpoints,
retention (time, size, two-step delete after file.delete.delay.ms) on task.Clock, delete_log,
offline log dirs, compaction."""

import errno
import os

from twisted.internet import defer, task
from twisted.trial import unittest

from kafkatw.protocol import errors, records
from kafkatw.protocol.errors import KafkaError
from kafkatw.storage import LogManager, UnifiedLog
from kafkatw.storage import checkpoint
from kafkatw.storage.cleaner import LogCleaner

from .test_storage_helpers import make_batch


class ManagerBase(unittest.TestCase):
    def make(self, dirs=None, props=None):
        self.base = self.base if hasattr(self, "base") else self.mktemp()
        self.dirs = dirs or [os.path.join(self.base, "d1"), os.path.join(self.base, "d2")]
        self.clock = getattr(self, "clock", None) or task.Clock()
        if self.clock.seconds() == 0:
            self.clock.advance(1_000_000)
        mgr = LogManager(self.dirs, props or {}, reactor=self.clock)
        mgr.load_logs()
        return mgr

    def now(self):
        return int(self.clock.seconds() * 1000)


class LoadTest(ManagerBase):
    def test_clean_shutdown_and_checkpoints(self):
        mgr = self.make()
        a = mgr.get_or_create_log("a", 0, b"\x01" * 16, {})
        b = mgr.get_or_create_log("b", 0, None, {})
        self.assertNotEqual(os.path.dirname(a.dir), os.path.dirname(b.dir))
        for _ in range(5):
            a.append_as_leader(make_batch(2, timestamp=self.now()), 0)
        a.update_high_watermark(6)
        mgr.shutdown()
        d = os.path.dirname(a.dir)
        self.assertTrue(os.path.exists(os.path.join(d, checkpoint.CLEAN_SHUTDOWN_FILE)))
        self.assertEqual(checkpoint.read_offsets(
            os.path.join(d, checkpoint.REPLICATION_OFFSET_CHECKPOINT)), {("a", 0): 6})
        self.assertEqual(checkpoint.read_offsets(
            os.path.join(d, checkpoint.RECOVERY_POINT_CHECKPOINT)), {("a", 0): 10})
        with open(os.path.join(d, checkpoint.RECOVERY_POINT_CHECKPOINT)) as f:
            self.assertEqual(f.read(), "0\n1\na 0 10\n")
        mgr2 = self.make()
        self.assertFalse(os.path.exists(os.path.join(d, checkpoint.CLEAN_SHUTDOWN_FILE)))
        a2 = mgr2.get_log("a", 0)
        self.assertEqual((a2.log_end_offset, a2.high_watermark, a2.topic_id),
                         (10, 6, b"\x01" * 16))
        self.assertEqual([lg.recovery_log for lg in mgr2.all_logs() if lg.recovery_log], [])
        mgr2.shutdown()

    def test_only_partition_directories_load(self):
        """Files named like partitions, other directories and -future dirs are skipped; a
        symlinked partition directory loads; nothing new is created in the log dir."""
        d = os.path.join(self.mktemp(), "d")
        os.makedirs(os.path.join(d, "a-0"))
        os.makedirs(os.path.join(d, "not_a_partition"))
        os.makedirs(os.path.join(d, "a-3.0123456789abcdef-future"))
        with open(os.path.join(d, "a-1"), "w") as f:
            f.write("a file")
        target = os.path.abspath(os.path.join(self.mktemp(), "elsewhere"))
        os.makedirs(target)
        os.symlink(target, os.path.join(d, "a-2"))
        before = sorted(os.listdir(d))
        mgr = self.make(dirs=[d])
        self.assertEqual(sorted((lg.topic, lg.partition) for lg in mgr.all_logs()),
                         [("a", 0), ("a", 2)])
        self.assertEqual(sorted(os.listdir(d)), before)
        self.assertIn("00000000000000000000.log", os.listdir(target))
        self.assertEqual(mgr.offline_dirs, frozenset())
        mgr.shutdown()

    def test_partitions_of_a_topic_load_with_one_config(self):
        mgr = self.make(props={"log.segment.bytes": "4096"})
        for topic, partition in [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("b", 0), ("b", 1)]:
            mgr.get_or_create_log(topic, partition)
        mgr.shutdown()
        mgr2 = self.make(props={"log.segment.bytes": "4096"})
        a = [mgr2.get_log("a", p) for p in range(4)]
        b = [mgr2.get_log("b", p) for p in range(2)]
        # one object per topic (the logs are made on first use, whichever of the two dirs
        # holds them)
        self.assertEqual(len({id(lg.config) for lg in a}), 1)
        self.assertEqual(len({id(lg.config) for lg in a + b}), 2)
        self.assertEqual({lg.config.segment_bytes for lg in a + b}, {4096})
        # a topic's new config still reaches every partition and only that topic's
        mgr2.update_log_config("a", {"segment.bytes": "8192"})
        self.assertEqual([lg.config.segment_bytes for lg in a + b], [8192] * 4 + [4096] * 2)
        mgr2.shutdown()

    def test_logs_load_with_their_topics_config(self):
        """The topics known at start give their logs their config (a compacted topic stayed
        on the broker's delete policy after a restart until its config changed); a topic
        known only later gets it when its logs are 'created' again."""
        mgr = self.make()
        self.successResultOf(mgr.create_logs("c", range(2), None, {"cleanup.policy": "compact"}))
        self.successResultOf(mgr.create_logs("r", range(2), None, {"retention.ms": "1234"}))
        mgr.shutdown()
        mgr = LogManager(self.dirs, {}, reactor=self.clock,
                         topic_overrides={"c": {"cleanup.policy": "compact"}})
        mgr.load_logs()
        self.assertEqual([mgr.get_log("c", p).config.compact for p in range(2)], [True, True])
        self.assertEqual([mgr.get_log("r", p).config.retention_ms for p in range(2)],
                         [604800000] * 2)
        self.successResultOf(mgr.create_logs("r", range(2), None, {"retention.ms": "1234"}))
        self.assertEqual([mgr.get_log("r", p).config.retention_ms for p in range(2)], [1234] * 2)
        mgr.shutdown()

    def test_unclean_recovers_from_recovery_point(self):
        mgr = self.make(props={"log.segment.bytes": "2000"})
        a = mgr.get_or_create_log("a", 0)
        for _ in range(20):
            a.append_as_leader(make_batch(2, 100, timestamp=self.now()), 0)
        leo = a.log_end_offset
        mgr.checkpoint_recovery_offsets()
        rp = a.recovery_point
        self.assertTrue(0 < rp < leo)  # flushed on roll
        a.close()  # no marker: an unclean stop
        mgr2 = self.make(props={"log.segment.bytes": "2000"})
        a2 = mgr2.get_log("a", 0)
        self.assertEqual(a2.log_end_offset, leo)
        recovered = [line for lg in mgr2.all_logs() for line in lg.recovery_log]
        self.assertEqual(len(recovered), len([s for s in a2.segments if s.base_offset >= rp]))
        mgr2.shutdown()

    def test_attached_version_moves_when_a_log_joins_or_leaves(self):
        """A parked fetch reuses its partition look-ups while this version is unchanged."""
        mgr = self.make()
        before = mgr.attached_version
        mgr.get_or_create_log("a", 0)
        made = mgr.attached_version
        self.assertGreater(made, before)
        mgr.get_log("a", 0)
        self.assertEqual(mgr.attached_version, made)
        mgr.delete_log("a", 0)
        self.assertGreater(mgr.attached_version, made)

    def test_delete_log(self):
        mgr = self.make(props={"log.segment.delete.delay.ms": "1000"})
        a = mgr.get_or_create_log("a", 3)
        a.append_as_leader(make_batch(1), 0)
        old = a.dir
        mgr.delete_log("a", 3)
        self.assertIsNone(mgr.get_log("a", 3))
        self.assertFalse(os.path.exists(old))
        renamed = [n for n in os.listdir(os.path.dirname(old)) if n.endswith("-delete")]
        self.assertEqual(len(renamed), 1)
        self.assertTrue(renamed[0].startswith("a-3."))
        self.clock.advance(1.0)
        self.assertEqual([n for n in os.listdir(os.path.dirname(old)) if n.endswith("-delete")],
                         [])


class DeleteLogsTest(ManagerBase):
    def test_logs_go_at_once_directories_move_in_the_blocking_work(self):
        mgr = self.make(props={"log.segment.delete.delay.ms": "1000"})
        logs = [mgr.get_or_create_log("a", p) for p in range(3)]
        logs[0].append_as_leader(make_batch(1), 0)
        old = [lg.dir for lg in logs]
        work = []
        pool = defer.Deferred()
        mgr.run_blocking = lambda fn, *args: work.append((fn, args)) or pool
        d = mgr.delete_logs("a", range(3))
        self.assertEqual([mgr.get_log("a", p) for p in range(3)], [None] * 3)
        self.assertEqual([os.path.exists(o) for o in old], [True] * 3)  # not renamed yet
        fn, args = work[0]
        pool.callback(fn(*args))
        self.successResultOf(d)
        self.assertEqual([os.path.exists(o) for o in old], [False] * 3)
        moved = sorted(os.path.basename(lg.dir) for lg in logs)
        self.assertEqual([m.split(".")[0] for m in moved], ["a-0", "a-1", "a-2"])
        self.assertTrue(all(m.endswith("-delete") and os.path.isdir(lg.dir) for m, lg in zip(moved, logs)))
        mgr.run_blocking = LogManager.run_blocking.__get__(mgr)
        self.clock.advance(1.0)  # file.delete.delay.ms later the directories go
        self.assertEqual([os.path.exists(lg.dir) for lg in logs], [False] * 3)
        self.assertEqual(mgr.offline_dirs, frozenset())


class CreateLogsTest(ManagerBase):
    """create_logs: a topic's logs made in one piece of blocking work, attached after it."""

    def test_creates_missing_logs_spread_over_dirs(self):
        mgr = self.make()
        mgr.get_or_create_log("t", 1, None, {})
        d = mgr.create_logs("t", range(4), b"\x02" * 16, {"retention.ms": "5"})
        self.successResultOf(d)
        logs = [mgr.get_log("t", p) for p in range(4)]
        self.assertEqual([lg.topic_id for lg in logs], [b"\x02" * 16] * 4)  # t-1's id set too
        self.assertEqual([logs[p].config.retention_ms for p in (0, 2, 3)], [5] * 3)
        per_dir = sorted(sum(1 for lg in logs if os.path.dirname(lg.dir) == d) for d in mgr.log_dirs)
        self.assertEqual(per_dir, [2, 2])
        mgr.shutdown()

    def test_placement_counts_the_logs_still_being_made(self):
        """A topic placed while another's logs are still being made goes beside them: the
        three of "a" (two in d1, one in d2) count before they are attached."""
        mgr = self.make()
        mgr.run_blocking = lambda fn, *args: defer.Deferred()  # the thread never gets to them
        self.successResultOf(mgr.create_logs("a", range(3), None, {}, wait=False))
        self.assertEqual(mgr.get_or_create_log("c", 0).dir, os.path.join(mgr.log_dirs[1], "c-0"))
        self.successResultOf(mgr.create_logs("b", range(1), None, {}, wait=False))
        dirs = {"a-%d" % p: mgr.get_log("a", p).dir for p in range(3)}
        dirs["b-0"] = mgr.get_log("b", 0).dir
        d1, d2 = mgr.log_dirs
        self.assertEqual(dirs, {"a-0": os.path.join(d1, "a-0"), "a-1": os.path.join(d2, "a-1"),
                                "a-2": os.path.join(d1, "a-2"), "b-0": os.path.join(d1, "b-0")})
        mgr.shutdown()

    def test_a_waited_for_batch_does_not_queue_behind_background_ones(self):
        """Background batches take turns in the thread pool; those an answer waits for take
        turns beside them (a one-partition topic waited for all of a big one's logs)."""
        mgr = self.make()
        work = []
        mgr.run_blocking = lambda fn, *args: work.append((fn, args)) or defer.Deferred()
        self.successResultOf(mgr.create_logs("big", range(3), None, {}, wait=False))
        self.successResultOf(mgr.create_logs("big2", range(3), None, {}, wait=False))
        self.assertEqual(len(work), 1)  # big2 waits for its turn
        mgr.run_blocking = lambda fn, *args: work.append((fn, args, defer.Deferred())) or work[-1][2]
        d1 = mgr.create_logs("small", range(1), None, {})
        d2 = mgr.create_logs("small2", range(1), None, {})
        self.assertEqual(len(work), 2)  # beside "big"; small2 after small
        fn, args, waited = work[1]
        waited.callback(fn(*args))
        self.successResultOf(d1)
        self.assertEqual(len(work), 3)
        self.assertNoResult(d2)
        self.assertEqual([(lg.topic, lg.partition) for lg in mgr.all_logs()], [("small", 0)])
        mgr.shutdown()

    def test_a_config_changed_while_the_logs_are_made_is_theirs(self):
        """A topic's config altered (or the broker default) after CreateTopics answered but
        before its logs are attached is the config they are attached with, whether the thread
        made them or they were taken from it."""
        mgr = self.make()
        work = []
        done = defer.Deferred()
        mgr.run_blocking = lambda fn, *args: work.append((fn, args)) or done
        self.successResultOf(mgr.create_logs("t", range(3), None, {"retention.ms": "5"},
                                             wait=False))
        fn, args = work[0]
        fn(*args)  # made with retention.ms 5
        mgr.update_log_config("t", {"retention.ms": "7", "cleanup.policy": "compact"})
        taken = mgr.get_log("t", 1)
        done.callback(None)
        logs = [mgr.get_log("t", p) for p in range(3)]
        self.assertIs(logs[1], taken)
        self.assertEqual([(lg.config.retention_ms, lg.config.compact) for lg in logs],
                         [(7, True)] * 3)
        self.assertEqual(sorted(lg.partition for lg in mgr.compacted_logs()), [0, 1, 2])
        mgr.shutdown()

    def test_logs_are_attached_only_after_the_blocking_work(self):
        mgr = self.make()
        work = []
        done = defer.Deferred()
        mgr.run_blocking = lambda fn, *args: work.append((fn, args)) or done
        mgr.create_logs("t", range(3), None, {})
        self.assertEqual((len(work), mgr.all_logs()), (1, []))
        self.assertEqual([os.listdir(d) for d in mgr.log_dirs], [[], []])
        fn, args = work[0]
        done.callback(fn(*args))
        self.assertEqual(sorted(lg.partition for lg in mgr.all_logs()), [0, 1, 2])
        mgr.shutdown()

    def test_no_log_is_made_in_a_dir_gone_offline_after_placement(self):
        """A dir that fails while a batch waits for the thread pool gets none of its logs
        (they are offline partitions); the logs placed in the other dir are made."""
        mgr = self.make()
        work = []
        done = defer.Deferred()
        mgr.run_blocking = lambda fn, *args: work.append((fn, args)) or done
        d = mgr.create_logs("t", range(4), None, {})
        d1, d2 = mgr.log_dirs
        mgr.handle_dir_failure(d2, OSError(errno.EIO, "I/O error"))
        fn, args = work[0]
        done.callback(fn(*args))
        self.assertEqual(self.failureResultOf(d, KafkaError).value.code, errors.KAFKA_STORAGE_ERROR)
        self.assertEqual(os.listdir(d2), [])
        self.assertEqual(sorted(os.listdir(d1)), ["t-0", "t-2"])
        self.assertEqual(sorted(lg.partition for lg in mgr.all_logs()), [0, 2])
        self.assertEqual(mgr._creating, {})
        mgr.shutdown()

    def test_a_log_asked_for_before_its_batch_is_made_or_taken_from_the_thread(self):
        """``wait=False``: the answer comes at once; a partition asked for before the thread
        got to it is made on the reactor (the thread skips it), one the thread made is taken,
        the rest are attached when the work is done; a deleted topic's remain unmade."""
        mgr = self.make()
        work = []
        done = defer.Deferred()
        mgr.run_blocking = lambda fn, *args: work.append((fn, args)) or done
        self.successResultOf(mgr.create_logs("t", range(4), b"\x04" * 16, {}, wait=False))
        self.assertEqual(mgr.all_logs(), [])
        first = mgr.get_log("t", 0)  # made here, now
        self.assertEqual((first.partition, first.topic_id), (0, b"\x04" * 16))
        self.assertIs(mgr.get_log("t", 0), first)
        made = []
        real_make = mgr._make_log
        mgr._make_log = lambda topic, p, *a: made.append(p) or real_make(topic, p, *a)
        fn, args = work[0]
        fn(*args)  # the thread's work
        self.assertEqual(made, [1, 2, 3])
        self.assertEqual(len(mgr.all_logs()), 1)
        second = mgr.get_log("t", 2)  # the thread's, attached now
        self.assertEqual(second.partition, 2)
        done.callback(None)
        self.assertEqual(sorted(lg.partition for lg in mgr.all_logs()), [0, 1, 2, 3])
        self.assertIs(mgr.get_log("t", 2), second)

        d = defer.Deferred()
        work[:] = []
        mgr.run_blocking = lambda fn, *args: work.append((fn, args)) or d
        mgr.create_logs("u", range(2), None, {}, wait=False)
        mgr.delete_logs("u", range(2))
        fn, args = work[0]
        made[:] = []
        fn(*args)
        d.callback(None)
        self.assertEqual((made, mgr.get_log("u", 0), mgr.get_log("u", 1)), ([], None, None))
        self.assertEqual(sorted(n for d_ in mgr.log_dirs for n in os.listdir(d_)
                                if n.startswith("u-")), [])
        mgr.shutdown()

    def test_a_new_partition_writes_its_log_and_metadata_only(self):
        """A partition directory just made holds the empty .log and partition.metadata; the
        indexes come with the first append; an unclean stop then recovers it; a directory
        that was already there is read, not made afresh."""
        mgr = self.make(dirs=[os.path.join(self.mktemp(), "one")])
        self.successResultOf(mgr.create_logs("t", range(2), b"\x03" * 16, {}))
        lg = mgr.get_log("t", 0)
        self.assertEqual(sorted(os.listdir(lg.dir)),
                         ["00000000000000000000.log", "partition.metadata"])
        self.assertEqual((lg.log_start_offset, lg.log_end_offset, lg.topic_id),
                         (0, 0, b"\x03" * 16))
        lg.append_as_leader(make_batch(2, timestamp=self.now()), 1)
        self.assertEqual(sorted(os.listdir(lg.dir)), [
            "00000000000000000000.index", "00000000000000000000.log",
            "00000000000000000000.timeindex", "leader-epoch-checkpoint", "partition.metadata"])
        lg.close()
        mgr.get_log("t", 1).close()  # no shutdown: an unclean stop
        mgr2 = self.make(dirs=mgr.log_dirs)
        self.assertEqual([(lg.log_end_offset, lg.topic_id, lg.latest_epoch())
                          for lg in (mgr2.get_log("t", 0), mgr2.get_log("t", 1))],
                         [(2, b"\x03" * 16, 1), (0, b"\x03" * 16, None)])
        os.makedirs(os.path.join(mgr.log_dirs[0], "u-0"))
        with open(os.path.join(mgr.log_dirs[0], "u-0", "00000000000000000005.log"), "wb"):
            pass
        u = mgr2.get_or_create_log("u", 0, b"\x04" * 16)
        self.assertEqual((u.log_start_offset, u.log_end_offset), (5, 5))
        mgr2.shutdown()

    def test_logs_not_made_at_shutdown_are_left_for_the_next_start(self):
        mgr = self.make()
        work = []
        pool = defer.Deferred()
        mgr.run_blocking = lambda fn, *args: work.append((fn, args)) or pool
        d = mgr.create_logs("t", range(3), None, {})
        fn, args = work[0]
        fn(*args)  # the thread made them; the broker stops before they are attached
        mgr.shutdown()  # closed, not attached
        pool.callback(None)
        self.successResultOf(d)
        self.assertEqual(mgr.all_logs(), [])
        files = [os.path.join(r, f) for r, _, fs in os.walk(self.base) for f in fs]
        self.assertEqual(sorted(os.path.basename(f) for f in files if f.endswith(".log")),
                         ["00000000000000000000.log"] * 3)
        # no preallocated index left behind (a new segment's are made when first written)
        self.assertEqual([f for f in files if f.endswith("index") and os.path.getsize(f)], [])

        mgr = self.make(dirs=[os.path.join(self.mktemp(), "d")])
        work = []
        mgr.run_blocking = lambda fn, *args: work.append((fn, args)) or defer.succeed(None)
        self.successResultOf(mgr.create_logs("t", range(2), None, {}))
        mgr.shutdown()  # before the thread started: nothing is made (the next start does)
        fn, args = work[0]
        fn(*args)
        self.assertEqual([n for n in os.listdir(mgr.log_dirs[0]) if n.startswith("t-")], [])

    def test_io_error_takes_the_dir_offline_and_fails(self):
        mgr = self.make(dirs=[os.path.join(self.mktemp(), "only")])
        blocker = os.path.join(mgr.log_dirs[0], "t-0")
        with open(blocker, "w") as f:  # a file where the partition directory should go
            f.write("x")
        failure = self.failureResultOf(mgr.create_logs("t", range(2), None, {}), KafkaError)
        self.assertEqual(failure.value.code, errors.KAFKA_STORAGE_ERROR)
        self.assertEqual(mgr.offline_dirs, frozenset(mgr.log_dirs))


class FlushTest(ManagerBase):
    def test_dirty_logs_flush_in_one_piece_of_blocking_work(self):
        mgr = self.make(props={"log.flush.interval.ms": "1000"})
        a, b = mgr.get_or_create_log("a", 0), mgr.get_or_create_log("b", 0)
        a.append_as_leader(make_batch(2), 0)
        b.append_as_leader(make_batch(3), 0)
        work = []
        pool = defer.Deferred()
        mgr.run_blocking = lambda fn, *args: work.append((fn, args)) or pool
        self.clock.advance(1)
        d = mgr.flush_dirty_logs()
        self.assertEqual(len(work), 1)
        fn, args = work[0]
        outcome = fn(*args)  # the thread: fsyncs only
        self.assertEqual((a.recovery_point, b.recovery_point), (0, 0))
        pool.callback(outcome)
        self.successResultOf(d)
        self.assertEqual((a.recovery_point, b.recovery_point), (2, 3))
        mgr.shutdown()


class RetentionTest(ManagerBase):
    def test_time_and_size_retention_two_step(self):
        props = {"log.segment.bytes": "1000", "log.retention.check.interval.ms": "1000",
                 "log.segment.delete.delay.ms": "5000", "log.retention.ms": "60000",
                 "log.cleaner.enable": "false"}
        mgr = self.make(dirs=[os.path.join(self.mktemp(), "d")], props=props)
        mgr.start()
        a = mgr.get_or_create_log("a", 0)
        for _ in range(10):
            a.append_as_leader(make_batch(1, 300, timestamp=self.now()), 0)
        a.update_high_watermark(a.log_end_offset)
        nsegs = len(a.segments)
        self.assertTrue(nsegs > 3)
        first = a.segments[0].log.path
        # Hold a slice of the first segment: it must stay readable until the delayed delete.
        held = a.read(0, 100000).records
        self.clock.advance(30)  # 30 s: nothing is old enough
        self.assertEqual(len(a.segments), nsegs)
        self.clock.advance(31)
        # Everything expired: the active segment was rolled and all old ones deleted.
        self.assertEqual(len(a.segments), 1)
        self.assertEqual(a.log_start_offset, 10)
        self.assertTrue(os.path.exists(first + ".deleted"))
        self.assertEqual(len(held.read()), held.count)
        with self.assertRaises(KafkaError) as cm:
            a.read(0, 100)
        self.assertEqual(cm.exception.code, errors.OFFSET_OUT_OF_RANGE)
        self.clock.advance(5)
        self.assertFalse(os.path.exists(first + ".deleted"))
        mgr.update_log_config("a", {"retention.ms": "-1", "retention.bytes": "1500"})
        for _ in range(10):
            a.append_as_leader(make_batch(1, 300, timestamp=self.now()), 0)
        a.update_high_watermark(a.log_end_offset)
        self.clock.advance(1)
        self.assertLessEqual(a.size, 1500 + a.active_segment.size)
        self.assertTrue(a.size >= 1500 - 1000)
        mgr.shutdown()

    def test_delete_records(self):
        mgr = self.make(dirs=[os.path.join(self.mktemp(), "d")],
                        props={"log.segment.bytes": "1000"})
        a = mgr.get_or_create_log("a", 0)
        for _ in range(10):
            a.append_as_leader(make_batch(1, 300, timestamp=self.now()), 0)
        with self.assertRaises(KafkaError):
            a.delete_records_before(5)  # above the HW
        a.update_high_watermark(10)
        a.delete_records_before(5)
        self.assertEqual(a.log_start_offset, 5)
        self.assertEqual(a.read(5, 1).fetch_offset_metadata.message_offset, 5)
        self.assertEqual(a.fetch_offset_by_timestamp(-2)[0], 5)
        mgr.cleanup_logs()
        self.assertTrue(a.segments[0].base_offset <= 5 < a.segments[1].base_offset
                        if len(a.segments) > 1 else True)
        mgr.shutdown()


class IdleRetentionTest(ManagerBase):
    """A retention tick looks at the logs that changed since the last and at those whose
    retention.ms time has come, not at every log."""

    def visited(self, mgr):
        seen = []
        real = UnifiedLog.delete_old_segments

        def counting(lg, now_ms=None):
            seen.append((lg.topic, lg.partition))
            return real(lg, now_ms)
        self.patch(UnifiedLog, "delete_old_segments", counting)
        return seen

    def test_idle_logs_are_visited_when_their_time_comes_only(self):
        mgr = self.make(dirs=[os.path.join(self.mktemp(), "d")],
                        props={"log.retention.ms": "60000", "log.cleaner.enable": "false"})
        logs = [mgr.get_or_create_log("t", p) for p in range(20)]
        for p, lg in enumerate(logs[:10]):  # ten with a record, written 1 s apart
            lg.append_as_leader(make_batch(1, timestamp=self.now()), 0)
            lg.update_high_watermark(lg.log_end_offset)
            self.clock.advance(1)
        seen = self.visited(mgr)
        self.assertEqual(mgr.cleanup_logs(), 0)
        self.assertEqual(len(seen), 20)  # all new: looked at once
        del seen[:]
        self.assertEqual((mgr.cleanup_logs(), seen), (0, []))
        logs[15].append_as_leader(make_batch(1, timestamp=self.now()), 0)
        self.assertEqual((mgr.cleanup_logs(), seen), (0, [("t", 15)]))  # not held back by HW:
        del seen[:]                                         # an append brings it back at once
        self.clock.advance(54.5)  # the first five records are over a minute old
        self.assertEqual(mgr.cleanup_logs(), 5)
        self.assertEqual(sorted(p for _, p in seen), [0, 1, 2, 3, 4])
        del seen[:]
        self.assertEqual((mgr.cleanup_logs(), seen), (0, []))
        self.clock.advance(5)
        self.assertEqual(mgr.cleanup_logs(), 5)
        self.assertEqual(sorted(p for _, p in seen), [5, 6, 7, 8, 9])
        del seen[:]
        # t-15's record is over a minute old, but above the high watermark: kept until it moves
        self.clock.advance(60)
        self.assertEqual(mgr.cleanup_logs(), 0)
        self.assertEqual(seen, [("t", 15)])
        del seen[:]
        self.assertEqual((mgr.cleanup_logs(), seen), (0, []))
        logs[15].update_high_watermark(logs[15].log_end_offset)
        self.assertEqual((mgr.cleanup_logs(), seen), (1, [("t", 15)]))
        del seen[:]
        mgr.update_log_config("t", {"retention.ms": "1000"})  # a config: every log of the topic
        self.assertEqual((mgr.cleanup_logs(), len(seen)), (0, 20))
        self.assertEqual([lg.log_start_offset for lg in logs],
                         [1] * 10 + [0] * 5 + [1] + [0] * 4)
        mgr.shutdown()


    def test_deleted_partitions_leave_no_retention_entries(self):
        """A deleted partition's due time goes with it, and its heap entry once such entries
        outnumber the live ones (retention.ms is days: topics made and deleted meanwhile
        piled up)."""
        mgr = self.make(dirs=[os.path.join(self.mktemp(), "d")],
                        props={"log.retention.ms": "60000", "log.cleaner.enable": "false"})
        for p in range(70):
            lg = mgr.get_or_create_log("t", p)
            lg.append_as_leader(make_batch(1, timestamp=self.now()), 0)
            lg.update_high_watermark(lg.log_end_offset)
        kept = mgr.get_or_create_log("k", 0)
        kept.append_as_leader(make_batch(1, timestamp=self.now()), 0)
        kept.update_high_watermark(kept.log_end_offset)
        self.assertEqual(mgr.cleanup_logs(), 0)
        self.assertEqual((len(mgr._retention_due), len(mgr._retention_heap)), (71, 71))
        self.successResultOf(mgr.delete_logs("t", range(70)))
        self.assertEqual(list(mgr._retention_due), [("k", 0)])
        seen = self.visited(mgr)
        self.assertEqual((mgr.cleanup_logs(), seen), (0, []))
        self.assertEqual(([e[2] for e in mgr._retention_heap], list(mgr._retention_due)),
                         ([("k", 0)], [("k", 0)]))
        self.clock.advance(61)
        self.assertEqual((mgr.cleanup_logs(), seen), (1, [("k", 0)]))
        self.assertEqual((mgr._retention_due, mgr._retention_heap), ({}, []))
        mgr.shutdown()


class CompactedLogsTest(ManagerBase):
    def test_the_cleaner_looks_at_compacted_logs_only(self):
        """The cleaner's pass takes ``compacted_logs()``, kept in step with topic configs,
        the broker default and deletions, not every log."""
        mgr = self.make(dirs=[os.path.join(self.mktemp(), "d")])
        for p in range(3):
            mgr.get_or_create_log("plain", p)
        self.successResultOf(mgr.create_logs("c", range(2), None, {"cleanup.policy": "compact"}))
        names = lambda: sorted((lg.topic, lg.partition) for lg in mgr.compacted_logs())
        self.assertEqual(names(), [("c", 0), ("c", 1)])
        mgr.update_log_config("plain", {"cleanup.policy": "compact,delete"})
        mgr.update_log_config("c", {})
        self.assertEqual(names(), [("plain", 0), ("plain", 1), ("plain", 2)])
        mgr.update_broker_defaults({"log.cleanup.policy": "compact"})
        self.assertEqual(len(names()), 5)
        self.successResultOf(mgr.delete_logs("plain", range(3)))
        self.assertEqual(names(), [("c", 0), ("c", 1)])
        self.assertEqual(sorted(mgr._compacted), [("c", 0), ("c", 1)])  # nothing deleted kept
        mgr.shutdown()


class OfflineTest(ManagerBase):
    def test_io_error_takes_one_dir_offline(self):
        mgr = self.make()
        a = mgr.get_or_create_log("a", 0)
        b = mgr.get_or_create_log("b", 0)
        a.append_as_leader(make_batch(1, timestamp=self.now()), 0)

        def fail(buf):
            raise OSError(errno.EIO, "Input/output error")
        a.active_segment.log.append = fail
        with self.assertRaises(KafkaError) as cm:
            a.append_as_leader(make_batch(1, timestamp=self.now()), 0)
        self.assertEqual(cm.exception.code, errors.KAFKA_STORAGE_ERROR)
        self.assertEqual(mgr.offline_dirs, frozenset([os.path.dirname(a.dir)]))
        with self.assertRaises(KafkaError) as cm:
            mgr.get_log("a", 0).read(0, 100)
        self.assertEqual(cm.exception.code, errors.KAFKA_STORAGE_ERROR)
        b.append_as_leader(make_batch(1), 0)
        self.assertEqual(b.read(0, 1000).records.count, len(make_batch(1)))
        c = mgr.get_or_create_log("c", 0)  # goes to the surviving dir
        self.assertEqual(os.path.dirname(c.dir), os.path.dirname(b.dir))
        mgr.shutdown()
        self.assertFalse(os.path.exists(
            os.path.join(os.path.dirname(a.dir), checkpoint.CLEAN_SHUTDOWN_FILE)))

    def test_a_deleted_offline_log_leaves_no_bookkeeping(self):
        """A log of an offline dir deleted (delete_logs or delete_log) leaves the cleaner's
        candidates, the retention due times and the checkpoint entries as the others do."""
        mgr = self.make(props={"log.retention.ms": "60000", "log.cleaner.enable": "false",
                               "log.cleanup.policy": "compact,delete"})
        logs = [mgr.get_or_create_log("c", p) for p in range(2)] + [mgr.get_or_create_log("e", 0)]
        for lg in logs:
            lg.append_as_leader(make_batch(1, timestamp=self.now(), key=b"k"), 0)
            lg.update_high_watermark(lg.log_end_offset)
        mgr.cleanup_logs()
        mgr.checkpoint_high_watermarks()
        self.assertEqual(sorted(mgr._retention_due), [("c", 0), ("c", 1), ("e", 0)])
        mgr.cleaner = LogCleaner(mgr)
        mgr.cleaner._checkpoints.update({("c", 0): 1, ("c", 1): 1, ("e", 0): 1})
        for lg in logs:
            mgr.handle_dir_failure(os.path.dirname(lg.dir), OSError(errno.EIO, "I/O error"))
        self.successResultOf(mgr.delete_logs("c", range(2)))
        mgr.delete_log("e", 0)
        self.assertEqual((mgr._compacted, mgr._retention_due, mgr.cleaner._checkpoints),
                         ({}, {}, {}))
        self.assertEqual([tp for name in mgr._checkpointed.values()
                          for entries in name.values() for tp in entries], [])

    def test_last_dir_offline_calls_the_hook_once(self):
        """The service halts the broker when every dir is offline (Kafka's LogManager): the
        hook runs when the last one fails, once, with every dir."""
        mgr = self.make()
        calls = []
        mgr.on_all_dirs_offline = calls.append
        mgr.handle_dir_failure(self.dirs[0], OSError(errno.ENOSPC, "No space left on device"))
        self.assertEqual(calls, [])
        mgr.handle_dir_failure(self.dirs[1], OSError(errno.ENOSPC, "No space left on device"))
        mgr.handle_dir_failure(self.dirs[1], OSError(errno.ENOSPC, "No space left on device"))
        self.assertEqual(calls, [[os.path.abspath(d) for d in self.dirs]])
        self.assertEqual(mgr.health(), {
            "online_log_dirs": [], "offline_log_dirs": sorted(os.path.abspath(d) for d in self.dirs),
            "offline_log_directory_count": 2, "background_task_failures": {}})
        mgr.shutdown()

    def test_io_error_of_a_deleted_log_leaves_the_dir_online(self):
        # a flush or checkpoint started in a thread before DeleteTopics renamed the partition
        # dir fails on the old path: expected for a deleted log, not a disk failure
        mgr = self.make()
        a = mgr.get_or_create_log("a", 0)
        a.append_as_leader(make_batch(1, timestamp=self.now()), 0)
        leader_epoch_tmp = os.path.join(a.dir, checkpoint.LEADER_EPOCH_CHECKPOINT + ".tmp")
        mgr.delete_log("a", 0)

        def flush_on_the_old_path():
            with open(leader_epoch_tmp, "w"):
                pass
        with self.assertRaises(OSError) as cm:
            flush_on_the_old_path()
        error = a._io_failed(cm.exception)
        self.assertEqual(error.code, errors.KAFKA_STORAGE_ERROR)
        self.assertEqual(mgr.offline_dirs, frozenset())
        b = mgr.get_or_create_log("b", 0)
        b.append_as_leader(make_batch(1, timestamp=self.now()), 0)
        mgr.shutdown()


class CompactionTest(ManagerBase):
    def test_compaction_keeps_last_per_key_and_offsets(self):
        props = {"log.segment.bytes": "600", "log.cleaner.enable": "false",
                 "log.segment.delete.delay.ms": "0"}
        mgr = self.make(dirs=[os.path.join(self.mktemp(), "d")], props=props)
        a = mgr.get_or_create_log("c", 0, overrides={"cleanup.policy": "compact",
                                                      "delete.retention.ms": "1000"})
        from kafkatw.storage.cleaner import LogCleaner
        cleaner = LogCleaner(mgr)
        written = []
        for i in range(40):
            key = b"k%d" % (i % 5)
            value = None if i == 36 else b"v%d" % i  # k1 tombstone at offset 36
            a.append_as_leader(make_batch(1, keys=[key], values=[value], timestamp=self.now(),
                                          compression=i % 2 * 3), 0)
            written.append((i, key, value))
        a.update_high_watermark(40)
        active_base = a.active_segment.base_offset
        before = a.size
        stats = self.successResultOf(cleaner.clean(a))
        self.assertTrue(stats.records_kept < stats.records_read)
        self.assertLess(a.size, before)
        got = self.read_all(a)
        latest = {}
        for off, key, value in written:
            if off < active_base:
                latest[key] = off
        expected = [(o, k, v) for o, k, v in written
                    if o >= active_base or latest.get(k) == o]
        self.assertEqual(got, expected)
        self.assertEqual(a.log_end_offset, 40)
        # Tombstones go on a pass after delete.retention.ms past the pass that first kept
        # them (KIP-534's delete horizon).
        a.roll()
        self.clock.advance(5)
        a.append_as_leader(make_batch(1, keys=[b"z"], timestamp=self.now()), 0)
        a.update_high_watermark(a.log_end_offset)
        cleaner._checkpoints.clear()
        self.successResultOf(cleaner.clean(a, rng=None))
        self.assertIn((36, b"k1", None), self.read_all(a))
        a.roll()
        self.clock.advance(5)
        a.append_as_leader(make_batch(1, keys=[b"z"], timestamp=self.now()), 0)
        a.update_high_watermark(a.log_end_offset)
        cleaner._checkpoints.clear()
        self.successResultOf(cleaner.clean(a, rng=None))
        keys = [(o, k, v) for o, k, v in self.read_all(a)]
        self.assertNotIn((36, b"k1", None), keys)
        mgr.shutdown()

    def read_all(self, a):
        out = []
        data = b"".join(s.log.read(0, s.size) for s in a.segments)
        for pos, _h in records.iter_batch_headers(data):
            _, recs = records.decode_batch(data, pos)
            out.extend((r.offset, r.key, r.value) for r in recs)
        return out
