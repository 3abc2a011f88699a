"""kafkajs (Node.js) against a real broker: the scripts in tests/js run one client scenario each
and print JSON, asserted here exactly. Admin topics; 1,000 keyed records with headers at acks
-1/1/0, uncompressed and GZIP, read back raw; the idempotent producer; a two-member group that
splits six partitions, commits, resumes and is inspected and reset through the admin client;
a SIGKILLed member's partitions moving to the survivor after its session expires; fetches
parked at the log end (woken by a produce, held by minBytes); small fetches ending in partial
batches and a record larger than the fetch, in plaintext and over TLS.

kafkajs is pinned in tests/js/package-lock.json and installed into tests/js/node_modules on first
use (once per test run, under a lock: trial runs two workers). Without node/npm, or when the
install fails, the tests skip saying why; KAFKATW_REQUIRE_KAFKAJS=1 (set by .ci/run) makes that a
failure instead.
"""

import fcntl
import json
import os
import selectors
import shutil
import signal
import subprocess
import time

from twisted.trial import unittest

from kafkatw.protocol import compression, records as rec
from kafkatw.testing import KafkaBrokerMixin
from tests.support import (FETCH, FETCH_V, RawClient, create_topic, fetch_body, poll_until, produce,
                           request_log, unique_name)

JS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "js")
NODE_MODULES = os.path.join(JS_DIR, "node_modules")
SCRIPT_TIMEOUT = 60

_ready = None  # None: not checked yet; "" ready; else the reason to skip


def _locked_version():
    with open(os.path.join(JS_DIR, "package-lock.json")) as f:
        return json.load(f)["packages"]["node_modules/kafkajs"]["version"]


def _installed_version():
    try:
        with open(os.path.join(NODE_MODULES, "kafkajs", "package.json")) as f:
            return json.load(f)["version"]
    except (OSError, ValueError, KeyError):
        return None


def _install():
    """"" once kafkajs (the locked version) is in tests/js/node_modules, else why not."""
    if shutil.which("node") is None:
        return "node is not installed (kafkajs tests need Node.js >= 14)"
    wanted = _locked_version()
    if _installed_version() == wanted:
        return ""
    if shutil.which("npm") is None:
        return "npm is not installed, and kafkajs %s is not in %s" % (wanted, NODE_MODULES)
    os.makedirs(NODE_MODULES, exist_ok=True)
    with open(os.path.join(NODE_MODULES, ".kafkatw-install.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other trial worker may be installing right now
        if _installed_version() == wanted:
            return ""
        try:
            proc = subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--no-progress", "--ignore-scripts",
                 "--loglevel=error", "--fetch-retries=2", "--fetch-retry-mintimeout=1000",
                 "--fetch-retry-maxtimeout=5000"],
                cwd=JS_DIR, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as e:
            return "npm install of kafkajs %s failed: %s" % (wanted, e)
        if proc.returncode != 0 or _installed_version() != wanted:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            return "npm install of kafkajs %s failed (exit %d): %s" % (
                wanted, proc.returncode, " / ".join(lines[:4])[:600])
    return ""


def kafkajs_ready():
    """Install on first use; raise SkipTest (or fail, under KAFKATW_REQUIRE_KAFKAJS=1) without it."""
    global _ready
    if _ready is None:
        _ready = _install()
    if _ready:
        if os.environ.get("KAFKATW_REQUIRE_KAFKAJS") == "1":
            raise AssertionError(_ready)
        raise unittest.SkipTest(_ready)


def run_js(script, *args, env=None):
    """The JSON a tests/js script printed; a failed script fails the test with its stderr."""
    env = dict(os.environ, **(env or {}))
    env.setdefault("KAFKAJS_LOG_LEVEL", "WARN")
    proc = subprocess.run(["node", os.path.join(JS_DIR, script)] + [str(a) for a in args],
                          cwd=JS_DIR, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=SCRIPT_TIMEOUT, env=env)
    if proc.returncode != 0:
        raise AssertionError("node %s %s exited %d:\n%s" % (
            script, " ".join(map(str, args)), proc.returncode, proc.stderr[-4000:]))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def read_partition(broker, topic, partition, end):
    """[(BatchHeader, Record)] from offset 0 to ``end``, through raw sessionless fetches."""
    client = RawClient(broker, "kafkajs-reader")
    out = []
    offset = 0
    try:
        while offset < end:
            resp = client.request(FETCH, FETCH_V, fetch_body([(topic, partition, offset)]))
            data = resp.responses[0].partitions[0]
            assert data.error_code == 0, data
            got = []
            if data.records is not None and len(data.records):
                for header, records in rec.iter_batches(bytes(data.records), allow_partial_tail=True):
                    got.extend((header, r) for r in records if r.offset >= offset)
            if not got:
                raise AssertionError("no progress at offset %d of %s-%d" % (offset, topic, partition))
            out.extend(got)
            offset = got[-1][1].offset + 1
    finally:
        client.close()
    return out


def high_watermark(broker, topic, partition):
    client = RawClient(broker, "kafkajs-reader")
    try:
        resp = client.request(FETCH, FETCH_V, fetch_body([(topic, partition, 0)], max_bytes=1,
                                                          partition_max_bytes=1))
    finally:
        client.close()
    return resp.responses[0].partitions[0].high_watermark


def versions_used(broker, client_id):
    """{(API name, version)} of the completed requests from ``client_id`` in the request log."""
    return {(e["requestHeader"]["requestApiKeyName"], e["requestHeader"]["requestApiVersion"])
            for e in request_log(broker.request_log_path)
            if e["requestHeader"]["clientId"] == client_id}


GROUP_OVERRIDES = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "offsets.topic.num.partitions": 4,
}


