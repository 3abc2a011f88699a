"""Partition reassignment in the controller (KIP-455, Kafka's KafkaController
onPartitionReassignment in ZooKeeper mode): RS = ORS + TRS with the adding and removing replicas
kept in the topic znode, the new replicas started, completion once the ISR holds every target
replica, cancellation back to ORS, resumption after a controller failover, and the legacy
``/admin/reassign_partitions`` znode.

It runs inside the controller's event queue and changes the controller's context; how leaders
are elected elsewhere and how brokers apply LeaderAndIsr/StopReplica is not its business.
"""

import attr
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from kafkatw.cluster.interfaces import ControllerMovedError
from kafkatw.controller.channel import STOP_REPLICA_VERSION, stop_replica_request
from kafkatw.protocol import errors

log = Logger(namespace="kafkatw.controller.reassignment")


def _distinct(replicas):
    seen = []
    for r in replicas:
        if r not in seen:
            seen.append(r)
    return seen


@attr.s(frozen=True, slots=True)
class ReplicaAssignment:
    """Kafka's ReplicaAssignment: the full replica set RS and, while a reassignment runs, the
    replicas being added (AR) and removed (RR)."""

    replicas = attr.ib(converter=tuple)
    adding = attr.ib(converter=tuple, default=())
    removing = attr.ib(converter=tuple, default=())

    @property
    def origin(self):
        """ORS: what the partition had before the reassignment."""
        return [r for r in self.replicas if r not in self.adding]

    @property
    def target(self):
        """TRS: what it will have after."""
        return [r for r in self.replicas if r not in self.removing]

    @property
    def is_being_reassigned(self):
        return bool(self.adding or self.removing)

    def reassign_to(self, target):
        """A reassignment (or, for a running one, a new one or its cancellation) to ``target``:
        RS = (TRS + ORS) distinct, AR = RS - ORS, RR = ORS - TRS."""
        origin = self.origin
        full = _distinct(list(target) + origin)
        return ReplicaAssignment(full, [r for r in full if r not in origin],
                                 [r for r in origin if r not in target])


def validate_target(replicas, live):
    """Kafka's validateReplicas: None or ``(error code, message)``."""
    if not replicas:
        return errors.INVALID_REPLICA_ASSIGNMENT, "Empty replica list specified in partition reassignment."
    if len(set(replicas)) != len(replicas):
        return (errors.INVALID_REPLICA_ASSIGNMENT,
                "Duplicate replica ids in partition reassignment replica list: %s" % list(replicas))
    if any(r < 0 for r in replicas):
        return (errors.INVALID_REPLICA_ASSIGNMENT,
                "Invalid broker id in replica list: %s" % list(replicas))
    if not set(replicas) <= set(live):
        return (errors.INVALID_REPLICA_ASSIGNMENT,
                "Replica assignment has brokers that are not alive. Replica list: %s, live broker list: %s"
                % (list(replicas), sorted(live)))
    return None


