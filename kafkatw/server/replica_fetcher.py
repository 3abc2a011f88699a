"""Replica fetchers: a follower's Fetch loop per (leader, fetcher id) over the inter-broker
listener (Kafka's ReplicaFetcherManager, AbstractFetcherThread, ReplicaFetcherThread): one
request in flight each, records handed to the replica manager as follower appends, the HW
and log start learnt from the leader, truncation at the DivergingEpoch the leader names
(KIP-320) or, after OFFSET_OUT_OF_RANGE, at the leader's log end/start. Writing to logs is
the replica manager's; choosing leaders is the controller's.
"""

import attr
from twisted.logger import Logger

from kafkatw.coordinator.group.offsets_log import java_string_hashcode
from kafkatw.protocol import errors
from kafkatw.protocol.messages import FetchRequest, ListOffsetsRequest
from kafkatw.protocol.records import iter_batch_headers
from kafkatw.server.fetch_session_handler import FetchSessionHandler, SessionPartition

log = Logger()

FETCH_VERSION = 15  # ReplicaState (replica id + broker epoch), topic ids, DivergingEpoch
LIST_OFFSETS_VERSION = 4
UNDEFINED_EPOCH = -1
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2

#: answers that wait for the controller (a LeaderAndIsr) or the leader to catch up: retried
#: after replica.fetch.backoff.ms
_RETRY_LATER = frozenset([
    errors.NOT_LEADER_OR_FOLLOWER, errors.UNKNOWN_LEADER_EPOCH, errors.FENCED_LEADER_EPOCH,
    errors.UNKNOWN_TOPIC_OR_PARTITION, errors.UNKNOWN_TOPIC_ID, errors.KAFKA_STORAGE_ERROR,
    errors.INCONSISTENT_TOPIC_ID, errors.REPLICA_NOT_AVAILABLE,
])


def fetcher_id(topic, partition, num_fetchers):
    """Kafka's AbstractFetcherManager.getFetcherId."""
    h = (31 * java_string_hashcode(topic) + partition) & 0xFFFFFFFF
    if h >= 0x80000000:
        h -= 0x100000000
    return (h & 0x7FFFFFFF) % num_fetchers


@attr.s(slots=True)
class PartitionFetchState:
    topic_id = attr.ib()
    fetch_offset = attr.ib()
    current_leader_epoch = attr.ib()
    delayed_until = attr.ib(default=0.0)  # reactor seconds: retried after a backoff


@attr.s(slots=True, frozen=True)
class FetcherSettings:
    broker_id = attr.ib()
    max_wait_ms = attr.ib(default=500)
    min_bytes = attr.ib(default=1)
    max_bytes = attr.ib(default=10 * 1024 * 1024)
    partition_max_bytes = attr.ib(default=1024 * 1024)
    backoff_ms = attr.ib(default=1000)
    num_fetchers = attr.ib(default=1)

    @classmethod
    def from_config(cls, config, broker_id):
        def get(name, default):
            value = None if config is None else config.get(name)
            return default if value is None else int(value)
        return cls(broker_id=broker_id,
                   max_wait_ms=get("replica.fetch.wait.max.ms", 500),
                   min_bytes=get("replica.fetch.min.bytes", 1),
                   max_bytes=get("replica.fetch.response.max.bytes", 10 * 1024 * 1024),
                   partition_max_bytes=get("replica.fetch.max.bytes", 1024 * 1024),
                   backoff_ms=get("replica.fetch.backoff.ms", 1000),
                   num_fetchers=max(1, get("num.replica.fetchers", 1)))


