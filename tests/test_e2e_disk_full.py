"""Disk full against a real broker process (issue 26): a log dir on a small tmpfs filled by an
acks=all producer. Clients get KAFKA_STORAGE_ERROR (or NOT_LEADER_OR_FOLLOWER once the
partition is offline), the dir shows offline in DescribeLogDirs while the other dir keeps
serving, a broker whose every dir is offline halts with one line, and after space is freed a
restart reads back every acknowledged record, in order, with no gap.

The small filesystem is a tmpfs the test mounts, which needs CAP_SYS_ADMIN (root in CI);
without it these tests are skipped with that reason.
"""

import errno
import os
import shutil
import subprocess
import tempfile
import time

from twisted.trial import unittest

from kafkatw.coordinator.group.offsets_log import partition_for
from kafkatw.protocol import errors
from kafkatw.protocol import messages as m
from kafkatw.testing import KafkaBroker
from tests.support import PRODUCE, PRODUCE_V, RawClient, create_topic, poll_until, produce_body, read_all

DESCRIBE_LOG_DIRS = 35
FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH = 10, 8, 9
INCREMENTAL_ALTER_CONFIGS = 44
TOPIC_RESOURCE = 2
FULL_ERRORS = {errors.KAFKA_STORAGE_ERROR, errors.NOT_LEADER_OR_FOLLOWER}
BATCH = 10
VALUE = 1000


class SmallFilesystem:
    """A tmpfs of ``size_kb`` mounted on a fresh directory; ``grow(kb)`` frees space the way
    an operator would, ``close()`` unmounts and removes it."""

    def __init__(self, size_kb):
        self.path = tempfile.mkdtemp(prefix="kafkatw-tmpfs-")
        try:
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dk" % size_kb, "tmpfs", self.path],
                           check=True, capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as e:
            os.rmdir(self.path)
            detail = getattr(e, "stderr", b"") or b""
            raise unittest.SkipTest("cannot mount a tmpfs here (needs CAP_SYS_ADMIN): %s %s"
                                    % (e, detail.decode(errors="replace").strip()))

    def grow(self, size_kb):
        subprocess.run(["mount", "-o", "remount,size=%dk" % size_kb, self.path], check=True,
                       capture_output=True, timeout=30)

    def close(self):
        subprocess.run(["umount", "-l", self.path], capture_output=True, timeout=30)
        os.rmdir(self.path)


def fill(client, topic, partition, limit=100000):
    """Produce batches (acks=all) until one fails: ({offset: value} acknowledged, the error
    code (None: the broker closed the connection), how many batches were sent)."""
    acked = {}
    for i in range(limit):
        values = [b"%08d-%d:" % (i, j) + b"x" * VALUE for j in range(BATCH)]
        try:
            resp = client.request(PRODUCE, PRODUCE_V,
                                  produce_body(topic, partition, values, acks=-1))
        except ConnectionError:
            return acked, None, i + 1
        p = resp.responses[0].partition_responses[0]
        if p.error_code != errors.NONE:
            return acked, p.error_code, i + 1
        for j, v in enumerate(values):
            acked[p.base_offset + j] = v
    raise AssertionError("the filesystem never filled")


def produce_code(client, topic, partition, key=None):
    keys = None if key is None else [key]
    resp = client.request(PRODUCE, PRODUCE_V,
                          produce_body(topic, partition, [b"late"], acks=-1, keys=keys))
    return resp.responses[0].partition_responses[0].error_code


def log_dirs(client):
    body = client.request(DESCRIBE_LOG_DIRS, 4, m.DescribeLogDirsRequest(topics=None))
    return {r.log_dir: r.error_code for r in body.results}


def fill_up(directory):
    """Write a ballast file until the filesystem is full; its path."""
    path = os.path.join(directory, "ballast")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        for chunk in (65536, 4096, 512):
            try:
                while True:
                    os.write(fd, b"b" * chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)
    return path


