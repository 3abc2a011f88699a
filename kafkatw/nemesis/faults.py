"""Carrying out a :mod:`~kafkatw.nemesis.schedule` on a running :class:`kafkatw.testing.KafkaCluster`:
picking the victim at the time of the fault, breaking it, healing it, and waiting (bounded) until
every broker is registered again. It does not judge the outcome: that is the checker's job."""

import time

from kafkatw.nemesis import schedule


class Nemesis:
    """Runs faults on ``cluster`` against ``topic``; ``log(line)`` gets one line per event.

    Every fault is healed before the next one starts, so a run never piles up failures beyond
    what the cluster is meant to survive (one broker down or frozen, or ZooKeeper frozen).
    """

    def __init__(self, cluster, topic, log=print, recovery_timeout_s=60.0, session_timeout_s=4.0):
        self.cluster = cluster
        self.session_timeout_s = session_timeout_s
        self.topic = topic
        self.log = log
        self.recovery_timeout_s = recovery_timeout_s

    def _pick(self, items, pick):
        items = sorted(items)
        return items[min(int(pick * len(items)), len(items) - 1)]

    def _leaders(self):
        partitions = self.cluster.metadata(topics=[self.topic])[2].get(self.topic)
        if not isinstance(partitions, dict):
            return {}
        return {p: state[1] for p, state in partitions.items() if state[1] >= 0}

    def apply(self, fault):
        """Break, hold, heal, wait for recovery; returns a one-line description of what was done."""
        cluster = self.cluster
        if fault.kind in (schedule.PAUSE_ZOOKEEPER, schedule.EXPIRE_ZOOKEEPER):
            hold = fault.hold_s + (self.session_timeout_s if fault.kind == schedule.EXPIRE_ZOOKEEPER else 0)
            what = "zookeeper paused %.1f s" % hold
            cluster.zookeeper.pause()
            time.sleep(hold)
            cluster.zookeeper.resume()
        else:
            victim, why = self._victim(fault)
            broker = cluster.broker(victim)
            if fault.kind in (schedule.KILL_LEADER, schedule.KILL_CONTROLLER):
                what = "broker %d (%s) killed %.1f s" % (victim, why, fault.hold_s)
                broker.kill()
                time.sleep(fault.hold_s)
                broker.start()
            elif fault.kind == schedule.RESTART_BROKER:
                what = "broker %d stopped (SIGTERM) %.1f s" % (victim, fault.hold_s)
                broker.stop()
                time.sleep(fault.hold_s)
                broker.start()
            elif fault.kind in (schedule.PAUSE_BROKER, schedule.EXPIRE_BROKER):
                hold = fault.hold_s + (self.session_timeout_s if fault.kind == schedule.EXPIRE_BROKER else 0)
                what = "broker %d paused %.1f s" % (victim, hold)
                broker.pause()
                time.sleep(hold)
                broker.resume()
            else:
                raise ValueError("unknown fault %r" % (fault.kind,))
        self.log("nemesis: " + what)
        self.wait_recovered()
        time.sleep(fault.rest_s)
        return what

    def _victim(self, fault):
        if fault.kind == schedule.KILL_LEADER:
            leaders = self.cluster.wait_for(self._leaders, self.recovery_timeout_s,
                                            "a leader for %s" % self.topic)
            partition = self._pick(leaders, fault.pick)
            return leaders[partition], "leader of %s-%d" % (self.topic, partition)
        if fault.kind == schedule.KILL_CONTROLLER:
            controller = self.cluster.wait_for(lambda: self.cluster.controller_id() in self.cluster.brokers
                                               and self.cluster.controller_id(), self.recovery_timeout_s,
                                               "a controller")
            return controller, "controller"
        return self._pick(self.cluster.brokers, fault.pick), "random"

    def wait_recovered(self):
        """Until every broker runs and every broker's Metadata lists them all and a controller."""
        for b in self.cluster.brokers.values():
            if not b.running:
                b.start()
        self.cluster.wait_for_brokers(sorted(self.cluster.brokers), timeout=self.recovery_timeout_s)
