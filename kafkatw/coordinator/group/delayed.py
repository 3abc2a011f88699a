"""The group coordinator's delayed operations in the shared purgatory
(:mod:`kafkatw.purgatory`): DelayedJoin, InitialDelayedJoin, DelayedSync and
DelayedHeartbeat, with their watch keys. The decisions are the coordinator's; these only
route the purgatory's try-complete/complete/expire calls to it.
"""

import attr

from kafkatw.purgatory import DelayedOperation


@attr.s(slots=True, frozen=True)
class GroupJoinKey:
    group_id = attr.ib()


@attr.s(slots=True, frozen=True)
class GroupSyncKey:
    group_id = attr.ib()


@attr.s(slots=True, frozen=True)
class MemberKey:
    group_id = attr.ib()
    member_id = attr.ib()


class DelayedJoin(DelayedOperation):
    """Waits for every known member to rejoin, at most the group's rebalance timeout."""

    def __init__(self, coordinator, group, rebalance_timeout_ms):
        super().__init__(rebalance_timeout_ms)
        self.coordinator = coordinator
        self.group = group

    def try_complete(self):
        return self.coordinator.try_complete_join(self.group, self.force_complete)

    def on_complete(self):
        self.coordinator.on_complete_join(self.group)


class InitialDelayedJoin(DelayedJoin):
    """The first rebalance of an empty group waits ``group.initial.rebalance.delay.ms``, again
    each time a new member arrived meanwhile, up to the rebalance timeout in total."""

    def __init__(self, coordinator, purgatory, group, configured_rebalance_delay, delay_ms,
                 remaining_ms):
        super().__init__(coordinator, group, delay_ms)
        self.purgatory = purgatory
        self.configured_rebalance_delay = configured_rebalance_delay
        self.remaining_ms = remaining_ms

    def try_complete(self):
        return False

    def on_complete(self):
        group = self.group
        if group.new_member_added and self.remaining_ms != 0:
            group.new_member_added = False
            delay = min(self.configured_rebalance_delay, self.remaining_ms)
            remaining = max(self.remaining_ms - self.delay_ms, 0)
            self.purgatory.try_complete_else_watch(
                InitialDelayedJoin(self.coordinator, self.purgatory, group,
                                   self.configured_rebalance_delay, delay, remaining),
                [GroupJoinKey(group.group_id)])
        else:
            super().on_complete()


class DelayedSync(DelayedOperation):
    """After a join completes, waits for every member's SyncGroup (rebalance timeout)."""

    def __init__(self, coordinator, group, generation_id, rebalance_timeout_ms):
        super().__init__(rebalance_timeout_ms)
        self.coordinator = coordinator
        self.group = group
        self.generation_id = generation_id

    def try_complete(self):
        return self.coordinator.try_complete_pending_sync(self.group, self.generation_id,
                                                          self.force_complete)

    def on_complete(self):
        pass

    def on_expiration(self):
        self.coordinator.on_expire_pending_sync(self.group, self.generation_id)


class DelayedHeartbeat(DelayedOperation):
    """Expires a member (or a pending member) that sent no heartbeat within its session timeout."""

    def __init__(self, coordinator, group, member_id, is_pending, timeout_ms):
        super().__init__(timeout_ms)
        self.coordinator = coordinator
        self.group = group
        self.member_id = member_id
        self.is_pending = is_pending

    def try_complete(self):
        return self.coordinator.try_complete_heartbeat(self.group, self.member_id, self.is_pending,
                                                       self.force_complete)

    def on_complete(self):
        pass

    def on_expiration(self):
        self.coordinator.on_expire_heartbeat(self.group, self.member_id, self.is_pending)
