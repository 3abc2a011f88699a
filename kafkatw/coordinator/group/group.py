"""One classic group's in-memory state (Kafka's GroupMetadata and MemberMetadata): members,
static instance ids, pending members, protocol votes, generation, committed offsets and the
state machine Empty / PreparingRebalance / CompletingRebalance / Stable / Dead. No timers or
I/O here: the coordinator drives transitions and persistence.
"""

import struct
import uuid

import attr

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

# state -> the states it may be entered from (Kafka's validPreviousStates)
VALID_PREVIOUS_STATES = {
    DEAD: frozenset([STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD]),
    COMPLETING_REBALANCE: frozenset([PREPARING_REBALANCE]),
    STABLE: frozenset([COMPLETING_REBALANCE]),
    PREPARING_REBALANCE: frozenset([STABLE, COMPLETING_REBALANCE, EMPTY]),
    EMPTY: frozenset([PREPARING_REBALANCE]),
}

UNKNOWN_MEMBER_ID = ""
CONSUMER_PROTOCOL_TYPE = "consumer"


@attr.s(slots=True, frozen=True)
class OffsetAndMetadata:
    offset = attr.ib()
    leader_epoch = attr.ib(default=-1)
    metadata = attr.ib(default="")
    commit_timestamp = attr.ib(default=-1)
    expire_timestamp = attr.ib(default=None)  # only set by OffsetCommit v2-v4 retention_time_ms


class MemberMetadata:
    """A member: its protocols and assignment, and the callbacks of its parked Join/Sync."""

    def __init__(self, member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                 session_timeout_ms, protocol_type, supported_protocols):
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.supported_protocols = list(supported_protocols)  # [(name, metadata bytes)]
        self.assignment = b""
        self.awaiting_join_callback = None
        self.awaiting_sync_callback = None
        self.is_new = False
        self.is_leaving = False
        self.heartbeat_satisfied = False

    @property
    def is_static_member(self):
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self):
        return self.awaiting_join_callback is not None

    @property
    def is_awaiting_sync(self):
        return self.awaiting_sync_callback is not None

    def has_satisfied_heartbeat(self):
        if self.is_leaving:
            return True
        if self.is_new:
            # New members can be expired while awaiting join.
            return self.heartbeat_satisfied
        if self.is_awaiting_join or self.is_awaiting_sync:
            return True
        return self.heartbeat_satisfied

    def protocols(self):
        return set(name for name, _ in self.supported_protocols)

    def metadata(self, protocol):
        for name, meta in self.supported_protocols:
            if name == protocol:
                return meta
        raise ValueError("member %s does not support protocol %s" % (self.member_id, protocol))

    def matches(self, protocols):
        protocols = list(protocols)
        if len(protocols) != len(self.supported_protocols):
            return False
        return all(a[0] == b[0] and bytes(a[1]) == bytes(b[1])
                   for a, b in zip(protocols, self.supported_protocols))

    def vote(self, candidates):
        """This member's preferred protocol among ``candidates``."""
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise ValueError("member %s does not support any of the candidate protocols" % self.member_id)

    def __repr__(self):
        return "MemberMetadata(%s, instance=%s, client=%s)" % (
            self.member_id, self.group_instance_id, self.client_id)


