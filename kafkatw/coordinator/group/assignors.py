"""The server-side assignors of consumer groups (KIP-848): ``uniform`` and ``range``, Kafka's
names for ``group.consumer.assignors`` / ``group.remote.assignor``. Each maps members and the
subscribed topics' partitions to a target assignment; none of them knows epochs, records or
reconciliation (``consumer_group`` does), nor which assignor a group picks (the coordinator).
"""

import attr


@attr.s(frozen=True, slots=True)
class AssignmentMember:
    """What an assignor sees of a member: the topic ids it subscribes to, its rack, and its
    current target (``{topic id: frozenset(partitions)}``) for stickiness."""

    member_id = attr.ib()
    topics = attr.ib()  # frozenset of topic ids
    rack = attr.ib(default=None)
    current = attr.ib(factory=dict)


@attr.s(frozen=True, slots=True)
class AssignmentTopic:
    """A subscribed topic: its partition count and, per partition, the racks of its replicas."""

    topic_id = attr.ib()
    name = attr.ib()
    num_partitions = attr.ib()
    partition_racks = attr.ib(factory=dict)  # partition -> frozenset of racks


def _racks_usable(members, topics):
    """Rack-aware only when some member and some partition have racks (Kafka's rule)."""
    return (any(m.rack for m in members)
            and any(racks for t in topics.values() for racks in t.partition_racks.values()))


def _rack_mismatch(member, topic, partition, rack_aware):
    if not rack_aware:
        return 0
    racks = topic.partition_racks.get(partition)
    return 0 if racks and member.rack in racks else 1


def _freeze(assignment):
    return {mid: {t: frozenset(ps) for t, ps in by_topic.items() if ps}
            for mid, by_topic in assignment.items()}


