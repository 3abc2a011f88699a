"""Dynamic broker configs (Kafka's DynamicBrokerConfig): which broker properties AlterConfigs may
change while the broker runs, and an update that is in force when it returns or changes nothing.

It knows no broker component: each one registers an :class:`IBrokerReconfigurable` for the
keys it applies live. A key nobody registered is refused, so a value that DescribeConfigs
reports as dynamic is always a value in force. Persistence is the caller's business.
"""

from twisted.logger import Logger
from zope.interface import Attribute, Interface
from zope.interface.verify import verifyObject

from kafkatw.config.topic import TOPIC_CONFIG_SYNONYMS
from kafkatw.config.types import ConfigError
from kafkatw.config.unimplemented import (
    INERT_DYNAMIC_CONFIGS,
    INERT_PER_BROKER_CONFIGS,
    unimplemented_message,
)

log = Logger(namespace="kafkatw.config.dynamic")

#: Broker defaults of topic configs, applied to every log without an override (DynamicLogConfig).
LOG_CONFIGS = frozenset(name for names in TOPIC_CONFIG_SYNONYMS.values() for name in names)
#: The cleaner's pause between passes (part of Kafka's LogCleaner reconfigurables).
LOG_CLEANER_CONFIGS = frozenset(["log.cleaner.backoff.ms"])
#: Connection limits of the socket server (Kafka's SocketServer reconfigurables).
SOCKET_SERVER_CONFIGS = frozenset(
    ["max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
     "max.connection.creation.rate"])
#: Concurrent request handling (Kafka's DynamicThreadPool).
THREAD_POOL_CONFIGS = frozenset(["num.io.threads"])
#: The pool for blocking disk work (also part of Kafka's DynamicThreadPool).
BACKGROUND_THREADS_CONFIGS = frozenset(["background.threads"])
#: Idle producer expiry (Kafka's DynamicProducerStateManagerConfig, less the verification
#: switch kafkatw does not implement).
PRODUCER_STATE_CONFIGS = frozenset(["producer.id.expiration.ms"])
#: Replication throttles (Kafka's DynamicReplicationConfig: the leader and follower quotas).
REPLICATION_QUOTA_CONFIGS = frozenset(["leader.replication.throttled.rate", "follower.replication.throttled.rate"])

#: Kafka's dynamic broker configs that kafkatw applies live. Kafka allows more (listeners, SSL
#: stores per listener, cleaner threads and buffers, network and fetcher threads, connection
#: creation rate); kafkatw refuses those with Kafka's "Cannot update these configs dynamically"
#: rather than store a value that would not be in force.
#: Kafka's dynamic configs of features kafkatw does not implement (Kerberos, tiered storage,
#: ...) are accepted and stored too: nothing applies them, and nothing would use them.
DYNAMIC_BROKER_CONFIGS = (LOG_CONFIGS | LOG_CLEANER_CONFIGS | SOCKET_SERVER_CONFIGS
                          | THREAD_POOL_CONFIGS | BACKGROUND_THREADS_CONFIGS | PRODUCER_STATE_CONFIGS
                          | REPLICATION_QUOTA_CONFIGS | INERT_DYNAMIC_CONFIGS)


class IBrokerReconfigurable(Interface):
    """A broker component that applies some dynamic broker configs live."""

    reconfigurable_configs = Attribute("frozenset of the broker config names it applies")

    def validate_reconfiguration(new_config):
        """Raise :class:`ConfigError` if ``new_config`` (a KafkaConfig) cannot be applied."""

    def reconfigure(old_config, new_config):
        """Apply ``new_config``; an exception refuses the update (it is rolled back)."""


def scala_set(names):
    """Names the way Kafka's messages print a Scala Set: ``Set(a, b)``."""
    return "Set(%s)" % ", ".join(sorted(names))


