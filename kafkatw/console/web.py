"""The console over HTTP: the page and its assets, a JSON API per view, POSTed actions, and the
child service binding ``kafkatw.console.listener``.

Owns authentication of each request (HTTP basic, :mod:`.auth`), CSRF and confirmation checks on
actions, the security headers, and throttling repeated reads (a view's answer is reused for
``CACHE_SECONDS`` per principal, so polling pages in many tabs cost one read). The assets are
read once at start-up, before the listener binds; nothing here blocks the reactor afterwards.
"""

import base64
import json
import os
import time

from twisted.application import service
from twisted.internet import defer
from twisted.internet.error import CannotListenError
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import resource, server

from kafkatw.config import ConfigError, parse_host_port
from kafkatw.console import actions, auth, browse, views
from kafkatw.console.client import ConsoleRequestError, InProcessClient
from kafkatw.console.history import History
from kafkatw.protocol.errors import KafkaError

log = Logger(namespace="kafkatw.console")

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
ASSETS = {"index.html": "text/html; charset=utf-8", "console.js": "text/javascript; charset=utf-8",
          "console.css": "text/css; charset=utf-8"}
CACHE_SECONDS = 1.0
MAX_ACTION_BODY = 64 * 1024
SECURITY_HEADERS = {
    b"content-security-policy": b"default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    b"x-frame-options": b"DENY",
    b"x-content-type-options": b"nosniff",
    b"referrer-policy": b"no-referrer",
    b"cache-control": b"no-store",
}


def parse_listener(value):
    """``HOST:PORT`` of ``kafkatw.console.listener`` -> (host, port)."""
    return parse_host_port(auth.LISTENER_KEY, value, "127.0.0.1:9090")


def load_assets(directory=STATIC_DIR):
    """``{name: (content type, bytes)}`` of the page's files (read once, at start-up)."""
    out = {}
    for name, kind in ASSETS.items():
        with open(os.path.join(directory, name), "rb") as f:
            out[name] = (kind, f.read())
    return out


def _client_host(request):
    return request.getClientAddress().host  # the console listens on TCP only


def _headers(request):
    for k, v in SECURITY_HEADERS.items():
        request.setHeader(k, v)


def _json(request, code, doc):
    _headers(request)
    request.setResponseCode(code)
    request.setHeader(b"content-type", b"application/json; charset=utf-8")
    return json.dumps(doc, sort_keys=True).encode("utf-8")


class Console:
    """What the resources share: the broker, its access rules, CSRF tokens, history, the cache."""

    def __init__(self, broker, access, history, clock=time.monotonic):
        self.broker = broker
        self.access = access
        self.history = history
        self.csrf = auth.CsrfTokens()
        self.clock = clock
        self._cache = {}  # (principal, path) -> (expiry, Deferred of the doc)

    def client(self, principal, host):
        return InProcessClient(self.broker.apis, principal, host, self.access.listener_name,
                               self.access.security_protocol)

    def authenticate(self, request):
        """A Deferred of the principal, or of None (the request is answered 401)."""
        header = request.getHeader(b"authorization")
        host = _client_host(request)
        if not self.access.required:
            return self.access.authenticate(None, None, host)
        if not header or not header[:6].lower() == b"basic ":
            return defer.succeed(None)
        try:
            user, sep, password = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return defer.succeed(None)
        if not sep:
            return defer.succeed(None)
        return self.access.authenticate(user, password, host)

    def cached(self, principal, key, make):
        """``make()`` (a Deferred), shared by the same principal's identical reads for a second."""
        now = self.clock()
        if len(self._cache) > 256:
            self._cache = {k: v for k, v in self._cache.items() if v.expiry > now}
        entry = self._cache.get((principal, key))
        if entry is None or entry.expiry <= now:
            entry = self._cache[(principal, key)] = _Shared(now + CACHE_SECONDS)
            entry.start(make(), lambda: self._forget((principal, key), entry))
        return entry.get()

    def _forget(self, key, entry):
        if self._cache.get(key) is entry:
            del self._cache[key]  # a failed read is not reused