class ReplicaFetcherManager:
    """Kafka's ReplicaFetcherManager: partitions to follow are spread over ``num.replica.
    fetchers`` fetchers per leader. ``replica_manager`` is the ReplicaManager (its
    follower methods), ``client`` a KafkaNetworkClient, ``clock`` the reactor."""

    def __init__(self, replica_manager, client, clock, settings):
        self.replica_manager = replica_manager
        self.client = client
        self.clock = clock
        self.settings = settings
        self.fetchers = {}  # (leader id, fetcher id) -> ReplicaFetcher
        self._where = {}  # tp -> (leader id, fetcher id)

    @classmethod
    def from_config(cls, config, replica_manager, reactor, client=None):
        if client is None:
            from kafkatw.network.client import KafkaNetworkClient, inter_broker_tls
            timeout = None if config is None else config.get("replica.socket.timeout.ms")
            rcvbuf = -1 if config is None else config.get("replica.socket.receive.buffer.bytes", -1)
            client = KafkaNetworkClient(reactor, "broker-%d-fetcher" % replica_manager.node_id,
                                        request_timeout_ms=int(timeout or 30000),
                                        tls=inter_broker_tls(config), receive_buffer_bytes=rcvbuf)
        return cls(replica_manager, client, reactor,
                   FetcherSettings.from_config(config, replica_manager.node_id))

    def add_fetcher_for_partitions(self, states):
        """``states``: {tp: InitialFetchState}; each partition is fetched from its leader."""
        for tp, st in states.items():
            self.remove_fetcher_for_partitions([tp])
            key = (st.leader_id, fetcher_id(tp[0], tp[1], self.settings.num_fetchers))
            fetcher = self.fetchers.get(key)
            moved = {}
            if fetcher is not None and fetcher.endpoint != tuple(st.leader_endpoint):
                moved = fetcher.partitions  # the leader moved to another address: they go along
                fetcher.shutdown()
                del self.fetchers[key]
                fetcher = None
            if fetcher is None:
                fetcher = self.fetchers[key] = ReplicaFetcher(self, st.leader_id, key[1],
                                                              tuple(st.leader_endpoint))
                for other, state in moved.items():
                    fetcher.add_partition(other, state)
            fetcher.add_partition(tp, PartitionFetchState(st.topic_id, st.fetch_offset,
                                                          st.current_leader_epoch))
            self._where[tp] = key
        for fetcher in self.fetchers.values():
            fetcher.start()

    def remove_fetcher_for_partitions(self, tps):
        for tp in tps:
            key = self._where.pop(tp, None)
            if key is None:
                continue
            fetcher = self.fetchers.get(key)
            if fetcher is not None:
                fetcher.remove_partition(tp)
                if not fetcher.partitions:  # Kafka's shutdownIdleFetcherThreads
                    fetcher.shutdown()
                    del self.fetchers[key]

    def shutdown(self):
        for fetcher in self.fetchers.values():
            fetcher.shutdown()
        self.fetchers = {}
        self._where = {}
        self.client.close_all()


