"""The console's parts in process, without a broker or a browser: how keys and values are shown,
the records a browse decodes (control batches left out), the histories on ``task.Clock``, CSRF
tokens, the password checks against PLAIN and SCRAM users, whether the console may run open,
and the read cache shared for a second.
"""

import types

from twisted.internet import defer, task
from twisted.trial import unittest

from kafkatw.config import ConfigError
from kafkatw.cluster.state import PartitionState
from kafkatw.console import auth, browse, views, web
from kafkatw.console.history import History
from kafkatw.protocol.records import Record, build_batch, build_control_batch
from kafkatw.security.credentials import ScramCredentialStore
from kafkatw.security.jaas import parse_jaas_config
from kafkatw.security.plain import PlainSaslServerFactory
from kafkatw.security.principal import ANONYMOUS, DefaultPrincipalBuilder, KafkaPrincipal
from kafkatw.security.sasl_config import SaslListener
from kafkatw.security.scram import ScramSaslServerFactory, make_credential, SCRAM_SHA_512


class RenderTests(unittest.SynchronousTestCase):
    def test_formats(self):
        self.assertEqual(browse.render_bytes(None), {"format": "null", "text": None, "size": 0})
        self.assertEqual(browse.render_bytes(b'{"a": [1, 2]}'),
                         {"format": "json", "text": '{\n  "a": [\n    1,\n    2\n  ]\n}', "size": 13})
        self.assertEqual(browse.render_bytes("naïve".encode()), {"format": "text", "text": "naïve", "size": 6})
        self.assertEqual(browse.render_bytes(b"\x00\xff"), {"format": "hex", "text": "00 ff", "size": 2})
        # valid UTF-8 with control characters is shown as bytes, not as text
        self.assertEqual(browse.render_bytes(b"a\x01b")["format"], "hex")
        self.assertEqual(browse.render_bytes(b"{not json")["format"], "text")
        self.assertEqual(browse.render_bytes(b"line 1\nline 2")["format"], "text")

    def test_decode_records_from_an_offset_without_markers(self):
        data = (build_batch([Record(key=b"k%d" % i, value=b"v%d" % i, timestamp=1000 + i,
                                    headers=[("h", b"x")]) for i in range(3)], base_offset=10)
                + build_control_batch(1, 0, 7, 0, base_offset=13)
                + build_batch([Record(value=b"w", timestamp=2000)], base_offset=14))
        got = browse.decode_records(data, 11, 10)
        self.assertEqual([(r["offset"], r["value"]["text"]) for r in got], [(11, "v1"), (12, "v2"), (14, "w")])
        self.assertEqual(got[0]["headers"], [{"key": "h", "value": {"format": "text", "text": "x", "size": 1}}])
        self.assertEqual(got[0]["timestamp"], 1001)
        self.assertEqual([r["offset"] for r in browse.decode_records(data, 0, 2)], [10, 11])
        # a fetch may end inside a batch: the partial one is left out
        self.assertEqual([r["offset"] for r in browse.decode_records(data[:-5], 0, 10)], [10, 11, 12])

    def test_parse_request(self):
        self.assertEqual(browse.parse_request({}), (0, None, None, 50, 256 * 1024))
        self.assertEqual(browse.parse_request({"partition": "2", "timestamp": "5", "limit": "3", "maxBytes": "2048"}),
                         (2, None, 5, 3, 2048))
        with self.assertRaises(browse.BrowseError) as e:
            browse.parse_request({"limit": "501"})
        self.assertEqual(str(e.exception), "limit must be within 1..500")


class HistoryTests(unittest.SynchronousTestCase):
    def test_rates_and_lag(self):
        clock = task.Clock()
        counts = {"a": 0, "b": 10}
        h = History(clock, lambda: counts, interval=5.0, points=3)
        h.start()  # samples at once: the baseline
        self.assertEqual(h.topic_rates("a"), [])
        counts.update(a=50, b=10)
        clock.advance(5)
        self.assertEqual(h.topic_rates("a"), [[5.0, 10.0]])
        self.assertEqual(h.topic_rates("b"), [[5.0, 0.0]])
        for n in range(3):
            counts["a"] += 5
            clock.advance(5)
        self.assertEqual(h.topic_rates("a"), [[10.0, 1.0], [15.0, 1.0], [20.0, 1.0]])  # bounded
        del counts["b"]  # deleted topic
        clock.advance(5)
        self.assertEqual(h.topic_rates("b"), [])
        h.record_lag("g", 100)
        clock.advance(0.5)
        h.record_lag("g", 90)  # within a second: replaces the last point
        clock.advance(1)
        h.record_lag("g", 0)
        self.assertEqual(h.lag_history("g"), [[25.0, 90], [26.5, 0]])
        clock.advance(15)  # a window (3 points of 5 s) after its last point, the group is forgotten
        self.assertEqual(h.lag_history("g"), [[25.0, 90], [26.5, 0]])
        clock.advance(5)
        self.assertEqual(h.lag_history("g"), [])
        h.stop()


