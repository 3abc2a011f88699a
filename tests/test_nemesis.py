"""The fault-injection harness (kafkatw.nemesis): its seeded schedule and its checker on crafted
data (each kind of finding detected, with the offsets named), and the short form of a run: three
brokers and ZooKeeper, idempotent acks=all producers, ten SIGKILLs of a partition leader, then
0 lost acknowledged records, 0 duplicates, 0 reordered and 0 divergent replica offsets.
Skips without ZooKeeper unless KAFKATW_REQUIRE_ZOOKEEPER=1."""

import os
import tempfile

from twisted.trial import unittest

from kafkatw.nemesis import checker, schedule
from kafkatw.nemesis.__main__ import main as nemesis_main
from kafkatw.protocol.records import Record, build_batch


class ScheduleTests(unittest.SynchronousTestCase):
    def test_same_seed_same_schedule(self):
        a = schedule.make_schedule(7, schedule.KINDS, faults=20)
        self.assertEqual(a, schedule.make_schedule(7, schedule.KINDS, faults=20))
        self.assertNotEqual(a, schedule.make_schedule(8, schedule.KINDS, faults=20))
        self.assertEqual(len(a), 20)
        self.assertEqual({f.kind for f in a} <= set(schedule.KINDS), True)
        for f in a:
            self.assertTrue(1.0 <= f.hold_s <= 3.0 and 2.0 <= f.rest_s <= 4.0 and 0 <= f.pick < 1, f)

    def test_duration_bounds_the_faults(self):
        plan = schedule.make_schedule(3, (schedule.KILL_LEADER,), duration_s=30, hold_s=(2, 2), rest_s=(3, 3))
        self.assertEqual(len(plan), 6)
        self.assertEqual({f.kind for f in plan}, {schedule.KILL_LEADER})

    def test_parse_kinds(self):
        self.assertEqual(schedule.parse_kinds("kill-leader, pause-zookeeper"),
                         (schedule.KILL_LEADER, schedule.PAUSE_ZOOKEEPER))
        with self.assertRaises(ValueError) as e:
            schedule.parse_kinds("kill-leader,drop-table")
        self.assertIn("unknown fault 'drop-table'", str(e.exception))

    def test_cli_refuses_unknown_fault_in_one_line(self):
        with self.assertRaises(SystemExit) as e:
            nemesis_main(["--kinds", "nuke"])
        self.assertEqual(e.exception.code, 2)


