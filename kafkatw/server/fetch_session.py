"""Incremental fetch sessions (KIP-227): Kafka's FetchManager, FetchSession, FetchSessionCache
and the Full/Incremental/Sessionless/SessionError fetch contexts. Owns which partitions a Fetch
reads and which partitions its response carries; it never reads logs or encodes messages.

Partitions are :class:`TopicIdPartition` keys. With topic ids (Fetch v13+) the request's topic
id identifies a partition (the handler resolves the name; unknown ids keep ``topic=None``);
before v13 ``topic_id`` is the zero uuid and the name identifies it.
"""

import collections
import random

import attr
from twisted.logger import Logger

from kafkatw.protocol import errors

log = Logger()

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
ZERO_UUID = bytes(16)
INT32_MAX = 0x7FFFFFFF

DEFAULT_CACHE_SLOTS = 1000  # max.incremental.fetch.session.cache.slots
DEFAULT_EVICTION_MS = 120000  # min.incremental.fetch.session.eviction.ms (not configurable in Kafka)
NUM_CACHE_SHARDS = 8


def next_epoch(prev_epoch):
    """The epoch that follows ``prev_epoch`` (Kafka's FetchMetadata.nextEpoch)."""
    if prev_epoch < 0:
        return FINAL_EPOCH
    if prev_epoch == INT32_MAX:
        return 1
    return prev_epoch + 1


class TopicIdPartition(collections.namedtuple("TopicIdPartition", "topic_id topic partition")):
    """A partition of a Fetch: its topic id (the zero uuid before v13), its name (None for an
    unknown id) and index. A named tuple, hashed and compared in C, that the fetch handler
    builds in C (``tuple.__new__``) for every partition of every Fetch."""

    __slots__ = ()

    @property
    def topic_partition(self):
        return (self.topic, self.partition)


class FetchMetadata(collections.namedtuple("FetchMetadata", "session_id epoch",
                                           defaults=(INVALID_SESSION_ID, FINAL_EPOCH))):
    """A request's (session id, epoch); a named tuple, as TopicIdPartition."""

    __slots__ = ()

    @property
    def is_full(self):
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


LEGACY = FetchMetadata(INVALID_SESSION_ID, FINAL_EPOCH)  # Fetch v0-v6: no sessions


def _unresolved(key):
    return key.topic is None and key.topic_id != ZERO_UUID


class CachedPartition:
    """A partition of a session: the last request fields and the last response values sent."""

    __slots__ = ("key", "fetch_data", "high_watermark", "log_start_offset",
                 "last_stable_offset")

    def __init__(self, key, fetch_data):
        self.key = key
        self.fetch_data = fetch_data  # the request's PartitionData (fetch_offset, max_bytes, ...)
        self.high_watermark = -1
        self.log_start_offset = -1
        self.last_stable_offset = -1

    def maybe_update_response_data(self, resp, update):
        """Whether ``resp`` must be sent in an incremental response; with ``update`` remember
        what is sent. Kafka's maybeUpdateResponseData plus the last stable offset. ``resp``
        has the fields FetchContext.update_and_generate_response_data names (read directly:
        asked for every partition of every incremental fetch)."""
        must = resp.records_size > 0  # (the read counted its records' bytes)
        if self.high_watermark != resp.high_watermark:
            must = True
            if update:
                self.high_watermark = resp.high_watermark
        if self.log_start_offset != resp.log_start_offset:
            must = True
            if update:
                self.log_start_offset = resp.log_start_offset
        lso = resp.last_stable_offset
        if self.last_stable_offset != lso:
            must = True
            if update:
                self.last_stable_offset = lso
        if resp.preferred_read_replica != -1 or resp.error != errors.NONE \
                or resp.diverging_epoch is not None:
            must = True
        return must


