"""Kafka's ReplicationQuotaManager: a bytes/s bound on replication traffic of throttled
partitions, one for the leader side (bytes sent to followers not in the ISR) and one for the
follower side (bytes fetched for replicas not in the ISR), with the throttled partitions named
by the topic configs ``leader.replication.throttled.replicas`` /
``follower.replication.throttled.replicas`` (``partition:broker`` pairs, or ``*``).

It measures and answers "throttle this one now?"; the fetch paths decide what skipping means.
The rate is a token bucket holding at most one window's worth (``replication.quota.window.
size.seconds``), empty when the rate is set, so a throttled move never runs faster than the bound.
"""

from kafkatw.config.types import LONG_MAX
from kafkatw.rate import TokenBucket

LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
ALL = "*"
UNLIMITED = LONG_MAX  # the rates' default: no throttle


def parse_throttled_replicas(value, broker_id):
    """The partitions a throttled-replicas value names for ``broker_id``: a frozenset of
    partition numbers, or ALL. (The config's validator refused anything else.)"""
    if isinstance(value, (list, tuple)):
        value = ",".join(value)
    value = (value or "").strip()
    if value == ALL:
        return ALL
    out = set()
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        partition, _, broker = item.partition(":")
        if int(broker) == broker_id:
            out.add(int(partition))
    return frozenset(out)


class ReplicationQuotaManager:
    """One side's quota. ``topic_configs(topic)`` answers a topic's config overrides;
    ``config_name`` is the throttled-replicas config of this side; ``clock_ms()`` the time."""

    def __init__(self, broker_id, topic_configs, config_name, clock_ms, rate=LONG_MAX, window_s=1):
        self.broker_id = broker_id
        self._topic_configs = topic_configs
        self.config_name = config_name
        self._clock_ms = clock_ms
        self.window_ms = window_s * 1000
        self._parsed = {}  # topic -> (config value, parsed)
        self.update_quota(rate)

    def update_quota(self, rate):
        """A new rate, starting from an empty bucket: from now on no interval sends more than
        the rate allows (plus the one fetch that finds the bucket not yet negative)."""
        self.rate = rate
        # an attribute, not a property: every follower read and parked-fetch check asks it
        self.unlimited = rate >= LONG_MAX
        self._bucket = TokenBucket(1, self.window_ms)
        if not self.unlimited:
            self._bucket.record(rate * self.window_ms / 1000.0, rate, self._clock_ms())

    def is_throttled(self, topic, partition):
        value = self._topic_configs(topic).get(self.config_name)
        if not value:
            return False
        cached = self._parsed.get(topic)
        if cached is None or cached[0] != value:
            try:
                parsed = parse_throttled_replicas(value, self.broker_id)
            except ValueError:
                parsed = frozenset()
            cached = self._parsed[topic] = (value, parsed)
        return cached[1] is ALL or partition in cached[1]

    def throttles(self, topic, partition, in_sync):
        """Whether replication of this partition to (or from) a replica counts against the
        quota: a bound is set, the replica is not in the ISR, the partition is named."""
        return not self.unlimited and not in_sync and self.is_throttled(topic, partition)

    def is_quota_exceeded(self):
        return not self.unlimited and self._bucket.measure(self.rate, self._clock_ms()) < 0

    def record(self, nbytes):
        if not self.unlimited and nbytes:
            self._bucket.record(nbytes, self.rate, self._clock_ms())
