"""The broker's metadata in cluster mode (Kafka's ZkMetadataCache plus the AdminZkClient calls a
ZooKeeper-mode broker makes): topics, leaders, ISRs and live brokers as the controller's
UpdateMetadata last said, and admin changes written to the coordination store, answered once
the controller's metadata shows them.

It elects nothing and never reads partition state on its own: leadership comes from the
controller. Client quotas are cluster-wide in the store; node-local state (``meta.properties``,
dynamic broker configs) stays in the embedded store it is given.
"""

import attr
from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import implementer

from kafkatw.cluster import zk_layout
from kafkatw.cluster.assignment import assign_replicas
from kafkatw.cluster.interfaces import IClusterMetadata, IClusterMetadataCache
from kafkatw.cluster.metadata import (
    INTERNAL_TOPICS,
    PRODUCER_ID_BLOCK_SIZE,
    TOPIC_CONFIGS_CHANGED,
    TOPIC_DELETED,
    TopicInfo,
    random_uuid,
    unify_collision_chars,
    validate_topic_name,
)
from kafkatw.cluster.state import (
    LEADER_DURING_DELETE,
    NO_LEADER,
    SECURITY_PROTOCOL_NAMES,
    BrokerInfo,
    PartitionState,
)
from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError

log = Logger(namespace="kafkatw.cluster.metadata")