class CheckRecordsTests(unittest.SynchronousTestCase):
    def test_clean_run(self):
        final = {0: [(0, b"0-0"), (1, b"1-0"), (2, b"0-2")], 1: [(0, b"0-1")]}
        acked = [(0, 0, b"0-0"), (0, 1, b"1-0"), (0, 2, b"0-2"), (1, 0, b"0-1")]
        v = checker.check_records(acked, final)
        self.assertTrue(v.ok)
        self.assertEqual((v.acked, v.read), (4, 4))

    def test_each_finding_named(self):
        final = {0: [(0, b"0-0"), (1, b"0-2"), (2, b"0-1"), (3, b"0-0")], 1: [(0, b"1-5")]}
        acked = [(0, 0, b"0-0"), (0, 1, b"0-1"), (0, 4, b"0-3"), (1, 0, b"1-5")]
        v = checker.check_records(acked, final)
        self.assertFalse(v.ok)
        self.assertEqual(v.lost, ["b'0-3' acknowledged at 0-4"])
        self.assertEqual(v.moved, ["b'0-1' acknowledged at 0-1, found at 0-2"])
        self.assertEqual(v.duplicates, ["b'0-0' at 0-0 and 0-3"])
        self.assertEqual(v.reordered, ["partition 0: producer 0's 1 at offset 2 after its 2 at offset 1",
                                       "partition 0: producer 0's 0 at offset 3 after its 1 at offset 2"])

    def test_acknowledged_without_an_offset(self):
        """librdkafka acknowledges a request whose answer it lost once a later one succeeds,
        with no offset (None from confluent-kafka): present in its partition is all it can
        be checked for (the short run once died here on a %d of None)."""
        final = {0: [(0, b"0-0"), (1, b"0-2")], 1: [(0, b"0-1")]}
        acked = [(0, None, b"0-0"), (0, None, b"0-1"), (1, None, b"0-3"), (0, 1, b"0-2")]
        v = checker.check_records(acked, final)
        self.assertEqual(v.lost, ["b'0-3' acknowledged in partition 1 without an offset"])
        self.assertEqual(v.moved, ["b'0-1' acknowledged in partition 0 without an offset, found at 1-0"])
        self.assertEqual((v.acked, v.unplaced, v.duplicates, v.reordered), (4, 3, [], []))
        self.assertIn("4 acknowledged (3 without an offset), 3 read back: 1 lost", v.summary())

    def test_a_copy_under_a_newer_producer_epoch_is_resent_not_duplicated(self):
        """librdkafka bumps its epoch after an out-of-order answer and renumbers what it has not
        seen acknowledged, including a send whose answer a killed leader never gave: the copy
        comes in a batch of the same producer id and a newer epoch (seen in a CI run). The same
        epoch twice, or another producer id, stays a duplicate: the broker's to prevent."""
        final = {0: [(0, b"1-0"), (1, b"1-1"), (2, b"1-0"), (3, b"1-1"), (4, b"1-2"), (5, b"1-2"), (6, b"0-0"),
                     (7, b"0-0")]}
        producers = {0: {0: (7, 0), 1: (7, 0), 2: (7, 1), 3: (7, 1), 4: (7, 1), 5: (7, 1), 6: (7, 1), 7: (8, 2)}}
        acked = [(0, 2, b"1-0"), (0, 1, b"1-1"), (0, 4, b"1-2"), (0, 6, b"0-0")]
        v = checker.check_records(acked, final, producers)
        self.assertEqual(v.resent, ["b'1-0' at 0-0 (producer 7 epoch 0), again at 0-2 (epoch 1)",
                                    "b'1-1' at 0-1 (producer 7 epoch 0), again at 0-3 (epoch 1)"])
        self.assertEqual(v.duplicates, ["b'1-2' at 0-4 and 0-5", "b'0-0' at 0-6 and 0-7"])
        self.assertEqual((v.moved, v.lost), ([], []))
        self.assertEqual(v.reordered, ["partition 0: producer 1's 2 at offset 5 after its 2 at offset 4",
                                       "partition 0: producer 0's 0 at offset 7 after its 0 at offset 6"])
        self.assertFalse(v.ok)
        self.assertIn("2 re-sent under a new producer epoch", v.summary())
        without = checker.check_records(acked, final)
        self.assertEqual(len(without.duplicates), 4)
        self.assertEqual(without.resent, [])

    def test_read_producers(self):
        root = tempfile.mkdtemp()
        self.addCleanup(__import__("shutil").rmtree, root)
        path = os.path.join(root, "t-0")
        os.makedirs(path)
        with open(os.path.join(path, "%020d.log" % 0), "wb") as f:
            f.write(bytes(build_batch([Record(value=b"a"), Record(value=b"b")], base_offset=0,
                                      producer_id=5, producer_epoch=1, base_sequence=0)))
            f.write(bytes(build_batch([Record(value=b"c")], base_offset=2)))
        self.assertEqual(checker.read_producers(path), {0: (5, 1), 1: (5, 1)})

    def test_consumer_anomalies(self):
        final = {0: [(0, b"a"), (1, b"b")]}
        seen = {0: [(0, b"a"), (1, b"x"), (0, b"a")]}
        self.assertEqual(checker.consumer_anomalies(seen, final),
                         ["partition 0: b'x' delivered at offset 1 which finally holds b'b'",
                          "partition 0: offset 0 delivered after 1"])


def _write_log(directory, batches):
    os.makedirs(directory)
    with open(os.path.join(directory, "%020d.log" % 0), "wb") as f:
        for base, values in batches:
            f.write(bytes(build_batch([Record(value=v) for v in values], base_offset=base)))


