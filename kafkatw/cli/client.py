"""A small blocking Kafka client for the ``kafkatw`` command: sockets (plain or TLS), request
headers, version negotiation with ApiVersions and routing to partition leaders, all over the
project's own codec (``kafkatw.protocol.messages``). It knows no command; commands build bodies.
"""

import socket
import ssl
import struct
import time

from kafkatw.protocol import messages
from kafkatw.protocol.errors import ERRORS, error_name

_SIZE = struct.Struct(">i")

# Highest version the CLI builds bodies for (fields are set per version where it matters).
MAX_VERSIONS = {
    0: 9,    # Produce: topic names (v13 uses ids)
    1: 12,   # Fetch: topic names
    2: 8,    # ListOffsets
    3: 12,   # Metadata
    8: 8,    # OffsetCommit (v9 is KIP-848)
    9: 7,    # OffsetFetch (v8 batches groups)
    10: 3,   # FindCoordinator (v4 batches keys)
}


class ClientError(Exception):
    """A failure to report to the user in one line (exit status 1 unless a subclass says)."""


class UsageError(ClientError):
    """The command line asks for something impossible, found after parsing (exit status 2)."""


class BrokerConnectionError(ClientError):
    """No broker could be reached or a connection broke (exit status 3)."""


class KafkaResponseError(ClientError):
    """The broker answered with an error code (exit status 4)."""

    def __init__(self, code, message=None, what=None):
        self.code = code
        text = error_name(code)
        if message:
            text += ": " + message
        if what:
            text = "%s: %s" % (what, text)
        super().__init__(text)


def check(code, message=None, what=None):
    if code:
        raise KafkaResponseError(code, message, what)


def parse_bootstrap(text):
    out = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise UsageError("invalid bootstrap server %r (expected host:port)" % (item,))
        out.append((host.strip("[]") or "localhost", int(port)))
    if not out:
        raise UsageError("--bootstrap-server is required")
    return out


def ssl_context(config):
    """An ``ssl.SSLContext`` from client properties (security.protocol SSL/SASL_SSL), or None."""
    protocol = config.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in ("SSL", "SASL_SSL"):
        if protocol not in ("PLAINTEXT", "SASL_PLAINTEXT"):
            raise UsageError("unknown security.protocol %r" % (protocol,))
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    cafile = config.get("ssl.cafile") or config.get("ssl.ca.location")
    truststore = config.get("ssl.truststore.location")
    if truststore:
        kind = config.get("ssl.truststore.type", "PEM").upper()
        if kind != "PEM":
            raise ClientError("ssl.truststore.type %s is not supported (use PEM)" % kind)
        cafile = truststore
    if cafile:
        ctx.load_verify_locations(cafile=cafile)
    else:
        ctx.load_default_certs()
    cert = config.get("ssl.certfile") or config.get("ssl.certificate.location") \
        or config.get("ssl.keystore.location")
    if cert:
        ctx.load_cert_chain(cert, keyfile=config.get("ssl.keyfile") or config.get("ssl.key.location"),
                            password=config.get("ssl.key.password"))
    if config.get("ssl.endpoint.identification.algorithm", "https") == "":
        ctx.check_hostname = False
    if str(config.get("ssl.check.hostname", "true")).lower() == "false":
        ctx.check_hostname = False
    return ctx


