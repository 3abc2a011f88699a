"""The contracts between layers: every real implementation and every test double standing in
for one provides its zope interface (``verifyObject``: each method with a compatible
signature, each attribute present), and ``KafkaApis`` refuses a handler that does not."""

import os

from twisted.internet import task
from twisted.trial import unittest
from zope.interface import implementer
from zope.interface.verify import verifyObject

from kafkatw.cluster.interfaces import IClusterMetadata, IPartitionMetadata
from kafkatw.cluster.metadata import ClusterMetadata
from kafkatw.config import KafkaConfig
from kafkatw.network.interfaces import IRequestHandler
from kafkatw.server.apis import DEFAULT_HANDLERS, KafkaApis
from kafkatw.server.interfaces import IApiHandler, IReplicaManager
from kafkatw.server.replica_manager import ReplicaManager
from kafkatw.storage.interfaces import ILog
from kafkatw.storage.log import UnifiedLog
from kafkatw.storage.manager import LogManager

from tests.test_dynamic_broker_config import _Handler as WaitingHandler
from tests.test_network_support import ScriptedHandler
from tests.test_server_apis import BoomHandler, FakeReplicaManager, NoErrorFieldHandler
from tests.test_server_replica_manager import FakeLog, FakeLogManager, FakeMetadata


class Real(unittest.TestCase):
    """The production classes, built as the service builds them (on temp dirs, a fake clock)."""

    def setUp(self):
        base = os.path.abspath(self.mktemp())
        self.config = KafkaConfig.from_properties({
            "node.id": "1", "log.dirs": os.path.join(base, "logs"),
            "listeners": "PLAINTEXT://localhost:9092"})
        self.clock = task.Clock()
        self.metadata = ClusterMetadata.load(self.config.log_dirs, 1)
        self.log_manager = LogManager(self.config.log_dirs, reactor=self.clock)
        self.log_manager.load_logs()
        self.addCleanup(self.log_manager.shutdown)
        self.replica_manager = ReplicaManager(self.log_manager, self.metadata, self.clock, self.config)

    def test_unified_log(self):
        log_ = self.log_manager.get_or_create_log("t", 0, os.urandom(16), {})
        self.assertIsInstance(log_, UnifiedLog)
        self.assertTrue(verifyObject(ILog, log_))

    def test_cluster_metadata(self):
        self.assertTrue(verifyObject(IClusterMetadata, self.metadata))
        self.assertTrue(verifyObject(IPartitionMetadata, self.metadata))

    def test_replica_manager(self):
        self.assertTrue(verifyObject(IReplicaManager, self.replica_manager))

    def test_kafka_apis(self):
        apis = KafkaApis(self.config, self.metadata, self.replica_manager, clock=self.clock,
                         log_manager=self.log_manager)
        self.assertTrue(verifyObject(IRequestHandler, apis))

    def test_cluster_mode(self):
        """The ZooKeeper store, the cluster-mode metadata and the handlers only cluster mode serves."""
        from kafkatw.cluster.interfaces import IClusterCoordinator, IClusterMetadataCache
        from kafkatw.cluster.zk import ZkClusterCoordinator
        from kafkatw.cluster.zk_metadata import ZkClusterMetadata
        from kafkatw.server.handlers import controller_requests

        class Kazoo:
            def add_listener(self, listener):
                pass
        zk = ZkClusterCoordinator(self.clock, "localhost:2181/kafka", client=Kazoo())
        self.assertTrue(verifyObject(IClusterCoordinator, zk))
        cache = ZkClusterMetadata(self.metadata, zk, self.clock)
        self.assertTrue(verifyObject(IClusterMetadata, cache))
        self.assertTrue(verifyObject(IClusterMetadataCache, cache))
        for handler in controller_requests.HANDLERS:
            self.assertTrue(verifyObject(IApiHandler, handler), handler)

    def test_every_default_handler(self):
        self.assertEqual(len(DEFAULT_HANDLERS), 48)  # 42 + CreateAcls, DescribeAcls, DeleteAcls + ConsumerGroupHeartbeat, ConsumerGroupDescribe + AlterReplicaLogDirs
        for handler in DEFAULT_HANDLERS:
            self.assertTrue(verifyObject(IApiHandler, handler), handler)
        self.assertEqual(len({h.API_KEY for h in DEFAULT_HANDLERS}), len(DEFAULT_HANDLERS))


class Doubles(unittest.TestCase):
    """Each stand-in the unit tests hand to real code in place of a real collaborator."""

    def test_fake_log(self):
        self.assertTrue(verifyObject(ILog, FakeLog("t", 0, self.mktemp())))

    def test_fake_log_manager_makes_fake_logs(self):
        lm = FakeLogManager(self.mktemp())
        self.assertTrue(verifyObject(ILog, lm.get_or_create_log("t", 0)))

    def test_fake_metadata(self):
        self.assertTrue(verifyObject(IPartitionMetadata, FakeMetadata({"t": 1})))

    def test_fake_replica_manager(self):
        self.assertTrue(verifyObject(IReplicaManager, FakeReplicaManager(FakeMetadata({"t": 1}))))

    def test_handler_doubles(self):
        self.assertTrue(verifyObject(IApiHandler, BoomHandler(ValueError("x"))))
        self.assertTrue(verifyObject(IApiHandler, NoErrorFieldHandler()))

    def test_request_handler_doubles(self):
        self.assertTrue(verifyObject(IRequestHandler, ScriptedHandler()))
        self.assertTrue(verifyObject(IRequestHandler, WaitingHandler()))


class Registration(unittest.TestCase):
    def test_handler_without_error_response_is_refused(self):
        @implementer(IApiHandler)
        class Half:
            API_KEY = 3
            VERSIONS = (0, 12)

            def handle(self, apis, request):
                return None

        apis = KafkaApis(config=None, metadata=None, handlers=())
        with self.assertRaises(TypeError) as caught:
            apis.register(Half())
        self.assertIn("error_response", str(caught.exception))
        self.assertNotIn("\n", str(caught.exception))
        self.assertEqual(apis.api_versions(), {})

    def test_undeclared_handler_is_refused(self):
        class Undeclared:
            API_KEY = 3
            VERSIONS = (0, 12)

            def handle(self, apis, request):
                return None

            def error_response(self, request, code, message):
                return None

        apis = KafkaApis(config=None, metadata=None, handlers=())
        with self.assertRaises(TypeError) as caught:
            apis.register(Undeclared())
        self.assertIn("IApiHandler", str(caught.exception))

    def test_declared_handler_is_served(self):
        apis = KafkaApis(config=None, metadata=None, handlers=())
        versions = apis.api_versions()  # the network layer keeps this dict
        apis.register(NoErrorFieldHandler())
        self.assertEqual(apis.api_versions(), {3: (0, 12)})
        self.assertIs(apis.api_versions(), versions)  # kept current in place
