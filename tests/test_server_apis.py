"""Tests for kafkatw.server.apis: dispatch, advertised versions, ApiVersions contents, error
mapping of handler failures, the handler slot of a parked Join or TxnOffsetCommit. Also holds
the fakes the handler test modules share."""

import os

import attr
from twisted.internet import defer, task
from twisted.python.failure import Failure
from twisted.trial import unittest
from zope.interface import implementer
from zope.interface.verify import verifyObject

from kafkatw.cluster.metadata import ClusterMetadata
from kafkatw.config import KafkaConfig
from kafkatw.network.interfaces import IRequestHandler
from kafkatw.network.request import Request, RequestContext, Response
from kafkatw.protocol import errors, messages
from kafkatw.protocol.errors import KafkaError
from kafkatw.protocol.parts import FileRegion
from kafkatw.server.apis import KafkaApis
from kafkatw.server.interfaces import IApiHandler, IReplicaManager
from kafkatw.server.replica_manager import ReplicaManager
from kafkatw.storage.offsets import ORIGIN_CLIENT


@attr.s
class FakePartitionResponse:
    error_code = attr.ib(default=0)
    base_offset = attr.ib(default=0)
    log_append_time = attr.ib(default=-1)
    log_start_offset = attr.ib(default=0)
    record_errors = attr.ib(factory=list)
    error_message = attr.ib(default=None)


@attr.s
class FakeFetchPartitionData:
    error = attr.ib(default=0)
    high_watermark = attr.ib(default=0)
    last_stable_offset = attr.ib(default=0)
    log_start_offset = attr.ib(default=0)
    records = attr.ib(default=None)
    aborted_transactions = attr.ib(default=None)
    diverging_epoch = attr.ib(default=None)
    preferred_read_replica = attr.ib(default=-1)
    records_size = attr.ib()

    @records_size.default
    def _records_size(self):
        # what the read counts: the records' bytes (a region's count)
        records = self.records
        if records is None:
            return 0
        return records.count if isinstance(records, FileRegion) else len(records)


@attr.s
class FakeTimestampAndOffset:
    timestamp = attr.ib()
    offset = attr.ib()
    leader_epoch = attr.ib(default=0)


