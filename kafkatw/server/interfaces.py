"""The server layer's contracts: :class:`IReplicaManager` (what the handlers, the delayed
fetch and the coordinators call to reach partitions), :class:`IAlterPartitionManager` (a
leader's ISR changes to the controller) and :class:`IApiHandler` (what ``KafkaApis``
dispatches to, one per API key). How any is implemented is not here.
"""

from zope.interface import Attribute, Interface

from kafkatw.storage.offsets import ORIGIN_CLIENT


class IReplicaManager(Interface):
    """Partitions led by this broker: append, fetch, ListOffsets and the checks they share
    (Kafka's ReplicaManager). ``tp`` is ``(topic, partition)``."""

    node_id = Attribute("This broker's node id.")
    config = Attribute("The live broker config (swapped when dynamic broker configs change).")
    broker_epoch = Attribute("This broker's epoch in the cluster (its registration's czxid; -1 "
                             "embedded): sent in follower fetches and AlterPartition.")

    def start():
        """Lead every loaded partition (the HW moves to the log end) and start timers."""

    def shutdown():
        """Stop timers, complete parked fetches, write producer-state snapshots."""

    def append_records(timeout_ms, required_acks, entries, internal_topics_allowed=False,
                       origin=ORIGIN_CLIENT):
        """Append ``entries`` ({tp: writable buffer of v2 batches}); a Deferred of
        {tp: PartitionResponse} that fires once the acks are satisfied. ``origin``:
        ORIGIN_CLIENT (a Produce: sequences checked, no control batches) or
        ORIGIN_COORDINATOR (coordinators' records and transaction markers)."""

    def append_records_now(timeout_ms, required_acks, entries, internal_topics_allowed=False,
                           batch_headers=None, origin=ORIGIN_CLIENT):
        """:meth:`append_records` for the produce path: the {tp: PartitionResponse} dict itself
        when every append completed at once, else a Deferred of it (an idempotent append waits
        for its partition's producer state to be rebuilt from the log; on a cluster acks=all
        would wait for the ISR). ``batch_headers``: {tp: [(position, BatchHeader)]} the caller
        already read."""

    def fetch_messages(params, fetch_infos):
        """Read ``fetch_infos`` ([(tp, PartitionData)] in request order) with FetchParams
        ``params``; a Deferred of [(tp, FetchPartitionData)] in the same order, fired at once or
        when a parked fetch completes (enough bytes, a partition change, max wait)."""

    def fetch_messages_now(params, fetch_infos):
        """:meth:`fetch_messages` for the fetch path: the list itself when answered at once,
        else a pending answer whose ``when_complete(callback, errback)`` gets the list, or
        ``respond(list)`` once its ``respond`` (None) is set to that function (the fetch
        handler's answer, made when the fetch completes)."""

    def read_from_log(params, fetch_infos, found=None):
        """Read every partition now ([(tp, FetchPartitionData)], with where each read
        started and its records' size), the request's byte budget shrinking by each read;
        what a parked fetch does when it completes (``found``: the partitions' ``(log,
        Partition or None)`` its completing check just looked up)."""

    def get_partition_or_error(topic, partition, topic_id=None):
        """``(log, NONE)`` for a partition led here (an ILog), else ``(None, error code)``:
        UNKNOWN_TOPIC_OR_PARTITION, INCONSISTENT_TOPIC_ID, NOT_LEADER_OR_FOLLOWER."""

    def leader_log_or_error(topic, partition, topic_id, requested_epoch):
        """:meth:`get_partition_or_error` then :meth:`check_leader_epoch` in one look-up."""

    def fetch_log_or_error(params, topic, partition, topic_id, requested_epoch):
        """The read path's look-up, ``(log, error, Partition or None)``: as
        :meth:`leader_log_or_error`, but a consumer with client metadata (``params``, Fetch
        v11+) may read a follower on a cluster (KIP-392; the Partition is then given)."""

    def check_leader_epoch(topic, partition, requested_epoch):
        """NONE, FENCED_LEADER_EPOCH (client's epoch older) or UNKNOWN_LEADER_EPOCH (newer);
        -1 or None means the client did not say."""

    def diverging_epoch(log, info):
        """``(epoch, end_offset)`` if a follower's last fetched epoch ends before its fetch
        offset (KIP-320), else None."""

    def producer_state_or_load(topic, partition, log):
        """The partition's ProducerStateManager if loaded (or loadable at once from a snapshot),
        else None after starting its rebuild from the log (in reactor-sized slices): the
        caller then waits on :meth:`when_producer_state_loaded`."""

    def loaded_producer_state(topic, partition):
        """The partition's ProducerStateManager if loaded, else None (starts nothing)."""

    def when_producer_state_loaded(topic, partition):
        """A Deferred firing once the partition's producer-state rebuild has ended (fired
        already when none is running)."""

    def set_producer_id_expiration_ms(expiration_ms):
        """``producer.id.expiration.ms`` changed live: the next expiry check uses it."""

    def fetch_offset_for_timestamp(tp, timestamp, isolation_level=None, current_leader_epoch=-1,
                                   fetch_only_from_leader=True, topic_id=None):
        """ListOffsets for one partition: a ListOffsetsPartitionResult (offset -1 when nothing
        matches); raises KafkaError for partition and leader-epoch errors. ``isolation_level``
        None reads to the log end (a replica), 0/1 to the HW/LSO (a consumer)."""

    def forget_partition(topic, partition):
        """Drop the in-memory state of a deleted partition and complete fetches parked on it."""

    def become_leader_or_follower(controller_id, controller_epoch, partition_states, topic_ids,
                                  live_leaders):
        """LeaderAndIsr (cluster mode): ``partition_states`` are LeaderAndIsrPartitionState
        objects, ``topic_ids`` {topic name: 16-byte id}, ``live_leaders`` {broker id: (host,
        port) of its inter-broker listener}. A Deferred of {tp: error code}; raises
        KafkaError(STALE_CONTROLLER_EPOCH) for a controller epoch older than one seen; a
        partition whose leader epoch is not newer than ours gets STALE_CONTROLLER_EPOCH."""

    def stop_replicas(controller_id, controller_epoch, partitions):
        """StopReplica (cluster mode): ``partitions`` [(topic, partition, leader_epoch,
        delete)]; a Deferred of {tp: error code}; raises KafkaError(STALE_CONTROLLER_EPOCH)
        as :meth:`become_leader_or_follower` does."""


    def add_leadership_listener(listener):
        """Call ``listener(became_leader, became_follower)`` (lists of ``(topic, partition,
        leader_epoch)``) after LeaderAndIsr and StopReplica change roles here (cluster mode;
        never on a single node, which leads everything from the start)."""

    def under_replicated_partitions():
        """How many partitions led here have an ISR smaller than their replicas (metrics)."""