class _Shared:
    """One read's result handed to every request that asked for it while it ran or after."""

    def __init__(self, expiry):
        self.expiry = expiry
        self._done = None
        self._waiting = []

    def start(self, deferred, on_failure):
        self._on_failure = on_failure
        deferred.addBoth(self._fire)

    def _fire(self, result):
        self._done = (result,)
        if isinstance(result, Failure):
            self._on_failure()
        waiting, self._waiting = self._waiting, []
        for d in waiting:
            d.callback(result) if not isinstance(result, Failure) else d.errback(result)
        return None if isinstance(result, Failure) else result

    def get(self):
        d = defer.Deferred()
        if self._done is None:
            self._waiting.append(d)
        elif isinstance(self._done[0], Failure):
            d.errback(self._done[0])
        else:
            d.callback(self._done[0])
        return d


class _Authenticated(resource.Resource):
    """Answers once the request's principal is known; 401 with a basic challenge without one."""

    isLeaf = True

    def __init__(self, console):
        super().__init__()
        self.console = console

    def render(self, request):
        finished = []
        request.notifyFinish().addBoth(finished.append)
        d = self.console.authenticate(request)

        def authenticated(principal):
            if principal is None:
                request.setHeader(b"www-authenticate", b'Basic realm="kafkatw console", charset="UTF-8"')
                return 401, {"error": "authentication required"}
            return defer.maybeDeferred(self.answer, request, principal)

        def failed(failure):
            e = failure.value
            if isinstance(e, (actions.ActionError, browse.BrowseError, ConsoleRequestError, KafkaError)):
                return 400, {"error": str(e)}
            log.failure("console request {path} failed", failure, path=request.path)
            return 500, {"error": "internal error (see the broker log)"}

        def write(answer):
            if finished:
                return
            if isinstance(answer, tuple):
                code, doc = answer
            else:
                code, doc = 200, answer
            if isinstance(doc, bytes):
                request.write(doc)
            else:
                request.write(_json(request, code, doc))
            request.finish()

        d.addCallback(authenticated)
        d.addErrback(failed)
        d.addCallback(write)
        d.addErrback(lambda f: log.failure("writing a console answer failed", f))
        return server.NOT_DONE_YET

    def answer(self, request, principal):
        raise NotImplementedError


class PageResource(_Authenticated):
    """The page and its assets (the page itself asks for credentials, so the browser's basic
    login prompt appears before anything loads)."""

    def __init__(self, console, assets):
        super().__init__(console)
        self.assets = assets

    def answer(self, request, principal):
        name = request.postpath[-1].decode("utf-8", "replace") if request.postpath and request.postpath[-1] else ""
        if request.prepath[-1:] != [b"static"] and not name:
            name = "index.html"
        if name not in self.assets:
            return 404, {"error": "not found"}
        kind, data = self.assets[name]
        _headers(request)
        request.setHeader(b"content-type", kind.encode("ascii"))
        return data


def _arg(request, name, default=""):
    values = request.args.get(name.encode("ascii"))
    return values[0].decode("utf-8", "replace") if values else default


