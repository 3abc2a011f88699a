"""The request log: one JSON line per completed request (Kafka's ``kafka.request.logger``).

Owns the field names and the time arithmetic of ``RequestChannel.Request.updateRequestMetrics``;
it does not decide when a request completes (the connection calls it).
"""

import json

from twisted.logger import Logger

NAMESPACE = "kafka.request.logger"


def _api_key_name(api_name):
    """``"ApiVersions"`` -> ``"API_VERSIONS"`` (Kafka's ``ApiKeys`` enum name)."""
    out = []
    for i, ch in enumerate(api_name):
        if ch.isupper() and i and (not api_name[i - 1].isupper() or
                                   (i + 1 < len(api_name) and api_name[i + 1].islower())):
            out.append("_")
        out.append(ch.upper())
    return "".join(out)


def _ms(later_ns, earlier_ns):
    if later_ns is None or earlier_ns is None:
        return 0.0
    return round(max(0, later_ns - earlier_ns) / 1e6, 3)


def request_times(request):
    """The request log's times (ms) from a completed request's marks, as Kafka computes them."""
    local_done = request.api_local_complete_ns
    if local_done is None:
        local_done = request.api_remote_complete_ns
    remote_done = request.api_remote_complete_ns
    if remote_done is None:
        remote_done = local_done
    return {
        "totalTimeMs": _ms(request.response_complete_ns, request.start_ns),
        "requestQueueTimeMs": _ms(request.dequeue_ns, request.start_ns),
        "localTimeMs": _ms(local_done, request.dequeue_ns),
        "remoteTimeMs": _ms(remote_done, local_done),
        "throttleTimeMs": request.throttle_time_ms,
        "responseQueueTimeMs": _ms(request.response_dequeue_ns, remote_done),
        "sendTimeMs": _ms(request.response_complete_ns, request.response_dequeue_ns),
        # beyond Kafka's: how long it was read but waited behind the request before it on its
        # connection (one request at a time per connection); not part of totalTimeMs
        "pipelineWaitMs": _ms(request.start_ns, request.read_ns),
    }


def _summary(value, default):
    if value is None:
        return default
    if callable(value):  # made only when a line is written (a hot handler's summary)
        value = value()
    if isinstance(value, (dict, list, str, int, float, bool)):
        return value
    return str(value)


def request_log_entry(request, api_name, response=None):
    """The dict Kafka logs as ``Completed request:{...}`` for ``request``."""
    ctx = request.context
    entry = {
        "isForwarded": False,
        "requestHeader": {
            "requestApiKey": request.api_key,
            "requestApiVersion": request.api_version,
            "correlationId": request.correlation_id,
            "clientId": request.client_id,
            "requestApiKeyName": _api_key_name(api_name),
        },
        "request": _summary(getattr(request, "summary", None), {"size": request.size}),
        "response": _summary(response.summary if response is not None else None,
                             {"noop": True} if response is not None and response.noop else {}),
        "connection": ctx.connection_id,
    }
    entry.update(request_times(request))
    entry.update({
        "securityProtocol": ctx.security_protocol,
        "principal": str(ctx.principal),
        "listener": ctx.listener_name,
        "clientInformation": {
            "softwareName": ctx.client_software_name,
            "softwareVersion": ctx.client_software_version,
        },
    })
    return entry


class RequestLogger:
    """Writes entries as ``Completed request:{json}`` lines to a file and/or a Twisted logger.

    ``path`` opens a file appended line by line; ``to_logger`` emits on the
    ``kafka.request.logger`` namespace at debug level.  ``enabled`` False makes it free.
    """

    def __init__(self, path=None, to_logger=False, enabled=True):
        self.enabled = enabled and (path is not None or to_logger)
        self._file = open(path, "a", buffering=1, encoding="utf-8") if (enabled and path) else None
        self._log = Logger(namespace=NAMESPACE) if to_logger else None
        self.entries_written = 0

    @classmethod
    def from_config(cls, config):
        """From ``request.log.enabled`` / ``request.log.file`` (logger namespace if no file)."""
        enabled = bool(getattr(config, "request_log_enabled", False))
        path = getattr(config, "request_log_file", None) or None
        return cls(path=path, to_logger=path is None, enabled=enabled)

    def log_request(self, request, api_name, response=None):
        if not self.enabled:
            return
        line = json.dumps(request_log_entry(request, api_name, response), separators=(",", ":"))
        if self._file is not None:
            self._file.write("Completed request:" + line + "\n")
        if self._log is not None:
            self._log.debug("Completed request:{line}", line=line)
        self.entries_written += 1

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None
