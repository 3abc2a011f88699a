"""One transactional id's state (Kafka's TransactionMetadata, TxnTransitMetadata and
TransactionState): the states and which may follow which, producer id/epoch bumps, and the
prepare/complete split (a transition is prepared, written to ``__transaction_state``, and applied
only when the write succeeded). No timers, I/O or request handling live here.
"""

import attr

EMPTY = "Empty"
ONGOING = "Ongoing"
PREPARE_COMMIT = "PrepareCommit"
PREPARE_ABORT = "PrepareAbort"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"
DEAD = "Dead"
PREPARE_EPOCH_FENCE = "PrepareEpochFence"

# The int8 of TransactionLogValue.transaction_status (Kafka's TransactionState.id).
STATE_IDS = {EMPTY: 0, ONGOING: 1, PREPARE_COMMIT: 2, PREPARE_ABORT: 3, COMPLETE_COMMIT: 4,
             COMPLETE_ABORT: 5, DEAD: 6, PREPARE_EPOCH_FENCE: 7}
STATES_BY_ID = {v: k for k, v in STATE_IDS.items()}

VALID_PREVIOUS = {
    EMPTY: {EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
    ONGOING: {ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
    PREPARE_COMMIT: {ONGOING},
    PREPARE_ABORT: {ONGOING, PREPARE_EPOCH_FENCE},
    COMPLETE_COMMIT: {PREPARE_COMMIT},
    COMPLETE_ABORT: {PREPARE_ABORT},
    DEAD: {EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
    PREPARE_EPOCH_FENCE: {ONGOING},
}

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767


class IllegalTransitionError(Exception):
    pass


@attr.s(slots=True, frozen=True)
class TxnTransitMetadata:
    """What a transition will make of the metadata, and what is written to the log."""

    producer_id = attr.ib()
    last_producer_id = attr.ib()
    producer_epoch = attr.ib()
    last_producer_epoch = attr.ib()
    txn_timeout_ms = attr.ib()
    state = attr.ib()
    partitions = attr.ib()  # frozenset of (topic, partition)
    txn_start_timestamp = attr.ib()
    txn_last_update_timestamp = attr.ib()


class TransactionMetadata:
    def __init__(self, transactional_id, producer_id, last_producer_id=NO_PRODUCER_ID,
                 producer_epoch=NO_PRODUCER_EPOCH, last_producer_epoch=NO_PRODUCER_EPOCH,
                 txn_timeout_ms=60000, state=EMPTY, partitions=(), txn_start_timestamp=-1,
                 txn_last_update_timestamp=-1):
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.last_producer_id = last_producer_id
        self.producer_epoch = producer_epoch
        self.last_producer_epoch = last_producer_epoch
        self.txn_timeout_ms = txn_timeout_ms
        self.state = state
        self.partitions = set(partitions)
        self.txn_start_timestamp = txn_start_timestamp
        self.txn_last_update_timestamp = txn_last_update_timestamp
        self.pending_state = None
        self.has_failed_epoch_fence = False

    def __repr__(self):
        return ("TransactionMetadata(%s, pid=%d, epoch=%d, state=%s, partitions=%s)"
                % (self.transactional_id, self.producer_id, self.producer_epoch, self.state,
                   sorted(self.partitions)))

    # -- checks ----------------------------------------------------------------------------
    @property
    def is_producer_epoch_exhausted(self):
        return self.producer_epoch >= MAX_EPOCH - 1

    def is_valid_producer_id(self, producer_id, producer_epoch):
        """Whether a KIP-360 InitProducerId naming ``producer_id`` may go on (Kafka's
        isValidProducerId): the metadata was just made, the id is the current one (its epoch
        is checked by the bump), or it is the previous id whose epoch was exhausted (a retry
        of the rotation)."""
        return (self.producer_epoch == NO_PRODUCER_EPOCH or producer_id == self.producer_id
                or (producer_id == self.last_producer_id and producer_epoch >= MAX_EPOCH - 1))

    # -- prepare ---------------------------------------------------------------------------
    def _transit(self, state, producer_id=None, last_producer_id=None, producer_epoch=None,
                 last_producer_epoch=None, txn_timeout_ms=None, partitions=None,
                 txn_start_timestamp=None, now_ms=-1):
        if self.pending_state is not None:
            raise IllegalTransitionError("%s has pending state %s" % (self.transactional_id,
                                                                      self.pending_state))
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransitionError("%s cannot go from %s to %s"
                                         % (self.transactional_id, self.state, state))
        self.pending_state = state
        return TxnTransitMetadata(
            self.producer_id if producer_id is None else producer_id,
            self.last_producer_id if last_producer_id is None else last_producer_id,
            self.producer_epoch if producer_epoch is None else producer_epoch,
            self.last_producer_epoch if last_producer_epoch is None else last_producer_epoch,
            self.txn_timeout_ms if txn_timeout_ms is None else txn_timeout_ms,
            state,
            frozenset(self.partitions if partitions is None else partitions),
            self.txn_start_timestamp if txn_start_timestamp is None else txn_start_timestamp,
            now_ms)

    def prepare_increment_producer_epoch(self, txn_timeout_ms, expected_epoch, now_ms):
        """Empty with the epoch bumped (Kafka's prepareIncrementProducerEpoch); None when the
        expected epoch is fenced. A fresh producer (no expected epoch) forgets the last epoch,
        so a fenced one cannot pass for a retry; the current epoch (a producer going on after
        an error) bumps and remembers it; the last one is a retry and keeps the current."""
        bumped = 0 if self.producer_epoch == NO_PRODUCER_EPOCH else self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._transit(EMPTY, producer_epoch=epoch, last_producer_epoch=last,
                             txn_timeout_ms=txn_timeout_ms, partitions=(),
                             txn_start_timestamp=-1, now_ms=now_ms)

    def prepare_producer_id_rotation(self, new_producer_id, txn_timeout_ms, now_ms,
                                     record_last_epoch=False):
        """Empty with a fresh producer id at epoch 0 (the epoch is exhausted); a KIP-360
        caller's exhausted epoch is remembered so its retry is recognised."""
        last = self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
        return self._transit(EMPTY, producer_id=new_producer_id,
                             last_producer_id=self.producer_id, producer_epoch=0,
                             last_producer_epoch=last, txn_timeout_ms=txn_timeout_ms,
                             partitions=(), txn_start_timestamp=-1, now_ms=now_ms)

    def prepare_add_partitions(self, partitions, now_ms):
        start = now_ms if self.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT) \
            else self.txn_start_timestamp
        return self._transit(ONGOING, partitions=self.partitions | set(partitions),
                             txn_start_timestamp=start, now_ms=now_ms)

    def prepare_abort_or_commit(self, state, now_ms):
        return self._transit(state, now_ms=now_ms)

    def prepare_complete(self, now_ms):
        state = COMPLETE_COMMIT if self.state == PREPARE_COMMIT else COMPLETE_ABORT
        return self._transit(state, partitions=(), now_ms=now_ms)

    def prepare_dead(self, now_ms):
        return self._transit(DEAD, partitions=(), now_ms=now_ms)

    def fence_producer_epoch(self):
        """Bump the epoch in memory before aborting an ongoing transaction the client did not
        end (a new InitProducerId, or its timeout): markers carry the new epoch and fence the
        old producer everywhere (Kafka's prepareFenceProducerEpoch; never written itself)."""
        if self.producer_epoch >= MAX_EPOCH:
            raise IllegalTransitionError("cannot fence %s: epoch exhausted" % self.transactional_id)
        if not self.has_failed_epoch_fence:
            self.last_producer_epoch = NO_PRODUCER_EPOCH  # the fenced epoch is no retry
            self.producer_epoch += 1
        self.has_failed_epoch_fence = False

    # -- complete --------------------------------------------------------------------------
    def complete_transition(self, transit):
        if self.pending_state != transit.state:
            raise IllegalTransitionError("%s: completing %s while pending %s"
                                         % (self.transactional_id, transit.state, self.pending_state))
        self.producer_id = transit.producer_id
        self.last_producer_id = transit.last_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.state = transit.state
        self.partitions = set(transit.partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.pending_state = None

    def abort_transition(self):
        self.pending_state = None