class CsrfTests(unittest.SynchronousTestCase):
    def test_tokens(self):
        tokens = auth.CsrfTokens(key=b"k" * 32)
        alice, bob = KafkaPrincipal("User", "alice"), KafkaPrincipal("User", "bob")
        self.assertTrue(tokens.valid(alice, tokens.token(alice).encode()))
        self.assertFalse(tokens.valid(alice, tokens.token(bob)))
        self.assertFalse(tokens.valid(alice, None))
        self.assertFalse(auth.CsrfTokens().valid(alice, tokens.token(alice)))  # another process's key


def _inline(calls):
    def run(fn, *args):
        calls.append(fn)
        return defer.maybeDeferred(fn, *args)
    return run


class SaslUsersTests(unittest.TestCase):
    def listener(self, tmp):
        jaas = parse_jaas_config('org.apache.kafka.common.security.plain.PlainLoginModule required '
                                 'user_carol="carol-pw";')
        store = ScramCredentialStore.in_dir(tmp)
        store.upsert("alice", "SCRAM-SHA-512", make_credential(SCRAM_SHA_512, "alice-pw"))
        scram_jaas = parse_jaas_config("org.apache.kafka.common.security.scram.ScramLoginModule required;")
        mechanisms = {"SCRAM-SHA-512": ScramSaslServerFactory("SCRAM-SHA-512", "SASL", scram_jaas, credentials=store),
                      "PLAIN": PlainSaslServerFactory("PLAIN", "SASL", jaas)}
        return SaslListener("SASL", "SASL_PLAINTEXT", mechanisms, {}, 1024, DefaultPrincipalBuilder()), store

    @defer.inlineCallbacks
    def test_plain_and_scram_users(self):
        tmp = self.mktemp()
        import os

        os.makedirs(tmp)
        listener, store = self.listener(tmp)
        calls = []
        clock = [100.0]
        users = auth.SaslUsers(listener, store, _inline(calls), clock=lambda: clock[0])
        self.assertEqual(users.mechanisms, ["SCRAM-SHA-512", "PLAIN"])
        self.assertEqual((yield users.authenticate("alice", "alice-pw", "h")), KafkaPrincipal("User", "alice"))
        self.assertEqual(len(calls), 1)  # PBKDF2 off the reactor
        self.assertEqual((yield users.authenticate("alice", "alice-pw", "h")), KafkaPrincipal("User", "alice"))
        self.assertEqual(len(calls), 1)  # remembered
        clock[0] += auth.REMEMBER_SECONDS + 1
        yield users.authenticate("alice", "alice-pw", "h")
        self.assertEqual(len(calls), 2)  # checked again after a minute
        self.assertIsNone((yield users.authenticate("alice", "wrong", "h")))
        self.assertEqual((yield users.authenticate("carol", "carol-pw", "h")), KafkaPrincipal("User", "carol"))
        self.assertIsNone((yield users.authenticate("carol", "alice-pw", "h")))
        self.assertIsNone((yield users.authenticate("nobody", "x", "h")))
        self.assertIsNone((yield users.authenticate("alice", "", "h")))
        # a deleted SCRAM user is refused once the remembered answer runs out
        store.delete("alice", "SCRAM-SHA-512")
        clock[0] += auth.REMEMBER_SECONDS + 1
        self.assertIsNone((yield users.authenticate("alice", "alice-pw", "h")))


def fake_broker(sasl_listeners=(), authorizer=None):
    endpoint = types.SimpleNamespace(listener_name="PLAINTEXT", security_protocol="PLAINTEXT")
    return types.SimpleNamespace(
        sasl_listeners=dict(sasl_listeners), authorizer=authorizer, scram_credentials=None, reactor=None,
        threadpool=None, config=types.SimpleNamespace(listeners=[endpoint]))


class _Config(dict):
    listeners = ()


