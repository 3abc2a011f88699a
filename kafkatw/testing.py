"""A real kafkatw broker for any Python test suite.

``KafkaBroker`` starts ``twistd -n kafka`` as a subprocess on a free loopback port with a
temporary data folder, waits until it answers ApiVersions, and stops it on exit. A subprocess
(not an in-process reactor) keeps the broker independent of the test's own event loop
(asyncio, threads, Twisted's trial reactor) and makes ``kill()`` a real SIGKILL crash.
"""

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time


class BrokerStartError(RuntimeError):
    """The broker process did not come up; the message carries the tail of its log."""


def _twistd():
    candidate = os.path.join(os.path.dirname(sys.executable), "twistd")
    return [candidate] if os.path.exists(candidate) else [sys.executable, "-m", "twisted.scripts.twistd"]


def api_versions_ok(host, port, timeout=2.0):
    """True when the broker at host:port answers an ApiVersions v0 request with error 0."""
    client_id = b"kafkatw.testing"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exact(s, 4)
            (size,) = struct.unpack(">i", head)
            payload = _recv_exact(s, size)
    except OSError:
        return False
    correlation_id, error_code = struct.unpack_from(">ih", payload, 0)
    return correlation_id == 1 and error_code == 0


def _recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return bytes(buf)


class KafkaBroker:
    """One broker process. Use as a context manager or call start()/stop().

    :param overrides: broker properties (Kafka names) as a dict, e.g. ``{"num.partitions": 3}``.
    :param num_partitions: shorthand for the ``num.partitions`` override.
    :param data_dir: where logs live; a temporary folder (removed on stop) by default.
    :param keep_data: keep the data folder after stop.
    :param host: loopback address to listen on.
    """

    def __init__(self, overrides=None, num_partitions=None, data_dir=None, keep_data=False,
                 host="127.0.0.1", start_timeout=30.0, config_file=None):
        self.overrides = dict(overrides or {})
        if num_partitions is not None:
            self.overrides["num.partitions"] = num_partitions
        self._own_dir = data_dir is None
        self.work_dir = data_dir or tempfile.mkdtemp(prefix="kafkatw-")
        self.data_dir = os.path.join(self.work_dir, "kafka-logs") if self._own_dir else self.work_dir
        self.keep_data = keep_data
        self.host = host
        self.port = 0
        self.start_timeout = start_timeout
        self.config_file = config_file
        self.process = None
        self.log_path = os.path.join(self.work_dir, "broker.log") if self._own_dir else None
        if self.log_path is None:
            fd, self.log_path = tempfile.mkstemp(prefix="kafkatw-broker-", suffix=".log")
            os.close(fd)
        self._ready_path = self.log_path + ".ready"

    # -- life cycle -------------------------------------------------------------------------
    @property
    def bootstrap_servers(self):
        return "%s:%d" % (self.host, self.port)

    def command(self):
        props = {
            "listeners": "PLAINTEXT://%s:%d" % (self.host, self.port),
            "log.dirs": self.data_dir,
            "kafkatw.ready.file": self._ready_path,
        }
        props.update({k: str(v) for k, v in self.overrides.items()})
        cmd = _twistd() + ["-n", "--pidfile=", "--logfile=" + self.log_path, "kafka"]
        if self.config_file:
            cmd += ["--config", self.config_file]
        for k, v in props.items():
            cmd += ["--override", "%s=%s" % (k, v)]
        return cmd

    def start(self):
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("broker already running (pid %d)" % self.process.pid)
        if os.path.exists(self._ready_path):
            os.unlink(self._ready_path)
        self.process = subprocess.Popen(
            self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(self.log_path + ".stderr", "wb"), cwd=self.work_dir,
        )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerStartError("broker exited with %s during start:\n%s"
                                       % (self.process.returncode, self.log_tail()))
            ready = self._read_ready()
            if ready is not None:
                self.port = ready
                if api_versions_ok(self.host, self.port):
                    return self
            time.sleep(0.02)
        self.kill()
        raise BrokerStartError("broker did not answer ApiVersions within %.0f s:\n%s"
                               % (self.start_timeout, self.log_tail()))

    def _read_ready(self):
        try:
            with open(self._ready_path) as f:
                info = json.load(f)
        except (OSError, ValueError):
            return None
        for listener in info.get("listeners", []):
            if listener.get("security_protocol", "PLAINTEXT") == "PLAINTEXT":
                return int(listener["port"])
        return None

    def stop(self, timeout=30.0):
        """SIGTERM and wait: a clean shutdown (flush, checkpoints, clean-shutdown marker)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self):
        """SIGKILL: a crash, for recovery tests."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process = None

    def restart(self):
        self.stop()
        return self.start()

    def close(self):
        self.stop()
        if not self.keep_data and self._own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc):
        self.close()

    # -- diagnostics ------------------------------------------------------------------------
    def log_tail(self, lines=40):
        out = []
        for path in (self.log_path, self.log_path + ".stderr"):
            try:
                with open(path, errors="replace") as f:
                    out.extend(f.read().splitlines()[-lines:])
            except OSError:
                pass
        return "\n".join(out)


_class_brokers = {}


def _stop_class_brokers():
    for broker in list(_class_brokers.values()):
        broker.close()
    _class_brokers.clear()


class KafkaBrokerMixin:
    """A trial/unittest mixin giving ``self.broker``.

    ``broker_scope = "class"`` (default) shares one broker among the tests of a class; it
    starts with the first test and stops when the test process exits (trial has no
    ``setUpClass``). ``broker_scope = "test"`` starts a fresh broker for every test.
    ``broker_overrides`` holds broker properties.
    """

    broker_scope = "class"
    broker_overrides = {}

    def setUp(self):
        super().setUp()
        if self.broker_scope == "test":
            self.broker = KafkaBroker(overrides=self.broker_overrides).start()
            self.addCleanup(self.broker.close)
            return
        key = type(self)
        broker = _class_brokers.get(key)
        if broker is None or broker.process is None:
            if not _class_brokers:
                import atexit

                atexit.register(_stop_class_brokers)
            broker = _class_brokers[key] = KafkaBroker(overrides=self.broker_overrides).start()
        self.broker = broker
