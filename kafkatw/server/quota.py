"""Client quota enforcement: rates measured as Kafka's ``Rate`` over ``quota.window.num`` samples
of ``quota.window.size.seconds``, and the throttle time that brings a client back to its quota.

Owns the sensors per metric-tag group and the per-entity counters (throttle time, bytes);
which quota applies is the ``IClientQuotaCallback``'s, muting the connection the network's.
"""

import attr

from kafkatw.protocol.messages import FetchResponse
from kafkatw.rate import Rate, throttle_time_ms
from kafkatw.security.quota import CLIENT_ID_TAG, USER_TAG, ClientQuotaType, DefaultQuotaCallback

#: Kafka drops sensors unused for an hour
INACTIVE_SENSOR_EXPIRATION_MS = 3600 * 1000


@attr.s(slots=True)
class EntityMetrics:
    """Plain counters per metric-tag group (for a metrics endpoint): what was recorded and
    how long its clients were throttled."""

    user = attr.ib()
    client_id = attr.ib()
    recorded_total = attr.ib(default=0.0)
    throttle_time_ms_total = attr.ib(default=0)
    throttle_count = attr.ib(default=0)
    last_rate = attr.ib(default=0.0)


class ClientQuotaManager:
    """Kafka's ``ClientQuotaManager`` for one quota type (produce, fetch, request, mutations).

    ``record_and_get_throttle_time_ms(principal, client_id, value, now_ms)`` records and
    returns how long the client must wait (0 when within its quota). With no quota for a
    client nothing is recorded. ``max_throttle_time_ms`` caps the result (the request quota
    caps at one window, as Kafka does).
    """

    def __init__(self, quota_type, callback, samples=11, window_seconds=1, max_throttle_time_ms=None):
        self.quota_type = quota_type
        self.callback = callback
        self.samples = samples
        self.window_ms = window_seconds * 1000
        self.max_throttle_time_ms = max_throttle_time_ms
        self._sensors = {}  # (user tag, client tag) -> (Rate, last used ms)
        self.metrics = {}  # (user tag, client tag) -> EntityMetrics
        self._next_expiry_ms = 0

    def update_windows(self, samples, window_seconds):
        """New ``quota.window.*``: measuring starts over, as Kafka's new sensors would."""
        self.samples = samples
        self.window_ms = window_seconds * 1000
        self._sensors.clear()

    def _tags(self, principal, client_id):
        tags = self.callback.quota_metric_tags(self.quota_type, principal, client_id or "")
        return (tags.get(USER_TAG, ""), tags.get(CLIENT_ID_TAG, ""))

    def quota_for(self, principal, client_id):
        """The quota in force for this client, or ``None``."""
        user, client = self._tags(principal, client_id)
        return self.callback.quota_limit(self.quota_type, {USER_TAG: user, CLIENT_ID_TAG: client})

    def _sensor(self, key, now_ms):
        entry = self._sensors.get(key)
        if entry is None:
            rate = Rate(self.samples, self.window_ms)
        else:
            rate = entry[0]
        self._sensors[key] = (rate, now_ms)
        return rate

    def record_and_get_throttle_time_ms(self, principal, client_id, value, now_ms):
        user, client = self._tags(principal, client_id)
        key = (user, client)
        if now_ms >= self._next_expiry_ms:  # also for clients without a quota (any more)
            self.expire(now_ms)
            self._next_expiry_ms = now_ms + 60000
        bound = self.callback.quota_limit(self.quota_type, {USER_TAG: user, CLIENT_ID_TAG: client})
        if bound is None:
            return 0
        rate = self._sensor(key, now_ms)
        rate.record(value, now_ms)
        m = self.metrics.get(key)
        if m is None:
            m = self.metrics[key] = EntityMetrics(user, client)
        m.recorded_total += value
        observed = rate.measure(now_ms)
        m.last_rate = observed
        if bound <= 0:
            throttle = self.window_ms if observed > 0 else 0
        elif observed <= bound:
            return 0
        else:
            throttle = throttle_time_ms(observed, bound, rate.window_size_ms(now_ms))
        if self.max_throttle_time_ms is not None:
            throttle = min(throttle, self.max_throttle_time_ms)
        if throttle > 0:
            m.throttle_time_ms_total += throttle
            m.throttle_count += 1
        return throttle

    def unrecord(self, principal, client_id, value, now_ms):
        """Take back a recorded value (a throttled fetch answers empty, as Kafka's
        ``unrecordQuotaSensor``)."""
        user, client = self._tags(principal, client_id)
        entry = self._sensors.get((user, client))
        if entry is not None:
            entry[0].record(-value, now_ms)
            self.metrics[(user, client)].recorded_total -= value

    def max_value_in_quota_window(self, principal, client_id):
        """The most one request may carry without certain throttling (caps fetch sizes)."""
        bound = self.quota_for(principal, client_id)
        if bound is None:
            return None
        return bound * (self.samples - 1) * self.window_ms / 1000.0

    def expire(self, now_ms):
        """Drop sensors and their counters unused for an hour (Kafka's sensor expiry), so
        clients that come and go with new ids do not accumulate; checked once a minute."""
        for key, (_, used) in list(self._sensors.items()):
            if now_ms - used >= INACTIVE_SENSOR_EXPIRATION_MS:
                del self._sensors[key]
                self.metrics.pop(key, None)
        for key in [k for k in self.metrics if k not in self._sensors]:
            del self.metrics[key]  # their sensors went with new quota windows

    def forget(self):
        """Drop every sensor and counter (no quota is left: nothing records any more, so
        nothing would expire them)."""
        self._sensors.clear()
        self.metrics.clear()


