"""Tests for kafkatw.cluster.metadata: name rules, create/delete, persistence and reload."""

import json
import os

from twisted.internet import defer
from twisted.trial import unittest

from kafkatw.cluster import metadata as md
from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError


class TopicNameRulesTests(unittest.SynchronousTestCase):
    def assertInvalid(self, name):
        with self.assertRaises(KafkaError) as cm:
            md.validate_topic_name(name)
        self.assertEqual(cm.exception.code, errors.INVALID_TOPIC_EXCEPTION)
        return cm.exception

    def test_legal(self):
        for name in ["a", "A.b_c-9", "x" * 249, "__consumer_offsets"]:
            md.validate_topic_name(name)

    def test_illegal(self):
        self.assertIn("empty", self.assertInvalid("").message)
        self.assertInvalid(".")
        self.assertInvalid("..")
        self.assertIn("249", self.assertInvalid("x" * 250).message)
        self.assertIn("ASCII alphanumerics", self.assertInvalid("a b").message)
        self.assertInvalid("a/b")
        self.assertInvalid("tópico")

    def test_uuid_base64_round_trip(self):
        raw = md.random_uuid()
        text = md.uuid_to_base64(raw)
        self.assertEqual(len(text), 22)
        self.assertEqual(md.uuid_from_base64(text), raw)