class BrokerConnection:
    """One socket to one broker; ``send(body)`` writes a request and reads its response."""

    def __init__(self, host, port, ssl_ctx=None, client_id="kafkatw-cli", timeout=30.0, sasl=None):
        self.host, self.port = host, port
        self.client_id = client_id
        self._correlation = 0
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise BrokerConnectionError("cannot connect to %s:%d: %s" % (host, port, e.strerror or e))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ssl_ctx is not None:
            try:
                sock = ssl_ctx.wrap_socket(sock, server_hostname=host)
            except (ssl.SSLError, OSError) as e:
                sock.close()
                raise BrokerConnectionError("TLS handshake with %s:%d failed: %s" % (host, port, e))
        self.sock = sock
        self.api_versions = {}
        self._negotiate()
        if sasl is not None:  # (mechanism, username, password): log in before any other request
            from kafkatw.cli.sasl import SaslClientError, login

            try:
                login(self, *sasl)
            except SaslClientError as e:
                self.close()
                raise ClientError("%s:%d: %s" % (host, port, e)) from None

    def _negotiate(self):
        resp = self.send(messages.ApiVersionsRequest(), 0, api_key=18)
        check(resp.error_code, what="ApiVersions")
        self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def version_for(self, api_key, wanted_max=None):
        cls = messages.REQUESTS[api_key]
        if api_key not in self.api_versions:
            raise ClientError("the broker at %s:%d does not support %s"
                              % (self.host, self.port, messages.API_NAMES[api_key]))
        lo, hi = self.api_versions[api_key]
        top = min(hi, cls.VALID_VERSIONS[1], MAX_VERSIONS.get(api_key, hi))
        if wanted_max is not None:
            top = min(top, wanted_max)
        if top < max(lo, cls.VALID_VERSIONS[0]):
            raise ClientError("no common version of %s with %s:%d (broker %d-%d)"
                              % (messages.API_NAMES[api_key], self.host, self.port, lo, hi))
        return top

    def send(self, body, version, api_key=None):
        api_key = body.API_KEY if api_key is None else api_key
        self._correlation += 1
        header = messages.RequestHeader(request_api_key=api_key, request_api_version=version,
                                        correlation_id=self._correlation, client_id=self.client_id)
        data = header.encode_bytes(messages.request_header_version(api_key, version)) + \
            body.encode_bytes(version)
        try:
            self.sock.sendall(_SIZE.pack(len(data)) + data)
            (size,) = _SIZE.unpack(self._recv(4))
            payload = memoryview(self._recv(size))
        except (OSError, ConnectionError) as e:
            raise BrokerConnectionError("connection to %s:%d failed: %s" % (self.host, self.port, e))
        head, pos = messages.ResponseHeader.decode_from(
            payload, 0, messages.response_header_version(api_key, version))
        if head.correlation_id != self._correlation:
            raise ClientError("correlation id mismatch from %s:%d" % (self.host, self.port))
        resp, _ = messages.RESPONSES[api_key].decode_from(payload, pos, version)
        return resp

    def _recv(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class KafkaClient:
    """Connections to a cluster: bootstrap, brokers by node id, metadata and leaders."""

    def __init__(self, bootstrap, config=None, client_id="kafkatw-cli", timeout=30.0):
        self.bootstrap = parse_bootstrap(bootstrap)
        self.config = dict(config or {})
        self.ssl_ctx = ssl_context(self.config)
        from kafkatw.cli.sasl import SaslClientError, settings

        try:
            self.sasl = settings(self.config)
        except SaslClientError as e:
            raise ClientError(str(e)) from None
        self.client_id = client_id
        self.timeout = timeout
        self._conns = {}       # (host, port) -> BrokerConnection
        self.brokers = {}      # node id -> (host, port)
        self._bootstrap_conn = None

    def _connect(self, host, port):
        conn = self._conns.get((host, port))
        if conn is None:
            conn = BrokerConnection(host, port, self.ssl_ctx, self.client_id, self.timeout, self.sasl)
            self._conns[(host, port)] = conn
        return conn

    def any_connection(self):
        if self._bootstrap_conn is not None:
            return self._bootstrap_conn
        errors = []
        for host, port in self.bootstrap:
            try:
                self._bootstrap_conn = self._connect(host, port)
                return self._bootstrap_conn
            except ClientError as e:
                errors.append(e)
        refused = [e for e in errors if not isinstance(e, BrokerConnectionError)]
        if refused:
            raise refused[0]  # reached a broker, which refused (a failed SASL login): not an outage
        raise BrokerConnectionError("; ".join(str(e) for e in errors))

    def node(self, node_id):
        if node_id not in self.brokers:
            self.metadata([])
        if node_id not in self.brokers:
            raise ClientError("broker %d is not in the cluster metadata" % node_id)
        return self._connect(*self.brokers[node_id])

    def request(self, body, conn=None, max_version=None):
        """Send ``body`` (its class's API) at the best common version; returns ``(response, version)``."""
        conn = conn or self.any_connection()
        version = conn.version_for(body.API_KEY, max_version)
        return conn.send(body, version), version

    def call(self, body, conn=None, max_version=None):
        return self.request(body, conn, max_version)[0]

    def metadata(self, topics=None, allow_auto_create=False):
        """MetadataResponse for ``topics`` (None: all topics); records the brokers."""
        req = messages.MetadataRequest(
            topics=None if topics is None else [messages.MetadataRequest.MetadataRequestTopic(name=t)
                                                for t in topics])
        conn = self.any_connection()
        version = conn.version_for(3)
        if version == 0 and topics is None:
            req.topics = []
        if version >= 4:
            req.allow_auto_topic_creation = allow_auto_create
        resp = conn.send(req, version)
        for b in resp.brokers:
            self.brokers[b.node_id] = (b.host, b.port)
        return resp

    def topic_partitions(self, topic):
        """{partition: leader id} of an existing topic, or raise ClientError."""
        md = self.metadata([topic])
        for t in md.topics:
            if t.name == topic:
                check(t.error_code, what="topic %s" % topic)
                return {p.partition_index: p.leader_id for p in t.partitions}
        raise ClientError("topic %s not found" % topic)

    def leader(self, topic, partition, leaders=None):
        leaders = leaders if leaders is not None else self.topic_partitions(topic)
        if partition not in leaders:
            raise ClientError("topic %s has no partition %d" % (topic, partition))
        if leaders[partition] < 0:
            raise ClientError("partition %s-%d has no leader" % (topic, partition))
        return self.node(leaders[partition])

    def coordinator(self, group):
        """The connection to ``group``'s coordinator."""
        conn = self.any_connection()
        if 10 not in conn.api_versions:
            return conn
        # Retriable errors (COORDINATOR_NOT_AVAILABLE while the broker creates
        # __consumer_offsets, COORDINATOR_LOAD_IN_PROGRESS) are retried, as Kafka's clients do.
        deadline = time.monotonic() + self.timeout
        delay = 0.05
        while True:
            resp = self.call(messages.FindCoordinatorRequest(key=group), conn)
            info = ERRORS.get(resp.error_code)
            if not (info is not None and info.retriable and time.monotonic() + delay < deadline):
                break
            time.sleep(delay)  # a blocking CLI: nothing else to do meanwhile
            delay = min(delay * 2, 1.0)
        check(resp.error_code, resp.error_message, "FindCoordinator for group %s" % group)
        return self._connect(resp.host, resp.port)

    def list_offsets(self, topic, partitions, timestamp, leaders=None):
        """{partition: offset} for ``timestamp`` (-2 earliest, -1 latest, or ms)."""
        leaders = leaders if leaders is not None else self.topic_partitions(topic)
        by_node = {}
        for p in partitions:
            by_node.setdefault(leaders.get(p, -1), []).append(p)
        out = {}
        for node_id, parts in by_node.items():
            conn = self.node(node_id) if node_id >= 0 else self.any_connection()
            req = messages.ListOffsetsRequest(replica_id=-1, topics=[
                messages.ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
                    messages.ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=timestamp)
                    for p in parts])])
            version = conn.version_for(2)
            if version == 0:
                for tp in req.topics[0].partitions:
                    tp.max_num_offsets = 1
            resp = conn.send(req, version)
            for t in resp.topics:
                for p in t.partitions:
                    check(p.error_code, what="ListOffsets %s-%d" % (topic, p.partition_index))
                    offset = p.offset if version >= 1 else (p.old_style_offsets[0] if p.old_style_offsets else -1)
                    out[p.partition_index] = offset
        return out

    def close(self):
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        self._bootstrap_conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
