"""Quiet logging for background work that keeps failing (offsets topic creation, retention,
checkpoints, flushes, metadata writes): the first failure is logged with its cause, repeats
at an increasing interval as one line with a count, and a counter keeps every failure.

It owns only the decision whether to log and the counters; it does not retry, schedule or
know what the work is. Imports nothing of the broker, so every layer may use it.
"""

from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

log = Logger(namespace="kafkatw.background")

#: First repeat logged after this many seconds of failing; each later one waits twice as long.
INITIAL_INTERVAL_S = 10.0
#: The longest wait between two "still failing" lines.
MAX_INTERVAL_S = 600.0


def _cause(reason):
    value = reason.value if isinstance(reason, Failure) else reason
    text = str(value)
    name = type(value).__name__
    return "%s: %s" % (name, text) if text else name


def _expected(reason):
    """An I/O error or a Kafka error code says all there is to say in one line; anything else
    is a bug whose first traceback is worth having."""
    value = reason.value if isinstance(reason, Failure) else reason
    return isinstance(value, OSError) or hasattr(value, "code")


class FailingTask:
    """The failure state of one named piece of background work.

    Call :meth:`failed` with the Failure or exception of each failed run and
    :meth:`succeeded` after a good one. ``clock`` has ``seconds()`` (the reactor, a
    ``task.Clock`` in tests; None: the global reactor). ``failures`` counts every failure (the metric), ``consecutive``
    those since the last success, ``logged`` the lines written for them."""

    def __init__(self, name, clock, initial_interval=INITIAL_INTERVAL_S,
                 max_interval=MAX_INTERVAL_S, logger=None):
        self.name = name
        self.clock = clock
        self.initial_interval = initial_interval
        self.max_interval = max_interval
        self.log = logger if logger is not None else log
        self.failures = 0
        self.consecutive = 0
        self.logged = 0
        self._interval = initial_interval
        self._next_log_at = None
        self._unlogged = 0

    def failed(self, reason=None):
        """Count one failure; log it if it is the first of a run or the interval is over.
        ``reason`` is a Failure, an exception, or None for the exception being handled.
        Returns None, so it can end an errback chain."""
        if reason is None:
            reason = Failure()
        self.failures += 1
        self.consecutive += 1
        clock = self.clock
        if clock is None:
            from twisted.internet import reactor as clock
        now = clock.seconds()
        if self.consecutive == 1:
            self._interval = self.initial_interval
            self._next_log_at = now + self._interval
            self._unlogged = 0
            self.logged += 1
            if _expected(reason):
                self.log.error("{task} failed: {cause} (repeats are logged at increasing "
                               "intervals)", task=self.name, cause=_cause(reason))
            else:
                failure = reason if isinstance(reason, Failure) else Failure(reason)
                self.log.failure("{task} failed (repeats are logged at increasing intervals)",
                                 failure, LogLevel.error, task=self.name)
            return None
        self._unlogged += 1
        if now >= self._next_log_at:
            self.logged += 1
            self.log.error("{task} still failing: {n} more failure(s) in the last {s:.0f} s, "
                           "{total} in a row; last cause: {cause}", task=self.name,
                           n=self._unlogged, s=self._interval, total=self.consecutive,
                           cause=_cause(reason))
            self._unlogged = 0
            self._interval = min(self._interval * 2, self.max_interval)
            self._next_log_at = now + self._interval
        return None

    def succeeded(self):
        """A good run: if it ends a run of failures, say so once."""
        if self.consecutive:
            self.log.info("{task} succeeded again after {n} failure(s)", task=self.name,
                          n=self.consecutive)
            self.consecutive = 0
            self._unlogged = 0
            self._next_log_at = None


class FailingTasks:
    """The :class:`FailingTask` of each name, made on first use, with their counters for a
    metrics exporter (``snapshot()``)."""

    def __init__(self, clock, **kwargs):
        self.clock = clock
        self._kwargs = kwargs
        self._tasks = {}

    def __getitem__(self, name):
        task = self._tasks.get(name)
        if task is None:
            task = self._tasks[name] = FailingTask(name, self.clock, **self._kwargs)
        return task

    def snapshot(self):
        """name -> total failures, for every task that ever failed."""
        return {name: t.failures for name, t in self._tasks.items() if t.failures}
