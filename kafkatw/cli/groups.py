"""``kafkatw groups list|describe|delete|reset-offsets`` over ListGroups, DescribeGroups,
ConsumerGroupDescribe (KIP-848 groups: epochs, current and target assignments), OffsetFetch,
OffsetCommit, DeleteGroups and ListOffsets, as Kafka's kafka-consumer-groups (reset is a dry
run unless ``--execute``). It never joins a group.
"""

from kafkatw.cli.client import ClientError, UsageError, check
from kafkatw.cli.consume import EARLIEST, LATEST, commit_offsets, parse_timestamp
from kafkatw.cli.helpers import print_table
from kafkatw.cli.output import wants_json, write_json
from kafkatw.protocol import errors, messages


def add_parser(sub):
    p = sub.add_parser("groups", help="list, describe, delete consumer groups and reset their offsets")
    gsub = p.add_subparsers(dest="action", metavar="ACTION")
    gsub.required = True
    q = gsub.add_parser("list", help="list group ids")
    q.add_argument("--state", action="store_true", help="show the group states")
    q.add_argument("--type", action="store_true", help="show the group types (classic, consumer)")
    q.set_defaults(func=cmd_list)
    q = gsub.add_parser("describe", help="offsets and lag per partition, and members")
    q.add_argument("--group", required=True, action="append")
    q.add_argument("--members", action="store_true", help="show members instead of offsets")
    q.add_argument("--verbose", action="store_true",
                   help="with --members: epochs, current and target assignments (consumer groups)")
    q.add_argument("--state", action="store_true",
                   help="show the group's state, assignor and epochs instead of offsets")
    q.set_defaults(func=cmd_describe)
    q = gsub.add_parser("delete", help="delete empty groups")
    q.add_argument("--group", required=True, action="append")
    q.set_defaults(func=cmd_delete)
    q = gsub.add_parser("reset-offsets", help="reset committed offsets (dry run unless --execute)")
    q.add_argument("--group", required=True)
    scope = q.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,P]")
    scope.add_argument("--all-topics", action="store_true")
    to = q.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int)
    to.add_argument("--to-datetime", metavar="ISO-8601|MS")
    run = q.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="commit the new offsets")
    run.add_argument("--dry-run", action="store_true", help="only show them (default)")
    q.set_defaults(func=cmd_reset)


def cmd_list(client, args):
    resp = client.call(messages.ListGroupsRequest())
    check(resp.error_code, what="ListGroups")
    groups = sorted(resp.groups, key=lambda g: g.group_id)
    if wants_json(args):
        write_json(args.out, [{"group": g.group_id, "state": g.group_state or None,
                               "protocolType": g.protocol_type, "type": g.group_type or None}
                              for g in groups])
    elif args.state or args.type:
        headers = ["GROUP"] + (["TYPE"] if args.type else []) + (["STATE"] if args.state else [])
        print_table(headers, [[g.group_id] + ([g.group_type or "-"] if args.type else [])
                              + ([g.group_state or "-"] if args.state else []) for g in groups],
                    args.out)
    else:
        for g in groups:
            args.out.write(g.group_id + "\n")


def _fetch_all_offsets(client, conn, group):
    """{(topic, partition): committed} of every partition the group has committed."""
    resp = client.call(messages.OffsetFetchRequest(group_id=group, topics=None), conn)
    check(getattr(resp, "error_code", 0), what="OffsetFetch for group %s" % group)
    out = {}
    for t in resp.topics:
        for p in t.partitions:
            check(p.error_code, what="OffsetFetch %s-%d" % (t.name, p.partition_index))
            if p.committed_offset >= 0:
                out[(t.name, p.partition_index)] = p.committed_offset
    return out


def _describe_group(client, conn, group):
    resp = client.call(messages.DescribeGroupsRequest(groups=[group]), conn)
    g = resp.groups[0]
    check(g.error_code, what="DescribeGroups %s" % group)
    return g


CONSUMER_GROUP_DESCRIBE = 69