class GroupMetadata:
    def __init__(self, group_id, initial_state=EMPTY, now_ms=0):
        self.group_id = group_id
        self.state = initial_state
        self.current_state_timestamp = now_ms
        self.protocol_type = None
        self.protocol_name = None
        self.generation_id = 0
        self.leader_id = None
        self.members = {}  # member id -> MemberMetadata, insertion ordered
        self.pending_members = set()
        self.pending_sync_members = set()
        self.static_members = {}  # group instance id -> member id
        self.num_members_awaiting_join = 0
        self.supported_protocols = {}  # protocol name -> number of members supporting it
        self.new_member_added = False
        self.subscribed_topics = None  # None: unknown (non-consumer protocol or undecodable)
        self.offsets = {}  # (topic, partition) -> OffsetAndMetadata
        # producer id -> {(topic, partition): OffsetAndMetadata} written by TxnOffsetCommit,
        # visible in ``offsets`` only once that producer's transaction commits
        self.pending_txn_offsets = {}

    # -- state -----------------------------------------------------------------------------
    def is_(self, state):
        return self.state == state

    def can_rebalance(self):
        return self.state in VALID_PREVIOUS_STATES[PREPARING_REBALANCE]

    def transition_to(self, state, now_ms):
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise AssertionError("Group %s should be in %s states before moving to %s, was %s" % (
                self.group_id, sorted(VALID_PREVIOUS_STATES[state]), state, self.state))
        self.state = state
        self.current_state_timestamp = now_ms

    # -- members ---------------------------------------------------------------------------
    def has(self, member_id):
        return member_id in self.members

    def get(self, member_id):
        return self.members[member_id]

    def size(self):
        return len(self.members)

    def is_leader(self, member_id):
        return self.leader_id == member_id

    def generate_member_id(self, client_id, group_instance_id):
        prefix = group_instance_id if group_instance_id is not None else client_id
        return "%s-%s" % (prefix, uuid.uuid4())

    def add(self, member, callback=None):
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._inc_protocols(member)
        member.awaiting_join_callback = callback
        if member.is_awaiting_join:
            self.num_members_awaiting_join += 1
        self.pending_members.discard(member.member_id)

    def remove(self, member_id):
        member = self.members.pop(member_id, None)
        if member is not None:
            self._dec_protocols(member)
            if member.is_awaiting_join:
                self.num_members_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def update_member(self, member, protocols, callback):
        self._dec_protocols(member)
        member.supported_protocols = list(protocols)
        self._inc_protocols(member)
        if callback is not None and not member.is_awaiting_join:
            self.num_members_awaiting_join += 1
        elif callback is None and member.is_awaiting_join:
            self.num_members_awaiting_join -= 1
        member.awaiting_join_callback = callback

    def maybe_invoke_join_callback(self, member, result):
        if member.is_awaiting_join:
            cb = member.awaiting_join_callback
            member.awaiting_join_callback = None
            self.num_members_awaiting_join -= 1
            cb(result)

    def maybe_invoke_sync_callback(self, member, result):
        if member.is_awaiting_sync:
            cb = member.awaiting_sync_callback
            member.awaiting_sync_callback = None
            cb(result)
            return True
        return False

    def _inc_protocols(self, member):
        for name in member.protocols():
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) + 1

    def _dec_protocols(self, member):
        for name in member.protocols():
            n = self.supported_protocols.get(name, 0) - 1
            if n > 0:
                self.supported_protocols[name] = n
            else:
                self.supported_protocols.pop(name, None)

    # -- pending / static ------------------------------------------------------------------
    def add_pending_member(self, member_id):
        self.pending_members.add(member_id)

    def is_pending_member(self, member_id):
        return member_id in self.pending_members

    def has_static_member(self, group_instance_id):
        return group_instance_id in self.static_members

    def current_static_member_id(self, group_instance_id):
        return self.static_members.get(group_instance_id)

    def is_static_member_fenced(self, group_instance_id, member_id):
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def replace_static_member(self, group_instance_id, old_member_id, new_member_id, fenced_result):
        """Give the static member ``group_instance_id`` a new member id; a Join/Sync still
        parked under the old id is answered FENCED_INSTANCE_ID (``fenced_result(kind)``)."""
        member = self.members.pop(old_member_id)
        self.maybe_invoke_join_callback(member, fenced_result("join", old_member_id))
        self.maybe_invoke_sync_callback(member, fenced_result("sync", old_member_id))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return member

    def not_yet_rejoined_members(self):
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def has_all_members_joined(self):
        return len(self.members) == self.num_members_awaiting_join and not self.pending_members

    def has_received_sync_from_all_members(self):
        return not self.pending_sync_members

    def rebalance_timeout_ms(self):
        return max([m.rebalance_timeout_ms for m in self.members.values()] or [0])

    def maybe_elect_new_joined_leader(self):
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.is_awaiting_join:
                self.leader_id = member_id
                return True
        return False

    # -- protocols -------------------------------------------------------------------------
    def supports_protocols(self, member_protocol_type, member_protocols):
        if self.is_(EMPTY):
            return bool(member_protocol_type) and bool(member_protocols)
        return (self.protocol_type == member_protocol_type
                and any(self.supported_protocols.get(p, 0) == len(self.members) for p in member_protocols))

    def candidate_protocols(self):
        n = len(self.members)
        return set(p for p, count in self.supported_protocols.items() if count == n)

    def select_protocol(self):
        if not self.members:
            raise ValueError("Cannot select protocol for empty group")
        candidates = self.candidate_protocols()
        votes = {}
        order = []
        for member in self.members.values():
            p = member.vote(candidates)
            if p not in votes:
                order.append(p)
            votes[p] = votes.get(p, 0) + 1
        return max(order, key=lambda p: votes[p])

    def init_next_generation(self, now_ms):
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(EMPTY, now_ms)
        self.pending_sync_members = set()

    def current_member_metadata(self):
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                for m in self.members.values()]

    def compute_subscribed_topics(self):
        """The topics the members subscribe to, when every member speaks the consumer protocol."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None if self.members else set()
        topics = set()
        for m in self.members.values():
            try:
                topics.update(parse_subscription_topics(m.metadata(self.protocol_name)))
            except (ValueError, struct.error):
                return None
        return topics

    def is_subscribed_to_topic(self, topic):
        if self.subscribed_topics is None:
            return True  # unknown: be conservative
        return topic in self.subscribed_topics

    def is_consumer_group(self):
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    # -- offsets ---------------------------------------------------------------------------
    def has_offsets(self):
        """Committed offsets, or transactional ones waiting for their marker (Kafka counts
        both: such a group must not expire)."""
        return bool(self.offsets) or any(self.pending_txn_offsets.values())

    def remove_offsets(self, partitions):
        removed = {}
        for tp in partitions:
            om = self.offsets.pop(tp, None)
            if om is not None:
                removed[tp] = om
        return removed

    def __repr__(self):
        return "GroupMetadata(%s, %s, gen=%d, members=%d)" % (
            self.group_id, self.state, self.generation_id, len(self.members))


def parse_subscription_topics(data):
    """Topics of a ConsumerProtocolSubscription (any version: int16 version, then the array of
    topic names, classic encoding)."""
    buf = bytes(data)
    if len(buf) < 6:
        raise ValueError("short subscription")
    (n,) = struct.unpack_from(">i", buf, 2)
    pos = 6
    topics = []
    for _ in range(max(n, 0)):
        (ln,) = struct.unpack_from(">h", buf, pos)
        pos += 2
        if ln < 0 or pos + ln > len(buf):
            raise ValueError("bad topic length")
        topics.append(buf[pos:pos + ln].decode("utf-8"))
        pos += ln
    return topics
