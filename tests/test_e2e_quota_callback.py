"""A client quota callback from a separate package, used by ``twistd kafka`` with config only.

The package (written to a temporary folder, put on the broker's ``sys.path`` and nowhere else)
registers a drop-in under ``twisted/plugins/`` naming its callback ``tenant-prefix``: every
client id ``<tenant>-...`` shares its tenant's producer quota, read from the broker's properties
by ``configure()``. Two producers of one tenant are throttled together; another tenant is not.
"""

import os
import shutil
import sys
import tempfile
import textwrap
import threading
import time

from twisted.trial import unittest

from kafkatw.cli.client import KafkaClient
from kafkatw.testing import KafkaBroker
from tests.test_e2e_quotas import end_offset, produce_flat_out
from tests.support import unique_name

from confluent_kafka import Producer  # noqa: E402

FILES = {
    "tenant_quota/__init__.py": '''
        """Per-tenant producer quotas: client ids ``<tenant>-...`` share ``tenant.producer.byte.rate``."""
        from zope.interface import implementer

        from kafkatw.security.quota import ClientQuotaType, IClientQuotaCallback


        @implementer(IClientQuotaCallback)
        class TenantPrefixCallback:
            def __init__(self):
                self.rate = None

            def configure(self, configs):
                self.rate = float(configs["tenant.producer.byte.rate"])

            def quota_metric_tags(self, quota_type, principal, client_id):
                return {"user": "", "client-id": client_id.split("-")[0]}

            def quota_limit(self, quota_type, metric_tags):
                if quota_type is ClientQuotaType.PRODUCE and metric_tags["client-id"] == "acme":
                    return self.rate
                return None

            def update_quota(self, quota_type, entity, new_value):
                pass

            def remove_quota(self, quota_type, entity):
                pass

            def quota_reset_required(self, quota_type):
                return False

            def close(self):
                pass
    ''',
    "twisted/plugins/tenant_quota_plugin.py": '''
        from kafkatw.registry import PluginDescriptor
        from kafkatw.security.quota import IClientQuotaCallback

        tenant_prefix = PluginDescriptor(IClientQuotaCallback, "tenant-prefix",
                                         "tenant_quota.TenantPrefixCallback",
                                         "client ids <tenant>-... share their tenant's quota")
    ''',
}


class PackageBroker(KafkaBroker):
    """``twistd kafka`` with the package's folder first on ``sys.path`` (nothing installed)."""

    def __init__(self, path, **kwargs):
        KafkaBroker.__init__(self, fork_server=False, **kwargs)
        self.path = path

    def command(self):
        boot = ("import sys; sys.path.insert(0, %r); from twisted.scripts.twistd import run; "
                "sys.argv[0] = 'twistd'; run()" % self.path)
        return [sys.executable, "-c", boot] + self.twistd_args()


class TenantCallbackTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="kafkatw-quota-plugin-")
        self.addCleanup(shutil.rmtree, self.root, True)
        for path, text in FILES.items():
            target = os.path.join(self.root, path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w") as f:
                f.write(textwrap.dedent(text).lstrip())

    def test_tenant_shares_one_quota(self):
        quota = 100 * 1000
        broker = PackageBroker(self.root, overrides={
            "client.quota.callback.class": "tenant-prefix", "tenant.producer.byte.rate": quota,
            "quota.window.num": 2, "quota.window.size.seconds": 1}).start()
        self.addCleanup(broker.close)
        throttles = {}
        producers = {}
        topics = {}
        for cid in ("acme-1", "acme-2", "other-1"):
            throttles[cid] = []
            producers[cid] = Producer({"bootstrap.servers": broker.bootstrap_servers, "client.id": cid,
                                       "linger.ms": 5, "batch.size": 20000,
                                       "throttle_cb": lambda e, cid=cid: throttles[cid].append(e.throttle_time)})
            topics[cid] = unique_name(cid)
            producers[cid].produce(topics[cid], b"warm-up")
            self.assertEqual(producers[cid].flush(30), 0)
        value = b"t" * 1000
        with KafkaClient(broker.bootstrap_servers) as c:
            before = {cid: end_offset(c, t) for cid, t in topics.items()}
            started = time.monotonic()
            threads = [threading.Thread(target=produce_flat_out, args=(p, topics[cid], 4.0, value))
                       for cid, p in producers.items()]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - started
            logged = {cid: (end_offset(c, t) - before[cid]) * len(value) for cid, t in topics.items()}
        for p in producers.values():
            p.purge()
            p.poll(0.5)
        acme = logged["acme-1"] + logged["acme-2"]
        # both acme producers together: the quota over the elapsed time, the first window's burst
        # and a batch each at most
        self.assertLessEqual(acme, quota * (elapsed + 1) * 1.15 + 40000, logged)
        self.assertGreater(logged["acme-1"], 0)
        self.assertGreater(logged["acme-2"], 0)
        self.assertGreater(logged["other-1"], 5 * acme, logged)
        self.assertTrue(throttles["acme-1"] and throttles["acme-2"], throttles)
        self.assertEqual(throttles["other-1"], [])

    def test_unknown_name_stops_the_broker_with_one_line(self):
        broker = PackageBroker(self.root, overrides={"client.quota.callback.class": "tenant-prefx"})
        self.addCleanup(broker.close)
        with self.assertRaises(Exception) as e:
            broker.start()
        self.assertIn("Invalid value tenant-prefx for configuration client.quota.callback.class: no "
                      "IClientQuotaCallback plug-in is registered under that name (registered: default, "
                      "tenant-prefix)", str(e.exception))
