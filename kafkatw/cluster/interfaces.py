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
        """``(topic_id, leader node id, leader_epoch)`` in one look-up, or None if the
        partition is unknown: the hot path of every produce and fetch."""

    def topic_configs(topic):
        """The topic-level config overrides (name -> str); ``{}`` for an unknown topic."""

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

    def create_topic(name, num_partitions, configs=None, topic_id=None):
        """Create the topic (this node leading every partition at epoch 0): a Deferred of its
        TopicInfo. Raises KafkaError if refused."""

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
