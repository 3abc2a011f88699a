"""A broker whose ZooKeeper connection (not its session) is cut at registration time, at start
or registering again after its session expired, joins the cluster all the same: the create of
``/brokers/ids/<id>`` reaches ZooKeeper, its answer is lost with the connection, and the
broker's resend finds the node its own session made (Kafka's checkedEphemeralCreate). A small
proxy between the broker and ZooKeeper reads ZooKeeper's framing to cut exactly there. Skips
without ZooKeeper unless KAFKATW_REQUIRE_ZOOKEEPER=1."""

import re
import struct

from twisted.trial import unittest

from kafkatw import testing
from tests.support import LoopbackProxy
from tests.test_cluster_e2e import require_zookeeper, zk_read

#: ZooKeeper opcodes of the creates (create, create2, createContainer, createTTL)
CREATE_OPS = (1, 15, 19, 21)


class AnswerLosingProxy(LoopbackProxy):
    """Forwards ZooKeeper's protocol to ``target`` frame by frame. Armed with a path suffix, it
    lets the next create of such a path through, swallows ZooKeeper's answer to it and closes
    both sides (the session lives on; the client reconnects through the proxy). ``lost`` lists
    the paths whose answer it swallowed."""

    def __init__(self, target):
        self.armed = None
        self.lost = []
        super().__init__(target)

    def lose_answer_to_create(self, suffix):
        self.armed = suffix

    def new_pair(self, client, server):
        return dict(super().new_pair(client, server), lose_xid=None)

    @staticmethod
    def _frames(sock):
        """Length-prefixed frames as they arrive; ends when the socket does."""
        buffered = b""
        while True:
            data = sock.recv(65536)
            if not data:
                return
            buffered += data
            while len(buffered) >= 4:
                (size,) = struct.unpack(">i", buffered[:4])
                if len(buffered) < 4 + size:
                    break
                yield buffered[:4 + size]
                buffered = buffered[4 + size:]

    def relay(self, pair, upstream):
        src, dst = (pair["client"], pair["server"]) if upstream else (pair["server"], pair["client"])
        first = True  # the connect request/response has no request header
        for frame in self._frames(src):
            if not first and upstream:
                xid, op = struct.unpack(">ii", frame[4:12])
                if op in CREATE_OPS and self.armed is not None:
                    (length,) = struct.unpack(">i", frame[12:16])
                    path = frame[16:16 + length].decode("utf-8")
                    if path.endswith(self.armed):
                        self.armed = None
                        pair["lose_xid"] = (xid, path)
            elif not first and pair["lose_xid"] is not None:
                (xid,) = struct.unpack(">i", frame[4:8])
                if xid == pair["lose_xid"][0]:
                    self.lost.append(pair["lose_xid"][1])
                    return  # the answer is lost with the connection
            first = False
            dst.sendall(frame)


class ProxiedCluster(testing.KafkaCluster):
    """The brokers reach ZooKeeper through ``proxy``."""

    proxy = None

    @property
    def zookeeper_connect(self):
        return "127.0.0.1:%d%s" % (self.proxy.port, self.chroot or "")


class RegistrationAnswerLostTests(unittest.TestCase):
    timeout = 180

    def registrations(self, cluster):
        """The broker epochs broker 1 logged registering, in order."""
        with open(cluster.broker(1).log_path, errors="replace") as f:
            return [int(epoch) for epoch in re.findall(r"registered broker 1 at /brokers/ids/1 with broker "
                                                       r"epoch (\d+)", f.read())]

    def test_registrations_whose_answer_was_lost_at_start_and_after_a_session_expiry(self):
        from kazoo.exceptions import NoNodeError

        require_zookeeper()
        cluster = ProxiedCluster(brokers=1, session_timeout_ms=4000, topics=[("t", 1)])
        self.addCleanup(lambda: cluster.proxy and cluster.proxy.close())  # after the cluster's
        self.addCleanup(cluster.close)
        cluster.zookeeper.start()
        cluster.proxy = AnswerLosingProxy((cluster.zookeeper.host, cluster.zookeeper.port))
        cluster.proxy.lose_answer_to_create("/brokers/ids/1")
        cluster.start()  # every broker registered, a controller, the topic created

        self.assertEqual(cluster.proxy.lost, ["/kafkatw/brokers/ids/1"])
        brokers, controller, topics = cluster.metadata(topics=["t"])
        self.assertEqual((sorted(brokers), controller), ([1], 1))
        self.assertEqual(topics["t"][0][:2], (0, 1))  # no error, led by broker 1
        _, stat = zk_read(cluster, "/brokers/ids/1")
        self.assertEqual(self.registrations(cluster), [stat.czxid])  # one, the node's czxid as its epoch

        # the broker stopped until ZooKeeper expires its session (its node goes), then its
        # registration in the new session loses its answer the same way (CI's leader-kill test)
        cluster.broker(1).pause()
        try:
            def expired():
                try:
                    zk_read(cluster, "/brokers/ids/1")
                except NoNodeError:
                    return True
                return False
            cluster.wait_for(expired, 30, "the broker's session to expire")
            cluster.proxy.lose_answer_to_create("/brokers/ids/1")
        finally:
            cluster.broker(1).resume()
        cluster.wait_for(lambda: len(self.registrations(cluster)) == 2, 30, "broker 1 to register again")
        self.assertEqual(cluster.proxy.lost, ["/kafkatw/brokers/ids/1"] * 2)
        _, again = zk_read(cluster, "/brokers/ids/1")
        self.assertEqual(self.registrations(cluster), [stat.czxid, again.czxid])
        self.assertGreater(again.czxid, stat.czxid)
        cluster.wait_for_brokers([1])
