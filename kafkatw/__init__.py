"""kafkatw: a Kafka-wire-compatible message broker on Twisted."""

__version__ = "0.1.0.dev0"
