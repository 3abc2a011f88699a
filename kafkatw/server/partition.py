"""Partition: one replicated partition as this broker hosts it (Kafka's Partition.scala): its
role (leader or follower, leader epoch, partition epoch), the ISR with a pending AlterPartition
change, the followers' fetch state, the high watermark rule and the acks=all check. Which
requests to send and when is the replica manager's; files are the log's.
"""

import attr
from twisted.logger import Logger

from kafkatw.protocol import errors

log = Logger()

UNKNOWN_OFFSET = -1
NO_LEADER = -1
NO_EPOCH = -1

#: AlterPartition answers meaning the controller's state moved past ours
_STALE_STATE = frozenset([errors.INVALID_UPDATE_VERSION, errors.FENCED_LEADER_EPOCH,
                          errors.UNKNOWN_TOPIC_OR_PARTITION, errors.UNKNOWN_TOPIC_ID])

#: LeaderRecoveryState of LeaderAndIsr / AlterPartition
RECOVERED = 0
RECOVERING = 1


@attr.s(slots=True)
class Replica:
    """A follower's state as the leader sees it from its fetches (Kafka's Replica)."""

    broker_id = attr.ib()
    log_end_offset = attr.ib(default=UNKNOWN_OFFSET)
    log_start_offset = attr.ib(default=UNKNOWN_OFFSET)
    last_fetch_leader_log_end_offset = attr.ib(default=UNKNOWN_OFFSET)
    last_fetch_time_ms = attr.ib(default=0)
    last_caught_up_time_ms = attr.ib(default=0)

    def update_fetch_state(self, fetch_offset, log_start_offset, leader_end_offset, now_ms):
        """Kafka's Replica.updateFetchStateOrThrow: a fetch at the leader's end makes the
        follower caught up now; one at least at the end seen by its previous fetch makes it
        caught up as of that previous fetch."""
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms,
                                              self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = now_ms

    def reset(self, now_ms, leader_end_offset, in_sync):
        """A new leader epoch: nothing is known of the follower's log; one in the ISR counts as
        caught up now (so it is not shrunk out before its first fetch)."""
        self.log_end_offset = UNKNOWN_OFFSET
        self.log_start_offset = UNKNOWN_OFFSET
        self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET if not in_sync else leader_end_offset
        self.last_fetch_time_ms = now_ms if in_sync else 0
        self.last_caught_up_time_ms = now_ms if in_sync else 0

    def is_caught_up(self, leader_end_offset, now_ms, max_lag_ms):
        return (self.log_end_offset == leader_end_offset
                or now_ms - self.last_caught_up_time_ms <= max_lag_ms)


@attr.s(slots=True, frozen=True)
class PendingIsrChange:
    """An AlterPartition sent and not yet answered: ``isr`` is what was proposed."""

    isr = attr.ib()  # tuple of broker ids
    expanding = attr.ib()  # True: a replica joins; False: replicas leave