class UniformAssignor:
    """Kafka's UniformAssignor in spirit: every member subscribed to a partition's topic may get
    it, counts differ by at most one among members who could swap, and a partition stays with
    its current owner when that keeps the balance (so a join moves few partitions)."""

    name = "uniform"

    def assign(self, members, topics):
        """``members``: [AssignmentMember]; ``topics``: {topic id: AssignmentTopic}.
        Returns {member id: {topic id: frozenset(partitions)}}."""
        members = sorted(members, key=lambda m: m.member_id)
        rack_aware = _racks_usable(members, topics)
        if members and all(m.topics == members[0].topics for m in members):
            return self._assign_homogeneous(members, topics, rack_aware)
        out = {m.member_id: {} for m in members}
        count = {m.member_id: 0 for m in members}
        eligible = {}  # topic id -> [member]
        for m in members:
            for t in m.topics:
                if t in topics:
                    eligible.setdefault(t, []).append(m)
        owner = {}  # (topic id, partition) -> member id
        # quota a member may keep: its fair share of the partitions it can take
        partitions = [(t, p) for t in sorted(eligible, key=lambda t: topics[t].name)
                      for p in range(topics[t].num_partitions)]
        share = {}
        for t, p in partitions:
            elig = eligible[t]
            for m in elig:
                share[m.member_id] = share.get(m.member_id, 0.0) + 1.0 / len(elig)
        quota = {mid: int(-(-s // 1)) for mid, s in share.items()}  # ceil
        by_id = {m.member_id: m for m in members}
        for m in members:  # stickiness: keep current partitions up to the quota
            for t in sorted(m.current, key=lambda t: topics[t].name if t in topics else ""):
                if t not in topics or t not in m.topics:
                    continue
                for p in sorted(m.current[t]):
                    if p >= topics[t].num_partitions or (t, p) in owner:
                        continue
                    if count[m.member_id] >= quota.get(m.member_id, 0):
                        break
                    owner[(t, p)] = m.member_id
                    count[m.member_id] += 1
        for t, p in partitions:  # the rest to the least loaded eligible member
            if (t, p) in owner:
                continue
            best = min(eligible[t], key=lambda m: (count[m.member_id],
                                                   _rack_mismatch(m, topics[t], p, rack_aware),
                                                   m.member_id))
            owner[(t, p)] = best.member_id
            count[best.member_id] += 1
        self._balance(owner, count, eligible, topics, by_id, rack_aware)
        for (t, p), mid in owner.items():
            out[mid].setdefault(t, set()).add(p)
        return _freeze(out)

    @staticmethod
    def _assign_homogeneous(members, topics, rack_aware):
        """Everyone subscribes to the same topics (the common case, Kafka's
        OptimizedUniformAssignmentBuilder): quotas of P // M, P % M members one more (those
        already holding more first); each member keeps what it has up to its quota; the rest go
        to members below quota, on a partition's rack when racks are known. Linear in
        partitions and members."""
        subscribed = [t for t in members[0].topics if t in topics]
        subscribed.sort(key=lambda t: topics[t].name)
        total = sum(topics[t].num_partitions for t in subscribed)
        base, extra = divmod(total, len(members))
        out = {m.member_id: {} for m in members}
        target = {m.member_id: base for m in members}
        count = {m.member_id: 0 for m in members}
        taken = set()
        leftovers = {}
        for m in members:  # stickiness: keep up to the base quota
            mine = [(t, p) for t in subscribed for p in sorted(m.current.get(t, ()))
                    if p < topics[t].num_partitions and (t, p) not in taken]
            kept = mine[:base]
            leftovers[m.member_id] = mine[base:]
            for t, p in kept:
                out[m.member_id].setdefault(t, set()).add(p)
                taken.add((t, p))
            count[m.member_id] = len(kept)
        for m in members:  # the extra slots go first to members that had more
            if extra and leftovers[m.member_id]:
                t, p = leftovers[m.member_id][0]
                out[m.member_id].setdefault(t, set()).add(p)
                taken.add((t, p))
                count[m.member_id] += 1
                target[m.member_id] += 1
                extra -= 1
        for m in members:
            if not extra:
                break
            if target[m.member_id] == base:
                target[m.member_id] += 1
                extra -= 1
        by_rack = {}
        needy = [m for m in members if count[m.member_id] < target[m.member_id]]
        if rack_aware:
            for m in needy:
                by_rack.setdefault(m.rack, []).append(m)
        pos = {}

        def take(queue, key):
            i = pos.get(key, 0)
            while i < len(queue) and count[queue[i].member_id] >= target[queue[i].member_id]:
                i += 1
            pos[key] = i
            return queue[i] if i < len(queue) else None

        for t in subscribed:
            for p in range(topics[t].num_partitions):
                if (t, p) in taken:
                    continue
                best = None
                if rack_aware:
                    for rack in sorted(topics[t].partition_racks.get(p, ())):
                        best = take(by_rack.get(rack, []), rack)
                        if best is not None:
                            break
                if best is None:
                    best = take(needy, None)
                out[best.member_id].setdefault(t, set()).add(p)
                count[best.member_id] += 1
        return _freeze(out)

    @staticmethod
    def _balance(owner, count, eligible, topics, by_id, rack_aware):
        """Move partitions from a member holding 2+ more than another eligible one, until no
        such move is left (bounded: each move lowers the sum of squared counts)."""
        moved = True
        while moved:
            moved = False
            for (t, p), mid in sorted(owner.items(), key=lambda kv: (-count[kv[1]], kv[0][1])):
                target = min(eligible[t], key=lambda m: (
                    count[m.member_id], _rack_mismatch(m, topics[t], p, rack_aware), m.member_id))
                if count[mid] - count[target.member_id] >= 2:
                    owner[(t, p)] = target.member_id
                    count[mid] -= 1
                    count[target.member_id] += 1
                    moved = True


class RangeAssignor:
    """Kafka's range assignment per topic: the members subscribed to a topic, sorted by id,
    get contiguous ranges of its partitions, the first ``partitions % members`` one more.
    Rack-aware when racks are known: within its range size a member takes partitions on its
    rack first."""

    name = "range"

    def assign(self, members, topics):
        members = sorted(members, key=lambda m: m.member_id)
        rack_aware = _racks_usable(members, topics)
        out = {m.member_id: {} for m in members}
        for t in sorted(topics, key=lambda t: topics[t].name):
            subscribers = [m for m in members if t in m.topics]
            if not subscribers:
                continue
            n = topics[t].num_partitions
            per, extra = divmod(n, len(subscribers))
            sizes = [per + (1 if i < extra else 0) for i in range(len(subscribers))]
            if not rack_aware:
                start = 0
                for m, size in zip(subscribers, sizes):
                    out[m.member_id][t] = set(range(start, start + size))
                    start += size
                continue
            free = set(range(n))
            taken = {m.member_id: set() for m in subscribers}
            for m, size in zip(subscribers, sizes):
                for p in sorted(free):
                    if len(taken[m.member_id]) >= size:
                        break
                    if not _rack_mismatch(m, topics[t], p, True):
                        taken[m.member_id].add(p)
                        free.discard(p)
            for m, size in zip(subscribers, sizes):
                for p in sorted(free):
                    if len(taken[m.member_id]) >= size:
                        break
                    taken[m.member_id].add(p)
                    free.discard(p)
                out[m.member_id][t] = taken[m.member_id]
        return _freeze(out)


ASSIGNORS = {a.name: a for a in (UniformAssignor(), RangeAssignor())}


def assignors_from_config(names):
    """The assignors named by ``group.consumer.assignors`` in order; the first is the default.
    Raises ValueError naming an unknown one."""
    out = []
    for name in names:
        name = name.strip()
        if not name:
            continue
        if name not in ASSIGNORS:
            raise ValueError("group.consumer.assignors: unknown assignor %r (known: %s)"
                             % (name, ", ".join(sorted(ASSIGNORS))))
        out.append(ASSIGNORS[name])
    if not out:
        raise ValueError("group.consumer.assignors must name at least one assignor")
    return out