def _consumer_describe(client, conn, group):
    """The ConsumerGroupDescribe answer for a KIP-848 group, or None (a classic group, or a
    broker without the API)."""
    if CONSUMER_GROUP_DESCRIBE not in conn.api_versions:
        return None
    resp = client.call(messages.ConsumerGroupDescribeRequest(group_ids=[group]), conn)
    g = resp.groups[0]
    if g.error_code == errors.GROUP_ID_NOT_FOUND:  # not a consumer group
        return None
    check(g.error_code, g.error_message, "ConsumerGroupDescribe %s" % group)
    return g


def format_assignment(assignment):
    """Kafka's tool's form: ``topic:0,1,2;other:0`` (``-`` when empty)."""
    parts = ["%s:%s" % (tp.topic_name, ",".join(str(p) for p in sorted(tp.partitions)))
             for tp in sorted(assignment.topic_partitions, key=lambda tp: tp.topic_name)
             if tp.partitions]
    return ";".join(parts) or "-"


def _partition_count(assignment):
    return sum(len(tp.partitions) for tp in assignment.topic_partitions)


def _print_consumer_members(group, cg, verbose, out):
    headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    if verbose:
        headers += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
    rows = []
    for m in sorted(cg.members, key=lambda m: m.member_id):
        row = [group, m.member_id, m.client_host, m.client_id, _partition_count(m.assignment)]
        if verbose:
            row += [m.member_epoch, format_assignment(m.assignment), cg.assignment_epoch,
                    format_assignment(m.target_assignment)]
        rows.append(row)
    print_table(headers, rows, out)


def cmd_describe(client, args):
    described = []
    for group in args.group:
        conn = client.coordinator(group)
        g = _describe_group(client, conn, group)
        if g.group_state == "Dead":
            raise ClientError("Consumer group '%s' does not exist." % group)
        cg = _consumer_describe(client, conn, group) if g.protocol_type == "consumer" else None
        if wants_json(args):
            described.append(_group_json(client, conn, g, cg))
            continue
        if args.state:
            headers = ["GROUP", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
            row = [group, g.protocol_data or "-", g.group_state, len(g.members)]
            if cg is not None:
                headers[3:3] = ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
                row[3:3] = [cg.group_epoch, cg.assignment_epoch]
            print_table(headers, [row], args.out)
            continue
        if args.members and cg is not None:
            _print_consumer_members(group, cg, args.verbose, args.out)
            continue
        if args.members:
            print_table(["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID"],
                        [[group, m.member_id, m.client_host, m.client_id] for m in g.members], args.out)
            continue
        committed = _fetch_all_offsets(client, conn, group)
        if not committed:
            args.out.write("Consumer group '%s' has no committed offsets (state %s).\n" % (group, g.group_state))
            continue
        owners = {}  # (topic, partition) -> member, for a consumer group
        for m in (cg.members if cg is not None else ()):
            for tp in m.assignment.topic_partitions:
                for p in tp.partitions:
                    owners[(tp.topic_name, p)] = [m.member_id, m.client_host, m.client_id]
        rows = []
        for topic in sorted({t for t, _ in committed}):
            parts = sorted(p for t, p in committed if t == topic)
            ends = client.list_offsets(topic, parts, LATEST)
            for p in parts:
                cur = committed[(topic, p)]
                rows.append([group, topic, p, cur, ends[p], ends[p] - cur]
                            + owners.get((topic, p), ["-", "-", "-"]))
        print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                     "CONSUMER-ID", "HOST", "CLIENT-ID"], rows, args.out)
    if wants_json(args):
        write_json(args.out, described)


def _assignment_json(assignment):
    return [{"topic": tp.topic_name, "partitions": sorted(tp.partitions)}
            for tp in sorted(assignment.topic_partitions, key=lambda tp: tp.topic_name)]


