"""Configs Kafka 4.0 removed that old ``server.properties`` files, scripts and clients still send.

Owns the two tables (topic, broker) saying for each removed name whether it is accepted and
ignored with a warning (it changed nothing by then, or its job is gone) or refused with the
name of what replaced it (ignoring it would silently drop a limit the operator asked for), and
:func:`split_removed`. It logs nothing: callers warn where they can name the request or file.
"""

import attr

from kafkatw.config.types import ConfigError

IGNORED, REFUSED = "ignored", "refused"


@attr.s(frozen=True, slots=True)
class RemovedConfig:
    name = attr.ib()
    action = attr.ib()  # IGNORED or REFUSED
    why = attr.ib()  # what happened to it / what replaced it

    def message(self):
        if self.action == IGNORED:
            return "%s is deprecated and ignored: %s" % (self.name, self.why)
        return "%s was removed in Kafka 4.0: %s" % (self.name, self.why)


def _table(*rows):
    return {name: RemovedConfig(name, action, why) for name, action, why in rows}


REMOVED_TOPIC_CONFIGS = _table(
    ("message.format.version", IGNORED,
     "Kafka ignores it from 3.0 on (every batch is written in the v2 format) and 4.0 removed it"),
    ("message.downconversion.enable", IGNORED,
     "Kafka 4.0 removed down-conversion with the Fetch versions that needed it"),
    ("message.timestamp.difference.max.ms", REFUSED,
     "use message.timestamp.before.max.ms and message.timestamp.after.max.ms (KIP-937)"),
)

REMOVED_BROKER_CONFIGS = _table(
    ("log.message.format.version", IGNORED,
     "Kafka ignores it from 3.0 on (every batch is written in the v2 format) and 4.0 removed it"),
    ("inter.broker.protocol.version", IGNORED,
     "the metadata.version feature replaced it in KRaft mode; kafkatw's brokers send fixed "
     "inter-broker request versions"),
    ("log.message.downconversion.enable", IGNORED,
     "Kafka 4.0 removed down-conversion with the Fetch versions that needed it"),
    ("log.message.timestamp.difference.max.ms", REFUSED,
     "use log.message.timestamp.before.max.ms and log.message.timestamp.after.max.ms (KIP-937)"),
    ("broker.id.generation.enable", IGNORED,
     "kafkatw generates no broker ids, in cluster mode either; set node.id"),
    ("reserved.broker.max.id", IGNORED,
     "kafkatw generates no broker ids, in cluster mode either; set node.id"),
    ("offsets.commit.required.acks", IGNORED, "offset commits are always written with acks=all"),
    ("auto.include.jmx.reporter", IGNORED, "kafkatw has no JMX; see kafkatw.metrics.listener"),
    ("quota.producer.default", REFUSED,
     "use a default client quota: kafka-configs --alter --entity-type clients --entity-default "
     "--add-config producer_byte_rate=N"),
    ("quota.consumer.default", REFUSED,
     "use a default client quota: kafka-configs --alter --entity-type clients --entity-default "
     "--add-config consumer_byte_rate=N"),
    ("delegation.token.master.key", REFUSED, "use delegation.token.secret.key"),
)

#: Prefixes of whole removed families: the ``zookeeper.*`` keys kafkatw's cluster mode does not
#: use (``zookeeper.connect``, its timeouts and ``zookeeper.max.in.flight.requests`` are broker
#: configs).
REMOVED_BROKER_PREFIXES = {
    "zookeeper.": RemovedConfig("zookeeper.*", IGNORED,
                                "kafkatw's ZooKeeper client uses only zookeeper.connect, its timeouts "
                                "and zookeeper.max.in.flight.requests"),
}


def removed_config(name, table, prefixes=None):
    """The :class:`RemovedConfig` for ``name`` in ``table`` (or a prefix family), else None."""
    found = table.get(name)
    if found is None and prefixes:
        for prefix, entry in prefixes.items():
            if name.startswith(prefix):
                return attr.evolve(entry, name=name)
    return found


def split_removed(configs, table, prefixes=None):
    """``(kept, ignored)``: ``configs`` without the removed names it may ignore, and those
    :class:`RemovedConfig` s. Raises :class:`ConfigError` (one line, naming the replacement)
    for the first removed name that is refused."""
    kept, ignored = {}, []
    for name, value in configs.items():
        entry = removed_config(name, table, prefixes)
        if entry is None:
            kept[name] = value
        elif entry.action == REFUSED:
            raise ConfigError(entry.message(), name, value)
        else:
            ignored.append(entry)
    return kept, ignored
