"""The built-in replica selectors (``replica.selector.class``, KIP-392) as plug-ins.

Only names live here: the implementation is imported when config names it.
"""

from kafkatw.registry import PluginDescriptor
from kafkatw.server.interfaces import IReplicaSelector

rack_aware = PluginDescriptor(
    IReplicaSelector, "rack-aware", "kafkatw.server.replica_selector.RackAwareReplicaSelector",
    "consumers read from a replica in their client.rack (the leader if none)",
    aliases=("org.apache.kafka.common.replica.RackAwareReplicaSelector",))

leader = PluginDescriptor(
    IReplicaSelector, "leader", "kafkatw.server.replica_selector.LeaderSelector",
    "consumers always read from the leader",
    aliases=("org.apache.kafka.common.replica.LeaderSelector",))
