"""The idempotent producer against a real broker process: connections cut mid-flight and broker
restarts never duplicate, lose or reorder records.

A small TCP proxy (the broker advertises the proxy's port) forwards a confluent-kafka producer's
traffic and cuts the connection right after a request went through, before its answer comes
back; the producer retries and the broker answers the duplicates from its producer state.
Then the broker restarts (clean and SIGKILL) under the same producer: sequences continue.
"""

import time

from twisted.trial import unittest

from kafkatw.testing import KafkaBroker
from tests.support import LoopbackProxy, create_topic, poll_until, read_all, unique_name


class CuttingProxy(LoopbackProxy):
    """Forwards loopback TCP to ``target``; every ``cut_every`` bytes from the client it lets the
    request through, swallows what comes back and closes both sides (an answer lost in flight)."""

    def __init__(self, cut_every=None, max_cuts=0):
        self.cut_every = cut_every
        self.max_cuts = max_cuts
        self.cuts = 0
        self.sent_since_cut = 0
        super().__init__()

    def new_pair(self, client, server):
        return dict(super().new_pair(client, server), drop=False)

    def relay(self, pair, upstream):
        a, b = (pair["client"], pair["server"]) if upstream else (pair["server"], pair["client"])
        while True:
            data = a.recv(65536)
            if not data:
                return
            if not upstream and pair["drop"]:
                continue  # the answer is lost
            b.sendall(data)
            if upstream and self.cut_every:
                cut = False
                with self.lock:
                    self.sent_since_cut += len(data)
                    if self.sent_since_cut >= self.cut_every and self.cuts < self.max_cuts:
                        self.sent_since_cut = 0
                        self.cuts += 1
                        cut = True
                if cut:
                    pair["drop"] = True
                    time.sleep(0.05)  # the broker handles (appends) the request meanwhile
                    return


class IdempotentProducerTests(unittest.SynchronousTestCase):
    def start(self, proxy):
        broker = KafkaBroker(overrides={
            "advertised.listeners": "PLAINTEXT://127.0.0.1:%d" % proxy.port,
        })
        self.addCleanup(broker.close)
        broker.start()
        proxy.target = (broker.host, broker.port)
        return broker

    def producer(self, proxy, delivered, errors):
        from confluent_kafka import Producer

        def cb(err, msg):
            if err is None:
                delivered.append((msg.offset(), msg.value()))
            else:
                errors.append(err)

        p = Producer({"bootstrap.servers": "127.0.0.1:%d" % proxy.port, "enable.idempotence": True,
                      "acks": "all", "linger.ms": 5, "batch.num.messages": 50,
                      "max.in.flight.requests.per.connection": 5, "message.timeout.ms": 60000,
                      "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200,
                      "retry.backoff.ms": 20, "socket.timeout.ms": 5000})
        return p, cb

    def check_exactly_once(self, broker, topic, n, delivered, errors):
        self.assertEqual(errors, [])
        self.assertEqual(len(delivered), n)
        got = read_all(broker, topic, 0)
        expected = [b"seq-%06d" % i for i in range(n)]
        values = [v for _, _, v in got]
        self.assertEqual(len(values), len(set(values)), "duplicates")
        self.assertEqual(values, expected)
        # every acknowledged offset holds the acknowledged record
        self.assertEqual(sorted(delivered), [(i, v) for i, v in enumerate(expected)])

    def test_connection_cut_mid_flight_retries_without_duplicates(self):
        proxy = CuttingProxy(cut_every=12000, max_cuts=6)
        self.addCleanup(proxy.close)
        broker = self.start(proxy)
        topic = create_topic(broker, unique_name("idem-cut"))
        delivered, errors = [], []
        p, cb = self.producer(proxy, delivered, errors)
        n = 6000
        for i in range(n):
            while True:
                try:
                    p.produce(topic, value=b"seq-%06d" % i, partition=0, on_delivery=cb)
                    break
                except BufferError:
                    p.poll(0.05)
            p.poll(0)
            if i % 200 == 0:
                time.sleep(0.01)
        self.assertEqual(p.flush(60), 0)
        print("\n  %d connections cut after a request went through; %d records delivered"
              % (proxy.cuts, len(delivered)))
        self.assertEqual(proxy.cuts, 6)
        self.check_exactly_once(broker, topic, n, delivered, errors)

    def test_producer_state_survives_broker_restarts(self):
        proxy = CuttingProxy()
        self.addCleanup(proxy.close)
        broker = self.start(proxy)
        topic = create_topic(broker, unique_name("idem-restart"))
        delivered, errors = [], []
        p, cb = self.producer(proxy, delivered, errors)
        n = 0

        def produce(count):
            nonlocal n
            for _ in range(count):
                p.produce(topic, value=b"seq-%06d" % n, partition=0, on_delivery=cb)
                n += 1
                p.poll(0)

        produce(500)
        self.assertEqual(p.flush(30), 0)
        broker.restart()  # clean: producer state from the snapshot
        produce(500)
        self.assertEqual(p.flush(30), 0)
        produce(500)
        poll_until(lambda: len(delivered) >= n - 200 or (p.poll(0.01) and False), 30,
                   message="part of the third round delivered")
        broker.kill()  # crash with batches in flight: state rebuilt from the log
        broker.start()
        produce(500)
        self.assertEqual(p.flush(60), 0)
        print("\n  %d records across a clean restart and a SIGKILL, %d delivered" % (n, len(delivered)))
        self.check_exactly_once(broker, topic, n, delivered, errors)
        self.assertNotIn("OUT_OF_ORDER_SEQUENCE", broker.log_tail(2000))
