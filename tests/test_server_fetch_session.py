"""Tests for kafkatw.server.fetch_session: KIP-227 contexts, epochs, errors, cache eviction, shards."""

import random

import attr
from twisted.internet import task
from twisted.trial import unittest

from kafkatw.protocol import errors
from kafkatw.server.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INT32_MAX,
    FetchManager,
    FetchMetadata,
    FetchSessionCache,
    FetchSessionCacheShard,
    FullFetchContext,
    IncrementalFetchContext,
    SessionErrorContext,
    SessionlessFetchContext,
    TopicIdPartition,
    ZERO_UUID,
    next_epoch,
)


@attr.s
class Req:
    fetch_offset = attr.ib()
    max_bytes = attr.ib(default=1048576)


@attr.s
class Resp:
    high_watermark = attr.ib(default=10)
    log_start_offset = attr.ib(default=0)
    last_stable_offset = attr.ib(default=10)
    records = attr.ib(default=None)
    error = attr.ib(default=errors.NONE)
    diverging_epoch = attr.ib(default=None)
    preferred_read_replica = attr.ib(default=-1)
    # what the read counts: the records' bytes
    records_size = attr.ib(default=attr.Factory(lambda r: len(r.records or b""), takes_self=True))


TID = b"\x01" * 16


def tp(p, topic="t", topic_id=ZERO_UUID):
    return TopicIdPartition(topic_id, topic, p)


class EpochTests(unittest.SynchronousTestCase):
    def test_next_epoch(self):
        self.assertEqual(next_epoch(INITIAL_EPOCH), 1)
        self.assertEqual(next_epoch(5), 6)
        self.assertEqual(next_epoch(FINAL_EPOCH), FINAL_EPOCH)
        self.assertEqual(next_epoch(INT32_MAX), 1)

    def test_is_full(self):
        self.assertTrue(FetchMetadata(0, 0).is_full)
        self.assertTrue(FetchMetadata(7, -1).is_full)
        self.assertFalse(FetchMetadata(7, 3).is_full)


class FetchManagerTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.clock = task.Clock()
        self.clock.advance(1000)
        self.cache = FetchSessionCache(max_entries=16, eviction_ms=120000, rng=random.Random(1))
        self.fm = FetchManager(self.clock, self.cache)

    def full(self, parts, follower=False, ids=False):
        ctx = self.fm.new_context(FetchMetadata(0, 0), parts, [], follower, ids)
        self.assertIsInstance(ctx, FullFetchContext)
        return ctx

    def test_full_creates_session_and_lists_all_in_request_order(self):
        parts = [(tp(2), Req(5)), (tp(0), Req(1)), (tp(1), Req(0))]
        ctx = self.full(parts)
        self.assertEqual([k for k, _ in ctx.partitions_to_fetch()], [tp(2), tp(0), tp(1)])
        resp = ctx.update_and_generate_response_data([(k, Resp()) for k, _ in parts])
        self.assertEqual(resp.error, errors.NONE)
        self.assertNotEqual(resp.session_id, 0)
        self.assertEqual(len(resp.partitions), 3)
        session = self.cache.get(resp.session_id)
        self.assertEqual(session.epoch, 1)
        self.assertEqual(self.cache.size, 1)
        self.assertEqual(self.cache.total_partitions, 3)

    def test_incremental_round_trip(self):
        parts = [(tp(0), Req(0)), (tp(1), Req(0))]
        ctx = self.full(parts)
        sid = ctx.update_and_generate_response_data([(k, Resp()) for k, _ in parts]).session_id
        # epoch 1: update offset of tp1 only; add tp2
        ctx = self.fm.new_context(FetchMetadata(sid, 1), [(tp(1), Req(10)), (tp(2), Req(3))], [], False)
        self.assertIsInstance(ctx, IncrementalFetchContext)
        fetch = ctx.partitions_to_fetch()
        self.assertEqual([k for k, _ in fetch], [tp(0), tp(1), tp(2)])
        self.assertEqual([d.fetch_offset for _, d in fetch], [0, 10, 3])
        # tp0 unchanged -> omitted; tp1 has records; tp2 is new (HW unknown before) -> included
        resp = ctx.update_and_generate_response_data([
            (tp(0), Resp()), (tp(1), Resp(records=b"x" * 70)), (tp(2), Resp())])
        self.assertEqual(resp.session_id, sid)
        self.assertEqual([k for k, _ in resp.partitions], [tp(1), tp(2)])
        # responded partitions move to the end of the session
        self.assertEqual(list(self.cache.get(sid).partitions), [tp(0), tp(1), tp(2)])
        # epoch 2: nothing changed at all -> empty response
        ctx = self.fm.new_context(FetchMetadata(sid, 2), [], [], False)
        resp = ctx.update_and_generate_response_data([(k, Resp()) for k, _ in ctx.partitions_to_fetch()])
        self.assertEqual(resp.partitions, [])
        # epoch 3: HW, log start, LSO, error, diverging epoch each force inclusion
        ctx = self.fm.new_context(FetchMetadata(sid, 3), [], [], False)
        resp = ctx.update_and_generate_response_data([
            (tp(0), Resp(high_watermark=11)), (tp(1), Resp(log_start_offset=2)),
            (tp(2), Resp(last_stable_offset=9))])
        self.assertEqual([k for k, _ in resp.partitions], [tp(0), tp(1), tp(2)])
        ctx = self.fm.new_context(FetchMetadata(sid, 4), [], [], False)
        resp = ctx.update_and_generate_response_data([
            (tp(0), Resp(high_watermark=11, error=errors.NOT_LEADER_OR_FOLLOWER)),
            (tp(1), Resp(log_start_offset=2)),
            (tp(2), Resp(last_stable_offset=9, diverging_epoch=(1, 5)))])
        self.assertEqual([k for k, _ in resp.partitions], [tp(0), tp(2)])

    def test_forget_and_empty_session_closes(self):
        ctx = self.full([(tp(0), Req(0))])
        sid = ctx.update_and_generate_response_data([(tp(0), Resp())]).session_id
        ctx = self.fm.new_context(FetchMetadata(sid, 1), [], [tp(0)], False)
        self.assertIsInstance(ctx, SessionlessFetchContext)
        self.assertIsNone(self.cache.get(sid))

    def test_final_epoch_closes_and_is_sessionless(self):
        ctx = self.full([(tp(0), Req(0))])
        sid = ctx.update_and_generate_response_data([(tp(0), Resp())]).session_id
        ctx = self.fm.new_context(FetchMetadata(sid, FINAL_EPOCH), [], [], False)
        self.assertIsInstance(ctx, SessionlessFetchContext)
        self.assertIsNone(self.cache.get(sid))
        self.assertEqual(ctx.update_and_generate_response_data([]).session_id, 0)

    def test_full_with_session_id_replaces_it(self):
        ctx = self.full([(tp(0), Req(0))])
        sid = ctx.update_and_generate_response_data([(tp(0), Resp())]).session_id
        ctx = self.fm.new_context(FetchMetadata(sid, 0), [(tp(0), Req(0))], [], False)
        self.assertIsNone(self.cache.get(sid))
        sid2 = ctx.update_and_generate_response_data([(tp(0), Resp())]).session_id
        self.assertNotIn(sid2, (0, sid))
        self.assertEqual(self.cache.size, 1)

    def test_unknown_session(self):
        ctx = self.fm.new_context(FetchMetadata(12345, 1), [], [], False)
        self.assertIsInstance(ctx, SessionErrorContext)
        resp = ctx.update_and_generate_response_data([])
        self.assertEqual((resp.error, resp.session_id, resp.partitions),
                         (errors.FETCH_SESSION_ID_NOT_FOUND, 0, []))
        self.assertEqual(errors.FETCH_SESSION_ID_NOT_FOUND, 70)

    def test_wrong_epoch(self):
        ctx = self.full([(tp(0), Req(0))])
        sid = ctx.update_and_generate_response_data([(tp(0), Resp())]).session_id
        ctx = self.fm.new_context(FetchMetadata(sid, 2), [], [], False)
        self.assertEqual(ctx.error, errors.INVALID_FETCH_SESSION_EPOCH)
        self.assertEqual(ctx.error, 71)
        # the right epoch still works afterwards
        ctx = self.fm.new_context(FetchMetadata(sid, 1), [], [], False)
        self.assertIsInstance(ctx, IncrementalFetchContext)
        # replaying the same epoch is now an error
        ctx2 = self.fm.new_context(FetchMetadata(sid, 1), [], [], False)
        self.assertEqual(ctx2.error, errors.INVALID_FETCH_SESSION_EPOCH)

    def test_epoch_moved_between_context_and_response(self):
        ctx = self.full([(tp(0), Req(0))])
        sid = ctx.update_and_generate_response_data([(tp(0), Resp())]).session_id
        first = self.fm.new_context(FetchMetadata(sid, 1), [], [], False)
        self.fm.new_context(FetchMetadata(sid, 2), [], [], False)
        resp = first.update_and_generate_response_data([(tp(0), Resp(high_watermark=99))])
        self.assertEqual(resp.error, errors.INVALID_FETCH_SESSION_EPOCH)

    def test_topic_ids_sessions(self):
        k = tp(0, topic="t", topic_id=TID)
        ctx = self.full([(k, Req(0))], ids=True)
        sid = ctx.update_and_generate_response_data([(k, Resp())]).session_id
        self.assertTrue(self.cache.get(sid).uses_topic_ids)
        ctx = self.fm.new_context(FetchMetadata(sid, 1), [], [], False, uses_topic_ids=False)
        self.assertEqual(ctx.error, errors.FETCH_SESSION_TOPIC_ID_ERROR)
        ctx = self.fm.new_context(FetchMetadata(sid, 1), [], [k], False, uses_topic_ids=True)
        self.assertIsInstance(ctx, SessionlessFetchContext)

    def test_partitions_of_a_topic_id_learnt_later_are_resolved(self):
        # a follower fetched a new topic before its leader knew the id: cached without a name
        known = {}
        unnamed = [(tp(0, topic=None, topic_id=TID), Req(0)), (tp(1, topic=None, topic_id=TID), Req(0)),
                   (tp(0, topic="u", topic_id=b"\x02" * 16), Req(0))]
        ctx = self.full(unnamed, follower=True, ids=True)
        sid = ctx.update_and_generate_response_data(
            [(k, Resp(error=errors.UNKNOWN_TOPIC_ID)) for k, _ in unnamed]).session_id
        self.assertEqual(self.cache.get(sid).unresolved, 2)
        # still unknown: nothing changes
        ctx = self.fm.new_context(FetchMetadata(sid, 1), [], [], True, True, known.get)
        self.assertEqual([k.topic for k, _ in ctx.partitions_to_fetch()], [None, None, "u"])
        known[TID] = "t"
        # the id is known now: the follower forgets partition 0 under its name, and it goes;
        # partition 1, not mentioned, is read under its name from now on
        ctx = self.fm.new_context(FetchMetadata(sid, 2), [], [tp(0, topic="t", topic_id=TID)],
                                  True, True, known.get)
        self.assertEqual([k for k, _ in ctx.partitions_to_fetch()],
                         [tp(1, topic="t", topic_id=TID), tp(0, topic="u", topic_id=b"\x02" * 16)])
        self.assertEqual(self.cache.get(sid).unresolved, 0)
        # re-added under its name: one entry, not a stale nameless one beside it
        ctx = self.fm.new_context(FetchMetadata(sid, 3), [(tp(0, topic="t", topic_id=TID), Req(4))],
                                  [], True, True, known.get)
        self.assertEqual([(k.topic, k.partition, d.fetch_offset) for k, d in ctx.partitions_to_fetch()],
                         [("t", 1, 0), ("u", 0, 0), ("t", 0, 4)])

    def test_a_nameless_partition_added_again_under_its_name_keeps_one_entry(self):
        known = {}
        k0 = tp(0, topic=None, topic_id=TID)
        ctx = self.full([(k0, Req(0))], follower=True, ids=True)
        sid = ctx.update_and_generate_response_data([(k0, Resp(error=errors.UNKNOWN_TOPIC_ID))]).session_id
        ctx = self.fm.new_context(FetchMetadata(sid, 1), [(tp(1, topic=None, topic_id=TID), Req(0))],
                                  [], True, True, known.get)
        known[TID] = "t"
        named = tp(0, topic="t", topic_id=TID)
        ctx = self.fm.new_context(FetchMetadata(sid, 2), [(named, Req(7))], [], True, True, known.get)
        self.assertEqual([(k, d.fetch_offset) for k, d in ctx.partitions_to_fetch()],
                         [(named, 7), (tp(1, topic="t", topic_id=TID), 0)])

    def test_session_ids_map_to_their_shard(self):
        ids = set()
        for i in range(16):
            ctx = self.full([(tp(i), Req(0))])
            ids.add(ctx.update_and_generate_response_data([(tp(i), Resp())]).session_id)
        ids.discard(0)  # a full random shard may refuse a young-cache newcomer
        self.assertGreater(len(ids), 4)
        for sid in ids:
            shard = self.cache.shard_for(sid)
            self.assertIs(shard.get(sid), self.cache.get(sid))
            self.assertTrue(shard.session_id_range * shard.shard_num < sid
                            <= shard.session_id_range * (shard.shard_num + 1))
        self.assertEqual(len(self.cache.shards), 8)
        self.assertEqual([s.max_entries for s in self.cache.shards], [2] * 8)

    def test_throttled_response(self):
        ctx = self.full([(tp(0), Req(0))])
        self.assertEqual(ctx.get_throttled_response().partitions, [])


class ShardEvictionTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.shard = FetchSessionCacheShard(2, 1000, INT32_MAX // 8, 0, random.Random(3))

    def create(self, now, privileged, size):
        from collections import OrderedDict

        parts = OrderedDict((tp(i), None) for i in range(size))
        return self.shard.maybe_create_session(now, privileged, size, False, lambda: parts)

    def test_full_cache_rejects_small_new_session(self):
        a = self.create(0, False, 5)
        b = self.create(0, False, 5)
        self.assertTrue(a and b)
        # young sessions cannot be evicted by an unprivileged newcomer
        self.assertEqual(self.create(10, False, 100), 0)
        self.assertEqual(self.shard.size, 2)

    def test_privileged_evicts_young_unprivileged_smallest(self):
        a = self.create(0, False, 5)
        b = self.create(0, False, 3)
        c = self.create(10, True, 1)
        self.assertNotEqual(c, 0)
        self.assertIsNone(self.shard.get(b))
        self.assertIsNotNone(self.shard.get(a))
        self.assertEqual(self.shard.evictions, 1)

    def test_privileged_cannot_evict_young_privileged(self):
        self.create(0, True, 5)
        self.create(0, True, 5)
        self.assertEqual(self.create(10, True, 50), 0)

    def test_stale_session_evicted_first(self):
        a = self.create(0, True, 50)
        b = self.create(500, False, 5)
        self.shard.touch(self.shard.get(b), 1500)
        # a unused for 1001 ms > eviction_ms: stale, evicted even by a small unprivileged one
        c = self.create(1001, False, 1)
        self.assertNotEqual(c, 0)
        self.assertIsNone(self.shard.get(a))
        self.assertIsNotNone(self.shard.get(b))

    def test_larger_evicts_smaller_old_session(self):
        a = self.create(0, False, 10)
        b = self.create(0, False, 3)
        # keep both fresh but old enough (created > eviction_ms ago)
        self.shard.touch(self.shard.get(a), 1500)
        self.shard.touch(self.shard.get(b), 1500)
        self.assertEqual(self.create(1600, False, 2), 0)  # smaller than every candidate
        c = self.create(1600, False, 4)
        self.assertNotEqual(c, 0)
        self.assertIsNone(self.shard.get(b))
        self.assertIsNotNone(self.shard.get(a))

    def test_unprivileged_cannot_evict_old_privileged(self):
        a = self.create(0, True, 1)
        b = self.create(0, True, 1)
        self.shard.touch(self.shard.get(a), 1500)
        self.shard.touch(self.shard.get(b), 1500)
        self.assertEqual(self.create(1600, False, 100), 0)
        # a privileged one of equal size may not (ties favour the incumbent), a larger one may
        self.assertEqual(self.create(1600, True, 1), 0)
        self.assertNotEqual(self.create(1600, True, 2), 0)

    def test_partition_count_tracks_touch_and_remove(self):
        a = self.create(0, False, 4)
        self.assertEqual(self.shard.num_partitions, 4)
        self.shard.get(a).partitions.popitem()
        self.shard.touch(self.shard.get(a), 5)
        self.assertEqual(self.shard.num_partitions, 3)
        self.shard.remove(a)
        self.assertEqual(self.shard.num_partitions, 0)