def split_persisted(props, definitions):
    """A persisted dynamic layer -> (what to apply, {ignored name: why}). Like Kafka, a key
    that is not dynamic or whose value no longer parses (written by another version, say) is
    ignored rather than keeping the broker from starting."""
    kept, ignored = {}, {}
    for name, value in props.items():
        if name not in DYNAMIC_BROKER_CONFIGS:
            ignored[name] = "not a dynamic config"
            continue
        try:
            definitions[name].parse(value)
        except ConfigError as e:
            ignored[name] = str(e)
            continue
        kept[name] = value
    return kept, ignored


class DynamicBrokerConfig:
    """The live broker config and the components that apply its dynamic keys.

    ``current`` is the KafkaConfig in force. :meth:`update` validates a new dynamic layer with
    every reconfigurable it touches, then makes it current and reconfigures them; if one of
    them fails, the ones already reconfigured are put back and ``current`` is unchanged.
    Config listeners (holders of the config object: handlers, service) see each new current.
    """

    def __init__(self, config):
        self.current = config
        self._reconfigurables = []
        self._listeners = []

    def add_reconfigurable(self, reconfigurable):
        verifyObject(IBrokerReconfigurable, reconfigurable)
        unknown = set(reconfigurable.reconfigurable_configs) - DYNAMIC_BROKER_CONFIGS
        if unknown:
            raise AssertionError("%r reconfigures configs that are not dynamic: %s"
                                 % (reconfigurable, scala_set(unknown)))
        self._reconfigurables.append(reconfigurable)

    def add_config_listener(self, listener):
        """``listener(config)`` is called with each new current config (and on a rollback)."""
        self._listeners.append(listener)

    def reconfigurable_configs(self):
        """The broker config names some registered component applies live."""
        names = set()
        for r in self._reconfigurables:
            names.update(r.reconfigurable_configs)
        return frozenset(names)

    def update(self, dynamic_broker=None, dynamic_default=None, validate_only=False):
        """Replace the per-broker (or cluster-default) dynamic layer; returns the new config.

        Raises :class:`ConfigError` naming what is refused: keys that cannot change live
        (Kafka's wording), values that do not parse, or a component that cannot apply them.
        """
        layer = dynamic_broker if dynamic_broker is not None else dynamic_default or {}
        refused = set(layer) - self.reconfigurable_configs() - INERT_DYNAMIC_CONFIGS
        if refused:
            raise ConfigError("Cannot update these configs dynamically: %s" % scala_set(refused))
        per_broker = set(layer) & INERT_PER_BROKER_CONFIGS if dynamic_broker is None else ()
        if per_broker:
            raise ConfigError("Cannot update these configs at default cluster level, broker id must "
                              "be specified: %s" % scala_set(per_broker))
        old = self.current
        new = old.with_dynamic(dynamic_broker=dynamic_broker, dynamic_default=dynamic_default)
        # listeners are not dynamic: the endpoints bound at start-up stay advertised
        new.advertised_listeners = old.advertised_listeners
        old_values, new_values = old.values(), new.values()
        changed = {name for name in new_values if new_values[name] != old_values.get(name)}
        affected = [r for r in self._reconfigurables if changed & set(r.reconfigurable_configs)]
        for r in affected:
            r.validate_reconfiguration(new)
        if validate_only:
            return new
        self._make_current(new)
        done = []
        try:
            for r in affected:
                r.reconfigure(old, new)
                done.append(r)
        except Exception as e:
            for r in reversed(done):
                try:
                    r.reconfigure(new, old)
                except Exception:
                    log.failure("could not put back the configs of {r}", r=r)
            self._make_current(old)
            if isinstance(e, ConfigError):
                raise
            raise ConfigError("Invalid dynamic configuration: %s" % (e,)) from e
        # stored as Kafka would, in force nowhere: said once per change, as at start-up
        for name in sorted(changed & INERT_DYNAMIC_CONFIGS):
            log.warn("{text}", text=unimplemented_message(name))
        return new

    def _make_current(self, config):
        self.current = config
        for listener in self._listeners:
            listener(config)
