"""Leader elections that are asked for rather than forced by a failure: ElectLeaders (preferred
or unclean, Kafka's onReplicaElection) and the periodic auto leader rebalance
(checkAndTriggerAutoLeaderRebalance). Elections after broker failures stay in controller.py.

The choices are pure functions; ``ReplicaElections`` is mixed into KafkaController so they run
in its event queue and write through the same epoch-fenced store calls as every election.
"""

import attr
from twisted.internet import defer
from twisted.logger import Logger

from kafkatw.cluster.state import NO_LEADER
from kafkatw.controller import election
from kafkatw.protocol import errors

log = Logger(namespace="kafkatw.controller")

#: seconds from becoming controller to the first auto leader rebalance check (Kafka's 5)
FIRST_REBALANCE_DELAY_S = 5

#: ElectLeadersRequest's ElectionType (KIP-460)
PREFERRED = 0
UNCLEAN = 1

_STRATEGY = {PREFERRED: "PreferredReplicaPartitionLeaderElectionStrategy",
             UNCLEAN: "OfflinePartitionLeaderElectionStrategy(true)"}
_FAILED = {PREFERRED: errors.PREFERRED_LEADER_NOT_AVAILABLE, UNCLEAN: errors.ELIGIBLE_LEADERS_NOT_AVAILABLE}


def preferred_leader(assignment, isr, live):
    """PreferredReplicaPartitionLeaderElection: the first assigned replica if it is alive and in
    the ISR, else None."""
    if assignment and assignment[0] in live and assignment[0] in isr:
        return assignment[0]
    return None


def election_needed(election_type, assignment, leader, live):
    """Preferred: the first replica does not lead; unclean: nobody alive leads."""
    if election_type == PREFERRED:
        return leader != assignment[0]
    return leader == NO_LEADER or leader not in live


def imbalanced_partitions(assignments, leaders, percentage):
    """checkAndTriggerAutoLeaderRebalance's choice: ``assignments`` {tp: replicas}, ``leaders``
    {tp: leader}; partitions grouped by their preferred replica, and for every broker whose share
    of those led by another exceeds ``percentage`` %, those partitions (sorted)."""
    by_preferred = {}
    for tp, replicas in assignments.items():
        if replicas and tp in leaders:
            by_preferred.setdefault(replicas[0], []).append(tp)
    out = []
    for broker, partitions in by_preferred.items():
        elsewhere = [tp for tp in partitions if leaders[tp] != broker]
        if len(elsewhere) / len(partitions) > percentage / 100.0:
            out += elsewhere
    return sorted(out)


