"""KafkaApis: dispatch of decoded requests by API key to the handler modules, the advertised
API versions, and turning handler failures into error responses (Kafka's ``KafkaApis.handle``).

It owns no protocol logic of its own: each family lives in ``kafkatw.server.handlers.*``.
"""

import time

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer
from zope.interface.exceptions import Invalid
from zope.interface.verify import verifyObject

from kafkatw.config.dynamic import DynamicBrokerConfig
from kafkatw.network.interfaces import IRequestHandler
from kafkatw.network.request import DeferredAnswer, Response
from kafkatw.protocol import errors
from kafkatw.protocol import messages
from kafkatw.protocol.errors import KafkaError
from kafkatw.security.quota import DefaultQuotaCallback
from kafkatw.server import authz
from kafkatw.server.quota import QuotaManagers, apply_throttle, cap_fetch_size
from kafkatw.server.handlers import (
    acls,
    admin_configs,
    admin_partitions,
    api_versions,
    client_quotas,
    consumer_groups,
    describe_cluster,
    fetch,
    group_offsets,
    groups,
    init_producer_id,
    list_offsets,
    metadata,
    produce,
    sasl,
    scram_credentials,
    topics,
    txn,
)
from kafkatw.server.handlers.recompress import PRODUCER
from kafkatw.server.interfaces import IApiHandler

log = Logger()

#: at most this many new partitions (of a CreateTopics' topic, or added by CreatePartitions)
#: have their logs made before the answer; more after (see _sync_logs)
_CREATE_LOGS_BEFORE_ANSWER = 100

DEFAULT_HANDLERS = (
    api_versions,
    metadata,
    topics.CREATE_TOPICS,
    topics.DELETE_TOPICS,
    produce,
    fetch,
    list_offsets,
    init_producer_id,
    admin_configs.DescribeConfigs,
    admin_configs.AlterConfigs,
    admin_configs.IncrementalAlterConfigs,
    admin_partitions.CreatePartitions,
    admin_partitions.DeleteRecords,
    admin_partitions.DescribeLogDirs,
    admin_partitions.AlterReplicaLogDirs,
    admin_partitions.OffsetForLeaderEpoch,
    admin_partitions.DescribeProducers,
    admin_partitions.ElectLeaders,
    describe_cluster,
    *groups.HANDLERS,  # group coordinator: Find/Join/Sync/Heartbeat/Leave/Describe/List/DeleteGroups
    *group_offsets.HANDLERS,  # OffsetCommit/OffsetFetch/OffsetDelete
    *consumer_groups.HANDLERS,  # KIP-848: ConsumerGroupHeartbeat/ConsumerGroupDescribe
    *sasl.HANDLERS,  # SaslHandshake/SaslAuthenticate (answered by network.authenticator on SASL listeners)
    *scram_credentials.HANDLERS,  # Describe/AlterUserScramCredentials
    *txn.HANDLERS,  # transaction coordinator: AddPartitions/AddOffsets/EndTxn/markers/TxnOffsetCommit/Describe/List
    *client_quotas.HANDLERS,  # Describe/AlterClientQuotas
    *acls.HANDLERS,  # Describe/Create/DeleteAcls
)


class _Registered:
    __slots__ = ("handler", "versions")

    def __init__(self, handler, versions):
        self.handler = handler
        self.versions = versions


