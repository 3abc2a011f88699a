"""The cluster controller (Kafka's KafkaController in ZooKeeper mode): one broker at a time,
elected through the coordination store, deciding leaders and ISRs and telling the brokers.
"""
