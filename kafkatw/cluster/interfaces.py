"""The cluster layer's contract with the broker: what the replica manager, the handlers and the
coordinators ask of topic, partition and leader state (Kafka's MetadataCache plus the
controller calls a broker makes). The single-node store (``cluster.metadata``) implements it; a
multi-broker controller provides a second implementation. How state is kept is not here.
"""

from zope.interface import Attribute, Interface


class IPartitionMetadata(Interface):
    """The read side the data path needs: is a partition known, who leads it, in which epoch.

    Topics are described by ``TopicInfo``-like objects with ``name``, ``topic_id``,
    ``num_partitions``, ``configs`` (topic-level overrides, name -> str), ``leader_epochs``
    and ``is_internal``."""

    node_id = Attribute("This broker's node id.")

    def contains_partition(topic, partition):
        """True if ``topic`` exists and has partition ``partition``."""

    def leader_epoch(topic, partition):
        """The partition's leader epoch, or None if the partition is unknown."""

    def leader_state(topic, partition):
        """``(topic_id, leader node id, leader_epoch, is_internal)`` in one look-up, or None
        if the partition is unknown: the hot path of every produce (which refuses internal
        topics) and fetch."""

    def topic_configs(topic):
        """The topic-level config overrides (name -> str); ``{}`` for an unknown topic."""

    def partition_configs(topic, partition):
        """:meth:`topic_configs` if ``topic`` has partition ``partition`` (as
        :meth:`contains_partition` answers), else None: a produce asks both for every
        partition, in one look-up."""

    def is_internal(topic):
        """True for __consumer_offsets and __transaction_state (produce is refused there)."""


class IClusterMetadata(IPartitionMetadata):
    """Everything the broker asks of cluster metadata: topics, their admin operations, dynamic
    broker configs and producer ids. A mutation is validated at once (a refusal raises
    KafkaError) and answered by a Deferred that fires once the change is durable and its
    listeners are done; queries answer from what is durable."""

    cluster_id = Attribute("The cluster id (22 characters of base64url).")
    topics = Attribute("``{name: TopicInfo}`` of every topic; callers only read it.")
    broker_configs = Attribute("This node's dynamic broker configs (name -> str).")
    default_broker_configs = Attribute("The cluster-wide default dynamic broker configs.")
    client_quotas = Attribute("``{entity components: {quota key: value}}`` that are durable.")
    staged_client_quotas = Attribute("The client quotas including changes not yet durable.")
    deleted_topic_ids = Attribute(
        "Ids of deleted topics whose partition directories may still exist (a frozenset).")

    def get_topic(name):
        """The TopicInfo of ``name``, or None."""

    def topic_by_id(topic_id):
        """The TopicInfo with this id, or None."""

    def topic_name(topic_id):
        """The name of the topic with this id, or None."""

    def contains_topic(name):
        """True if the topic exists."""

    def partition_count(topic):
        """The topic's number of partitions, or None if unknown."""

    def add_listener(listener):
        """Call ``listener(event, topic_info)`` after each durable change; events are
        TOPIC_CREATED, TOPIC_DELETED, TOPIC_CONFIGS_CHANGED, TOPIC_PARTITIONS_ADDED (a listener
        ignores events it does not know). A listener may return a Deferred: the change is
        published when it fires (a created topic's logs exist before anyone sees the topic)."""

    def remove_listener(listener):
        """Stop calling a listener added before."""

    def check_new_topic(name):
        """Raise KafkaError unless a topic ``name`` may be created now (legal name, not
        existing or being created, no '.'/'_' collision)."""

    def assign_replicas(num_partitions, replication_factor, start_partition=0):
        """``{partition: [replicas]}`` over the live brokers (Kafka's rack-aware algorithm);
        raises KafkaError(INVALID_REPLICATION_FACTOR) when there are too few."""

    def create_topic(name, num_partitions, configs=None, topic_id=None, assignment=None):
        """Create the topic with ``assignment`` (``{partition: [replicas]}``, None: assigned
        here): a Deferred of its TopicInfo once it is published with its leaders. Raises
        KafkaError if refused."""

    def delete_topic(name):
        """Delete the topic: a Deferred of its TopicInfo. Raises KafkaError
        (UNKNOWN_TOPIC_OR_PARTITION)."""

    def alter_topic_configs(name, configs):
        """Replace the topic-level overrides of ``name``: a Deferred of its TopicInfo."""

    def create_partitions(name, total):
        """Grow ``name`` to ``total`` partitions (increase only): a Deferred of its TopicInfo."""

    def set_broker_configs(configs, default=False):
        """Replace this node's (or, with ``default``, the cluster default) dynamic broker
        configs: a Deferred firing once durable."""

    def set_client_quotas(quotas):
        """Replace the client quotas (entities without values dropped): a Deferred firing once
        durable."""

    def forget_deleted_topic(topic_id):
        """The deleted topic's partition directories are gone: stop remembering its id (a
        Deferred, once durable; never waited on from a metadata listener)."""

    def next_producer_id():
        """A Deferred of a producer id never handed out before in this cluster, even across
        restarts."""

    controller_id = Attribute("The active controller's node id (-1 if unknown; embedded: this node).")

    def live_brokers():
        """The live brokers, ``[BrokerInfo]`` sorted by id (embedded: this node, without
        endpoints: callers use their own advertised listeners for it)."""

    def live_broker(node_id):
        """The live broker's BrokerInfo, or None."""

    def partition_state(topic, partition):
        """The partition's PartitionState (leader, epochs, ISR, replicas, offline replicas), or
        None if unknown: what Metadata answers."""

    def topic_partition_states(topic):
        """:meth:`partition_state` of each of the topic's partitions in partition order, one
        list (not to be modified; empty if the topic is unknown): Metadata reads a topic's in
        one call."""

    def metadata_ready():
        """A Deferred fired once this broker knows the cluster (cluster mode: the controller's
        first UpdateMetadata, bounded; fired at once where the metadata is local)."""

    def topic_configs_loaded(topics):
        """A Deferred firing once the topic-level configs of ``topics`` are known here (fired
        at once where they always are)."""