class ReplicaFetcher:
    """One fetch loop: a Fetch for every ready partition, its answer applied, the next one
    sent at once (the leader parks it up to ``replica.fetch.wait.max.ms``)."""

    def __init__(self, manager, leader_id, fetcher_index, endpoint):
        self.manager = manager
        self.leader_id = leader_id
        self.fetcher_index = fetcher_index
        self.endpoint = endpoint
        self.node_key = (leader_id, fetcher_index)
        self.partitions = {}  # tp -> PartitionFetchState
        self._running = False
        self._inflight = False
        self._wakeup = None
        self.session = FetchSessionHandler(leader_id)

    def __repr__(self):
        return "ReplicaFetcher(leader=%d, id=%d, %d partitions)" % (
            self.leader_id, self.fetcher_index, len(self.partitions))

    def add_partition(self, tp, state):
        self.partitions[tp] = state

    def remove_partition(self, tp):
        self.partitions.pop(tp, None)

    def start(self):
        if not self._running:
            self._running = True
        self._schedule(0)

    def shutdown(self):
        self._running = False
        if self._wakeup is not None and self._wakeup.active():
            self._wakeup.cancel()
        self._wakeup = None
        self.manager.client.close(self.node_key)

    def _schedule(self, delay):
        if not self._running or self._inflight:
            return
        if self._wakeup is not None and self._wakeup.active():
            if self._wakeup.getTime() <= self.manager.clock.seconds() + delay:
                return
            self._wakeup.cancel()
        self._wakeup = self.manager.clock.callLater(delay, self._run)

    def _run(self):
        self._wakeup = None
        if not self._running or self._inflight:
            return
        now = self.manager.clock.seconds()
        ready = {tp: st for tp, st in self.partitions.items() if st.delayed_until <= now}
        if not ready:
            if self.partitions:
                self._schedule(max(0.0, min(st.delayed_until for st in self.partitions.values())
                                   - now))
            return
        request, sent = self._build_request(ready)
        if request is None:
            self._schedule(self.manager.settings.backoff_ms / 1000.0)
            return
        self._inflight = True
        host, port = self.endpoint
        d = self.manager.client.send(self.node_key, host, port, request, FETCH_VERSION)
        d.addCallbacks(self._answered, self._failed, callbackArgs=(sent,))
        d.addErrback(lambda f: log.failure("replica fetcher {f} failed", f, f=self))

    def _build_request(self, ready):
        """The Fetch of ``ready`` within the fetch session (KIP-227: after the first, full
        request only new and changed partitions are listed, the others forgotten); ``sent``:
        {tp: (state, fetch offset)} of every partition the leader reads for it."""
        rm = self.manager.replica_manager
        settings = self.manager.settings
        wanted = {}
        states = {}
        quota = rm.follower_quota
        exceeded = quota.is_quota_exceeded()
        for tp, st in ready.items():
            part = rm.follower_partition(*tp)
            if part is None:
                continue
            if exceeded and quota.throttles(tp[0], tp[1], settings.broker_id in part.isr):
                continue  # Kafka's shouldFollowerThrottle: asked again once the quota allows
            lg = part.log
            last_epoch = lg.leader_epoch_cache.latest_epoch()
            wanted[tp] = SessionPartition(
                topic_id=st.topic_id or bytes(16), fetch_offset=st.fetch_offset,
                log_start_offset=lg.log_start_offset, max_bytes=settings.partition_max_bytes,
                current_leader_epoch=st.current_leader_epoch,
                last_fetched_epoch=UNDEFINED_EPOCH if last_epoch is None else last_epoch)
            states[tp] = st
        if not wanted:
            return None, {}
        data = self.session.build(wanted)
        topics = {}
        for tp, p in data.to_send:
            t = topics.get(p.topic_id)
            if t is None:
                t = topics[p.topic_id] = FetchRequest.FetchTopic(topic_id=p.topic_id,
                                                                 partitions=[])
            t.partitions.append(FetchRequest.FetchPartition(
                partition=tp[1], current_leader_epoch=p.current_leader_epoch,
                fetch_offset=p.fetch_offset, last_fetched_epoch=p.last_fetched_epoch,
                log_start_offset=p.log_start_offset, partition_max_bytes=p.max_bytes))
        forgotten = {}
        for tp, p in data.to_forget:
            forgotten.setdefault(p.topic_id, []).append(tp[1])
        request = FetchRequest(
            replica_state=FetchRequest.ReplicaState(replica_id=settings.broker_id,
                                                    replica_epoch=rm.broker_epoch),
            max_wait_ms=settings.max_wait_ms, min_bytes=settings.min_bytes,
            max_bytes=settings.max_bytes, isolation_level=0,
            session_id=data.metadata.session_id, session_epoch=data.metadata.epoch,
            topics=list(topics.values()),
            forgotten_topics_data=[FetchRequest.ForgottenTopic(topic="", topic_id=topic_id,
                                                               partitions=parts)
                                   for topic_id, parts in forgotten.items()],
            rack_id="")
        sent = {tp: (st, st.fetch_offset) for tp, st in states.items()}
        return request, sent

    def _failed(self, failure, *_):
        self._inflight = False
        self.session.handle_error()
        if not self._running:
            return
        log.info("fetch from broker {leader} failed: {err}; retrying in {ms} ms",
                 leader=self.leader_id, err=failure.getErrorMessage(),
                 ms=self.manager.settings.backoff_ms)
        self._schedule(self.manager.settings.backoff_ms / 1000.0)

    def _answered(self, response, sent):
        self._inflight = False
        if not self._running:
            return  # shut down meanwhile: the logs may be closing
        backoff = self.manager.settings.backoff_ms / 1000.0
        by_id = {}
        for tp, (st, _) in sent.items():
            by_id[(st.topic_id or bytes(16), tp[1])] = tp
        answered = [(by_id.get((t.topic_id, pd.partition_index), _UNKNOWN), pd)
                    for t in response.responses for pd in t.partitions]
        if not self.session.handle_response(response.error_code, response.session_id,
                                            [tp for tp, _ in answered]):
            code = response.error_code
            log.info("fetch from broker {leader} answered {err}; the next fetch is full",
                     leader=self.leader_id, err=errors.error_name(code)
                     if code != errors.NONE else "partitions not asked for")
            if code in (errors.FETCH_SESSION_ID_NOT_FOUND, errors.INVALID_FETCH_SESSION_EPOCH):
                self._run()  # the session is gone or out of step: a new one at once
            else:
                self._schedule(backoff)
            return
        for tp, pd in answered:
            st, offset = sent[tp]
            if self.partitions.get(tp) is not st or st.fetch_offset != offset:
                continue  # removed or re-added meanwhile: this answer is stale
            try:
                self._process_partition(tp, st, pd)
            except Exception:
                log.failure("follower append to {tp} failed", tp="%s-%d" % tp)
                st.delayed_until = self.manager.clock.seconds() + backoff
        # the next fetch at once, not a reactor turn later: it is what moves the leader's HW
        # (an acks=all produce waits for it)
        if self._wakeup is not None and self._wakeup.active():
            self._wakeup.cancel()
        self._wakeup = None
        self._run()

    def _process_partition(self, tp, st, pd):
        rm = self.manager.replica_manager
        part = rm.follower_partition(*tp)
        if part is None:
            return
        code = pd.error_code
        if code == errors.NONE:
            diverging = pd.diverging_epoch
            if diverging is not None and diverging.epoch >= 0 and diverging.end_offset >= 0:
                self._truncate_on_diverging(tp, st, part, diverging.epoch, diverging.end_offset)
                return
            records = pd.records
            buf = _whole_batches(records)
            info = rm.append_records_to_follower(tp[0], tp[1], buf, pd.high_watermark,
                                                 pd.log_start_offset)
            quota = rm.follower_quota
            if quota.throttles(tp[0], tp[1], self.manager.settings.broker_id in part.isr):
                quota.record(len(buf))
            if info is not None and info.last_offset >= 0:
                st.fetch_offset = info.last_offset + 1
            return
        if code == errors.OFFSET_OUT_OF_RANGE:
            self._handle_out_of_range(tp, st, part)
            return
        if code in _RETRY_LATER:
            log.info("fetching {tp} from {leader}: {err}; retrying later", tp="%s-%d" % tp,
                     leader=self.leader_id, err=errors.error_name(code))
        else:
            log.warn("fetching {tp} from {leader}: {err}", tp="%s-%d" % tp,
                     leader=self.leader_id, err=errors.error_name(code))
        st.delayed_until = self.manager.clock.seconds() + self.manager.settings.backoff_ms / 1000.0

    def _truncate_on_diverging(self, tp, st, part, leader_epoch, leader_end_offset):
        """Kafka's getOffsetTruncationState: cut where our log and the leader's part ways
        (never merely at our HW); if our log lacks the leader's epoch, cut at the end of the
        newest epoch we share and fetch again (the leader names the next point)."""
        lg = part.log
        leo = lg.log_end_offset
        follower_epoch, follower_end = lg.end_offset_for_epoch(leader_epoch)
        if follower_epoch == UNDEFINED_EPOCH:
            offset = min(leader_end_offset, leo)
        elif follower_epoch != leader_epoch:
            offset = min(follower_end, leo)
        else:
            offset = min(leader_end_offset, follower_end, leo)
        log.info("{tp}: leader {leader} diverges at epoch {e} offset {o}; truncating from "
                 "{leo} to {to}", tp="%s-%d" % tp, leader=self.leader_id, e=leader_epoch,
                 o=leader_end_offset, leo=leo, to=offset)
        self.manager.replica_manager.truncate_follower(tp[0], tp[1], offset)
        st.fetch_offset = lg.log_end_offset

    def _handle_out_of_range(self, tp, st, part):
        """Kafka's fetchOffsetAndTruncate: our log end is past the leader's (an unclean
        election): truncate to its end; else its log start passed us: start there, empty."""
        lg = part.log
        host, port = self.endpoint
        client = self.manager.client

        def ask(timestamp):
            req = ListOffsetsRequest(
                replica_id=self.manager.settings.broker_id, isolation_level=0,
                topics=[ListOffsetsRequest.ListOffsetsTopic(name=tp[0], partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(
                        partition_index=tp[1], current_leader_epoch=st.current_leader_epoch,
                        timestamp=timestamp)])])
            return client.send(self.node_key, host, port, req, LIST_OFFSETS_VERSION).addCallback(
                lambda resp: resp.topics[0].partitions[0])

        backoff = self.manager.settings.backoff_ms / 1000.0
        st.delayed_until = float("inf")  # not fetched until this settles
        rm = self.manager.replica_manager

        def got_latest(p):
            if self.partitions.get(tp) is not st:
                return None
            if p.error_code != errors.NONE:
                raise _Retry(p.error_code)
            leo = lg.log_end_offset
            if p.offset < leo:
                log.warn("{tp}: our log end {leo} is past the leader's {end}: truncating",
                         tp="%s-%d" % tp, leo=leo, end=p.offset)
                rm.truncate_follower(tp[0], tp[1], p.offset)
                st.fetch_offset = lg.log_end_offset
                return None
            return ask(EARLIEST_TIMESTAMP).addCallback(got_earliest)

        def got_earliest(p):
            if self.partitions.get(tp) is not st:
                return
            if p.error_code != errors.NONE:
                raise _Retry(p.error_code)
            if p.offset > lg.log_end_offset:
                rm.truncate_follower(tp[0], tp[1], p.offset, fully=True)
            st.fetch_offset = max(p.offset, lg.log_end_offset)

        def settled(result):
            if result is not None:  # a failure: asked again after the backoff
                error = result.value
                log.info("{tp}: asking leader {leader} for its log end/start failed: {err}",
                         tp="%s-%d" % tp, leader=self.leader_id,
                         err=errors.error_name(error.args[0]) if isinstance(error, _Retry)
                         else result.getErrorMessage())
            if self.partitions.get(tp) is st:
                st.delayed_until = 0.0
                if result is not None:
                    st.delayed_until = self.manager.clock.seconds() + backoff
                self._schedule(0)

        d = ask(LATEST_TIMESTAMP).addCallback(got_latest)
        d.addCallbacks(lambda _: settled(None), lambda f: settled(f))


_UNKNOWN = object()  # a response partition the request's session does not hold


class _Retry(Exception):
    pass


def _whole_batches(records):
    """The complete batches at the head of a fetched records field (a leader may cut the
    last one at the size limit)."""
    if records is None or len(records) == 0:
        return b""
    end = 0
    for pos, header in iter_batch_headers(records, allow_partial_tail=True):
        if pos + header.size_in_bytes > len(records):
            break
        end = pos + header.size_in_bytes
    if end == len(records):
        return records
    return records[:end]
