"""Kafka broker configs (KafkaConfig's list, 3.9 and 4.0) for features kafkatw does not implement.

Owns the names, each with the feature it belongs to, so a ``server.properties`` written for
Kafka starts with one warning per such name instead of "isn't a known config", and AlterConfigs
answers them as Kafka does: :data:`INERT_DYNAMIC_CONFIGS` (dynamic in Kafka) are defined in
``broker.py``, accepted and stored with no effect; the rest are not dynamic in Kafka, so
AlterConfigs refuses them with Kafka's "Cannot update these configs dynamically". Names that
Kafka 4.0 removed are in ``removed.py``; names neither there nor here are truly unknown.
"""

_KRAFT = "KRaft: kafkatw's cluster mode runs on ZooKeeper"
_TIERED = "tiered storage (KIP-405)"
_SHARE = "share groups (KIP-932)"
_NEW_COORDINATOR = "the new group coordinator runtime: kafkatw's coordinators run on the reactor"
_KERBEROS = "Kerberos (SASL/GSSAPI)"
_SASL_LOGIN = ("JAAS login modules and SASL callback handlers: kafkatw reads "
               "listener.name.<listener>.<mechanism>.sasl.jaas.config")
_JSSE = "Java security providers and JSSE: kafkatw's TLS is OpenSSL"
_TOKENS = "delegation tokens"
_PASSWORD_ENCODER = "encrypted dynamic password configs: kafkatw has no dynamic password config"
_QUOTA_WINDOWS = "controller mutation and log dir move quotas"
_CLEANER_IO = "the log cleaner's I/O throttle and buffer load factor"
_METRICS = "Yammer metrics reporters and client telemetry (KIP-714)"
_CLIENT_TIMEOUTS = "the inter-broker connection setup timeouts (kafkatw's is fixed)"
_INTERNAL = "Kafka-internal scheduling"


def _group(feature, *names):
    return {name: feature for name in names}