class AccessTests(unittest.SynchronousTestCase):
    def test_open_only_without_sasl_and_authorizer(self):
        broker = fake_broker()
        access = auth.access_for(broker)
        self.assertFalse(access.required)
        self.assertEqual(self.successResultOf(access.authenticate(None, None, "h")), ANONYMOUS)
        self.assertEqual((access.listener_name, access.security_protocol), ("PLAINTEXT", "PLAINTEXT"))

    def test_an_authorizer_without_users_fails_closed(self):
        config = _Config({auth.LISTENER_KEY: "127.0.0.1:9090"})
        config.listeners = [types.SimpleNamespace(listener_name="PLAINTEXT", security_protocol="PLAINTEXT")]
        broker = types.SimpleNamespace(sasl_listeners={}, authorizer=object(), scram_credentials=None,
                                       config=config)
        with self.assertRaises(ConfigError) as e:
            auth.access_for(broker)
        self.assertIn("no SASL listener has PLAIN or SCRAM users", str(e.exception))

    def test_listener_values(self):
        self.assertEqual(web.parse_listener("127.0.0.1:9090"), ("127.0.0.1", 9090))
        self.assertEqual(web.parse_listener("[::1]:0"), ("::1", 0))
        for bad in ("9090", "host:port", "h:70000", ""):
            with self.assertRaises(ConfigError) as e:
                web.parse_listener(bad)
            self.assertEqual(str(e.exception).split(": expected")[0],
                             "Invalid value %s for configuration kafkatw.console.listener" % bad)


class ReadCacheTests(unittest.SynchronousTestCase):
    def test_identical_reads_share_one_computation_for_a_second(self):
        now = [0.0]
        console = web.Console(broker=None, access=None, history=None, clock=lambda: now[0])
        made = []

        def make():
            made.append(defer.Deferred())
            return made[-1]
        alice, bob = KafkaPrincipal("User", "alice"), KafkaPrincipal("User", "bob")
        first = console.cached(alice, "/api/topics", make)
        second = console.cached(alice, "/api/topics", make)
        other = console.cached(bob, "/api/topics", make)  # another principal reads for itself
        self.assertEqual(len(made), 2)
        made[0].callback({"topics": []})
        self.assertEqual(self.successResultOf(first), {"topics": []})
        self.assertEqual(self.successResultOf(second), {"topics": []})
        self.assertNoResult(other)
        now[0] += 0.5
        self.assertEqual(self.successResultOf(console.cached(alice, "/api/topics", make)), {"topics": []})
        self.assertEqual(len(made), 2)
        now[0] += 0.6
        later = console.cached(alice, "/api/topics", make)
        self.assertEqual(len(made), 3)
        made[2].errback(ValueError("boom"))
        self.failureResultOf(later, ValueError)
        console.cached(alice, "/api/topics", make)  # a failure is not reused
        self.assertEqual(len(made), 4)


class TopicListTests(unittest.SynchronousTestCase):
    def test_a_cluster_topics_replicas_isr_and_leaders(self):
        """On a cluster the list counts from each partition's state: its replicas, an ISR
        short of them, no leader; a partition led elsewhere is not offline for lack of a log here."""
        states = {0: PartitionState(leader=1, leader_epoch=0, isr=(1, 2, 3), replicas=(1, 2, 3)),
                  1: PartitionState(leader=2, leader_epoch=0, isr=(2,), replicas=(2, 3, 1)),
                  2: PartitionState(leader=-1, leader_epoch=0, isr=(3,), replicas=(3, 1, 2)),
                  3: PartitionState(leader=3, leader_epoch=0, isr=(3, 1, 2), replicas=(3, 1, 2))}
        log = types.SimpleNamespace(is_offline=False, size=100, high_watermark=7, log_start_offset=2)
        metadata = types.SimpleNamespace(
            node_id=1, topics={"t": types.SimpleNamespace(name="t", is_internal=False, num_partitions=4)},
            partition_state=lambda topic, p: states[p])
        broker = types.SimpleNamespace(metadata=metadata, log_manager=types.SimpleNamespace(
            log_view=lambda topic, p: log if p in (0, 1) else None))
        client = types.SimpleNamespace(authorize=lambda op, kind, names, key: defer.succeed(list(names)))
        (row,) = self.successResultOf(views.topic_list(client, broker))["topics"]
        self.assertEqual((row["partitions"], row["replicationFactor"], row["underReplicated"], row["offline"]),
                         (4, 3, 2, 1))
        self.assertEqual((row["sizeBytes"], row["records"]), (200, 10))
