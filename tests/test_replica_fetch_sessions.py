"""Follower fetch sessions (KIP-227) on the wire: three in-process brokers over loopback
sockets with the leader's fetch session cache, the followers' Fetch requests recorded as
they are sent. After one full request a follower lists only the partitions whose fetch
position moved; a lost session is replaced by a full request; the data is replicated exactly.
"""

import os

from twisted.internet import defer, reactor
from twisted.trial import unittest

from kafkatw.protocol import errors
from kafkatw.server.fetch_session import FetchManager, FetchSessionCache
from kafkatw.server.replica_fetcher import ReplicaFetcherManager
from tests.test_replication import TOPIC, TOPIC_ID, FakeController
from tests import test_replication_network as network


class Sent:
    """One follower Fetch as sent, and the partitions its answer named."""

    def __init__(self, request):
        self.session_id = request.session_id
        self.epoch = request.session_epoch
        self.listed = [(p.partition, p.fetch_offset) for t in request.topics
                       for p in t.partitions]
        self.forgotten = [p for t in request.forgotten_topics_data for p in t.partitions]
        self.answered = None  # [partition] once answered
        self.partition_errors = None  # [(partition, error code)] once answered
        self.error = None

    def __repr__(self):
        return "Sent(%d/%d, listed=%s, forgotten=%s, answered=%s, error=%s)" % (
            self.session_id, self.epoch, self.listed, self.forgotten, self.answered, self.error)