class CheckReplicasTests(unittest.SynchronousTestCase):
    def test_identical_lagging_and_divergent(self):
        root = tempfile.mkdtemp()
        self.addCleanup(__import__("shutil").rmtree, root)
        dirs = {b: os.path.join(root, "b%d" % b) for b in (1, 2, 3)}
        _write_log(os.path.join(dirs[1], "t-0"), [(0, [b"a", b"b"]), (2, [b"c"])])
        _write_log(os.path.join(dirs[2], "t-0"), [(0, [b"a", b"b"]), (2, [b"c"])])
        _write_log(os.path.join(dirs[3], "t-0"), [(0, [b"a", b"b"])])
        self.assertEqual(checker.check_data_dirs(dirs, "t", 1), ([], ["t-0: broker 3 ends at 2, broker 1 at 3"]))
        _write_log(os.path.join(dirs[1], "t-1"), [(0, [b"a"]), (1, [b"b"])])
        _write_log(os.path.join(dirs[2], "t-1"), [(0, [b"a"]), (1, [b"B"])])
        divergent, lagging = checker.check_data_dirs(dirs, "t", 2)
        self.assertEqual(lagging, ["t-0: broker 3 ends at 2, broker 1 at 3"])
        self.assertEqual(len(divergent), 1)
        self.assertTrue(divergent[0].startswith("t-1: broker 2 offsets 1-1 (crc "), divergent)
        self.assertIn("differ from broker 1's batch 1-1", divergent[0])

    def test_producers_come_from_the_replica_the_others_are_compared_with(self):
        """The longest replica (broker 2 here, holding a batch the others lack) gives the
        producer ids and epochs check_records reads, from the same read of the files."""
        root = tempfile.mkdtemp()
        self.addCleanup(__import__("shutil").rmtree, root)
        dirs = {b: os.path.join(root, "b%d" % b) for b in (1, 2)}
        first = build_batch([Record(value=b"a")], base_offset=0, producer_id=5, producer_epoch=0, base_sequence=0)
        later = build_batch([Record(value=b"b"), Record(value=b"c")], base_offset=1, producer_id=5,
                            producer_epoch=1, base_sequence=0)
        for b, batches in ((1, [first]), (2, [first, later])):
            os.makedirs(os.path.join(dirs[b], "t-0"))
            with open(os.path.join(dirs[b], "t-0", "%020d.log" % 0), "wb") as f:
                f.write(b"".join(bytes(x) for x in batches))
        producers = {}
        self.assertEqual(checker.check_data_dirs(dirs, "t", 1, producers),
                         ([], ["t-0: broker 1 ends at 1, broker 2 at 3"]))
        self.assertEqual(producers, {0: {0: (5, 0), 1: (5, 1), 2: (5, 1)}})


class ProducerClientLogTests(unittest.SynchronousTestCase):
    def test_a_producer_writes_librdkafka_s_account_to_its_file(self):
        """A run's producers keep librdkafka's eos/msg debug log in the cluster folder: the one
        account of why a value was sent twice (an epoch bump) or acknowledged without an offset."""
        from kafkatw import testing
        from kafkatw.nemesis import workload
        from tests.support import poll_until

        path = os.path.join(self.mktemp() + "-producer.log")
        self.addCleanup(lambda: os.path.exists(path) and os.remove(path))
        with testing.KafkaBroker() as broker:
            worker = workload.ProducerWorker(0, broker.bootstrap_servers, "logged", 1, 200, log_path=path)
            worker.start()
            poll_until(lambda: len(worker.acked) >= 20, timeout=60, message="20 acknowledged values")
            self.assertEqual(worker.stop(30), 0)
        with open(path) as f:
            text = f.read()
        self.assertIn("PID{Id:", text)  # the idempotent producer id it was given
        self.assertIn("delivered", text)
        self.assertEqual(worker.conf["logger"].handlers, [])  # closed with the run


class ShortNemesisRunTests(unittest.SynchronousTestCase):
    """The short form of ``python -m kafkatw.nemesis`` (the long one is in docs/cluster.md)."""

    def test_ten_leader_kills_lose_nothing(self):
        from kafkatw.nemesis import run
        from tests.test_cluster_e2e import require_zookeeper

        require_zookeeper()
        options = run.Options(seed=20, faults=10, kinds=(schedule.KILL_LEADER,), hold_s=(0.5, 1.5),
                              rest_s=(1.0, 2.0), rate=100)
        report = run.run(options, log=lambda line: None)
        self.assertEqual(len(report.faults), 10, report.text())
        v = report.verdict
        self.assertTrue(v.ok, report.text())
        self.assertEqual((v.lost, v.duplicates, v.reordered, v.moved, v.divergent), ([], [], [], [], []))
        self.assertEqual(v.acked, report.produced, report.text())  # every record acknowledged in the end
        # a value librdkafka re-sent under a new epoch is read twice (see check_records)
        self.assertEqual(v.read, v.acked + len(v.resent), report.text())
        self.assertGreater(v.acked, 1000, report.text())
