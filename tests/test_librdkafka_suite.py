"""librdkafka 2.0.2's own integration tests, unmodified, against a real kafkatw broker: 0081's
ACL sub-tests (CreateAcls, DescribeAcls, DeleteAcls, with an ACL authorizer on; on one broker and
on three) and its config sub-tests (AlterConfigs, DescribeConfigs), the 0103 transaction
sub-tests that run on one broker, and all of 0103 on three brokers. The runner (``test-runner``)
is built from Debian's source package by ``tests/librdkafka/build.sh`` (``.ci/run`` calls it);
without it these tests skip, or fail under KAFKATW_REQUIRE_LIBRDKAFKA_TESTS=1 (CI).

The runner's own output is the evidence: each sub-test prints ``[ name ]`` when it starts and
``[ name: PASS (..s) ]`` when it passes; a test asserts exactly which passed and that none failed.
"""

import os
import re
import shutil
import subprocess
import tempfile

from twisted.trial import unittest

from kafkatw.testing import KafkaBrokerMixin

VERSION = "2.0.2"
#: the Kafka version the runner is told it talks to (it picks sub-test expectations by it):
#: the newest its 2.0.2 test-suite knows, and one whose behaviour kafkatw serves
KAFKA_VERSION = "3.1.0"
RUNNER_TIMEOUT = 600  # seconds for one runner process, a bound for a hung client

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_START = re.compile(r"\[ (do_test_\w+:\d+(?:: .*?)?) \]$")
_PASS = re.compile(r"\[ (do_test_\w+:\d+(?:: .*?)?): PASS \([0-9.]+s\) \]$")
_SKIP = re.compile(r"\[ (do_test_\w+:\d+(?:: .*?)?): SKIP: ")
_LINE_NO = re.compile(r"^(do_test_\w+):\d+")


def build_dir():
    """Where tests/librdkafka/build.sh caches the build (the same default as the script)."""
    explicit = os.environ.get("KAFKATW_LIBRDKAFKA_DIR")
    if explicit:
        return explicit
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "kafkatw", "librdkafka-" + VERSION)


def runner_path():
    return os.path.join(build_dir(), "src", "tests", "test-runner")


def require_runner():
    path = runner_path()
    if os.access(path, os.X_OK) and os.path.exists(os.path.join(build_dir(), ".built")):
        return path
    if os.environ.get("KAFKATW_REQUIRE_LIBRDKAFKA_TESTS") == "1":
        raise AssertionError("librdkafka %s's test-runner is required (KAFKATW_REQUIRE_LIBRDKAFKA_TESTS=1) "
                             "but %s is missing: run tests/librdkafka/build.sh" % (VERSION, path))
    raise unittest.SkipTest("librdkafka %s's test-runner is not built (tests/librdkafka/build.sh)" % VERSION)


def subtest_name(raw):
    """``do_test_fenced_txn:693: do not produce after fence`` without the line number."""
    return _LINE_NO.sub(r"\1", raw)


class RunnerResult:
    """What one run of the runner printed: sub-tests started, passed and skipped (names without
    line numbers, in order), the exit status and the whole output."""

    def __init__(self, returncode, output):
        self.returncode = returncode
        self.output = output
        self.started, self.passed, self.skipped = [], [], []
        for line in _ANSI.sub("", output).splitlines():
            line = line.rstrip()
            m = _PASS.search(line)
            if m:
                self.passed.append(subtest_name(m.group(1)))
                continue
            m = _SKIP.search(line)
            if m:
                self.skipped.append(subtest_name(m.group(1)))
                continue
            m = _START.search(line)
            if m:
                self.started.append(subtest_name(m.group(1)))

    @property
    def failed(self):
        """Sub-tests that started but neither passed nor skipped (the runner stops a test at
        its first failing sub-test)."""
        left = list(self.started)
        for name in self.passed + self.skipped:
            if name in left:
                left.remove(name)
        return left

    def describe(self, limit=60):
        tail = "\n".join(_ANSI.sub("", self.output).splitlines()[-limit:])
        return "exit %s, passed %s, failed %s\n--- last lines of the runner ---\n%s" % (
            self.returncode, self.passed, self.failed, tail)


