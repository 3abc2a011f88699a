"""Counters of the network layer, kept for later export (Kafka's RequestMetrics/SocketServer gauges).

Owns plain numbers only; nothing here formats or exports them.
"""

import collections


class NetworkMetrics:
    """Request queue size, per-API request counts and times, connections, bytes."""

    def __init__(self):
        self.request_queue_size = 0
        self.requests_total = collections.Counter()  # api name -> completed requests
        self.request_time_ms_total = collections.Counter()  # api name -> sum of totalTimeMs
        self.connections = collections.Counter()  # listener name -> open connections
        self.connections_created = collections.Counter()
        self.connections_closed = collections.Counter()
        self.connections_rejected = collections.Counter()  # listener name -> refused by quotas
        # listener name -> times accepting paused for a connection creation rate (KIP-612)
        self.connection_creation_throttles = collections.Counter()
        self.bytes_in = 0
        self.bytes_out = 0
        self.invalid_frames = 0
        # SASL (listener name -> count), Kafka's successful/failed-(re)authentication-total
        self.successful_authentication = collections.Counter()
        self.failed_authentication = collections.Counter()
        self.successful_reauthentication = collections.Counter()
        self.failed_reauthentication = collections.Counter()
        self.expired_connections_killed = 0

    def record_request(self, api_name, total_time_ms):
        self.requests_total[api_name] += 1
        self.request_time_ms_total[api_name] += total_time_ms

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