class QuotaManagers:
    """The broker's quota managers, one per :class:`ClientQuotaType`, sharing one callback.

    ``set_quota(entity, key, value)`` / ``remove_quota`` tell the callback; the managers read
    limits on every record, so a change is in force for the next request.
    """

    def __init__(self, callback, samples=11, window_seconds=1):
        self.callback = callback
        # Kafka records nothing while no quota exists (the default callback without entities)
        self._custom = not isinstance(callback, DefaultQuotaCallback)
        self._count = 0
        #: False while no quota can apply (the request path then skips quotas entirely); an
        #: attribute, not a property: every request reads it
        self.enabled = self._custom
        self.produce = ClientQuotaManager(ClientQuotaType.PRODUCE, callback, samples, window_seconds)
        self.fetch = ClientQuotaManager(ClientQuotaType.FETCH, callback, samples, window_seconds)
        self.request = ClientQuotaManager(ClientQuotaType.REQUEST, callback, samples, window_seconds,
                                          max_throttle_time_ms=window_seconds * 1000)
        self.mutations = ControllerMutationQuotaManager(callback, samples, window_seconds)
        self.ip_connection_rates = {}  # ip or None (default) -> connection_creation_rate
        self.by_type = {ClientQuotaType.PRODUCE: self.produce, ClientQuotaType.FETCH: self.fetch,
                        ClientQuotaType.REQUEST: self.request,
                        ClientQuotaType.CONTROLLER_MUTATION: self.mutations}

    def _recount(self):
        if not self._custom:
            self._count = sum(len(self.callback.entities(t)) for t in ClientQuotaType)
            self.enabled = self._count > 0
            if self._count == 0:
                for manager in self.by_type.values():
                    manager.forget()

    def snapshot(self):
        """Plain per-entity counters for a metrics endpoint: ``{quota key: [{"user", "client-id",
        "recorded_total", "throttle_time_ms_total", "throttle_count", "rate"}]}``; rate is the
        last measured (bytes/s or percent), recorded_total bytes, percent-seconds or partitions."""
        out = {}
        for quota_type, manager in self.by_type.items():
            out[quota_type.value] = [
                {"user": m.user, "client-id": m.client_id, "recorded_total": m.recorded_total,
                 "throttle_time_ms_total": m.throttle_time_ms_total, "throttle_count": m.throttle_count,
                 "rate": m.last_rate}
                for m in manager.metrics.values()]
        return out

    @classmethod
    def from_config(cls, config, callback):
        return cls(callback, samples=int(config["quota.window.num"]),
                   window_seconds=int(config["quota.window.size.seconds"]))

    def ip_connection_rate(self, ip):
        """The ``connection_creation_rate`` of ``ip``: its own entity, else the default ip
        entity, else None (the network layer asks at each accept)."""
        rates = self.ip_connection_rates
        if not rates:
            return None
        value = rates.get(ip)
        return value if value is not None else rates.get(None)

    def set_ip_quota(self, ip, value):
        """``ip`` (None: the default ip entity) gets ``value`` connections a second, or none."""
        if value is None:
            self.ip_connection_rates.pop(ip, None)
        else:
            self.ip_connection_rates[ip] = float(value)

    def set_quota(self, entity, key, value):
        self.callback.update_quota(ClientQuotaType(key), entity, value)
        self._recount()

    def remove_quota(self, entity, key):
        self.callback.remove_quota(ClientQuotaType(key), entity)
        self._recount()

    def load(self, entries):
        """Apply persisted ``{entity: {key: value}}`` (at start-up)."""
        for entity, values in entries.items():
            for key, value in values.items():
                if key in ClientQuotaType._value2member_map_:
                    self.set_quota(entity, key, value)
                elif key == "connection_creation_rate":
                    self.set_ip_quota(entity.as_dict().get("ip"), value)


