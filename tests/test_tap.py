"""Tests for kafkatw.tap and the ``twistd kafka`` plugin: option parsing, config errors as one
line on stderr, the call into kafkatw.service, and the plugin as twistd sees it."""

import io
import os
import socket
import subprocess
import sys
import types

from twisted.application import service
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

import kafkatw
from kafkatw import tap
from kafkatw.config import ConfigError, KafkaConfig

VENV_BIN = os.path.dirname(sys.executable)
TWISTD = os.path.join(VENV_BIN, "twistd")


class OptionsTests(SynchronousTestCase):
    def test_defaults(self):
        options = tap.Options()
        options.parseOptions([])
        self.assertEqual((options["config"], options["overrides"]), (None, []))

    def test_config_and_repeated_overrides(self):
        options = tap.Options()
        options.parseOptions(["--config", "etc/x.properties", "--override", "num.partitions=3",
                              "--override=log.dirs=/a=b", "--override", "num.partitions=4"])
        self.assertEqual(options["config"], "etc/x.properties")
        self.assertEqual(options["overrides"], [("num.partitions", "3"), ("log.dirs", "/a=b"),
                                                ("num.partitions", "4")])

    def test_short_config(self):
        options = tap.Options()
        options.parseOptions(["-c", "f.properties"])
        self.assertEqual(options["config"], "f.properties")

    def test_overrides_not_shared_between_instances(self):
        first = tap.Options()
        first.parseOptions(["--override", "a=1"])
        second = tap.Options()
        second.parseOptions([])
        self.assertEqual(second["overrides"], [])

    def test_bad_override(self):
        options = tap.Options()
        e = self.assertRaises(usage.UsageError, options.parseOptions, ["--override", "novalue"])
        self.assertEqual(str(e), "Invalid override 'novalue': expected key=value")

    def test_load_config_last_override_wins(self):
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("num.partitions=2\nnode.id=3\n")
        options = tap.Options()
        options.parseOptions(["--config", path, "--override", "num.partitions=5",
                              "--override", "num.partitions=6"])
        config = options.load_config()
        self.assertEqual((config["num.partitions"], config.node_id), (6, 3))

    def test_help_lists_options(self):
        text = str(tap.Options())
        self.assertIn("--config=", text)
        self.assertIn("--override=", text)


class FakeBrokerModule:
    """Stands in for kafkatw.service (the integrator's module) in sys.modules."""

    def __init__(self, testcase, result=None, error=None):
        self.calls = []
        self.result = result
        self.error = error
        module = types.ModuleType("kafkatw.service")
        module.make_broker_service = self.make_broker_service
        saved_module = sys.modules.get("kafkatw.service")
        saved_attr = getattr(kafkatw, "service", None)
        sys.modules["kafkatw.service"] = module
        kafkatw.service = module

        def restore():
            if saved_module is None:
                sys.modules.pop("kafkatw.service", None)
            else:
                sys.modules["kafkatw.service"] = saved_module
            if saved_attr is None:
                if hasattr(kafkatw, "service"):
                    del kafkatw.service
            else:
                kafkatw.service = saved_attr

        testcase.addCleanup(restore)

    def make_broker_service(self, config):
        self.calls.append(config)
        if self.error is not None:
            raise self.error
        return self.result


class MakeServiceTests(SynchronousTestCase):
    def options(self, *argv):
        options = tap.Options()
        options.parseOptions(list(argv))
        return options

    def test_calls_make_broker_service_with_config(self):
        inner = service.Service()
        fake = FakeBrokerModule(self, result=inner)
        top = tap.makeService(self.options("--override", "num.partitions=4"))
        self.assertIsInstance(top, service.MultiService)
        self.assertEqual(list(top), [inner])
        self.assertFalse(top.running)
        (config,) = fake.calls
        self.assertIsInstance(config, KafkaConfig)
        self.assertEqual(config["num.partitions"], 4)

    def test_broker_is_the_only_child(self):
        multi = service.MultiService()
        FakeBrokerModule(self, result=multi)
        top = tap.makeService(self.options())
        self.assertIsInstance(top, tap.KafkaService)
        self.assertEqual(list(top), [multi])

    def test_config_error_while_starting_is_one_line_and_exit_2(self):
        class Failing(service.Service):
            def startService(self):
                raise ConfigError("log dir /x is not writable")

        FakeBrokerModule(self, result=Failing())
        err = io.StringIO()
        top = tap.makeService(self.options(), stderr=err)
        e = self.assertRaises(SystemExit, top.startService)
        self.assertEqual(e.code, 2)
        self.assertEqual(err.getvalue(), "kafkatw: log dir /x is not writable\n")

    def test_bad_config_is_one_line_and_exit_2(self):
        fake = FakeBrokerModule(self, result=service.Service())
        err = io.StringIO()
        e = self.assertRaises(SystemExit, tap.makeService,
                              self.options("--override", "num.partitions=abc"), stderr=err)
        self.assertEqual(e.code, 2)
        self.assertEqual(err.getvalue(), "kafkatw: Invalid value abc for configuration "
                                         "num.partitions: Not a number of type INT\n")
        self.assertEqual(fake.calls, [])

    def test_missing_config_file(self):
        FakeBrokerModule(self, result=service.Service())
        err = io.StringIO()
        e = self.assertRaises(SystemExit, tap.makeService,
                              self.options("--config", "/nonexistent/server.properties"),
                              stderr=err)
        self.assertEqual(e.code, 2)
        self.assertEqual(err.getvalue(), "kafkatw: Cannot read config file "
                                         "/nonexistent/server.properties: No such file or "
                                         "directory\n")

    def test_config_error_from_service_is_one_line(self):
        FakeBrokerModule(self, error=ConfigError("log.dirs /x is not writable"))
        err = io.StringIO()
        e = self.assertRaises(SystemExit, tap.makeService, self.options(), stderr=err)
        self.assertEqual(e.code, 2)
        self.assertEqual(err.getvalue(), "kafkatw: log.dirs /x is not writable\n")