@implementer(IReplicaManager)
class FakeReplicaManager:
    """Records calls; answers from canned tables; partitions and epochs from ``metadata``."""

    config = None
    broker_epoch = -1
    cluster_mode = False

    def __init__(self, metadata):
        self.metadata = metadata
        self.appends = []
        self.fetches = []
        self.offset_queries = []
        self.forgotten = []
        self.append_result = None  # dict or callable(entries) -> dict or Deferred
        self.fetch_result = None  # callable(params, infos) -> list
        self.offsets = {}  # ((topic, p), timestamp) -> FakeTimestampAndOffset | None | KafkaError

    @property
    def node_id(self):
        return self.metadata.node_id

    def start(self):
        pass

    def shutdown(self):
        pass

    def append_records(self, timeout_ms, required_acks, entries, internal_topics_allowed=False,
                       origin=ORIGIN_CLIENT):
        return defer.maybeDeferred(self.append_records_now, timeout_ms, required_acks, entries,
                                   internal_topics_allowed, origin=origin)

    def append_records_now(self, timeout_ms, required_acks, entries, internal_topics_allowed=False,
                           batch_headers=None, origin=ORIGIN_CLIENT):
        self.appends.append((timeout_ms, required_acks, dict(entries)))
        if callable(self.append_result):
            return self.append_result(entries)
        if self.append_result is not None:
            return self.append_result
        return {tp: FakePartitionResponse(base_offset=10 * i) for i, tp in enumerate(entries)}

    def fetch_messages(self, params, fetch_infos):
        return defer.succeed(self.fetch_messages_now(params, fetch_infos))

    def fetch_messages_now(self, params, fetch_infos):
        self.fetches.append((params, list(fetch_infos)))
        if self.fetch_result is not None:
            return self.fetch_result(params, fetch_infos)
        return [(tp, FakeFetchPartitionData(high_watermark=5)) for tp, _ in fetch_infos]

    def read_from_log(self, params, fetch_infos, found=None):
        raise NotImplementedError("the fake never parks a fetch")

    def get_partition_or_error(self, topic, partition, topic_id=None):
        if not self.metadata.contains_partition(topic, partition):
            return None, errors.UNKNOWN_TOPIC_OR_PARTITION
        return "log", errors.NONE

    def leader_log_or_error(self, topic, partition, topic_id, requested_epoch):
        log_, code = self.get_partition_or_error(topic, partition, topic_id)
        if code == errors.NONE:
            code = self.check_leader_epoch(topic, partition, requested_epoch)
        return (log_, code) if code == errors.NONE else (None, code)

    def fetch_log_or_error(self, params, topic, partition, topic_id, requested_epoch):
        return self.leader_log_or_error(topic, partition, topic_id, requested_epoch) + (None,)

    check_leader_epoch = ReplicaManager.check_leader_epoch  # the real rule, from self.metadata

    def _leader_epoch(self, topic, partition):
        return self.metadata.leader_epoch(topic, partition)  # embedded mode's source

    def diverging_epoch(self, log_, info):
        return None

    def producer_state_or_load(self, topic, partition, log_):
        raise NotImplementedError("no producer state in the fake")

    def loaded_producer_state(self, topic, partition):
        return None

    def when_producer_state_loaded(self, topic, partition):
        return defer.succeed(None)

    def set_producer_id_expiration_ms(self, expiration_ms):
        self.producer_id_expiration_ms = expiration_ms

    def forget_partition(self, topic, partition):
        self.forgotten.append((topic, partition))

    def become_leader_or_follower(self, controller_id, controller_epoch, partition_states,
                                  topic_ids, live_leaders):
        raise NotImplementedError("the fake is a single node")

    def stop_replicas(self, controller_id, controller_epoch, partitions):
        raise NotImplementedError("the fake is a single node")

    def under_replicated_partitions(self):
        return 0

    def add_leadership_listener(self, listener):
        pass

    def fetch_offset_for_timestamp(self, tp, timestamp, isolation_level=None, current_leader_epoch=-1,
                                   fetch_only_from_leader=True, topic_id=None):
        self.offset_queries.append((tp, timestamp, isolation_level, current_leader_epoch,
                                    fetch_only_from_leader))
        # the real leader-epoch rule (the handler relies on the replica manager for it)
        code = self.check_leader_epoch(tp[0], tp[1], current_leader_epoch)
        if code != errors.NONE:
            raise KafkaError(code)
        result = self.offsets.get((tp, timestamp))
        if isinstance(result, Exception):
            raise result
        return result


class FakeLogManager:
    def __init__(self):
        self.created = []
        self.deleted = []
        self.batches = []  # (topic, partitions, wait) of each create_logs

    def get_or_create_log(self, topic, partition, topic_id, overrides, is_new=True):
        self.created.append((topic, partition, topic_id, dict(overrides)))

    def create_logs(self, topic, partitions, topic_id, overrides, wait=True):
        self.batches.append((topic, list(partitions), wait))
        for p in partitions:
            if self.get_log(topic, p) is None:
                self.get_or_create_log(topic, p, topic_id, overrides)
        return defer.succeed(None)

    def delete_log(self, topic, partition):
        self.deleted.append((topic, partition))

    def delete_logs(self, topic, partitions):
        for p in partitions:
            self.delete_log(topic, p)
        return defer.succeed(None)

    def forget_topic(self, topic):
        self.forgotten = getattr(self, "forgotten", []) + [topic]

    def run_blocking(self, fn, *args):
        return defer.maybeDeferred(fn, *args)  # inline, as LogManager without a thread pool

    def get_log(self, topic, partition):
        return "log" if any(c[:2] == (topic, partition) for c in self.created) else None

    def has_log(self, topic, partition):
        return self.get_log(topic, partition) is not None


