"""Kafka's sampled ``Rate`` (``quota.window.num`` samples of ``quota.window.size.seconds``) and
``QuotaUtils.throttleTime``: what client quotas and connection creation rates are measured with.

Imports nothing of the broker, so the network layer (connection quotas) and the server layer
(client quotas) share it; which quota applies and what throttling does is theirs.
"""


class _Sample:
    __slots__ = ("value", "start_ms")

    def __init__(self, start_ms):
        self.value = 0.0
        self.start_ms = start_ms


class Rate:
    """Kafka's ``Rate`` over a ``SampledStat`` of ``samples`` windows of ``window_ms``.

    The rate is the sum of the live samples divided by the elapsed time since the oldest,
    never less than ``samples - 1`` full windows (so a first burst is not divided by ~0).
    """

    def __init__(self, samples, window_ms):
        self.samples_max = samples
        self.window_ms = window_ms
        self._samples = []
        self._current = -1

    def _purge(self, now_ms):
        expire_age = self.samples_max * self.window_ms
        for s in self._samples:
            if now_ms - s.start_ms >= expire_age:
                s.value = 0.0
                s.start_ms = now_ms

    def record(self, value, now_ms):
        if self._current < 0:
            self._samples.append(_Sample(now_ms))
            self._current = 0
        sample = self._samples[self._current]
        if now_ms >= sample.start_ms + self.window_ms:
            self._current = (self._current + 1) % self.samples_max
            if self._current >= len(self._samples):
                self._samples.append(_Sample(now_ms))
            else:
                self._samples[self._current].value = 0.0
                self._samples[self._current].start_ms = now_ms
            sample = self._samples[self._current]
        sample.value += value

    def _oldest(self, now_ms):
        if not self._samples:
            return None
        return min(self._samples, key=lambda s: s.start_ms)

    def window_size_ms(self, now_ms):
        """Kafka's ``Rate.windowSize``: elapsed time since the oldest sample, at least
        ``samples - 1`` whole windows."""
        self._purge(now_ms)
        oldest = self._oldest(now_ms)
        elapsed = now_ms - (oldest.start_ms if oldest is not None else now_ms)
        full = int(elapsed // self.window_ms)
        minimum = self.samples_max - 1
        if full < minimum:
            elapsed += (minimum - full) * self.window_ms
        return elapsed

    def measure(self, now_ms):
        """Units per second."""
        self._purge(now_ms)
        total = sum(s.value for s in self._samples)
        return total / (self.window_size_ms(now_ms) / 1000.0)


def throttle_time_ms(observed, bound, window_ms):
    """Kafka's ``QuotaUtils.throttleTime``: the delay X with observed * W / (W + X) = bound."""
    return int(round((observed - bound) / bound * window_ms))


class TokenBucket:
    """Kafka's ``TokenBucket`` (KIP-599): ``quota`` tokens a second up to a burst of
    ``quota * samples * window``; a record takes tokens and may leave the bucket negative.
    It starts full."""

    def __init__(self, samples, window_ms):
        self.samples_max = samples
        self.window_ms = window_ms
        self.tokens = None
        self.last_ms = None

    def _refill(self, quota, now_ms):
        burst = quota * self.samples_max * self.window_ms / 1000.0
        if self.tokens is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + quota * max(0, now_ms - self.last_ms) / 1000.0)
        self.last_ms = now_ms

    def record(self, value, quota, now_ms):
        self._refill(quota, now_ms)
        self.tokens -= value

    def measure(self, quota, now_ms):
        self._refill(quota, now_ms)
        return self.tokens

    @staticmethod
    def throttle_time_ms(tokens, quota):
        """Time until a negative bucket is back to zero (Kafka's ControllerMutationQuotaManager)."""
        return int(round(-tokens / quota * 1000)) if tokens < 0 else 0