def alter_topic(client, topic, key, value):
    R = m.IncrementalAlterConfigsRequest
    body = client.request(INCREMENTAL_ALTER_CONFIGS, 1, R(resources=[R.AlterConfigsResource(
        resource_type=TOPIC_RESOURCE, resource_name=topic,
        configs=[R.AlterableConfig(name=key, config_operation=0, value=value)])],
        validate_only=False))
    assert body.responses[0].error_code == errors.NONE, body.responses[0]


def find_coordinator(client, group):
    body = client.request(FIND_COORDINATOR, 3, m.FindCoordinatorRequest(key=group, key_type=0))
    return body.error_code


def commit(client, group, offset, topic="o"):
    body = client.request(OFFSET_COMMIT, 8, m.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[m.OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
            m.OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                committed_metadata="")])]))
    return body.topics[0].partitions[0].error_code


def fetch_offset(client, group, topic="o"):
    """The committed offset of ``topic``-0, or None while the group's offsets load."""
    body = client.request(OFFSET_FETCH, 7, m.OffsetFetchRequest(group_id=group, topics=None))
    if body.error_code != errors.NONE:
        return None
    return {(t.name, p.partition_index): p.committed_offset
            for t in body.topics for p in t.partitions}.get((topic, 0), -1)


def assert_acked_kept(case, broker, topic, partition, acked):
    got = read_all(broker, topic, partition)
    n = len(acked)
    case.assertEqual([(o, v) for o, _k, v in got[:n]], sorted(acked.items()))
    # the failed batch may have been written whole before the error; never half of it
    case.assertIn(len(got) - n, (0, BATCH))


BROKER_PROPS = {"log.segment.bytes": 1024 * 1024, "log.index.size.max.bytes": 64 * 1024,
                "auto.create.topics.enable": "false"}