class FetchSession:
    """The partitions of one incremental fetch session, in session order."""

    def __init__(self, session_id, privileged, partitions, uses_topic_ids, creation_ms, epoch):
        self.id = session_id
        self.privileged = privileged
        self.partitions = partitions  # OrderedDict key -> CachedPartition
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = creation_ms
        self.last_used_ms = creation_ms
        self.epoch = epoch
        self.cached_size = -1
        # partitions named by a topic id this broker did not know yet (KIP-516): resolved
        # once it does (:meth:`resolve_names`), or a later forget or re-add would miss them
        self.unresolved = sum(1 for k in partitions if _unresolved(k))

    @property
    def size(self):
        return len(self.partitions)

    def is_empty(self):
        return not self.partitions

    def evictable_key(self):
        return (self.privileged, self.cached_size, self.id)

    def update(self, fetch_data, to_forget):
        """Apply an incremental request; returns (added, updated, removed) keys."""
        added, updated, removed = [], [], []
        for key, data in fetch_data:
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition(key, data)
                added.append(key)
                if _unresolved(key):
                    self.unresolved += 1
            else:
                cached.fetch_data = data
                updated.append(key)
        for key in to_forget:
            if self.partitions.pop(key, None) is not None:
                removed.append(key)
                if _unresolved(key):
                    self.unresolved -= 1
        return added, updated, removed

    def resolve_names(self, topic_name):
        """Name the partitions cached under a topic id that ``topic_name(topic_id)`` now
        knows (Kafka's maybeResolveUnknownName), keeping the session order; one the client
        added again meanwhile under its name keeps that entry."""
        if not self.unresolved:
            return
        parts = collections.OrderedDict()
        unresolved = 0
        for key, cached in self.partitions.items():
            if _unresolved(key):
                name = topic_name(key.topic_id)
                if name is not None:
                    key = cached.key = TopicIdPartition(key.topic_id, name, key.partition)
                    if key in self.partitions:
                        continue  # re-added under its name: that entry is the live one
                else:
                    unresolved += 1
            parts.setdefault(key, cached)
        self.partitions = parts
        self.unresolved = unresolved

    def __repr__(self):
        return "FetchSession(id=%d, privileged=%s, partitions=%d, epoch=%d)" % (
            self.id, self.privileged, self.size, self.epoch)


class FetchSessionCacheShard:
    """One shard of the cache: ``max_entries`` sessions with ids in its own id range.

    Eviction follows Kafka: a new session may evict (1) the least recently used session if it
    is stale (unused for more than ``eviction_ms``), else (2) the smallest evictable session if
    the new one is not smaller by (privileged, size). Sessions younger than ``eviction_ms`` are
    evictable only by privileged sessions, and privileged ones only once they are that old.
    """

    def __init__(self, max_entries, eviction_ms, session_id_range, shard_num, rng=None):
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.session_id_range = session_id_range
        self.shard_num = shard_num
        self._rng = rng or random.Random()
        self.sessions = {}
        self._evictable_by_all = set()
        self._evictable_by_privileged = set()
        self.num_partitions = 0
        self.evictions = 0

    def get(self, session_id):
        return self.sessions.get(session_id)

    @property
    def size(self):
        return len(self.sessions)

    def new_session_id(self):
        lo = self.session_id_range * self.shard_num + 1
        hi = self.session_id_range * (self.shard_num + 1)
        while True:
            sid = self._rng.randint(lo, hi)
            if sid != INVALID_SESSION_ID and sid not in self.sessions:
                return sid

    def maybe_create_session(self, now, privileged, size, uses_topic_ids, create_partitions):
        """Create a session if there is room (possibly by evicting); its id or 0."""
        if len(self.sessions) < self.max_entries or self.try_evict(privileged, (privileged, size, 0), now):
            session = FetchSession(self.new_session_id(), privileged, create_partitions(),
                                   uses_topic_ids, now, next_epoch(INITIAL_EPOCH))
            self.sessions[session.id] = session
            self.touch(session, now)
            return session.id
        return INVALID_SESSION_ID

    def try_evict(self, privileged, key, now):
        if not self.sessions:
            return False
        lru = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - lru.last_used_ms > self.eviction_ms:
            self.remove(lru)
            self.evictions += 1
            return True
        pool = self._evictable_by_privileged if privileged else self._evictable_by_all
        if not pool:
            return False
        victim = min(pool, key=lambda s: s.evictable_key())
        if key < victim.evictable_key():
            return False
        self.remove(victim)
        self.evictions += 1
        return True

    def remove(self, session):
        if isinstance(session, int):
            session = self.sessions.get(session)
            if session is None:
                return None
        self._evictable_by_all.discard(session)
        self._evictable_by_privileged.discard(session)
        if self.sessions.pop(session.id, None) is None:
            return None
        self.num_partitions -= max(session.cached_size, 0)
        return session

    def touch(self, session, now):
        session.last_used_ms = now
        if session.cached_size != -1:
            self._evictable_by_all.discard(session)
            self._evictable_by_privileged.discard(session)
            self.num_partitions -= session.cached_size
        session.cached_size = len(session.partitions)  # (session.size)
        old = now - session.creation_ms > self.eviction_ms
        if not session.privileged or old:
            self._evictable_by_privileged.add(session)
        if old:
            self._evictable_by_all.add(session)
        self.num_partitions += session.cached_size


