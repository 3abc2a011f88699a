"""The built-in coordination store of cluster mode as a plug-in (``kafkatw.cluster.coordinator.class``).

Only names live here: the implementation (and kazoo) is imported when a broker runs in cluster mode.
"""

from kafkatw.cluster.interfaces import IClusterCoordinator
from kafkatw.registry import PluginDescriptor

zookeeper = PluginDescriptor(
    IClusterCoordinator, "zookeeper", "kafkatw.cluster.zk.ZkClusterCoordinator.from_config",
    "ZooKeeper through kazoo, with Kafka's znode layout (zookeeper.connect)")