class Partition:
    """One partition hosted here. ``clock_ms()`` is the time in ms, ``alter_partition`` an
    ``IAlterPartitionManager`` (None on a single node), ``on_high_watermark(partition)`` is
    called after the HW moves outside an append (a follower's fetch, an ISR change) so the
    replica manager completes what waits on it."""

    def __init__(self, topic, partition, local_broker_id, clock_ms, alter_partition=None,
                 on_high_watermark=None, lag_time_max_ms=30000):
        self.lag_time_max_ms = lag_time_max_ms  # replica.lag.time.max.ms
        self.topic = topic
        self.partition = partition
        self.local_broker_id = local_broker_id
        self.clock_ms = clock_ms
        self.alter_partition = alter_partition
        self.on_high_watermark = on_high_watermark
        self.topic_id = None
        self.log = None
        self.leader_id = NO_LEADER
        self.leader_epoch = NO_EPOCH
        self.partition_epoch = -1
        self.controller_epoch = -1
        self.leader_epoch_start_offset = None
        self.assignment = ()
        self.isr = ()  # committed: what the controller last told us or accepted
        self.pending = None  # PendingIsrChange while an AlterPartition is in flight
        self.leader_recovery_state = RECOVERED
        self.remote_replicas = {}  # broker id -> Replica (leader only)

    def __repr__(self):
        return "Partition(%s-%d, leader=%d, epoch=%d, isr=%s)" % (
            self.topic, self.partition, self.leader_id, self.leader_epoch, list(self.isr))

    @property
    def tp(self):
        return (self.topic, self.partition)

    @property
    def is_leader(self):
        return self.leader_id == self.local_broker_id and self.log is not None

    @property
    def maximal_isr(self):
        """The ISR the HW must wait for: while an expansion is pending, the new member too
        (it may already count at the controller); while a shrink is pending, the old ISR."""
        pending = self.pending
        if pending is not None and pending.expanding:
            return pending.isr
        return self.isr

    @property
    def is_under_min_isr(self):
        return self.log is not None and len(self.isr) < self.log.config.min_insync_replicas

    # -- role changes ----------------------------------------------------------------------

    def _apply_state(self, state):
        self.controller_epoch = state.controller_epoch
        self.assignment = tuple(state.replicas)
        self.isr = tuple(state.isr)
        self.pending = None
        self.partition_epoch = state.partition_epoch
        self.leader_recovery_state = state.leader_recovery_state

    def make_leader(self, state, log_):
        """Become (or stay) the leader of ``state`` (a LeaderAndIsrPartitionState): the new
        epoch starts at our log end (in the epoch cache, so a follower of an older epoch
        learns where it diverges), the followers' states are reset. Returns True if this
        is a new leader epoch."""
        now = self.clock_ms()
        self.log = log_
        is_new_epoch = state.leader_epoch > self.leader_epoch
        self._apply_state(state)
        leo = log_.log_end_offset
        followers = [r for r in self.assignment if r != self.local_broker_id]
        self.remote_replicas = {r: self.remote_replicas.get(r) or Replica(r) for r in followers}
        if is_new_epoch or self.leader_id != self.local_broker_id:
            log_.leader_epoch_cache.assign(state.leader_epoch, leo)
            self.leader_epoch_start_offset = leo
            for r, replica in self.remote_replicas.items():
                replica.reset(now, leo, r in self.isr)
        self.leader_id = self.local_broker_id
        self.leader_epoch = state.leader_epoch
        return is_new_epoch

    def make_follower(self, state, log_):
        """Follow ``state.leader``; returns True if the leader or its epoch changed (the
        fetcher must restart from our log end)."""
        self.log = log_
        changed = state.leader_epoch > self.leader_epoch or state.leader != self.leader_id
        self._apply_state(state)
        self.remote_replicas = {}
        self.leader_epoch_start_offset = None
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        return changed

    # -- leader: followers, ISR, high watermark --------------------------------------------

    def update_follower_fetch_state(self, replica_id, fetch_offset, log_start_offset):
        """A follower fetched at ``fetch_offset``: record it, maybe expand the ISR, maybe move
        the HW (calling ``on_high_watermark``). False if ``replica_id`` is no replica here."""
        replica = self.remote_replicas.get(replica_id)
        if replica is None or not self.is_leader:
            return False
        now = self.clock_ms()
        old_leo = replica.log_end_offset
        replica.update_fetch_state(fetch_offset, log_start_offset, self.log.log_end_offset,
                                   now)
        self.maybe_expand_isr(replica)
        if old_leo != replica.log_end_offset and self.maybe_increment_leader_hw():
            if self.on_high_watermark is not None:
                self.on_high_watermark(self)
        return True

    def maybe_increment_leader_hw(self):
        """Kafka's maybeIncrementLeaderHW: the HW is the least log end of the leader and the
        (maximal) ISR's followers, and of a follower caught up but not yet in the ISR (so the
        HW does not pass a replica about to join); it never moves back, and it stays while
        the ISR is smaller than ``min.insync.replicas``. True if it moved."""
        log_ = self.log
        if log_ is None or not self.is_leader:
            return False
        if self.is_under_min_isr:
            return False
        leo = new_hw = log_.log_end_offset
        maximal = self.maximal_isr
        now = None
        for r, replica in self.remote_replicas.items():
            if replica.log_end_offset >= new_hw:
                continue
            if r not in maximal:
                if now is None:
                    now = self.clock_ms()
                if replica.log_end_offset < 0 or not replica.is_caught_up(
                        leo, now, self.lag_time_max_ms):
                    continue
            new_hw = replica.log_end_offset
        if new_hw < 0:
            return False
        return log_.maybe_increment_high_watermark(new_hw)

    def _isr_eligible(self, replica):
        return (replica.log_end_offset >= self.log.high_watermark
                and self.leader_epoch_start_offset is not None
                and replica.log_end_offset >= self.leader_epoch_start_offset)

    def maybe_expand_isr(self, replica):
        """Kafka's maybeExpandIsr: a follower out of the ISR that reached the HW (and this
        epoch's start) joins it, through AlterPartition."""
        if self.pending is not None or self.alter_partition is None:
            return
        if replica.broker_id in self.isr or replica.broker_id not in self.assignment:
            return
        if not self._isr_eligible(replica):
            return
        self._submit(self.isr + (replica.broker_id,), expanding=True)

    def out_of_sync_replicas(self):
        now = self.clock_ms()
        leo = self.log.log_end_offset
        out = []
        for r in self.isr:
            if r == self.local_broker_id:
                continue
            replica = self.remote_replicas.get(r)
            if replica is None or not replica.is_caught_up(leo, now, self.lag_time_max_ms):
                out.append(r)
        return out

    def maybe_shrink_isr(self):
        """Kafka's maybeShrinkIsr: followers not caught up within ``replica.lag.time.max.ms``
        leave the ISR (never the leader, so never its last member), through AlterPartition."""
        if not self.is_leader or self.pending is not None or self.alter_partition is None:
            return False
        out = self.out_of_sync_replicas()
        if not out:
            return False
        new_isr = tuple(r for r in self.isr if r not in out)
        log.info("shrinking ISR of {tp} from {old} to {new}: {out} not caught up within "
                 "{lag} ms", tp="%s-%d" % self.tp, old=list(self.isr), new=list(new_isr),
                 out=out, lag=self.lag_time_max_ms)
        self._submit(new_isr, expanding=False)
        return True

    def _submit(self, new_isr, expanding):
        proposed = self.pending = PendingIsrChange(tuple(new_isr), expanding)
        epoch = self.leader_epoch
        d = self.alter_partition.submit(self.topic, self.partition, self.topic_id, epoch,
                                        list(new_isr), self.partition_epoch,
                                        self.leader_recovery_state)
        d.addCallbacks(self._isr_updated, self._isr_update_failed,
                       callbackArgs=(proposed, epoch), errbackArgs=(proposed, epoch))

    def _isr_updated(self, result, proposed, epoch):
        """The controller's answer ``result`` (leader, leader_epoch, isr, partition_epoch)."""
        if self.pending is not proposed or self.leader_epoch != epoch:
            return  # a LeaderAndIsr came meanwhile: it is the truth
        if result.leader_epoch != self.leader_epoch or result.partition_epoch < self.partition_epoch:
            self.pending = None
            return
        self.isr = tuple(result.isr)
        self.partition_epoch = result.partition_epoch
        self.pending = None
        log.info("ISR of {tp} is now {isr} (partition epoch {pe})", tp="%s-%d" % self.tp,
                 isr=list(self.isr), pe=self.partition_epoch)
        self.maybe_increment_leader_hw()
        if self.on_high_watermark is not None:
            self.on_high_watermark(self)  # acks=all waiters look at the HW and ISR size again

    def _isr_update_failed(self, failure, proposed, epoch):
        if self.pending is not proposed:
            return
        code = getattr(failure.value, "code", None)
        log.info("AlterPartition of {tp} failed: {err}", tp="%s-%d" % self.tp,
                 err=errors.error_name(code) if code is not None else failure.getErrorMessage())
        if code not in _STALE_STATE:
            self.pending = None  # not applied: the next check proposes again
        # else our state is stale: the pending change stays (no other ISR change is proposed)
        # until a LeaderAndIsr brings the controller's state, as Kafka does

    # -- acks=all --------------------------------------------------------------------------

    def check_enough_replicas_reach_offset(self, required_offset):
        """Kafka's checkEnoughReplicasReachOffset: ``(done, error)`` for acks=all waiting for
        the HW to pass ``required_offset``."""
        if not self.is_leader:
            return True, errors.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark >= required_offset:
            if len(self.isr) >= self.log.config.min_insync_replicas:
                return True, errors.NONE
            return True, errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return False, errors.NONE

    def follower_high_watermark(self, leader_hw):
        """A follower learns the HW from its leader's fetch responses (clamped to its log)."""
        return self.log.update_high_watermark(leader_hw)
