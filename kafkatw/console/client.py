"""Kafka requests made in process: a decoded request handed to the broker's ``KafkaApis`` for a
console user's principal, its decoded response body back as a Deferred.

Owns building the network layer's ``Request`` (no socket, no encoding) so the console's reads
and actions take exactly the path a client's request takes after decoding: authorization,
quotas, the handler. It interprets no response (the views and actions do).
"""

import itertools

from twisted.internet import defer

from kafkatw.network.request import Request, RequestContext
from kafkatw.protocol.errors import error_name
from kafkatw.security.authorizer import ALLOWED, Action, AuthorizableRequestContext, ResourcePattern

CLIENT_ID = "kafkatw-console"


class ConsoleRequestError(Exception):
    """A request answered with an error the console shows as it is (one line)."""


class InProcessClient:
    """Requests for one principal from one HTTP client address, through ``apis.handle``."""

    _correlation = itertools.count(1)

    def __init__(self, apis, principal, client_host="", listener_name=None, security_protocol="PLAINTEXT"):
        """``listener_name``: a listener of the broker, whose endpoints Metadata and
        DescribeCluster answer with (the SASL listener the console user's password was checked
        against, else the first)."""
        self.apis = apis
        self.context = RequestContext(connection_id="console-%s" % (client_host,), listener_name=listener_name,
                                      security_protocol=security_protocol, principal=principal,
                                      client_address=(client_host, 0), client_software_name=CLIENT_ID,
                                      client_software_version="1")

    def version(self, api_key, wanted):
        """``wanted`` clipped to what the broker serves for ``api_key``."""
        lo, hi = self.apis.api_versions()[api_key]
        return max(lo, min(hi, wanted))

    def call(self, body, version):
        """A Deferred of the response body of ``body`` (a generated request message) at
        ``version`` (clipped to the served range)."""
        version = self.version(body.API_KEY, version)
        request = Request(header=None, api_key=body.API_KEY, api_version=version,
                          correlation_id=next(self._correlation), client_id=CLIENT_ID, body=body, size=0,
                          context=self.context)
        d = defer.maybeDeferred(self.apis.handle, request)

        def unwrap(response):
            if response.body is None:
                raise ConsoleRequestError("%s was refused (connection closed)" % (body.API_NAME,))
            return response.body
        return d.addCallback(unwrap)


    def authorize(self, operation, resource_type, names, request_type):
        """A Deferred of the subset of ``names`` the principal may ``operation``, decided in one
        ``authorize`` call (denials not audited, as Kafka's Metadata lists topics silently);
        all of them without an authorizer. For the list views, which read more than one
        request could answer in time (see docs/console.md)."""
        authorizer = self.apis.authorizer
        names = list(names)
        if authorizer is None:
            return defer.succeed(names)
        ctx = self.context
        context = AuthorizableRequestContext(
            principal=ctx.principal, host=ctx.client_address[0], listener_name=ctx.listener_name,
            security_protocol=ctx.security_protocol, request_type=request_type, request_version=0,
            client_id=CLIENT_ID, correlation_id=next(self._correlation))
        actions = [Action(operation, ResourcePattern(resource_type, n), 1, True, False) for n in names]
        d = defer.maybeDeferred(authorizer.authorize, context, actions)
        return d.addCallback(lambda results: [n for n, r in zip(names, results) if r == ALLOWED])


def describe_error(code, message=None):
    """``NAME`` or ``NAME: message`` of an error code (what a page shows)."""
    return "%s: %s" % (error_name(code), message) if message else error_name(code)