class FetchSessionCache:
    """``max.incremental.fetch.session.cache.slots`` split evenly over shards; a session id
    names its shard (each shard draws ids from its own range)."""

    def __init__(self, max_entries=DEFAULT_CACHE_SLOTS, eviction_ms=DEFAULT_EVICTION_MS,
                 num_shards=NUM_CACHE_SHARDS, rng=None):
        self._rng = rng or random.Random()
        self.session_id_range = INT32_MAX // num_shards
        per_shard = max_entries // num_shards
        self.shards = [FetchSessionCacheShard(per_shard, eviction_ms, self.session_id_range, i, self._rng)
                       for i in range(num_shards)]

    def shard_for(self, session_id):
        idx = (session_id - 1) // self.session_id_range if session_id > 0 else 0
        last = len(self.shards) - 1
        # (a conditional, not min(): the builtin parses keywords, ~1k instructions a call,
        # here on every incremental fetch)
        return self.shards[idx if idx < last else last]

    def random_shard(self):
        return self.shards[self._rng.randrange(len(self.shards))]

    def get(self, session_id):
        return self.shard_for(session_id).get(session_id)

    def remove(self, session_id):
        return self.shard_for(session_id).remove(session_id)

    @property
    def size(self):
        return sum(s.size for s in self.shards)

    @property
    def total_partitions(self):
        return sum(s.num_partitions for s in self.shards)

    @property
    def evictions(self):
        return sum(s.evictions for s in self.shards)


@attr.s(slots=True)
class FetchResponseData:
    """What the handler encodes: top-level error, session id and the partitions to send."""

    error = attr.ib()
    session_id = attr.ib()
    partitions = attr.ib()  # list of (TopicIdPartition, partition response data)


class FetchContext:
    """What one Fetch reads (``partitions_to_fetch()``) and answers (``update_and_generate_response_data``)."""

    error = errors.NONE

    def partitions_to_fetch(self):
        """List of (TopicIdPartition, request PartitionData) to read, in order."""
        raise NotImplementedError

    def update_and_generate_response_data(self, updates):
        """``updates``: list of (TopicIdPartition, data with high_watermark, log_start_offset,
        last_stable_offset, records, records_size, error, diverging_epoch,
        preferred_read_replica)."""
        raise NotImplementedError

    def get_throttled_response(self):
        """The (empty) response when the fetch is throttled."""
        return FetchResponseData(errors.NONE, self.response_session_id(), [])

    def response_session_id(self):
        return INVALID_SESSION_ID


class SessionErrorContext(FetchContext):
    def __init__(self, error, metadata):
        self.error = error
        self.metadata = metadata

    def partitions_to_fetch(self):
        return []

    def update_and_generate_response_data(self, updates):
        return FetchResponseData(self.error, INVALID_SESSION_ID, [])

    def get_throttled_response(self):
        return FetchResponseData(self.error, INVALID_SESSION_ID, [])


class SessionlessFetchContext(FetchContext):
    """Legacy (v0-6) fetches and full fetches at the final epoch: everything, no session."""

    def __init__(self, fetch_data):
        # a list is kept as given: new_context and the fetch handler pass their own, built
        # for this request and not changed after (a copy per consumer Fetch fewer)
        self.fetch_data = fetch_data if type(fetch_data) is list else list(fetch_data)

    def partitions_to_fetch(self):
        return self.fetch_data  # (iterated by the handler, not changed)

    def update_and_generate_response_data(self, updates):
        # (the handler's list, made for this answer)
        return FetchResponseData(errors.NONE, INVALID_SESSION_ID,
                                 updates if type(updates) is list else list(updates))