class ApisFixture:
    """Mixin: a KafkaApis on a real metadata store and config, fake lower layers."""

    node_id = 1
    properties = {}

    def setUp(self):
        base = self.mktemp()
        os.makedirs(base)
        props = {"node.id": str(self.node_id), "log.dirs": os.path.join(base, "logs"),
                 "listeners": "PLAINTEXT://localhost:9092,SECURE://localhost:9093",
                 "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SECURE:SSL",
                 "advertised.listeners": "PLAINTEXT://broker.example:19092,SECURE://broker.example:19093"}
        props.update(self.properties)
        self.config = KafkaConfig.from_properties(props)
        self.metadata = ClusterMetadata.load(self.config.log_dirs, self.node_id)
        self.replica_manager = FakeReplicaManager(self.metadata)
        self.log_manager = FakeLogManager()
        self.clock = task.Clock()
        self.apis = self.make_apis()

    def make_apis(self, **kwargs):
        kw = dict(config=self.config, metadata=self.metadata, replica_manager=self.replica_manager,
                  clock=self.clock, log_manager=self.log_manager)
        kw.update(kwargs)
        return KafkaApis(**kw)

    def request(self, body, version, listener="PLAINTEXT", wire=True, **context):
        """A Request as the network layer would make it (body round-tripped through the codec)."""
        if wire:
            body = type(body).decode(memoryview(bytearray(body.encode_bytes(version))), version)
        ctx = RequestContext(connection_id="c1", listener_name=listener, security_protocol=listener,
                             **context)
        return Request(header=None, api_key=body.API_KEY, api_version=version, correlation_id=7,
                       client_id="test", body=body, size=0, context=ctx)

    def call(self, body, version, **kw):
        """Handle a request; return the Response (its body re-decoded through the codec)."""
        result = self.successResultOf(self.apis.handle(self.request(body, version, **kw)))
        self.assertIsInstance(result, Response)
        if result.body is not None:
            cls = getattr(result.body, "MESSAGE", type(result.body))  # a generated Rows: its message
            result.body = cls.decode(result.body.encode_bytes(version), version)
        return result

    def create_topic(self, name, partitions=1, configs=None):
        return self.successResultOf(self.metadata.create_topic(name, partitions, configs))


@implementer(IApiHandler)
class BoomHandler:
    API_KEY = 3
    VERSIONS = (0, 12)

    def __init__(self, exc):
        self.exc = exc

    def handle(self, apis, request):
        raise self.exc

    def error_response(self, request, code, message):
        from kafkatw.server.handlers import metadata

        return metadata.error_response(request, code, message)


@implementer(IApiHandler)
class NoErrorFieldHandler:
    API_KEY = 3
    VERSIONS = (0, 12)

    def handle(self, apis, request):
        return defer.fail(RuntimeError("boom"))

    def error_response(self, request, code, message):
        return None  # an API without an error field: the connection closes


class _Pending:
    """A pending answer (the shape of a parked fetch): completed by the test."""

    def __init__(self):
        self.listener = None

    def when_complete(self, callback, errback):
        self.listener = (callback, errback)


@implementer(IApiHandler)
class PendingHandler:
    API_KEY = 3
    VERSIONS = (0, 12)

    def __init__(self):
        self.pending = _Pending()

    def handle(self, apis, request):
        return self.pending

    def error_response(self, request, code, message):
        from kafkatw.server.handlers import metadata

        return metadata.error_response(request, code, message)


