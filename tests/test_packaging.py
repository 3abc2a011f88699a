"""kafkatw as a user installs it: a wheel, an sdist and ``pip install -e .``, outside the tree.

The project is copied to a temporary folder (what the sdist would carry, no bytecode, no plug-in
cache), its wheel and sdist are built offline with this environment's setuptools, and each way of
installing goes into a throwaway virtual environment that reaches the dependencies (Twisted, the
clients) through a ``.pth`` line naming this environment's site-packages: a plain path, so this
environment's own editable kafkatw is not seen there. ``twistd kafka`` and ``python -m kafkatw``
then run from a folder outside the tree, and a real client talks to them.
"""

import os
import shutil
import signal
import sys
import tarfile
import tempfile
import zipfile

from twisted.trial import unittest

from kafkatw.testing import KafkaBroker
from tests.support import ThrowawayVenv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: What a source distribution needs to build: the project files and the two package trees.
PROJECT_FILES = ("setup.cfg", "setup.py", "pyproject.toml", "README.md", "MANIFEST.in")
PROJECT_TREES = ("kafkatw", "twisted", "etc", "docs")
DROP_IN = "twisted/plugins/kafkatw_plugin.py"


def run(args, **kwargs):
    return ThrowawayVenv.run(args, **kwargs)


def copy_project(target):
    os.makedirs(target)
    for name in PROJECT_FILES:
        shutil.copy(os.path.join(ROOT, name), target)
    for name in PROJECT_TREES:
        shutil.copytree(os.path.join(ROOT, name), os.path.join(target, name),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "dropin.cache"))


class Dists:
    """The project copy, its wheel and its sdist, built once per test process."""

    def __init__(self, root):
        self.root = root
        self.src = os.path.join(root, "src")
        copy_project(self.src)
        dist = os.path.join(root, "dist")
        run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
             "--disable-pip-version-check", "-w", dist, self.src], cwd=root)
        run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
             "print(build_meta.build_sdist(sys.argv[1]))", dist], cwd=self.src)
        names = sorted(os.listdir(dist))
        self.wheel = os.path.join(dist, [n for n in names if n.endswith(".whl")][0])
        self.sdist = os.path.join(dist, [n for n in names if n.endswith(".tar.gz")][0])
        self._venvs = {}

    def venv(self, how):
        """A throwaway environment with kafkatw installed ``how``: wheel, sdist or editable."""
        if how not in self._venvs:
            venv = ThrowawayVenv(os.path.join(self.root, "venv-" + how), see_our_kafkatw=False)
            if how == "editable":
                venv.pip_install("-e", self.src)
            else:
                venv.pip_install(getattr(self, how))
            self._venvs[how] = venv
        return self._venvs[how]


_dists = None


def dists():
    global _dists
    if _dists is None:
        root = tempfile.mkdtemp(prefix="kafkatw-packaging-")
        import atexit

        atexit.register(shutil.rmtree, root, True)
        _dists = Dists(root)
    return _dists


class ArchiveTests(unittest.SynchronousTestCase):
    """The drop-in ships, as a namespace portion: no __init__.py of twisted or twisted.plugins."""

    def test_wheel_carries_the_drop_in(self):
        with zipfile.ZipFile(dists().wheel) as z:
            names = z.namelist()
        self.assertEqual([n for n in names if n.startswith("twisted/")], [DROP_IN])
        self.assertEqual([n for n in names if n.startswith(("etc/", "docs/"))], [])  # not package data
        self.assertIn("kafkatw/__main__.py", names)
        self.assertIn("kafkatw/plugins/transports.py", names)
        self.assertEqual([n for n in names if "__pycache__" in n or n.endswith("dropin.cache")], [])
        # the web console's page is package data: served from the install, no build step
        self.assertEqual(sorted(n for n in names if n.startswith("kafkatw/console/static/")),
                         ["kafkatw/console/static/console.css", "kafkatw/console/static/console.js",
                          "kafkatw/console/static/index.html"])
        # the optional compiled record walk, built with the wheel (a C compiler is here)
        self.assertEqual(len([n for n in names if n.startswith("kafkatw/protocol/_recwalk.")
                              and n.endswith(".so")]), 1)

    def test_sdist_carries_the_drop_in(self):
        with tarfile.open(dists().sdist) as t:
            names = [n.split("/", 1)[1] for n in t.getnames() if "/" in n]
        self.assertEqual([n for n in names if n.startswith("twisted/")], ["twisted/plugins", DROP_IN])
        self.assertIn("kafkatw/__main__.py", names)
        self.assertIn("kafkatw/console/static/console.js", names)
        self.assertIn("kafkatw/protocol/_recwalk.c", names)  # built where the sdist is installed
        self.assertIn("setup.py", names)
        for extra in ("etc/server.properties", "etc/kafkatw.service", "etc/grafana-dashboard.json",
                      "docs/operations.md"):
            self.assertIn(extra, names)