class ApiResource(_Authenticated):
    """``GET /api/<view>[/<name>]`` and ``POST /api/actions/<action>``."""

    def answer(self, request, principal):
        path = [p.decode("utf-8", "replace") for p in request.postpath if p]
        console = self.console
        if request.method == b"POST":
            return self.act(request, principal, path)
        if request.method not in (b"GET", b"HEAD"):
            return 405, {"error": "method not allowed"}
        host = _client_host(request)
        client = console.client(principal, host)
        broker = console.broker
        history = console.history
        if path == ["session"]:
            return {"principal": str(principal), "csrfToken": console.csrf.token(principal),
                    "authRequired": console.access.required}
        if path == ["overview"]:
            make = lambda: views.overview(client, broker)  # noqa: E731
        elif path == ["topics"]:
            search = _arg(request, "search")
            make = lambda: views.topic_list(client, broker, search, history=history)  # noqa: E731
        elif len(path) == 2 and path[0] == "topics":
            make = lambda: views.topic_detail(client, broker, path[1])  # noqa: E731
        elif path == ["groups"]:
            make = lambda: views.group_list(client, broker, history=history)  # noqa: E731
        elif len(path) == 2 and path[0] == "groups":
            make = lambda: views.group_detail(client, broker, path[1], history=history)  # noqa: E731
        elif len(path) == 2 and path[0] == "messages":
            args = {k.decode("utf-8", "replace"): v[0].decode("utf-8", "replace") for k, v in request.args.items()}
            partition, offset, timestamp, limit, max_bytes = browse.parse_request(args)
            make = lambda: browse.browse(client, broker, path[1], partition, offset, timestamp,  # noqa: E731
                                         limit, max_bytes)
        else:
            return 404, {"error": "no such view"}
        key = request.uri.decode("utf-8", "replace")
        return console.cached(principal, key, make)

    def act(self, request, principal, path):
        console = self.console
        if len(path) != 2 or path[0] != "actions" or path[1] not in actions.ACTIONS:
            return 404, {"error": "no such action"}
        if not console.csrf.valid(principal, request.getHeader(auth.CsrfTokens.HEADER)):
            return 403, {"error": "missing or wrong CSRF token (reload the page)"}
        origin = request.getHeader(b"origin")
        if origin and origin.split(b"://", 1)[-1] != request.getHeader(b"host"):
            return 403, {"error": "cross-origin action refused"}
        raw = request.content.read(MAX_ACTION_BODY + 1) if request.content is not None else b""
        if len(raw) > MAX_ACTION_BODY:
            return 413, {"error": "action body too large"}
        try:
            params = json.loads(raw.decode("utf-8") or "{}")
        except ValueError:
            return 400, {"error": "the action body must be a JSON object"}
        if not isinstance(params, dict):
            return 400, {"error": "the action body must be a JSON object"}
        if params.get("confirm") is not True:
            return 400, {"error": "the action was not confirmed"}
        host = _client_host(request)
        log.info("console action {action} by {principal} from {host}", action=path[1], principal=str(principal),
                 host=host)
        console._cache.clear()  # what was read before the action is stale
        return actions.ACTIONS[path[1]](console.client(principal, host), params)


def root_resource(console, assets):
    root = resource.Resource()
    page = PageResource(console, assets)
    root.putChild(b"", page)
    root.putChild(b"index.html", page)
    root.putChild(b"static", page)
    root.putChild(b"api", ApiResource(console))
    return root


class _QuietSite(server.Site):
    noisy = False

    def log(self, request):
        pass  # pages poll every few seconds; actions are logged by ApiResource


class ConsoleService(service.Service):
    """Binds ``kafkatw.console.listener`` (started after the broker's listeners, stopped first)."""

    name = "console"

    def __init__(self, broker, host, port):
        self.broker = broker
        self.host, self.port = host, port
        self.listening_port = None
        self.history = None
        # decided by config alone: a SASL broker without usable users stops start-up here
        self.access = auth.access_for(broker)

    def startService(self):
        super().startService()
        b = self.broker
        assets = load_assets()
        stats = b.replica_manager.topic_stats
        self.history = History(b.reactor, lambda: stats.messages_in)
        console = Console(b, self.access, self.history)
        site = _QuietSite(root_resource(console, assets))
        try:
            self.listening_port = b.reactor.listenTCP(self.port, site, interface=self.host)
        except CannotListenError as e:
            raise ConfigError("Invalid value %s for configuration %s: cannot listen there: %s"
                              % (b.config[auth.LISTENER_KEY], auth.LISTENER_KEY, e.socketError), auth.LISTENER_KEY)
        self.history.start()
        log.info("Console on http://{host}:{port}/", host=self.host or "0.0.0.0", port=self.bound_port())

    def bound_port(self):
        return self.listening_port.getHost().port

    def stopService(self):
        super().stopService()
        if self.history is not None:
            self.history.stop()
        if self.listening_port is not None:
            return self.listening_port.stopListening()
