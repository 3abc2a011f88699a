"""The network layer against a real broker process, with raw sockets and the project's codec.

Seed 003's example 3 (one request at a time per connection, the request log's times), bad
input closing only its own connection while a real producer keeps working, 1,000 idle
connections (RSS, ``connections.max.idle.ms``) and back pressure with ``queued.max.requests=1``.
The raw-socket helpers are in ``tests/support.py``.
"""

import selectors
import socket
import struct
import threading
import time

from twisted.trial import unittest

from kafkatw.testing import KafkaBrokerMixin
from tests.support import (
    API_VERSIONS,
    FETCH,
    FETCH_V,
    METADATA,
    PRODUCE,
    PRODUCE_V,
    RawClient,
    api_versions_body,
    closed_by_peer,
    create_topic,
    fetch_body,
    fetched_records,
    frame,
    poll_until,
    produce_body,
    read_all,
    recv_exact,
    request_log,
    rss_kb,
    tmp_path,
    unique_name,
)

REQUEST_LOG = tmp_path("network-request.log")


class PipelineAndBadInputTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_overrides = {"kafkatw.request.log.enable": "true", "kafkatw.request.log.file": REQUEST_LOG}

    def test_one_request_at_a_time_per_connection(self):
        """Seed 003 example 3: A's ApiVersions waits behind A's 2 s Fetch; B is not held up."""
        topic = create_topic(self.broker, unique_name("u04"))
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

        topic = create_topic(self.broker, unique_name("bad-input"), partitions=2)
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


class LargeFrameTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    """Large requests are received straight into their frames (network/socket_reader.py):
    whatever way the bytes arrive, every record is stored exactly once and in order."""

    def test_large_and_small_requests_pipelined_and_dribbled(self):
        topic = create_topic(self.broker, unique_name("large-frames"))
        client = RawClient(self.broker, "large-frames")
        self.addCleanup(client.close)
        sizes = [300000, 700000, 10, 450000, 20, 20, 900000]  # record values, by request
        sent, corrs, frames = [], [], []
        for i, size in enumerate(sizes * 2):
            value = (b"%03d-" % i) + bytes((i * 7 + j) % 251 for j in range(size))
            corr, data = client.encode(PRODUCE, PRODUCE_V, produce_body(topic, 0, [value]))
            sent.append(value)
            corrs.append(corr)
            frames.append(data)
        half = len(sizes)
        client.send_raw(b"".join(frames[:half]))  # the first seven in one write
        rest = b"".join(frames[half:])
        for start in range(0, len(rest), 7001):  # the others in pieces cutting anywhere
            client.send_raw(rest[start:start + 7001])
        answered = []
        for _ in corrs:
            corr, resp, _ = client.recv()
            self.assertEqual(resp.responses[0].partition_responses[0].error_code, 0)
            answered.append(corr)
        self.assertEqual(answered, corrs)
        stored = read_all(self.broker, topic, 0)
        self.assertEqual([offset for offset, _, _ in stored], list(range(len(sent))))
        self.assertEqual([value for _, _, value in stored], sent)

    def test_confluent_kafka_megabyte_values(self):
        from confluent_kafka import Consumer, Producer

        topic = create_topic(self.broker, unique_name("large-values"))
        values = [(b"%02d" % i) * (450000 + 1000 * i) for i in range(12)]
        producer = Producer({"bootstrap.servers": self.broker.bootstrap_servers, "linger.ms": 0,
                             "message.max.bytes": 1000000})
        for v in values:
            producer.produce(topic, value=v)
        self.assertEqual(producer.flush(30), 0)
        consumer = Consumer({"bootstrap.servers": self.broker.bootstrap_servers, "group.id": topic,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.addCleanup(consumer.close)
        consumer.subscribe([topic])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        self.assertEqual(got, values)


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
        # epoll, not select(): descriptors beyond 1024 are likely with 1,000 sockets
        open_socks = set(socks)
        waiting = selectors.DefaultSelector()
        self.addCleanup(waiting.close)
        for s in socks:
            waiting.register(s, selectors.EVENT_READ)
        t_idle = time.monotonic()

        def all_closed():
            for key, _ in waiting.select(0.2):
                s = key.fileobj
                try:
                    closed = s.recv(1) == b""
                except ConnectionResetError:
                    closed = True
                if closed:
                    waiting.unregister(s)
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
        topic = create_topic(self.broker, unique_name("parked"))
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
        topic = create_topic(self.broker, unique_name("backpressure"))
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
