"""Tests for kafkatw.server.features: the feature table and Kafka's list rules, and what a real
broker reports in ApiVersions v3/v4 to raw codec clients, kafka-python's describe_features, old
librdkafka (none) and kcat."""

import shutil
import socket
import struct
import subprocess

from twisted.trial import unittest

from kafkatw.protocol import messages as m
from kafkatw.server import features
from kafkatw.testing import KafkaBrokerMixin

API_VERSIONS = 18
EXPECTED_SUPPORTED = [("metadata.version", 7, 25), ("group.version", 0, 1)]
EXPECTED_FINALIZED = [("metadata.version", 25, 25), ("group.version", 1, 1)]
# v0-v3 clients choke on a MinVersion of 0: Kafka leaves those supported features out
EXPECTED_SUPPORTED_V3 = [f for f in EXPECTED_SUPPORTED if f[1] != 0]


class FeatureTableTests(unittest.SynchronousTestCase):
    def test_lists(self):
        self.assertEqual(features.supported_features(), EXPECTED_SUPPORTED)
        self.assertEqual(features.finalized_features(), EXPECTED_FINALIZED)
        self.assertEqual(features.FINALIZED_FEATURES_EPOCH, 0)

    def test_kafka_4_0_columns(self):
        """What Kafka 4.0.0 supports and finalizes on a fresh static-quorum format."""
        kafka = {f.name: (f.min_level, f.kafka_max_level, f.kafka_finalized_level) for f in features.FEATURES}
        self.assertEqual(kafka, {
            "metadata.version": (7, 25, 25),
            "kraft.version": (0, 1, 0),
            "group.version": (0, 1, 1),
            "transaction.version": (0, 2, 2),
            "eligible.leader.replicas.version": (0, 1, 0),
        })

    def test_never_more_than_kafka(self):
        for f in features.FEATURES:
            self.assertTrue(f.min_level <= f.finalized_level <= f.max_level <= f.kafka_max_level, f)

    def test_rules_drop_max_zero_and_level_zero(self):
        table = (
            features.BrokerFeature("a.version", 0, 2, 1, 2, 1),
            features.BrokerFeature("b.version", 0, 0, 0, 1, 0),
            features.BrokerFeature("c.version", 1, 3, 0, 3, 0),
        )
        self.assertEqual(features.supported_features(table), [("a.version", 0, 2), ("c.version", 1, 3)])
        self.assertEqual(features.finalized_features(table), [("a.version", 1, 1)])


class _Raw:
    """One connection sending ApiVersions through the project's codec."""

    def __init__(self, broker):
        self.sock = socket.create_connection((broker.host, broker.port), timeout=15)
        self.corr = 0

    def api_versions(self, version, name="kafkatw-test", sw_version="1.0"):
        self.corr += 1
        body = m.ApiVersionsRequest(client_software_name=name, client_software_version=sw_version) \
            if version >= 3 else m.ApiVersionsRequest()
        header = m.RequestHeader(request_api_key=API_VERSIONS, request_api_version=version,
                                 correlation_id=self.corr, client_id="features")
        payload = (b"".join(header.encode(m.request_header_version(API_VERSIONS, version)))
                   + body.encode_bytes(version))
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", self._recv(4))
        data = memoryview(self._recv(size))
        head, pos = m.ResponseHeader.decode_from(data, 0, m.response_header_version(API_VERSIONS, version))
        assert head.correlation_id == self.corr, (head.correlation_id, self.corr)
        resp, end = m.ApiVersionsResponse.decode_from(data, pos, version)
        assert end == size, (end, size)
        return resp, bytes(data[pos:])

    def _recv(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed after %d of %d bytes" % (len(buf), n))
            buf += chunk
        return bytes(buf)

    def close(self):
        self.sock.close()


def _lists(resp):
    return ([(f.name, f.min_version, f.max_version) for f in resp.supported_features],
            [(f.name, f.min_version_level, f.max_version_level) for f in resp.finalized_features],
            resp.finalized_features_epoch, resp.zk_migration_ready)


class BrokerFeaturesTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    def raw(self):
        client = _Raw(self.broker)
        self.addCleanup(client.close)
        return client

    def test_v3_and_v4(self):
        client = self.raw()
        for version in (3, 4):
            resp, _ = client.api_versions(version)
            self.assertEqual(resp.error_code, 0)
            self.assertEqual(resp.unknown_tagged_fields, {})
            supported = EXPECTED_SUPPORTED if version >= 4 else EXPECTED_SUPPORTED_V3
            self.assertEqual(_lists(resp), (supported, EXPECTED_FINALIZED, 0, False), version)

    def test_epoch_stable_across_requests_and_connections(self):
        seen = []
        for _ in range(2):
            client = self.raw()
            for version in (3, 4, 3):
                seen.append(client.api_versions(version)[0].finalized_features_epoch)
        self.assertEqual(seen, [0] * 6)

    def test_old_librdkafka_gets_none(self):
        client = self.raw()
        for version in (3, 4):
            resp, raw = client.api_versions(version, "librdkafka", "2.0.2")
            self.assertEqual(resp.error_code, 0)
            self.assertEqual(_lists(resp), ([], [], -1, False))
            self.assertEqual(raw[-1:], b"\x00")  # an empty tag section ends the body
            self.assertTrue(resp.api_keys)
        resp, _ = client.api_versions(3, "librdkafka", "2.1.2")
        self.assertEqual(_lists(resp)[:2], (EXPECTED_SUPPORTED_V3, EXPECTED_FINALIZED))

    def test_v0_to_v2_carry_no_features(self):
        client = self.raw()
        for version in (0, 1, 2):
            resp, _ = client.api_versions(version)
            self.assertEqual((resp.error_code, _lists(resp)), (0, ([], [], -1, False)), version)

    def test_kafka_python_describe_features(self):
        from kafka.admin import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=self.broker.bootstrap_servers, request_timeout_ms=15000)
        self.addCleanup(admin.close)
        self.assertEqual(admin.describe_features(), {
            "metadata.version": {"supported": (7, 25), "finalized": (25, 25), "finalized_epoch": 0},
            "group.version": {"supported": (0, 1), "finalized": (1, 1), "finalized_epoch": 0},
        })

    def test_confluent_kafka_parses_the_tags(self):
        """librdkafka >= 2.1.2 gets the tagged fields and still reads the rest of the response."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap_servers})
        md = admin.list_topics(timeout=15)
        self.assertEqual(list(md.brokers), [1])

    def test_kcat_metadata(self):
        if shutil.which("kcat") is None:
            raise unittest.SkipTest("kcat is not installed (apt-get install kcat)")
        proc = subprocess.run(["kcat", "-b", self.broker.bootstrap_servers, "-L", "-d", "protocol"],
                              capture_output=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr.decode(errors="replace"))
        self.assertIn("1 brokers:", proc.stdout.decode())
        err = proc.stderr.decode(errors="replace")
        self.assertIn("ApiVersionRequest (v3", err)
        self.assertNotIn("failed", err.lower())