class FullFetchContext(FetchContext):
    """Epoch 0: fetch every partition of the request; after the read try to cache a new session."""

    def __init__(self, clock, cache, fetch_data, uses_topic_ids, is_from_follower):
        self._clock = clock
        self._cache = cache
        self.fetch_data = list(fetch_data)
        self.uses_topic_ids = uses_topic_ids
        self.is_from_follower = is_from_follower
        self.session_id = INVALID_SESSION_ID

    def partitions_to_fetch(self):
        return list(self.fetch_data)

    def update_and_generate_response_data(self, updates):
        updates = list(updates)
        by_key = dict(updates)

        def create_partitions():
            parts = collections.OrderedDict()
            for key, data in self.fetch_data:
                cached = CachedPartition(key, data)
                resp = by_key.get(key)
                if resp is not None:
                    cached.maybe_update_response_data(resp, True)
                parts[key] = cached
            return parts

        now = int(self._clock.seconds() * 1000)
        shard = self._cache.random_shard()
        self.session_id = shard.maybe_create_session(
            now, self.is_from_follower, len(updates), self.uses_topic_ids, create_partitions)
        return FetchResponseData(errors.NONE, self.session_id, updates)

    def response_session_id(self):
        return self.session_id


class IncrementalFetchContext(FetchContext):
    """(id, n>0): fetch every partition of the session in session order; answer only the
    partitions that changed, moving them to the end of the session (round robin)."""

    def __init__(self, metadata, session):
        self.metadata = metadata
        self.session = session

    def partitions_to_fetch(self):
        return [(key, cached.fetch_data) for key, cached in self.session.partitions.items()]

    def _epoch_ok(self):
        return self.session.epoch == next_epoch(self.metadata.epoch)

    def update_and_generate_response_data(self, updates):
        if not self._epoch_ok():
            log.info("Incremental fetch session {id} expected epoch {e}, got {g}: possible duplicate",
                     id=self.session.id, e=next_epoch(self.metadata.epoch), g=self.session.epoch)
            return FetchResponseData(errors.INVALID_FETCH_SESSION_EPOCH, self.session.id, [])
        out = []
        parts = self.session.partitions
        for key, resp in updates:
            cached = parts.get(key)
            if cached is None:
                continue
            if cached.maybe_update_response_data(resp, True):
                out.append((key, resp))
                parts.move_to_end(key)
        return FetchResponseData(errors.NONE, self.session.id, out)

    def get_throttled_response(self):
        if not self._epoch_ok():
            return FetchResponseData(errors.INVALID_FETCH_SESSION_EPOCH, self.session.id, [])
        return FetchResponseData(errors.NONE, self.session.id, [])

    def response_session_id(self):
        return self.session.id


class FetchManager:
    """Turns a Fetch's session fields into a :class:`FetchContext` (Kafka's FetchManager.newContext)."""

    def __init__(self, clock, cache):
        self._clock = clock
        self.cache = cache

    def new_context(self, metadata, fetch_data, to_forget, is_follower, uses_topic_ids=False,
                    topic_name=None):
        """``fetch_data``: list of (TopicIdPartition, PartitionData) in request order;
        ``to_forget``: list of TopicIdPartition; ``topic_name(topic_id)``: the name now known
        for a topic id (or None), to resolve session partitions cached without one."""
        if type(fetch_data) is not list:  # (the handler's own list is not copied)
            fetch_data = list(fetch_data)
        epoch = metadata.epoch
        if epoch == INITIAL_EPOCH or epoch == FINAL_EPOCH:  # metadata.is_full, without its call
            if metadata.session_id != INVALID_SESSION_ID:
                # A full request names a session only to close it.
                self.cache.remove(metadata.session_id)
            if epoch == FINAL_EPOCH:
                return SessionlessFetchContext(fetch_data)
            return FullFetchContext(self._clock, self.cache, fetch_data, uses_topic_ids, is_follower)
        # (one-line helpers inline below: every incremental fetch, a follower's each time,
        # comes through here)
        shard = self.cache.shard_for(metadata.session_id)
        session = shard.sessions.get(metadata.session_id)
        if session is None:
            return SessionErrorContext(errors.FETCH_SESSION_ID_NOT_FOUND, metadata)
        if session.epoch != metadata.epoch:
            return SessionErrorContext(errors.INVALID_FETCH_SESSION_EPOCH, metadata)
        if session.uses_topic_ids != uses_topic_ids:
            return SessionErrorContext(errors.FETCH_SESSION_TOPIC_ID_ERROR, metadata)
        if topic_name is not None and session.unresolved:
            session.resolve_names(topic_name)
        session.update(fetch_data, to_forget)
        if not session.partitions:
            shard.remove(session)
            return SessionlessFetchContext(fetch_data)
        shard.touch(session, int(self._clock.seconds() * 1000))
        session.epoch = next_epoch(session.epoch)
        return IncrementalFetchContext(metadata, session)