#: never counted against quotas, as Kafka answers them with sendResponseExemptThrottle: the
#: SASL exchange and the inter-broker (cluster action) requests a broker sends another
EXEMPT_API_KEYS = frozenset([
    17, 36,  # SaslHandshake, SaslAuthenticate
    4, 5, 6, 7, 27, 56,  # LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown, WriteTxnMarkers, AlterPartition
])
PRODUCE_KEY, FETCH_KEY = 0, 1
#: request_percentage is a percentage of one handler thread per second (Kafka's nanosToPercentage)
NANOS_TO_PERCENTAGE = 100.0 / 1e9


#: where a FetchResponse.Rows partition row holds its aborted transactions and records
_PARTITION_FIELDS = [f[0] for f in FetchResponse.PartitionData.SCHEMA]
_ABORTED = _PARTITION_FIELDS.index("aborted_transactions")
_RECORDS = _PARTITION_FIELDS.index("records")


def fetch_response_bytes(body):
    """The record bytes a Fetch response carries (``FileRegion.count`` or ``len``); ``body`` is
    the handler's ``FetchResponse.Rows`` (or a ``FetchResponse``)."""
    total = 0
    rows = type(body) is FetchResponse.Rows
    for topic in body.responses or ():
        for partition in (topic[2] if rows else topic.partitions) or ():
            records = partition[_RECORDS] if rows else partition.records
            if records is None:
                continue
            count = getattr(records, "count", None)
            total += count if isinstance(count, int) else len(records)
    return total


def without_records(body):
    """Empty the records of a Fetch response (a throttled fetch: the client asks again from
    the same offsets; high watermarks and errors stay, so a fetch session stays in step)."""
    if type(body) is FetchResponse.Rows:
        def emptied(p):
            p = list(p)
            p[_RECORDS] = b""
            if p[_ABORTED]:
                p[_ABORTED] = []
            return tuple(p)

        body.responses = [(*t[:2], [emptied(p) for p in t[2]]) for t in body.responses]
        return
    for topic in body.responses or ():
        for partition in topic.partitions or ():
            partition.records = b""
            if partition.aborted_transactions:
                partition.aborted_transactions = []


def cap_fetch_size(managers, request):
    """Kafka's cap of a consumer's fetch at what its quota lets through in one window set
    (``quota * (quota.window.num - 1) * quota.window.size.seconds``), so one response is not
    bound to be throttled; a follower's fetch is not capped."""
    body = request.body
    if getattr(body, "replica_id", -1) >= 0 or getattr(getattr(body, "replica_state", None), "replica_id", -1) >= 0:
        return
    most = managers.fetch.max_value_in_quota_window(request.context.principal, request.client_id or "")
    if most is not None and body.max_bytes > most:
        body.max_bytes = max(1, int(most))


def apply_throttle(managers, request, response, handler_ns, now_ms):
    """Record ``request`` against the quotas of its principal and client id and, when one is
    exceeded, set ``throttle_time_ms`` on the response body and on ``response`` (the
    connection then stays muted that long, KIP-219). Returns ``response``.

    Produce counts the request's bytes, Fetch the records it returns (a follower's fetch is
    not counted), every API but the exempt ones its handler time as ``request_percentage``.
    """
    api_key = request.api_key
    if api_key in EXEMPT_API_KEYS:
        return response
    principal = request.context.principal
    client_id = request.client_id or ""
    throttle = managers.request.record_and_get_throttle_time_ms(
        principal, client_id, handler_ns * NANOS_TO_PERCENTAGE, now_ms)
    body = response.body
    if api_key == PRODUCE_KEY:
        throttle = max(throttle, managers.produce.record_and_get_throttle_time_ms(
            principal, client_id, request.size, now_ms))
    elif api_key == FETCH_KEY and body is not None and getattr(request.body, "replica_id", -1) < 0 \
            and getattr(getattr(request.body, "replica_state", None), "replica_id", -1) < 0:
        fetch = managers.fetch
        recorded = None
        if fetch.quota_for(principal, client_id) is not None:
            recorded = fetch_response_bytes(body)
            throttle = max(throttle, fetch.record_and_get_throttle_time_ms(principal, client_id, recorded, now_ms))
        if throttle > 0:
            # as Kafka: a fetch throttled by either quota returns no records, so they are not counted
            if recorded is not None:
                fetch.unrecord(principal, client_id, recorded, now_ms)
            without_records(body)
    if throttle > response.throttle_time_ms:  # the larger of this and a handler's own (mutations)
        if body is not None and hasattr(body, "throttle_time_ms"):
            body.throttle_time_ms = throttle
        response.throttle_time_ms = throttle
    return response


