"""Shared fakes for the network tests (no tests here): a scripted handler, frame builders,
a transport layer whose 'fully written' the test decides, a StringTransport harness, and
Twisted's test certificate (``SERVER_PEM``) with a ``RawBody`` for in-process SSL listeners."""

import os
import struct

from twisted.internet import defer, task
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from zope.interface import implementer

import twisted.test

from kafkatw.network.interfaces import IRequestHandler
from kafkatw.network.listener import SocketServer
from kafkatw.network.request import Response
from kafkatw.config import Endpoint
from kafkatw.network.settings import SocketServerSettings
from kafkatw.network.transport import ITransportLayer
from kafkatw.protocol import messages as m
from kafkatw.protocol.parts import join_parts

SUPPORTED = {0: (3, 11), 1: (4, 17), 3: (0, 12), 18: (0, 4)}
PLAINTEXT = Endpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 0)
SERVER_PEM = os.path.join(os.path.dirname(twisted.test.__file__), "server.pem")


class RawBody:
    """A response 'message' whose encoding is the given parts (the wire adds the header)."""

    def __init__(self, parts):
        self.parts = parts

    def encode(self, version):
        return list(self.parts)


def frame(api_key, version, correlation_id, body=None, client_id="test"):
    """A size-prefixed request built with the generated codec."""
    hv = m.request_header_version(api_key, version)
    header = m.RequestHeader(request_api_key=api_key, request_api_version=version,
                             correlation_id=correlation_id, client_id=client_id)
    if body is None:
        body = m.REQUESTS[api_key]()
    payload = b"".join(header.encode(hv)) + b"".join(body.encode(version))
    return struct.pack(">i", len(payload)) + payload


def api_versions_frame(correlation_id, version=3, client_id="test", software=("sw", "1.0")):
    body = m.REQUESTS[18](client_software_name=software[0], client_software_version=software[1])
    return frame(18, version, correlation_id, body, client_id)


def split_responses(data):
    """``[(correlation_id, payload)]`` of size-prefixed responses (header v0 correlation first)."""
    out = []
    pos = 0
    while pos + 4 <= len(data):
        (n,) = struct.unpack_from(">i", data, pos)
        if pos + 4 + n > len(data):
            break
        (cid,) = struct.unpack_from(">i", data, pos + 4)
        out.append((cid, bytes(data[pos + 4:pos + 4 + n])))
        pos += 4 + n
    return out


@implementer(IRequestHandler)
class ScriptedHandler:
    """Answers every request with a default response of its API, unless held.

    ``hold`` (a set of correlation ids) keeps those Deferreds in ``pending`` for the
    test to fire; ``responder`` may build a custom Response.
    """

    def __init__(self, versions=SUPPORTED, hold=(), hold_all=False, responder=None):
        self.versions = dict(versions)
        self.hold = set(hold)
        self.hold_all = hold_all
        self.responder = responder
        self.calls = []
        self.pending = {}
        self._call_waiters = []

    def wait_calls(self, n):
        """Deferred firing once ``n`` requests have reached the handler."""
        d = defer.Deferred()
        self._call_waiters.append((n, d))
        self._fire_waiters()
        return d

    def _fire_waiters(self):
        for n, d in list(self._call_waiters):
            if len(self.calls) >= n:
                self._call_waiters.remove((n, d))
                d.callback(None)

    def api_versions(self):
        return self.versions

    def respond(self, request):
        if self.responder is not None:
            return self.responder(request)
        body = m.RESPONSES[request.api_key]()
        if request.api_key == 18:
            body = m.RESPONSES[18](error_code=0, api_keys=[
                m.RESPONSES[18].ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in sorted(self.versions.items())])
        return Response(body)

    def handle(self, request):
        self.calls.append(request)
        self._fire_waiters()
        if self.hold_all or request.correlation_id in self.hold:
            d = defer.Deferred()
            self.pending[request.correlation_id] = (request, d)
            return d
        return defer.succeed(self.respond(request))

    def handle_now(self, request):
        return self.handle(request)

    def release(self, correlation_id, response=None):
        request, d = self.pending.pop(correlation_id)
        d.callback(response if response is not None else self.respond(request))


@implementer(ITransportLayer)
class ManualTransportLayer:
    """Writes the parts at once but lets the test say when they are 'fully written'."""

    security_protocols = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
    batch_answers = False

    def __init__(self, auto=False):
        self.auto = auto
        self.sends = []

    def send_now(self, transport, parts):
        return self.send(transport, parts)

    def send(self, transport, parts):
        data = join_parts(parts)
        transport.write(data)
        if self.auto:
            return defer.succeed(len(data))
        d = defer.Deferred()
        self.sends.append((data, d))
        return d

    def drain(self, i=0):
        data, d = self.sends.pop(i)
        d.callback(len(data))


class Harness:
    """A SocketServer on a Clock with StringTransport connections (nothing listens)."""

    def __init__(self, handler, settings=None, auto_drain=False, request_logger=None, endpoint=PLAINTEXT,
                 layer=None):
        self.clock = task.Clock()
        self.handler = handler
        self.layer = layer if layer is not None else ManualTransportLayer(auto=auto_drain)
        self.server = SocketServer([endpoint], handler, self.clock, settings=settings or SocketServerSettings(),
                                   clock_ns=lambda: int(round(self.clock.seconds() * 1e9)),
                                   request_logger=request_logger,
                                   transport_layers={endpoint.listener_name: self.layer})
        self.factory = self.server.factory_for(endpoint)
        self.next_port = 50000

    def connect(self, host="127.0.0.1"):
        port = self.next_port
        self.next_port += 1
        proto = self.factory.buildProtocol(IPv4Address("TCP", host, port))
        if proto is None:
            return None, None
        tr = StringTransport(hostAddress=IPv4Address("TCP", "127.0.0.1", 9092),
                             peerAddress=IPv4Address("TCP", host, port))
        proto.makeConnection(tr)
        return proto, tr

    def disconnect(self, proto):
        from twisted.python.failure import Failure
        from twisted.internet.error import ConnectionDone

        proto.connectionLost(Failure(ConnectionDone()))