@implementer(IClusterMetadata, IClusterMetadataCache)
class ZkClusterMetadata:
    """``local`` is the embedded ClusterMetadata of this node's log dirs; ``zk`` the
    IClusterCoordinator; ``timeout`` bounds how long an admin change waits for the controller."""

    def __init__(self, local, zk, reactor, rack=None, timeout_ms=30000, default_replication_factor=1):
        self.local = local
        self.zk = zk
        self._reactor = reactor
        self.node_id = local.node_id
        self.cluster_id = local.cluster_id
        self.rack = rack
        self.timeout = timeout_ms / 1000.0
        self.default_replication_factor = default_replication_factor
        self.topics = {}  # name -> TopicInfo
        self._by_id = {}
        self._states = {}  # (topic, partition) -> PartitionState
        self._brokers = {}  # id -> BrokerInfo
        self.controller_id = -1
        self.controller_epoch = -1
        self.broker_epoch = -1
        self._configs = {}  # topic -> overrides read from /config/topics
        self._creating = set()
        self._listeners = []
        self._waiters = []  # [(predicate, Deferred, timer)]
        self._pid_next = 0
        self._pid_end = -1  # inclusive end of the block in hand
        self._pid_block = None  # Deferred of the block being fetched
        self._ready = defer.Deferred()  # fired by the first UpdateMetadata
        self._ready_timer = None
        self._quotas = {}  # client quota entity components -> {key: float}, as in the store
        self._staged_quotas = {}  # including writes not yet done
        #: called with ``[(entity components, key, value or None)]`` when quotas change
        self.quota_listeners = []
        #: called with ``(default, {name: value})`` when this broker's (``default``: the cluster
        #: default) dynamic broker configs in /config/brokers differ from the ones in force here
        self.broker_config_listeners = []

    # -- node-local state, kept in the embedded store ---------------------------------------------

    @property
    def broker_configs(self):
        return self.local.broker_configs

    @property
    def default_broker_configs(self):
        return self.local.default_broker_configs

    @property
    def client_quotas(self):
        """Cluster-wide, from /config/users, /config/clients and /config/ips."""
        return self._quotas

    @property
    def staged_client_quotas(self):
        return self._staged_quotas

    @property
    def deleted_topic_ids(self):
        return self.local.deleted_topic_ids

    def _broker_entity(self, default):
        return "brokers/" + (zk_layout.DEFAULT_ENTITY if default else str(self.node_id))

    def set_broker_configs(self, configs, default=False):
        """Kept in the embedded store (read at start) and in Kafka's /config/brokers/<id> or
        /config/brokers/<default> with a change notification, so the cluster default reaches
        every broker and Kafka's tools see both."""
        d = self.local.set_broker_configs(configs, default)
        return d.addCallback(lambda _: self.zk.set_entity_configs(
            self._broker_entity(default), zk_layout.encode_entity_config(configs)))

    def broker_config_changed(self, name):
        """A change notification for /config/brokers/<name>: the cluster default, or this
        broker's own (written by a tool), is read and handed to the listeners when it differs
        from what is in force here; other brokers' are theirs."""
        if name not in (zk_layout.DEFAULT_ENTITY, str(self.node_id)):
            return defer.succeed(None)
        return self._read_broker_configs(name == zk_layout.DEFAULT_ENTITY)

    def load_broker_configs(self):
        """At start: the cluster default and this broker's configs as ZooKeeper has them (set
        while this broker was down) win over the embedded store's copy."""
        return defer.gatherResults([self._read_broker_configs(True), self._read_broker_configs(False)],
                                   consumeErrors=True).addErrback(lambda f: f.value.subFailure)

    def _read_broker_configs(self, default):
        def read(data):
            if data is None:
                return
            configs = zk_layout.decode_entity_config(data)
            current = self.local.default_broker_configs if default else self.local.broker_configs
            if configs == dict(current or {}):
                return
            for listener in list(self.broker_config_listeners):
                try:
                    listener(default, configs)
                except Exception:
                    log.failure("dynamic broker config listener failed")
        return self.zk.entity_configs(self._broker_entity(default)).addCallback(read)

    def set_client_quotas(self, quotas):
        """Write the entities whose quotas changed (Kafka's /config/<type>/<name> and a change
        notification each): a Deferred, once all are written."""
        clean = {entity: dict(values) for entity, values in quotas.items() if values}
        changed = [e for e in set(clean) | set(self._staged_quotas) if clean.get(e) != self._staged_quotas.get(e)]
        self._staged_quotas = clean
        writes = [self.zk.set_entity_configs(zk_layout.quota_entity_path(e),
                                             zk_layout.encode_quota_values(clean.get(e, {})))
                  for e in sorted(changed, key=repr)]

        def written(_):
            for e in changed:
                if e in clean:
                    self._quotas[e] = clean[e]
                else:
                    self._quotas.pop(e, None)
        return defer.gatherResults(writes, consumeErrors=True).addCallback(written)

    def load_client_quotas(self):
        def loaded(found):
            changes = []
            for path, data in found.items():
                components = zk_layout.quota_entity_components(path)
                values = zk_layout.decode_quota_values(data)
                if components is None or not values:
                    continue
                self._quotas[components] = values
                changes += [(components, k, v) for k, v in sorted(values.items())]
            self._staged_quotas = dict(self._quotas)
            self._quota_changes(changes)
        return self.zk.quota_entities().addCallback(loaded)

    def quota_entity_changed(self, entity_path):
        components = zk_layout.quota_entity_components(entity_path)
        if components is None:
            return defer.succeed(None)

        def read(data):
            new = zk_layout.decode_quota_values(data) if data else {}
            old = self._quotas.get(components, {})
            changes = [(components, k, None) for k in sorted(set(old) - set(new))]
            changes += [(components, k, v) for k, v in sorted(new.items()) if old.get(k) != v]
            for held in (self._quotas, self._staged_quotas):  # the last write wins
                if new:
                    held[components] = new
                else:
                    held.pop(components, None)
            self._quota_changes(changes)
        return self.zk.entity_configs(entity_path).addCallback(read)

    def _quota_changes(self, changes):
        if not changes:
            return
        for listener in list(self.quota_listeners):
            try:
                listener(changes)
            except Exception:
                log.failure("client quota listener failed")

    def forget_deleted_topic(self, topic_id):
        return self.local.forget_deleted_topic(topic_id)

    # -- queries -------------------------------------------------------------------------------------

    def get_topic(self, name):
        return self.topics.get(name)

    def topic_by_id(self, topic_id):
        return self._by_id.get(topic_id)

    def topic_name(self, topic_id):
        info = self._by_id.get(topic_id)
        return None if info is None else info.name

    def contains_topic(self, name):
        return name in self.topics

    def contains_partition(self, topic, partition):
        return (topic, partition) in self._states

    def partition_count(self, topic):
        info = self.topics.get(topic)
        return None if info is None else info.num_partitions

    def leader_state(self, topic, partition):
        state = self._states.get((topic, partition))
        if state is None:
            return None
        info = self.topics[topic]
        return info.topic_id, state.leader, state.leader_epoch, info.is_internal

    def leader_epoch(self, topic, partition):
        state = self._states.get((topic, partition))
        return None if state is None else state.leader_epoch

    def topic_configs(self, topic):
        """The overrides; LeaderAndIsr makes a new topic's logs before UpdateMetadata names it,
        so the configs read for it count too."""
        info = self.topics.get(topic)
        return self._configs.get(topic, {}) if info is None else info.configs

    def partition_configs(self, topic, partition):
        return self.topic_configs(topic) if (topic, partition) in self._states else None

    def is_internal(self, topic):
        info = self.topics.get(topic)
        return info.is_internal if info is not None else topic in INTERNAL_TOPICS

    def live_brokers(self):
        return [self._brokers[b] for b in sorted(self._brokers)]

    def live_broker(self, node_id):
        return self._brokers.get(node_id)

    def partition_state(self, topic, partition):
        return self._states.get((topic, partition))

    def topic_partition_states(self, topic):
        info = self.topics.get(topic)
        if info is None:
            return []
        return [self._states.get((topic, p)) for p in range(info.num_partitions)]

    def topic_configs_loaded(self, topics):
        """Read the configs of topics not known yet (LeaderAndIsr may name a topic before
        UpdateMetadata does): a Deferred."""
        missing = [t for t in topics if t not in self._configs]
        if not missing:
            return defer.succeed(None)

        def got(configs, topic):
            self._configs.setdefault(topic, configs)
        return defer.gatherResults([self.zk.topic_configs(t).addCallback(got, t) for t in missing])

    # -- listeners -----------------------------------------------------------------------------------

    def add_listener(self, listener):
        self._listeners.append(listener)

    def remove_listener(self, listener):
        self._listeners.remove(listener)

    def _notify(self, event, info):
        for listener in list(self._listeners):
            d = defer.maybeDeferred(listener, event, info)
            d.addErrback(lambda f: log.failure("metadata listener failed on {event} {topic}", f,
                                               event=event, topic=info.name))

    # -- UpdateMetadata --------------------------------------------------------------------------------

    def check_controller_epoch(self, controller_epoch):
        """STALE_CONTROLLER_EPOCH for a request of an older controller than one seen before."""
        if controller_epoch < self.controller_epoch:
            return errors.STALE_CONTROLLER_EPOCH
        return errors.NONE

    def is_broker_epoch_stale(self, broker_epoch):
        return broker_epoch != -1 and broker_epoch < self.broker_epoch

    def metadata_ready(self, timeout=10.0):
        """Fired once the controller's first UpdateMetadata arrived (or after ``timeout`` s):
        until then this broker knows no broker and no topic, and answering Metadata would tell
        clients the cluster is empty (or start auto-creating topics that exist)."""
        if not self._ready.called and self._ready_timer is None:
            self._ready_timer = self._reactor.callLater(timeout, self._set_ready)
        d = defer.Deferred()
        self._ready.addBoth(lambda result: d.callback(None) or result)
        return d

    def _set_ready(self):
        if self._ready_timer is not None and self._ready_timer.active():
            self._ready_timer.cancel()
        if not self._ready.called:
            self._ready.callback(None)

    def update_metadata(self, request):
        """Apply an UpdateMetadata (its epochs already checked): live brokers, controller,
        partition states; topics whose partitions say LeaderDuringDelete go."""
        self.controller_epoch = max(self.controller_epoch, request.controller_epoch)
        self.controller_id = request.controller_id
        brokers = {}
        for b in request.live_brokers:
            endpoints, protocols = {}, {}
            for ep in b.endpoints:
                name = ep.listener or SECURITY_PROTOCOL_NAMES.get(ep.security_protocol, "PLAINTEXT")
                endpoints[name] = (ep.host, ep.port)
                protocols[name] = SECURITY_PROTOCOL_NAMES.get(ep.security_protocol, "PLAINTEXT")
            brokers[b.id] = BrokerInfo(node_id=b.id, rack=b.rack, endpoints=endpoints,
                                       security_protocols=protocols)
        self._brokers = brokers
        deleted = set()
        highest = {}  # topic -> (topic id, highest partition named): each topic put once
        for t in request.topic_states:
            for p in t.partition_states:
                topic = t.topic_name or p.topic_name
                if p.leader == LEADER_DURING_DELETE:
                    deleted.add(topic)
                    continue
                self._states[(topic, p.partition_index)] = PartitionState(
                    leader=p.leader, leader_epoch=p.leader_epoch, isr=p.isr, replicas=p.replicas,
                    offline_replicas=p.offline_replicas, partition_epoch=p.zk_version)
                known = highest.get(topic)
                if known is None or p.partition_index > known[1]:
                    highest[topic] = (t.topic_id if known is None else known[0], p.partition_index)
        for topic, (topic_id, partition) in highest.items():
            self._put_topic(topic, topic_id, partition)
        for topic in deleted:
            self._remove_topic(topic)
        self._check_waiters()
        self._set_ready()

    def _put_topic(self, topic, topic_id, partition):
        info = self.topics.get(topic)
        epochs = []
        n = partition + 1 if info is None else max(info.num_partitions, partition + 1)
        for p in range(n):
            state = self._states.get((topic, p))
            epochs.append(0 if state is None else state.leader_epoch)
        new = info is None
        if new:
            info = TopicInfo(topic, topic_id, n, dict(self._configs.get(topic, {})), epochs,
                             topic in INTERNAL_TOPICS)
        else:
            info = attr.evolve(info, num_partitions=n, leader_epochs=epochs)
        self.topics[topic] = info
        self._by_id[info.topic_id] = info
        if new and topic not in self._configs:
            # after the topic is in place: a store answering at once must find it
            self.topic_configs_loaded([topic]).addCallback(lambda _: self._configs_read(topic))

    def _configs_read(self, topic):
        info = self.topics.get(topic)
        if info is not None and info.configs != self._configs.get(topic, {}):
            self._set_configs(info, self._configs[topic])

    def _set_configs(self, info, configs):
        info = attr.evolve(info, configs=dict(configs))
        self.topics[info.name] = info
        self._by_id[info.topic_id] = info
        self._notify(TOPIC_CONFIGS_CHANGED, info)

    def _remove_topic(self, topic):
        info = self.topics.pop(topic, None)
        for key in [k for k in self._states if k[0] == topic]:
            del self._states[key]
        self._configs.pop(topic, None)
        if info is not None:
            self._by_id.pop(info.topic_id, None)
            self._notify(TOPIC_DELETED, info)

    def config_changed(self, topic):
        """A change notification named ``topic``: read its configs again."""
        self._configs.pop(topic, None)

        def read(_):
            info = self.topics.get(topic)
            if info is not None:
                self._set_configs(info, self._configs.get(topic, {}))
        return self.topic_configs_loaded([topic]).addCallback(read)

    # -- waiting for the controller ---------------------------------------------------------------------

    def _wait_for(self, predicate, what, timeout_s=None):
        if predicate():
            return defer.succeed(None)
        d = defer.Deferred()
        entry = [predicate, d, None]

        def expired():
            if entry in self._waiters:
                self._waiters.remove(entry)
                d.errback(KafkaError(errors.REQUEST_TIMED_OUT, "%s: the controller did not publish it in time"
                                     % (what,)))
        entry[2] = self._reactor.callLater(self.timeout if timeout_s is None else timeout_s, expired)
        self._waiters.append(entry)
        return d

    def when_leaders(self, expected, timeout_s):
        def done():
            return {tp for tp, leader in expected.items()
                    if tp in self._states and self._states[tp].leader == leader}
        d = self._wait_for(lambda: len(done()) == len(expected), "elected leaders", timeout_s)
        return d.addBoth(lambda _: done())

    def _check_waiters(self):
        for entry in list(self._waiters):
            predicate, d, timer = entry
            if predicate():
                self._waiters.remove(entry)
                if timer.active():
                    timer.cancel()
                d.callback(None)

    def _has_leaders(self, topic, n):
        return all((topic, p) in self._states and self._states[(topic, p)].leader != NO_LEADER
                   for p in range(n))

    # -- admin changes ----------------------------------------------------------------------------------

    def check_new_topic(self, name):
        validate_topic_name(name)
        if name in self.topics or name in self._creating:
            raise KafkaError(errors.TOPIC_ALREADY_EXISTS, "Topic '%s' already exists." % (name,))
        unified = unify_collision_chars(name)
        for other in list(self.topics) + list(self._creating):
            if unify_collision_chars(other) == unified:
                raise KafkaError(errors.INVALID_TOPIC_EXCEPTION,
                                 "Topic '%s' collides with existing topic: %s" % (name, other))

    def assign_replicas(self, num_partitions, replication_factor, start_partition=0):
        """Kafka's assignment over the live brokers (rack-aware when they all have a rack)."""
        racks = {b.node_id: b.rack for b in self._brokers.values()}
        if not racks:
            raise KafkaError(errors.INVALID_REPLICATION_FACTOR,
                             "Unable to replicate the partition %d time(s): The target replication factor "
                             "of %d cannot be reached because only 0 broker(s) are registered."
                             % (replication_factor, replication_factor))
        return assign_replicas(num_partitions, replication_factor, racks, start_partition=start_partition)

    def create_topic(self, name, num_partitions, configs=None, topic_id=None, assignment=None):
        self.check_new_topic(name)
        if assignment is None:  # auto-creation and the coordinators' topics
            assignment = self.assign_replicas(num_partitions, self.default_replication_factor)
        if topic_id is None:
            topic_id = random_uuid()
        configs = {k: v for k, v in (configs or {}).items() if v is not None}
        self._creating.add(name)
        self._configs[name] = configs
        d = self.zk.create_topic(name, topic_id, assignment, configs)
        d.addCallback(lambda _: self._wait_for(lambda: self._has_leaders(name, len(assignment)),
                                               "topic %s" % name))

        def done(result):
            self._creating.discard(name)
            return result
        d.addBoth(done)
        return d.addCallback(lambda _: self.topics[name])

    def delete_topic(self, name):
        if name not in self.topics:
            raise KafkaError(errors.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        info = self.topics[name]
        d = self.zk.mark_topic_for_deletion(name)
        d.addCallback(lambda _: self._wait_for(lambda: name not in self.topics, "deletion of %s" % name))
        return d.addCallback(lambda _: info)

    def alter_topic_configs(self, name, configs):
        if name not in self.topics:
            raise KafkaError(errors.UNKNOWN_TOPIC_OR_PARTITION, "Topic %s does not exist." % (name,))
        clean = {k: v for k, v in configs.items() if v is not None}
        d = self.zk.set_topic_configs(name, clean)

        def written(_):
            self._configs[name] = clean
            info = self.topics.get(name)
            if info is not None:
                self._set_configs(info, clean)
            return self.topics.get(name)
        return d.addCallback(written)

    def create_partitions(self, name, total):
        info = self.topics.get(name)
        if info is None:
            raise KafkaError(errors.UNKNOWN_TOPIC_OR_PARTITION, "Topic %s does not exist." % (name,))
        if total <= info.num_partitions:
            raise KafkaError(errors.INVALID_PARTITIONS,
                             "Topic currently has %d partitions, which is higher than the requested %d."
                             % (info.num_partitions, total) if total < info.num_partitions else
                             "Topic already has %d partitions." % (info.num_partitions,))
        current = {p: list(self._states[(name, p)].replicas) for p in range(info.num_partitions)}
        rf = len(current[0]) if current else 1
        added = self.assign_replicas(total - info.num_partitions, rf, start_partition=info.num_partitions)
        d = self.zk.add_partitions(name, info.topic_id, {**current, **added})
        d.addCallback(lambda _: self._wait_for(lambda: self._has_leaders(name, total), "partitions of %s" % name))
        return d.addCallback(lambda _: self.topics[name])

    def next_producer_id(self):
        """Ids from blocks taken through ``/latest_producer_id_block`` (Kafka's ZkProducerIdManager)."""
        if self._pid_next <= self._pid_end:
            pid = self._pid_next
            self._pid_next += 1
            return defer.succeed(pid)
        if self._pid_block is None:
            self._pid_block = self.zk.allocate_producer_id_block(self.node_id, PRODUCER_ID_BLOCK_SIZE)

            def got(block):
                self._pid_block = None
                self._pid_next, self._pid_end = block
                return block

            def failed(f):
                self._pid_block = None
                return f
            self._pid_block.addCallbacks(got, failed)
        d = defer.Deferred()
        self._pid_block.addCallbacks(lambda _: self.next_producer_id().chainDeferred(d),
                                     lambda f: d.errback(KafkaError(errors.UNKNOWN_SERVER_ERROR, f.getErrorMessage())))
        return d
