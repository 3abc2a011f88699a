"""The example test files in docs/testing.md run and pass (so the docs cannot rot).

Each ```python block preceded by ``<!-- example: NAME -->`` is written to NAME in a temporary
folder; the pytest examples run with pytest (the kafkatw plugin comes from its entry point) and
the trial examples with trial, each in a subprocess, and every test in them must pass.
"""

import os
import re
import subprocess
import sys

from twisted.trial import unittest

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "testing.md")
_EXAMPLE = re.compile(r"<!-- example: (\S+) -->\s*```python\n(.*?)```", re.S)


def extract_examples(text):
    """[(file name, source)] in document order."""
    return _EXAMPLE.findall(text)


def _count_tests(source):
    return len(re.findall(r"^\s*def test_", source, re.M))


class DocsExamplesTests(unittest.SynchronousTestCase):

    def setUp(self):
        with open(DOC) as f:
            self.examples = extract_examples(f.read())
        self.dir = os.path.abspath(self.mktemp())
        os.makedirs(self.dir)
        for name, source in self.examples:
            with open(os.path.join(self.dir, name), "w") as f:
                f.write(source)

    def run_tool(self, args):
        env = dict(os.environ, PYTHONPATH=self.dir)
        proc = subprocess.run(args, cwd=self.dir, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=240)
        return proc.returncode, proc.stdout.decode("utf-8", "replace")

    def test_every_client_has_an_example(self):
        names = [n for n, _ in self.examples]
        self.assertEqual(names, ["test_example_sasl.py", "test_example_aiokafka.py", "conftest.py",
                                 "test_example_confluent.py", "test_example_kafka_python.py",
                                 "test_example_trial.py"])

    def test_pytest_examples_pass(self):
        files = [n for n, src in self.examples if n.startswith("test_") and "twisted.trial" not in src]
        expected = sum(_count_tests(src) for n, src in self.examples if n in files)
        self.assertEqual(expected, 5)
        code, out = self.run_tool([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                   "--rootdir", self.dir] + files)
        self.assertEqual(code, 0, out)
        self.assertRegex(out, r"\b%d passed\b" % expected)
        self.assertNotRegex(out, r"\b(failed|error|skipped)\b")

    def test_trial_examples_pass(self):
        files = [n for n, src in self.examples if "twisted.trial" in src]
        self.assertEqual(files, ["test_example_trial.py"])
        trial = os.path.join(os.path.dirname(sys.executable), "trial")
        modules = [n[:-len(".py")] for n in files]
        code, out = self.run_tool([trial, "--temp-directory", "_trial_temp_docs"] + modules)
        self.assertEqual(code, 0, out)
        self.assertIn("PASSED (successes=2)", out)
