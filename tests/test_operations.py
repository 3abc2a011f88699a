"""The operations files stay true: the systemd unit's command line is one twistd accepts, and
every metric the Grafana dashboard and docs/operations.md name is served by a real broker's
/metrics after real traffic (so a renamed metric breaks this test, not a dashboard).
"""

import json
import os
import re
import shlex
import uuid

from prometheus_client.parser import text_string_to_metric_families
from twisted.trial import unittest

from kafkatw.testing import KafkaBrokerMixin

from tests.test_metrics import get, samples

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNIT = os.path.join(ROOT, "etc", "kafkatw.service")
DASHBOARD = os.path.join(ROOT, "etc", "grafana-dashboard.json")
OPERATIONS = os.path.join(ROOT, "docs", "operations.md")
_METRIC = re.compile(r"\b((?:kafka|process)_[a-z_]*[a-z])\b")
_BRACED = re.compile(r"\b(?:kafka|process)_[a-z_]*\{[a-z_,{}]+\}[a-z_]*")
#: Names in the docs that are not metrics.
NOT_METRICS = {"kafka_exporter"}  # the project whose lag metric names kafkatw uses


def _expand(token):
    """``a_{b,c}_d`` -> [``a_b_d``, ``a_c_d``], every brace group in turn."""
    start = token.find("{")
    if start < 0:
        return [token]
    end = token.index("}", start)
    return [name for part in token[start + 1:end].split(",")
            for name in _expand(token[:start] + part + token[end + 1:])]


def expand_braces(text):
    """``kafka_log_log_{size,logendoffset}`` -> ``kafka_log_log_size kafka_log_log_logendoffset``."""
    return _BRACED.sub(lambda m: " ".join(_expand(m.group(0))), text)


def unit_settings():
    """{key: [values]} of the unit file's [Service] section."""
    out, section = {}, None
    with open(UNIT) as f:
        for line in f:
            line = line.strip()
            if line.startswith("["):
                section = line
            elif section == "[Service]" and "=" in line and not line.startswith("#"):
                key, _, value = line.partition("=")
                out.setdefault(key, []).append(value)
    return out


def dashboard_metrics():
    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return {m for e in exprs for m in _METRIC.findall(e)}


class UnitFileTests(unittest.SynchronousTestCase):
    def test_twistd_accepts_its_command_line(self):
        from twisted.scripts.twistd import ServerOptions

        (exec_start,) = unit_settings()["ExecStart"]
        argv = shlex.split(exec_start)
        self.assertTrue(argv[0].endswith("/bin/twistd"))
        options = ServerOptions()
        options.parseOptions(argv[1:])
        self.assertEqual((options["nodaemon"], options["pidfile"], options.subCommand),
                         (True, "", "kafka"))
        self.assertEqual(options.subOptions["config"], "/etc/kafkatw/server.properties")

    def test_no_restart_on_a_config_error(self):
        from kafkatw.tap import CONFIG_ERROR_EXIT

        self.assertEqual(unit_settings()["RestartPreventExitStatus"], [str(CONFIG_ERROR_EXIT)])
        self.assertEqual(unit_settings()["KillSignal"], ["SIGTERM"])


class ServedNamesTests(KafkaBrokerMixin, unittest.TestCase):
    broker_overrides = {"kafkatw.metrics.listener": "127.0.0.1:0"}

    def scrape_after_traffic(self):
        from confluent_kafka import Consumer, Producer

        topic = "ops-" + uuid.uuid4().hex[:8]
        producer = Producer({"bootstrap.servers": self.broker.bootstrap_servers})
        for i in range(5):
            producer.produce(topic, b"%d" % i)
        self.assertEqual(producer.flush(10), 0)
        consumer = Consumer({"bootstrap.servers": self.broker.bootstrap_servers, "group.id": topic,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.addCleanup(consumer.close)
        consumer.subscribe([topic])
        got = 0
        while got < 5:
            m = consumer.poll(10)
            self.assertIsNotNone(m)
            got += m.error() is None
        consumer.commit(asynchronous=False)
        status, text = get(self.broker.metrics_port, "metrics")
        self.assertEqual(status, 200)
        served = set()
        for name, _ in samples(text):
            served.add(name)
            for suffix in ("_total", "_bucket", "_count", "_sum"):
                if name.endswith(suffix):
                    served.add(name[:-len(suffix)])
        # families without a sample yet (no client has a quota here) are announced all the same
        for family in text_string_to_metric_families(text):
            served.update({family.name, family.name + "_total"} if family.type == "counter" else {family.name})
        return served

    def test_dashboard_and_docs_use_served_names(self):
        served = self.scrape_after_traffic()
        used = dashboard_metrics()
        self.assertGreater(len(used), 20)
        self.assertEqual(sorted(used - served), [])
        with open(OPERATIONS) as f:
            documented = set(_METRIC.findall(expand_braces(f.read()))) - NOT_METRICS
        self.assertGreaterEqual(len(documented), 30)
        self.assertEqual(sorted(documented - served), [])