#: name -> the feature kafkatw does not implement.
UNIMPLEMENTED_BROKER_CONFIGS = {
    **_group(_KRAFT, "broker.heartbeat.interval.ms", "broker.session.timeout.ms",
             "controller.quorum.append.linger.ms", "controller.quorum.bootstrap.servers",
             "controller.quorum.election.backoff.max.ms", "controller.quorum.election.timeout.ms",
             "controller.quorum.fetch.timeout.ms", "controller.quorum.request.timeout.ms",
             "controller.quorum.retry.backoff.ms", "controller.quorum.voters",
             "initial.broker.registration.timeout.ms", "metadata.log.dir",
             "metadata.log.max.record.bytes.between.snapshots",
             "metadata.log.max.snapshot.interval.ms", "metadata.log.segment.bytes",
             "metadata.log.segment.min.bytes", "metadata.log.segment.ms",
             "metadata.max.idle.interval.ms", "metadata.max.retention.bytes",
             "metadata.max.retention.ms", "sasl.mechanism.controller.protocol",
             "server.max.startup.time.ms", "eligible.leader.replicas.enable",
             "unclean.leader.election.interval.ms", "unstable.api.versions.enable",
             "unstable.feature.versions.enable"),
    **_group(_TIERED, "remote.fetch.max.wait.ms", "remote.list.offsets.request.timeout.ms",
             "remote.log.index.file.cache.total.size.bytes",
             "remote.log.manager.copier.thread.pool.size",
             "remote.log.manager.copy.max.bytes.per.second",
             "remote.log.manager.copy.quota.window.num",
             "remote.log.manager.copy.quota.window.size.seconds",
             "remote.log.manager.expiration.thread.pool.size",
             "remote.log.manager.fetch.max.bytes.per.second",
             "remote.log.manager.fetch.quota.window.num",
             "remote.log.manager.fetch.quota.window.size.seconds",
             "remote.log.manager.task.interval.ms", "remote.log.manager.task.retry.backoff.max.ms",
             "remote.log.manager.task.retry.backoff.ms", "remote.log.manager.task.retry.jitter",
             "remote.log.manager.thread.pool.size", "remote.log.metadata.custom.metadata.max.bytes",
             "remote.log.metadata.manager.class.name", "remote.log.metadata.manager.class.path",
             "remote.log.metadata.manager.impl.prefix", "remote.log.metadata.manager.listener.name",
             "remote.log.reader.max.pending.tasks", "remote.log.reader.threads",
             "remote.log.storage.manager.class.name", "remote.log.storage.manager.class.path",
             "remote.log.storage.manager.impl.prefix", "remote.log.storage.system.enable"),
    **_group(_SHARE, "group.share.delivery.count.limit", "group.share.enable",
             "group.share.heartbeat.interval.ms", "group.share.max.groups",
             "group.share.max.heartbeat.interval.ms", "group.share.max.record.lock.duration.ms",
             "group.share.max.session.timeout.ms", "group.share.max.size",
             "group.share.min.heartbeat.interval.ms", "group.share.min.record.lock.duration.ms",
             "group.share.min.session.timeout.ms", "group.share.partition.max.record.locks",
             "group.share.record.lock.duration.ms", "group.share.session.timeout.ms",
             "share.coordinator.append.linger.ms", "share.coordinator.load.buffer.size",
             "share.coordinator.snapshot.update.records.per.snapshot",
             "share.coordinator.state.topic.compression.codec",
             "share.coordinator.state.topic.min.isr", "share.coordinator.state.topic.num.partitions",
             "share.coordinator.state.topic.replication.factor",
             "share.coordinator.state.topic.segment.bytes", "share.coordinator.threads",
             "share.coordinator.write.timeout.ms", "share.fetch.max.fetch.records",
             "share.fetch.purgatory.purge.interval.requests"),
    **_group(_NEW_COORDINATOR, "group.coordinator.append.linger.ms", "group.coordinator.new.enable",
             "group.coordinator.threads"),
    **_group(_KERBEROS, "sasl.kerberos.kinit.cmd", "sasl.kerberos.min.time.before.relogin",
             "sasl.kerberos.principal.to.local.rules", "sasl.kerberos.service.name",
             "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.ticket.renew.window.factor"),
    **_group(_SASL_LOGIN, "sasl.jaas.config", "sasl.client.callback.handler.class",
             "sasl.login.callback.handler.class", "sasl.login.class",
             "sasl.login.connect.timeout.ms", "sasl.login.read.timeout.ms",
             "sasl.login.refresh.buffer.seconds", "sasl.login.refresh.min.period.seconds",
             "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
             "sasl.login.retry.backoff.max.ms", "sasl.login.retry.backoff.ms",
             "sasl.server.callback.handler.class", "sasl.oauthbearer.jwks.endpoint.refresh.ms",
             "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
             "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
             "sasl.oauthbearer.token.endpoint.url"),
    **_group(_JSSE, "security.providers", "ssl.provider", "ssl.engine.factory.class",
             "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
             "ssl.secure.random.implementation", "ssl.allow.dn.changes", "ssl.allow.san.changes"),
    **_group(_TOKENS, "delegation.token.expiry.check.interval.ms", "delegation.token.expiry.time.ms",
             "delegation.token.max.lifetime.ms", "delegation.token.secret.key"),
    **_group(_PASSWORD_ENCODER, "password.encoder.cipher.algorithm", "password.encoder.iterations",
             "password.encoder.key.length", "password.encoder.keyfactory.algorithm",
             "password.encoder.old.secret", "password.encoder.secret"),
    **_group(_QUOTA_WINDOWS, "controller.quota.window.num", "controller.quota.window.size.seconds",
             "alter.log.dirs.replication.quota.window.num",
             "alter.log.dirs.replication.quota.window.size.seconds",
             "replication.quota.window.num", "num.replica.alter.log.dirs.threads"),
    **_group(_CLEANER_IO, "log.cleaner.io.buffer.load.factor", "log.cleaner.io.max.bytes.per.second"),
    **_group(_METRICS, "kafka.metrics.polling.interval.secs", "kafka.metrics.reporters",
             "telemetry.max.bytes"),
    **_group(_CLIENT_TIMEOUTS, "socket.connection.setup.timeout.ms", "socket.connection.setup.timeout.max.ms"),
    **_group(_INTERNAL, "log.initial.task.delay.ms"),
}

#: Of those, the ones Kafka lets AlterConfigs change (its DynamicBrokerConfig.AllDynamicConfigs).
#: ``broker.py`` defines them (type, Kafka's default), so a value is checked, stored and
#: described like Kafka's, and applying it changes nothing. ``sasl.jaas.config`` is left out:
#: Kafka stores it encrypted with password.encoder.secret, kafkatw could only store it in clear.
INERT_DYNAMIC_CONFIGS = frozenset([
    "sasl.kerberos.kinit.cmd", "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.principal.to.local.rules", "sasl.kerberos.service.name",
    "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.ticket.renew.window.factor",
    "sasl.login.refresh.buffer.seconds", "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "ssl.provider", "ssl.engine.factory.class", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "ssl.secure.random.implementation",
    "log.cleaner.io.buffer.load.factor", "log.cleaner.io.max.bytes.per.second",
    "remote.fetch.max.wait.ms", "remote.list.offsets.request.timeout.ms",
    "remote.log.index.file.cache.total.size.bytes", "remote.log.manager.copy.max.bytes.per.second",
    "remote.log.manager.fetch.max.bytes.per.second",
])

#: Of those, Kafka's per-broker (listener) configs: refused at the cluster-default level.
INERT_PER_BROKER_CONFIGS = frozenset(n for n in INERT_DYNAMIC_CONFIGS if n.startswith(("sasl.", "ssl.")))


def unimplemented_message(name):
    """The warning for ``name`` set in a broker's configuration (None if it is not one of these)."""
    feature = UNIMPLEMENTED_BROKER_CONFIGS.get(name)
    if feature is None:
        return None
    if name in INERT_DYNAMIC_CONFIGS:
        return "%s is accepted for Kafka compatibility and has no effect: kafkatw does not implement %s" % (
            name, feature)
    return "%s is a Kafka broker config that kafkatw ignores: it does not implement %s" % (name, feature)