class FollowerFetchSessionTests(unittest.TestCase):
    timeout = 60

    # the set-up of test_replication_network, borrowed (not inherited: its tests run there)
    elect = network.SocketReplicationTests.elect
    poll = network.SocketReplicationTests.poll
    batch = network.SocketReplicationTests.batch
    segment_bytes = network.SocketReplicationTests.segment_bytes

    def setUp(self):
        self.state = {}
        self.controller = FakeController(self.state)
        props = {"replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "50",
                 "min.insync.replicas": "2", "replica.lag.time.max.ms": "10000"}
        self.nodes = {}
        self.sent = {}  # follower id -> [Sent] to leader 1
        for node_id in (1, 2, 3):
            directory = self.mktemp()
            os.makedirs(directory)
            b = network.SocketBroker(node_id, directory, self.controller, props)
            self.successResultOf(b.metadata.create_topic(TOPIC, 2, topic_id=TOPIC_ID))
            b.apis.fetch_manager = FetchManager(reactor, FetchSessionCache())
            fm = b.rm.fetcher_manager = ReplicaFetcherManager.from_config(b.config, b.rm, reactor)
            self.assertEqual(fm.settings.num_fetchers, 1)  # both partitions in one session
            self._record(node_id, fm.client)
            b.start()
            self.addCleanup(b.stop)
            self.nodes[node_id] = b

    def _record(self, node_id, client):
        send = client.send
        log = self.sent.setdefault(node_id, [])

        def recording(key, host, port, request, version, timeout_ms=None):
            if request.API_KEY != 1 or key[0] != 1:
                return send(key, host, port, request, version, timeout_ms)
            entry = Sent(request)
            log.append(entry)

            def answered(response):
                entry.error = response.error_code
                entry.answered = [p.partition_index for t in response.responses
                                  for p in t.partitions]
                entry.partition_errors = [(p.partition_index, p.error_code)
                                          for t in response.responses for p in t.partitions]
                return response
            return send(key, host, port, request, version, timeout_ms).addCallback(answered)
        client.send = recording

    @defer.inlineCallbacks
    def produce(self, partition, values):
        r = yield self.nodes[1].rm.append_records(
            30000, -1, {(TOPIC, partition): self.batch(values)})
        self.assertEqual(r[(TOPIC, partition)].error_code, errors.NONE)
        defer.returnValue(r[(TOPIC, partition)])

    @defer.inlineCallbacks
    def test_incremental_follower_fetches_and_exact_replication(self):
        self.elect(0, 1, [1, 2, 3], 0)
        self.elect(1, 1, [1, 2, 3], 0)
        # the first request of each follower is full and opens a session; the next ones use it
        yield self.poll(lambda: all(any(s.epoch > 0 and s.answered is not None
                                        for s in self.sent[n]) for n in (2, 3)))
        sessions = {}
        for n in (2, 3):
            first = self.sent[n][0]
            self.assertEqual((first.session_id, first.epoch), (0, 0))
            self.assertEqual(sorted(first.listed), [(0, 0), (1, 0)])
            session_id = self.sent[n][1].session_id
            self.assertGreater(session_id, 0)
            sessions[n] = session_id
        offsets = []
        for i in range(10):
            r = yield self.produce(0, [b"p0-%d-%d" % (i, j) for j in range(i + 1)])
            offsets.append(r.base_offset)
        self.assertEqual(offsets, [i * (i + 1) // 2 for i in range(10)])
        yield self.poll(lambda: all(self.nodes[n].log(0).high_watermark == 55 for n in (1, 2, 3)))
        r = yield self.produce(1, [b"p1"])
        self.assertEqual(r.base_offset, 0)
        yield self.poll(lambda: all(self.nodes[n].log(1).high_watermark == 1 for n in (1, 2, 3)))
        for n in (2, 3):
            sent = [s for s in self.sent[n] if s.answered is not None]
            inc = [s for s in sent[1:]]
            # one session, epochs 1, 2, 3, ... with no gap and no new full request
            self.assertEqual({s.session_id for s in inc}, {sessions[n]}, inc[:3])
            self.assertEqual([s.epoch for s in inc], list(range(1, len(inc) + 1)))
            self.assertEqual({s.error for s in inc}, {errors.NONE})
            self.assertEqual([s.forgotten for s in inc if s.forgotten], [])
            # only a partition whose fetch position moved is listed, at its new position
            listed = [p for s in inc for p in s.listed]
            self.assertEqual(sorted(p for p in listed if p[0] == 0),
                             sorted(set(p for p in listed if p[0] == 0)))
            self.assertTrue(all(offset > 0 for _, offset in listed), listed)
            self.assertEqual([p for p in listed if p[0] == 1], [(1, 1)])
            self.assertIn((0, 55), listed)
            # answers name only partitions with news: the idle waits answer none
            yield self.poll(lambda: any(s.answered == [] for s in self.sent[n][1:]))
        for p in (0, 1):
            expected = self.segment_bytes(1, p)
            self.assertEqual(self.segment_bytes(2, p), expected)
            self.assertEqual(self.segment_bytes(3, p), expected)

    @defer.inlineCallbacks
    def test_a_lost_session_is_replaced_by_a_full_fetch(self):
        self.elect(0, 1, [1, 2, 3], 0)
        self.elect(1, 1, [1, 2, 3], 0)
        yield self.poll(lambda: len(self.sent[2]) >= 3 and self.sent[2][-1].epoch >= 2)
        old = self.sent[2][-1].session_id
        cache = self.nodes[1].apis.fetch_manager.cache
        cache.remove(old)  # evicted (or the leader restarted): the next incremental fetch fails
        yield self.produce(0, [b"a", b"b"])
        yield self.poll(lambda: all(self.nodes[n].log(0).high_watermark == 2 for n in (1, 2, 3)))
        yield self.poll(lambda: any(s.session_id not in (0, old) and s.answered is not None
                                    for s in self.sent[2]))
        after = [s for s in self.sent[2] if s.answered is not None]
        lost = [i for i, s in enumerate(after) if s.error == errors.FETCH_SESSION_ID_NOT_FOUND]
        self.assertEqual(len(lost), 1, after)
        full = after[lost[0] + 1]
        self.assertEqual((full.session_id, full.epoch, full.error), (0, 0, errors.NONE))
        self.assertEqual(sorted(p for p, _ in full.listed), [0, 1])
        self.assertNotEqual(after[lost[0] + 2].session_id, old)
        self.assertEqual(after[lost[0] + 2].epoch, 1)
        yield self.produce(1, [b"c"])
        yield self.poll(lambda: all(self.nodes[n].log(1).high_watermark == 1 for n in (1, 2, 3)))
        for p in (0, 1):
            self.assertEqual(self.segment_bytes(2, p), self.segment_bytes(1, p))
            self.assertEqual(self.segment_bytes(3, p), self.segment_bytes(1, p))


    @defer.inlineCallbacks
    def test_a_topic_id_the_leader_learns_late_does_not_wedge_the_session(self):
        # as after CreateTopics: the leader takes LeaderAndIsr before the metadata naming the
        # topic id, so the followers' first fetches name an id it cannot resolve yet
        leader_meta = self.nodes[1].metadata
        leader_meta.topic_name = lambda topic_id: None
        self.elect(0, 1, [1, 2, 3], 0)
        self.elect(1, 1, [1, 2, 3], 0)
        yield self.poll(lambda: all(any(s.error == errors.NONE and s.answered
                                        for s in self.sent[n]) for n in (2, 3)))
        self.assertIn((0, errors.UNKNOWN_TOPIC_ID), self.sent[2][0].partition_errors)
        del leader_meta.topic_name  # the metadata arrives: the id has its name again
        after = {n: len(self.sent[n]) for n in (2, 3)}  # requests sent from now on
        r = yield self.produce(0, [b"late-%d" % i for i in range(5)])
        self.assertEqual(r.base_offset, 0)
        r = yield self.produce(1, [b"late"])
        self.assertEqual(r.base_offset, 0)
        yield self.poll(lambda: all(self.nodes[n].log(0).high_watermark == 5
                                    and self.nodes[n].log(1).high_watermark == 1
                                    for n in (1, 2, 3)))
        for p in (0, 1):
            self.assertEqual(self.segment_bytes(2, p), self.segment_bytes(1, p))
            self.assertEqual(self.segment_bytes(3, p), self.segment_bytes(1, p))
        for n in (2, 3):
            # the leader names the partitions it cached under the bare id: no more errors
            late = [e for s in self.sent[n][after[n]:] if s.partition_errors
                    for e in s.partition_errors if e[1] != errors.NONE]
            self.assertEqual(late, [])
        cache = self.nodes[1].apis.fetch_manager.cache
        sessions = [cache.get(i) for i in {s.session_id for n in (2, 3) for s in self.sent[n]}]
        sessions = [x for x in sessions if x is not None]
        self.assertEqual(len(sessions), 2)  # one live session per follower
        for session in sessions:
            self.assertEqual(session.unresolved, 0)
            self.assertEqual(sorted((k.topic, k.partition) for k in session.partitions),
                             [(TOPIC, 0), (TOPIC, 1)])