class IClusterMetadataCache(Interface):
    """What the handlers of the controller's requests ask of a cluster-mode broker's metadata
    (Kafka's MetadataCache update path and the broker's epochs)."""

    controller_epoch = Attribute("The highest controller epoch seen in a controller request.")
    broker_epoch = Attribute("This broker's epoch: the czxid of its current registration.")

    def check_controller_epoch(controller_epoch):
        """STALE_CONTROLLER_EPOCH if older than one seen before, else NONE."""

    def is_broker_epoch_stale(broker_epoch):
        """True if a controller request names an older registration of this broker."""

    def update_metadata(request):
        """Apply an UpdateMetadataRequest whose epochs were checked."""

    def config_changed(topic):
        """A config change notification for ``topic``: read its configs again (a Deferred)."""

    def load_client_quotas():
        """Read every client quota entity from the store (at start-up): a Deferred; the quota
        listeners get them as changes."""

    def quota_entity_changed(entity_path):
        """A change notification for a client quota entity: read it again; the quota listeners
        get what changed (a Deferred)."""

    def broker_config_changed(name):
        """A change notification for /config/brokers/<name>: this broker's or the cluster
        default's dynamic configs, handed to the broker config listeners if they changed."""

    def load_broker_configs():
        """Read this broker's and the cluster default's dynamic configs from the store (at
        start), handing those that differ from the local copy to the listeners."""

    def when_leaders(expected, timeout_s):
        """A Deferred firing with the set of ``expected`` ({(topic, partition): leader}) that this
        cache shows led so, once all are or after ``timeout_s`` (Kafka's DelayedElectLeader)."""