class ClusterMetadataTests(unittest.SynchronousTestCase):
    def setUp(self):
        base = self.mktemp()
        self.dirs = [os.path.join(base, "d0"), os.path.join(base, "d1")]
        self.meta = md.ClusterMetadata.load(self.dirs, node_id=1)

    def test_meta_properties_written_in_every_dir(self):
        for d in self.dirs:
            props = md.read_properties(os.path.join(d, "meta.properties"))
            self.assertEqual(props, {"version": "1", "cluster.id": self.meta.cluster_id, "node.id": "1"})
        self.assertEqual(len(self.meta.cluster_id), 22)

    def test_create_and_query(self):
        events = []
        self.meta.add_listener(lambda ev, info: events.append((ev, info.name)))
        info = self.successResultOf(self.meta.create_topic("t1", 3, {"cleanup.policy": "compact"}))
        self.assertEqual(len(info.topic_id), 16)
        self.assertEqual(self.meta.partition_count("t1"), 3)
        self.assertEqual(self.meta.leader("t1", 2), 1)
        self.assertIsNone(self.meta.leader("t1", 3))
        self.assertEqual(self.meta.leader_epoch("t1", 0), 0)
        self.assertEqual(self.meta.leader_state("t1", 2), (info.topic_id, 1, 0, False))
        self.assertIsNone(self.meta.leader_state("t1", 3))
        self.assertIsNone(self.meta.leader_state("t1", -1))
        self.assertIsNone(self.meta.leader_state("nope", 0))
        self.assertIsNone(self.meta.leader("nope", 0))
        self.assertEqual(self.meta.topic_name(info.topic_id), "t1")
        self.assertEqual(self.meta.topic_id("nope"), bytes(16))
        self.assertEqual(events, [(md.TOPIC_CREATED, "t1")])

    def test_duplicate_and_collision(self):
        self.meta.create_topic("a.b", 1)
        with self.assertRaises(KafkaError) as cm:
            self.meta.create_topic("a.b", 1)
        self.assertEqual(cm.exception.code, errors.TOPIC_ALREADY_EXISTS)
        with self.assertRaises(KafkaError) as cm:
            self.meta.create_topic("a_b", 1)
        self.assertEqual(cm.exception.code, errors.INVALID_TOPIC_EXCEPTION)
        self.assertEqual(cm.exception.message, "Topic 'a_b' collides with existing topic: a.b")

    def test_internal_flag(self):
        self.assertTrue(self.successResultOf(self.meta.create_topic("__consumer_offsets", 2)).is_internal)
        self.assertFalse(self.successResultOf(self.meta.create_topic("plain", 1)).is_internal)

    def test_reload(self):
        info = self.successResultOf(self.meta.create_topic("t1", 2, {"retention.ms": "1000"}))
        self.meta.create_topic("gone", 1)
        self.meta.delete_topic("gone")
        pid = self.successResultOf(self.meta.next_producer_id())
        again = md.ClusterMetadata.load(self.dirs, node_id=1)
        self.assertEqual(again.cluster_id, self.meta.cluster_id)
        self.assertEqual(list(again.topics), ["t1"])
        self.assertEqual(again.get_topic("t1"), info)
        self.assertGreater(self.successResultOf(again.next_producer_id()), pid)

    def test_producer_ids_unique_across_restarts(self):
        seen = {self.successResultOf(self.meta.next_producer_id()) for _ in range(5)}
        for _ in range(3):
            m = md.ClusterMetadata.load(self.dirs, node_id=1)
            ids = {self.successResultOf(m.next_producer_id()) for _ in range(3)}
            self.assertFalse(ids & seen)
            seen |= ids

    def test_node_id_mismatch_refuses(self):
        self.assertRaises(ValueError, md.ClusterMetadata.load, self.dirs, 2)

    def test_recover_topics_from_partition_dirs(self):
        tid = md.random_uuid()
        for p in (0, 3):
            pdir = os.path.join(self.dirs[1], "lost-%d" % p)
            os.makedirs(pdir)
            with open(os.path.join(pdir, "partition.metadata"), "w") as f:
                f.write("version: 0\ntopic_id: %s\n" % md.uuid_to_base64(tid))
        os.makedirs(os.path.join(self.dirs[0], "lost-1.abc-delete"))
        again = md.ClusterMetadata.load(self.dirs, node_id=1)
        info = again.get_topic("lost")
        self.assertEqual((info.num_partitions, info.topic_id), (4, tid))
        with open(again.metadata_path) as f:
            self.assertEqual([t["name"] for t in json.load(f)["topics"]], ["lost"])

    def test_published_version_moves_with_every_published_change(self):
        """A parked fetch reuses its partition look-ups while this version is unchanged:
        creating, growing, reconfiguring and deleting a topic each move it; queries do not."""
        seen = [self.meta.published_version]

        def moved():
            self.assertGreater(self.meta.published_version, seen[-1])
            seen.append(self.meta.published_version)

        self.successResultOf(self.meta.create_topic("t", 1))
        moved()
        self.meta.leader_state("t", 0)
        self.assertEqual(self.meta.published_version, seen[-1])
        self.successResultOf(self.meta.create_partitions("t", 2))
        moved()
        self.successResultOf(self.meta.alter_topic_configs("t", {"retention.ms": "1000"}))
        moved()
        self.successResultOf(self.meta.delete_topic("t"))
        moved()

    def test_deleted_topic_leaves_no_partition_states(self):
        """The memo of a deleted topic's partition states goes with it (a topic of thousands
        of partitions stayed until the memo outgrew its bound)."""
        self.successResultOf(self.meta.create_topic("gone", 3))
        self.assertEqual(self.meta.partition_state("gone", 2).leader, 1)
        self.assertIn("gone", self.meta._partition_states)
        self.successResultOf(self.meta.delete_topic("gone"))
        self.assertNotIn("gone", self.meta._partition_states)
        self.assertIsNone(self.meta.partition_state("gone", 2))

    def test_topic_partition_states_are_each_partition_state_in_one_list(self):
        """Metadata's answer reads a topic's states in one call: the same states as one call
        per partition, one list while the topic is unchanged, a new one when it grows."""
        self.successResultOf(self.meta.create_topic("t", 3))
        states = self.meta.topic_partition_states("t")
        self.assertEqual(states, [self.meta.partition_state("t", p) for p in range(3)])
        self.assertEqual([(s.leader, s.isr, s.replicas) for s in states], [(1, (1,), (1,))] * 3)
        self.assertIs(self.meta.topic_partition_states("t"), states)
        self.successResultOf(self.meta.create_partitions("t", 5))
        grown = self.meta.topic_partition_states("t")
        self.assertEqual(len(grown), 5)
        self.assertEqual(len(states), 3)  # (the old list is not changed under a cached answer)
        self.assertEqual(self.meta.topic_partition_states("unknown"), [])

    def test_deleted_topic_is_not_recovered_from_its_dirs(self):
        """A crash after a deletion is durable but before its directories are renamed: the
        next load does not bring the topic back; forgetting it (dirs gone) is persisted."""
        info = self.successResultOf(self.meta.create_topic("gone", 2))
        for p in range(2):
            pdir = os.path.join(self.dirs[p], "gone-%d" % p)
            os.makedirs(pdir)
            with open(os.path.join(pdir, "partition.metadata"), "w") as f:
                f.write("version: 0\ntopic_id: %s\n" % md.uuid_to_base64(info.topic_id))
        self.successResultOf(self.meta.delete_topic("gone"))
        self.assertEqual(self.meta.deleted_topic_ids, frozenset([info.topic_id]))
        with open(os.path.join(self.dirs[0], md.METADATA_FILE + ".tmp"), "w") as f:
            f.write("{half a write")
        again = md.ClusterMetadata.load(self.dirs, node_id=1)
        self.assertIsNone(again.get_topic("gone"))
        self.assertEqual(again.deleted_topic_ids, frozenset([info.topic_id]))
        self.assertFalse(os.path.exists(os.path.join(self.dirs[0], md.METADATA_FILE + ".tmp")))
        self.successResultOf(again.forget_deleted_topic(info.topic_id))
        self.assertEqual(again.deleted_topic_ids, frozenset())
        third = md.ClusterMetadata.load(self.dirs, node_id=1)
        self.assertEqual(third.deleted_topic_ids, frozenset())
        self.assertEqual(third.get_topic("gone").topic_id, info.topic_id)  # dirs still there

    def test_recover_topic_id_from_any_partition_dir(self):
        """Partitions without a partition.metadata, a plain file and a symlinked directory
        named like partitions: the id comes from whichever partition has one, files are not
        partitions, symlinked directories are."""
        tid = md.random_uuid()
        for p in range(6):
            os.makedirs(os.path.join(self.dirs[0], "half-%d" % p))
        with open(os.path.join(self.dirs[0], "half-4", "partition.metadata"), "w") as f:
            f.write("version: 0\ntopic_id: %s\n" % md.uuid_to_base64(tid))
        with open(os.path.join(self.dirs[0], "half-9"), "w") as f:
            f.write("not a partition")
        target = os.path.abspath(os.path.join(self.mktemp(), "elsewhere"))
        os.makedirs(target)
        os.symlink(target, os.path.join(self.dirs[1], "half-7"))
        again = md.ClusterMetadata.load(self.dirs, node_id=1)
        info = again.get_topic("half")
        self.assertEqual((info.num_partitions, info.topic_id), (8, tid))

    def test_delete_unknown(self):
        with self.assertRaises(KafkaError) as cm:
            self.meta.delete_topic("nope")
        self.assertEqual(cm.exception.code, errors.UNKNOWN_TOPIC_OR_PARTITION)


