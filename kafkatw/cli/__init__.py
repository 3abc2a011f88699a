"""The ``kafkatw`` command: topics, groups, configs, produce, consume and log dump against any
Kafka-compatible broker, over the project's own codec (``kafkatw.cli.client``)."""
