"""kill -9 at named points of file operations (issue 26): a broker started with
``kafkatw.test.crash.point`` SIGKILLs itself in the middle of a segment roll, a compaction
swap, a checkpoint write, a topic deletion or an offset commit. After a restart every
acknowledged record and committed offset is there, and no half-done file operation is left
behind (no .tmp, .cleaned, .swap, .deleted file, no -delete dir, every segment with its indexes).
"""

import json
import os
import signal

from twisted.trial import unittest

from kafkatw.protocol import errors
from kafkatw.protocol import messages as m
from kafkatw.testing import BrokerStartError, KafkaBroker
from tests.support import (
    PRODUCE,
    PRODUCE_V,
    RawClient,
    create_topic,
    poll_until,
    produce_body,
    read_all,
)

DELETE_TOPICS, FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH, METADATA = 20, 10, 8, 9, 3
POINT = "kafkatw.test.crash.point"


def leftovers(data_dir):
    """Paths that only an interrupted file operation leaves."""
    out = []
    for root, dirs, files in os.walk(data_dir):
        out += [os.path.join(root, d) for d in dirs if d.endswith("-delete")]
        for f in files:
            if f.endswith((".tmp", ".cleaned", ".swap", ".deleted")):
                out.append(os.path.join(root, f))
            elif f.endswith(".log") and os.path.getsize(os.path.join(root, f)):
                # (an empty segment's indexes are made with its first append: a partition
                # made at start, after a crash before its topic's logs were all made)
                stem = f[:-len(".log")]
                for ext in (".index", ".timeindex"):
                    if stem + ext not in files:
                        out.append(os.path.join(root, stem + ext) + " (missing)")
    return sorted(out)


class CrashPointTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.broker = KafkaBroker(overrides={"log.cleaner.backoff.ms": 100,
                                             "log.segment.delete.delay.ms": 0,
                                             "auto.create.topics.enable": "false"})
        self.addCleanup(self.broker.close)

    def start_armed(self, point):
        self.broker.overrides[POINT] = point
        self.broker.start()

    def wait_killed(self):
        process = self.broker.process
        poll_until(lambda: process.poll() is not None, timeout=30,
                   message="the broker to kill itself at its crash point")
        self.assertEqual(process.returncode, -signal.SIGKILL)
        self.broker.process = None

    def restart_clean(self):
        """Start without the crash point; no interrupted file operation may survive the load
        (the -delete dirs of a deletion go once the scheduled delete runs)."""
        del self.broker.overrides[POINT]
        self.broker.start()
        try:
            poll_until(lambda: leftovers(self.broker.data_dir) == [], timeout=20,
                       message="no leftovers")
        except AssertionError:
            self.assertEqual(leftovers(self.broker.data_dir), [])

    def produce_until_killed(self, topic, partition=0, keys=None, limit=400, size=100 * 1024):
        """acks=1 batches of one ``size`` record until the connection dies: {offset: value}."""
        c = RawClient(self.broker, "crash")
        acked = {}
        try:
            for i in range(limit):
                value = b"%06d:" % i + b"v" * size
                key = None if keys is None else [keys(i)]
                try:
                    resp = c.request(PRODUCE, PRODUCE_V,
                                     produce_body(topic, partition, [value], keys=key))
                except (ConnectionError, OSError):
                    return acked
                p = resp.responses[0].partition_responses[0]
                self.assertEqual(p.error_code, errors.NONE)
                acked[p.base_offset] = (key and key[0], value)
        finally:
            c.close()
        return acked

    def assert_all_acked(self, topic, acked):
        got = {o: (k, v) for o, k, v in read_all(self.broker, topic, 0)}
        missing = sorted(set(acked) - set(got))
        self.assertEqual(missing, [])
        self.assertEqual({o: got[o] for o in acked}, acked)

    def roll(self, point):
        self.start_armed(point)
        create_topic(self.broker, "r", 1, {"segment.bytes": 1024 * 1024})
        acked = self.produce_until_killed("r")
        self.wait_killed()
        self.assertTrue(15 <= len(acked) < 400, len(acked))  # killed at the second roll
        self.restart_clean()
        self.assert_all_acked("r", acked)

    def test_roll_before_new_segment(self):
        self.roll("log.roll.before_new_segment:2")

    def test_roll_after_new_segment(self):
        self.roll("log.roll.after_new_segment:2")

    def compaction(self, point):
        self.start_armed(point)
        create_topic(self.broker, "c", 1, {
            "segment.bytes": 1024 * 1024, "cleanup.policy": "compact",
            "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"})
        acked = self.produce_until_killed("c", keys=lambda i: b"k%d" % (i % 5), size=60 * 1024)
        self.wait_killed()
        self.assertGreater(len(acked), 20)
        self.restart_clean()
        got = read_all(self.broker, "c", 0)
        last = {}
        for o, (k, v) in sorted(acked.items()):
            last[k] = (o, v)
        by_offset = {o: (k, v) for o, k, v in got}
        for k, (o, v) in last.items():  # the last acknowledged value of every key survives
            self.assertEqual(by_offset.get(o), (k, v), k)
        self.assertEqual([o for o, _, _ in got], sorted(o for o, _, _ in got))

    def test_compaction_after_swap_files(self):
        self.compaction("cleaner.swap.after_swap_files")

    def test_compaction_after_old_deleted(self):
        self.compaction("cleaner.swap.after_old_deleted")

    def checkpoint(self, point):
        self.broker.overrides["replica.high.watermark.checkpoint.interval.ms"] = 200
        self.start_armed(point)
        create_topic(self.broker, "k", 1)
        acked = self.produce_until_killed("k", size=1000, limit=1000000)
        self.wait_killed()
        self.restart_clean()
        self.assert_all_acked("k", acked)

    def test_leader_epoch_checkpoint_write(self):
        self.checkpoint("checkpoint.after_tmp_written/leader-epoch-checkpoint")

    def test_high_watermark_checkpoint_write(self):
        self.checkpoint("checkpoint.after_tmp_written/replication-offset-checkpoint:2")

    def deletion(self, point):
        self.start_armed(point)
        create_topic(self.broker, "gone", 2)
        create_topic(self.broker, "kept", 1)
        c = RawClient(self.broker, "crash")
        self.addCleanup(c.close)
        acked = {}
        for i in range(5):
            for t in ("gone", "kept"):
                resp = c.request(PRODUCE, PRODUCE_V, produce_body(t, 0, [b"%s-%d" % (t.encode(), i)]))
                p = resp.responses[0].partition_responses[0]
                self.assertEqual(p.error_code, errors.NONE)
                if t == "kept":
                    acked[p.base_offset] = (None, b"kept-%d" % i)
        try:
            c.request(DELETE_TOPICS, 4, m.DeleteTopicsRequest(topic_names=["gone"], timeout_ms=10000))
        except (ConnectionError, OSError):
            pass
        self.wait_killed()
        self.restart_clean()
        c2 = RawClient(self.broker, "after")
        self.addCleanup(c2.close)
        md = c2.request(METADATA, 9, m.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                      include_topic_authorized_operations=False))
        self.assertEqual(sorted(t.name for t in md.topics), ["kept"])
        poll_until(lambda: not any(n.startswith("gone-") for n in os.listdir(self.broker.data_dir)),
                   timeout=20, message="the deleted topic's partition dirs removed")

        def tombstones():
            with open(os.path.join(self.broker.data_dir, "__kafkatw_metadata.json")) as f:
                return json.load(f).get("deleted_topic_ids")
        poll_until(lambda: tombstones() == [], timeout=20,
                   message="the deleted topic forgotten once its dirs are gone")
        self.assert_all_acked("kept", acked)

    def test_topic_deletion_after_metadata(self):
        self.deletion("topic.delete.after_metadata")

    def test_topic_deletion_after_rename(self):
        self.deletion("topic.delete.after_rename")

    def test_offset_commit_after_append(self):
        """The first commit is answered, the second kills the broker after its append:
        after the restart the group has the second one (it is in the log)."""
        self.start_armed("offsets.commit.after_append:2")
        create_topic(self.broker, "o", 1)
        c = RawClient(self.broker, "crash")
        self.addCleanup(c.close)

        def find():
            body = c.request(FIND_COORDINATOR, 3, m.FindCoordinatorRequest(key="g", key_type=0))
            return body.error_code == errors.NONE
        poll_until(find, timeout=20, message="a coordinator for g")

        def commit(offset):
            body = c.request(OFFSET_COMMIT, 8, m.OffsetCommitRequest(
                group_id="g", generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None, topics=[m.OffsetCommitRequest.OffsetCommitRequestTopic(
                    name="o", partitions=[m.OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                        committed_metadata="")])]))
            return body.topics[0].partitions[0].error_code
        self.assertEqual(commit(7), errors.NONE)
        self.assertRaises((ConnectionError, OSError), commit, 42)
        self.wait_killed()
        self.restart_clean()
        c2 = RawClient(self.broker, "after")
        self.addCleanup(c2.close)

        def fetched():
            body = c2.request(OFFSET_FETCH, 7, m.OffsetFetchRequest(group_id="g", topics=None))
            if body.error_code != errors.NONE:
                return None
            return {(t.name, p.partition_index): p.committed_offset
                    for t in body.topics for p in t.partitions}
        poll_until(lambda: fetched() is not None, timeout=20, message="offsets loaded")
        self.assertEqual(fetched(), {("o", 0): 42})

    def test_recovery_point_checkpoint_write(self):
        """The recovery-point checkpoint is written every minute by default: its .tmp left by
        the kill is removed by the next load, not by the next write."""
        # the topic exists before the armed start: a checkpoint 300 ms after a slow start may
        # come before any request could
        self.broker.start()
        create_topic(self.broker, "p", 1)
        acked = self.produce_until_killed("p", size=1000, limit=20)
        self.assertEqual(len(acked), 20)
        self.broker.stop()
        self.broker.overrides["log.flush.offset.checkpoint.interval.ms"] = 300
        try:
            self.start_armed("checkpoint.after_tmp_written/recovery-point-offset-checkpoint")
        except BrokerStartError as e:
            # on a loaded machine the first checkpoint can come before start() sees the
            # broker answer: killed at the point all the same, with the records acked above
            self.assertIn("status -9", str(e))
        else:
            acked.update(self.produce_until_killed("p", size=1000, limit=1000000))
            self.wait_killed()
        tmp = os.path.join(self.broker.data_dir, "recovery-point-offset-checkpoint.tmp")
        self.assertTrue(os.path.exists(tmp))
        self.broker.overrides["log.flush.offset.checkpoint.interval.ms"] = 3600000
        self.restart_clean()
        self.assert_all_acked("p", acked)
