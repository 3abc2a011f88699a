"""Value objects crossing the network/handler boundary: Request, RequestContext, Response, and
the one shape of an answer still pending (``when_complete``; ``DeferredAnswer`` for a Deferred).

Owns only data and timing marks (Kafka's ``RequestChannel.Request`` fields); the
computation of request-log times lives in ``request_log``.
"""

import attr

from kafkatw.security.principal import ANONYMOUS as ANONYMOUS_PRINCIPAL


@attr.s(slots=True, frozen=True)
class RequestContext:
    """Who sent a request and over what (Kafka's ``RequestContext``)."""

    connection_id = attr.ib()
    listener_name = attr.ib()
    security_protocol = attr.ib()
    principal = attr.ib(default=ANONYMOUS_PRINCIPAL)  # a kafkatw.security.principal.KafkaPrincipal
    client_address = attr.ib(default=("", 0))  # (host, port)
    client_software_name = attr.ib(default="unknown")
    client_software_version = attr.ib(default="unknown")


@attr.s(slots=True)
class Request:
    """One decoded request plus its timing marks (``time.monotonic_ns`` of the clock).

    Timing marks (``None`` until reached), as Kafka's ``RequestChannel.Request``:
    ``read_ns`` its last byte was read from the socket (earlier than ``start_ns`` when it
    waited, pipelined, behind the request before it on its connection); ``start_ns`` the
    frame was cut, the request taken up; ``dequeue_ns`` a handler took it;
    ``api_local_complete_ns`` the handler's own work ended (``handle()`` returned an
    already-fired Deferred, or the handler called :meth:`mark_api_local_complete`, or
    else when its Deferred fired); ``api_remote_complete_ns`` its Deferred fired; ``response_dequeue_ns`` the
    response was handed to the connection for writing; ``response_complete_ns`` the
    response was fully written to the socket.
    """

    header = attr.ib()
    api_key = attr.ib()
    api_version = attr.ib()
    correlation_id = attr.ib()
    client_id = attr.ib()
    body = attr.ib()
    size = attr.ib()
    context = attr.ib()
    start_ns = attr.ib(default=0)
    read_ns = attr.ib(default=None)
    dequeue_ns = attr.ib(default=None)
    api_local_complete_ns = attr.ib(default=None)
    api_remote_complete_ns = attr.ib(default=None)
    response_dequeue_ns = attr.ib(default=None)
    response_complete_ns = attr.ib(default=None)
    throttle_time_ms = attr.ib(default=0)
    # optional short description for the request log (a handler may set it), or a callable
    # making it, called only when the request log writes a line
    summary = attr.ib(default=None)
    # the authorizer's decisions for this request (server.authz.Decisions), None without one
    authz = attr.ib(default=None, repr=False, eq=False)
    # set by the request channel: releases this request's handler slot
    _on_local_complete = attr.ib(default=None, repr=False, eq=False)

    def mark_api_local_complete(self, now_ns=None):
        """The handler's own work is done; the rest is waiting (a purgatory, a remote).

        A handler that parks a request (DelayedFetch, acks=all produce) calls this, so
        the wait counts as ``remoteTimeMs`` and no longer occupies one of the
        ``num.io.threads`` handler slots.  Calling it again has no effect.
        """
        hook, self._on_local_complete = self._on_local_complete, None
        if hook is not None:
            hook(self, now_ns)


@attr.s(slots=True)
class Response:
    """What a handler answers.

    ``body`` is a generated response message (encoded with the request's version);
    ``noop=True`` sends nothing and unmutes (acks=0 produce); ``close_connection``
    closes the connection after anything in ``body`` is written (``body`` may be
    ``None``); ``summary`` is an optional short string/dict for the request log (or a
    callable making it, called only when the log writes a line).
    """

    body = attr.ib()
    close_connection = attr.ib(default=False)
    throttle_time_ms = attr.ib(default=0)
    noop = attr.ib(default=False)
    summary = attr.ib(default=None)


class DeferredAnswer:
    """A Deferred of a :class:`Response` in the one shape of a pending answer: an object whose
    ``when_complete(callback, errback)`` calls one of them once. A parked Fetch has that shape
    without a Deferred; handlers that wait on Deferreds (group joins, appends to internal topics)
    are wrapped in this."""

    __slots__ = ("deferred",)

    def __init__(self, deferred):
        self.deferred = deferred

    def when_complete(self, callback, errback):
        self.deferred.addCallbacks(callback, errback)