class IClusterCoordinator(Interface):
    """The coordination store as the controller and the brokers use it (Kafka's KafkaZkClient):
    Kafka's znode layout behind named operations. Every call returns a Deferred firing on the
    reactor thread; watch callbacks and session-state listeners are called there too, with no
    argument for a watch and one of ``"CONNECTED"``, ``"SUSPENDED"``, ``"LOST"`` for a listener.
    Writes that only a controller may do take the controller epoch's zkVersion and fail with
    :class:`ControllerMovedError` once another controller has been elected."""

    def start():
        """Connect (bounded by ``zookeeper.connection.timeout.ms``) and create Kafka's top-level
        paths: a Deferred."""

    def stop():
        """Close the session (its ephemeral znodes go at once): a Deferred."""

    def add_state_listener(listener):
        """Call ``listener(state)`` on each session state change."""

    def get_or_create_cluster_id(proposed):
        """A Deferred of ``/cluster/id``'s id, written with ``proposed`` if there is none."""

    def register_broker(broker_id, data):
        """Create the ephemeral ``/brokers/ids/<id>``: a Deferred of the broker epoch (its czxid).
        One this session holds already (a create resent after its answer was lost) is this
        registration; fails with KafkaError(BROKER_ID_NOT_REGISTERED) if another session holds it."""

    def broker_ids(watch=None):
        """A Deferred of the registered broker ids (sorted); ``watch`` fires once on a change."""

    def get_broker(broker_id):
        """A Deferred of the broker's BrokerInfo (with its epoch), or None if not registered."""

    def get_controller_id(watch=None):
        """A Deferred of the controller's id, -1 if none; ``watch`` fires once on a change."""

    def elect_controller(broker_id):
        """Try to become controller: ``/controller`` and ``/controller_epoch`` + 1 in one multi.
        A Deferred of ``(epoch, epoch_zk_version)``, or of None when another broker is controller."""

    def resign_controller(broker_id):
        """Delete ``/controller`` if this broker holds it: a Deferred."""

    def topics(watch=None):
        """A Deferred of the topic names under ``/brokers/topics``."""

    def topic_assignment(topic, watch=None):
        """A Deferred of ``(topic_id, {partition: [replicas]})``, or None for an unknown topic."""

    def topic_full_assignment(topic, watch=None):
        """``(topic_id, {p: replicas}, {p: adding}, {p: removing})`` of a topic, or None."""

    def set_topic_assignment(epoch_zk_version, topic, topic_id, assignment, adding, removing):
        """The controller's write of a topic's assignment with its reassignment state."""

    def reassign_partitions(watch=None):
        """``{(topic, partition): [replicas]}`` asked for in the legacy reassignment znode."""

    def set_reassign_partitions(epoch_zk_version, targets):
        """Rewrite (or, empty, delete) the legacy reassignment znode."""

    def request_reassignment(targets):
        """Create the legacy reassignment znode (a tool's request)."""

    def create_topic(topic, topic_id, assignment, configs):
        """Write the topic's config then its assignment (Kafka's AdminZkClient order); fails with
        KafkaError(TOPIC_ALREADY_EXISTS) if it exists."""

    def add_partitions(topic, topic_id, assignment):
        """Replace the topic's assignment with one holding more partitions: a Deferred."""

    def partition_states(topic, partitions):
        """A Deferred of ``{partition: LeaderAndIsr}`` of those with a state znode."""

    def create_partition_states(epoch_zk_version, topic, states):
        """Create the state znodes of new partitions, each conditional on the controller epoch:
        a Deferred of ``{partition: LeaderAndIsr (with its partition epoch) or a Failure}``."""

    def update_partition_states(epoch_zk_version, topic, states):
        """Write ``states`` (``{partition: LeaderAndIsr}`` whose ``partition_epoch`` is the
        version read), each conditional on the controller epoch and on that version: a Deferred
        of ``{partition: the written state (new partition epoch) or a Failure}``."""

    def topic_configs(topic):
        """A Deferred of the topic's config overrides."""

    def set_topic_configs(topic, configs):
        """Replace the topic's overrides and add a change notification: a Deferred."""

    def config_changes(watch=None, after=""):
        """A Deferred of ``[(sequence name, entity type, entity name)]`` of the notifications
        named after ``after`` (sequence names sort in creation order), oldest first."""

    def purge_config_changes(max_age_ms, now_ms):
        """Delete the change notifications older than ``max_age_ms`` at ``now_ms`` (Kafka keeps
        them 15 minutes): a Deferred of how many were deleted."""

    def entity_configs(entity_path):
        """A Deferred of the bytes of ``/config/<entity_path>`` (a client quota entity), or None."""

    def set_entity_configs(entity_path, data):
        """Write ``/config/<entity_path>`` and add a change notification: a Deferred."""

    def quota_entities():
        """A Deferred of ``{entity path: bytes}`` of every client quota entity under /config."""

    def mark_topic_for_deletion(topic):
        """Create ``/admin/delete_topics/<t>``: a Deferred (fine if already marked)."""

    def topics_to_delete(watch=None):
        """A Deferred of the names under ``/admin/delete_topics``."""

    def delete_topic(epoch_zk_version, topic):
        """Remove the topic's znodes, config and deletion mark (controller only): a Deferred."""

    def propagate_log_dir_event(broker_id):
        """A log dir of this broker failed: add a ``/log_dir_event_notification`` sequence
        znode for the controller (Kafka's propagateLogDirEvent): a Deferred."""

    def log_dir_event_notifications(watch=None):
        """A Deferred of the notification names (oldest first); ``watch`` fires once on a change."""

    def log_dir_event_brokers(names):
        """A Deferred of the broker ids the notifications ``names`` were written for (gone ones
        left out)."""

    def delete_log_dir_event_notifications(epoch_zk_version, names):
        """Remove handled notifications (controller only, conditional on its epoch): a Deferred."""

    def allocate_producer_id_block(broker_id, size):
        """Take the next block of ``size`` producer ids through ``/latest_producer_id_block``
        (conditional on the version read, retried): a Deferred of ``(start, end)``, end inclusive."""


class ControllerMovedError(Exception):
    """A controller write failed its check of the controller epoch: another controller was
    elected since (Kafka's ControllerMovedException)."""