class PartitionReassignments:
    """The controller's reassignments: ``ongoing`` maps ``(topic, partition)`` to the
    ReplicaAssignment of each partition being reassigned. Every method runs in the
    controller's event queue."""

    def __init__(self, controller):
        self.ctl = controller
        self.ongoing = {}
        self._legacy = {}  # (topic, partition) -> target asked for in /admin/reassign_partitions

    def clear(self):
        self.ongoing.clear()
        self._legacy.clear()

    def loaded(self, topic, adding, removing):
        """A topic's znode as read at failover (or a topic change): its partitions being
        reassigned."""
        assignment = self.ctl.assignments.get(topic, {})
        for p in set(adding) | set(removing):
            if p in assignment:
                self.ongoing[(topic, p)] = ReplicaAssignment(assignment[p], adding.get(p, ()),
                                                             removing.get(p, ()))

    def forget_topic(self, topic):
        """A deleted topic's reassignments end with it."""
        for tp in [tp for tp in self.ongoing if tp[0] == topic]:
            del self.ongoing[tp]
        for tp in [tp for tp in self._legacy if tp[0] == topic]:
            del self._legacy[tp]

    def current(self, tp):
        found = self.ongoing.get(tp)
        return found if found is not None else ReplicaAssignment(self.ctl._replicas(tp))

    # -- the APIs ------------------------------------------------------------------------------

    @defer.inlineCallbacks
    def alter(self, targets):
        """``targets``: ``{(topic, partition): [replicas] or None (cancel)}``; a dict of
        ``{tp: (error code, message or None)}`` once each reassignment is started (Kafka
        answers then, not at completion)."""
        ctl = self.ctl
        results = {}
        started = {}
        for tp, target in targets.items():
            topic, p = tp
            if topic not in ctl.assignments or p not in ctl.assignments[topic] or topic in ctl.deleting:
                results[tp] = (errors.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                continue
            if target is not None:
                problem = validate_target(list(target), ctl.live)
                if problem is not None:
                    results[tp] = problem
                    continue
            current = self.current(tp)
            if current.is_being_reassigned:
                new = current.reassign_to(list(target) if target is not None else current.origin)
            elif target is None:
                results[tp] = (errors.NO_REASSIGNMENT_IN_PROGRESS,
                               "No reassignment in progress for partition %s-%d" % tp)
                continue
            else:
                new = current.reassign_to(list(target))
            started[tp] = new
        for tp, new in started.items():
            try:
                yield self._on_reassignment(tp, new)
                results[tp] = (errors.NONE, None)
            except ControllerMovedError:
                raise
            except Exception as e:
                log.failure("reassignment of {t}-{p} failed", Failure(), t=tp[0], p=tp[1])
                results[tp] = (errors.UNKNOWN_SERVER_ERROR, str(e))
        return results

    def list(self, wanted=None):
        """``{tp: ReplicaAssignment}`` of the ongoing reassignments (of ``wanted`` tps if given)."""
        if wanted is None:
            return dict(self.ongoing)
        return {tp: self.ongoing[tp] for tp in wanted if tp in self.ongoing}

    # -- the steps -----------------------------------------------------------------------------

    @defer.inlineCallbacks
    def _on_reassignment(self, tp, new):
        """onPartitionReassignment: persist RS/AR/RR, stop replicas a changed reassignment no
        longer needs, then start the new replicas or, when the ISR already holds TRS, finish."""
        ctl = self.ctl
        current = self.current(tp)
        if current != new:
            log.info("reassigning {t}-{p}: {cur} -> {new} (adding {a}, removing {r})", t=tp[0], p=tp[1],
                     cur=list(current.replicas), new=list(new.target), a=list(new.adding), r=list(new.removing))
            yield self._set_assignment(tp, new)
            unneeded = [r for r in current.replicas if r not in new.replicas]
            if unneeded:
                yield self._stop_removed(tp, unneeded)
        if not self._complete(tp, new):
            state = ctl.states.get(tp)
            if state is not None:
                # A1: every replica of RS learns the new set (the leader's ISR expansion needs it);
                # A2: the adding replicas create their logs and start fetching
                yield self._write_state(tp, attr.evolve(state.new_leader_and_isr(state.leader, state.isr),
                                                        controller_epoch=ctl.epoch))
                ctl._tell([tp])
        else:
            yield self._finish(tp, new)

    def _complete(self, tp, assignment):
        state = self.ctl.states.get(tp)
        return state is not None and set(assignment.target) <= set(state.isr)

    @defer.inlineCallbacks
    def _set_assignment(self, tp, new):
        """The topic znode, then the context: RS for the partition, AR/RR if still reassigning."""
        ctl = self.ctl
        topic, p = tp
        assignment = dict(ctl.assignments[topic])
        assignment[p] = list(new.replicas)
        ongoing = dict(self.ongoing)
        if new.is_being_reassigned:
            ongoing[tp] = new
        else:
            ongoing.pop(tp, None)
        adding = {q: list(a.adding) for (t, q), a in ongoing.items() if t == topic}
        removing = {q: list(a.removing) for (t, q), a in ongoing.items() if t == topic}
        yield ctl.zk.set_topic_assignment(ctl.epoch_zk_version, topic, ctl.topic_ids.get(topic), assignment,
                                          adding, removing)
        ctl.assignments[topic] = assignment
        self.ongoing = ongoing

    @defer.inlineCallbacks
    def _write_state(self, tp, state):
        ctl = self.ctl
        results = yield ctl.zk.update_partition_states(ctl.epoch_zk_version, tp[0], {tp[1]: state})
        written = ctl._apply(tp[0], results)
        if not written:
            raise RuntimeError("the state of %s-%d could not be written" % tp)

    def _leader_in(self, tp, state, replicas):
        """Kafka's moveReassignedPartitionLeaderIfRequired with ReassignPartitionLeaderElection:
        the current leader if it stays and is online, else the first online replica of
        ``replicas`` in the ISR; None without one. Online is Kafka's isReplicaOnline: a live
        broker, not in a controlled shutdown, and not holding ``tp`` on a failed log dir."""
        ctl = self.ctl
        online = set(ctl.live) - ctl.shutting_down - ctl._offline_replicas_of(tp)
        if state.leader in replicas and state.leader in online:
            return state.leader
        return next((r for r in replicas if r in online and r in state.isr), None)

    @defer.inlineCallbacks
    def _finish(self, tp, reassignment):
        """B1-B8: RS = TRS with a leader in TRS, the removed replicas out of the ISR and
        deleted, the znode (and the legacy request) cleaned, everyone told."""
        ctl = self.ctl
        target = reassignment.target
        state = ctl.states.get(tp)
        if state is None:
            return
        leader = self._leader_in(tp, state, target)
        if leader is None:
            log.warn("reassignment of {t}-{p} waits: no live replica of {target} in ISR {isr}", t=tp[0],
                     p=tp[1], target=target, isr=list(state.isr))
            return
        isr = [r for r in state.isr if r in target] or [leader]
        new_state = attr.evolve(state.new_leader_and_isr(leader, isr), controller_epoch=ctl.epoch)
        yield self._write_state(tp, new_state)
        yield self._set_assignment(tp, ReplicaAssignment(target))
        ctl._tell([tp])
        removed = [r for r in reassignment.replicas if r not in target]
        self._delete_replicas(tp, removed)
        if tp in self._legacy:
            del self._legacy[tp]
            yield ctl.zk.set_reassign_partitions(ctl.epoch_zk_version, self._legacy)
        log.info("reassignment of {t}-{p} to {target} completed (leader {l})", t=tp[0], p=tp[1],
                 target=target, l=leader)

    @defer.inlineCallbacks
    def _stop_removed(self, tp, removed):
        """Replicas a changed (or cancelled) reassignment no longer wants: out of the ISR (a
        new leader if one of them led), then deleted."""
        ctl = self.ctl
        state = ctl.states.get(tp)
        replicas = ctl._replicas(tp)
        if state is not None:
            isr = [r for r in state.isr if r not in removed]
            leader = self._leader_in(tp, state, replicas) if state.leader in removed else state.leader
            if leader is not None and (isr != list(state.isr) or leader != state.leader):
                new_state = attr.evolve(state.new_leader_and_isr(leader, isr or [leader]),
                                        controller_epoch=ctl.epoch)
                yield self._write_state(tp, new_state)
                ctl._tell([tp])
        self._delete_replicas(tp, removed)

    def _delete_replicas(self, tp, removed):
        """StopReplica with delete to the live brokers of ``removed`` (a dead one keeps its
        stray log until it is deleted by hand, as kafkatw does not track deletions to retry)."""
        ctl = self.ctl
        state = ctl.states.get(tp)
        epoch = state.leader_epoch if state is not None else -2
        for broker_id in removed:
            info = ctl.live.get(broker_id)
            if info is None:
                continue
            request = stop_replica_request(ctl.broker_id, ctl.epoch, info.epoch, [(tp[0], tp[1], epoch, True)])
            ctl._send(broker_id, request, STOP_REPLICA_VERSION, "StopReplica")

    # -- triggers ------------------------------------------------------------------------------

    @defer.inlineCallbacks
    def isr_changed(self, partitions):
        """PartitionReassignmentIsrChange: partitions whose ISR now holds their TRS finish."""
        for tp in partitions:
            reassignment = self.ongoing.get(tp)
            if reassignment is not None and self._complete(tp, reassignment):
                yield self._finish(tp, reassignment)

    @defer.inlineCallbacks
    def resume(self):
        """After a failover: the reassignments found in the topic znodes go on (their new
        replicas are told again), then those asked for in ``/admin/reassign_partitions``."""
        for tp, reassignment in sorted(self.ongoing.items()):
            log.info("resuming the reassignment of {t}-{p} to {target}", t=tp[0], p=tp[1],
                     target=reassignment.target)
            yield self._on_reassignment(tp, reassignment)
        yield self.legacy_changed()

    def legacy_watch(self):
        self.ctl._enqueue("ZkPartitionReassignment", self.legacy_changed)

    @defer.inlineCallbacks
    def legacy_changed(self):
        """``/admin/reassign_partitions`` created or changed: its partitions not already being
        reassigned through the API are reassigned (Kafka ignores the others and so does this)."""
        ctl = self.ctl
        if not ctl.active:
            return
        asked = yield ctl.zk.reassign_partitions(watch=self.legacy_watch)
        fresh = {tp: r for tp, r in asked.items() if tp not in self._legacy and tp not in self.ongoing}
        kept = {tp: r for tp, r in asked.items() if tp in self._legacy or tp not in self.ongoing}
        self._legacy = dict(kept)
        if not fresh:
            if asked and not kept:
                yield ctl.zk.set_reassign_partitions(ctl.epoch_zk_version, {})
            return
        results = yield self.alter(fresh)
        for tp, (code, message) in results.items():
            if code != errors.NONE:
                log.warn("reassignment of {t}-{p} from /admin/reassign_partitions refused: {err}", t=tp[0],
                         p=tp[1], err=message or errors.error_name(code))
                self._legacy.pop(tp, None)
        done = [tp for tp in self._legacy if tp not in self.ongoing]
        for tp in done:
            del self._legacy[tp]
        if done or len(self._legacy) != len(asked):
            yield ctl.zk.set_reassign_partitions(ctl.epoch_zk_version, self._legacy)
