"""Client quotas in process: the default callback's entity precedence (Kafka's DefaultQuotaCallback),
loading ``client.quota.callback.class`` through the registry (fail closed), the sampled Rate and
throttle time as Kafka computes them, and the quota managers on KafkaApis (throttle time set on
the response body and on the Response the connection mutes for).
"""

from twisted.trial import unittest
from zope.interface import implementer

from kafkatw.config import ConfigError, KafkaConfig
from kafkatw.network.request import Request, RequestContext, Response
from kafkatw.protocol import messages
from kafkatw.security.principal import KafkaPrincipal
from kafkatw.security.quota import (
    ClientQuotaEntity,
    ClientQuotaType,
    DefaultQuotaCallback,
    IClientQuotaCallback,
    load_quota_callback,
)
from kafkatw.rate import Rate, throttle_time_ms
from kafkatw.server.quota import ClientQuotaManager, QuotaManagers, apply_throttle

P = ClientQuotaType.PRODUCE
E = ClientQuotaEntity.of
ALICE = KafkaPrincipal("User", "alice")


class DefaultCallbackPrecedenceTest(unittest.SynchronousTestCase):
    """Each level wins over every less specific one, in Kafka's order."""

    LEVELS = [
        (E(user="alice", client_id="app"), {"user": "alice", "client-id": "app"}),
        (E(user="alice", client_id=None), {"user": "alice", "client-id": "app"}),
        (E(user="alice"), {"user": "alice", "client-id": ""}),
        (E(user=None, client_id="app"), {"user": "alice", "client-id": "app"}),
        (E(user=None, client_id=None), {"user": "alice", "client-id": "app"}),
        (E(user=None), {"user": "alice", "client-id": ""}),
        (E(client_id="app"), {"user": "", "client-id": "app"}),
        (E(client_id=None), {"user": "", "client-id": "app"}),
    ]

    def test_most_specific_entity_wins(self):
        for i, (entity, tags) in enumerate(self.LEVELS):
            cb = DefaultQuotaCallback()
            # this level and every less specific one, each with its own value
            for j, (other, _) in enumerate(self.LEVELS[i:]):
                cb.update_quota(P, other, 1000 + i + j)
            self.assertEqual(cb.quota_metric_tags(P, ALICE, "app"), tags, str(entity))
            self.assertEqual(cb.quota_limit(P, tags), 1000 + i, str(entity))

    def test_no_quota(self):
        cb = DefaultQuotaCallback()
        cb.update_quota(ClientQuotaType.FETCH, E(user="alice"), 5)
        tags = cb.quota_metric_tags(P, ALICE, "app")
        self.assertEqual(tags, {"user": "", "client-id": "app"})
        self.assertIsNone(cb.quota_limit(P, tags))

    def test_default_client_id_quota_is_per_client(self):
        """A default client-id quota gives each client id its own sensor (tags name the client)."""
        cb = DefaultQuotaCallback()
        cb.update_quota(P, E(client_id=None), 100)
        a = cb.quota_metric_tags(P, ALICE, "a")
        b = cb.quota_metric_tags(P, ALICE, "b")
        self.assertNotEqual(a, b)
        self.assertEqual((cb.quota_limit(P, a), cb.quota_limit(P, b)), (100, 100))
        cb.remove_quota(P, E(client_id=None))
        self.assertIsNone(cb.quota_limit(P, cb.quota_metric_tags(P, ALICE, "a")))


@implementer(IClientQuotaCallback)
class TenantCallback:
    """A computed quota: every client id ``<tenant>-...`` shares its tenant's 100 B/s."""

    def __init__(self):
        self.configured = None

    def configure(self, configs):
        self.configured = configs

    def quota_metric_tags(self, quota_type, principal, client_id):
        return {"user": "", "client-id": client_id.split("-")[0]}

    def quota_limit(self, quota_type, metric_tags):
        return 100.0 if quota_type is P else None

    def update_quota(self, quota_type, entity, new_value):
        pass

    def remove_quota(self, quota_type, entity):
        pass

    def quota_reset_required(self, quota_type):
        return False

    def close(self):
        pass