class KafkaApisTests(ApisFixture, unittest.TestCase):
    def test_pending_answer_gives_a_response_or_the_apis_error_answer(self):
        topics = [messages.MetadataRequest.MetadataRequestTopic(name="a")]
        for outcome in ("body", "response", "failure"):
            handler = PendingHandler()
            apis = self.make_apis(handlers=[handler])
            d = apis.handle(self.request(messages.MetadataRequest(topics=topics), 12))
            self.assertNoResult(d)
            callback, errback = handler.pending.listener
            body = messages.MetadataResponse(topics=[])
            if outcome == "body":
                callback(body)  # a bare body becomes a Response
            elif outcome == "response":
                callback(Response(body, throttle_time_ms=5))
            else:
                errback(Failure(KafkaError(errors.NOT_CONTROLLER, "x")))
            resp = self.successResultOf(d)
            self.assertIsInstance(resp, Response)
            if outcome == "failure":
                self.assertEqual(resp.body.topics[0].error_code, errors.NOT_CONTROLLER)
            else:
                self.assertIs(resp.body, body)
                self.assertEqual(resp.throttle_time_ms, 5 if outcome == "response" else 0)

    def test_provides_interface(self):
        self.assertTrue(verifyObject(IRequestHandler, self.apis))

    def test_advertised_versions(self):
        versions = self.apis.api_versions()
        self.assertEqual(versions[18], (0, 4))
        # Produce from v0 for old librdkafka (KAFKA-18659); max clipped to what the codec encodes.
        self.assertEqual(versions[0], (0, messages.ProduceRequest.VALID_VERSIONS[1]))
        self.assertEqual(versions[1], (4, 17))
        self.assertEqual(versions[2], (1, 10))
        self.assertEqual(versions[3], (0, 12))
        self.assertEqual(versions[19], (2, 7))
        self.assertEqual(versions[20], (1, 6))
        self.assertEqual(versions[22], (0, 5))
        # exactly the registered handlers are advertised, nothing the broker cannot answer
        from kafkatw.server.apis import DEFAULT_HANDLERS

        self.assertEqual(sorted(versions), sorted({h.API_KEY for h in DEFAULT_HANDLERS}))
        for key, (lo, hi) in versions.items():
            valid = messages.REQUESTS[key].VALID_VERSIONS
            self.assertTrue(valid[0] <= lo <= hi <= valid[1], (key, lo, hi, valid))

    def test_unknown_api_closes(self):
        req = self.request(messages.ApiVersionsRequest(), 0)
        req.api_key = 999
        resp = self.successResultOf(self.apis.handle(req))
        self.assertTrue(resp.close_connection)

    def test_unexpected_exception_becomes_unknown_server_error(self):
        apis = self.make_apis(handlers=[BoomHandler(ValueError("bad"))])
        topics = [messages.MetadataRequest.MetadataRequestTopic(name="a")]
        resp = self.successResultOf(apis.handle(self.request(messages.MetadataRequest(topics=topics), 12)))
        self.assertFalse(resp.close_connection)
        self.assertEqual([(t.name, t.error_code) for t in resp.body.topics], [("a", errors.UNKNOWN_SERVER_ERROR)])
        self.assertEqual(len(self.flushLoggedErrors(ValueError)), 1)

    def test_kafka_error_keeps_its_code(self):
        apis = self.make_apis(handlers=[BoomHandler(KafkaError(errors.NOT_CONTROLLER, "x"))])
        topics = [messages.MetadataRequest.MetadataRequestTopic(name="a")]
        resp = self.successResultOf(apis.handle(self.request(messages.MetadataRequest(topics=topics), 12)))
        self.assertEqual(resp.body.topics[0].error_code, errors.NOT_CONTROLLER)

    def test_failure_without_error_field_closes(self):
        apis = self.make_apis(handlers=[NoErrorFieldHandler()])
        resp = self.successResultOf(apis.handle(self.request(messages.MetadataRequest(), 12)))
        self.assertEqual((resp.body, resp.close_connection), (None, True))
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_create_missing_logs(self):
        self.log_manager.created.append(("a", 0, None, {}))
        self.metadata.remove_listener(self.apis._sync_logs)
        self.create_topic("a", 2)
        self.apis.create_missing_logs()
        self.assertEqual([c[:2] for c in self.log_manager.created], [("a", 0), ("a", 1)])

    def test_logs_follow_topic_lifecycle(self):
        info = self.create_topic("t", 2, {"retention.ms": "5"})
        self.assertEqual(self.log_manager.created,
                         [("t", 0, info.topic_id, {"retention.ms": "5"}), ("t", 1, info.topic_id, {"retention.ms": "5"})])
        self.metadata.delete_topic("t")
        self.assertEqual(self.log_manager.deleted, [("t", 0), ("t", 1)])
        self.assertEqual(self.replica_manager.forgotten, [("t", 0), ("t", 1)])


    def test_logs_made_before_the_answer_for_a_few_new_partitions(self):
        """The logs of at most 100 new partitions are made before the answer, more after;
        added partitions count, not the topic's (nor are the topic's logs asked for again)."""
        self.create_topic("small", 100)
        self.create_topic("big", 101)
        self.successResultOf(self.metadata.create_partitions("big", 103))
        self.successResultOf(self.metadata.create_partitions("small", 201))
        self.successResultOf(self.metadata.create_partitions("small", 202))
        self.assertEqual(self.log_manager.batches, [
            ("small", list(range(100)), True), ("big", list(range(101)), False),
            ("big", [101, 102], True), ("small", list(range(100, 201)), False),
            ("small", [201], True)])


