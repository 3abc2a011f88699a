"""Third-party packages (a transport layer, an authorizer asking an HTTP service), installed with
pip, used by ``twistd kafka`` from config only.

The packages are the ones docs/plugins.md shows (its ``<!-- file: ... -->`` blocks are written to a
temporary folder, so doc and test cannot drift). It is installed with pip (offline: no deps, no
build isolation, no index) into a throwaway virtual environment that sees this environment's
packages through a ``.pth`` file; the broker runs from there with nothing patched, driven by
kafka-python, and the package's file must count exactly the responses the request log lists.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time

from twisted.trial import unittest

from kafkatw.testing import KafkaBroker
from tests.support import ThrowawayVenv

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "plugins.md")
_FILE = re.compile(r"<!-- file: (\S+) -->\s*```\w*\n(.*?)```", re.S)
PACKAGES = ("counting-transport", "http-authorizer")


def doc_files():
    """``[(relative path, text)]`` of the files docs/plugins.md shows, in document order."""
    with open(DOC) as f:
        return _FILE.findall(f.read())


class ThirdPartyPackages:
    """The doc's packages written out and pip-installed into a throwaway environment that also
    sees the tree's kafkatw."""

    def __init__(self, root):
        self.root = root
        self.src = os.path.join(root, "src")
        for path, text in doc_files():
            target = os.path.join(self.src, path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w") as f:
                f.write(text)
        self.env = ThrowawayVenv(os.path.join(root, "venv"), see_our_kafkatw=True)
        self.python, self.purelib = self.env.python, self.env.purelib
        self.pip_output = self.env.pip_install(*[os.path.join(self.src, p) for p in PACKAGES])

    def twistd(self):
        return self.env.twistd()


_venv = None


def throwaway_venv():
    """Built once per test process (about 3 s), removed at exit."""
    global _venv
    if _venv is None:
        root = tempfile.mkdtemp(prefix="kafkatw-thirdparty-")
        import atexit

        atexit.register(shutil.rmtree, root, True)
        _venv = ThirdPartyPackages(root)
    return _venv


class VenvBroker(KafkaBroker):
    """``twistd kafka`` run by the throwaway environment's python."""

    def __init__(self, venv, **kwargs):
        KafkaBroker.__init__(self, fork_server=False, request_log=True, **kwargs)
        self.venv = venv

    def command(self):
        return self.venv.twistd() + self.twistd_args()


class DocTests(unittest.SynchronousTestCase):
    def test_the_doc_shows_a_whole_package(self):
        self.assertEqual([p for p, _ in doc_files()], [
            "counting-transport/pyproject.toml", "counting-transport/setup.cfg",
            "counting-transport/counting_transport/__init__.py",
            "counting-transport/twisted/plugins/counting_transport_plugin.py",
            "counting.properties",
            "http-authorizer/pyproject.toml", "http-authorizer/setup.cfg",
            "http-authorizer/http_authorizer/__init__.py",
            "http-authorizer/twisted/plugins/http_authorizer_plugin.py",
            "http-authorizer.properties"])


class ThirdPartyTransportTests(unittest.SynchronousTestCase):
    """A real client through a broker whose only listener uses the third-party layer."""

    def setUp(self):
        self.venv = throwaway_venv()
        self.dir = os.path.abspath(self.mktemp())
        os.makedirs(self.dir)
        self.count_file = os.path.join(self.dir, "responses.txt")

    def test_installed_where_twisted_finds_it(self):
        self.assertTrue(os.path.exists(os.path.join(self.venv.purelib, "twisted", "plugins",
                                                    "counting_transport_plugin.py")))
        self.assertFalse(os.path.exists(os.path.join(self.venv.purelib, "twisted", "__init__.py")))
        out = subprocess.run([self.venv.python, "-c", "from kafkatw import registry; "
                              "from kafkatw.network.transport import ITransportLayer; "
                              "print(registry.plugin_names(ITransportLayer))"],
                             check=True, stdout=subprocess.PIPE, text=True).stdout
        self.assertEqual(out.strip(), "['COUNTING', 'PLAINTEXT', 'SSL']")
        # this environment does not see it: the package is only in the throwaway one
        from kafkatw import registry
        from kafkatw.network.transport import ITransportLayer

        self.assertEqual(registry.plugin_names(ITransportLayer), ["PLAINTEXT", "SSL"])

    def run_broker(self, overrides):
        config = os.path.join(self.dir, "counting.properties")
        with open(config, "w") as f:
            f.write(dict(doc_files())["counting.properties"])
        overrides = dict({"listener.name.plaintext.counting.transport.file": self.count_file}, **overrides)
        broker = VenvBroker(self.venv, config_file=config, overrides=overrides, topics=[("counted", 1)])
        self.addCleanup(broker.close)
        broker.start()
        return broker

    def produce_and_consume(self, broker):
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition

        producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks=1)
        try:
            for i in range(3):
                producer.send("counted", b"value-%d" % i).get(timeout=10)
        finally:
            producer.close()
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, enable_auto_commit=False,
                                 auto_offset_reset="earliest")
        try:
            tp = TopicPartition("counted", 0)
            consumer.assign([tp])
            got = []
            deadline = time.monotonic() + 15
            while len(got) < 3 and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=200).values():
                    got.extend(r.value for r in records)
        finally:
            consumer.close()
        return got

    def check_counted(self, broker):
        values = self.produce_and_consume(broker)
        self.assertEqual(values, [b"value-0", b"value-1", b"value-2"])
        broker.stop()  # clean stop: every request log line is written
        with open(broker.request_log_path) as f:
            logged = [json.loads(line.split(":", 1)[1]) for line in f]
        with open(self.count_file) as f:
            sizes = [int(line) for line in f]
        apis = [e["requestHeader"]["requestApiKeyName"] for e in logged]
        self.assertEqual(apis.count("PRODUCE"), 3)
        self.assertGreaterEqual(apis.count("FETCH"), 1)
        # every response went through the third-party layer, one send each
        self.assertEqual(len(sizes), len(logged))
        self.assertTrue(all(n > 8 for n in sizes), sizes)

    def test_short_name_from_its_twisted_drop_in(self):
        broker = self.run_broker({})  # counting.properties says COUNTING
        self.check_counted(broker)

    def test_dotted_name(self):
        broker = self.run_broker({"listener.name.plaintext.transport.class":
                                  "counting_transport.CountingTransportLayer"})
        self.check_counted(broker)

    def test_its_configure_refusal_is_one_line_and_exit_2(self):
        config = os.path.join(self.dir, "counting.properties")
        with open(config, "w") as f:
            f.write(dict(doc_files())["counting.properties"])
        proc = subprocess.run(
            self.venv.twistd() + ["-n", "--pidfile=", "--logfile=" + os.path.join(self.dir, "log"), "kafka",
                                  "--config", config, "--override", "log.dirs=" + os.path.join(self.dir, "logs"),
                                  "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                                  "--override", "listener.name.plaintext.counting.transport.file="],
            cwd=self.dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        self.assertEqual((proc.returncode, proc.stderr), (2, (
            "kafkatw: Invalid value COUNTING for configuration listener.name.plaintext.transport.class: "
            "configure() failed: ValueError: counting.transport.file is not set\n")))


class PolicyService:
    """An HTTP policy service in a thread: everything is allowed except resources named
    ``secret*``; it keeps every question it was asked."""

    def __init__(self):
        import http.server
        import threading

        questions = self.questions = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                question = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                questions.append(question)
                answer = json.dumps({"allowed": [not a["name"].startswith("secret")
                                                 for a in question["actions"]]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/authorize" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class ThirdPartyAuthorizerTests(unittest.SynchronousTestCase):
    """The HTTP authorizer of docs/plugins.md decides a real client's requests, asynchronously."""

    def setUp(self):
        self.venv = throwaway_venv()
        self.dir = os.path.abspath(self.mktemp())
        os.makedirs(self.dir)
        self.service = PolicyService()
        self.addCleanup(self.service.close)

    def run_broker(self, **overrides):
        config = os.path.join(self.dir, "http-authorizer.properties")
        with open(config, "w") as f:
            f.write(dict(doc_files())["http-authorizer.properties"])
        broker = VenvBroker(self.venv, config_file=config, topics=[("open", 1), ("secret", 1)],
                            overrides=dict({"http.authorizer.url": self.service.url}, **overrides))
        self.addCleanup(broker.close)
        broker.start()
        return broker

    def check_decided_by_the_service(self, broker):
        from kafka import KafkaProducer
        from kafka.errors import TopicAuthorizationFailedError

        producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks=1)
        try:
            self.assertEqual(producer.send("open", b"v").get(timeout=15).offset, 0)
            with self.assertRaises(TopicAuthorizationFailedError):
                producer.send("secret", b"v").get(timeout=15)
        finally:
            producer.close()
        asked = [(q["principal"], a["operation"], a["resource_type"], a["name"])
                 for q in self.service.questions for a in q["actions"]]
        self.assertIn(("User:ANONYMOUS", "WRITE", "TOPIC", "open"), asked)
        self.assertIn(("User:ANONYMOUS", "DESCRIBE", "TOPIC", "secret"), asked)

    def test_short_name_from_its_twisted_drop_in(self):
        self.check_decided_by_the_service(self.run_broker())

    def test_dotted_name(self):
        self.check_decided_by_the_service(self.run_broker(**{"authorizer.class.name": "http_authorizer.HttpAuthorizer"}))
