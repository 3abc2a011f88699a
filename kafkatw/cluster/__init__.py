"""Cluster state: the single-node metadata store (topics, ids, leaders, cluster id).

Multi-broker coordination (controller on ZooKeeper, follower fetchers) will live here too.
"""
