"""Dynamic broker configs: which broker properties AlterConfigs may change while the broker runs.
"""

from kafkatw.config.topic import TOPIC_CONFIG_SYNONYMS

#: Broker configs that DescribeConfigs reports as not read-only (Kafka's dynamic broker configs
#: that kafkatw can honour without a restart, or will).
DYNAMIC_BROKER_CONFIGS = frozenset(
    [name for names in TOPIC_CONFIG_SYNONYMS.values() for name in names]
    + ["listeners", "advertised.listeners", "listener.security.protocol.map",
       "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
       "max.connection.creation.rate", "num.io.threads", "num.network.threads",
       "num.replica.fetchers", "num.recovery.threads.per.data.dir", "background.threads",
       "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.size",
       "log.cleaner.backoff.ms", "log.retention.check.interval.ms",
       "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
       "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.key.password",
       "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
       "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols",
       "ssl.cipher.suites", "sasl.enabled.mechanisms", "kafkatw.request.log.enable"])