def run_runner(bootstrap_servers, tests, subtests=None, extra_conf=None, timeout=RUNNER_TIMEOUT):
    """Run librdkafka's test-runner for ``tests`` (its TESTS filter) against the broker(s);
    ``subtests`` is its SUBTESTS filter (a substring of the sub-test names)."""
    runner = require_runner()
    work = tempfile.mkdtemp(prefix="librdkafka-tests-")
    try:
        conf = os.path.join(work, "test.conf")
        with open(conf, "w") as f:
            f.write("bootstrap.servers=%s\n" % bootstrap_servers)
            for k, v in (extra_conf or {}).items():
                f.write("%s=%s\n" % (k, v))
        src = os.path.join(build_dir(), "src")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TEST", "SUBTESTS", "KAFKA_"))}
        env.update(TESTS=tests, RDKAFKA_TEST_CONF=conf, TEST_KAFKA_VERSION=KAFKA_VERSION,
                   LD_LIBRARY_PATH=os.path.join(src, "src") + os.pathsep + os.path.join(src, "src-cpp"),
                   # the runner's own knob for slow shared machines: longer timeouts, and its
                   # duration assertions warn instead of failing
                   CI="true")
        if subtests:
            env["SUBTESTS"] = subtests
        # -p1: one test at a time; -L: leave out the tests that need no broker
        proc = subprocess.Popen([runner, "-p1", "-L"], cwd=work, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            out += b"\n(killed after %d s)\n" % timeout
        return RunnerResult(proc.returncode, out.decode("utf-8", "replace"))
    finally:
        shutil.rmtree(work, ignore_errors=True)


ACL_AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                  # the runner connects over PLAINTEXT, as User:ANONYMOUS, and must be allowed
                  # the ALTER/DESCRIBE on the cluster the ACL APIs need
                  "super.users": "User:ANONYMOUS"}
TXN_OVERRIDES = {"transaction.state.log.num.partitions": 5, "offsets.topic.num.partitions": 5,
                 "group.initial.rebalance.delay.ms": 0}


class RunnerOutputTests(unittest.SynchronousTestCase):
    """The parser on the runner's real output shapes (colours, line numbers, a failure)."""

    OUTPUT = (
        "[0103_transactions           /  0.000s] \x1b[35m[ do_test_misuse_txn:529 ]\n\x1b[0m"
        "[0103_transactions           /  0.572s] \x1b[32m[ do_test_misuse_txn:529: PASS (0.57s) ]\n\x1b[0m"
        "[0103_transactions           /  0.572s] \x1b[35m[ do_test_fenced_txn:693: produce after fence ]\n\x1b[0m"
        "[0103_transactions           /  4.1s] \x1b[33m[ do_test_empty_txn:953: send offsets, commit: "
        "SKIP: not on this broker ]\n\x1b[0m"
        "[0103_transactions           /  5.0s] \x1b[35m[ do_test_basic_producer_txn:129: without compression ]\n"
        "### Test \"0103_transactions (do_test_basic_producer_txn:129: without compression)\" failed ###\n")

    def test_passed_failed_skipped(self):
        r = RunnerResult(-6, self.OUTPUT)
        self.assertEqual(r.passed, ["do_test_misuse_txn"])
        self.assertEqual(r.skipped, ["do_test_empty_txn: send offsets, commit"])
        self.assertEqual(r.failed, ["do_test_fenced_txn: produce after fence",
                                    "do_test_basic_producer_txn: without compression"])

    def test_a_repeated_subtest_counts_each_time(self):
        line = "[0081_admin   /  0.1s] [ do_test_CreateAcls:1115 ]\n[0081_admin   /  0.1s] " \
               "[ do_test_CreateAcls:1115: PASS (0.03s) ]\n"
        r = RunnerResult(0, line * 3)
        self.assertEqual(r.passed, ["do_test_CreateAcls"] * 3)
        self.assertEqual(r.failed, [])


class Admin0081AclTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    """tests/0081-admin.c, the ACL sub-tests, against a broker with Kafka's ACL authorizer."""

    broker_overrides = ACL_AUTHORIZER

    def test_acl_subtests_pass(self):
        # SUBTESTS matches do_test_CreateAcls, do_test_DescribeAcls and do_test_DeleteAcls; each
        # runs for request versions 0 and 1, first from a producer, then from a consumer handle
        r = run_runner(self.broker.bootstrap_servers, "0081", subtests="Acls")
        once = ["do_test_CreateAcls"] * 2 + ["do_test_DescribeAcls"] * 2 + ["do_test_DeleteAcls"] * 2
        self.assertEqual((r.returncode, r.failed, r.passed), (0, [], once * 2), r.describe())


