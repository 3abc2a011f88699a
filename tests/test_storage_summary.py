"""Loading after a clean shutdown from the log dir's summary (issue 21): logs are opened on
first use, serve what the summary says until then, and are exactly what their files hold
once opened; an unclean stop, a stale or malformed summary and files left to delete make the
next start read the files. Clean shutdown: leader-epoch checkpoints are not rewritten, many
dirty logs are synced with one syncfs. The 600-partition broker run is tests.test_scale."""

import os

from twisted.internet import task
from twisted.trial import unittest

from kafkatw.protocol import records
from kafkatw.storage import LogManager, checkpoint, summary
from kafkatw.storage import manager as manager_module

from .test_storage_helpers import make_batch

PARTITIONS = 6


def values(lg, offset=0):
    """[(offset, value)] of every record from ``offset`` to the log end."""
    buf = lg.read(offset, 10 ** 6).records.read()
    out, pos = [], 0
    while pos < len(buf):
        header, recs = records.decode_batch(buf, pos)
        out.extend((r.offset, r.value) for r in recs)
        pos += header.size_in_bytes
    return out


class SummaryBase(unittest.TestCase):
    def setUp(self):
        self.dir = os.path.abspath(os.path.join(self.mktemp(), "d"))
        self.clock = task.Clock()
        self.clock.advance(1_000_000)

    def make(self, props=None):
        mgr = LogManager([self.dir], props or {}, reactor=self.clock)
        mgr.load_logs()
        return mgr

    def now(self):
        return int(self.clock.seconds() * 1000)

    def fill(self, props=None):
        """PARTITIONS logs of topic t (a topic id), partition p holding p + 1 records."""
        mgr = self.make(props)
        for p in range(PARTITIONS):
            lg = mgr.get_or_create_log("t", p, b"\x05" * 16, {})
            for i in range(p + 1):
                lg.append_as_leader(make_batch(1, values=[b"%d/%d" % (p, i)],
                                               timestamp=self.now()), 3)
            lg.update_high_watermark(lg.log_end_offset)
        return mgr

    def expected(self, p):
        return [(i, b"%d/%d" % (p, i)) for i in range(p + 1)]


