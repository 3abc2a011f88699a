"""The transaction coordinator (Kafka's TransactionCoordinator + TransactionStateManager):
InitProducerId with a transactional id, AddPartitionsToTxn (and its verify-only form),
AddOffsetsToTxn, EndTxn, markers, timeouts, transactional id expiry, Describe/ListTransactions,
state on ``__transaction_state``. It coordinates the partitions of that topic this broker leads
(``coordinator.partition_ownership``: all of them on a single node), loading each on election
(COORDINATOR_LOAD_IN_PROGRESS meanwhile) and dropping it on resignation. Request decoding is
the handlers'; the state machine of one id is ``metadata.py``; record formats ``txn_log.py``;
markers reach the partitions' leaders through ``marker_channel.py``.
"""

from twisted.internet import defer, task
from twisted.logger import Logger

from kafkatw.background_failures import FailingTask
from kafkatw.coordinator.group.offsets_log import iter_log_records
from kafkatw.coordinator.log_append import append_coordinator_batch
from kafkatw.coordinator.partition_ownership import PartitionOwnership
from kafkatw.crash_points import crash_point
from kafkatw.protocol import errors
from kafkatw.storage.offsets import ORIGIN_COORDINATOR

from . import txn_log
from .marker_channel import TransactionMarkerChannelManager
from .markers import GROUP_METADATA_TOPIC_NAME
from .metadata import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    DEAD,
    EMPTY,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARE_EPOCH_FENCE,
    STATE_IDS,
    IllegalTransitionError,
    TransactionMetadata,
)
from .txn_log import TRANSACTION_STATE_TOPIC_NAME

log = Logger()


def _config_get(config, name, default):
    if config is None:
        return default
    try:
        value = config[name]
    except (KeyError, TypeError):
        return default
    return default if value is None else value


class InitProducerIdResult:
    __slots__ = ("error", "producer_id", "producer_epoch")

    def __init__(self, error, producer_id=-1, producer_epoch=-1):
        self.error = error
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch


def _init_failed(failure):
    """A producer id that could not be made durable (the metadata write failed)."""
    code = getattr(failure.value, "code", None)
    if code is None:
        log.failure("InitProducerId failed", failure)
        code = errors.UNKNOWN_SERVER_ERROR
    return InitProducerIdResult(code)


def _produce_verification_error(code):
    """What a Produce answers for a failed verification (Kafka's AddPartitionsToTxnManager):
    epoch problems as INVALID_PRODUCER_EPOCH, a coordinator not ready as the retriable
    NOT_ENOUGH_REPLICAS every client retries."""
    if code == errors.PRODUCER_FENCED:
        return errors.INVALID_PRODUCER_EPOCH
    if code in (errors.COORDINATOR_LOAD_IN_PROGRESS, errors.COORDINATOR_NOT_AVAILABLE,
                errors.NOT_COORDINATOR, errors.CONCURRENT_TRANSACTIONS, errors.NETWORK_EXCEPTION):
        return errors.NOT_ENOUGH_REPLICAS
    return code


