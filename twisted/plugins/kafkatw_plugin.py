"""The ``twistd kafka`` plugin: only a ServiceMaker; everything else lives in kafkatw.tap."""

from twisted.application.service import ServiceMaker

kafka = ServiceMaker(
    "kafkatw",
    "kafkatw.tap",
    "A Kafka-wire-compatible message broker (configured like Kafka's server.properties).",
    "kafka",
)