class Admin0081ConfigTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    """tests/0081-admin.c's AlterConfigs and DescribeConfigs sub-tests: topic configs, a
    non-existent topic, and a broker's sasl.kerberos.min.time.before.relogin (a Kafka config of a
    feature kafkatw does not implement, which Kafka lets AlterConfigs change)."""

    def test_config_subtests_pass(self):
        # each runs from a producer, then from a consumer handle
        r = run_runner(self.broker.bootstrap_servers, "0081", subtests="Configs")
        self.assertEqual((r.returncode, r.failed, r.passed),
                         (0, [], ["do_test_AlterConfigs", "do_test_DescribeConfigs"] * 2), r.describe())


class Admin0081WithoutAuthorizerTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    """The same sub-test fails without an authorizer (the ACL APIs answer SECURITY_DISABLED, as
    Kafka's): the runner's verdict reaches these tests."""

    def test_create_acls_fails(self):
        r = run_runner(self.broker.bootstrap_servers, "0081", subtests="do_test_CreateAcls")
        self.assertNotEqual(r.returncode, 0, r.describe())
        self.assertEqual((r.passed, r.failed), ([], ["do_test_CreateAcls"]), r.describe())
        # the per-ACL error message of SECURITY_DISABLED, Kafka's text
        self.assertIn("not No Authorizer is configured on the broker", r.output)


class Transactions0103SingleBrokerTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    """tests/0103-transactions.c, the sub-tests that need no more than one broker (the others
    create their topics with replication factor 3)."""

    broker_overrides = TXN_OVERRIDES

    def check(self, subtests, expected):
        r = run_runner(self.broker.bootstrap_servers, "0103", subtests=subtests)
        self.assertEqual((r.returncode, r.failed, r.passed), (0, [], expected), r.describe())

    def test_misuse(self):
        # transaction.timeout.ms over transaction.max.timeout.ms: INVALID_TRANSACTION_TIMEOUT,
        # fatal; repeated and timed-out init_transactions() calls
        self.check("do_test_misuse_txn", ["do_test_misuse_txn"])

    def test_fenced(self):
        # a second producer with the same transactional.id fences the first: its commit fails
        # with _FENCED, nothing of it is committed (with and without producing after the fence)
        self.check("do_test_fenced_txn", ["do_test_fenced_txn: do not produce after fence",
                                          "do_test_fenced_txn: produce after fence"])


class Admin0081AclClusterTests(unittest.SynchronousTestCase):
    """The 0081 ACL sub-tests against three brokers and ZooKeeper, where the ACLs are kept."""

    def setUp(self):
        from kafkatw import testing
        from tests.test_cluster_e2e import require_zookeeper

        require_runner()
        require_zookeeper()
        self.cluster = testing.KafkaCluster(brokers=3, overrides=ACL_AUTHORIZER).start()
        self.addCleanup(self.cluster.close)

    def test_acl_subtests_pass(self):
        r = run_runner(self.cluster.bootstrap_servers, "0081", subtests="Acls")
        once = ["do_test_CreateAcls"] * 2 + ["do_test_DescribeAcls"] * 2 + ["do_test_DeleteAcls"] * 2
        self.assertEqual((r.returncode, r.failed, r.passed), (0, [], once * 2), r.describe())


ALL_0103 = ["do_test_misuse_txn",
            "do_test_basic_producer_txn: without compression",
            "do_test_basic_producer_txn: with compression",
            "do_test_consumer_producer_txn: transactional test with 10 transactions",
            "do_test_fenced_txn: do not produce after fence",
            "do_test_fenced_txn: produce after fence",
            "do_test_fatal_idempo_error_without_kip360: not expecting failure since broker is >= 2.5",
            "do_test_empty_txn: don't send offsets, commit",
            "do_test_empty_txn: don't send offsets, abort",
            "do_test_empty_txn: send offsets, commit",
            "do_test_empty_txn: send offsets, abort",
            "do_test_wmark_isolation_level"]


class Transactions0103ClusterTests(unittest.SynchronousTestCase):
    """All of tests/0103-transactions.c (replication factor 3 topics, consume-transform-produce,
    fencing, empty transactions with and without offsets, the watermarks of read_committed)
    against three brokers and ZooKeeper."""

    def setUp(self):
        from kafkatw import testing
        from tests.test_cluster_e2e import require_zookeeper

        require_runner()
        require_zookeeper()
        self.cluster = testing.KafkaCluster(brokers=3, overrides=TXN_OVERRIDES).start()
        self.addCleanup(self.cluster.close)

    def test_every_subtest_passes(self):
        r = run_runner(self.cluster.bootstrap_servers, "0103")
        self.assertEqual((r.returncode, r.failed, r.passed), (0, [], ALL_0103), r.describe())