class NotACallback:
    def quota_limit(self, quota_type, metric_tags):
        return None


class LoadCallbackTest(unittest.SynchronousTestCase):
    def config(self, value=None):
        props = {"log.dirs": "/nonexistent"}
        if value is not None:
            props["client.quota.callback.class"] = value
        return KafkaConfig(props)

    def test_default(self):
        cb = load_quota_callback(self.config())
        self.assertIsInstance(cb, DefaultQuotaCallback)
        self.assertIsInstance(load_quota_callback(self.config("org.apache.kafka.server.quota.DefaultQuotaCallback")),
                              DefaultQuotaCallback)

    def test_dotted_name_is_configured(self):
        cb = load_quota_callback(self.config(__name__ + ".TenantCallback"))
        self.assertIsInstance(cb, TenantCallback)
        self.assertEqual(cb.configured["client.quota.callback.class"], __name__ + ".TenantCallback")

    def test_fail_closed(self):
        with self.assertRaises(ConfigError) as e:
            load_quota_callback(self.config("nosuch"))
        self.assertIn("client.quota.callback.class", str(e.exception))
        self.assertIn("registered: default", str(e.exception))
        with self.assertRaises(ConfigError) as e:
            load_quota_callback(self.config(__name__ + ".NotACallback"))
        self.assertIn("does not provide IClientQuotaCallback", str(e.exception))
        self.assertNotIn("\n", str(e.exception))


class RateTest(unittest.SynchronousTestCase):
    def test_window_is_at_least_samples_minus_one(self):
        r = Rate(samples=11, window_ms=1000)
        r.record(1000, 0)
        self.assertEqual(r.window_size_ms(0), 10000)
        self.assertEqual(r.measure(0), 100.0)
        r.record(1000, 12000)  # 12 s later the first sample has expired
        self.assertEqual(r.measure(12000), 100.0)

    def test_rate_over_elapsed_windows(self):
        r = Rate(samples=3, window_ms=1000)
        for t in range(0, 2500, 100):  # 25 records of 10 over 2.5 s
            r.record(10, t)
        self.assertEqual(r.window_size_ms(2500), 2500)
        self.assertAlmostEqual(r.measure(2500), 250 / 2.5)

    def test_throttle_time_formula(self):
        # O * W / (W + X) = T  ->  X = (O - T) / T * W
        self.assertEqual(throttle_time_ms(observed=150, bound=100, window_ms=10000), 5000)
        self.assertEqual(throttle_time_ms(observed=100.0004, bound=100, window_ms=10000), 0)


