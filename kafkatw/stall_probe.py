"""The reactor stall probe: a timer that asks to run every few milliseconds and logs how late
it ran, so work that holds the reactor thread (an fsync, a long loop) shows up as a number.

It owns the measurement, its log line and reading that line back (:class:`StallLog`); it does
not know what stalled the reactor.
Enabled by ``kafkatw.reactor.stall.probe.ms`` (off by default; tests and diagnosis turn it on).
"""

import os
import re

from twisted.logger import Logger

log = Logger(namespace="kafkatw.stall_probe")

#: The log line tests and operators grep for; ``{late_ms}`` is the lateness in whole ms.
STALL_FORMAT = "reactor stall: {late_ms} ms"


class StallProbe:
    """Asks ``reactor`` for a call every ``interval_ms``; a call that comes later than that by
    at least ``interval_ms`` more is a stall: logged (``STALL_FORMAT``) and kept in
    ``max_late_ms``. The reactor runs timers before I/O in each iteration, so a stall in one
    iteration is logged at the start of the next."""

    def __init__(self, reactor, interval_ms):
        if interval_ms <= 0:
            raise ValueError("stall probe interval must be positive, got %r" % (interval_ms,))
        self._reactor = reactor
        self.interval = interval_ms / 1000.0
        self.max_late_ms = 0
        self.stalls = 0
        self._due = None
        self._call = None

    def start(self):
        log.info("stall probe every {interval_ms} ms", interval_ms=int(self.interval * 1000))
        self._schedule()

    def stop(self):
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    @property
    def running(self):
        return self._call is not None

    def _schedule(self):
        self._due = self._reactor.seconds() + self.interval
        self._call = self._reactor.callLater(self.interval, self._tick)

    def _tick(self):
        late_ms = int((self._reactor.seconds() - self._due) * 1000)
        if late_ms >= self.interval * 1000:
            self.stalls += 1
            self.max_late_ms = max(self.max_late_ms, late_ms)
            log.warn(STALL_FORMAT, late_ms=late_ms)
        self._schedule()


_STALL_LINE = re.compile(r"reactor stall: (\d+) ms")


class StallLog:
    """Reads a broker's stall lines back from its log file (tests, benchmarks): ``mark()``
    remembers the end of the file, ``stalls()`` lists the lateness of each stall logged since.
    twistd rotates its log file every 1 MB (``<path>.1`` is the newest rotated file): what
    was written since the mark is read across the files rotated since, not only the last."""

    def __init__(self, path):
        self.path = path
        self.start = 0
        self.rotated = 0

    def _rotated(self):
        n = 0
        while os.path.exists("%s.%d" % (self.path, n + 1)):
            n += 1
        return n

    def mark(self):
        self.rotated = self._rotated()
        self.start = os.path.getsize(self.path) if os.path.exists(self.path) else 0
        return self

    def text(self):
        since = self._rotated() - self.rotated  # the marked file is now <path>.<since>
        parts = []
        for n in range(since, -1, -1):
            name = "%s.%d" % (self.path, n) if n else self.path
            if not os.path.exists(name):
                continue
            with open(name, encoding="utf-8", errors="replace") as f:
                if n == since:
                    f.seek(self.start)
                parts.append(f.read())
        return "".join(parts)

    def stalls(self):
        return [int(ms) for ms in _STALL_LINE.findall(self.text())]
