"""Delayed operations and the purgatory that holds them (Kafka's DelayedOperation and
DelayedOperationPurgatory). Owns completion-exactly-once, watch lists by key, expiry timers
on an injected clock and purging; it knows nothing about fetches or produces themselves.

Single-threaded (the reactor thread), so Kafka's locks are not needed: "check, then watch"
cannot race with an append.
"""

import collections
from heapq import heapify, heappop, heappush

from twisted.logger import Logger
from twisted.python.failure import Failure

log = Logger()


class TopicPartitionOperationKey(collections.namedtuple("TopicPartitionOperationKey", "topic partition")):
    """The watch key of an operation that waits on one partition (a named tuple: hashed and
    compared in C, as every parked fetch and every append to a watched partition does)."""

    __slots__ = ()

    @property
    def key_label(self):
        return "%s-%d" % (self.topic, self.partition)


class DelayedOperation:
    """An operation that completes later, either because ``try_complete`` found its condition
    met or because ``delay_ms`` expired.

    Subclasses implement ``try_complete()`` (check the condition; if met call and return
    ``self.force_complete()``, else return False), ``on_complete()`` (produce the result: the
    operation's outcome) and optionally ``on_expiration()``. Completion happens exactly once,
    and its one way out is the pair registered with :meth:`when_complete`, called from the
    call that completes the operation (a parked fetch is answered from inside the append that
    wakes it). No Deferred: one costs ~24k instructions per parked fetch (docs/performance.md);
    :meth:`ReplicaManager.fetch_messages` makes one for callers that want it. :meth:`cancel`
    (the client went away) completes the operation without calling ``on_complete``.
    """

    def __init__(self, delay_ms):
        self.delay_ms = delay_ms
        self._listener = None  # (callback, errback) of when_complete
        self._outcome = None  # (succeeded, result or Failure) once completed, for a late listener
        self._completed = False
        self._timed_in = None  # the purgatory whose timer will expire it, while it waits

    @property
    def is_completed(self):
        return self._completed  # (the purgatory reads the field: asked per check and append)

    def when_complete(self, callback, errback):
        """Call ``callback(result)`` or ``errback(failure)`` once the operation completes, from
        the call that completes it (at once if it has). What they raise is logged."""
        self._listener = (callback, errback)
        outcome = self._outcome
        if outcome is not None:
            self._tell(outcome)

    def force_complete(self):
        """Complete the operation if nobody has yet; True if this call completed it."""
        if self._completed:
            return False
        self._completed = True
        if self._timed_in is not None:
            self._timed_in._untime(self)
        try:
            outcome = self._outcome = (True, self.on_complete())
        except Exception:
            outcome = self._outcome = (False, Failure())
        if self._listener is not None:
            self._tell(outcome)  # drops it
        elif not outcome[0]:
            # nobody waits (the group coordinator's operations): the failure is reported here
            log.failure("completing {op} failed", outcome[1], op=type(self).__name__)
        return True

    def result(self):
        """What completing gave (``on_complete``'s result, or its exception raised); for a
        caller that saw the operation complete (``try_complete_else_watch`` True)."""
        succeeded, value = self._outcome
        if not succeeded:
            value.raiseException()
        return value

    def cancel(self):
        """Give up on the operation (its client went away): it completes without
        ``on_complete``, its timer stops and its listener is never called."""
        self._completed = True
        self._listener = None
        if self._timed_in is not None:
            self._timed_in._untime(self)

    def _tell(self, outcome):
        # dropped once told: the listener's closures usually reach this operation back
        # (channel -> pending answer -> operation), a cycle only the cyclic GC would free
        callback, errback = self._listener
        self._listener = None
        try:
            if outcome[0]:
                callback(outcome[1])
            else:
                errback(outcome[1])
        except Exception:
            log.failure("the completion listener of {op} failed", op=type(self).__name__)

    def try_complete(self):
        raise NotImplementedError

    def on_complete(self):
        raise NotImplementedError

    def on_expiration(self):
        """Called after ``on_complete`` when completion came from the timer."""

    def _expire(self):
        if self.force_complete():
            self.on_expiration()