class ClientQuotaManagerTest(unittest.SynchronousTestCase):
    def test_throttle_brings_rate_back_to_quota(self):
        cb = DefaultQuotaCallback()
        cb.update_quota(P, E(client_id="c"), 1000)
        m = ClientQuotaManager(P, cb, samples=11, window_seconds=1)
        self.assertEqual(m.record_and_get_throttle_time_ms(ALICE, "c", 10000, 0), 0)  # exactly the quota
        # 5000 more: observed 1500/s over the 10 s minimum window -> (1500 - 1000) / 1000 * 10 s
        self.assertEqual(m.record_and_get_throttle_time_ms(ALICE, "c", 5000, 0), 5000)
        self.assertEqual(m.record_and_get_throttle_time_ms(ALICE, "other", 10 ** 9, 0), 0)  # no quota
        metrics = m.metrics[("", "c")]
        self.assertEqual((metrics.recorded_total, metrics.throttle_time_ms_total, metrics.throttle_count),
                         (15000, 5000, 1))

    def test_idle_sensors_expire_after_an_hour(self):
        cb = DefaultQuotaCallback()
        cb.update_quota(P, E(client_id=None), 1000)
        m = ClientQuotaManager(P, cb, samples=11, window_seconds=1)
        m.record_and_get_throttle_time_ms(ALICE, "gone", 10, 0)
        m.record_and_get_throttle_time_ms(ALICE, "stays", 10, 3000 * 1000)
        self.assertEqual(sorted(m.metrics), [("", "gone"), ("", "stays")])
        m.record_and_get_throttle_time_ms(ALICE, "stays", 10, 3601 * 1000)
        self.assertEqual(sorted(m.metrics), [("", "stays")])

    def test_sensors_expire_after_their_quota_went(self):
        """A client whose quota was removed records nothing more: its sensor still expires
        (a default client-id quota gave every client id that came and went one for good)."""
        cb = DefaultQuotaCallback()
        cb.update_quota(P, E(client_id=None), 1000)
        m = ClientQuotaManager(P, cb, samples=11, window_seconds=1)
        m.record_and_get_throttle_time_ms(ALICE, "gone", 10, 0)
        cb.remove_quota(P, E(client_id=None))
        cb.update_quota(P, E(client_id="kept"), 1000)
        self.assertEqual(m.record_and_get_throttle_time_ms(ALICE, "gone", 10, 3601 * 1000), 0)
        self.assertEqual(sorted(m.metrics), [])

    def test_removing_the_last_quota_forgets_every_sensor(self):
        cb = DefaultQuotaCallback()
        q = QuotaManagers(cb, samples=11, window_seconds=1)
        q.set_quota(E(client_id=None), ClientQuotaType.PRODUCE.value, 1000)
        q.set_quota(E(client_id=None), ClientQuotaType.CONTROLLER_MUTATION.value, 10)
        for i in range(5):
            q.produce.record_and_get_throttle_time_ms(ALICE, "c%d" % i, 10, 0)
            q.mutations.quota(ALICE, "c%d" % i, 0, True).record(1)
        self.assertEqual((len(q.produce.metrics), len(q.mutations.metrics)), (5, 5))
        q.remove_quota(E(client_id=None), ClientQuotaType.PRODUCE.value)
        self.assertEqual((len(q.produce.metrics), len(q.mutations.metrics)), (5, 5))
        q.remove_quota(E(client_id=None), ClientQuotaType.CONTROLLER_MUTATION.value)
        self.assertFalse(q.enabled)
        self.assertEqual((q.produce.metrics, q.mutations.metrics), ({}, {}))

    def test_idle_mutation_buckets_expire_after_an_hour(self):
        cb = DefaultQuotaCallback()
        cb.update_quota(ClientQuotaType.CONTROLLER_MUTATION, E(client_id=None), 10)
        q = QuotaManagers(cb, samples=11, window_seconds=1)
        q.mutations.quota(ALICE, "gone", 0, True).record(1)
        q.mutations.quota(ALICE, "stays", 3000 * 1000, True).record(1)
        q.mutations.quota(ALICE, "stays", 3601 * 1000, True).record(1)
        self.assertEqual(sorted(q.mutations.metrics), [("", "stays")])
        self.assertEqual(sorted(q.mutations._buckets), [("", "stays")])

    def test_request_quota_capped_at_one_window(self):
        cb = DefaultQuotaCallback()
        cb.update_quota(ClientQuotaType.REQUEST, E(client_id="c"), 1)
        q = QuotaManagers(cb, samples=11, window_seconds=1)
        self.assertEqual(q.request.record_and_get_throttle_time_ms(ALICE, "c", 1000, 0), 1000)

    def test_custom_callback_shares_a_tenant_sensor(self):
        m = ClientQuotaManager(P, TenantCallback(), samples=2, window_seconds=1)
        self.assertEqual(m.record_and_get_throttle_time_ms(ALICE, "acme-1", 100, 0), 0)
        self.assertEqual(m.record_and_get_throttle_time_ms(ALICE, "acme-2", 100, 0), 1000)
        self.assertEqual(m.record_and_get_throttle_time_ms(ALICE, "other-1", 100, 0), 0)