class QueuedWrites(md.ClusterMetadata):
    """Writes wait in ``queue`` until the test runs them (as a busy thread pool would)."""

    def __init__(self, *a, **kw):
        md.ClusterMetadata.__init__(self, *a, **kw)
        self.queue = []

    def _run_blocking(self, fn, *args):
        d = defer.Deferred()
        self.queue.append((fn, args, d))
        return d

    def run_write(self, fail=None):
        fn, args, d = self.queue.pop(0)
        if fail is not None:
            d.errback(fail)
            return
        d.callback(fn(*args))


class StagedWritesTests(unittest.SynchronousTestCase):
    """Changes are validated at once, written off the reactor one write at a time, and
    published (listeners, queries, the caller's Deferred) in order once durable."""

    def setUp(self):
        self.dirs = [os.path.join(self.mktemp(), "d0")]
        self.meta = QueuedWrites.load(self.dirs, node_id=1)
        self.events = []
        self.meta.add_listener(lambda ev, info: self.events.append((ev, info.name)))

    def on_disk(self):
        with open(self.meta.metadata_path) as f:
            return [t["name"] for t in json.load(f)["topics"]]

    def test_created_topic_is_published_once_durable(self):
        d = self.meta.create_topic("t", 2)
        self.assertNoResult(d)
        self.assertEqual((self.meta.get_topic("t"), self.events, self.on_disk()), (None, [], []))
        with self.assertRaises(KafkaError) as cm:
            self.meta.create_topic("t", 1)  # accepted already: refused as Kafka's controller does
        self.assertEqual(cm.exception.code, errors.TOPIC_ALREADY_EXISTS)
        self.meta.run_write()
        info = self.successResultOf(d)
        self.assertIs(self.meta.get_topic("t"), info)
        self.assertEqual((self.events, self.on_disk()), ([(md.TOPIC_CREATED, "t")], ["t"]))

    def test_one_write_at_a_time_covering_everything_staged_before_it(self):
        first = self.meta.create_topic("a", 1)
        second = self.meta.create_topic("b", 1)
        third = self.meta.delete_topic("a")
        self.assertEqual(len(self.meta.queue), 1)  # the second waits for the first write
        self.meta.run_write()
        self.successResultOf(first)
        self.assertNoResult(second)
        self.assertEqual(len(self.meta.queue), 1)
        self.meta.run_write()  # one write for "b" and the deletion of "a"
        self.assertEqual(self.meta.queue, [])
        self.successResultOf(second)
        self.successResultOf(third)
        self.assertEqual(self.events, [(md.TOPIC_CREATED, "a"), (md.TOPIC_CREATED, "b"),
                                       (md.TOPIC_DELETED, "a")])
        self.assertEqual((sorted(self.meta.topics), self.on_disk()), (["b"], ["b"]))

    def test_a_slow_listener_holds_publication_and_later_changes(self):
        logs = defer.Deferred()
        self.meta.add_listener(lambda ev, info: logs if ev == md.TOPIC_CREATED else None)
        created = self.meta.create_topic("t", 1)
        deleted = self.meta.delete_topic("t")
        self.meta.run_write()
        self.meta.run_write()
        self.assertNoResult(created)
        self.assertIsNone(self.meta.get_topic("t"))  # not visible before its logs exist
        self.assertEqual(self.events, [(md.TOPIC_CREATED, "t")])
        logs.callback(None)
        self.successResultOf(created)
        self.successResultOf(deleted)
        self.assertEqual(self.events, [(md.TOPIC_CREATED, "t"), (md.TOPIC_DELETED, "t")])
        self.assertIsNone(self.meta.get_topic("t"))

    def test_a_listener_deferred_fired_but_waiting_is_waited_for(self):
        """A listener's Deferred that has fired but waits on one its callback returned (a
        DeferredLock's run, a chain) holds publication like a pending one."""
        logs = defer.Deferred()
        lock = defer.DeferredLock()
        self.meta.add_listener(lambda ev, info: lock.run(lambda: logs))
        created = self.meta.create_topic("t", 1)
        self.meta.run_write()
        self.assertNoResult(created)
        self.assertIsNone(self.meta.get_topic("t"))
        logs.callback(None)
        self.assertEqual(self.successResultOf(created).name, "t")

    def test_failed_write_fails_what_is_pending_and_forgets_it(self):
        kept = self.meta.create_topic("kept", 1)
        self.meta.run_write()
        self.successResultOf(kept)
        lost = self.meta.create_topic("lost", 1)
        queued = self.meta.alter_topic_configs("kept", {"retention.ms": "5"})
        self.meta.run_write(fail=OSError(28, "No space left on device"))
        self.failureResultOf(lost, OSError)
        self.failureResultOf(queued, OSError)
        # an I/O error is one line in the log (no traceback), counted
        self.assertEqual(len(self.flushLoggedErrors(OSError)), 0)
        self.assertEqual(self.meta.write_failures.failures, 1)
        self.assertEqual((sorted(self.meta.topics), self.on_disk(), self.meta.queue), (["kept"], ["kept"], []))
        self.assertEqual(self.meta.get_topic("kept").configs, {})
        again = self.meta.create_topic("lost", 1)  # the name is free again
        self.meta.run_write()
        self.successResultOf(again)

    def test_producer_ids_wait_for_their_block(self):
        first = self.meta.next_producer_id()
        self.assertNoResult(first)
        self.meta.run_write()
        self.assertEqual(self.successResultOf(first), 0)
        for expected in range(1, md.PRODUCER_ID_BLOCK_SIZE):
            self.assertEqual(self.successResultOf(self.meta.next_producer_id()), expected)
        self.assertEqual(self.meta.queue, [])
        nxt = self.meta.next_producer_id()
        self.assertNoResult(nxt)
        self.meta.run_write()
        self.assertEqual(self.successResultOf(nxt), md.PRODUCER_ID_BLOCK_SIZE)
        with open(self.meta.metadata_path) as f:
            self.assertEqual(json.load(f)["producer_id_block_end"], 2 * md.PRODUCER_ID_BLOCK_SIZE)