class ReplicaElections:
    """Mixed into KafkaController (uses its event queue, context and store writes)."""

    #: (interval seconds, percentage) while auto.leader.rebalance.enable; the pending check
    _rebalance = None
    _rebalance_call = None

    # -- ElectLeaders ----------------------------------------------------------------------------

    def elect_leaders(self, partitions, election_type):
        """ElectLeaders on the controller: ``partitions`` [(topic, partition)] or None for every
        partition; a Deferred of ``{(topic, partition): (error code, message, leader or None)}``
        where a leader is named for each partition whose election was written; None when not
        the controller and every partition was asked for."""
        return self._enqueue("ReplicaLeaderElection", self._replica_election, partitions, election_type)

    @defer.inlineCallbacks
    def _replica_election(self, partitions, election_type):
        if not self.active:  # every partition asked for: no per-partition answer can say it
            return None if partitions is None else {tp: (errors.NOT_CONTROLLER, None, None) for tp in partitions}
        live = set(self.live) - self.shutting_down
        if partitions is None:
            partitions = self._all_partitions()
        results, electable = {}, []
        for tp in dict.fromkeys(partitions):
            if tp not in self.states or tp[1] not in self.assignments.get(tp[0], {}):
                results[tp] = (errors.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.", None)
            elif tp[0] in self.deleting:
                results[tp] = (errors.INVALID_TOPIC_EXCEPTION, "The topic is being deleted", None)
            elif election_needed(election_type, self._replicas(tp), self.states[tp].leader, live):
                electable.append(tp)
            else:
                results[tp] = (errors.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.",
                               None)
        elected = yield self._elect_replicas(electable, election_type, "AdminClientTriggered")
        results.update(elected)
        return {tp: results[tp] for tp in dict.fromkeys(partitions)}  # in the order asked

    @defer.inlineCallbacks
    def _elect_replicas(self, partitions, election_type, trigger):
        """onReplicaElection: the new states written together per topic (conditional on the
        controller epoch), then LeaderAndIsr and UpdateMetadata; the result per partition."""
        live = set(self.live) - self.shutting_down
        results, updates = {}, {}
        for tp in partitions:
            state, replicas = self.states[tp], self._replicas(tp)
            online = live - self._offline_replicas_of(tp)  # isReplicaOnline: no failed log dir either
            if election_type == PREFERRED:
                leader = preferred_leader(replicas, state.isr, online)
                new = None if leader is None else state.new_leader_and_isr(leader, state.isr)
            else:
                new = election.elect(state, replicas, online, True, self.epoch)
            if new is None:
                results[tp] = (_FAILED[election_type], "Failed to elect leader for partition %s-%d under strategy %s"
                               % (tp[0], tp[1], _STRATEGY[election_type]), None)
                continue
            updates.setdefault(tp[0], {})[tp[1]] = attr.evolve(new, controller_epoch=self.epoch)
        changed = []
        for topic, states in updates.items():
            written = yield self.zk.update_partition_states(self.epoch_zk_version, topic, states)
            done = self._apply(topic, written)
            changed += done
            for p, outcome in written.items():
                results[(topic, p)] = ((errors.NONE, None, outcome.leader) if (topic, p) in done
                                       else (errors.UNKNOWN_SERVER_ERROR, outcome.getErrorMessage(), None))
        if changed:
            log.info("controller {id}: {trigger} {kind} election moved the leaders of {tps}", id=self.broker_id,
                     trigger=trigger, kind="preferred" if election_type == PREFERRED else "unclean",
                     tps=", ".join("%s-%d:%d" % (t, p, self.states[(t, p)].leader) for t, p in changed))
            self._tell(changed)
        return results

    # -- auto.leader.rebalance.enable ------------------------------------------------------------

    def start_leader_rebalance(self, interval_s, percentage):
        """Kafka's auto leader rebalance task: the first check FIRST_REBALANCE_DELAY_S after
        this broker becomes controller (now, if it is already), the next
        ``leader.imbalance.check.interval.seconds`` after each check ends; none while it is
        not the controller. A check is an event in the queue."""
        self._rebalance = (interval_s, percentage)
        if self.active:
            self._schedule_rebalance(FIRST_REBALANCE_DELAY_S)

    def stop_leader_rebalance(self):
        self._rebalance = None
        self._cancel_rebalance()

    def _schedule_rebalance(self, delay_s):
        """(Re)arm the one pending check (Kafka's scheduleAutoLeaderRebalanceTask)."""
        self._cancel_rebalance()
        if self._rebalance is not None and not self._stopped:
            self._rebalance_call = self._reactor.callLater(delay_s, self._rebalance_due)

    def _cancel_rebalance(self):
        if self._rebalance_call is not None and self._rebalance_call.active():
            self._rebalance_call.cancel()
        self._rebalance_call = None

    def _rebalance_due(self):
        self._rebalance_call = None
        if self._rebalance is None:
            return
        percentage = self._rebalance[1]

        @defer.inlineCallbacks
        def check():
            if not self.active:
                return {}
            try:
                return (yield self._auto_rebalance(percentage))
            finally:
                if self.active and self._rebalance is not None:
                    self._schedule_rebalance(self._rebalance[0])
        self._enqueue("AutoPreferredReplicaLeaderElection", check).addErrback(lambda f: None)  # logged there

    def auto_rebalance(self, percentage):
        return self._enqueue("AutoPreferredReplicaLeaderElection", self._auto_rebalance, percentage)

    @defer.inlineCallbacks
    def _auto_rebalance(self, percentage):
        """Brokers leading too few of the partitions they are preferred for get them back where
        they are alive and in the ISR (canPreferredReplicaBeLeader); topics being deleted and
        partitions being reassigned wait (as Kafka's checkAndTriggerAutoLeaderRebalance)."""
        if not self.active:
            return {}
        live = set(self.live) - self.shutting_down
        moving = self.reassignments.ongoing
        assignments = {tp: self._replicas(tp) for tp in self._all_partitions()
                       if tp[0] not in self.deleting and tp not in moving}
        leaders = {tp: self.states[tp].leader for tp in assignments}
        candidates = [tp for tp in imbalanced_partitions(assignments, leaders, percentage)
                      if preferred_leader(assignments[tp], self.states[tp].isr,
                                          live - self._offline_replicas_of(tp)) is not None]
        if not candidates:
            return {}
        return (yield self._elect_replicas(candidates, PREFERRED, "AutoTriggered"))
