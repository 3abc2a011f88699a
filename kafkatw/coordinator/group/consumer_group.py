"""One consumer group of the KIP-848 protocol in memory (Kafka's ConsumerGroup,
ConsumerGroupMember and CurrentAssignmentBuilder): group epoch, target assignment and its epoch,
members with their epochs, and the reconciliation step that revokes a partition before anyone
else gets it. No timers, records or requests here: the consumer coordinator drives it.

An assignment is ``{topic id (16 bytes): frozenset(partitions)}``.
"""

import attr

# group states (Kafka's ConsumerGroup.ConsumerGroupState, as DescribeGroups/ListGroups spell them)
EMPTY = "Empty"
ASSIGNING = "Assigning"
RECONCILING = "Reconciling"
STABLE = "Stable"
DEAD = "Dead"

# member states (Kafka's MemberState, their byte values are what CurrentMemberAssignment stores)
UNREVOKED_PARTITIONS = 0
UNRELEASED_PARTITIONS = 1
MEMBER_STABLE = 2

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


def union(a, b):
    out = dict(a)
    for t, ps in b.items():
        out[t] = out.get(t, frozenset()) | ps
    return {t: ps for t, ps in out.items() if ps}


def intersects(a, b):
    return any(ps & b.get(t, frozenset()) for t, ps in a.items())


def is_subset(a, b):
    return all(ps <= b.get(t, frozenset()) for t, ps in a.items())


def normalize(assignment):
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


@attr.s(slots=True)
class ConsumerGroupMember:
    member_id = attr.ib()
    instance_id = attr.ib(default=None)
    rack_id = attr.ib(default=None)
    client_id = attr.ib(default="")
    client_host = attr.ib(default="")
    subscribed_topic_names = attr.ib(factory=list)
    subscribed_topic_regex = attr.ib(default=None)
    rebalance_timeout_ms = attr.ib(default=-1)
    server_assignor = attr.ib(default=None)
    member_epoch = attr.ib(default=0)
    previous_member_epoch = attr.ib(default=0)
    state = attr.ib(default=MEMBER_STABLE)
    assigned = attr.ib(factory=dict)
    pending_revocation = attr.ib(factory=dict)
    # a member speaking the classic protocol (JoinGroup/SyncGroup) in a consumer group:
    # (session timeout ms, ((protocol name, subscription bytes), ...)); None otherwise
    classic = attr.ib(default=None)
    # with an authorizer: the topics its regex matches that its principal may describe, as of
    # its last heartbeat (None: not filtered); kept in memory only
    authorized_topics = attr.ib(default=None, eq=False)

    def copy(self, **changes):
        return attr.evolve(self, **changes)

    def owned(self):
        """Every partition this member may still be fetching: assigned and pending revocation."""
        return union(self.assigned, self.pending_revocation)


class ConsumerGroup:
    def __init__(self, group_id):
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members = {}  # member id -> ConsumerGroupMember
        self.static_members = {}  # instance id -> member id
        self.target = {}  # member id -> assignment
        self.partition_owners = {}  # (topic id, partition) -> member id
        self.subscription_metadata = {}  # topic name -> (topic id, partitions)
        self.regex_topics = {}  # regex -> frozenset of topic names matching it
        self.metadata_version = -1  # the coordinator's topic version the above were computed at
        self.assignor_name = ""

    # -- state ---------------------------------------------------------------------------
    @property
    def state(self):
        if not self.members:
            return EMPTY
        if self.group_epoch != self.assignment_epoch:
            return ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state != MEMBER_STABLE:
                return RECONCILING
        return STABLE

    def is_empty(self):
        return not self.members

    def all_classic_except(self, member_id):
        return all(m.classic is not None for mid, m in self.members.items() if mid != member_id)

    def subscribed_topic_names(self):
        """Every topic name some member subscribes to by name or through its regex."""
        names = set()
        for m in self.members.values():
            names.update(self.member_topics(m))
        return names

    def member_topics(self, member):
        names = set(member.subscribed_topic_names or ())
        if member.subscribed_topic_regex:
            matches = self.regex_topics.get(member.subscribed_topic_regex, frozenset())
            if member.authorized_topics is not None:
                matches = matches & member.authorized_topics
            names.update(matches)
        return names

    # -- members -------------------------------------------------------------------------
    def update_member(self, member):
        """Install ``member`` (new or changed), keeping the partition owners in step."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        for t, ps in member.owned().items():
            for p in ps:
                self.partition_owners[(t, p)] = member.member_id

    def remove_member(self, member_id):
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._release(member)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        return member

    def _release(self, member):
        for t, ps in member.owned().items():
            for p in ps:
                if self.partition_owners.get((t, p)) == member.member_id:
                    del self.partition_owners[(t, p)]

    def owner_of(self, topic_id, partition):
        return self.partition_owners.get((topic_id, partition))

    def static_member(self, instance_id):
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)


def reconcile(group, member, owned=None):
    """The member's next state toward its target (Kafka's CurrentAssignmentBuilder): returns a
    new ConsumerGroupMember (``member`` itself when nothing changes). ``owned`` is what the
    member reported owning in this heartbeat (an assignment), or None if it did not say."""
    target_epoch = group.assignment_epoch
    target = group.target.get(member.member_id, {})
    if member.state == MEMBER_STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next_assignment(group, member, target_epoch, target, owned)
    if member.state == UNREVOKED_PARTITIONS:
        if owned is None or intersects(member.pending_revocation, owned):
            return member  # not revoked yet: wait
        return _next_assignment(group, member, target_epoch, target, owned)
    # UNRELEASED_PARTITIONS: try to take what others released meanwhile
    return _next_assignment(group, member, target_epoch, target, owned)


def _next_assignment(group, member, target_epoch, target, owned):
    keep = {}
    revoke = {}
    assign = {}
    unreleased = False
    for t in set(target) | set(member.assigned):
        want = target.get(t, frozenset())
        have = member.assigned.get(t, frozenset())
        if have & want:
            keep[t] = have & want
        if have - want:
            revoke[t] = have - want
        for p in want - have:
            owner = group.owner_of(t, p)
            if owner is None or owner == member.member_id:
                assign.setdefault(t, set()).add(p)
            else:
                unreleased = True
    assign = normalize(assign)
    owns_revoked = owned is None or intersects(revoke, owned)
    if revoke and owns_revoked:
        return member.copy(state=UNREVOKED_PARTITIONS, assigned=keep, pending_revocation=revoke)
    new_epoch = dict(member_epoch=target_epoch, previous_member_epoch=member.member_epoch)
    if member.member_epoch == target_epoch:
        new_epoch = {}
    state = UNRELEASED_PARTITIONS if unreleased else MEMBER_STABLE
    return member.copy(state=state, assigned=union(keep, assign), pending_revocation={},
                       **new_epoch)