class DeferredLoadTest(SummaryBase):
    def test_logs_open_on_first_use_and_hold_their_records(self):
        self.fill().shutdown()
        self.assertTrue(os.path.exists(os.path.join(self.dir, summary.LOG_SUMMARY_FILE)))
        mgr = self.make()
        # the summary is gone once read: it is true of these files only until they change
        self.assertFalse(os.path.exists(os.path.join(self.dir, summary.LOG_SUMMARY_FILE)))
        logs = [mgr.get_log("t", p) for p in range(PARTITIONS)]
        self.assertEqual([lg.is_loaded for lg in logs], [False] * PARTITIONS)
        self.assertEqual([(lg.log_start_offset, lg.log_end_offset, lg.high_watermark,
                           lg.recovery_point, lg.topic_id) for lg in logs],
                         [(0, p + 1, p + 1, p + 1, b"\x05" * 16) for p in range(PARTITIONS)])
        sizes = [lg.size for lg in logs]
        self.assertEqual(sizes, [lg.size for lg in logs])
        self.assertEqual([lg.number_of_segments for lg in logs], [1] * PARTITIONS)
        self.assertEqual(mgr.get_log("t", 0).fetch_offset_by_timestamp(-1), (1, -1, 3))
        self.assertEqual([lg.is_loaded for lg in logs], [False] * PARTITIONS)
        # the first read opens the log; what the files hold is what the summary said
        self.assertEqual(values(logs[2]), self.expected(2))
        self.assertEqual([lg.is_loaded for lg in logs], [False, False, True] + [False] * 3)
        self.assertEqual((logs[2].log_end_offset, logs[2].size, logs[2].number_of_segments),
                         (3, sizes[2], 1))
        self.assertGreater(sizes[2], sizes[1])
        self.assertEqual(logs[2].log_end_offset_metadata.relative_position_in_segment, sizes[2])
        # an append opens it too
        logs[4].append_as_leader(make_batch(1, values=[b"4/5"], timestamp=self.now()), 3)
        self.assertEqual(values(logs[4]), self.expected(4) + [(5, b"4/5")])
        mgr.shutdown()
        # a log never opened is summarised again; every log holds its records
        mgr = self.make()
        self.assertEqual(sum(not lg.is_loaded for lg in mgr.all_logs()), PARTITIONS)
        for p in range(PARTITIONS):
            extra = [(5, b"4/5")] if p == 4 else []
            self.assertEqual(values(mgr.get_log("t", p)), self.expected(p) + extra)
        mgr.shutdown()

    def test_an_unclean_stop_after_a_deferred_load_recovers_from_the_files(self):
        self.fill().shutdown()
        mgr = self.make()
        mgr.get_log("t", 1).append_as_leader(make_batch(1, values=[b"1/2"],
                                                        timestamp=self.now()), 3)
        # no shutdown: a kill -9 (the marker was removed by the load)
        self.assertFalse(os.path.exists(os.path.join(self.dir, checkpoint.CLEAN_SHUTDOWN_FILE)))
        mgr2 = self.make()
        self.assertEqual([lg.is_loaded for lg in mgr2.all_logs()], [True] * PARTITIONS)
        self.assertEqual(values(mgr2.get_log("t", 1)), self.expected(1) + [(2, b"1/2")])
        for p in (0, 2, 3, 4, 5):
            self.assertEqual(values(mgr2.get_log("t", p)), self.expected(p))
        self.assertEqual(sum(lg.recovered_segments for lg in mgr2.all_logs()), PARTITIONS)
        mgr2.shutdown()

    def test_a_summary_without_the_marker_is_not_used(self):
        mgr = self.fill()
        mgr.shutdown()
        os.unlink(os.path.join(self.dir, checkpoint.CLEAN_SHUTDOWN_FILE))
        mgr = self.make()
        self.assertEqual([lg.is_loaded for lg in mgr.all_logs()], [True] * PARTITIONS)
        self.assertFalse(os.path.exists(os.path.join(self.dir, summary.LOG_SUMMARY_FILE)))
        self.assertEqual(values(mgr.get_log("t", 3)), self.expected(3))
        mgr.shutdown()

    def test_a_malformed_summary_loads_from_the_files(self):
        self.fill().shutdown()
        with open(os.path.join(self.dir, summary.LOG_SUMMARY_FILE), "w") as f:
            f.write("0\n1\nt 0 zero\n")
        mgr = self.make()
        self.assertEqual([lg.is_loaded for lg in mgr.all_logs()], [True] * PARTITIONS)
        self.assertEqual([mgr.get_log("t", p).log_end_offset for p in range(PARTITIONS)],
                         [p + 1 for p in range(PARTITIONS)])
        self.assertEqual([mgr.get_log("t", p).high_watermark for p in range(PARTITIONS)],
                         [p + 1 for p in range(PARTITIONS)])
        mgr.shutdown()

    def test_a_partition_left_out_of_the_summary_loads_from_its_files(self):
        self.fill().shutdown()
        path = os.path.join(self.dir, summary.LOG_SUMMARY_FILE)
        found = summary.read_summaries(path)
        del found["t-2"]
        summary.write_summaries(path, {(t, p): s for t, p, s in found.values()})
        mgr = self.make()
        self.assertEqual([mgr.get_log("t", p).is_loaded for p in range(PARTITIONS)],
                         [False, False, True, False, False, False])
        self.assertEqual(mgr.get_log("t", 2).high_watermark, 3)  # from the checkpoint
        self.assertEqual(values(mgr.get_log("t", 2)), self.expected(2))
        mgr.shutdown()

    def test_a_line_that_does_not_describe_a_log_is_left_out(self):
        """Its partition loads from its files (offsets from the checkpoints), the others
        from the summary."""
        self.fill().shutdown()
        path = os.path.join(self.dir, summary.LOG_SUMMARY_FILE)
        found = summary.read_summaries(path)
        t, p, s = found["t-3"]
        found["t-3"] = (t, p, s._replace(active_base=s.log_end_offset + 1))  # past the end
        summary.write_summaries(path, {(t, p): s for t, p, s in found.values()})
        self.assertEqual(sorted(summary.read_summaries(path)),
                         ["t-%d" % p for p in range(PARTITIONS) if p != 3])
        mgr = self.make()
        self.assertEqual([mgr.get_log("t", p).is_loaded for p in range(PARTITIONS)],
                         [False, False, False, True, False, False])
        self.assertEqual(values(mgr.get_log("t", 3)), self.expected(3))
        self.assertEqual(mgr.get_log("t", 3).high_watermark, 4)
        mgr.shutdown()

    def test_files_left_to_delete_make_the_next_start_read_the_files(self):
        props = {"log.segment.bytes": "200", "file.delete.delay.ms": "60000"}
        mgr = self.make(props)
        lg = mgr.get_or_create_log("r", 0)
        for i in range(10):
            lg.append_as_leader(make_batch(1, 100, timestamp=self.now()), 0)
        lg.update_high_watermark(lg.log_end_offset)
        lg.delete_records_before(6)
        self.assertGreater(mgr.cleanup_logs(), 0)  # segments renamed .deleted, removed later
        mgr.shutdown()
        self.assertTrue(any(n.endswith(".deleted") for n in os.listdir(lg.dir)))
        mgr = self.make(props)
        lg = mgr.get_log("r", 0)
        self.assertTrue(lg.is_loaded)
        self.assertFalse(any(n.endswith(".deleted") for n in os.listdir(lg.dir)))
        self.assertEqual((lg.log_start_offset, lg.log_end_offset), (6, 10))
        mgr.shutdown()

    def test_a_deferred_log_is_deleted_without_being_opened(self):
        self.fill().shutdown()
        mgr = self.make({"log.segment.delete.delay.ms": "0"})
        lg = mgr.get_log("t", 0)
        mgr.delete_log("t", 0)
        self.assertFalse(lg.is_loaded)
        self.clock.advance(0)
        self.assertEqual([n for n in os.listdir(self.dir) if n.startswith("t-0")], [])
        mgr.shutdown()
        self.assertNotIn("t-0", summary.read_summaries(
            os.path.join(self.dir, summary.LOG_SUMMARY_FILE)))