def request(api_key, version, body, client_id="c", size=100):
    ctx = RequestContext(connection_id="x", listener_name="PLAINTEXT", security_protocol="PLAINTEXT",
                         principal=ALICE)
    return Request(header=None, api_key=api_key, api_version=version, correlation_id=1, client_id=client_id,
                   body=body, size=size, context=ctx)


class ApplyThrottleTest(unittest.SynchronousTestCase):
    def test_produce_throttle_on_body_and_response(self):
        cb = DefaultQuotaCallback()
        q = QuotaManagers(cb, samples=2, window_seconds=1)
        self.assertFalse(q.enabled)
        q.set_quota(E(client_id="c"), "producer_byte_rate", 1000)
        self.assertTrue(q.enabled)
        body = messages.ProduceResponse(responses=[], throttle_time_ms=0)
        req = request(0, 9, messages.ProduceRequest(acks=1, timeout_ms=1000, topic_data=[]), size=3000)
        response = apply_throttle(q, req, Response(body), 0, 0)
        self.assertEqual((response.throttle_time_ms, body.throttle_time_ms), (2000, 2000))
        self.assertEqual(q.snapshot()["producer_byte_rate"], [
            {"user": "", "client-id": "c", "recorded_total": 3000, "throttle_time_ms_total": 2000,
             "throttle_count": 1, "rate": 3000.0}])
        q.remove_quota(E(client_id="c"), "producer_byte_rate")
        self.assertFalse(q.enabled)

    def test_throttled_fetch_returns_no_records_and_is_not_counted(self):
        cb = DefaultQuotaCallback()
        q = QuotaManagers(cb, samples=2, window_seconds=1)
        q.set_quota(E(client_id="c"), "consumer_byte_rate", 1000)
        R = messages.FetchResponse
        body = R(throttle_time_ms=0, responses=[R.FetchableTopicResponse(topic="t", partitions=[
            R.PartitionData(partition_index=0, high_watermark=7, records=b"r" * 1500)])])
        req = request(1, 12, messages.FetchRequest(replica_id=-1))
        response = apply_throttle(q, req, Response(body), 0, 0)
        self.assertEqual(response.throttle_time_ms, 500)
        part = body.responses[0].partitions[0]
        self.assertEqual((part.records, part.high_watermark), (b"", 7))
        self.assertEqual(q.fetch.metrics[("", "c")].recorded_total, 0)


class ConnectionCreationRateTest(unittest.SynchronousTestCase):
    """KIP-612 throttle times: the listener's rate, the broker's (not for a protected
    inter-broker listener) and an IP's."""

    def quotas(self, **kw):
        from kafkatw.network.listener import ConnectionQuotas
        from kafkatw.network.settings import SocketServerSettings

        q = ConnectionQuotas(SocketServerSettings(quota_window_num=2, quota_window_size_seconds=1,
                                                  inter_broker_listener_name="INTERNAL", **kw))
        q.listener_count = 2
        return q

    def test_broker_rate(self):
        q = self.quotas(max_connection_creation_rate=5)
        self.assertEqual([q.record_connection_creation("PLAINTEXT", 0) for _ in range(7)],
                         [0, 0, 0, 0, 0, 200, 400])
        self.assertEqual(q.record_connection_creation("PLAINTEXT", 0), 600)
        self.assertEqual([q.record_connection_creation("PLAINTEXT", 0) for _ in range(10)][-1], 1000)  # bounded
        self.assertEqual([q.record_connection_creation("INTERNAL", 0) for _ in range(10)], [0] * 10)
        q.listener_count = 1  # Kafka protects the inter-broker listener only when there is another
        self.assertEqual(q.record_connection_creation("INTERNAL", 0), 1000)

    def test_ip_rate(self):
        rates = {"127.0.0.3": 2.0, None: 1.0}
        q = self.quotas()
        q.ip_connection_rate = lambda ip: rates.get(ip, rates[None])
        self.assertEqual([q.record_ip_connection("127.0.0.3", 0) for _ in range(4)], [0, 0, 500, 500])
        self.assertEqual([q.record_ip_connection("127.0.0.9", 0) for _ in range(2)], [0, 1000])

    def test_listener_rate_applies_to_inter_broker_too(self):
        q = self.quotas(listener_max_connection_creation_rate={"INTERNAL": 2})
        self.assertEqual([q.record_connection_creation("INTERNAL", 0) for _ in range(3)], [0, 0, 500])
        self.assertEqual(q.record_connection_creation("PLAINTEXT", 0), 0)

    def test_listener_settings_from_properties(self):
        from kafkatw.network.settings import SocketServerSettings

        config = KafkaConfig({"log.dirs": "/nonexistent", "listeners": "PLAINTEXT://:9092,INTERNAL://:9093",
                              "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
                              "inter.broker.listener.name": "INTERNAL",
                              "listener.name.plaintext.max.connections": "3",
                              "listener.name.internal.max.connection.creation.rate": "7",
                              "max.connection.creation.rate": "5"})
        s = SocketServerSettings.from_config(config)
        self.assertEqual((s.listener_max_connections, s.listener_max_connection_creation_rate,
                          s.max_connection_creation_rate), ({"PLAINTEXT": 3}, {"INTERNAL": 7}, 5))
        with self.assertRaises(ConfigError) as e:
            SocketServerSettings.from_config(KafkaConfig({
                "log.dirs": "/nonexistent", "listener.name.plaintext.max.connections": "many"}))
        self.assertEqual(str(e.exception), "Invalid value many for configuration "
                                           "listener.name.plaintext.max.connections: an integer is required")