class TransactionCoordinator:
    """``replica_manager`` appends (state records and markers), ``log_manager`` serves the load,
    ``metadata`` knows and creates topics and hands out producer ids; ``group_coordinator``
    hears of markers in ``__consumer_offsets``; ``clock`` is the reactor. In a cluster,
    ``marker_channel`` (a TransactionMarkerChannelManager with a network client) reaches the
    other leaders and ``verifier`` (a ``verification.RemoteVerifier``) the other coordinators."""

    def __init__(self, config, metadata, replica_manager, log_manager, clock,
                 group_coordinator=None, marker_channel=None, verifier=None):
        self.config = config
        self.metadata = metadata
        self.replica_manager = replica_manager
        self.log_manager = log_manager
        self.clock = clock
        self.group_coordinator = group_coordinator
        # every client retries FindCoordinator while the topic cannot be created: logged quietly
        self.state_topic_creation = FailingTask("creating %s" % TRANSACTION_STATE_TOPIC_NAME, clock)
        c = lambda name, default: _config_get(config, name, default)  # noqa: E731
        self.num_partitions = int(c("transaction.state.log.num.partitions", 50))
        self.replication_factor = int(c("transaction.state.log.replication.factor", 3))
        self.min_isr = int(c("transaction.state.log.min.isr", 2))
        # Kafka's TransactionConfig.requestTimeoutMs: how long an acks=all write may wait
        self.request_timeout_ms = int(c("request.timeout.ms", 30000))
        self.segment_bytes = int(c("transaction.state.log.segment.bytes", 100 * 1024 * 1024))
        self.load_buffer_size = int(c("transaction.state.log.load.buffer.size", 5 * 1024 * 1024))
        self.max_timeout_ms = int(c("transaction.max.timeout.ms", 900000))
        self.id_expiration_ms = int(c("transactional.id.expiration.ms", 604800000))
        self.abort_interval_ms = int(
            c("transaction.abort.timed.out.transaction.cleanup.interval.ms", 10000))
        self.remove_interval_ms = int(
            c("transaction.remove.expired.transaction.cleanup.interval.ms", 3600000))
        self.transactions = {}  # transactional id -> TransactionMetadata
        self.is_active = False
        self.owned_partitions = set()
        self.loading_partitions = set()
        self.coordinator_epochs = {}  # partition -> the leader epoch it was elected with
        self._load_call = None
        self._load_task = None
        self._load_partition_id = None  # the partition self._load_task loads
        self.ownership = PartitionOwnership(TRANSACTION_STATE_TOPIC_NAME, replica_manager, metadata,
                                            self.on_election, self.on_resignation)
        self.cluster_mode = self.ownership.cluster_mode
        if marker_channel is None:
            node_id = getattr(replica_manager, "node_id", None)
            marker_channel = TransactionMarkerChannelManager(
                metadata, replica_manager, group_coordinator, node_id,
                request_timeout_ms=self.request_timeout_ms)
        self.marker_channel = marker_channel
        self.verifier = verifier
        self._cooperator = task.Cooperator(scheduler=lambda step: clock.callLater(0, step))
        self._loops = []

    # -- life cycle ------------------------------------------------------------------------
    def now_ms(self):
        return int(self.clock.seconds() * 1000)

    def startup(self):
        """Become active and follow the leadership of ``__transaction_state``: each partition
        elected is loaded, one after the other in cooperative slices (COORDINATOR_LOAD_IN_PROGRESS
        for its ids meanwhile), and every transaction found in a prepare state is finished;
        start the timeout/expiry loops."""
        self.is_active = True
        # a start after a shutdown: what was owned then is elected (and loaded) afresh
        self.owned_partitions.clear()
        self.loading_partitions.clear()
        self.coordinator_epochs.clear()
        self.transactions.clear()
        self.ownership.start()
        for fn, interval in ((self.abort_timed_out_transactions, self.abort_interval_ms),
                             (self.remove_expired_transactional_ids, self.remove_interval_ms)):
            loop = task.LoopingCall(fn)
            loop.clock = self.clock
            loop.start(interval / 1000.0, now=False)
            self._loops.append(loop)

    def shutdown(self):
        self.is_active = False
        self.ownership.stop()
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self._loops = []
        if self._load_call is not None and self._load_call.active():
            self._load_call.cancel()
        if self._load_task is not None:
            task_, self._load_task = self._load_task, None
            task_.stop()
        return self.marker_channel.close()

    def _state_topic_exists(self):
        return self.metadata is not None and self.metadata.contains_topic(TRANSACTION_STATE_TOPIC_NAME)

    def partition_for(self, transactional_id):
        n = self.num_partitions
        if self._state_topic_exists():
            n = self.metadata.partition_count(TRANSACTION_STATE_TOPIC_NAME)
        return txn_log.partition_for(transactional_id, n)

    def ensure_state_topic(self):
        """Create ``__transaction_state`` (compacted) if missing; returns an error code:
        COORDINATOR_NOT_AVAILABLE while the creation is being written (clients retry), as the
        group coordinator does for ``__consumer_offsets``."""
        if self._state_topic_exists():
            return errors.NONE
        configs = {"cleanup.policy": "compact", "segment.bytes": str(self.segment_bytes),
                   "compression.type": "uncompressed", "unclean.leader.election.enable": "false"}
        kwargs = {}
        if self.cluster_mode:
            configs["min.insync.replicas"] = str(self.min_isr)
            # Kafka's createInternalTopic: transaction.state.log.replication.factor live
            # brokers, or nothing yet (clients retry FindCoordinator meanwhile)
            alive = len(self.metadata.live_brokers())
            if alive < self.replication_factor:
                log.info("Number of alive brokers '{alive}' does not meet the required replication "
                         "factor '{rf}' for the transactions state topic (configured via "
                         "'transaction.state.log.replication.factor'). This error can be ignored if "
                         "the cluster is starting up and not all brokers are up yet.", alive=alive,
                         rf=self.replication_factor)
                return errors.COORDINATOR_NOT_AVAILABLE
        try:
            if self.cluster_mode:
                kwargs["assignment"] = self.metadata.assign_replicas(self.num_partitions,
                                                                     self.replication_factor)
            d = self.metadata.create_topic(TRANSACTION_STATE_TOPIC_NAME, self.num_partitions, configs,
                                           **kwargs)
        except Exception as e:
            if getattr(e, "code", None) == errors.TOPIC_ALREADY_EXISTS:
                return errors.COORDINATOR_NOT_AVAILABLE  # being created
            self.state_topic_creation.failed()
            return errors.COORDINATOR_NOT_AVAILABLE

        def created(info):
            self.state_topic_creation.succeeded()
            log.info("created {topic} with {n} partitions", topic=TRANSACTION_STATE_TOPIC_NAME,
                     n=info.num_partitions)

        def failed(f):
            if getattr(f.value, "code", None) == errors.TOPIC_ALREADY_EXISTS:
                return None  # another broker created it first
            self.state_topic_creation.failed(f)

        d.addCallbacks(created, failed)
        return errors.NONE if self._state_topic_exists() else errors.COORDINATOR_NOT_AVAILABLE

    def coordinator_epoch(self, transactional_id):
        """The epoch markers carry: the leader epoch this broker was elected with for the id's
        partition (Kafka's coordinatorEpoch)."""
        epoch = self.coordinator_epochs.get(self.partition_for(transactional_id), 0)
        return max(epoch, 0)

    # -- election, resignation, loading -----------------------------------------------------
    def on_election(self, partition, leader_epoch):
        """Kafka's onElection: this broker coordinates ``partition`` from ``leader_epoch`` on;
        its ids are loaded (COORDINATOR_LOAD_IN_PROGRESS meanwhile). A newer epoch while owning
        it only changes the coordinator epoch markers carry; an empty partition is owned at
        once."""
        if not self.is_active:
            return
        self.coordinator_epochs[partition] = leader_epoch
        if partition in self.owned_partitions or partition in self.loading_partitions:
            return
        log_ = None if self.log_manager is None else \
            self.log_manager.get_log(TRANSACTION_STATE_TOPIC_NAME, partition)
        if log_ is None or log_.log_end_offset <= log_.log_start_offset:
            self.owned_partitions.add(partition)
            return
        self.loading_partitions.add(partition)
        self._schedule_load()

    def on_resignation(self, partition, leader_epoch):
        """Kafka's onResignation (removeTransactionsForTxnTopicPartition): another broker
        coordinates ``partition`` now (or none); its ids leave memory, so their requests get
        NOT_COORDINATOR, and markers still being sent for them stop (the new coordinator
        resends them from the state it loads)."""
        self.owned_partitions.discard(partition)
        self.loading_partitions.discard(partition)
        self.coordinator_epochs.pop(partition, None)
        if self._load_task is not None and self._load_partition_id == partition:
            task_, self._load_task = self._load_task, None
            task_.stop()
            self._schedule_load()
        removed = [tid for tid in self.transactions if self.partition_for(tid) == partition]
        for tid in removed:
            del self.transactions[tid]
        log.info("Finished unloading {topic}-{p}: removed {n} transactional ids",
                 topic=TRANSACTION_STATE_TOPIC_NAME, p=partition, n=len(removed))

    def _schedule_load(self):
        if self._load_call is None and self._load_task is None and self.loading_partitions:
            self._load_call = self.clock.callLater(0, self._load_next)

    def _load_next(self):
        """Load the lowest partition still loading, in cooperative slices (as the group
        coordinator does), then finish the transactions found in a prepare state."""
        self._load_call = None
        if not self.loading_partitions or not self.is_active or self._load_task is not None:
            return
        p = min(self.loading_partitions)
        loaded = []
        self._load_partition_id = p
        self._load_task = self._cooperator.cooperate(self._load_partition(p, loaded))
        self._load_task.whenDone().addCallbacks(lambda _: self._loaded(p, loaded),
                                                self._load_failed, errbackArgs=(p,))

    def _load_failed(self, failure, p):
        if failure.check(task.TaskStopped):
            return  # shut down or resigned mid-load: the partition stays unloaded
        log.failure("loading {topic}-{p} failed", failure, topic=TRANSACTION_STATE_TOPIC_NAME, p=p)
        self._loaded(p, [])

    def _loaded(self, p, loaded):
        self._load_task = None
        if p in self.loading_partitions:
            self.loading_partitions.discard(p)
            self.owned_partitions.add(p)
            for tid, txn in loaded:
                if txn is None:
                    self.transactions.pop(tid, None)
                else:
                    self.transactions[tid] = txn
            for _, txn in loaded:
                if txn is not None:
                    self._complete_loaded(txn)
        if self.loading_partitions:
            self._schedule_load()
        else:
            log.info("loaded {n} transactional ids from {topic}", n=len(self.transactions),
                     topic=TRANSACTION_STATE_TOPIC_NAME)

    def _load_partition(self, partition, loaded):
        """Read one partition of ``__transaction_state`` (the last record of each id wins) into
        ``loaded`` as ``(transactional id, TransactionMetadata or None for one removed)``,
        yielding after every record; the caller installs them (unless it resigned meanwhile)."""
        log_ = self.log_manager.get_log(TRANSACTION_STATE_TOPIC_NAME, partition)
        if log_ is None:
            return
        found = {}
        for key, value in iter_log_records(log_, log_.log_start_offset, log_.log_end_offset,
                                           self.load_buffer_size):
            yield
            tid = txn_log.decode_key(key)
            if tid is None:
                continue
            found[tid] = txn_log.decode_value(tid, value)
        for tid, txn in found.items():
            loaded.append((tid, None if txn is None or txn.state == DEAD else txn))

    def _complete_loaded(self, txn):
        """A transaction stored in a prepare state lost its markers (a stop between EndTxn
        and the markers): send them again, as Kafka does after loading."""
        if txn.state in (PREPARE_COMMIT, PREPARE_ABORT):
            log.info("completing {state} of {tid} found at load", state=txn.state,
                     tid=txn.transactional_id)
            self._schedule_markers(txn)

    # -- status ----------------------------------------------------------------------------
    def _coordinator_error(self, transactional_id):
        """None, or why this broker cannot answer for ``transactional_id`` now."""
        if not self.is_active:
            return errors.COORDINATOR_NOT_AVAILABLE
        if not self._state_topic_exists():
            return errors.NOT_COORDINATOR
        p = self.partition_for(transactional_id)
        if p in self.loading_partitions:
            return errors.COORDINATOR_LOAD_IN_PROGRESS
        if p not in self.owned_partitions:
            return errors.NOT_COORDINATOR
        return None

    def is_loading(self):
        return bool(self.loading_partitions)

    # -- InitProducerId --------------------------------------------------------------------
    def handle_init_producer_id(self, transactional_id, txn_timeout_ms,
                                expected_producer_id=-1, expected_epoch=-1):
        """A Deferred of :class:`InitProducerIdResult` (Kafka's handleInitProducerId)."""
        if not transactional_id:
            return defer.succeed(InitProducerIdResult(errors.INVALID_REQUEST))
        if txn_timeout_ms <= 0 or txn_timeout_ms > self.max_timeout_ms:
            return defer.succeed(InitProducerIdResult(errors.INVALID_TRANSACTION_TIMEOUT))
        error = self._coordinator_error(transactional_id)
        if error is not None:
            return defer.succeed(InitProducerIdResult(error))
        if transactional_id in self.transactions:
            return self._init_producer_id(transactional_id, txn_timeout_ms, expected_producer_id,
                                          expected_epoch)

        def got(pid):
            # a new id: its producer id is durable before it is handed out
            if transactional_id not in self.transactions:  # else another request made it meanwhile
                self.transactions[transactional_id] = TransactionMetadata(
                    transactional_id, pid, txn_timeout_ms=txn_timeout_ms,
                    txn_last_update_timestamp=self.now_ms())
            return self._init_producer_id(transactional_id, txn_timeout_ms, expected_producer_id,
                                          expected_epoch)

        return self._next_producer_id().addCallbacks(got, _init_failed)

    def _next_producer_id(self):
        return defer.maybeDeferred(self.metadata.next_producer_id)

    def _init_producer_id(self, transactional_id, txn_timeout_ms, expected_producer_id,
                          expected_epoch):
        txn = self.transactions.get(transactional_id)
        if txn is None:  # expired while a producer id was being written: try again
            return defer.succeed(InitProducerIdResult(errors.CONCURRENT_TRANSACTIONS))
        now = self.now_ms()
        expected = expected_producer_id >= 0 and expected_epoch >= 0
        if txn.pending_state is not None:
            return defer.succeed(InitProducerIdResult(errors.CONCURRENT_TRANSACTIONS))
        if expected and not txn.is_valid_producer_id(expected_producer_id, expected_epoch):
            return defer.succeed(InitProducerIdResult(errors.PRODUCER_FENCED))
        if txn.state in (PREPARE_COMMIT, PREPARE_ABORT, PREPARE_EPOCH_FENCE):
            return defer.succeed(InitProducerIdResult(errors.CONCURRENT_TRANSACTIONS))
        if txn.state == DEAD:
            return defer.succeed(InitProducerIdResult(errors.CONCURRENT_TRANSACTIONS))
        if txn.state == ONGOING:
            # Abort it with a bumped epoch first (fencing the old producer); the client retries
            # after CONCURRENT_TRANSACTIONS and gets the next epoch then.
            d = self._fence_and_abort(txn)
            return d.addCallback(lambda code: InitProducerIdResult(
                code if code != errors.NONE else errors.CONCURRENT_TRANSACTIONS))
        if txn.is_producer_epoch_exhausted and (not expected or expected_epoch == txn.producer_epoch):
            def rotate(new_pid):
                if txn.pending_state is not None:
                    return InitProducerIdResult(errors.CONCURRENT_TRANSACTIONS)
                transit = txn.prepare_producer_id_rotation(new_pid, txn_timeout_ms, self.now_ms(),
                                                           expected)
                return self._append_init(txn, transit)
            return self._next_producer_id().addCallbacks(rotate, _init_failed)
        transit = txn.prepare_increment_producer_epoch(
            txn_timeout_ms, expected_epoch if expected else None, now)
        if transit is None:
            return defer.succeed(InitProducerIdResult(errors.PRODUCER_FENCED))
        return self._append_init(txn, transit)

    def _append_init(self, txn, transit):
        d = self._append_transit(txn, transit)
        return d.addCallback(lambda code: InitProducerIdResult(
            code, txn.producer_id if code == errors.NONE else -1,
            txn.producer_epoch if code == errors.NONE else -1))

    # -- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------
    def _check_producer(self, txn, producer_id, producer_epoch):
        if txn is None:
            return errors.INVALID_PRODUCER_ID_MAPPING
        if txn.producer_id != producer_id:
            return errors.INVALID_PRODUCER_ID_MAPPING
        if txn.producer_epoch != producer_epoch:
            return errors.PRODUCER_FENCED
        if txn.pending_state is not None:
            return errors.CONCURRENT_TRANSACTIONS
        if txn.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return errors.CONCURRENT_TRANSACTIONS
        if txn.state in (DEAD, PREPARE_EPOCH_FENCE):
            return errors.INVALID_TXN_STATE
        return None

    def handle_add_partitions(self, transactional_id, producer_id, producer_epoch, partitions):
        """A Deferred of an error code for all of ``partitions`` [(topic, partition)]."""
        error = self._coordinator_error(transactional_id)
        if error is not None:
            return defer.succeed(error)
        txn = self.transactions.get(transactional_id)
        error = self._check_producer(txn, producer_id, producer_epoch)
        if error is not None:
            return defer.succeed(error)
        partitions = set(partitions)
        if txn.state == ONGOING and partitions <= txn.partitions:
            return defer.succeed(errors.NONE)
        return self._append_transit(txn, txn.prepare_add_partitions(partitions, self.now_ms()))

    def handle_verify_partitions(self, transactional_id, producer_id, producer_epoch, partitions):
        """AddPartitionsToTxn v4+ ``verify_only``: {(topic, partition): error}; a partition is
        verified when the ongoing transaction of this producer holds it (KIP-890 part 1)."""
        if not self._state_topic_exists():
            return {tp: errors.INVALID_PRODUCER_ID_MAPPING for tp in partitions}  # no txn yet
        error = self._coordinator_error(transactional_id)
        if error is None:
            txn = self.transactions.get(transactional_id)
            if txn is None or txn.producer_id != producer_id:
                error = errors.INVALID_PRODUCER_ID_MAPPING
            elif txn.producer_epoch != producer_epoch:
                error = errors.PRODUCER_FENCED
        if error is not None:
            return {tp: error for tp in partitions}
        ongoing = txn.state == ONGOING
        return {tp: errors.NONE if ongoing and tp in txn.partitions else errors.INVALID_TXN_STATE
                for tp in partitions}

    def verify_partitions(self, transactional_id, producer_id, producer_epoch, partitions):
        """:meth:`handle_verify_partitions` asked of whichever broker coordinates
        ``transactional_id`` (Kafka's AddPartitionsToTxnManager): here when this broker does
        (or on a single node), else with AddPartitionsToTxn v4 to the leader of its
        ``__transaction_state`` partition. {tp: error}, or a Deferred of it when asked remotely
        (NETWORK_EXCEPTION when that broker cannot be reached)."""
        remote = self._remote_coordinator(transactional_id)
        if remote is None:
            return self.handle_verify_partitions(transactional_id, producer_id, producer_epoch,
                                                 partitions)
        return self.verifier.verify(remote, transactional_id, producer_id, producer_epoch,
                                    partitions)

    def _remote_coordinator(self, transactional_id):
        """The id of the other broker leading ``transactional_id``'s state partition, or None
        when it is this one, unknown, or this is a single node (then the local answer holds)."""
        if not self.cluster_mode or self.verifier is None or not self._state_topic_exists():
            return None
        p = self.partition_for(transactional_id)
        if p in self.owned_partitions or p in self.loading_partitions:
            return None
        state = self.metadata.leader_state(TRANSACTION_STATE_TOPIC_NAME, p)
        node_id = getattr(self.replica_manager, "node_id", None)
        if state is None or state[1] is None or state[1] < 0 or state[1] == node_id:
            return None
        return state[1]

    def verify_produce(self, replica_manager, transactional_id, entries, headers):
        """KIP-890 part 1 (``transaction.partition.verification.enable``): the first
        transactional batch of a producer on a partition must belong to its ongoing transaction
        holding that partition, so a late or stray write cannot open a transaction no one will
        end. ``entries``/``headers`` as the produce handler has them; {tp: error} to refuse, or
        a Deferred of it when the coordinator is another broker."""
        from kafkatw.protocol.records import read_batch_header

        to_verify = {}  # (producer id, epoch) -> [tp]
        for tp, buf in entries.items():
            known = headers.get(tp)
            try:
                header = known[0][1] if known else read_batch_header(buf, 0)
            except Exception:
                continue  # malformed: the log's validation answers
            if not header.is_transactional or header.producer_id < 0:
                continue
            # Not loaded: no producer batch landed here since start, so this is the first one
            # of its transaction here (nothing is loaded for the check: a rebuild may be long).
            ps = replica_manager.loaded_producer_state(*tp)
            entry = ps.last_entry(header.producer_id) if ps is not None else None
            if entry is not None and entry.current_txn_first_offset >= 0 \
                    and entry.producer_epoch == header.producer_epoch:
                continue  # verified when its transaction started here
            to_verify.setdefault((header.producer_id, header.producer_epoch), []).append(tp)
        refused = {}
        waiting = []

        def refuse(codes):
            for tp, code in codes.items():
                if code != errors.NONE:
                    refused[tp] = _produce_verification_error(code)

        for (pid, epoch), tps in to_verify.items():
            codes = self.verify_partitions(transactional_id, pid, epoch, tps)
            if isinstance(codes, defer.Deferred):
                waiting.append(codes.addCallback(refuse))
            else:
                refuse(codes)
        if waiting:
            return defer.gatherResults(waiting).addCallback(lambda _: refused)
        return refused

    def offsets_partition_for(self, group_id):
        if self.group_coordinator is not None:
            return self.group_coordinator.partition_for(group_id)
        from kafkatw.coordinator.group.offsets_log import partition_for

        return partition_for(group_id, 50)

    def handle_add_offsets(self, transactional_id, producer_id, producer_epoch, group_id):
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        if self.group_coordinator is not None:
            code = self.group_coordinator.ensure_offsets_topic()
            if code != errors.NONE:
                return defer.succeed(code)
        tp = (GROUP_METADATA_TOPIC_NAME, self.offsets_partition_for(group_id))
        return self.handle_add_partitions(transactional_id, producer_id, producer_epoch, [tp])

    # -- EndTxn ----------------------------------------------------------------------------
    def handle_end_transaction(self, transactional_id, producer_id, producer_epoch, commit):
        """A Deferred of an error code, fired once the prepare record is written; the markers
        follow (Kafka's handleEndTransaction, isFromClient=true)."""
        if not transactional_id:
            return defer.succeed(errors.INVALID_REQUEST)
        error = self._coordinator_error(transactional_id)
        if error is not None:
            return defer.succeed(error)
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return defer.succeed(errors.INVALID_PRODUCER_ID_MAPPING)
        if txn.producer_epoch != producer_epoch:
            return defer.succeed(errors.PRODUCER_FENCED)
        return self._end_transaction(txn, commit)

    def _end_transaction(self, txn, commit):
        if txn.pending_state is not None and txn.pending_state != PREPARE_EPOCH_FENCE:
            return defer.succeed(errors.CONCURRENT_TRANSACTIONS)
        state = txn.state
        if state == ONGOING:
            target = PREPARE_COMMIT if commit else PREPARE_ABORT
            transit = txn.prepare_abort_or_commit(target, self.now_ms())
            d = self._append_transit(txn, transit)

            def written(code):
                if code == errors.NONE:
                    crash_point("txn.end.after_prepare", txn.transactional_id)
                    self._schedule_markers(txn)
                return code

            return d.addCallback(written)
        if state == COMPLETE_COMMIT:
            return defer.succeed(errors.NONE if commit else errors.INVALID_TXN_STATE)
        if state == COMPLETE_ABORT:
            return defer.succeed(errors.NONE if not commit else errors.INVALID_TXN_STATE)
        if state == PREPARE_COMMIT:
            return defer.succeed(errors.CONCURRENT_TRANSACTIONS if commit else errors.INVALID_TXN_STATE)
        if state == PREPARE_ABORT:
            return defer.succeed(errors.CONCURRENT_TRANSACTIONS if not commit else errors.INVALID_TXN_STATE)
        return defer.succeed(errors.INVALID_TXN_STATE)  # Empty, Dead, PrepareEpochFence

    def _fence_and_abort(self, txn):
        """Bump the epoch in memory and abort the ongoing transaction with it (a new
        InitProducerId for the id, a timeout, or an administrator's abort)."""
        try:
            txn.fence_producer_epoch()
        except IllegalTransitionError:
            return defer.succeed(errors.INVALID_TXN_STATE)
        d = self._end_transaction(txn, False)

        def done(code):
            if code != errors.NONE:
                txn.has_failed_epoch_fence = True
            return code

        return d.addCallback(done)

    # -- markers ---------------------------------------------------------------------------
    def _schedule_markers(self, txn):
        """The markers go out after the EndTxn answer (Kafka's marker channel is asynchronous)."""
        self.clock.callLater(0, self._send_markers, txn)

    def _send_markers(self, txn, partitions=None):
        """Write the markers to ``partitions`` (all of the transaction's by default)."""
        if not self.is_active or txn.state not in (PREPARE_COMMIT, PREPARE_ABORT):
            return
        if self.transactions.get(txn.transactional_id) is not txn:
            return
        commit = txn.state == PREPARE_COMMIT
        if partitions is None:
            partitions = txn.partitions
        partitions = sorted(tp for tp in partitions
                            if self.metadata.contains_partition(tp[0], tp[1]))
        d = self.marker_channel.send_markers(
            txn.producer_id, txn.producer_epoch, self.coordinator_epoch(txn.transactional_id),
            commit, partitions, self.now_ms())
        d.addCallbacks(self._markers_written, self._markers_failed,
                       callbackArgs=(txn,), errbackArgs=(txn, partitions))

    def _markers_failed(self, failure, txn, partitions):
        log.failure("Writing the markers of {tid} failed", failure, tid=txn.transactional_id)
        self.clock.callLater(0.1, self._send_markers, txn, partitions)

    def _markers_written(self, results, txn):
        """Complete the transaction once every marker landed (Kafka's
        TransactionMarkerChannelManager retries a partition's marker until it does, with its
        leader looked up again; a deleted partition needs none). A marker refused for an older
        coordinator or producer epoch means another coordinator took over: this one stops."""
        if not self.is_active or self.transactions.get(txn.transactional_id) is not txn \
                or txn.state not in (PREPARE_COMMIT, PREPARE_ABORT):
            return
        fenced = [tp for tp, code in results.items()
                  if code in (errors.TRANSACTION_COORDINATOR_FENCED, errors.INVALID_PRODUCER_EPOCH)]
        if fenced:
            log.warn("Markers of {tid} refused at {tps}: the coordinator or producer epoch moved "
                     "on; no longer completing it here", tid=txn.transactional_id, tps=fenced)
            return
        retry = [tp for tp, code in results.items()
                 if code != errors.NONE and not (code == errors.UNKNOWN_TOPIC_OR_PARTITION
                                                 and not self._marker_partition_known(tp))]
        if retry:
            self.clock.callLater(0.1, self._send_markers, txn, retry)
            return
        if txn.pending_state is not None:
            self.clock.callLater(0.01, self._markers_written, {}, txn)
            return
        transit = txn.prepare_complete(self.now_ms())
        self._append_transit(txn, transit)

    def _marker_partition_known(self, tp):
        """Whether an UNKNOWN_TOPIC_OR_PARTITION answer is worth a retry: in a cluster the
        leader's metadata may lag ours while the partition exists; on one node it is gone."""
        return self.cluster_mode and self.metadata.contains_partition(*tp)

    # -- timeouts and expiry ---------------------------------------------------------------
    def abort_timed_out_transactions(self):
        """Abort every ongoing transaction older than its timeout, fencing its producer."""
        if not self.is_active:
            return
        now = self.now_ms()
        for txn in list(self.transactions.values()):
            if txn.state == ONGOING and txn.pending_state is None and \
                    txn.txn_start_timestamp + txn.txn_timeout_ms < now:
                p = self.partition_for(txn.transactional_id)
                if p not in self.owned_partitions or p in self.loading_partitions:
                    continue
                log.info("Aborting {tid} (producer {pid}): transaction timed out after "
                         "{ms} ms", tid=txn.transactional_id, pid=txn.producer_id,
                         ms=txn.txn_timeout_ms)
                self._fence_and_abort(txn)

    def remove_expired_transactional_ids(self):
        """Write tombstones for ids idle past transactional.id.expiration.ms with no open
        transaction (Kafka's removeExpiredTransactionalIds)."""
        if not self.is_active:
            return
        now = self.now_ms()
        for txn in list(self.transactions.values()):
            if txn.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT) and txn.pending_state is None \
                    and txn.txn_last_update_timestamp + self.id_expiration_ms <= now:
                transit = txn.prepare_dead(now)
                d = self._append_record(txn.transactional_id, None)

                def written(code, txn=txn, transit=transit):
                    if code == errors.NONE:
                        txn.complete_transition(transit)
                        if self.transactions.get(txn.transactional_id) is txn:
                            del self.transactions[txn.transactional_id]
                    else:
                        txn.abort_transition()

                d.addCallback(written)

    # -- administration --------------------------------------------------------------------
    def handle_describe_transactions(self, transactional_id):
        """(error, TransactionMetadata or None)."""
        error = self._coordinator_error(transactional_id)
        if error is not None:
            return error, None
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.state == DEAD:
            return errors.TRANSACTIONAL_ID_NOT_FOUND, None
        return errors.NONE, txn

    def handle_list_transactions(self, state_filters=(), producer_id_filters=(), duration_filter=-1):
        """(error, unknown state filters, [TransactionMetadata]) as Kafka's
        listTransactionStates: nothing while a partition loads; a duration filter keeps those
        whose transaction started more than that long ago (measured from the start timestamp,
        -1 when none, whatever the state)."""
        if not self.is_active:
            return errors.COORDINATOR_NOT_AVAILABLE, [], []
        if self.is_loading():
            return errors.COORDINATOR_LOAD_IN_PROGRESS, [], []
        unknown = [s for s in state_filters or () if s not in STATE_IDS]
        states = set(s for s in state_filters or () if s in STATE_IDS)
        pids = set(producer_id_filters or ())
        now = self.now_ms()
        out = []
        for txn in self.transactions.values():
            if txn.state == DEAD:
                continue
            if pids and txn.producer_id not in pids:
                continue
            if state_filters and txn.state not in states:
                continue
            if duration_filter is not None and duration_filter >= 0 \
                    and now - txn.txn_start_timestamp <= duration_filter:
                continue
            out.append(txn)
        return errors.NONE, unknown, out

    # -- persistence -----------------------------------------------------------------------
    def _append_transit(self, txn, transit):
        """Write ``transit`` and apply it once written; a Deferred of an error code
        (NOT_COORDINATOR when this broker resigned the id's partition meanwhile)."""
        d = self._append_record(txn.transactional_id, transit)

        def written(code):
            if code == errors.NONE and self.transactions.get(txn.transactional_id) is not txn:
                code = errors.NOT_COORDINATOR  # unloaded (and maybe loaded afresh) meanwhile
            if code == errors.NONE:
                txn.complete_transition(transit)
            else:
                txn.abort_transition()
            return code

        return d.addCallback(written)

    def _append_record(self, transactional_id, transit):
        tp = (TRANSACTION_STATE_TOPIC_NAME, self.partition_for(transactional_id))
        batch = bytearray(txn_log.build_record_batch(transactional_id, transit, self.now_ms()))
        # acks=all (Kafka's TransactionLog.EnforcedRequiredAcks), waiting up to request.timeout.ms
        return append_coordinator_batch(self.replica_manager, tp, batch,
                                        timeout_ms=self.request_timeout_ms, origin=ORIGIN_COORDINATOR)