class ApiVersionsTests(ApisFixture, unittest.TestCase):
    def features_apis(self):
        return self.make_apis(supported_features=[("metadata.version", 1, 25), ("kraft.version", 0, 1)],
                              finalized_features=[("metadata.version", 25, 25)],
                              finalized_features_epoch=42)

    def test_v0_lists_everything(self):
        resp = self.call(messages.ApiVersionsRequest(), 0)
        self.assertEqual(resp.body.error_code, 0)
        got = {k.api_key: (k.min_version, k.max_version) for k in resp.body.api_keys}
        self.assertEqual(got, self.apis.api_versions())
        self.assertEqual(got[0][0], 0)

    def test_v3_has_no_features_by_default(self):
        body = messages.ApiVersionsRequest(client_software_name="apache-kafka-java",
                                           client_software_version="4.0.0")
        resp = self.call(body, 3)
        self.assertEqual(resp.body.error_code, 0)
        self.assertEqual(resp.body.supported_features, [])
        # no tagged fields at all: the body ends with an empty tag section
        self.assertEqual(resp.body.encode_bytes(3)[-1:], b"\x00")

    def test_invalid_software_name(self):
        body = messages.ApiVersionsRequest(client_software_name="bad name!", client_software_version="1")
        resp = self.call(body, 3)
        self.assertEqual((resp.body.error_code, resp.body.api_keys), (errors.INVALID_REQUEST, []))

    def test_features_for_modern_clients(self):
        self.apis = self.features_apis()
        body = messages.ApiVersionsRequest(client_software_name="librdkafka", client_software_version="2.3.0")
        v3 = self.call(body, 3).body
        self.assertEqual([f.name for f in v3.supported_features], ["metadata.version"])
        self.assertEqual(v3.finalized_features_epoch, 42)
        v4 = self.call(body, 4).body
        self.assertEqual([f.name for f in v4.supported_features], ["metadata.version", "kraft.version"])

    def test_no_tagged_fields_for_old_librdkafka(self):
        self.apis = self.features_apis()
        body = messages.ApiVersionsRequest(client_software_name="librdkafka", client_software_version="2.0.2")
        resp = self.call(body, 3).body
        self.assertEqual((resp.supported_features, resp.finalized_features, resp.finalized_features_epoch),
                         ([], [], -1))
        self.assertEqual(resp.encode_bytes(3)[-1:], b"\x00")

    def test_mis_skips_rule(self):
        from kafkatw.server.handlers.api_versions import mis_skips_tagged_fields, parse_version

        self.assertEqual(parse_version("2.0.2"), (2, 0, 2))
        self.assertEqual(parse_version("2.1.2-RC1"), (2, 1, 2))
        self.assertTrue(mis_skips_tagged_fields("librdkafka", "1.9.2"))
        self.assertTrue(mis_skips_tagged_fields("librdkafka", "2.1.1"))
        self.assertFalse(mis_skips_tagged_fields("librdkafka", "2.1.2"))
        self.assertFalse(mis_skips_tagged_fields("apache-kafka-java", "1.0"))


class _Waiting:
    """A group and a transaction coordinator answering a Join, and the verification of a
    TxnOffsetCommit, with the Deferred they are given."""

    def __init__(self, wait):
        self.wait = wait

    def handle_join_group(self, *args):
        return self.wait

    def partition_for(self, group_id):
        return 0

    def verify_partitions(self, *args):
        return self.wait

    def handle_txn_commit_offsets(self, *args):
        return defer.succeed({})


def _paused():
    """(a Deferred that has fired but is paused on another, that other)."""
    inner = defer.Deferred()
    outer = defer.succeed(None)
    outer.addCallback(lambda _: inner)
    return outer, inner