class TwistdPluginTests(SynchronousTestCase):
    """The plugin as twistd finds it, from a directory other than the project root."""

    def run_twistd(self, *args):
        cwd = self.mktemp()
        os.makedirs(cwd)
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        proc = subprocess.run([TWISTD] + list(args), cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=60)
        return proc

    def test_help_lists_config_and_override(self):
        if not os.path.exists(TWISTD):
            raise self.skipTest("no twistd next to %s" % (sys.executable,))
        proc = self.run_twistd("kafka", "--help")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("--config=", proc.stdout)
        self.assertIn("--override=", proc.stdout)

    def test_bad_config_one_line_on_stderr(self):
        if not os.path.exists(TWISTD):
            raise self.skipTest("no twistd next to %s" % (sys.executable,))
        proc = self.run_twistd("-n", "--pidfile=", "kafka", "--override", "num.io.threads=0")
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        self.assertEqual(proc.stderr, "kafkatw: Invalid value 0 for configuration "
                                      "num.io.threads: Value must be at least 1\n")

    def test_config_error_met_while_starting_one_line_on_stderr(self):
        if not os.path.exists(TWISTD):
            raise self.skipTest("no twistd next to %s" % (sys.executable,))
        blocker = os.path.abspath(self.mktemp())
        with open(blocker, "w"):
            pass  # a file where a log dir should be created
        proc = self.run_twistd("-n", "--pidfile=", "kafka", "--override", "log.dirs=%s/logs" % blocker,
                               "--override", "listeners=PLAINTEXT://127.0.0.1:0")
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        self.assertEqual(proc.stderr, "kafkatw: cannot start the broker: [Errno 20] Not a directory: "
                                      "'%s/logs'\n" % blocker)


    def test_port_in_use_one_line_on_stderr(self):
        """A listener whose port is taken stops start-up with Kafka's one line, not a traceback."""
        if not os.path.exists(TWISTD):
            raise self.skipTest("no twistd next to %s" % (sys.executable,))
        taken = socket.socket()
        self.addCleanup(taken.close)
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        logs = os.path.abspath(self.mktemp())
        proc = self.run_twistd("-n", "--pidfile=", "kafka", "--override", "log.dirs=%s" % logs,
                               "--override", "listeners=PLAINTEXT://127.0.0.1:%d" % port)
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        self.assertEqual(proc.stderr, "kafkatw: Socket server failed to bind to 127.0.0.1:%d "
                                      "(listener PLAINTEXT): Address already in use\n" % port)
        self.assertNotIn("Traceback", proc.stdout)

#: What pyOpenSSL loads: cryptography's compiled bindings (pyOpenSSL itself is pure Python).
CRYPTOGRAPHY_BINDINGS = "cryptography/hazmat/bindings/_rust"

HIDDEN_TLS_PROBE = r"""
import sys
from kafkatw import tap
tap.import_twisted_tcp_without_tls()
import twisted.internet.posixbase as posixbase, twisted.internet.tcp as tcp
import twisted.internet.endpoints as endpoints
print(posixbase.tls is None, endpoints.TLSMemoryBIOFactory is None, tcp.ITLSTransport.__name__, sorted(
    m for m in sys.modules if m.split(".")[0] in ("OpenSSL", "cryptography")))
from twisted.protocols.tls import TLSMemoryBIOFactory
import OpenSSL.SSL
print(TLSMemoryBIOFactory.__name__, "OpenSSL" in sys.modules)
"""


class TlsStackTests(SynchronousTestCase):
    """A twistd broker loads pyOpenSSL/cryptography only when it has an SSL listener."""

    def broker(self, listeners):
        from kafkatw.testing import KafkaBroker

        # not forked from the fork server, which has the TLS stack loaded for every broker
        broker = KafkaBroker(listeners=listeners, fork_server=False)
        self.addCleanup(broker.close)
        return broker.start()

    def mapped_files(self, pid):
        with open("/proc/%d/maps" % pid) as f:
            return {line.split()[-1] for line in f if line.count(" ") > 4 and "/" in line}

    def test_plaintext_broker_loads_no_tls_stack(self):
        broker = self.broker(("PLAINTEXT",))
        from kafkatw.testing import api_versions_ok

        self.assertTrue(api_versions_ok("127.0.0.1", broker.port))
        files = self.mapped_files(broker.process.pid)
        self.assertTrue(any("/lib-dynload/_socket" in f for f in files), sorted(files))
        self.assertEqual([f for f in files if CRYPTOGRAPHY_BINDINGS in f], [])

    def test_ssl_broker_serves_tls(self):
        broker = self.broker(("SSL",))  # start() waits for an ApiVersions answer over TLS
        self.assertEqual(set(broker.ports), {"SSL"})
        files = self.mapped_files(broker.process.pid)
        self.assertEqual(len([f for f in files if CRYPTOGRAPHY_BINDINGS in f]), 1, sorted(files))

    def test_tcp_imported_without_tls_leaves_openssl_importable(self):
        out = subprocess.run([sys.executable, "-c", HIDDEN_TLS_PROBE], capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.splitlines(), ["True True Interface []", "TLSMemoryBIOFactory True"])