class DelayedOperationPurgatory:
    """Holds delayed operations until they complete.

    ``try_complete_else_watch(op, keys)`` tries once, otherwise watches ``op`` under every key
    and arms its expiry timer; ``check_and_complete(key)`` retries the operations watched under
    ``key``. Completed operations linger in other keys' watch lists until the next
    ``check_and_complete`` of that key or the next purge, which runs once the estimated number
    of watched operations exceeds the live delayed ones by ``purge_interval_requests``.

    Expiry: one clock timer per purgatory, armed for the earliest deadline of a heap of
    ``(deadline, seq, operation)`` (Kafka's SystemTimer serves all operations the same way),
    not a DelayedCall per operation. An operation completed before its deadline leaves its
    entry in the heap (skipped when popped); the timer is cancelled and the heap emptied as
    soon as no timed operation is left, so nothing stays armed once nothing waits.
    """

    def __init__(self, name, clock, purge_interval_requests=1000, timer_enabled=True):
        self.name = name
        self._clock = clock
        self.purge_interval_requests = purge_interval_requests
        self._timer_enabled = timer_enabled
        #: key -> list[DelayedOperation]; others only read it (non-empty: something is
        #: watched, what a produce asks before building keys)
        self.watch_lists = {}
        self._delayed = set()  # operations waiting on the timer (NumDelayedOperations)
        self._deadlines = []  # heap of (deadline, seq, operation); completed ones skipped
        self._seq = 0  # ties broken in arming order (an operation is never compared)
        self._timer = None  # the clock's DelayedCall for self._timer_at, while armed
        self._timer_at = None
        self._estimated_total_operations = 0

    # -- metrics ---------------------------------------------------------------------------

    def watched(self):
        """Number of entries in all watch lists (Kafka's PurgatorySize; may count completed ops)."""
        return sum(len(ops) for ops in self.watch_lists.values())

    def num_delayed(self):
        """Number of operations waiting on a timer (Kafka's NumDelayedOperations)."""
        return len(self._delayed)

    def watched_keys(self):
        return list(self.watch_lists)

    # -- operations ------------------------------------------------------------------------

    def try_complete_else_watch(self, operation, watch_keys, try_first=True):
        """Complete ``operation`` now if it can, else watch it under ``watch_keys`` and arm its
        timer. Returns True if it completed here. ``try_first`` False: the caller has just
        found that it cannot complete (what ``try_complete`` would answer now), it is watched
        without the try."""
        if try_first and (operation.try_complete() or operation._completed):
            return True
        for key in watch_keys:
            self.watch_lists.setdefault(key, []).append(operation)
        if watch_keys:
            self._estimated_total_operations += 1
        if self._timer_enabled:
            self._arm(operation)
        # (_maybe_purge inline: every parked operation comes through here)
        if self._estimated_total_operations - len(self._delayed) > self.purge_interval_requests:
            self.purge_completed()
        return False

    def check_and_complete(self, key):
        """Retry the operations watched under ``key``; returns how many completed now."""
        ops = self.watch_lists.get(key)
        if not ops:
            return 0
        completed = 0
        for op in list(ops):
            if op._completed:
                continue
            if op.try_complete():
                completed += 1
        # Operations may have been added (reentrantly) while we iterated: prune the live list.
        ops = self.watch_lists.get(key)
        if ops is not None:
            if len(ops) == 1 and ops[0]._completed:
                del self.watch_lists[key]  # the one watched completed (no list made)
                return completed
            live = [op for op in ops if not op._completed]
            if live:
                self.watch_lists[key] = live
            else:
                del self.watch_lists[key]
        return completed

    def purge_completed(self):
        """Drop completed operations from every watch list; returns how many were dropped."""
        purged = 0
        for key in list(self.watch_lists):
            ops = self.watch_lists[key]
            live = [op for op in ops if not op._completed]
            purged += len(ops) - len(live)
            if live:
                self.watch_lists[key] = live
            else:
                del self.watch_lists[key]
        self._estimated_total_operations = self.num_delayed()
        return purged

    def shutdown(self):
        """Stop the timer (the operations stay incomplete)."""
        for op in self._delayed:
            op._timed_in = None
        self._delayed.clear()
        self._deadlines.clear()
        self._disarm()

    # -- internals -------------------------------------------------------------------------

    def _arm(self, operation):
        # (conditionals, not max(): the builtin parses its arguments as keywords, ~1k
        # instructions a call, here on every parked operation)
        delay_ms = operation.delay_ms
        delay = delay_ms / 1000.0 if delay_ms > 0 else 0.0
        deadline = self._clock.seconds() + delay
        self._seq += 1
        heappush(self._deadlines, (deadline, self._seq, operation))
        self._delayed.add(operation)
        operation._timed_in = self  # completion by other means calls _untime
        if self._timer_at is None:
            # nothing armed: _set_timer without its call and second clock reading
            self._timer_at = deadline
            self._timer = self._clock.callLater(delay, self._expire_due)
        elif deadline < self._timer_at:
            self._set_timer(deadline)

    def _untime(self, operation):
        """``operation`` completed before its deadline: forget it; once none waits, the timer
        goes and the heap is emptied (else its entry stays until popped)."""
        operation._timed_in = None
        delayed = self._delayed
        delayed.discard(operation)
        if not delayed:
            self._deadlines.clear()
            timer = self._timer  # (_disarm inline: the last waiting operation completed)
            if timer is not None:
                self._timer = self._timer_at = None
                timer.cancel()
        elif len(self._deadlines) > 64 + 4 * len(delayed):
            # many completed early under a long deadline: keep the heap near the live size
            heap = self._deadlines  # in place: the timer may be walking it
            heap[:] = [e for e in heap if e[2]._timed_in is self]
            heapify(heap)

    def _set_timer(self, deadline):
        """Arm the one timer for ``deadline``, in place of an armed one."""
        if self._timer is not None:
            self._disarm()
        self._timer_at = deadline
        delay = deadline - self._clock.seconds()
        self._timer = self._clock.callLater(delay if delay > 0 else 0, self._expire_due)

    def _disarm(self):
        timer = self._timer
        if timer is not None:
            self._timer = self._timer_at = None
            timer.cancel()

    def _expire_due(self):
        """The timer: expire every operation whose deadline has come, then re-arm for the next."""
        # due from the deadline the timer was armed for, not only from the clock's reading,
        # which may land a rounding error short of it
        due = max(self._clock.seconds(), self._timer_at)
        self._timer = self._timer_at = None
        heap = self._deadlines
        while heap and heap[0][0] <= due:
            op = heappop(heap)[2]
            if op._timed_in is self:
                op._timed_in = None
                self._delayed.discard(op)
                op._expire()
        # what expiring did may have armed a timer (an operation parked from a completion)
        while heap and heap[0][2]._timed_in is not self:
            heappop(heap)
        if not self._delayed:
            heap.clear()
            self._disarm()
        elif self._timer_at is None or heap[0][0] < self._timer_at:
            self._set_timer(heap[0][0])
        self._maybe_purge()

    def _maybe_purge(self):
        if self._estimated_total_operations - len(self._delayed) > self.purge_interval_requests:
            self.purge_completed()