class IAlterPartitionManager(Interface):
    """Sends a leader's ISR changes to the controller (Kafka's AlterPartitionManager): one
    change in flight per partition, retried on NOT_CONTROLLER and lost connections."""

    def start():
        """Begin sending."""

    def shutdown():
        """Stop sending; pending changes fail with OPERATION_NOT_ATTEMPTED."""

    def submit(topic, partition, topic_id, leader_epoch, new_isr, partition_epoch,
               leader_recovery_state=0):
        """Propose ``new_isr`` for the partition at ``leader_epoch``/``partition_epoch``: a
        Deferred of the controller's ``LeaderAndIsr`` (leader, leader_epoch, isr,
        partition_epoch, leader_recovery_state), or failing with a KafkaError of the
        partition's error (OPERATION_NOT_ATTEMPTED when another change of it is in flight)."""


class IApiHandler(Interface):
    """One Kafka API as ``KafkaApis`` serves it: usually a module of ``server/handlers``
    (``moduleProvides``) or a class of static methods (``@provider``)."""

    API_KEY = Attribute("The API key served.")
    VERSIONS = Attribute("``(lo, hi)``: Kafka 4.0's served range (clipped to the codec's by "
                         "KafkaApis).")

    def handle(apis, request):
        """Answer ``request`` (a network Request, body decoded) using ``apis`` (KafkaApis: its
        config, metadata, replica manager, coordinators): a response body, a Response, a
        Deferred of either, or a pending answer with ``when_complete(callback, errback)``.
        A KafkaError raised becomes :meth:`error_response` with its code."""

    def error_response(request, code, message):
        """This API's response body with every error code set to ``code`` (and ``message``
        where the version has one), or None when the version has no error field: the
        connection is then closed, as Kafka does."""


class IReplicaSelector(Interface):
    """Kafka's ``ReplicaSelector`` (``replica.selector.class``, KIP-392): which replica a
    consumer with client metadata should read a partition from. Asked on the leader only."""

    def select(topic_partition, client_metadata, partition_view):
        """A ``ReplicaView`` of ``partition_view.replicas`` (the leader included), or None for
        no preference. ``client_metadata`` has ``rack_id``, ``client_id``, ``client_address``,
        ``principal`` and ``listener_name``; each replica view ``broker_id``, ``rack``,
        ``log_end_offset`` and ``time_since_last_caught_up_ms``."""