@implementer(IRequestHandler)
class KafkaApis:
    """The broker's :class:`IRequestHandler`.

    A handler provides :class:`kafkatw.server.interfaces.IApiHandler` (usually a module):
    ``API_KEY``, ``VERSIONS`` (Kafka 4.0's served range), ``handle(apis, request)`` returning
    a response body, a :class:`Response` or a Deferred of either, and
    ``error_response(request, code, message)`` building that API's body with every error code
    set (or ``None`` when the API has none, in which case a failure closes the connection, as
    Kafka does).

    The advertised range is Kafka's range clipped to what the generated codec can encode,
    so nothing is advertised that cannot be answered.
    """

    def __init__(self, config, metadata, replica_manager=None, fetch_manager=None, clock=None,
                 log_manager=None, txn_coordinator=None, group_coordinator=None, supported_features=(),
                 finalized_features=(), finalized_features_epoch=-1, handlers=DEFAULT_HANDLERS,
                 dynamic_config=None, scram_credentials=None, quotas=None, authorizer=None):
        self._config_changed(config)
        # the live config: AlterConfigs updates it, and each new one becomes self.config
        self.dynamic_config = dynamic_config if dynamic_config is not None else DynamicBrokerConfig(config)
        self.dynamic_config.add_config_listener(self._config_changed)
        self.metadata = metadata
        self.replica_manager = replica_manager
        self.fetch_manager = fetch_manager
        self.clock = clock
        self.log_manager = log_manager
        self.txn_coordinator = txn_coordinator
        self.group_coordinator = group_coordinator
        self.scram_credentials = scram_credentials  # security.credentials.ScramCredentialStore
        # client quotas (server.quota.QuotaManagers around the IClientQuotaCallback)
        self.quotas = quotas if quotas is not None else QuotaManagers(DefaultQuotaCallback())
        self.authorizer = authorizer  # security.authorizer.IAuthorizer, None: authorization off
        self.controller = None  # the cluster-mode KafkaController (AlterPartition), None embedded
        # ApiVersions v3+ feature lists: [(name, min, max)] / [(name, min_level, max_level)]
        self.supported_features = list(supported_features)
        self.finalized_features = list(finalized_features)
        self.finalized_features_epoch = finalized_features_epoch
        self._handlers = {}
        self._api_versions = {}  # api key -> (lo, hi): one dict, kept current (see api_versions)
        for handler in handlers:
            self.register(handler)
        if log_manager is not None and metadata is not None:
            metadata.add_listener(self._sync_logs)
        if metadata is not None:
            metadata.add_listener(self._forget_answers)

    # -- registry ------------------------------------------------------------------------

    def register(self, handler, versions=None):
        """Serve ``handler.API_KEY``; ``versions`` overrides ``handler.VERSIONS``. A handler
        not providing :class:`IApiHandler` is refused here, not at its first request."""
        try:
            verifyObject(IApiHandler, handler)
        except Invalid as e:
            raise TypeError("not an API handler: %r: %s" % (handler, str(e).strip()))
        lo, hi = versions if versions is not None else handler.VERSIONS
        cls = messages.REQUESTS.get(handler.API_KEY)
        if cls is not None:
            lo = max(lo, cls.VALID_VERSIONS[0])
            hi = min(hi, cls.VALID_VERSIONS[1])
            resp = messages.RESPONSES[handler.API_KEY]
            hi = min(hi, resp.VALID_VERSIONS[1])
        if lo > hi:
            raise ValueError("no version of API %d can be served" % handler.API_KEY)
        self._handlers[handler.API_KEY] = _Registered(handler, (lo, hi))
        self._api_versions[handler.API_KEY] = (lo, hi)

    def api_versions(self):
        """``{api_key: (lo, hi)}``: the same dict on every call, updated in place by
        :meth:`register` (the network layer keeps it and reads it per request). Treat it as
        read-only."""
        return self._api_versions

    # -- config access -------------------------------------------------------------------

    def _config_changed(self, config):
        self.config = config
        # the broker's compression.type, read by every produce of a topic without an override
        # (an attribute: no config_value and KafkaConfig.__getitem__ calls per request)
        self.compression_type = self.config_value("compression.type", PRODUCER)
        # fetch.max.bytes, bounding every fetch (the same: an attribute read per request)
        self.fetch_max_bytes = int(self.config_value("fetch.max.bytes", fetch.DEFAULT_FETCH_MAX_BYTES))

    def config_value(self, name, default=None):
        """A typed broker config value, or ``default`` when the config doesn't know the name."""
        try:
            value = self.config[name]
        except (KeyError, TypeError, AttributeError):
            return default
        return default if value is None else value

    def run_blocking(self, fn, *args):
        """A Deferred of ``fn(*args)`` run in the broker's thread pool (the log manager's;
        inline without one): CPU-heavy work a handler must not do on the reactor."""
        if self.log_manager is None:
            return defer.maybeDeferred(fn, *args)
        return self.log_manager.run_blocking(fn, *args)

    @property
    def node_id(self):
        return self.metadata.node_id

    def now_ms(self):
        if self.clock is None:
            import time

            return int(time.time() * 1000)
        return int(self.clock.seconds() * 1000)

    # -- dispatch ------------------------------------------------------------------------

    def handle(self, request):
        """A Deferred firing with the :class:`Response` (see :meth:`handle_now`)."""
        result = self.handle_now(request)
        if type(result) is Response:
            return defer.succeed(result)
        if type(result) is DeferredAnswer:
            return result.deferred
        d = defer.Deferred()
        result.when_complete(d.callback, d.errback)
        return d

    def handle_now(self, request):
        """See :meth:`_dispatch`; with client quotas in force the answer is recorded against
        them first and carries its throttle time."""
        quotas = self.quotas
        if not quotas.enabled:
            if self.authorizer is None:  # (_dispatch's first steps inline: the common case)
                reg = self._handlers.get(request.api_key)
                if reg is not None:
                    return self._run_handler(reg, request)
            return self._dispatch(request)
        if request.api_key == 1:  # Fetch
            cap_fetch_size(quotas, request)
        started = time.perf_counter_ns()
        result = self._dispatch(request)
        handler_ns = time.perf_counter_ns() - started

        def throttle(response):
            return apply_throttle(quotas, request, response, handler_ns, self.now_ms())
        if type(result) is DeferredAnswer:
            result.deferred.addCallback(throttle)
            return result
        if type(result) is PendingResponse:
            return _ThrottledPending(result, throttle)
        return throttle(result)

    def _dispatch(self, request):
        """The :class:`Response` when the handler answers synchronously, else a pending answer
        (``when_complete(callback, errback)``): a :class:`PendingResponse` around the handler's
        own (a Fetch parked in the purgatory), or a :class:`DeferredAnswer` around a handler's
        Deferred.

        The request channel calls this, so the common synchronous answer allocates no Deferred,
        and a parked fetch is answered from the call that completes it without one."""
        reg = self._handlers.get(request.api_key)
        if reg is None:
            # The network layer rejects unknown keys first; if one slips through, close as Kafka does.
            log.error("no handler for API key {key}", key=request.api_key)
            return Response(None, close_connection=True)
        if self.authorizer is None or request.api_key in authz.UNCHECKED:
            return self._run_handler(reg, request)
        # Authorize what the request needs (one call; a Deferred parks the request), refuse it
        # whole when a gate says so, else run its handler, which filters per resource. (Here,
        # not in a method of its own: one call less on every request, 1% of a small produce.)
        plan = authz.ACTIONS.get(request.api_key)
        if plan is None:  # an API without authorization rules is refused (fail closed)
            return self._on_failure(Failure(KafkaError(errors.CLUSTER_AUTHORIZATION_FAILED, None)),
                                    request, reg.handler)
        try:
            decisions = authz.decide(self.authorizer, request, plan(self, request))
            if type(decisions) is authz.Decisions:  # decided at once: the common case
                return self._decided(decisions, reg, request)
        except Exception:
            return self._on_failure(Failure(), request, reg.handler)
        decisions.addCallback(self._decided, reg, request)
        decisions.addCallback(self._settled)
        decisions.addErrback(self._on_failure, request, reg.handler)
        return DeferredAnswer(decisions)

    def _run_handler(self, reg, request):
        try:
            result = reg.handler.handle(self, request)
        except Exception:
            return self._on_failure(Failure(), request, reg.handler)
        # a Response, then a parked operation, before the Deferred: Deferred is an ABC (an
        # Awaitable), whose isinstance is a Python call
        if type(result) is Response:
            return result
        if hasattr(result, "when_complete"):
            return PendingResponse(self, request, reg.handler, result)
        if isinstance(result, defer.Deferred):
            result.addCallback(_as_response)
            result.addErrback(self._on_failure, request, reg.handler)
            return DeferredAnswer(result)
        return _as_response(result)

    # -- authorization ---------------------------------------------------------------------

    def allowed(self, request, operation, resource_type, name):
        """Whether ``request``'s principal may do ``operation`` on the resource (True without an
        authorizer); handlers filtering per resource ask this."""
        if self.authorizer is None:
            return True
        return self.decisions(request).allowed(operation, resource_type, name)

    def decisions(self, request):
        """``request``'s :class:`authz.Decisions` (made now for a request that did not come
        through handle_now); a hot handler asks them directly, saving the call to allowed()."""
        decisions = request.authz
        if decisions is None:
            decisions = request.authz = authz.Decisions.of(self.authorizer, authz.request_context(request), (), ())
        return decisions

    def _decided(self, decisions, reg, request):
        request.authz = decisions
        gate = authz.GATES.get(request.api_key)
        if gate is not None:
            code = gate(self, request, decisions.allowed)
            if code is not None:
                return self._on_failure(Failure(KafkaError(code, None)), request, reg.handler)
        return self._run_handler(reg, request)

    @staticmethod
    def _settled(result):
        """A Deferred's result as a Response (a pending answer becomes a Deferred to chain on)."""
        if type(result) is DeferredAnswer:
            return result.deferred
        if type(result) is PendingResponse:
            d = defer.Deferred()
            result.when_complete(d.callback, d.errback)
            return d
        return result

    def _on_failure(self, failure, request, handler):
        exc = failure.value
        if isinstance(exc, KafkaError):
            code, message = exc.code, exc.message
        else:
            code, message = errors.UNKNOWN_SERVER_ERROR, None
            log.failure(
                "Error when handling request: clientId={client_id}, correlationId={corr}, "
                "api={api}, version={version}",
                failure, client_id=request.client_id, corr=request.correlation_id,
                api=messages.API_NAMES.get(request.api_key, request.api_key), version=request.api_version,
            )
        try:
            body = handler.error_response(request, code, message)
        except Exception:
            log.failure("building the error response failed")
            body = None
        if body is None:
            return Response(None, close_connection=True)
        return Response(body)

    # -- topic lifecycle -> partition logs -----------------------------------------------

    def delete_stray_logs(self):
        """At startup, before :meth:`create_missing_logs`: logs of topics deleted before a crash
        that came before their directories were renamed are deleted now; a deleted topic none
        of whose logs remain is forgotten. A Deferred, once renamed."""
        deleted = self.metadata.deleted_topic_ids
        stray = {}
        if deleted:  # (from what the log manager knows: no log is made for this)
            for (topic, p), topic_id in self.log_manager.partition_topic_ids().items():
                if topic_id in deleted and not self.metadata.contains_topic(topic):
                    stray.setdefault((topic, topic_id), []).append(p)
        waits = []
        for (topic, _), partitions in sorted(stray.items()):
            log.info("deleting {n} log(s) of deleted topic {topic}", n=len(partitions), topic=topic)
            waits.append(self.log_manager.delete_logs(topic, sorted(partitions)))
        d = defer.gatherResults(waits, consumeErrors=True)

        def forget(_):
            for topic_id in sorted(deleted):
                self.metadata.forget_deleted_topic(topic_id).addErrback(
                    lambda f: log.failure("forgetting a deleted topic failed", f))
        d.addCallback(forget)
        return d

    def _forget_deleted(self, _, topic_id):
        """Not waited on by the listener (see ClusterMetadata.forget_deleted_topic)."""
        d = self.metadata.forget_deleted_topic(topic_id)
        d.addErrback(lambda f: log.failure("forgetting a deleted topic failed", f))
        return _

    def create_missing_logs(self):
        """At startup, after ``log_manager.load_logs()``: a log for every known partition
        (a crash between persisting a topic and creating its logs leaves some missing)."""
        unavailable = 0
        for info in list(self.metadata.topics.values()):
            for p in range(info.num_partitions):
                if not self.log_manager.has_log(info.name, p):
                    try:
                        self.log_manager.get_or_create_log(info.name, p, info.topic_id,
                                                           info.configs, is_new=False)
                    except KafkaError:
                        unavailable += 1  # on an offline log dir, perhaps
        if unavailable:
            log.error("{n} partition(s) have no log while log dirs {dirs} are offline: they "
                      "answer KAFKA_STORAGE_ERROR", n=unavailable,
                      dirs=sorted(self.log_manager.offline_dirs))

    def _forget_answers(self, event, info):
        """A deleted topic's cached Metadata answers go with it."""
        from kafkatw.cluster.metadata import TOPIC_DELETED
        from kafkatw.server.handlers import metadata as metadata_handler

        if event == TOPIC_DELETED:
            metadata_handler.forget_topic(self.metadata, info.name)

    @staticmethod
    def _logs_not_made(failure, topic):
        """Logs whose dir failed (or every dir is offline) are offline partitions, as in
        Kafka: they answer KAFKA_STORAGE_ERROR, the others serve; one line, no traceback (the
        dir's failure was said where it happened)."""
        failure.trap(KafkaError)
        if failure.value.code != errors.KAFKA_STORAGE_ERROR:
            return failure
        log.error("some logs of {topic} are offline: {e}", topic=topic, e=failure.value)

    def _sync_logs(self, event, info):
        from kafkatw.cluster.metadata import TOPIC_CREATED, TOPIC_DELETED, TOPIC_PARTITIONS_ADDED

        if event in (TOPIC_CREATED, TOPIC_PARTITIONS_ADDED):
            # A topic of many partitions is published now, durable in the metadata (a restart
            # makes missing logs): the logs are made in the thread pool, and a partition used
            # before its log is attached has it made (or waited for) then. CreateTopics of
            # 2,000 partitions waited seconds for their files. A few are published with
            # their logs (tens of milliseconds; every log dir listing shows them at once).
            # Added partitions: the topic is still published with its old count here.
            first = 0
            if event == TOPIC_PARTITIONS_ADDED and info.name in self.metadata.topics:
                first = self.metadata.topics[info.name].num_partitions
            d = self.log_manager.create_logs(
                info.name, range(first, info.num_partitions), info.topic_id, info.configs,
                wait=info.num_partitions - first <= _CREATE_LOGS_BEFORE_ANSWER)
            return d.addErrback(self._logs_not_made, info.name)
        if event == TOPIC_DELETED:
            # the logs are forgotten at once, their directories renamed in the thread pool
            d = self.log_manager.delete_logs(info.name, range(info.num_partitions))
            self.log_manager.forget_topic(info.name)
            d.addCallback(self._forget_deleted, info.topic_id)
            if self.replica_manager is not None:
                for p in range(info.num_partitions):
                    self.replica_manager.forget_partition(info.name, p)
            return d