class TokenBucketTest(unittest.SynchronousTestCase):
    def test_burst_refill_and_throttle(self):
        from kafkatw.rate import TokenBucket

        b = TokenBucket(samples=11, window_ms=1000)
        self.assertEqual(b.measure(2, 0), 22)  # starts full: quota * samples * window
        b.record(25, 2, 0)
        self.assertEqual(b.measure(2, 0), -3)
        self.assertEqual(TokenBucket.throttle_time_ms(-3, 2), 1500)
        self.assertEqual(b.measure(2, 1500), 0)  # 2 tokens a second
        self.assertEqual(b.measure(2, 100000), 22)  # never above the burst


class CapFetchSizeTest(unittest.SynchronousTestCase):
    def test_capped_at_the_quota_window_set(self):
        from kafkatw.server.quota import cap_fetch_size

        q = QuotaManagers(DefaultQuotaCallback(), samples=11, window_seconds=1)
        q.set_quota(E(client_id="c"), "consumer_byte_rate", 1000)
        req = request(1, 12, messages.FetchRequest(replica_id=-1, max_bytes=50 * 1024 * 1024))
        cap_fetch_size(q, req)
        self.assertEqual(req.body.max_bytes, 10000)  # quota * (samples - 1) windows
        other = request(1, 12, messages.FetchRequest(replica_id=-1, max_bytes=5000), client_id="d")
        cap_fetch_size(q, other)
        self.assertEqual(other.body.max_bytes, 5000)


class FetchThrottledByRequestQuotaTest(unittest.SynchronousTestCase):
    def test_request_quota_alone_empties_the_fetch(self):
        cb = DefaultQuotaCallback()
        q = QuotaManagers(cb, samples=2, window_seconds=1)
        q.set_quota(E(client_id="c"), "request_percentage", 1)
        R = messages.FetchResponse
        body = R(throttle_time_ms=0, responses=[R.FetchableTopicResponse(topic="t", partitions=[
            R.PartitionData(partition_index=0, high_watermark=7, records=b"r" * 10)])])
        req = request(1, 12, messages.FetchRequest(replica_id=-1))
        response = apply_throttle(q, req, Response(body), 50 * 1000 * 1000, 0)  # 50 ms: 5% of a second
        self.assertEqual(response.throttle_time_ms, 1000)  # capped at one window
        self.assertEqual(body.responses[0].partitions[0].records, b"")
