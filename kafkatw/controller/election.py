"""Kafka's partition leader elections and the ISR changes of an offline replica
(PartitionLeaderElectionAlgorithms, ReplicaStateMachine's OfflineReplica), as pure functions
of the assignment, the current state and the live brokers. Writing the result is the
controller's.
"""

from kafkatw.cluster.state import INITIAL_LEADER_EPOCH, NO_LEADER, LeaderAndIsr


def new_partition_state(assignment, live, controller_epoch):
    """NewPartition -> OnlinePartition: the first live replica leads, the live replicas are the
    ISR; None when no replica is live (the partition stays new)."""
    live_replicas = [r for r in assignment if r in live]
    if not live_replicas:
        return None
    return LeaderAndIsr(leader=live_replicas[0], leader_epoch=INITIAL_LEADER_EPOCH, isr=live_replicas,
                        controller_epoch=controller_epoch)


def offline_partition_leader(assignment, isr, live, unclean):
    """``(leader, isr, unclean)``: the first live ISR member in assignment order; without one,
    with ``unclean``, the first live replica with an ISR of itself; else None."""
    for r in assignment:
        if r in live and r in isr:
            return r, [b for b in isr if b in live], False
    if unclean:
        for r in assignment:
            if r in live:
                return r, [r], True
    return None


def elect(state, assignment, live, unclean, controller_epoch):
    """The state after an offline-partition election of ``state`` (leader dead or none), or
    None when nobody can lead (the partition stays offline as it is)."""
    found = offline_partition_leader(assignment, state.isr, live, unclean)
    if found is None:
        return None
    leader, isr, _ = found
    return LeaderAndIsr(leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr,
                        controller_epoch=controller_epoch, partition_epoch=state.partition_epoch)


def without_replicas(state, dead, controller_epoch):
    """OfflineReplica for each of ``dead``: out of the ISR (its last member stays), a dead leader
    becomes NO_LEADER, the leader epoch moves; None when nothing changes."""
    isr = list(state.isr)
    leader = state.leader
    changed = False
    for replica in sorted(dead):
        if replica == leader:
            leader, changed = NO_LEADER, True
        if replica in isr and len(isr) > 1:
            isr.remove(replica)
            changed = True
    if not changed:
        return None
    return LeaderAndIsr(leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr,
                        controller_epoch=controller_epoch, partition_epoch=state.partition_epoch)
