"""Counters of the network layer, kept for later export (Kafka's RequestMetrics/SocketServer gauges).

Owns plain numbers only; nothing here formats or exports them.
"""

import bisect
import collections

#: The request log's times, in Kafka's RequestMetrics order (histogram names without "Ms").
REQUEST_TIME_FIELDS = ("requestQueueTimeMs", "localTimeMs", "remoteTimeMs", "throttleTimeMs",
                       "responseQueueTimeMs", "sendTimeMs", "totalTimeMs")
#: Upper bounds (ms) of the request time histogram buckets; a last one is +Inf.
REQUEST_TIME_BUCKETS_MS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0,
                           1000.0, 2500.0, 5000.0, 10000.0, 30000.0)


class RequestTimeHistograms:
    """Per API, one histogram per request log time: bucket counts (not cumulative) and sums."""

    def __init__(self, buckets=REQUEST_TIME_BUCKETS_MS):
        self.buckets = tuple(buckets)
        self.by_api = {}  # api name -> ([[count per bucket + Inf] per field], [sum per field])

    def observe(self, api_name, times):
        """``times``: the request log's dict of times (ms) for one completed request."""
        entry = self.by_api.get(api_name)
        if entry is None:
            n = len(self.buckets) + 1
            entry = self.by_api[api_name] = ([[0] * n for _ in REQUEST_TIME_FIELDS],
                                             [0.0] * len(REQUEST_TIME_FIELDS))
        counts, sums = entry
        buckets = self.buckets
        for i, field in enumerate(REQUEST_TIME_FIELDS):
            value = times[field]
            counts[i][bisect.bisect_left(buckets, value)] += 1
            sums[i] += value


class Counts(dict):
    """A count per key, 0 for a key never counted (as ``collections.Counter`` reads, without
    storing it): for the counts every request bumps, as ``+=`` on a ``Counter`` costs ~1.7k
    instructions and on this ~0.9k (a Counter item's read and write take a slower path)."""

    __slots__ = ()

    def __missing__(self, key):
        return 0


class _ApiRequests:
    """One API's completed requests: a count per version and the sum of their totalTimeMs."""

    __slots__ = ("versions", "time_ms")

    def __init__(self):
        self.versions = Counts()  # version (None when not given) -> completed requests
        self.time_ms = 0


class NetworkMetrics:
    """Request queue size, per-API request counts and times, connections, bytes.

    ``request_times=True`` also keeps a histogram of each request log time per API (a few
    microseconds per request, so only when something exports them)."""

    def __init__(self, request_times=False):
        self.request_queue_size = 0
        # api name -> _ApiRequests: a request bumps one count and one sum, found with one look-up
        # (the per-API, per-version and time totals are read from them when asked)
        self._by_api = {}
        self.request_times = RequestTimeHistograms() if request_times else None
        self.connections = collections.Counter()  # listener name -> open connections
        self.connections_created = collections.Counter()
        self.connections_closed = collections.Counter()
        self.connections_rejected = collections.Counter()  # listener name -> refused by quotas
        # listener name -> times accepting paused for a connection creation rate (KIP-612)
        self.connection_creation_throttles = collections.Counter()
        self.bytes_in = 0
        self.bytes_out = 0
        self.invalid_frames = 0
        # SASL and TLS (listener name -> count), Kafka's successful/failed-(re)authentication-total;
        # a refused TLS handshake counts as a failed authentication, as in Kafka
        self.successful_authentication = collections.Counter()
        self.failed_authentication = collections.Counter()
        self.successful_reauthentication = collections.Counter()
        self.failed_reauthentication = collections.Counter()
        self.expired_connections_killed = 0

    @property
    def requests_total(self):
        """api name -> completed requests (its versions' counts summed when read)."""
        return Counts({api: sum(entry.versions.values()) for api, entry in self._by_api.items()})

    @property
    def requests_by_version(self):
        """(api name, version) -> completed requests (those recorded with a version)."""
        return Counts({(api, version): n for api, entry in self._by_api.items()
                       for version, n in entry.versions.items() if version is not None})

    @property
    def request_time_ms_total(self):
        """api name -> sum of totalTimeMs."""
        return Counts({api: entry.time_ms for api, entry in self._by_api.items()})

    def record_request(self, api_name, total_time_ms, version=None, times=None):
        """One completed request."""
        try:
            entry = self._by_api[api_name]
        except KeyError:
            entry = self._by_api[api_name] = _ApiRequests()
        entry.versions[version] += 1
        entry.time_ms += total_time_ms
        if times is not None and self.request_times is not None:
            self.request_times.observe(api_name, times)

    def snapshot(self):
        """A plain dict of the current values (for exporters and tests)."""
        return {
            "request_queue_size": self.request_queue_size,
            "requests_total": dict(self.requests_total),
            "request_time_ms_total": dict(self.request_time_ms_total),
            "connections": dict(self.connections),
            "connections_created": dict(self.connections_created),
            "connections_closed": dict(self.connections_closed),
            "connections_rejected": dict(self.connections_rejected),
            "connection_creation_throttles": dict(self.connection_creation_throttles),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "invalid_frames": self.invalid_frames,
            "successful_authentication": dict(self.successful_authentication),
            "failed_authentication": dict(self.failed_authentication),
            "successful_reauthentication": dict(self.successful_reauthentication),
            "failed_reauthentication": dict(self.failed_reauthentication),
            "expired_connections_killed": self.expired_connections_killed,
        }