class _ThrottledPending:
    """A :class:`PendingResponse` whose response is recorded against the quotas first."""

    __slots__ = ("pending", "throttle")

    def __init__(self, pending, throttle):
        self.pending = pending
        self.throttle = throttle

    def when_complete(self, callback, errback):
        self.pending.when_complete(lambda response: callback(self.throttle(response)), errback)


class PendingResponse:
    """A handler's pending answer as the request channel takes it: ``when_complete(callback,
    errback)`` calls ``callback`` once with the :class:`Response` (a handler failure becomes the
    API's error response, as for a Deferred) or ``errback`` if even that failed."""

    __slots__ = ("apis", "request", "handler", "pending", "_callback", "_errback")

    def __init__(self, apis, request, handler, pending):
        self.apis = apis
        self.request = request
        self.handler = handler
        self.pending = pending

    def when_complete(self, callback, errback):
        # kept as fields, the handler's pending answer given bound methods: no closures and
        # cells per parked request (the operation drops its listener once it has told it)
        self._callback = callback
        self._errback = errback
        self.pending.when_complete(self._completed, self._failed)

    def _completed(self, result):
        self._callback(result if type(result) is Response else _as_response(result))

    def _failed(self, failure):
        try:
            response = self.apis._on_failure(failure, self.request, self.handler)
        except Exception:
            self._errback(Failure())
            return
        self._callback(response)


def _as_response(result):
    if isinstance(result, Response):
        return result
    return Response(result)


def throttle_response(body, throttle_time_ms):
    """Set ``throttle_time_ms`` on a body that has the field (quota hook; 0 without quotas)."""
    if hasattr(body, "throttle_time_ms"):
        body.throttle_time_ms = throttle_time_ms
    return body