class InstalledTests(unittest.SynchronousTestCase):
    """Each way of installing gives ``twistd kafka``, run from a folder outside the tree."""

    def setUp(self):
        self.cwd = os.path.abspath(self.mktemp())
        os.makedirs(self.cwd)

    def check_twistd_lists_kafka(self, how, expected_home):
        venv = dists().venv(how)
        where = run([venv.python, "-c", "import kafkatw; print(kafkatw.__file__)"], cwd=self.cwd).strip()
        self.assertEqual(os.path.dirname(where), os.path.join(expected_home(venv), "kafkatw"))
        listing = run(venv.twistd() + ["--help"], cwd=self.cwd)
        self.assertIn("kafka ", listing)
        self.assertIn("A Kafka-wire-compatible message broker", listing)
        usage = run(venv.twistd() + ["kafka", "--help"], cwd=self.cwd)
        self.assertIn("--config=", usage)
        self.assertIn("--override", usage)
        return venv

    def test_wheel(self):
        venv = self.check_twistd_lists_kafka("wheel", lambda v: v.purelib)
        self.assertTrue(os.path.exists(os.path.join(venv.purelib, DROP_IN)))
        self.assertFalse(os.path.exists(os.path.join(venv.purelib, "twisted", "__init__.py")))
        self.serve(venv, venv.twistd())

    def test_sdist(self):
        venv = self.check_twistd_lists_kafka("sdist", lambda v: v.purelib)
        self.assertTrue(os.path.exists(os.path.join(venv.purelib, DROP_IN)))
        # installing from source compiles the record walk, and the records module uses it
        used = run([venv.python, "-c", "from kafkatw.protocol import _recwalk, records; "
                    "print(records.step_records is _recwalk.step_records)"], cwd=self.cwd)
        self.assertEqual(used.strip(), "True")

    def test_editable(self):
        # a current setuptools: the package dir named "." gives a static .pth of the project root
        self.check_twistd_lists_kafka("editable", lambda v: dists().src)

    def test_python_m_kafkatw_runs_the_broker(self):
        venv = dists().venv("wheel")
        usage = run([venv.python, "-m", "kafkatw", "--help"], cwd=self.cwd)
        self.assertIn("--override", usage)
        self.serve(venv, [venv.python, "-m", "kafkatw"], twistd_options=False)

    def test_unwritable_plugin_cache_is_harmless(self):
        """An install the broker's user cannot write to: Twisted cannot store dropin.cache and
        scans the drop-ins each time; the plug-in is found all the same."""
        venv = dists().venv("wheel")
        cache = os.path.join(venv.purelib, "twisted", "plugins", "dropin.cache")
        if os.path.isfile(cache):
            os.remove(cache)
        os.makedirs(cache, exist_ok=True)  # a directory: writing the cache there fails as EACCES would
        self.addCleanup(os.rmdir, cache)
        listing = run(venv.twistd() + ["--help"], cwd=self.cwd)
        self.assertIn("A Kafka-wire-compatible message broker", listing)
        self.assertTrue(os.path.isdir(cache))

    def serve(self, venv, command, twistd_options=True):
        """Start the installed broker and produce and consume one record with kafka-python."""
        broker = InstalledBroker(command, twistd_options, topics=[("installed", 1)])
        self.addCleanup(broker.close)
        broker.start()
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition

        producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks=1)
        try:
            metadata = producer.send("installed", b"from-an-installed-broker").get(timeout=10)
        finally:
            producer.close()
        self.assertEqual((metadata.partition, metadata.offset), (0, 0))
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, enable_auto_commit=False,
                                 auto_offset_reset="earliest", consumer_timeout_ms=10000)
        try:
            consumer.assign([TopicPartition("installed", 0)])
            first = next(iter(consumer))
        finally:
            consumer.close()
        self.assertEqual(first.value, b"from-an-installed-broker")
        process = broker.process
        broker.stop()
        # twistd stops cleanly on SIGTERM, then ends itself with that signal (so does Kafka's JVM)
        self.assertEqual(process.returncode, -signal.SIGTERM)


class InstalledBroker(KafkaBroker):
    """A broker run by a given command line (``twistd`` of a throwaway environment, or
    ``python -m kafkatw``, which takes only the kafka plug-in's options)."""

    def __init__(self, command, twistd_options, **kwargs):
        KafkaBroker.__init__(self, fork_server=False, **kwargs)
        self._command = command
        self._twistd_options = twistd_options

    def command(self):
        args = self.twistd_args()
        if not self._twistd_options:
            args = args[args.index("kafka") + 1:]
        return ["env", "-u", "PYTHONPATH"] + self._command + args  # see env_without_pythonpath()