class DiskFullTests(unittest.SynchronousTestCase):
    def mount(self, size_kb):
        fs = SmallFilesystem(size_kb)
        self.addCleanup(fs.close)
        return fs

    def test_one_dir_full_goes_offline_the_other_serves(self):
        fs = self.mount(4 * 1024)
        work = tempfile.mkdtemp(prefix="kafkatw-disk-full-")
        self.addCleanup(shutil.rmtree, work, True)  # a given data dir: the broker keeps it
        d1, d2 = os.path.join(work, "d1"), os.path.join(fs.path, "d2")
        broker = KafkaBroker(overrides=dict(BROKER_PROPS, **{"log.dirs": "%s,%s" % (d1, d2)}),
                             data_dir=work)
        self.addCleanup(broker.close)
        broker.start()
        create_topic(broker, "t", partitions=2)
        self.assertTrue(os.path.isdir(os.path.join(d1, "t-0")))
        self.assertTrue(os.path.isdir(os.path.join(d2, "t-1")))
        c = RawClient(broker, "disk-full")
        self.addCleanup(c.close)
        acked, code, sent = fill(c, "t", 1)
        self.assertIn(code, FULL_ERRORS)
        self.assertGreater(len(acked), 1000)  # megabytes fitted
        self.assertIn(produce_code(c, "t", 1), FULL_ERRORS)
        self.assertEqual(produce_code(c, "t", 0), errors.NONE)  # the other dir serves
        self.assertEqual(log_dirs(c), {d1: errors.NONE, d2: errors.KAFKA_STORAGE_ERROR})
        self.assertTrue(broker.running)
        with open(broker.log_path) as f:
            lines = f.readlines()
        self.assertEqual([x for x in lines if "Traceback" in x], [])
        offline = [x for x in lines if "is offline after an I/O error" in x]
        self.assertEqual(len(offline), 1, offline)
        self.assertIn("No space left on device", offline[0])
        c.close()
        broker.stop()
        fs.grow(64 * 1024)
        broker.start()
        assert_acked_kept(self, broker, "t", 1, acked)
        c2 = RawClient(broker, "disk-full-after")
        self.addCleanup(c2.close)
        self.assertEqual(log_dirs(c2), {d1: errors.NONE, d2: errors.NONE})
        self.assertEqual(produce_code(c2, "t", 1), errors.NONE)

    def test_every_dir_offline_halts_with_one_line(self):
        fs = self.mount(3 * 1024)
        data = os.path.join(fs.path, "logs")
        broker = KafkaBroker(overrides=BROKER_PROPS, data_dir=data)
        self.addCleanup(broker.close)
        broker.start()
        create_topic(broker, "t", partitions=1)
        process = broker.process
        c = RawClient(broker, "disk-full")
        self.addCleanup(c.close)
        acked, code, _ = fill(c, "t", 0)
        self.assertIn(code, FULL_ERRORS | {None})  # answered, or the halt came first
        self.assertGreater(len(acked), 1000)
        poll_until(lambda: process.poll() is not None, timeout=20, message="broker halting")
        self.assertEqual(process.returncode, 1)
        line = "Shutdown broker because all log dirs in %s have failed" % data
        with open(broker.log_path) as f:
            self.assertEqual(len([x for x in f if line in x]), 1)
        with open(broker.stderr_path) as f:
            self.assertEqual([x.rstrip("\n") for x in f if "kafkatw:" in x], ["kafkatw: " + line])
        broker.process = None
        fs.grow(64 * 1024)
        broker.start()
        assert_acked_kept(self, broker, "t", 0, acked)

    def test_compaction_on_a_full_disk_takes_the_dir_offline(self):
        """The cleaner writing a cleaned segment into a full dir: the dir goes offline once
        (no traceback, no failure every backoff), the other dir serves; after space is freed
        the last value of every key is there and no .cleaned file is left."""
        fs = self.mount(8 * 1024)
        work = tempfile.mkdtemp(prefix="kafkatw-disk-full-")
        self.addCleanup(shutil.rmtree, work, True)  # a given data dir: the broker keeps it
        d1, d2 = os.path.join(work, "d1"), os.path.join(fs.path, "d2")
        never = 3600 * 1000
        broker = KafkaBroker(overrides=dict(BROKER_PROPS, **{
            "log.dirs": "%s,%s" % (d1, d2), "log.cleaner.backoff.ms": 200,
            "replica.high.watermark.checkpoint.interval.ms": never,
            "log.flush.offset.checkpoint.interval.ms": never,
            "log.flush.start.offset.checkpoint.interval.ms": never}), data_dir=work)
        self.addCleanup(broker.close)
        broker.start()
        create_topic(broker, "c", partitions=2, configs={
            "cleanup.policy": "compact", "segment.bytes": 1024 * 1024,
            "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": str(never),
            "file.delete.delay.ms": "100"})
        self.assertTrue(os.path.isdir(os.path.join(d2, "c-1")))
        c = RawClient(broker, "disk-full")
        self.addCleanup(c.close)
        last = {}
        for i in range(300):  # about 3 MB: three segments, two of them cleanable
            key, value = b"k%d" % (i % 10), b"%06d" % i + b"x" * VALUE * 10
            resp = c.request(PRODUCE, PRODUCE_V, produce_body("c", 1, [value], acks=-1, keys=[key]))
            p = resp.responses[0].partition_responses[0]
            self.assertEqual(p.error_code, errors.NONE)
            last[key] = (p.base_offset, value)
        ballast = fill_up(fs.path)
        alter_topic(c, "c", "min.compaction.lag.ms", "0")  # now the cleaner may run
        poll_until(lambda: log_dirs(c).get(d2) == errors.KAFKA_STORAGE_ERROR, timeout=30,
                   message="the full dir offline")
        self.assertEqual(log_dirs(c)[d1], errors.NONE)
        self.assertEqual(produce_code(c, "c", 0, key=b"k"), errors.NONE)
        time.sleep(1.0)  # five cleaner backoffs: nothing more may be logged
        with open(broker.log_path) as f:
            lines = f.readlines()
        self.assertEqual([x for x in lines if "Traceback" in x], [])
        offline = [x for x in lines if "is offline after an I/O error" in x]
        self.assertEqual(len(offline), 1, offline)
        self.assertIn("No space left on device", offline[0])
        c.close()
        broker.stop()
        os.unlink(ballast)
        broker.start()
        got = {o: v for o, _k, v in read_all(broker, "c", 1)}
        for key, (offset, value) in last.items():
            self.assertEqual(got.get(offset), value, key)
        # after the restart the cleaner may clean again (successfully): the segments it
        # replaces are .deleted for file.delete.delay.ms, then gone; nothing stays
        def leftovers():
            return [n for n in os.listdir(os.path.join(d2, "c-1"))
                    if n.endswith((".cleaned", ".swap", ".deleted"))]
        poll_until(lambda: not leftovers(), timeout=30, message="no leftover files in c-1")

    def two_dir_broker(self, size_kb, **props):
        fs = self.mount(size_kb)
        work = tempfile.mkdtemp(prefix="kafkatw-disk-full-")
        self.addCleanup(shutil.rmtree, work, True)  # a given data dir: the broker keeps it
        d1, d2 = os.path.join(work, "d1"), os.path.join(fs.path, "d2")
        broker = KafkaBroker(overrides=dict(BROKER_PROPS, **dict(props, **{
            "log.dirs": "%s,%s" % (d1, d2)})), data_dir=work)
        self.addCleanup(broker.close)
        broker.start()
        return fs, broker, d1, d2

    def test_offset_commit_on_a_full_disk(self):
        """A group whose __consumer_offsets partition is in the full dir: its commit answers
        NOT_COORDINATOR (Kafka's answer for a storage error) once the segment's last page is
        full, a group in the other dir commits; after space is freed the last acknowledged
        commit is there, the failed one is not."""
        never = 3600 * 1000
        fs, broker, d1, d2 = self.two_dir_broker(
            8 * 1024, **{"replica.high.watermark.checkpoint.interval.ms": never,
                         "log.flush.offset.checkpoint.interval.ms": never,
                         "log.flush.start.offset.checkpoint.interval.ms": never,
                         "offsets.topic.num.partitions": 4})
        create_topic(broker, "o", partitions=1)
        c = RawClient(broker, "disk-full")
        self.addCleanup(c.close)
        poll_until(lambda: find_coordinator(c, "g0") == errors.NONE, timeout=20,
                   message="__consumer_offsets created")
        in_dir = {d: [g for g in ("g%d" % i for i in range(40))
                      if os.path.isdir(os.path.join(d, "__consumer_offsets-%d"
                                                    % partition_for(g, 4)))]
                  for d in (d1, d2)}
        full_group, ok_group = in_dir[d2][0], in_dir[d1][0]
        self.assertEqual(commit(c, full_group, 5), errors.NONE)
        ballast = fill_up(fs.path)
        # small commits fit into the segment's last page for a while
        acked, code = 5, errors.NONE
        for offset in range(6, 2000):
            code = commit(c, full_group, offset)
            if code != errors.NONE:
                break
            acked = offset
        self.assertEqual(code, errors.NOT_COORDINATOR)
        self.assertEqual(log_dirs(c)[d2], errors.KAFKA_STORAGE_ERROR)
        self.assertEqual(commit(c, ok_group, 7), errors.NONE)
        with open(broker.log_path) as f:
            self.assertEqual([x for x in f if "Traceback" in x], [])
        c.close()
        broker.stop()
        os.unlink(ballast)
        broker.start()
        c2 = RawClient(broker, "after")
        self.addCleanup(c2.close)
        for group, offset in ((full_group, acked), (ok_group, 7)):
            poll_until(lambda: fetch_offset(c2, group) is not None, timeout=20,
                       message="offsets of %s loaded" % group)
            self.assertEqual(fetch_offset(c2, group), offset, group)

    def test_checkpoint_on_a_full_disk(self):
        """The first write to fail is a high-watermark checkpoint: the dir goes offline once
        and its acknowledged records survive."""
        fs, broker, d1, d2 = self.two_dir_broker(
            8 * 1024, **{"replica.high.watermark.checkpoint.interval.ms": 200})
        create_topic(broker, "t", partitions=2)
        c = RawClient(broker, "disk-full")
        self.addCleanup(c.close)
        acked = {}
        for i in range(50):
            values = [b"%04d" % i + b"y" * VALUE]
            resp = c.request(PRODUCE, PRODUCE_V, produce_body("t", 1, values, acks=-1))
            p = resp.responses[0].partition_responses[0]
            self.assertEqual(p.error_code, errors.NONE)
            acked[p.base_offset] = values[0]
        ballast = fill_up(fs.path)
        # periodic checkpoints are written only when an offset changed: one more small record
        # (it fits the segment's last page) moves the high watermark, whose checkpoint then
        # needs a new page; were the append to fail first, the dir goes offline as well
        resp = c.request(PRODUCE, PRODUCE_V, produce_body("t", 1, [b"z"], acks=-1))
        p = resp.responses[0].partition_responses[0]
        self.assertIn(p.error_code, (errors.NONE, errors.KAFKA_STORAGE_ERROR))
        if p.error_code == errors.NONE:
            acked[p.base_offset] = b"z"
        poll_until(lambda: log_dirs(c).get(d2) == errors.KAFKA_STORAGE_ERROR, timeout=20,
                   message="the full dir offline")
        with open(broker.log_path) as f:
            lines = f.readlines()
        offline = [x for x in lines if "is offline after an I/O error" in x]
        self.assertEqual(len(offline), 1, offline)
        self.assertEqual([x for x in lines if "Traceback" in x], [])
        self.assertEqual(produce_code(c, "t", 0), errors.NONE)
        c.close()
        broker.stop()
        os.unlink(ballast)
        broker.start()
        assert_acked_kept(self, broker, "t", 1, acked)

    def test_segment_roll_on_a_full_disk(self):
        """The active segment is nearly full when the disk fills: the next batch needs a new
        segment, which cannot be written; KAFKA_STORAGE_ERROR, the dir offline, and after
        space is freed every acknowledged record is there and every segment has its indexes."""
        fs, broker, d1, d2 = self.two_dir_broker(8 * 1024)
        create_topic(broker, "t", partitions=2)
        c = RawClient(broker, "disk-full")
        self.addCleanup(c.close)
        pdir = os.path.join(d2, "t-1")
        acked = {}
        big = 100 * 1024
        for i in range(10):  # about 1,000 KB of the 1 MiB segment
            value = b"%04d" % i + b"z" * big
            resp = c.request(PRODUCE, PRODUCE_V, produce_body("t", 1, [value], acks=-1))
            p = resp.responses[0].partition_responses[0]
            self.assertEqual(p.error_code, errors.NONE)
            acked[p.base_offset] = value
        self.assertEqual(len([n for n in os.listdir(pdir) if n.endswith(".log")]), 1)
        ballast = fill_up(fs.path)
        resp = c.request(PRODUCE, PRODUCE_V, produce_body("t", 1, [b"r" * big], acks=-1))
        self.assertIn(resp.responses[0].partition_responses[0].error_code, FULL_ERRORS)
        self.assertEqual(log_dirs(c)[d2], errors.KAFKA_STORAGE_ERROR)
        with open(broker.log_path) as f:
            self.assertEqual([x for x in f if "Traceback" in x], [])
        c.close()
        broker.stop()
        os.unlink(ballast)
        broker.start()
        assert_acked_kept(self, broker, "t", 1, acked)
        names = os.listdir(pdir)
        for log_file in [n for n in names if n.endswith(".log")]:
            stem = log_file[:-len(".log")]
            self.assertIn(stem + ".index", names)
            self.assertIn(stem + ".timeindex", names)
        c2 = RawClient(broker, "after")
        self.addCleanup(c2.close)
        self.assertEqual(produce_code(c2, "t", 1), errors.NONE)