class LogObjectsMadeOnUseTest(SummaryBase):
    """After a clean shutdown no log object is made at start: only the partitions used get
    one (50,000 made at start were half of the start's CPU)."""

    def count_made(self):
        made = []

        class Counted(manager_module.UnifiedLog):
            def __init__(self, *args, **kwargs):
                made.append(args[2:4] if len(args) >= 4 else (kwargs["topic"],
                                                               kwargs["partition"]))
                super().__init__(*args, **kwargs)
        self.patch(manager_module, "UnifiedLog", Counted)
        return made

    def checkpoints(self):
        return [checkpoint.read_offsets(os.path.join(self.dir, name)) for name in (
            checkpoint.RECOVERY_POINT_CHECKPOINT, checkpoint.LOG_START_OFFSET_CHECKPOINT,
            checkpoint.REPLICATION_OFFSET_CHECKPOINT)]

    def test_only_the_partitions_used_get_a_log_object(self):
        self.fill().shutdown()
        made = self.count_made()
        mgr = self.make({"log.retention.ms": "60000"})
        self.assertEqual(made, [])
        self.assertEqual(mgr.opened_logs(), [])
        self.assertEqual([mgr.has_log("t", p) for p in range(PARTITIONS + 1)],
                         [True] * PARTITIONS + [False])
        self.assertEqual(sorted((t, p, s.log_end_offset) for t, p, s in mgr.unopened_summaries()),
                         [("t", p, p + 1) for p in range(PARTITIONS)])
        self.assertEqual(mgr.partition_topic_ids(),
                         {("t", p): b"\x05" * 16 for p in range(PARTITIONS)})
        self.assertEqual(mgr.log_dir_of("t", 3), self.dir)
        self.assertEqual(values(mgr.get_log("t", 2)), self.expected(2))
        self.assertEqual(made, [("t", 2)])
        self.assertIs(mgr.get_log("t", 2), mgr.opened_logs()[0])
        # the periodic tasks work from the summaries: the checkpoints hold every log
        self.clock.advance(60)
        self.assertEqual(mgr.cleanup_logs(), 0)
        mgr.checkpoint_recovery_offsets()
        mgr.checkpoint_log_start_offsets()
        mgr.checkpoint_high_watermarks()
        everything = {("t", p): p + 1 for p in range(PARTITIONS)}
        self.assertEqual(self.checkpoints(), [everything, {tp: 0 for tp in everything},
                                              everything])
        self.assertEqual(made, [("t", 2)])
        mgr.shutdown()
        self.assertEqual(made, [("t", 2)])
        self.assertEqual(self.checkpoints(), [everything, {tp: 0 for tp in everything},
                                              everything])
        self.assertEqual(sorted(summary.read_summaries(
            os.path.join(self.dir, summary.LOG_SUMMARY_FILE))),
            ["t-%d" % p for p in range(PARTITIONS)])
        # and the next start has every record, offset and topic id
        del made[:]
        mgr = self.make()
        self.assertEqual(made, [])
        for p in range(PARTITIONS):
            lg = mgr.get_log("t", p)
            self.assertEqual((values(lg), lg.high_watermark, lg.topic_id),
                             (self.expected(p), p + 1, b"\x05" * 16))
        self.assertEqual(len(made), PARTITIONS)
        mgr.shutdown()

    def test_listings_read_the_unopened_logs_summaries(self):
        """A metrics scrape, DescribeLogDirs and the console list every log (log_views): the
        unopened ones answer from their summaries, as the logs would, and none is made."""
        self.fill().shutdown()
        made = self.count_made()
        mgr = self.make()
        fields = ("topic", "partition", "dir", "size", "number_of_segments", "log_start_offset",
                  "log_end_offset", "high_watermark", "topic_id", "is_offline")
        views = sorted(mgr.log_views(), key=lambda v: v.partition)
        listed = [tuple(getattr(v, f) for f in fields) for v in views]
        self.assertEqual(made, [])
        logs = [mgr.get_log("t", p) for p in range(PARTITIONS)]
        self.assertEqual(listed, [tuple(getattr(lg, f) for f in fields) for lg in logs])
        self.assertEqual([v[3] > 0 for v in listed], [True] * PARTITIONS)
        self.assertEqual([v[6] for v in listed], [p + 1 for p in range(PARTITIONS)])
        mgr.shutdown()

    def test_the_console_and_the_group_lag_metrics_make_no_log(self):
        """The console's topic list and topic page, and the consumer lag of a metrics scrape
        read a partition's log as a listing does (log_view): the topic list made every log of
        every topic on the reactor, a scrape those of every committed offset."""
        import types

        from twisted.internet import defer

        from kafkatw.console import views
        from kafkatw.metrics import exporter

        self.fill().shutdown()
        made = self.count_made()
        mgr = self.make()
        metadata = types.SimpleNamespace(
            node_id=0, partition_state=lambda topic, p: None,
            topics={"t": types.SimpleNamespace(name="t", is_internal=False,
                                               num_partitions=PARTITIONS)})
        broker = types.SimpleNamespace(metadata=metadata, log_manager=mgr)
        client = types.SimpleNamespace(
            authorize=lambda op, kind, names, key: defer.succeed(list(names)))
        (row,) = self.successResultOf(views.topic_list(client, broker))["topics"]
        group = types.SimpleNamespace(offsets={("t", p): types.SimpleNamespace(offset=1)
                                               for p in range(PARTITIONS)})
        bulk = exporter.BulkText()
        bulk.add_groups(mgr, [("g", group)])
        self.assertEqual(made, [])
        self.assertEqual(mgr.log_view("t", PARTITIONS), None)
        sizes = sum(mgr.get_log("t", p).size for p in range(PARTITIONS))
        self.assertEqual((row["sizeBytes"], row["records"]),
                         (sizes, sum(p + 1 for p in range(PARTITIONS))))
        self.assertEqual(bulk.groups, PARTITIONS)
        self.assertIn(b'kafka_consumergroup_lag{consumergroup="g",topic="t",partition="5"} 5\n',
                      bulk.text())
        mgr.shutdown()

    def test_retention_opens_an_unopened_log_when_its_time_comes(self):
        props = {"log.retention.ms": "60000"}
        self.fill(props).shutdown()
        made = self.count_made()
        mgr = self.make(props)
        self.assertEqual(mgr.cleanup_logs(), 0)
        self.assertEqual(made, [])
        self.clock.advance(61)
        self.assertEqual(mgr.cleanup_logs(), PARTITIONS)
        self.assertEqual(sorted(made), [("t", p) for p in range(PARTITIONS)])
        mgr.shutdown()

    def test_a_new_retention_config_reaches_unopened_logs(self):
        self.fill().shutdown()
        made = self.count_made()
        mgr = self.make()
        self.assertEqual(mgr.cleanup_logs(), 0)
        self.clock.advance(10)
        mgr.update_log_config("t", {"retention.ms": "5000"})
        self.assertEqual(made, [])
        self.assertEqual(mgr.cleanup_logs(), PARTITIONS)
        self.assertEqual([(lg.log_start_offset, lg.log_end_offset) for lg in sorted(
            mgr.opened_logs(), key=lambda lg: lg.partition)],
            [(p + 1, p + 1) for p in range(PARTITIONS)])
        mgr.shutdown()

    def test_a_topics_config_change_has_retention_look_at_that_topics_unopened_logs_only(self):
        """Retention looks at every unopened log's summary once after the start; after one
        topic's config change, at that topic's again, not at all 50,000 of them."""
        mgr = self.fill()
        mgr.get_or_create_log("u", 0, b"\x06" * 16, {})
        mgr.shutdown()
        mgr = self.make()
        looked = []
        real = manager_module.summary_may_delete

        def spy(summ, *args):
            looked.append(summ)
            return real(summ, *args)
        self.patch(manager_module, "summary_may_delete", spy)
        mgr.cleanup_logs()
        self.assertEqual(len(looked), PARTITIONS + 1)  # the start: every unopened log
        del looked[:]
        mgr.cleanup_logs()
        self.assertEqual(looked, [])
        mgr.update_log_config("u", {"retention.ms": "3600000"})
        mgr.cleanup_logs()
        self.assertEqual(len(looked), 1)  # u-0 only
        del looked[:]
        mgr.update_broker_defaults({"log.retention.ms": "7200000"})
        mgr.cleanup_logs()
        self.assertEqual(len(looked), PARTITIONS + 1)  # a default: every topic's
        mgr.shutdown()

    def test_a_topic_made_compacted_opens_its_logs_for_the_cleaner(self):
        self.fill().shutdown()
        made = self.count_made()
        mgr = self.make()
        mgr.update_log_config("t", {"cleanup.policy": "compact"})
        self.assertEqual(len(made), PARTITIONS)
        self.assertEqual(len(mgr.compacted_logs()), PARTITIONS)
        mgr.shutdown()

    def test_a_kill_after_a_start_that_opened_few_logs_recovers_every_log(self):
        self.fill().shutdown()
        mgr = self.make()
        mgr.get_log("t", 1).append_as_leader(make_batch(1, values=[b"1/2"],
                                                        timestamp=self.now()), 3)
        mgr.checkpoint_recovery_offsets()
        mgr.checkpoint_log_start_offsets()
        mgr.checkpoint_high_watermarks()
        # no shutdown: a kill -9
        mgr2 = self.make()
        for p in range(PARTITIONS):
            lg = mgr2.get_log("t", p)
            extra = [(2, b"1/2")] if p == 1 else []
            self.assertEqual((values(lg), lg.high_watermark, lg.topic_id),
                             (self.expected(p) + extra, p + 1, b"\x05" * 16))
        mgr2.shutdown()

    def test_a_deleted_unopened_log_leaves_the_checkpoints(self):
        """A partition deleted without ever being used since the start leaves the offset
        checkpoints at their next write: a log of the same name made later (the topic made
        again) must not load, after a kill -9, with the deleted one's log start and recovery
        point (its records hidden, its unflushed tail not recovered)."""
        mgr = self.fill()
        mgr.get_log("t", 5).delete_records_before(4)
        mgr.shutdown()
        mgr = self.make()
        mgr.checkpoint_recovery_offsets()
        mgr.checkpoint_log_start_offsets()
        mgr.checkpoint_high_watermarks()
        mgr.delete_logs("t", [5])
        self.clock.advance(120)  # (file.delete.delay.ms: the -delete dir goes)
        mgr.checkpoint_recovery_offsets()
        mgr.checkpoint_log_start_offsets()
        mgr.checkpoint_high_watermarks()
        kept = {("t", p): p + 1 for p in range(PARTITIONS - 1)}
        self.assertEqual(self.checkpoints(), [kept, {tp: 0 for tp in kept}, kept])
        # the topic made again, two records written, then a kill -9 before the next tick
        lg = mgr.get_or_create_log("t", 5, b"\x06" * 16, {})
        lg.append_as_leader(make_batch(2, values=[b"a", b"b"], timestamp=self.now()), 7)
        lg.update_high_watermark(lg.log_end_offset)
        mgr2 = self.make()
        lg = mgr2.get_log("t", 5)
        self.assertEqual((values(lg), lg.log_start_offset), ([(0, b"a"), (1, b"b")], 0))
        mgr2.shutdown()

    def test_a_log_moved_to_another_dir_unused_leaves_the_first_dirs_checkpoints(self):
        """AlterReplicaLogDirs of a partition not used since the start: once the future log
        replaces it, the old dir's checkpoints stop listing it (a later move back would load
        with them after a kill -9)."""
        other = os.path.abspath(os.path.join(self.mktemp(), "e"))
        self.fill().shutdown()
        mgr = LogManager([self.dir, other], {}, reactor=self.clock)
        mgr.load_logs()
        for name in (checkpoint.RECOVERY_POINT_CHECKPOINT, checkpoint.LOG_START_OFFSET_CHECKPOINT,
                     checkpoint.REPLICATION_OFFSET_CHECKPOINT):
            mgr._write_checkpoints(name)
        future = mgr.create_future_log("t", 0, other)
        lg = mgr.get_log("t", 0)
        future.append_as_follower(lg.read(0, 10 ** 6).records.read())
        mgr.replace_current_with_future("t", 0, future)
        self.assertEqual(mgr.log_dir_of("t", 0), other)
        for name in (checkpoint.RECOVERY_POINT_CHECKPOINT, checkpoint.LOG_START_OFFSET_CHECKPOINT,
                     checkpoint.REPLICATION_OFFSET_CHECKPOINT):
            mgr._write_checkpoints(name)
        kept = {("t", p): p + 1 for p in range(1, PARTITIONS)}
        self.assertEqual(self.checkpoints(), [kept, {tp: 0 for tp in kept}, kept])
        mgr.shutdown()

    def test_a_start_and_clean_stop_touching_nothing_writes_the_same_files(self):
        """The summary and offset checkpoints of logs never opened are written back as read,
        byte for byte, however many clean restarts."""
        self.fill().shutdown()
        names = (summary.LOG_SUMMARY_FILE, checkpoint.RECOVERY_POINT_CHECKPOINT,
                 checkpoint.LOG_START_OFFSET_CHECKPOINT, checkpoint.REPLICATION_OFFSET_CHECKPOINT)

        def files():
            out = []
            for name in names:
                with open(os.path.join(self.dir, name), "rb") as f:
                    out.append(f.read())
            return out
        first = files()
        for _ in range(2):
            mgr = self.make()
            self.assertEqual(mgr.opened_logs(), [])
            mgr.shutdown()
            self.assertEqual(files(), first)

    def test_unopened_logs_of_a_dir_gone_offline_are_recovered_by_the_next_start(self):
        """A dir failing while its logs are unopened gets no summary or marker at the clean
        stop: the next start recovers them from their files, every record there; the other
        dir's logs stay unopened."""
        other = os.path.abspath(os.path.join(self.mktemp(), "e"))

        def make():
            mgr = LogManager([self.dir, other], {}, reactor=self.clock)
            mgr.load_logs()
            return mgr
        mgr = make()
        for p in range(PARTITIONS):
            lg = mgr.get_or_create_log("t", p, b"\x05" * 16, {})
            lg.append_as_leader(make_batch(p + 1, values=[b"%d/%d" % (p, i) for i in range(p + 1)],
                                           timestamp=self.now()), 3)
            lg.update_high_watermark(lg.log_end_offset)
        mgr.shutdown()
        mgr = make()
        mgr.handle_dir_failure(other, OSError(5, "Input/output error"))
        failed = sorted(v.partition for v in mgr.log_views() if v.is_offline)
        self.assertEqual(len(failed), PARTITIONS // 2)
        mgr.shutdown()
        self.assertFalse(os.path.exists(os.path.join(other, checkpoint.CLEAN_SHUTDOWN_FILE)))
        mgr = make()
        self.assertEqual(sorted(p for _, p, _ in mgr.unopened_summaries()),
                         sorted(set(range(PARTITIONS)) - set(failed)))
        for p in range(PARTITIONS):
            lg = mgr.get_log("t", p)
            self.assertEqual((values(lg), lg.is_offline), (self.expected(p), False))
        mgr.shutdown()

    def test_an_unopened_log_on_a_dir_gone_offline_answers_storage_error(self):
        from kafkatw.protocol import errors
        from kafkatw.protocol.errors import KafkaError
        self.fill().shutdown()
        mgr = self.make()
        mgr.handle_dir_failure(self.dir, OSError(5, "Input/output error"))
        self.assertIsNone(mgr.log_dir_of("t", 0))
        lg = mgr.get_log("t", 0)
        with self.assertRaises(KafkaError) as e:
            lg.read(0, 100)
        self.assertEqual(e.exception.code, errors.KAFKA_STORAGE_ERROR)
        mgr.shutdown()


class RetentionTest(SummaryBase):
    def test_retention_opens_only_logs_with_something_to_delete(self):
        mgr = self.fill({"log.retention.ms": "60000"})
        mgr.shutdown()
        self.clock.advance(30)
        mgr = self.make({"log.retention.ms": "60000"})
        self.assertEqual(mgr.cleanup_logs(), 0)
        self.assertEqual([lg.is_loaded for lg in mgr.all_logs()], [False] * PARTITIONS)
        self.clock.advance(31)  # every record is now older than retention.ms
        self.assertEqual(mgr.cleanup_logs(), PARTITIONS)
        self.assertEqual([(lg.log_start_offset, lg.log_end_offset) for lg in mgr.all_logs()],
                         [(p + 1, p + 1) for p in range(PARTITIONS)])
        mgr.shutdown()

    def test_retention_bytes_and_log_start_offset(self):
        props = {"log.segment.bytes": "200", "log.retention.bytes": "10000"}
        mgr = self.make(props)
        for topic in ("r", "s"):
            lg = mgr.get_or_create_log(topic, 0)
            for i in range(10):
                lg.append_as_leader(make_batch(1, 100, timestamp=self.now()), 0)
            lg.update_high_watermark(lg.log_end_offset)
        segments = lg.number_of_segments
        self.assertEqual(segments, 10)  # a batch each
        mgr.shutdown()
        mgr = self.make(props)
        self.assertEqual(mgr.cleanup_logs(), 0)
        self.assertEqual([lg.is_loaded for lg in mgr.all_logs()], [False, False])
        mgr.update_log_config("r", {"retention.bytes": "300"})
        self.assertEqual(mgr.cleanup_logs(), segments - 2)
        s = mgr.get_log("s", 0)
        self.assertFalse(s.is_loaded)
        s.delete_records_before(9)  # the log start beyond the first segments
        self.assertFalse(s.is_loaded)
        self.assertEqual(mgr.cleanup_logs(), 9)
        self.assertEqual((s.log_start_offset, s.number_of_segments), (9, 1))
        self.assertEqual(values(s, 9), [(9, b"A" * 100)])
        mgr.shutdown()


class ShutdownTest(SummaryBase):
    def test_leader_epoch_checkpoints_are_not_rewritten(self):
        mgr = self.fill()
        paths = [os.path.join(mgr.get_log("t", p).dir, checkpoint.LEADER_EPOCH_CHECKPOINT)
                 for p in range(PARTITIONS)]
        inodes = [os.stat(p).st_ino for p in paths]
        mgr.shutdown()
        self.assertEqual([os.stat(p).st_ino for p in paths], inodes)
        self.assertEqual([checkpoint.read_epochs(p) for p in paths], [[(3, 0)]] * PARTITIONS)

    def test_many_dirty_logs_are_synced_once(self):
        synced = []
        real = manager_module.sync_filesystem
        self.patch(manager_module, "sync_filesystem", lambda d: synced.append(d) or real(d))
        n = manager_module._SYNCFS_MIN_DIRTY_LOGS
        mgr = self.make()
        for p in range(n):
            mgr.get_or_create_log("many", p).append_as_leader(
                make_batch(1, timestamp=self.now()), 0)
        self.assertEqual(sum(lg.recovery_point == 0 for lg in mgr.all_logs()), n)
        mgr.shutdown()
        self.assertEqual(synced, [self.dir])
        self.assertEqual(set(checkpoint.read_offsets(os.path.join(
            self.dir, checkpoint.RECOVERY_POINT_CHECKPOINT)).values()), {1})
        self.assertTrue(os.path.exists(os.path.join(self.dir, checkpoint.CLEAN_SHUTDOWN_FILE)))
        found = summary.read_summaries(os.path.join(self.dir, summary.LOG_SUMMARY_FILE))
        self.assertEqual({s.recovery_point for _, _, s in found.values()}, {1})
        self.assertEqual(len(found), n)

    def test_few_dirty_logs_are_fsynced_each(self):
        synced = []
        self.patch(manager_module, "sync_filesystem", synced.append)
        mgr = self.fill()
        mgr.shutdown()
        self.assertEqual(synced, [])
        self.assertEqual(checkpoint.read_offsets(os.path.join(
            self.dir, checkpoint.RECOVERY_POINT_CHECKPOINT)),
            {("t", p): p + 1 for p in range(PARTITIONS)})

    def test_a_failed_sync_leaves_no_marker(self):
        def fail(d):
            raise OSError(5, "Input/output error")
        self.patch(manager_module, "sync_filesystem", fail)
        mgr = self.make()
        for p in range(manager_module._SYNCFS_MIN_DIRTY_LOGS):
            mgr.get_or_create_log("many", p).append_as_leader(
                make_batch(1, timestamp=self.now()), 0)
        mgr.shutdown()
        self.assertEqual(mgr.offline_dirs, frozenset([self.dir]))
        self.assertFalse(os.path.exists(os.path.join(self.dir, checkpoint.CLEAN_SHUTDOWN_FILE)))

    def test_a_dir_without_logs_gets_its_marker(self):
        other = os.path.abspath(os.path.join(self.mktemp(), "empty"))
        mgr = LogManager([self.dir, other], {}, reactor=self.clock)
        mgr.load_logs()
        mgr.get_or_create_log("t", 0)
        self.assertEqual(os.path.dirname(mgr.get_log("t", 0).dir), self.dir)
        mgr.shutdown()
        for d in (self.dir, other):
            self.assertTrue(os.path.exists(os.path.join(d, checkpoint.CLEAN_SHUTDOWN_FILE)), d)
        self.assertEqual(summary.read_summaries(os.path.join(other, summary.LOG_SUMMARY_FILE)),
                         {})


class CheckpointTickTest(SummaryBase):
    """The periodic offset checkpoints look only at logs whose offsets changed, and write a
    dir's file only when an entry in it changed (every entry, in Kafka's format)."""

    def test_a_tick_writes_only_what_changed(self):
        mgr = self.fill()
        writes = []
        real = checkpoint.write_offsets
        self.patch(checkpoint, "write_offsets",
                   lambda path, offsets: writes.append((os.path.basename(path), dict(offsets)))
                   or real(path, offsets))
        hw_file = checkpoint.REPLICATION_OFFSET_CHECKPOINT
        mgr.checkpoint_high_watermarks()  # the first: every dir
        self.assertEqual(writes, [(hw_file, {("t", p): p + 1 for p in range(PARTITIONS)})])
        del writes[:]
        mgr.checkpoint_high_watermarks()
        mgr.checkpoint_log_start_offsets()
        self.assertEqual(writes, [(checkpoint.LOG_START_OFFSET_CHECKPOINT,
                                   {("t", p): 0 for p in range(PARTITIONS)})])
        del writes[:]
        mgr.checkpoint_high_watermarks()
        mgr.checkpoint_log_start_offsets()
        self.assertEqual(writes, [])  # nothing changed
        lg = mgr.get_log("t", 3)
        lg.append_as_leader(make_batch(1, timestamp=self.now()), 3)
        self.assertEqual(mgr.get_log("t", 3).recovery_point, 0)
        mgr.checkpoint_high_watermarks()
        self.assertEqual(writes, [])  # the HW did not move
        lg.update_high_watermark(5)
        lg.delete_records_before(2)
        mgr.delete_log("t", 5)
        mgr.checkpoint_high_watermarks()
        mgr.checkpoint_log_start_offsets()
        expected_hw = {("t", p): p + 1 for p in range(5)}
        expected_hw[("t", 3)] = 5
        expected_start = {("t", p): 0 for p in range(5)}
        expected_start[("t", 3)] = 2
        self.assertEqual(writes, [(hw_file, expected_hw),
                                  (checkpoint.LOG_START_OFFSET_CHECKPOINT, expected_start)])
        self.assertEqual(checkpoint.read_offsets(os.path.join(self.dir, hw_file)), expected_hw)
        del writes[:]
        mgr.checkpoint_recovery_offsets()  # its first write: nothing was flushed, t-3 cut at 2
        self.assertEqual(writes, [(checkpoint.RECOVERY_POINT_CHECKPOINT, expected_start)])
        mgr.shutdown()



class LeftOutLogsTest(SummaryBase):
    """The logs a clean-shutdown summary leaves out (compacted ones) get their offsets from
    the checkpoint files, looked up there (read_offsets_of) rather than the files parsed."""

    def test_read_offsets_of_finds_only_the_wanted_entries(self):
        path = os.path.join(self.mktemp())
        offsets = {("t", p): 10 * p for p in range(50)}
        offsets[("t1", 2)] = 7  # ("t 1" is not "t1": names hold no spaces)
        checkpoint.write_offsets(path, offsets)
        self.assertEqual(checkpoint.read_offsets_of(path, [("t", 0), ("t", 49), ("t1", 2),
                                                           ("t", 50), ("u", 1)]),
                         {("t", 0): 0, ("t", 49): 490, ("t1", 2): 7})
        self.assertEqual(checkpoint.read_offsets_of(path + ".none", [("t", 0)]), {})
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace("\nt 3 30\n", "\n"))  # one entry fewer than the count says
        with self.assertRaises(checkpoint.CheckpointError):
            checkpoint.read_offsets_of(path, [("t", 0)])
        with open(path, "w") as f:
            f.write(text.replace("\nt 3 30\n", "\nt 3 x\n"))
        with self.assertRaises(checkpoint.CheckpointError):
            checkpoint.read_offsets_of(path, [("t", 3)])

    def test_a_compacted_log_loads_with_its_checkpointed_offsets_without_parsing_them_all(self):
        mgr = self.fill()
        c = mgr.get_or_create_log("c", 0, None, {"cleanup.policy": "compact"})
        for i in range(3):
            c.append_as_leader(make_batch(1, key=b"k%d" % i, timestamp=self.now()), 3)
        c.update_high_watermark(2)
        mgr.shutdown()
        self.assertNotIn("c-0", summary.read_summaries(
            os.path.join(self.dir, summary.LOG_SUMMARY_FILE)))
        parsed = []
        real = checkpoint.read_offsets
        self.patch(checkpoint, "read_offsets", lambda path: parsed.append(path) or real(path))
        mgr = LogManager([self.dir], {}, reactor=self.clock,
                         topic_overrides={"c": {"cleanup.policy": "compact"}})
        mgr.load_logs()
        self.assertEqual(parsed, [])
        self.assertEqual([lg.topic for lg in mgr.opened_logs()], ["c"])
        c = mgr.get_log("c", 0)
        self.assertEqual((c.log_end_offset, c.high_watermark, c.recovery_point), (3, 2, 3))
        mgr.shutdown()
