"""Connection quotas on a real broker: ``max.connections.per.ip`` refuses the connection over the
limit (an override raises it for one address), ``max.connection.creation.rate`` slows a reconnect
storm without refusing anyone or slowing established connections (and never the inter-broker
listener), ``listener.name.<l>.max.connections`` makes the next connection wait for a slot.
"""

import socket
import struct
import time

from twisted.trial import unittest

from kafkatw.testing import KafkaBrokerMixin
from tests.support import closed_by_peer, poll_until, recv_exact

API_VERSIONS_V0 = struct.pack(">ihhih", 2 + 2 + 4 + 2 + 3, 18, 0, 7, 3) + b"raw"


def connect(port, source="127.0.0.1"):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def answers(sock):
    """True when the broker answers an ApiVersions v0 on ``sock`` with no error."""
    sock.sendall(API_VERSIONS_V0)
    size = int.from_bytes(recv_exact(sock, 4), "big")
    payload = recv_exact(sock, size)
    return struct.unpack_from(">ih", payload) == (7, 0)


class PerIpLimitTest(KafkaBrokerMixin, unittest.TestCase):
    broker_overrides = {"max.connections.per.ip": 10, "max.connections.per.ip.overrides": "127.0.0.2:20"}

    def open(self, n, source):
        socks = [connect(self.broker.port, source) for _ in range(n)]
        for s in socks:
            self.addCleanup(s.close)
        return socks

    def test_eleventh_connection_closed_override_allows_twenty(self):
        socks = self.open(10, "127.0.0.1")
        self.assertEqual([answers(s) for s in socks], [True] * 10)
        [extra] = self.open(1, "127.0.0.1")
        self.assertTrue(closed_by_peer(extra))
        self.assertTrue(all(answers(s) for s in socks))  # the ten stay served
        other = self.open(20, "127.0.0.2")
        self.assertEqual([answers(s) for s in other], [True] * 20)
        [extra] = self.open(1, "127.0.0.2")
        self.assertTrue(closed_by_peer(extra))
        for s in socks[:3]:
            s.close()
        # three slots free again for 127.0.0.1 (the broker notices the closes first)
        deadline = time.monotonic() + 10
        while True:
            [s] = self.open(1, "127.0.0.1")
            try:
                if answers(s):
                    break
            except (ConnectionError, OSError):
                pass
            self.assertLess(time.monotonic(), deadline, "no slot freed after closing three connections")
            time.sleep(0.05)


class CreationRateTest(KafkaBrokerMixin, unittest.TestCase):
    """5 connections/s: a storm of 20 takes about 3 s to be accepted, all of them served."""

    broker_options = {"listeners": ("PLAINTEXT://127.0.0.1:0", "INTERNAL://127.0.0.1:0")}
    broker_overrides = {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
                        "inter.broker.listener.name": "INTERNAL",
                        "max.connection.creation.rate": 5,
                        "quota.window.num": 2, "quota.window.size.seconds": 1}

    def storm(self, port, n=20):
        """Seconds until ``n`` connections opened at once are all answered."""
        started = time.monotonic()
        socks = [connect(port) for _ in range(n)]
        for s in socks:
            self.addCleanup(s.close)
        for s in socks:
            s.sendall(API_VERSIONS_V0)
        for s in socks:
            size = int.from_bytes(recv_exact(s, 4), "big")
            self.assertEqual(struct.unpack_from(">ih", recv_exact(s, size)), (7, 0))
        return time.monotonic() - started

    def test_storm_is_slowed_but_not_refused(self):
        established = connect(self.broker.port)
        self.addCleanup(established.close)
        self.assertTrue(answers(established))
        elapsed = self.storm(self.broker.port)
        # 21 connections (and the start-up check's) at 5/s, the first second's 5 at once: 3-4 s
        self.assertGreater(elapsed, 2.0)
        self.assertLess(elapsed, 8.0)
        started = time.monotonic()
        self.assertTrue(answers(established))
        self.assertLess(time.monotonic() - started, 1.0)

    def test_inter_broker_listener_is_not_throttled(self):
        elapsed = self.storm(self.broker.ports["INTERNAL"])
        self.assertLess(elapsed, 1.5)


class ListenerMaxConnectionsTest(KafkaBrokerMixin, unittest.TestCase):
    broker_overrides = {"listener.name.plaintext.max.connections": 3}

    def three_served(self):
        """Three connections, all answered (the start-up check's connection may still hold a
        slot for a moment: asked again until it is gone), or None."""
        socks = [connect(self.broker.port) for _ in range(3)]
        for s in socks:
            self.addCleanup(s.close)
            s.settimeout(0.5)
        try:
            if all(answers(s) for s in socks):
                for s in socks:
                    s.settimeout(10)
                return socks
        except socket.timeout:
            pass
        for s in socks:
            s.close()
        return None

    def test_next_connection_waits_for_a_slot(self):
        socks = poll_until(self.three_served, 10.0, 0.1, "three connections served")
        waiting = connect(self.broker.port)  # the kernel completes the handshake; not accepted yet
        self.addCleanup(waiting.close)
        waiting.sendall(API_VERSIONS_V0)
        waiting.settimeout(1.0)
        with self.assertRaises(socket.timeout):
            waiting.recv(4)
        socks[0].close()
        waiting.settimeout(10)
        size = int.from_bytes(recv_exact(waiting, 4), "big")
        self.assertEqual(struct.unpack_from(">ih", recv_exact(waiting, size)), (7, 0))


class IpConnectionRateTest(KafkaBrokerMixin, unittest.TestCase):
    """KIP-612 per IP: an ip entity's connection_creation_rate (AlterClientQuotas) closes the
    connections over it unserved, after the throttle time; other addresses are not affected."""

    broker_overrides = {"quota.window.num": 2, "quota.window.size.seconds": 1}

    def test_ip_over_its_rate_is_closed_unserved(self):
        from kafkatw.cli.client import KafkaClient
        from tests.test_e2e_quotas import alter

        with KafkaClient(self.broker.bootstrap_servers) as c:
            self.assertEqual(alter(c, {"ip": "127.0.0.3"}, {"connection_creation_rate": 2}), (0, None))
        socks = [connect(self.broker.port, "127.0.0.3") for _ in range(4)]
        for s in socks:
            self.addCleanup(s.close)
        self.assertEqual([answers(s) for s in socks[:2]], [True, True])
        for s in socks[2:]:
            s.sendall(API_VERSIONS_V0)
            self.assertEqual(s.recv(4), b"")  # closed without an answer
        others = [connect(self.broker.port, "127.0.0.4") for _ in range(4)]
        for s in others:
            self.addCleanup(s.close)
        self.assertEqual([answers(s) for s in others], [True] * 4)
