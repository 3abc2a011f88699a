"""The HTTP side of the operations endpoint: ``/metrics``, ``/healthz``, ``/readyz`` on Twisted
web, and the child service that binds ``kafkatw.metrics.listener``.

Owns what healthy and ready mean for an orchestrator; the metric names are the exporter's.
"""

import json

from twisted.application import service
from twisted.internet import defer, threads
from twisted.internet.error import CannotListenError
from twisted.logger import Logger
from twisted.web import resource, server

from kafkatw.config import ConfigError, parse_host_port
from kafkatw.metrics import exporter

log = Logger(namespace="kafkatw.metrics")

METRICS_LISTENER = "kafkatw.metrics.listener"


def parse_listener(value):
    """``HOST:PORT`` of ``kafkatw.metrics.listener`` -> (host, port)."""
    return parse_host_port(METRICS_LISTENER, value, "127.0.0.1:9404")


def health(broker):
    """``(healthy, details)``: every listener accepts connections and a log dir is online (a
    broker whose every log dir failed serves nothing; Kafka stops such a broker)."""
    listening = broker.socket_server.listening() if broker.socket_server is not None else {}
    logs = broker.log_manager
    online = list(logs.online_dirs) if logs is not None else []
    offline = sorted(logs.offline_dirs) if logs is not None else []
    healthy = bool(listening) and all(listening.values()) and bool(online)
    return healthy, {"listeners": listening, "logDirs": {"online": online, "offline": offline}}


def readiness(broker):
    """``(ready, details)``: the broker started (logs loaded and recovered, listeners bound) and
    the group and transaction coordinators loaded their ``__consumer_offsets`` and
    ``__transaction_state`` partitions (until then they answer COORDINATOR_LOAD_IN_PROGRESS)."""
    started = bool(broker.running) and broker.socket_server is not None
    groups_loaded = broker.group_coordinator is not None and not broker.group_coordinator.is_loading()
    txns_loaded = broker.txn_coordinator is not None and not broker.txn_coordinator.is_loading()
    logs_loaded = broker.log_manager is not None
    ready = started and logs_loaded and groups_loaded and txns_loaded
    return ready, {"started": started, "logsLoaded": logs_loaded, "groupCoordinatorLoaded": groups_loaded,
                   "transactionCoordinatorLoaded": txns_loaded}


class _Check(resource.Resource):
    """200 and ``{"status": "ok", ...}`` when the check passes, else 503 and the details."""

    isLeaf = True

    def __init__(self, broker, check):
        super().__init__()
        self.broker = broker
        self.check = check

    def render_GET(self, request):
        ok, details = self.check(self.broker)
        request.setResponseCode(200 if ok else 503)
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"cache-control", b"no-store")
        return json.dumps(dict({"status": "ok" if ok else "failing"}, **details), sort_keys=True).encode() + b"\n"


class MetricsResource(resource.Resource):
    """A scrape: the broker's numbers on the reactor in slices (:func:`exporter.take_snapshot`),
    the process metrics meanwhile in the thread pool (they read /proc)."""

    isLeaf = True

    def __init__(self, broker, reactor, threadpool):
        super().__init__()
        self.broker = broker
        self.reactor = reactor
        self.threadpool = threadpool

    def render_GET(self, request):
        finished = []
        request.notifyFinish().addBoth(finished.append)
        process = threads.deferToThreadPool(self.reactor, self.threadpool, exporter.process_text)
        d = exporter.take_snapshot(self.broker, self.reactor)
        d.addCallback(exporter.render_parts)
        d = defer.gatherResults([d, process], consumeErrors=True)
        d.addCallback(lambda results: results[0] + [results[1]])

        def write(parts):
            if finished:
                return  # the scraper went away
            request.setHeader(b"content-type", exporter.CONTENT_TYPE.encode())
            request.setHeader(b"content-length", b"%d" % sum(len(p) for p in parts))
            for part in parts:
                request.write(part)
            request.finish()

        def failed(failure):
            log.failure("scrape failed", failure)
            if not finished:
                request.setResponseCode(500)
                request.finish()

        d.addCallbacks(write, failed)
        return server.NOT_DONE_YET


def root_resource(broker, reactor, threadpool):
    root = resource.Resource()
    root.putChild(b"metrics", MetricsResource(broker, reactor, threadpool))
    root.putChild(b"healthz", _Check(broker, health))
    root.putChild(b"readyz", _Check(broker, readiness))
    return root


class MetricsService(service.Service):
    """Binds ``kafkatw.metrics.listener`` (started after the listeners, stopped before them)."""

    name = "metrics"

    def __init__(self, broker, host, port):
        self.broker = broker
        self.host, self.port = host, port
        self.listening_port = None

    def startService(self):
        super().startService()
        b = self.broker
        site = server.Site(root_resource(b, b.reactor, b.threadpool))
        site.noisy = False
        site.log = lambda request: None  # scrapes every few seconds: no access log
        try:
            self.listening_port = b.reactor.listenTCP(self.port, site, interface=self.host)
        except CannotListenError as e:
            raise ConfigError("Invalid value %s for configuration %s: cannot listen there: %s"
                              % (b.config[METRICS_LISTENER], METRICS_LISTENER, e.socketError))
        log.info("Metrics on http://{host}:{port}/metrics", host=self.host or "0.0.0.0",
                 port=self.bound_port())

    def bound_port(self):
        return self.listening_port.getHost().port

    def stopService(self):
        super().stopService()
        if self.listening_port is not None:
            return self.listening_port.stopListening()
