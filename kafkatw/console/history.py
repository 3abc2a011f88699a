"""Short histories for the console's charts: each topic's message rate (a sparkline) and each
group's total lag over time, in memory, bounded.

Owns sampling the broker's per-topic message counters on a timer (``clock``: a reactor or
``task.Clock``) and keeping lag points the group views compute; it asks nothing itself and
forgets everything at a restart (a metrics system keeps long histories; see /metrics).
"""

import collections

from twisted.internet import task

#: Points kept per topic and per group (at the default 5 s interval: 10 minutes).
POINTS = 120


class History:
    def __init__(self, clock, counters, interval=5.0, points=POINTS):
        """``counters()`` -> ``{topic: messages appended so far}`` (the broker's topic stats)."""
        self.clock = clock
        self.counters = counters
        self.interval = interval
        self.points = points
        self._last = None  # (time, {topic: count})
        self._rates = {}  # topic -> deque of (time, messages per second)
        self._lags = {}  # group -> deque of (time, total lag)
        self._loop = None

    def start(self):
        self._loop = task.LoopingCall(self.sample)
        self._loop.clock = self.clock
        self._loop.start(self.interval, now=True)

    def stop(self):
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    def sample(self):
        now = self.clock.seconds()
        counts = dict(self.counters())
        last = self._last
        self._last = (now, counts)
        if last is None or now <= last[0]:
            return
        elapsed = now - last[0]
        before = last[1]
        for topic in set(self._rates) - set(counts):
            del self._rates[topic]  # deleted topic
        stale = now - self.points * self.interval
        for group in [g for g, points in self._lags.items() if points[-1][0] < stale]:
            del self._lags[group]  # not viewed for a whole window (or deleted): else kept for ever
        for topic, count in counts.items():
            rate = max(0, count - before.get(topic, 0)) / elapsed
            points = self._rates.get(topic)
            if points is None:
                points = self._rates[topic] = collections.deque(maxlen=self.points)
            points.append((round(now, 3), round(rate, 3)))

    def topic_rates(self, topic):
        """``[[time, messages/s], ...]`` oldest first."""
        return [list(p) for p in self._rates.get(topic, ())]

    def record_lag(self, group, total, min_interval=1.0):
        """A group's total lag now (kept at most once per ``min_interval`` seconds)."""
        now = self.clock.seconds()
        points = self._lags.get(group)
        if points is None:
            points = self._lags[group] = collections.deque(maxlen=self.points)
        if points and now - points[-1][0] < min_interval:
            points[-1] = (points[-1][0], total)
            return
        points.append((round(now, 3), total))

    def lag_history(self, group):
        return [list(p) for p in self._lags.get(group, ())]
