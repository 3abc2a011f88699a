"""The request channel: a bounded request queue between connections and the handler.

Owns ``queued.max.requests`` (back pressure), ``num.io.threads`` (how many requests a
handler holds at once) and the request-side timing marks; it never touches sockets.
"""

import collections

from twisted.internet import defer
from twisted.logger import Logger

from kafkatw.network.request import DeferredAnswer, Response


class RequestChannel:
    """Kafka's ``RequestChannel`` + ``KafkaRequestHandlerPool`` on one reactor thread.

    ``send_request(request, connection)`` enqueues if the queue has room; otherwise the
    request waits (in arrival order) for room, and its connection, muted like any
    connection with a request outstanding, reads nothing more meanwhile.  Up to ``num_io_threads`` requests are with
    the handler at once; a slot is freed when the handler's Deferred fires or when the
    handler calls ``request.mark_api_local_complete()`` (the request is parked).  The
    handler answers a ``Response`` or a pending answer: an object with
    ``when_complete(callback, errback)`` calling one of them once (a parked fetch; a Deferred
    of ``handle`` is wrapped in a :class:`DeferredAnswer`).  The response goes back with
    ``connection.send_response(request, response)``, a handler failure with
    ``connection.handler_failed(request, failure)``.
    """

    log = Logger(namespace="kafkatw.network.channel")

    def __init__(self, handler, clock_ns, queued_max_requests=500, num_io_threads=8, metrics=None):
        self.handler = handler
        self.clock_ns = clock_ns
        self.queued_max_requests = queued_max_requests
        self.num_io_threads = num_io_threads
        self.metrics = metrics
        self._queue = collections.deque()  # (request, connection)
        self._blocked = collections.deque()  # connections waiting for room
        self.busy = 0  # handler slots in use
        self._dispatching = False
        # made once: ``self._release`` read per request makes a bound method each time
        self._release_hook = self._release

    @property
    def size(self):
        return len(self._queue)

    def has_room(self):
        return len(self._queue) < self.queued_max_requests

    def send_request(self, request, connection):
        """Hand over ``request``; True if it was queued now, False if it waits for room.

        Either way the channel owns it from here on; waiting requests are queued in
        arrival order as room appears (the waiting connection stays muted meanwhile).
        """
        queue = self._queue
        if self._blocked or len(queue) >= self.queued_max_requests:
            self._blocked.append((request, connection))
            return False
        if queue or self._dispatching or self.busy >= self.num_io_threads:
            queue.append((request, connection))
            self._update_size()
            self._dispatch()
            return True
        # nothing queued and a slot free (the common case): the queue would hand it on at once
        self._dispatching = True
        try:
            self._handle(request, connection)
        finally:
            self._dispatching = False
        if queue or self._blocked:
            self._dispatch()  # requests a synchronous answer let in meanwhile
        return True

    @property
    def blocked(self):
        """Requests read but waiting for room in the queue."""
        return len(self._blocked)

    def cancel(self, connection):
        """Forget requests of a closed connection that are still waiting for room."""
        if self._blocked:
            self._blocked = collections.deque(p for p in self._blocked if p[1] is not connection)

    def resize(self, num_io_threads):
        """Change the number of handler slots (dynamic ``num.io.threads``); more slots take
        waiting requests at once, fewer let the busy ones finish."""
        self.num_io_threads = num_io_threads
        self._dispatch()

    def _update_size(self):
        if self.metrics is not None:
            self.metrics.request_queue_size = len(self._queue)

    def _dispatch(self):
        if self._dispatching:
            return  # re-entered from a handler completing synchronously
        self._dispatching = True
        try:
            while True:
                while self._blocked and self.has_room():
                    self._queue.append(self._blocked.popleft())
                if not self._queue or self.busy >= self.num_io_threads:
                    break
                request, connection = self._queue.popleft()
                self._handle(request, connection)
        finally:
            self._update_size()
            self._dispatching = False

    def _release(self, request, now_ns):
        if request.api_local_complete_ns is None:
            request.api_local_complete_ns = now_ns if now_ns is not None else self.clock_ns()
        self.busy -= 1
        if not self._dispatching:  # (else the dispatch under way takes the next request)
            self._dispatch()

    def _handle(self, request, connection):
        self.busy += 1
        request.dequeue_ns = self.clock_ns()
        request._on_local_complete = self._release_hook
        # handle_now answers a Response when it can (no Deferred per request); see IRequestHandler
        try:
            result = self.handler.handle_now(request)
        except Exception:
            result = defer.fail()
        if type(result) is not Response:
            if hasattr(result, "when_complete"):
                self._wait(request, connection, result)
                return
            # (the isinstance last: Deferred is an ABC, its isinstance a Python call)
            if isinstance(result, defer.Deferred):
                self._wait(request, connection, DeferredAnswer(result))
                return
        # answered synchronously: no Deferred, the slot is released before the write (what
        # _release does, inline; the caller's dispatch loop takes the next request)
        now = self.clock_ns()
        request.api_remote_complete_ns = now
        if request._on_local_complete is not None:
            request._on_local_complete = None
            if request.api_local_complete_ns is None:
                request.api_local_complete_ns = now
            self.busy -= 1
        try:
            connection.send_response(request, result)
        except Exception:
            self.log.failure("sending a response failed")

    def _wait(self, request, connection, pending):
        """Send the answer when ``pending`` completes: called by whatever completes it (at
        once if it has; a parked fetch from inside the append that wakes it)."""

        def answered(response):
            now = request.api_remote_complete_ns = self.clock_ns()
            if request._on_local_complete is not None:  # (a parked request has released its slot)
                request.mark_api_local_complete(now)
            try:
                connection.send_response(request, response)
            except Exception:
                self.log.failure("sending a response failed")

        def failed(failure):
            now = request.api_remote_complete_ns = self.clock_ns()
            request.mark_api_local_complete(now)
            self.log.failure("handler failed for {api_key} v{api_version} correlation {cid} on {conn}",
                             failure, api_key=request.api_key, api_version=request.api_version,
                             cid=request.correlation_id, conn=request.context.connection_id)
            try:
                connection.handler_failed(request, failure)
            except Exception:
                self.log.failure("sending a response failed")

        pending.when_complete(answered, failed)