class HandlerSlotTests(ApisFixture, unittest.TestCase):
    """A wait that has fired but is paused on another Deferred (``called`` set, no result yet)
    frees its handler slot as one not yet fired does (each fails with ``if not d.called``)."""

    def handle(self, request):
        released = []
        request._on_local_complete = lambda req, now_ns: released.append(req)
        return self.apis.handle(request), released

    def test_txn_offset_commit_paused_on_another_wait_frees_its_handler_slot(self):
        self.create_topic("t")
        outer, inner = _paused()
        waiting = _Waiting(outer)
        self.apis = self.make_apis(group_coordinator=waiting, txn_coordinator=waiting)
        P = messages.TxnOffsetCommitRequest
        body = P(transactional_id="tx", group_id="g", producer_id=5, producer_epoch=0, topics=[
            P.TxnOffsetCommitRequestTopic(name="t", partitions=[
                P.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=3)])])
        request = self.request(body, 3)
        answer, released = self.handle(request)
        self.assertEqual(released, [request])
        self.assertNoResult(answer)
        inner.callback({("__consumer_offsets", 0): errors.NONE})
        topics = self.successResultOf(answer).body.topics
        self.assertEqual([(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in topics],
                         [("t", [(0, errors.NONE)])])
        self.assertEqual(released, [request])

    def test_join_paused_on_another_wait_frees_its_handler_slot(self):
        outer, inner = _paused()
        self.apis = self.make_apis(group_coordinator=_Waiting(outer))
        body = messages.JoinGroupRequest(group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                         member_id="", protocol_type="consumer", protocols=[])
        request = self.request(body, 5)
        answer, released = self.handle(request)
        self.assertEqual(released, [request])
        self.assertNoResult(answer)
        inner.callback(attr.make_class("JoinResult", [
            "error", "generation_id", "protocol_type", "protocol_name", "leader_id", "skip_assignment",
            "member_id", "members"])(0, 3, "consumer", "range", "m-1", False, "m-1", []))
        body = self.successResultOf(answer).body
        self.assertEqual((body.error_code, body.generation_id, body.member_id, body.leader),
                         (0, 3, "m-1", "m-1"))
        self.assertEqual(released, [request])


class LogSyncTests(ApisFixture, unittest.TestCase):
    """The metadata listener keeping a real LogManager in step with the topics."""

    def setUp(self):
        from kafkatw.storage import LogManager
        ApisFixture.setUp(self)
        base = self.mktemp()
        self.log_manager = LogManager([os.path.join(base, "d1"), os.path.join(base, "d2")],
                                      reactor=self.clock)
        self.log_manager.load_logs()
        self.addCleanup(self.log_manager.shutdown)
        self.apis = self.make_apis()

    def test_added_partitions_on_a_failing_dir_are_offline_the_others_serve(self):
        """Partitions added while a log dir fails: those whose log could not be made there
        are offline (KAFKA_STORAGE_ERROR, the dir offline), the others serve; no listener
        traceback."""
        mgr = self.log_manager
        d1, d2 = mgr.log_dirs
        self.create_topic("t", 1)  # t-0 in d1: t-1 goes to d2, t-2 to d1
        self.assertEqual(os.path.dirname(mgr.get_log("t", 0).dir), d1)
        with open(os.path.join(d2, "t-1"), "w") as f:  # a file where t-1's directory goes
            f.write("x")
        info = self.successResultOf(self.metadata.create_partitions("t", 3))
        self.assertEqual(info.num_partitions, 3)
        self.assertEqual(self.metadata.topics["t"].num_partitions, 3)
        self.assertEqual(mgr.offline_dirs, frozenset([d2]))
        self.assertIsNone(mgr.get_log("t", 1))
        self.assertEqual(os.path.dirname(mgr.get_log("t", 2).dir), d1)
        # what the replica manager asks for a known partition without a log
        e = self.assertRaises(KafkaError, mgr.get_or_create_log, "t", 1, info.topic_id, {},
                              is_new=False)
        self.assertEqual(e.code, errors.KAFKA_STORAGE_ERROR)
        # the broker goes on: another partition lands in the online dir
        self.successResultOf(self.metadata.create_partitions("t", 4))
        self.assertEqual(os.path.dirname(mgr.get_log("t", 3).dir), d1)
        self.assertEqual(self.flushLoggedErrors(), [])

    def test_a_deleted_topics_config_overrides_are_forgotten(self):
        """Its overrides went with the topic from the metadata only; a partition of a topic
        leaving this broker (delete_logs, as StopReplica) keeps them."""
        mgr = self.log_manager
        self.create_topic("kept", 2, {"retention.ms": "1234"})
        self.create_topic("gone", 2, {"retention.ms": "5678"})
        self.successResultOf(mgr.delete_logs("kept", [0]))
        self.successResultOf(self.metadata.delete_topic("gone"))
        self.assertEqual(mgr._overrides, {"kept": {"retention.ms": "1234"}})
        self.assertEqual(mgr.get_or_create_log("kept", 0).config.retention_ms, 1234)
        self.create_topic("gone", 1)  # a new topic of the name has its own (none)
        self.assertEqual(mgr.get_log("gone", 0).config.retention_ms,
                         mgr.default_config.retention_ms)
