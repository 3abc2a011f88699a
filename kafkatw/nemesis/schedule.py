"""The nemesis' schedule: which fault, on whom, for how long, drawn from a seed so a run can be
replayed exactly. Pure data: carrying faults out is :mod:`kafkatw.nemesis.faults`' job."""

import random

import attr

#: SIGKILL the leader of a partition of the workload's topic, start it again after the hold.
KILL_LEADER = "kill-leader"
#: SIGKILL the controller, start it again after the hold.
KILL_CONTROLLER = "kill-controller"
#: SIGSTOP a random broker for the hold, then SIGCONT (past the session timeout it is expelled).
PAUSE_BROKER = "pause-broker"
#: SIGTERM a random broker (a clean stop) and start it again after the hold.
RESTART_BROKER = "restart-broker"
#: SIGSTOP ZooKeeper for the hold, then SIGCONT: the brokers lose their connection meanwhile.
PAUSE_ZOOKEEPER = "pause-zookeeper"
#: SIGSTOP a random broker for the session timeout plus the hold: its ZooKeeper session
#: expires, its partitions move, and it registers again (a new broker epoch) on SIGCONT.
EXPIRE_BROKER = "expire-broker-session"
#: SIGSTOP ZooKeeper for the session timeout plus the hold: on SIGCONT it expires sessions
#: whose brokers did not reconnect in time.
EXPIRE_ZOOKEEPER = "expire-zookeeper-sessions"

KINDS = (KILL_LEADER, KILL_CONTROLLER, PAUSE_BROKER, RESTART_BROKER, PAUSE_ZOOKEEPER, EXPIRE_BROKER,
         EXPIRE_ZOOKEEPER)


@attr.s(frozen=True)
class Fault:
    """One fault: ``kind`` (one of :data:`KINDS`), ``pick`` (a number in [0, 1) choosing the
    victim among the candidates at the time: the partition whose leader dies, or the broker),
    ``hold_s`` (how long it lasts) and ``rest_s`` (the quiet time after healing)."""
    kind = attr.ib()
    pick = attr.ib()
    hold_s = attr.ib()
    rest_s = attr.ib()


def parse_kinds(text):
    """``"kill-leader,pause-broker"`` -> a tuple of kinds; one line naming an unknown one."""
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    for k in kinds:
        if k not in KINDS:
            raise ValueError("unknown fault %r (known: %s)" % (k, ", ".join(KINDS)))
    if not kinds:
        raise ValueError("no fault kinds given (known: %s)" % ", ".join(KINDS))
    return kinds


def make_schedule(seed, kinds, faults=None, duration_s=None, hold_s=(1.0, 3.0), rest_s=(2.0, 4.0)):
    """A list of :class:`Fault`: ``faults`` of them, or as many as fit ``duration_s`` counting
    each one's hold and rest (the recovery waits in between are not counted: a run's length is
    bounded by the runner's deadline). The same arguments always give the same list."""
    if (faults is None) == (duration_s is None):
        raise ValueError("give exactly one of faults and duration_s")
    rng = random.Random(seed)
    out = []
    spent = 0.0
    while True:
        if faults is not None and len(out) >= faults:
            break
        fault = Fault(kind=rng.choice(kinds), pick=rng.random(),
                      hold_s=round(rng.uniform(*hold_s), 2), rest_s=round(rng.uniform(*rest_s), 2))
        if duration_s is not None and spent + fault.hold_s + fault.rest_s > duration_s:
            break
        spent += fault.hold_s + fault.rest_s
        out.append(fault)
    return out
