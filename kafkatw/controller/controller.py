"""Kafka's KafkaController in ZooKeeper mode: election through ``/controller`` and
``/controller_epoch``, the controller context (live brokers, assignments, partition states),
partition and replica state changes (new partitions, broker failures and returns, topic
creation and deletion, AlterPartition), and telling the brokers with LeaderAndIsr,
UpdateMetadata and StopReplica.

Every event runs in one queue, in order (Kafka's ControllerEventManager); ZooKeeper watches only
enqueue. Every write to the store is conditional on the controller epoch's zkVersion: a
deposed controller (a paused process, a lost session) cannot change anything.
"""

import copy

import attr
from twisted.internet import defer
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.python.failure import Failure

from kafkatw.cluster.interfaces import ControllerMovedError
from kafkatw.cluster.state import LEADER_DURING_DELETE, NO_LEADER
from kafkatw.controller import election
from kafkatw.controller.reassignment import PartitionReassignments
from kafkatw.controller.channel import (
    LEADER_AND_ISR_VERSION,
    STOP_REPLICA_VERSION,
    UPDATE_METADATA_VERSION,
    leader_and_isr_request,
    stop_replica_request,
    update_metadata_request,
)
from kafkatw.controller.preferred import FIRST_REBALANCE_DELAY_S, ReplicaElections
from kafkatw.protocol import errors
from kafkatw.protocol import messages as m

log = Logger(namespace="kafkatw.controller")

#: seconds before deletions a live broker failed (not for a failed log dir) are asked again
DELETION_RETRY_S = 5.0
#: seconds before an election that failed (not lost to another broker) is tried again
ELECTION_RETRY_S = 1.0
#: seconds before the first new attempt at partition states whose write failed (a lost
#: ZooKeeper reply, a zkVersion that moved): they are read and decided again, the wait
#: doubling up to 2 s
STATE_WRITE_RETRY_S = 0.1


def _together(deferreds):
    """The results of store reads issued together (``zookeeper.max.in.flight.requests`` bounds
    them), in order; the first failure itself, not a FirstError."""
    return defer.gatherResults(deferreds, consumeErrors=True).addErrback(lambda f: f.value.subFailure)


