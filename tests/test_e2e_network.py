"""The network layer against a real broker process, with raw sockets and the project's codec.

Seed 003's example 3 (one request at a time per connection, the request log's times), bad
input closing only its own connection while a real producer keeps working, 1,000 idle
connections (RSS, ``connections.max.idle.ms``) and back pressure with ``queued.max.requests=1``.
The raw-socket helpers here are shared by the other ``test_e2e_*`` modules.
"""

import atexit
import json
import os
import select
import shutil
import socket
import struct
import tempfile
import threading
import time
import uuid

from twisted.trial import unittest

from kafkatw.protocol import messages as m
from kafkatw.protocol import records as rec
from kafkatw.testing import KafkaBrokerMixin

_TMP = tempfile.mkdtemp(prefix="kafkatw-e2e-")
atexit.register(shutil.rmtree, _TMP, True)

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS, CREATE_TOPICS = 0, 1, 2, 3, 18, 19
FETCH_V = 12  # the last Fetch version with topic names
PRODUCE_V = 9


def tmp_path(name):
    return os.path.join(_TMP, "%s-%s" % (uuid.uuid4().hex[:8], name))


def topic_name(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def poll_until(predicate, timeout=20.0, interval=0.02, message="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("timed out after %.1f s waiting for %s" % (timeout, message))


def frame(api_key, version, correlation_id, body, client_id="raw"):
    hv = m.request_header_version(api_key, version)
    header = m.RequestHeader(request_api_key=api_key, request_api_version=version,
                             correlation_id=correlation_id, client_id=client_id)
    payload = b"".join(header.encode(hv)) + b"".join(bytes(p) for p in body.encode(version))
    return struct.pack(">i", len(payload)) + payload


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return bytes(buf)


def closed_by_peer(sock, timeout=5.0):
    """True when the peer closes ``sock`` (EOF or reset) within ``timeout`` with nothing sent."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(1)
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False
    return data == b""


class RawClient:
    """One connection speaking the protocol through ``kafkatw.protocol.messages``.

    Counts bytes on the wire both ways (``bytes_sent``, ``bytes_received``; the size prefix
    included) and remembers the API/version of each outstanding correlation id.
    """

    def __init__(self, broker, client_id="raw", timeout=15.0):
        self.sock = socket.create_connection((broker.host, broker.port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.next_corr = 1
        self.pending = {}
        self.bytes_sent = 0
        self.bytes_received = 0

    def encode(self, api_key, version, body):
        corr = self.next_corr
        self.next_corr += 1
        self.pending[corr] = (api_key, version)
        return corr, frame(api_key, version, corr, body, self.client_id)

    def send(self, api_key, version, body):
        corr, data = self.encode(api_key, version, body)
        self.sock.sendall(data)
        self.bytes_sent += len(data)
        return corr

    def send_raw(self, data):
        self.sock.sendall(data)
        self.bytes_sent += len(data)

    def recv(self):
        """``(correlation_id, response body, bytes on the wire)`` of the next response."""
        (size,) = struct.unpack(">i", recv_exact(self.sock, 4))
        payload = recv_exact(self.sock, size)
        self.bytes_received += 4 + size
        (corr,) = struct.unpack_from(">i", payload, 0)
        api_key, version = self.pending.pop(corr)
        view = memoryview(payload)
        _, pos = m.ResponseHeader.decode_from(view, 0, m.response_header_version(api_key, version))
        body, _ = m.RESPONSES[api_key].decode_from(view, pos, version)
        return corr, body, 4 + size

    def request(self, api_key, version, body):
        corr = self.send(api_key, version, body)
        got, resp, _ = self.recv()
        assert got == corr, (got, corr)
        return resp

    def close(self):
        self.sock.close()


def api_versions_body():
    return m.ApiVersionsRequest(client_software_name="kafkatw-e2e", client_software_version="1.0")


def create_topic(broker, name, partitions=1, configs=None):
    c = RawClient(broker, "e2e-admin", timeout=60)
    try:
        body = m.CreateTopicsRequest(topics=[m.CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=1, assignments=[],
            configs=[m.CreateTopicsRequest.CreatableTopicConfig(name=k, value=str(v))
                     for k, v in (configs or {}).items()])], timeout_ms=10000, validate_only=False)
        resp = c.request(CREATE_TOPICS, 5, body)
    finally:
        c.close()
    assert resp.topics[0].error_code == 0, resp.topics[0]
    return name


def produce_body(topic, partition, values, acks=1, keys=None, **batch_args):
    records = [rec.Record(key=None if keys is None else keys[i], value=v) for i, v in enumerate(values)]
    batch_args.setdefault("base_timestamp", int(time.time() * 1000))
    batch = rec.build_batch(records, **batch_args)
    return m.ProduceRequest(transactional_id=None, acks=acks, timeout_ms=10000, topic_data=[
        m.ProduceRequest.TopicProduceData(name=topic, partition_data=[
            m.ProduceRequest.PartitionProduceData(index=partition, records=batch)])])


def produce(client, topic, partition, values, **kw):
    """Base offset of ``values`` appended as one batch (acks=1); asserts no error."""
    resp = client.request(PRODUCE, PRODUCE_V, produce_body(topic, partition, values, **kw))
    p = resp.responses[0].partition_responses[0]
    assert p.error_code == 0, p
    return p.base_offset


def fetch_body(partitions, max_wait_ms=0, min_bytes=1, session_id=0, epoch=-1, forgotten=(),
               max_bytes=50 * 1024 * 1024, partition_max_bytes=1024 * 1024):
    """``partitions``: [(topic, partition, fetch_offset)] grouped by topic in order."""
    topics = []
    for topic, partition, offset in partitions:
        if not topics or topics[-1].topic != topic:
            topics.append(m.FetchRequest.FetchTopic(topic=topic, partitions=[]))
        topics[-1].partitions.append(m.FetchRequest.FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=partition_max_bytes,
            current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1))
    forgotten_topics = {}
    for topic, partition in forgotten:
        forgotten_topics.setdefault(topic, []).append(partition)
    return m.FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                          isolation_level=0, session_id=session_id, session_epoch=epoch, topics=topics,
                          forgotten_topics_data=[m.FetchRequest.ForgottenTopic(topic=t, partitions=ps)
                                                 for t, ps in forgotten_topics.items()],
                          rack_id="")


def fetched_records(partition_data):
    """[(offset, key, value)] of a response partition's records."""
    data = partition_data.records
    if data is None or len(data) == 0:
        return []
    out = []
    for header, records in rec.iter_batches(bytes(data), allow_partial_tail=True):
        for r in records:
            out.append((r.offset, r.key, r.value))
    return out


def read_all(broker, topic, partition, start=0, client_id="e2e-reader"):
    """Every record from ``start`` to the high watermark, with raw sessionless fetches."""
    c = RawClient(broker, client_id)
    out = []
    offset = start
    try:
        while True:
            resp = c.request(FETCH, FETCH_V, fetch_body([(topic, partition, offset)], epoch=-1))
            p = resp.responses[0].partitions[0]
            assert p.error_code == 0, p
            got = [r for r in fetched_records(p) if r[0] >= offset]
            out.extend(got)
            if got:
                offset = got[-1][0] + 1
            if offset >= p.high_watermark:
                return out
            if not got:
                raise AssertionError("no progress at offset %d (hw %d)" % (offset, p.high_watermark))
    finally:
        c.close()


def request_log(path):
    """The JSON entries of a request log file."""
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("Completed request:"):
                out.append(json.loads(line[len("Completed request:"):]))
    return out


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for %d" % pid)


# ---------------------------------------------------------------------------------------------


REQUEST_LOG = tmp_path("network-request.log")


class PipelineAndBadInputTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_overrides = {"kafkatw.request.log.enable": "true", "kafkatw.request.log.file": REQUEST_LOG}

    def test_one_request_at_a_time_per_connection(self):
        """Seed 003 example 3: A's ApiVersions waits behind A's 2 s Fetch; B is not held up."""
        topic = create_topic(self.broker, topic_name("u04"))
        a = RawClient(self.broker, "u04-a")
        b = RawClient(self.broker, "u04-b")
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        fetch = fetch_body([(topic, 0, 0)], max_wait_ms=2000, min_bytes=1, epoch=0,
                           partition_max_bytes=1024)
        c1, f1 = a.encode(FETCH, FETCH_V, fetch)
        c2, f2 = a.encode(API_VERSIONS, 3, api_versions_body())
        t0 = time.monotonic()
        a.send_raw(f1 + f2)  # pipelined: one write
        time.sleep(0.1)
        t_b = time.monotonic()
        c3 = b.send(API_VERSIONS, 3, api_versions_body())
        corr, resp, _ = b.recv()
        b_latency = time.monotonic() - t_b
        self.assertEqual((corr, resp.error_code), (c3, 0))
        first, fetch_resp, _ = a.recv()
        t_first = time.monotonic() - t0
        second, av_resp, _ = a.recv()
        t_second = time.monotonic() - t0
        print("\n  conn B ApiVersions answered in %.1f ms; conn A Fetch at %.3f s, ApiVersions at %.3f s"
              % (b_latency * 1000, t_first, t_second))
        self.assertLess(b_latency, 0.1)
        self.assertEqual((first, second), (c1, c2))  # in request order
        self.assertEqual(fetch_resp.responses[0].partitions[0].error_code, 0)
        self.assertEqual(fetched_records(fetch_resp.responses[0].partitions[0]), [])
        self.assertEqual(av_resp.error_code, 0)
        self.assertGreater(t_first, 1.9)
        self.assertGreaterEqual(t_second, t_first)

        def entries():
            found = {(e["requestHeader"]["clientId"], e["requestHeader"]["correlationId"]): e
                     for e in request_log(REQUEST_LOG)}
            keys = [("u04-a", c1), ("u04-a", c2), ("u04-b", c3)]
            return [found[k] for k in keys] if all(k in found for k in keys) else None

        a_fetch, a_av, b_av = poll_until(entries, 5, message="request log lines")
        self.assertEqual(a_fetch["requestHeader"]["requestApiKeyName"], "FETCH")
        self.assertEqual(a_av["requestHeader"]["requestApiKeyName"], "API_VERSIONS")
        print("  request log: fetch total=%s remote=%s local=%s; A ApiVersions total=%s; B total=%s"
              % (a_fetch["totalTimeMs"], a_fetch["remoteTimeMs"], a_fetch["localTimeMs"],
                 a_av["totalTimeMs"], b_av["totalTimeMs"]))
        # The mute wait is not in the log: A's ApiVersions was read only after the fetch answer.
        self.assertLess(a_av["totalTimeMs"], 100)
        self.assertLess(b_av["totalTimeMs"], 100)
        self.assertTrue(1900 <= a_fetch["remoteTimeMs"] <= 2600, a_fetch)
        self.assertLess(a_fetch["localTimeMs"], 100)
        self.assertEqual(a_fetch["connection"], a_av["connection"])
        self.assertNotEqual(a_fetch["connection"], b_av["connection"])
        self.assertEqual(a_av["clientInformation"],
                         {"softwareName": "kafkatw-e2e", "softwareVersion": "1.0"})

    def _bad_inputs(self):
        """(name, bytes to send, expect the broker to close) of every malformed input."""
        too_new = struct.pack(">hhih", METADATA, 13, 7, 3) + b"bad" + b"\x00" + b"\x00"
        unknown = struct.pack(">hhih", 9999, 0, 8, 3) + b"bad"
        return [
            ("http request", b"GET / HTTP/1.1\r\nHost: kafka\r\n\r\n"),
            ("length below a header", struct.pack(">i", 3) + b"abc"),
            ("negative length", struct.pack(">i", -5)),
            ("oversized length", struct.pack(">i", 200 * 1024 * 1024) + b"x" * 100),
            ("unknown api key", struct.pack(">i", len(unknown)) + unknown),
            ("metadata v13", struct.pack(">i", len(too_new)) + too_new),
            ("undecodable body", struct.pack(">i", 10) + struct.pack(">hhih", METADATA, 9, 9, 200)),
        ]

    def test_bad_input_closes_only_its_connection(self):
        from confluent_kafka import Producer

        topic = create_topic(self.broker, topic_name("bad-input"), partitions=2)
        good = RawClient(self.broker, "bystander")
        self.addCleanup(good.close)
        n = 3000
        delivered = []
        errors = []
        stop = threading.Event()

        def produce_loop():
            p = Producer({"bootstrap.servers": self.broker.bootstrap_servers, "acks": "all",
                          "linger.ms": 2, "enable.idempotence": False, "max.in.flight": 5})

            def cb(err, msg):
                (errors if err else delivered).append(err or (msg.partition(), msg.offset(), msg.value()))

            for i in range(n):
                p.produce(topic, value=b"v-%05d" % i, partition=i % 2, on_delivery=cb)
                p.poll(0)
                if i % 100 == 0:
                    time.sleep(0.02)
            p.flush(30)
            stop.set()

        t = threading.Thread(target=produce_loop, daemon=True)
        t.start()
        for name, data in self._bad_inputs():
            s = socket.create_connection((self.broker.host, self.broker.port), timeout=5)
            port = s.getsockname()[1]
            s.sendall(data)
            self.assertTrue(closed_by_peer(s), name)
            s.close()
            resp = good.request(API_VERSIONS, 3, api_versions_body())
            self.assertEqual(resp.error_code, 0, name)
            if name == "oversized length":
                poll_until(lambda: ":%d" % port in self.broker.log_tail(200) and
                           "209715200" in self.broker.log_tail(200), 5, message="log line naming the peer")
        # a frame cut short, then the client goes away: nothing to answer, nothing else hurt
        s = socket.create_connection((self.broker.host, self.broker.port), timeout=5)
        s.sendall(struct.pack(">i", 100) + b"\x00\x03\x00\x09" + b"x" * 10)
        s.close()
        # ApiVersions of a version from the future is answered (v0 body, UNSUPPORTED_VERSION)
        s = socket.create_connection((self.broker.host, self.broker.port), timeout=5)
        body = struct.pack(">hhih", API_VERSIONS, 99, 42, 3) + b"new"
        s.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", recv_exact(s, 4))
        corr, err = struct.unpack_from(">ih", recv_exact(s, size))
        self.assertEqual((corr, err), (42, 35))
        s.close()
        self.assertEqual(good.request(API_VERSIONS, 3, api_versions_body()).error_code, 0)
        t.join(60)
        self.assertTrue(stop.is_set())
        self.assertEqual(errors, [])
        self.assertEqual(len(delivered), n)
        for partition in (0, 1):
            got = read_all(self.broker, topic, partition)
            expected = [b"v-%05d" % i for i in range(partition, n, 2)]
            self.assertEqual([v for _, _, v in got], expected)
            self.assertEqual([o for o, _, _ in got], list(range(len(expected))))
        self.assertIsNone(self.broker.process.poll())


class IdleConnectionTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_overrides = {"connections.max.idle.ms": 3000, "socket.listen.backlog.size": 1024}
    connections = 1000

    def setUp(self):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = self.connections + 500
        if soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
        super().setUp()

    def test_thousand_idle_connections(self):
        pid = self.broker.process.pid
        warm = RawClient(self.broker, "warm")
        warm.request(API_VERSIONS, 3, api_versions_body())
        warm.close()
        before = rss_kb(pid)
        socks = []
        self.addCleanup(lambda: [s.close() for s in socks])
        req = frame(API_VERSIONS, 3, 1, api_versions_body(), "idle")
        t0 = time.monotonic()
        for _ in range(self.connections):
            s = socket.create_connection((self.broker.host, self.broker.port), timeout=10)
            s.sendall(req)
            socks.append(s)
        for s in socks:  # every connection is live: it got its answer
            (size,) = struct.unpack(">i", recv_exact(s, 4))
            recv_exact(s, size)
        opened = time.monotonic() - t0
        during = rss_kb(pid)
        print("\n  broker RSS %.1f MB before, %.1f MB with %d connections (+%.1f MB, %.1f KB each); "
              "opened in %.2f s" % (before / 1024, during / 1024, self.connections,
                                    (during - before) / 1024, (during - before) / self.connections, opened))
        self.assertLess(during - before, 100 * 1024)
        # connections.max.idle.ms=3000 closes every one of them
        open_socks = set(socks)
        t_idle = time.monotonic()

        def all_closed():
            r, _, _ = select.select(list(open_socks), [], [], 0.2)
            for s in r:
                try:
                    if s.recv(1) == b"":
                        open_socks.discard(s)
                except ConnectionResetError:
                    open_socks.discard(s)
            return not open_socks

        poll_until(all_closed, 20, interval=0, message="idle connections to be closed")
        closed_after = time.monotonic() - t_idle
        print("  all %d closed by the broker %.2f s after their last answer" % (self.connections, closed_after))
        self.assertLess(closed_after, 10)
        # the broker still serves new connections
        fresh = RawClient(self.broker, "after-idle")
        self.assertEqual(fresh.request(API_VERSIONS, 3, api_versions_body()).error_code, 0)
        fresh.close()


class BackPressureTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_overrides = {"queued.max.requests": 1, "num.io.threads": 1}

    def test_parked_fetch_holds_no_handler_slot(self):
        """With num.io.threads=1, a fetch waiting in the purgatory leaves the handler free."""
        topic = create_topic(self.broker, topic_name("parked"))
        a = RawClient(self.broker, "parked-a")
        b = RawClient(self.broker, "parked-b")
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        t0 = time.monotonic()
        corr = a.send(FETCH, FETCH_V, fetch_body([(topic, 0, 0)], max_wait_ms=1500, epoch=-1))
        time.sleep(0.1)
        t_b = time.monotonic()
        self.assertEqual(b.request(API_VERSIONS, 3, api_versions_body()).error_code, 0)
        self.assertLess(time.monotonic() - t_b, 0.5)
        self.assertEqual(a.recv()[0], corr)
        self.assertGreater(time.monotonic() - t0, 1.4)

    def test_pipelined_produce_with_a_queue_of_one(self):
        """Many connections pipeline produce requests into a queue of one: none is dropped,
        each connection's answers come back in request order."""
        topic = create_topic(self.broker, topic_name("backpressure"))
        conns, per_conn = 8, 60
        clients = [RawClient(self.broker, "bp-%d" % i) for i in range(conns)]
        for c in clients:
            self.addCleanup(c.close)
        sent = []
        for i, c in enumerate(clients):
            frames = []
            corrs = []
            for j in range(per_conn):
                corr, data = c.encode(PRODUCE, PRODUCE_V, produce_body(
                    topic, 0, [b"c%d-r%03d-%d" % (i, j, k) for k in range(3)] + [b"x" * 2000]))
                frames.append(data)
                corrs.append(corr)
            sent.append(corrs)
            c.send_raw(b"".join(frames))  # all of them in one write, without waiting
        base_offsets = {}
        for i, c in enumerate(clients):
            got = []
            for _ in range(per_conn):
                corr, resp, _ = c.recv()
                p = resp.responses[0].partition_responses[0]
                self.assertEqual(p.error_code, 0)
                got.append(corr)
                base_offsets[(i, corr)] = p.base_offset
            self.assertEqual(got, sent[i])
            offsets = [base_offsets[(i, corr)] for corr in sent[i]]
            self.assertEqual(offsets, sorted(offsets))
        self.assertEqual(len(set(base_offsets.values())), conns * per_conn)
        records = read_all(self.broker, topic, 0)
        self.assertEqual(len(records), conns * per_conn * 4)
        values = [v for _, _, v in records if not v.startswith(b"x")]
        self.assertEqual(sorted(values), sorted(b"c%d-r%03d-%d" % (i, j, k) for i in range(conns)
                                                for j in range(per_conn) for k in range(3)))
        for i in range(conns):
            mine = [v for v in values if v.startswith(b"c%d-" % i)]
            self.assertEqual(mine, [b"c%d-r%03d-%d" % (i, j, k) for j in range(per_conn) for k in range(3)])
        # the broker answered each batch at the offset where its records are
        for (i, corr), base in base_offsets.items():
            j = sent[i].index(corr)
            self.assertEqual(records[base][2], b"c%d-r%03d-0" % (i, j))