class KafkajsTestCase(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_overrides = GROUP_OVERRIDES
    broker_options = {"request_log": True}

    def setUp(self):
        kafkajs_ready()  # before the broker: a skip costs nothing
        super().setUp()


class KafkajsAdminTests(KafkajsTestCase):
    def test_create_describe_list_delete_topic(self):
        topic = unique_name("kjs-admin")
        out = run_js("admin.js", self.broker.bootstrap_servers, topic)
        self.assertEqual(out, {
            "created": True,
            "createdAgain": False,  # TOPIC_ALREADY_EXISTS, which kafkajs reports as false
            "metadata": [{"name": topic, "partitions": [
                {"partitionId": p, "leader": 1, "replicas": [1], "isr": [1], "partitionErrorCode": 0}
                for p in range(3)]}],
            "listedBefore": True,
            "listedAfter": False,
            "metadataAfterDelete": "UNKNOWN_TOPIC_OR_PARTITION",
        })
        expected = {("API_VERSIONS", 2), ("METADATA", 6), ("CREATE_TOPICS", 3), ("DELETE_TOPICS", 1)}
        poll_until(lambda: versions_used(self.broker, "kafkajs-admin-" + topic) == expected,
                   message="kafkajs admin requests in the request log")


COUNT = 1000
SEND = 100  # records per producer.send()


def expected_record(i):
    return (b"k-%d" % (i % 37), b"v-%d" % i, [("seq", b"%d" % i), ("kind", b"odd" if i % 2 else b"even")])


def expected_metadata():
    """The [partition, errorCode, baseOffset] kafkajs reports per send, in send order."""
    next_offset = [0, 0, 0]
    out = []
    for start in range(0, COUNT, SEND):
        counts = [0, 0, 0]
        for i in range(start, start + SEND):
            counts[i % 3] += 1
        for p in range(3):
            out.append([p, 0, str(next_offset[p])])
            next_offset[p] += counts[p]
    return out


class KafkajsProducerTests(KafkajsTestCase):
    def produce_and_read(self, acks, codec_name, idempotent=False):
        topic = create_topic(self.broker, unique_name("kjs-produce"), partitions=3)
        meta = run_js("producer.js", self.broker.bootstrap_servers, topic, COUNT, acks, codec_name,
                      int(idempotent))
        self.assertEqual(meta, [] if acks == 0 else expected_metadata())
        per_partition = [COUNT // 3 + 1, COUNT // 3, COUNT // 3]  # 334, 333, 333
        poll_until(lambda: [high_watermark(self.broker, topic, p) for p in range(3)] == per_partition,
                   message="every record of the acks=%d producer appended" % acks)
        batches = {}
        for p in range(3):
            got = read_partition(self.broker, topic, p, per_partition[p])
            self.assertEqual([(r.offset, r.key, r.value, r.headers) for _, r in got],
                             [(n,) + expected_record(i) for n, i in enumerate(range(p, COUNT, 3))])
            batches[p] = sorted({h.base_offset: h for h, _ in got}.values(), key=lambda h: h.base_offset)
            codec = compression.GZIP if codec_name == "gzip" else compression.NONE
            self.assertEqual({h.compression for h in batches[p]}, {codec})
            self.assertEqual(len(batches[p]), COUNT // SEND)  # one batch per send and partition
        return topic, batches

    def test_acks_all_uncompressed(self):
        self.produce_and_read(-1, "none")

    def test_acks_1_uncompressed(self):
        self.produce_and_read(1, "none")

    def test_acks_0_uncompressed(self):
        self.produce_and_read(0, "none")

    def test_acks_all_gzip(self):
        self.produce_and_read(-1, "gzip")

    def test_acks_1_gzip(self):
        self.produce_and_read(1, "gzip")

    def test_acks_0_gzip(self):
        self.produce_and_read(0, "gzip")

    def test_idempotent(self):
        """One producer id (InitProducerId v1) and per-partition sequences from 0 without gaps."""
        topic, batches = self.produce_and_read(-1, "none", idempotent=True)
        ids = {(h.producer_id, h.producer_epoch) for p in batches for h in batches[p]}
        self.assertEqual(len(ids), 1)
        producer_id, epoch = ids.pop()
        self.assertGreaterEqual(producer_id, 0)
        self.assertEqual(epoch, 0)
        for p, headers in batches.items():
            self.assertEqual([h.base_sequence for h in headers], [h.base_offset for h in headers])
            self.assertFalse(any(h.is_transactional for h in headers))
        expected = {("API_VERSIONS", 2), ("METADATA", 6), ("INIT_PRODUCER_ID", 1), ("PRODUCE", 7)}
        poll_until(lambda: versions_used(self.broker, "kafkajs-producer-" + topic) == expected,
                   message="kafkajs producer requests in the request log")


def group_record(i, partitions=6):
    return [i % partitions, i // partitions, "k-%d" % i, "v-%d" % i, {"i": str(i), "src": "kafkajs"}]


def by_partition(records):
    """Records grouped by partition in the order read (the order that must hold)."""
    out = {}
    for r in records:
        out.setdefault(r[0], []).append(r)
    return out


class KafkajsGroupTests(KafkajsTestCase):
    def test_split_commit_resume_describe_reset(self):
        bootstrap = self.broker.bootstrap_servers
        topic = create_topic(self.broker, unique_name("kjs-group"), partitions=6)
        group = unique_name("kjs-group")
        first, more = 120, 60

        split = run_js("group.js", bootstrap, topic, group, "split", first, 0)
        a, b = split["a"], split["b"]
        self.assertEqual(split["partitions"], 6)
        self.assertEqual(sorted([a["assignment"], b["assignment"]]), [[0, 2, 4], [1, 3, 5]])
        expected = by_partition(group_record(i) for i in range(first))
        for member in (a, b):
            got = by_partition(member["records"])
            self.assertEqual(sorted(got), member["assignment"])  # only its own partitions
            self.assertEqual(got, {p: expected[p] for p in member["assignment"]})
            self.assertEqual(member["committed"], [[p, first // 6] for p in member["assignment"]])
        described = split["described"]
        self.assertEqual([(g["groupId"], g["state"], g["protocolType"], g["protocol"], g["errorCode"])
                          for g in described], [(group, "Stable", "consumer", "RoundRobinAssigner", 0)])
        self.assertEqual([m["assignment"] for m in described[0]["members"]],
                         [{topic: [0, 2, 4]}, {topic: [1, 3, 5]}])

        resumed = run_js("group.js", bootstrap, topic, group, "resume", more, first)
        self.assertEqual(resumed["assignment"], list(range(6)))
        got = by_partition(resumed["records"])
        self.assertEqual(got, by_partition(group_record(i) for i in range(first, first + more)))
        self.assertEqual(resumed["committed"], [[p, (first + more) // 6] for p in range(6)])

        admin = run_js("group.js", bootstrap, topic, group, "admin", first + more)
        self.assertEqual(admin["offsets"], [[p, (first + more) // 6] for p in range(6)])
        empty = [{"groupId": group, "state": "Empty", "protocolType": "consumer", "protocol": "",
                  "errorCode": 0, "members": []}]
        self.assertEqual(admin["described"], empty)
        self.assertEqual(admin["listed"], [{"groupId": group, "protocolType": "consumer"}])
        # kafkajs commits the logical offset -2 (earliest) as is, and Kafka keeps it
        self.assertEqual(admin["offsetsAfterReset"], [[p, -2] for p in range(6)])
        self.assertEqual(admin["describedAfterReset"], empty)
        reread = by_partition(admin["reread"])
        self.assertEqual(reread, {p: [r[:3] for r in rs] for p, rs in
                                  by_partition(group_record(i) for i in range(first + more)).items()})


class Members:
    """kafkajs group members in their own node processes, read line by line as they join."""

    def __init__(self, test, bootstrap, topic, group, count):
        self.procs = []
        for _ in range(count):
            proc = subprocess.Popen(["node", os.path.join(JS_DIR, "member.js"), bootstrap, topic, group],
                                    cwd=JS_DIR, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True)
            test.addCleanup(self._stop, proc)
            self.procs.append(proc)
        self.selector = selectors.DefaultSelector()
        for proc in self.procs:
            self.selector.register(proc.stdout, selectors.EVENT_READ)
        self.assignment = {}  # pid -> latest assignment

    @staticmethod
    def _stop(proc):
        proc.kill()
        proc.wait()
        proc.stdout.close()

    def wait_for(self, predicate, timeout=20.0, what="assignments"):
        deadline = time.monotonic() + timeout
        while not predicate(self.assignment):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("timed out waiting for %s; last: %r" % (what, self.assignment))
            for key, _ in self.selector.select(min(left, 0.5)):
                line = key.fileobj.readline()
                if not line:
                    self.selector.unregister(key.fileobj)
                    continue
                event = json.loads(line)
                self.assignment[event["pid"]] = event["assignment"]


class KafkajsGroupFailureTests(KafkajsTestCase):
    def test_killed_member_partitions_move_to_the_survivor(self):
        """SIGKILL one of two members: after its 2 s session expires the other holds all six."""
        topic = create_topic(self.broker, unique_name("kjs-kill"), partitions=6)
        members = Members(self, self.broker.bootstrap_servers, topic, unique_name("kjs-kill"), 2)
        victim, survivor = members.procs
        members.wait_for(lambda a: sorted(map(len, a.values())) == [3, 3] and
                         sorted(sum(a.values(), [])) == list(range(6)), what="a 3/3 split")
        victim.send_signal(signal.SIGKILL)
        members.wait_for(lambda a: a[survivor.pid] == list(range(6)), what="the survivor to own all")
        self.assertEqual(len(members.assignment[victim.pid]), 3)  # it never rejoined


class KafkajsFetchWaitTests(KafkajsTestCase):
    def parked_topic(self):
        topic = create_topic(self.broker, unique_name("kjs-wait"), partitions=1)
        client = RawClient(self.broker, "kafkajs-seed")
        try:
            produce(client, topic, 0, [b"old-%d" % i for i in range(5)])
        finally:
            client.close()
        return topic

    def test_parked_fetch_wakes_on_produce(self):
        """minBytes 1, maxWaitTimeInMs 5000: no empty fetch comes back while parked, and a
        record produced then arrives at once (the produce completes the delayed fetch)."""
        topic = self.parked_topic()
        out = run_js("wait.js", self.broker.bootstrap_servers, topic, unique_name("kjs-wait"), "wake")
        # wait.js sleeps 1,500 ms; Node's timers may fire a millisecond early by Date.now()
        self.assertGreaterEqual(out["parkedMs"], 1495)
        self.assertEqual(out["fetchesWhileParked"], 0)
        self.assertEqual(out["record"], [0, 5, len("wake-up")])
        self.assertLess(out["sinceSendMs"], 1000)

    def test_min_bytes_holds_the_fetch_until_reached_or_max_wait(self):
        """minBytes 4096, maxWaitTimeInMs 3000: 10 bytes wait for the end of the wait; 8 KiB
        complete the fetch at once."""
        topic = self.parked_topic()
        out = run_js("wait.js", self.broker.bootstrap_servers, topic, unique_name("kjs-wait"), "minbytes")
        self.assertEqual(out["small"]["record"], [0, 5, 10])
        self.assertGreaterEqual(out["small"]["sinceFetchStartMs"], 2900)
        self.assertEqual(out["large"]["record"], [0, 6, 8192])
        self.assertLess(out["large"]["sinceSendMs"], 1000)


ROUNDTRIP = ([[i, "k%d" % i, len("v%d-" % i) + 300, ("v%d-" % i + "x" * 8)[:8]] for i in range(50)]
             + [[50, "big", 200000, "B" * 8]]
             + [[51 + i, "g%d" % i, len("gzip-%d" % i), ("gzip-%d" % i)[:8]] for i in range(20)])


class KafkajsSmallFetchTests(KafkajsTestCase):
    def test_partial_batches_and_a_record_larger_than_the_fetch(self):
        topic = create_topic(self.broker, unique_name("kjs-rt"), partitions=1)
        out = run_js("roundtrip.js", self.broker.bootstrap_servers, topic, unique_name("kjs-rt"))
        self.assertEqual(out, ROUNDTRIP)


class KafkajsTlsTests(KafkajsTestCase):
    broker_options = {"listeners": ("PLAINTEXT", "SSL")}

    def test_roundtrip_over_tls(self):
        """The same round trip through the SSL listener (kafkajs ssl: {ca}); metadata must
        advertise the SSL listener to a client that connected there."""
        topic = create_topic(self.broker, unique_name("kjs-tls"), partitions=1)
        out = run_js("roundtrip.js", self.broker.ssl_bootstrap_servers, topic, unique_name("kjs-tls"),
                     env={"KAFKAJS_SSL_CA": self.broker.ssl_ca_path})
        self.assertEqual(out, ROUNDTRIP)