THROTTLING_QUOTA_EXCEEDED_MESSAGE = "The throttling quota has been exceeded."


class ControllerMutationQuotaManager:
    """Kafka's ``ControllerMutationQuotaManager`` (KIP-599): partition creations and deletions
    per second (``controller_mutation_rate``) in a token bucket per metric-tag group."""

    def __init__(self, callback, samples=11, window_seconds=1):
        self.callback = callback
        self.samples = samples
        self.window_ms = window_seconds * 1000
        self._buckets = {}
        self.metrics = {}
        self._used = {}  # key -> last used ms: buckets expire as sensors do
        self._next_expiry_ms = 0

    def expire(self, now_ms):
        """Drop buckets and counters unused for an hour (as ClientQuotaManager.expire)."""
        for key, used in list(self._used.items()):
            if now_ms - used >= INACTIVE_SENSOR_EXPIRATION_MS:
                del self._used[key]
                self._buckets.pop(key, None)
                self.metrics.pop(key, None)

    def forget(self):
        self._buckets.clear()
        self.metrics.clear()
        self._used.clear()

    def quota(self, principal, client_id, now_ms, strict):
        """A :class:`ControllerMutationQuota` for one request (``strict``: the request's
        version can carry THROTTLING_QUOTA_EXCEEDED, so a topic over the quota is refused)."""
        tags = self.callback.quota_metric_tags(ClientQuotaType.CONTROLLER_MUTATION, principal, client_id or "")
        key = (tags.get(USER_TAG, ""), tags.get(CLIENT_ID_TAG, ""))
        if now_ms >= self._next_expiry_ms:
            self.expire(now_ms)
            self._next_expiry_ms = now_ms + 60000
        bound = self.callback.quota_limit(ClientQuotaType.CONTROLLER_MUTATION,
                                          {USER_TAG: key[0], CLIENT_ID_TAG: key[1]})
        if bound is None:
            return UNBOUNDED_MUTATIONS
        self._used[key] = now_ms
        bucket = self._buckets.get(key)
        if bucket is None or bucket.samples_max != self.samples or bucket.window_ms != self.window_ms:
            from kafkatw.rate import TokenBucket
            bucket = self._buckets[key] = TokenBucket(self.samples, self.window_ms)
        m = self.metrics.get(key)
        if m is None:
            m = self.metrics[key] = EntityMetrics(key[0], key[1])
        return ControllerMutationQuota(bucket, bound, now_ms, strict, m)


class ControllerMutationQuota:
    """The mutation quota of one request: ``record(n)`` before creating or deleting ``n``
    partitions (raises KafkaError(THROTTLING_QUOTA_EXCEEDED) in strict mode once the bucket
    is empty), then ``throttle_time_ms()`` for the response."""

    def __init__(self, bucket, bound, now_ms, strict, metrics):
        self.bucket = bucket
        self.bound = bound
        self.now_ms = now_ms
        self.strict = strict
        self.metrics = metrics

    def record(self, permits):
        from kafkatw.protocol import errors
        from kafkatw.protocol.errors import KafkaError

        if self.strict and self.bucket.measure(self.bound, self.now_ms) < 0:
            raise KafkaError(errors.THROTTLING_QUOTA_EXCEEDED, THROTTLING_QUOTA_EXCEEDED_MESSAGE)
        self.bucket.record(permits, self.bound, self.now_ms)
        self.metrics.recorded_total += permits

    def throttle_time_ms(self):
        throttle = self.bucket.throttle_time_ms(self.bucket.measure(self.bound, self.now_ms), self.bound)
        if throttle > 0:
            self.metrics.throttle_time_ms_total += throttle
            self.metrics.throttle_count += 1
        return throttle


class _Unbounded:
    def record(self, permits):
        pass

    def throttle_time_ms(self):
        return 0


UNBOUNDED_MUTATIONS = _Unbounded()


def mutation_quota(apis, request, strict_from_version):
    """The request's controller mutation quota (strict from ``strict_from_version``)."""
    quotas = apis.quotas
    if not quotas.enabled:
        return UNBOUNDED_MUTATIONS
    return quotas.mutations.quota(request.context.principal, request.client_id, apis.now_ms(),
                                  request.api_version >= strict_from_version)


def with_mutation_throttle(body, quota):
    """``body`` as a Response carrying the mutation quota's throttle time (body and mute)."""
    from kafkatw.network.request import Response

    throttle = quota.throttle_time_ms()
    if throttle <= 0:
        return body
    body.throttle_time_ms = throttle
    return Response(body, throttle_time_ms=throttle)