def _group_json(client, conn, g, cg=None):
    """One described group as JSON: state, members, and offsets with lag per partition; for a
    consumer group also its epochs and each member's epoch, current and target assignment."""
    committed = _fetch_all_offsets(client, conn, g.group_id)
    offsets = []
    for topic in sorted({t for t, _ in committed}):
        parts = sorted(p for t, p in committed if t == topic)
        ends = client.list_offsets(topic, parts, LATEST)
        offsets += [{"topic": topic, "partition": p, "currentOffset": committed[(topic, p)],
                     "logEndOffset": ends[p], "lag": ends[p] - committed[(topic, p)]} for p in parts]
    out = {"group": g.group_id, "state": g.group_state, "protocolType": g.protocol_type,
           "members": [{"memberId": m.member_id, "clientId": m.client_id, "clientHost": m.client_host}
                       for m in g.members],
           "offsets": offsets}
    if cg is not None:
        out.update({"type": "consumer", "groupEpoch": cg.group_epoch,
                    "targetAssignmentEpoch": cg.assignment_epoch, "assignor": cg.assignor_name})
        out["members"] = [{"memberId": m.member_id, "clientId": m.client_id,
                           "clientHost": m.client_host, "memberEpoch": m.member_epoch,
                           "assignment": _assignment_json(m.assignment),
                           "targetAssignment": _assignment_json(m.target_assignment)}
                          for m in sorted(cg.members, key=lambda m: m.member_id)]
    return out


def cmd_delete(client, args):
    failed = False
    for group in args.group:
        conn = client.coordinator(group)
        resp = client.call(messages.DeleteGroupsRequest(groups_names=[group]), conn)
        for r in resp.results:
            if r.error_code:
                from kafkatw.protocol.errors import error_name
                args.out.write("Deletion of group '%s' failed: %s\n" % (r.group_id, error_name(r.error_code)))
                failed = True
            else:
                args.out.write("Deletion of requested consumer groups ('%s') was successful.\n" % r.group_id)
    if failed:
        raise ClientError("some groups could not be deleted")


def _scope(client, conn, args):
    """[(topic, [partitions])] the reset applies to."""
    if args.all_topics:
        committed = _fetch_all_offsets(client, conn, args.group)
        topics = sorted({t for t, _ in committed})
        return [(t, sorted(client.topic_partitions(t))) for t in topics]
    out = []
    for item in args.topic:
        topic, sep, parts = item.partition(":")
        all_parts = sorted(client.topic_partitions(topic))
        if sep:
            try:
                wanted = sorted(int(x) for x in parts.split(",") if x.strip())
            except ValueError:
                raise UsageError("invalid partition list in %r" % (item,))
            for p in wanted:
                if p not in all_parts:
                    raise ClientError("topic %s has no partition %d" % (topic, p))
            out.append((topic, wanted))
        else:
            out.append((topic, all_parts))
    return out


def cmd_reset(client, args):
    conn = client.coordinator(args.group)
    g = _describe_group(client, conn, args.group)
    if args.execute and g.group_state not in ("Empty", "Dead", ""):
        raise ClientError("Assignments can only be reset if the group '%s' is inactive, but the "
                          "current state is %s." % (args.group, g.group_state))
    rows = []
    plan = {}
    for topic, parts in _scope(client, conn, args):
        if not parts:
            continue
        earliest = client.list_offsets(topic, parts, EARLIEST)
        latest = client.list_offsets(topic, parts, LATEST)
        if args.to_earliest:
            new = earliest
        elif args.to_latest:
            new = latest
        elif args.to_offset is not None:
            new = {p: min(max(args.to_offset, earliest[p]), latest[p]) for p in parts}
        else:
            found = client.list_offsets(topic, parts, parse_timestamp(args.to_datetime))
            new = {p: found[p] if found[p] >= 0 else latest[p] for p in parts}
        plan[topic] = new
        rows += [[args.group, topic, p, new[p]] for p in parts]
    if wants_json(args):
        write_json(args.out, [{"group": g, "topic": t, "partition": p, "newOffset": o} for g, t, p, o in rows])
    else:
        print_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows, args.out)
    if args.execute:
        for topic, offsets in plan.items():
            commit_offsets(client, conn, args.group, topic, offsets)
