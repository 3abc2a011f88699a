"""The fault-injection harness: a KafkaCluster under an acks=all idempotent workload, a seeded
nemesis killing, pausing and restarting brokers, the controller and ZooKeeper, and a checker
reading everything back. A test tool built on :mod:`kafkatw.testing`; the broker never imports it.

``python -m kafkatw.nemesis --help`` runs it by hand; ``tests/test_nemesis.py`` runs a short form.
"""