class KafkaController(ReplicaElections):
    """One per broker; active on the elected one. ``zk`` is an IClusterCoordinator, ``channel`` a
    ControllerChannelManager, ``broker_epoch()`` this broker's current registration epoch.
    ElectLeaders and the auto leader rebalance come from ``ReplicaElections`` (preferred.py)."""

    def __init__(self, reactor, zk, broker_id, channel, listener_name, unclean_leader_election=False):
        self._reactor = reactor
        self.zk = zk
        self.broker_id = broker_id
        self.channel = channel
        self.listener_name = listener_name
        self.unclean = unclean_leader_election
        self.active = False
        self.epoch = 0
        self.epoch_zk_version = -1
        self.controller_id = -1  # the active controller as last read
        self.live = {}  # broker id -> BrokerInfo (with its epoch)
        self.assignments = {}  # topic -> {partition: [replicas]}
        self.topic_ids = {}  # topic -> 16-byte id
        self.states = {}  # (topic, partition) -> LeaderAndIsr
        self.deleting = set()
        self.shutting_down = set()  # brokers in a controlled shutdown: never elected
        #: broker id -> {(topic, partition)} of its replicas on a failed log dir (Kafka's
        #: replicasOnOfflineDirs): never elected, listed offline, until the broker registers again
        self.offline_replicas = {}
        self._tail = defer.succeed(None)
        self._stopped = False
        self._topic_watches = {}
        #: the one pending retry round of deletions a live broker failed (a round retries
        #: every marked topic, so one timer, not one per topic per round)
        self._deletion_retry = None
        #: the pending new attempt at an election that failed (cancelled at shutdown)
        self._election_retry = None
        self.reassignments = PartitionReassignments(self)
        #: called with (controller_id) when the known controller changes (tests, metrics)
        self.on_controller_change = []

    # -- the event queue -----------------------------------------------------------------------

    def _enqueue(self, name, fn, *args):
        """Run ``fn`` after every event queued before it; a Deferred of its result."""
        result = defer.Deferred()

        def run(_):
            if self._stopped:
                result.callback(None)
                return None
            d = defer.maybeDeferred(fn, *args)
            d.addBoth(self._event_done, name, result)
            return d.addBoth(lambda _: None)
        self._tail.addCallback(run)
        return result

    def _event_done(self, outcome, name, result):
        if isinstance(outcome, Failure):
            if outcome.check(ControllerMovedError):
                log.warn("controller {id} moved during {event}: resigning", id=self.broker_id, event=name)
                self._resign_locally()
            else:
                log.failure("controller event {event} failed", outcome, event=name)
            result.errback(outcome)
        else:
            result.callback(outcome)
        return None

    # -- life cycle ----------------------------------------------------------------------------

    def startup(self):
        return self._enqueue("Startup", self._elect)

    def shutdown(self):
        """Stop handling events; resign if active (deleting ``/controller`` elects another)."""
        was_active = self.active
        self._resign_locally()
        self._stopped = True
        if self._election_retry is not None and self._election_retry.active():
            self._election_retry.cancel()
        self._election_retry = None
        if was_active:
            return self.zk.resign_controller(self.broker_id).addErrback(lambda f: None)
        return defer.succeed(None)

    def session_reestablished(self):
        """A new ZooKeeper session (the old one expired): whatever this broker was, it is not
        controller now; try again (Kafka's RegisterBrokerAndReelect)."""
        self._resign_locally()
        return self._enqueue("Reelect", self._elect)

    def session_lost(self):
        self._resign_locally()

    def _resign_locally(self):
        """onControllerResignation: forget the context, stop talking to brokers."""
        if self.active:
            log.info("broker {id} resigns as controller (epoch {epoch})", id=self.broker_id, epoch=self.epoch)
        self.active = False
        if self._deletion_retry is not None and self._deletion_retry.active():
            self._deletion_retry.cancel()
        self._deletion_retry = None
        self._cancel_rebalance()  # the next controller schedules its own
        self.live.clear()
        self.assignments.clear()
        self.topic_ids.clear()
        self.states.clear()
        self.deleting.clear()
        self.shutting_down.clear()
        self.offline_replicas.clear()
        self.reassignments.clear()
        self.channel.remove_all_brokers()

    # -- election ------------------------------------------------------------------------------

    def _controller_watch(self):
        self._enqueue("ControllerChange", self._elect)

    @defer.inlineCallbacks
    def _elect(self):
        """Kafka's elect(); a failure other than ControllerMovedError (the store's connection
        dropped: a multi whose reply was lost may have made this broker controller without its
        knowing) moves the controller as Kafka's triggerControllerMove does: resign, delete
        ``/controller`` if it names this broker (every broker's watch then elects again), and
        try again after ELECTION_RETRY_S. It left a ``/controller`` naming a broker that was
        not acting as controller, and no broker ever became one."""
        try:
            yield self._elect_once()
        except ControllerMovedError:
            raise
        except Exception as e:
            log.warn("controller election on broker {id} failed: {err}; moving the controller, "
                     "trying again in {s} s", id=self.broker_id, err="%s %s" % (type(e).__name__, e),
                     s=ELECTION_RETRY_S)
            self._resign_locally()
            self._set_controller_id(-1)
            try:
                yield self.zk.resign_controller(self.broker_id)
            except Exception:
                pass  # still unreachable: the retry below deletes it (a stale /controller of ours)
            if not self._stopped and self._election_retry is None:
                self._election_retry = self._reactor.callLater(ELECTION_RETRY_S, self._retry_election)

    def _retry_election(self):
        self._election_retry = None
        self._controller_watch()

    @defer.inlineCallbacks
    def _elect_once(self):
        cid = yield self.zk.get_controller_id(watch=self._controller_watch)
        if cid == self.broker_id and not self.active:
            # ours but not acting (an election whose reply was lost): delete it, and the
            # watch elects again
            log.info("broker {id}: /controller names this broker, which is not acting as "
                     "controller: deleting it", id=self.broker_id)
            yield self.zk.resign_controller(self.broker_id)
            return
        if cid != -1:
            if self.active and cid != self.broker_id:
                self._resign_locally()
            self._set_controller_id(cid)
            return
        if self.active:
            self._resign_locally()
        result = yield self.zk.elect_controller(self.broker_id)
        if result is None:
            cid = yield self.zk.get_controller_id(watch=self._controller_watch)
            self._set_controller_id(cid)
            return
        self.epoch, self.epoch_zk_version = result
        self.active = True
        self._set_controller_id(self.broker_id)
        log.info("broker {id} is controller with epoch {epoch}", id=self.broker_id, epoch=self.epoch)
        yield self._on_failover()

    def _set_controller_id(self, cid):
        if cid != self.controller_id:
            self.controller_id = cid
            for listener in list(self.on_controller_change):
                listener(cid)

    @defer.inlineCallbacks
    def _on_failover(self):
        """onControllerFailover: read the cluster, bring partitions online, tell every broker."""
        for broker_id, info in (yield self._read_brokers()).items():
            self.live[broker_id] = info
            self.channel.add_broker(info)
        topics = yield self.zk.topics(watch=self._topics_watch)
        yield _together([self._load_topic(topic) for topic in topics])
        # topics marked for deletion get no LeaderAndIsr (their deletion resumes below)
        self.deleting.update(t for t in (yield self.zk.topics_to_delete()) if t in self.assignments)
        # replicas on brokers that are gone leave the ISR as at a broker failure (the broker may
        # have died while there was no controller)
        assigned = {r for a in self.assignments.values() for rs in a.values() for r in rs}
        yield self._replicas_offline(assigned - set(self.live))
        yield self._online_partitions(list(self.states) + self._new_partitions())
        self._send_update_metadata(self._all_partitions())
        for broker_id in self.live:
            self._send_leader_and_isr(broker_id, self._partitions_of(broker_id))
        yield self.reassignments.resume()
        yield self._deletions()
        yield self._log_dir_events()
        self._schedule_rebalance(FIRST_REBALANCE_DELAY_S)  # if auto.leader.rebalance.enable

    # -- context -------------------------------------------------------------------------------

    @defer.inlineCallbacks
    def _read_brokers(self):
        """``{broker id: BrokerInfo}`` of the registered brokers (watching the list): their
        registrations read together, not one round trip after another."""
        ids = yield self.zk.broker_ids(watch=self._brokers_watch)
        infos = yield _together([self.zk.get_broker(b) for b in ids])
        return {b: info for b, info in zip(ids, infos) if info is not None}

    def _topic_watch(self, topic):
        watch = self._topic_watches.get(topic)
        if watch is None:
            def watch():
                self._enqueue("PartitionModifications", self._partition_modifications, topic)
            self._topic_watches[topic] = watch
        return watch

    @defer.inlineCallbacks
    def _load_topic(self, topic):
        found = yield self.zk.topic_full_assignment(topic, watch=self._topic_watch(topic))
        if found is None:
            return
        topic_id, assignment, adding, removing = found
        self.topic_ids[topic] = topic_id
        self.assignments[topic] = assignment
        self.reassignments.loaded(topic, adding, removing)
        states = yield self.zk.partition_states(topic, sorted(assignment))
        for p, state in states.items():
            self.states[(topic, p)] = state

    def _new_partitions(self):
        return [(t, p) for t, a in self.assignments.items() for p in a if (t, p) not in self.states]

    def _all_partitions(self):
        return [(t, p) for t, a in self.assignments.items() for p in a if (t, p) in self.states]

    def _partitions_of(self, broker_id):
        return [(t, p) for t, a in self.assignments.items() for p, r in a.items()
                if broker_id in r and (t, p) in self.states and t not in self.deleting]

    def _replicas(self, tp):
        return self.assignments[tp[0]][tp[1]]

    # -- partition state changes ---------------------------------------------------------------

    @defer.inlineCallbacks
    def _online_partitions(self, partitions):
        """New and offline partitions to OnlinePartition where a replica can lead: the
        partitions whose state was written."""
        live = set(self.live) - self.shutting_down
        creates, updates = {}, {}
        for tp in partitions:
            if tp[0] in self.deleting or tp[0] not in self.assignments:
                continue
            state = self.states.get(tp)
            if state is None:
                new = election.new_partition_state(self._replicas(tp), live, self.epoch)
                if new is not None:
                    creates.setdefault(tp[0], {})[tp[1]] = new
            elif state.leader == NO_LEADER or state.leader not in live:
                new = yield self._elect_leader(tp, state, live)
                if new is not None:
                    updates.setdefault(tp[0], {})[tp[1]] = new
                else:
                    log.info("partition {t}-{p} stays offline: no live replica in ISR {isr}",
                             t=tp[0], p=tp[1], isr=list(state.isr))
        written = []
        for topic, states in creates.items():
            results = yield self.zk.create_partition_states(self.epoch_zk_version, topic, states)
            written += self._apply(topic, results, created=True)

        def again(tp, state):
            if state.leader != NO_LEADER and state.leader in live:
                return None
            return self._elect_leader(tp, state, live)
        written += yield self._update_states(updates, again)
        return written

    @defer.inlineCallbacks
    def _elect_leader(self, tp, state, live):
        """OfflinePartitionLeaderElection: clean if a live ISR member exists, else unclean when
        the topic (or the broker) allows it."""
        live = set(live) - self._offline_replicas_of(tp)
        new = election.elect(state, self._replicas(tp), live, False, self.epoch)
        if new is not None:
            return new
        if not (yield self._unclean_enabled(tp[0])):
            return None
        new = election.elect(state, self._replicas(tp), live, True, self.epoch)
        if new is not None:
            log.warn("unclean leader election for {t}-{p}: {l} leads without being in ISR {isr}",
                     t=tp[0], p=tp[1], l=new.leader, isr=list(state.isr))
        return new

    @defer.inlineCallbacks
    def _unclean_enabled(self, topic):
        """``unclean.leader.election.enable``: the topic's override, else the broker's; read only
        when a partition has no live ISR member."""
        configs = yield self.zk.topic_configs(topic)
        value = configs.get("unclean.leader.election.enable")
        return self.unclean if value is None else value.strip().lower() == "true"

    def topic_config_changed(self, topic):
        """A topic's configs changed (an unclean election may now be allowed): its offline
        partitions get another election (Kafka's TopicUncleanLeaderElectionEnable)."""
        return self._enqueue("TopicConfigChange", self._retry_offline, topic)

    @defer.inlineCallbacks
    def _retry_offline(self, topic):
        if not self.active:
            return
        live = set(self.live) - self.shutting_down
        offline = [tp for tp, s in self.states.items() if tp[0] == topic and (s.leader == NO_LEADER
                                                                             or s.leader not in live)]
        if offline:
            changed = yield self._online_partitions(offline)
            self._tell(changed)

    def _apply(self, topic, results, created=False):
        """Keep what was written; a ControllerMovedError stops the event (resign)."""
        done = []
        for p, outcome in results.items():
            if isinstance(outcome, Failure):
                if outcome.check(ControllerMovedError):
                    outcome.raiseException()
                log.warn("writing the state of {t}-{p} failed: {err}", t=topic, p=p,
                         err="%s %s" % (outcome.type.__name__, outcome.getErrorMessage()))
                continue
            self.states[(topic, p)] = outcome
            done.append((topic, p))
        return done

    @defer.inlineCallbacks
    def _replicas_offline(self, dead, partitions=None):
        """OfflineReplica for the ``dead`` brokers' replicas (only those of ``partitions`` if
        given: replicas on a failed log dir), then elections for the partitions left without
        a leader; the partitions changed."""
        updates = {}
        for tp in list(self.states) if partitions is None else partitions:
            state = self.states.get(tp)
            if state is None or tp[0] in self.deleting:
                continue
            if not (set(self._replicas(tp)) & dead):
                continue
            new = yield self._without_replicas(tp, state, dead)
            if new is not None:
                updates.setdefault(tp[0], {})[tp[1]] = new
        written = yield self._update_states(
            updates, lambda tp, state: self._without_replicas(tp, state, dead))
        return written

    @defer.inlineCallbacks
    def _without_replicas(self, tp, state, dead):
        """The state of ``tp`` once ``dead`` are offline (a new leader if its leader died), or
        None when they change nothing."""
        new = election.without_replicas(state, dead, self.epoch)
        if new is not None and new.leader == NO_LEADER:
            elected = yield self._elect_leader(tp, new, set(self.live) - self.shutting_down)
            if elected is not None:  # one leader epoch for the whole change
                new = attr.evolve(elected, leader_epoch=state.leader_epoch + 1)
        return new

    @defer.inlineCallbacks
    def _update_states(self, updates, decide):
        """Write ``updates`` ({topic: {partition: new state}}); the partitions changed. A
        partition whose write failed (its reply lost with the ZooKeeper connection, or its
        zkVersion moved) is read again and ``decide(tp, state read)`` (a state, a Deferred of
        one, or None when nothing is left to do) gives the next attempt, until none is left
        or this broker is no longer controller, as Kafka's electLeaderForPartitions retries:
        a failed write left the partition with its dead leader until some later event. A
        state read that differs from the one known counts as changed (the lost reply's write
        may have been applied)."""
        written = []
        while updates:
            failed = {}
            for topic, states in updates.items():
                results = yield self.zk.update_partition_states(self.epoch_zk_version, topic, states)
                written += self._apply(topic, results)
                lost = [p for p, outcome in results.items() if isinstance(outcome, Failure)]
                if lost:
                    failed[topic] = lost
            updates = {}
            delay = STATE_WRITE_RETRY_S
            while failed and self.active:
                yield deferLater(self._reactor, delay, lambda: None)
                delay = min(delay * 2, 2.0)
                if not self.active:
                    break
                read = {}
                try:
                    for topic, parts in failed.items():
                        read[topic] = yield self.zk.partition_states(topic, parts)
                except Exception as e:
                    log.warn("reading partition states again failed: {err!r}; retrying", err=e)
                    continue
                failed = {}
                for topic, states in read.items():
                    for p, state in states.items():
                        tp = (topic, p)
                        if tp[0] in self.deleting or topic not in self.assignments:
                            continue
                        if self.states.get(tp) != state:
                            self.states[tp] = state
                            written.append(tp)
                        new = yield decide(tp, state)
                        if new is not None:
                            updates.setdefault(topic, {})[p] = new
            if not self.active:
                break
        return sorted(set(written))

    # -- telling the brokers ---------------------------------------------------------------------

    def _send_leader_and_isr(self, broker_id, partitions, is_new=()):
        if not partitions or broker_id not in self.live:
            return
        info = self.live[broker_id]
        states = {tp: (self.states[tp], self._replicas(tp)) for tp in partitions}
        leaders = {self.states[tp].leader for tp in partitions}
        request = leader_and_isr_request(
            self.broker_id, self.epoch, info.epoch, states, self.topic_ids,
            [self.live[b] for b in sorted(leaders) if b in self.live], self.listener_name, is_new)
        d = self._send(broker_id, request, LEADER_AND_ISR_VERSION, "LeaderAndIsr")
        d.addCallback(self._leader_and_isr_answered, broker_id, info.epoch)

    def _send_update_metadata(self, partitions, deleting=()):
        """UpdateMetadata for ``partitions`` to every live broker: one request built, each
        broker's copy differing only in its broker epoch."""
        if not self.live:
            return
        live = set(self.live)
        deleting = set(deleting) | self.deleting
        states = {}
        for tp in partitions:
            state = self.states[tp]
            if tp[0] in deleting:
                state = attr.evolve(state, leader=LEADER_DURING_DELETE)
            replicas = self._replicas(tp)
            states[tp] = (state, replicas, [r for r in replicas if r not in live
                                            or tp in self.offline_replicas.get(r, ())])
        built = update_metadata_request(self.broker_id, self.epoch, -1, states, self.topic_ids,
                                        list(self.live.values()))
        for broker_id in sorted(self.live):
            request = copy.copy(built)
            request.broker_epoch = self.live[broker_id].epoch
            self._send(broker_id, request, UPDATE_METADATA_VERSION, "UpdateMetadata")

    def _send(self, broker_id, request, version, name):
        d = self.channel.send(broker_id, request, version)

        def answered(response):
            code = response.error_code
            if code != errors.NONE:
                log.warn("{api} to broker {id}: {err}", api=name, id=broker_id, err=errors.error_name(code))
            return response
        d.addCallbacks(answered, lambda f: None)
        return d

    def _tell(self, changed, is_new=()):
        """LeaderAndIsr to the live replicas of ``changed``, then UpdateMetadata to every live
        broker (Kafka's sendRequestsToBrokers after a state change)."""
        if not changed:
            return
        for broker_id in sorted(self.live):
            mine = [tp for tp in changed if broker_id in self._replicas(tp)]
            self._send_leader_and_isr(broker_id, mine, is_new)
        self._send_update_metadata(changed)

    # -- broker changes --------------------------------------------------------------------------

    def _brokers_watch(self):
        self._enqueue("BrokerChange", self._broker_change)

    @defer.inlineCallbacks
    def _broker_change(self):
        if not self.active:
            return
        current = yield self._read_brokers()
        dead = {b for b, info in self.live.items() if b not in current or current[b].epoch != info.epoch}
        new = {b for b, info in current.items() if b not in self.live or b in dead}
        self.shutting_down -= dead
        if dead:
            log.info("controller {id}: brokers {dead} failed", id=self.broker_id, dead=sorted(dead))
            for b in dead:
                self.live.pop(b, None)
                self.offline_replicas.pop(b, None)
                self.channel.remove_broker(b)
            changed = yield self._replicas_offline(dead)
            self._tell(changed)
            # the brokers learn who died (and the offline replicas) also where no leader or ISR
            # changed, as after a controlled shutdown (Kafka's onReplicasBecomeOffline)
            told = set(changed)
            rest = [tp for tp in self._all_partitions() if tp not in told and set(self._replicas(tp)) & dead]
            if rest or not changed:
                self._send_update_metadata(rest)
        if new:
            log.info("controller {id}: brokers {new} started", id=self.broker_id, new=sorted(new))
            for b in new:
                self.live[b] = current[b]
                self.offline_replicas.pop(b, None)  # a new registration: its dirs are read again
                self.channel.add_broker(current[b])
            # onBrokerStartup: full metadata to everyone, the new brokers' replicas online,
            # then elections for partitions they can lead now
            self._send_update_metadata(self._all_partitions())
            for b in sorted(new):
                self._send_leader_and_isr(b, self._partitions_of(b))
            changed = yield self._online_partitions(
                [tp for tp, s in self.states.items() if s.leader == NO_LEADER or s.leader not in self.live]
                + self._new_partitions())
            self._tell(changed)
        yield self._deletions()

    # -- topic changes ---------------------------------------------------------------------------

    def _topics_watch(self):
        self._enqueue("TopicChange", self._topic_change)

    @defer.inlineCallbacks
    def _topic_change(self):
        if not self.active:
            return
        topics = yield self.zk.topics(watch=self._topics_watch)
        new = [t for t in topics if t not in self.assignments]
        for topic in set(self.assignments) - set(topics):
            self._forget_topic(topic)
        yield _together([self._load_topic(topic) for topic in new])
        if new:
            fresh = [tp for tp in self._new_partitions() if tp[0] in new]
            changed = yield self._online_partitions(fresh)
            self._tell(changed, is_new=set(fresh))

    @defer.inlineCallbacks
    def _partition_modifications(self, topic):
        if not self.active or topic not in self.assignments:
            return
        found = yield self.zk.topic_assignment(topic, watch=self._topic_watch(topic))
        if found is None:
            return
        _, assignment = found
        added = [p for p in assignment if p not in self.assignments[topic]]
        if not added:
            return
        self.assignments[topic] = {**self.assignments[topic], **{p: assignment[p] for p in added}}
        fresh = [(topic, p) for p in added]
        changed = yield self._online_partitions(fresh)
        self._tell(changed, is_new=set(fresh))

    def _forget_topic(self, topic):
        for p in list(self.assignments.get(topic, {})):
            self.states.pop((topic, p), None)
        self.assignments.pop(topic, None)
        self.topic_ids.pop(topic, None)
        self.deleting.discard(topic)
        self.reassignments.forget_topic(topic)

    # -- deletion ----------------------------------------------------------------------------------

    def _deletions_watch(self):
        self._enqueue("TopicDeletion", self._deletions)

    @defer.inlineCallbacks
    def _deletions(self):
        """TopicDeletionManager, in short: tell brokers the topic is going (UpdateMetadata with
        LeaderDuringDelete), StopReplica with delete to every live replica; once all answered
        (an event of its own: the queue does not wait on brokers) remove its znodes. A marked
        topic that does not exist is just unmarked."""
        if not self.active:
            return
        marked = yield self.zk.topics_to_delete(watch=self._deletions_watch)
        for topic in marked:
            if topic not in self.assignments:
                yield self.zk.delete_topic(self.epoch_zk_version, topic)
                continue
            self.deleting.add(topic)
            partitions = [(topic, p) for p in self.assignments[topic] if (topic, p) in self.states]
            self._send_update_metadata(partitions, deleting={topic})
            waits, asked = [], []
            for broker_id in sorted(self.live):
                mine = [(t, p, self.states[(t, p)].leader_epoch, True) for t, p in partitions
                        if broker_id in self._replicas((t, p))]
                if mine:
                    info = self.live[broker_id]
                    request = stop_replica_request(self.broker_id, self.epoch, info.epoch, mine)
                    waits.append(self._send(broker_id, request, STOP_REPLICA_VERSION, "StopReplica"))
                    asked.append(broker_id)
            defer.DeferredList(waits).addCallback(
                lambda answers, topic=topic, partitions=partitions, asked=asked: self._enqueue(
                    "TopicDeletionStopReplicaResponseReceived", self._deletion_answered, topic, partitions,
                    dict(zip(asked, (r for _, r in answers)))).addErrback(lambda f: None))  # logged there

    @defer.inlineCallbacks
    def _deletion_answered(self, topic, partitions, answers):
        if not self.active or topic not in self.deleting:
            return  # deleted meanwhile (answers of an earlier round), or no longer controller
        waiting = self._replicas_not_deleted(partitions, answers)
        if waiting:
            # TopicDeletionManager's ineligible replicas: the topic stays marked (and out of
            # Metadata) until those brokers are back and have deleted their replicas
            log.info("controller {id}: deletion of topic {topic} waits for brokers {b}",
                     id=self.broker_id, topic=topic, b=waiting)
            return
        yield self.zk.delete_topic(self.epoch_zk_version, topic)
        self._forget_topic(topic)
        log.info("controller {id}: deleted topic {topic}", id=self.broker_id, topic=topic)

    def _replicas_not_deleted(self, partitions, answers):
        """The brokers holding replicas of ``partitions`` that did not answer this round's
        StopReplica (``answers``: broker id -> response, None if it failed) without errors: a
        broker that is down is asked when it returns; a live one again after a back-off, unless
        its log dir failed (then when it registers again)."""
        holders = {r for tp in partitions for r in self._replicas(tp)}
        deleted, retry = set(), False
        for broker_id, response in answers.items():
            codes = None if response is None else \
                {response.error_code} | {e.error_code for e in response.partition_errors}
            if codes == {errors.NONE}:
                deleted.add(broker_id)
            elif broker_id in self.live and (codes is None or codes - {errors.NONE, errors.KAFKA_STORAGE_ERROR}):
                retry = True
        if retry and (self._deletion_retry is None or not self._deletion_retry.active()):
            self._deletion_retry = self._reactor.callLater(DELETION_RETRY_S, self._deletions_watch)
        return sorted(holders - deleted)

    # -- ControlledShutdown ------------------------------------------------------------------------

    def controlled_shutdown(self, broker_id, broker_epoch):
        """A Deferred of ``(error code, [(topic, partition) still led by the broker])``."""
        return self._enqueue("ControlledShutdown", self._controlled_shutdown, broker_id, broker_epoch)

    @defer.inlineCallbacks
    def _controlled_shutdown(self, broker_id, broker_epoch):
        """Kafka's doControlledShutdown: the broker's leaderships go to the first live ISR member
        not shutting down (ControlledShutdownPartitionLeaderElection), it leaves the ISR of the
        partitions it follows; partitions nobody else can lead stay and are named."""
        if not self.active:
            return errors.NOT_CONTROLLER, []
        info = self.live.get(broker_id)
        if info is None:
            return errors.BROKER_NOT_AVAILABLE, []
        if broker_epoch != -1 and broker_epoch < info.epoch:
            return errors.STALE_BROKER_EPOCH, []
        self.shutting_down.add(broker_id)
        candidates = set(self.live) - self.shutting_down
        updates = {}
        for tp, state in self.states.items():
            if tp[0] in self.deleting or broker_id not in self._replicas(tp) or len(self._replicas(tp)) < 2:
                continue
            if state.leader == broker_id:
                leader = next((r for r in self._replicas(tp) if r in candidates and r in state.isr), None)
                if leader is None:
                    continue
                new = state.new_leader_and_isr(leader, [r for r in state.isr if r != broker_id])
            elif broker_id in state.isr and len(state.isr) > 1:
                new = state.new_leader_and_isr(state.leader, [r for r in state.isr if r != broker_id])
            else:
                continue
            updates.setdefault(tp[0], {})[tp[1]] = attr.evolve(new, controller_epoch=self.epoch)
        changed = []
        for topic, states in updates.items():
            results = yield self.zk.update_partition_states(self.epoch_zk_version, topic, states)
            changed += self._apply(topic, results)
        self._tell(changed)
        remaining = sorted(tp for tp, s in self.states.items()
                           if s.leader == broker_id and len(self._replicas(tp)) > 1)
        log.info("controller {id}: controlled shutdown of broker {b}: {n} partition(s) moved, {r} remaining",
                 id=self.broker_id, b=broker_id, n=len(changed), r=len(remaining))
        return errors.NONE, remaining

    # -- AlterPartition ----------------------------------------------------------------------------

    def alter_partition(self, request, version):
        """A Deferred of the AlterPartitionResponse (handled in the event queue)."""
        return self._enqueue("AlterPartition", self._alter_partition, request, version)

    @defer.inlineCallbacks
    def _alter_partition(self, request, version):
        R = m.AlterPartitionResponse
        if not self.active:
            return R(error_code=errors.NOT_CONTROLLER, topics=[])
        sender = self.live.get(request.broker_id)
        if sender is None or (request.broker_epoch != -1 and request.broker_epoch != sender.epoch):
            return R(error_code=errors.STALE_BROKER_EPOCH, topics=[])
        by_id = {tid: t for t, tid in self.topic_ids.items()}
        out_topics = []
        updates = {}
        answers = {}
        for t in request.topics:
            topic = t.topic_name if version < 2 else by_id.get(t.topic_id)
            rt = R.TopicData(topic_name=t.topic_name if version < 2 else "", topic_id=t.topic_id,
                             partitions=[])
            out_topics.append(rt)
            for p in t.partitions:
                new_isr = list(p.new_isr) if version < 3 else [b.broker_id for b in p.new_isr_with_epochs]
                state = self.states.get((topic, p.partition_index)) if topic is not None else None
                code = errors.NONE
                if topic is None or state is None:
                    code = errors.UNKNOWN_TOPIC_ID if version >= 2 and topic is None else \
                        errors.UNKNOWN_TOPIC_OR_PARTITION
                elif state.leader != request.broker_id:
                    code = errors.NOT_LEADER_OR_FOLLOWER
                elif p.leader_epoch != state.leader_epoch:
                    code = errors.FENCED_LEADER_EPOCH
                elif p.partition_epoch != state.partition_epoch:
                    code = errors.INVALID_UPDATE_VERSION
                elif not new_isr or state.leader not in new_isr or \
                        any(b not in self.live or b not in self._replicas((topic, p.partition_index))
                            for b in new_isr) or \
                        self._ineligible_new_members((topic, p.partition_index), state, new_isr):
                    code = errors.INELIGIBLE_REPLICA if new_isr else errors.INVALID_REQUEST
                rp = R.PartitionData(partition_index=p.partition_index, error_code=code)
                rt.partitions.append(rp)
                if code == errors.NONE:
                    updates.setdefault(topic, {})[p.partition_index] = state.new_isr(new_isr)
                    answers[(topic, p.partition_index)] = rp
        changed = []
        for topic, states in updates.items():
            results = yield self.zk.update_partition_states(self.epoch_zk_version, topic, states)
            for p, outcome in results.items():
                rp = answers[(topic, p)]
                if isinstance(outcome, Failure):
                    if outcome.check(ControllerMovedError):
                        outcome.raiseException()
                    rp.error_code = errors.INVALID_UPDATE_VERSION
                    continue
                self.states[(topic, p)] = outcome
                changed.append((topic, p))
        for rt in out_topics:
            for rp in rt.partitions:
                topic = rt.topic_name if version < 2 else by_id.get(rt.topic_id)
                state = self.states.get((topic, rp.partition_index))
                if rp.error_code == errors.NONE and state is not None:
                    rp.leader_id = state.leader
                    rp.leader_epoch = state.leader_epoch
                    rp.isr = list(state.isr)
                    rp.partition_epoch = state.partition_epoch
        if changed:
            log.info("controller {id}: ISR of {n} partition(s) changed by broker {b}", id=self.broker_id,
                     n=len(changed), b=request.broker_id)
            self._send_update_metadata(changed)
            yield self.reassignments.isr_changed(changed)
        return R(error_code=errors.NONE, topics=out_topics)

    # -- log dir failures ----------------------------------------------------------------------------

    def _ineligible_new_members(self, tp, state, new_isr):
        """KIP-841: a broker in a controlled shutdown or a replica on a failed log dir does not
        join an ISR (else a still-fetching stopping broker comes back into the ISR, and its
        death then costs every partition another leader epoch)."""
        offline = self._offline_replicas_of(tp)
        return any(b not in state.isr and (b in self.shutting_down or b in offline) for b in new_isr)

    def _offline_replicas_of(self, tp):
        return {b for b, tps in self.offline_replicas.items() if tp in tps}

    def _log_dir_events_watch(self):
        self._enqueue("LogDirEventNotification", self._log_dir_events)

    @defer.inlineCallbacks
    def _log_dir_events(self):
        """Kafka's LogDirEventNotification: a broker lost a log dir. Its partitions get a
        LeaderAndIsr; the ones it answers KAFKA_STORAGE_ERROR for are offline replicas
        (:meth:`_leader_and_isr_answered`). Handled notifications are removed."""
        if not self.active:
            return
        names = yield self.zk.log_dir_event_notifications(watch=self._log_dir_events_watch)
        if not names:
            return
        brokers = yield self.zk.log_dir_event_brokers(names)
        yield self.zk.delete_log_dir_event_notifications(self.epoch_zk_version, names)
        for broker_id in brokers:
            if broker_id in self.live:
                log.info("controller {id}: broker {b} reported a failed log dir", id=self.broker_id, b=broker_id)
                self._send_leader_and_isr(broker_id, self._partitions_of(broker_id))

    def _leader_and_isr_answered(self, response, broker_id, broker_epoch):
        """LeaderAndIsrResponseReceived: partitions answered KAFKA_STORAGE_ERROR are on a failed
        log dir of that broker."""
        if response is None:
            return None
        by_id = {tid: t for t, tid in self.topic_ids.items()}
        failed = []
        for topic in getattr(response, "topics", None) or []:
            name = by_id.get(topic.topic_id)
            for p in topic.partition_errors:
                if p.error_code == errors.KAFKA_STORAGE_ERROR and name is not None:
                    failed.append((name, p.partition_index))
        if failed:
            self._enqueue("ReplicasOnOfflineDirs", self._replicas_on_offline_dirs, broker_id, broker_epoch, failed)
        return response

    @defer.inlineCallbacks
    def _replicas_on_offline_dirs(self, broker_id, broker_epoch, partitions):
        """onReplicasBecomeOffline for one broker's replicas: out of the ISR, a new leader
        where it led, listed offline in the metadata until it registers again."""
        info = self.live.get(broker_id)
        if not self.active or info is None or info.epoch != broker_epoch:
            return
        known = self.offline_replicas.setdefault(broker_id, set())
        fresh = [tp for tp in partitions if tp not in known and tp in self.states and tp[0] not in self.deleting]
        if not fresh:
            return
        known.update(fresh)
        log.warn("controller {id}: replicas of broker {b} on a failed log dir: {tps}", id=self.broker_id,
                 b=broker_id, tps=", ".join("%s-%d" % tp for tp in sorted(fresh)[:20]))
        changed = yield self._replicas_offline({broker_id}, fresh)
        self._tell(changed)
        unchanged = [tp for tp in fresh if tp not in changed]
        if unchanged:  # nothing to write (already out of the ISR): the metadata still lists them offline
            self._send_update_metadata(unchanged)

    # -- partition reassignment (the steps are in controller/reassignment.py) --------------------

    def alter_partition_reassignments(self, targets):
        """A Deferred of ``{(topic, partition): (error code, message)}``; NOT_CONTROLLER for
        all when this broker is not (or no longer) the controller."""
        def run():
            if not self.active:
                return {tp: (errors.NOT_CONTROLLER, None) for tp in targets}
            return self.reassignments.alter(targets)
        return self._enqueue("ApiPartitionReassignment", run)

    def list_partition_reassignments(self, wanted=None):
        """A Deferred of ``{(topic, partition): ReplicaAssignment}`` or None if not controller."""
        def run():
            return self.reassignments.list(wanted) if self.active else None
        return self._enqueue("ListPartitionReassignments", run)
