"""``kafkatw partitions reassign``: Kafka's kafka-reassign-partitions.sh over
AlterPartitionReassignments / ListPartitionReassignments — ``--generate`` a plan, ``--execute``
it (``--plan`` too) with an optional ``--throttle``, ``--verify`` it (``--status``; clearing the
throttles once complete), ``--cancel`` it; Kafka's JSON files.

It talks to the controller; how a reassignment runs is the broker's.
"""

import json

from kafkatw.cli.client import ClientError, UsageError, check
from kafkatw.cli.topics import alter_configs
from kafkatw.protocol import errors, messages

ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 45, 46
INCREMENTAL_ALTER_CONFIGS = 44
TOPIC, BROKER = 2, 4
LEADER_RATE, FOLLOWER_RATE = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
LEADER_REPLICAS, FOLLOWER_REPLICAS = "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"


def add_parser(sub):
    p = sub.add_parser("partitions", help="move partition replicas between brokers")
    psub = p.add_subparsers(dest="action", metavar="ACTION")
    psub.required = True
    q = psub.add_parser("reassign", help="generate, execute, verify or cancel a partition reassignment "
                                         "(kafka-reassign-partitions.sh)")
    mode = q.add_mutually_exclusive_group(required=True)
    mode.add_argument("--generate", action="store_true", help="propose a plan for --topics-to-move-json-file")
    mode.add_argument("--execute", "--plan", dest="execute", action="store_true",
                      help="start the reassignment in --reassignment-json-file")
    mode.add_argument("--verify", "--status", dest="verify", action="store_true",
                      help="report each partition of the plan; once all are done, clear the throttles")
    mode.add_argument("--cancel", action="store_true", help="cancel the plan's running reassignments")
    mode.add_argument("--list", action="store_true", help="list the reassignments in progress")
    q.add_argument("--topics-to-move-json-file", metavar="FILE")
    q.add_argument("--reassignment-json-file", metavar="FILE")
    q.add_argument("--broker-list", metavar="ID,ID", help="the brokers --generate may use")
    q.add_argument("--throttle", type=int, default=-1, metavar="BYTES/S",
                   help="with --execute: limit replication of the moving partitions to this rate")
    q.add_argument("--preserve-throttles", action="store_true",
                   help="with --verify or --cancel: leave the throttles in place")
    q.set_defaults(func=cmd_reassign)


# -- files -------------------------------------------------------------------------------------

def _read_json(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise ClientError("cannot read %s %s: %s" % (what, path, e.strerror)) from None
    except ValueError as e:
        raise UsageError("%s %s is not JSON: %s" % (what, path, e)) from None


def parse_reassignment(doc):
    """``{(topic, partition): [replicas]}`` of Kafka's reassignment JSON (``log_dirs`` other
    than ``any`` are refused: moving between log dirs is AlterReplicaLogDirs' business)."""
    try:
        entries = doc["partitions"]
        plan = {}
        for e in entries:
            tp = (str(e["topic"]), int(e["partition"]))
            replicas = [int(r) for r in e["replicas"]]
            if any(d != "any" for d in e.get("log_dirs", ())):
                raise UsageError("log_dirs other than \"any\" are not supported (%s-%d)" % tp)
            if tp in plan:
                raise UsageError("partition %s-%d appears twice in the reassignment" % tp)
            if len(set(replicas)) != len(replicas):
                raise UsageError("partition %s-%d has duplicate replicas %s" % (tp + (replicas,)))
            plan[tp] = replicas
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError("not a partition reassignment document (%s: %s)" % (type(e).__name__, e)) from None
    if not plan:
        raise UsageError("the partition reassignment document lists no partitions")
    return plan


def format_reassignment(plan):
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(plan.items())]}, separators=(",", ":"))


# -- the cluster ---------------------------------------------------------------------------------

def _controller(client):
    md = client.metadata([])
    if md.controller_id < 0:
        raise ClientError("the cluster has no controller right now")
    return client.node(md.controller_id)


def current_assignment(client, topics):
    """``{(topic, partition): [replicas]}`` and ``{broker id: rack}`` from Metadata."""
    md = client.metadata(sorted(topics))
    out = {}
    for t in md.topics:
        check(t.error_code, None, "topic %s" % t.name)
        for p in t.partitions:
            out[(t.name, p.partition_index)] = list(p.replica_nodes)
    return out, {b.node_id: b.rack for b in md.brokers}


def alter_reassignments(client, targets):
    """``{tp: (error code, message)}`` of AlterPartitionReassignments (None target: cancel)."""
    by_topic = {}
    for (t, p), r in sorted(targets.items()):
        by_topic.setdefault(t, []).append(
            messages.AlterPartitionReassignmentsRequest.ReassignablePartition(partition_index=p, replicas=r))
    R = messages.AlterPartitionReassignmentsRequest
    body = R(timeout_ms=60000, topics=[R.ReassignableTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
    resp = client.call(body, _controller(client))
    check(resp.error_code, resp.error_message, "AlterPartitionReassignments")
    return {(t.name, p.partition_index): (p.error_code, p.error_message)
            for t in resp.responses for p in t.partitions}


def list_reassignments(client, tps=None):
    """``{(topic, partition): (replicas, adding, removing)}`` of the running reassignments."""
    R = messages.ListPartitionReassignmentsRequest
    topics = None
    if tps is not None:
        by_topic = {}
        for t, p in sorted(tps):
            by_topic.setdefault(t, []).append(p)
        topics = [R.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
    resp = client.call(R(timeout_ms=60000, topics=topics), _controller(client))
    check(resp.error_code, resp.error_message, "ListPartitionReassignments")
    return {(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for t in resp.topics for p in t.partitions}


def set_throttles(client, plan, current, rate):
    """Kafka's ReassignPartitionsCommand: the moving partitions' current replicas are
    leader-throttled, their new replicas follower-throttled, and every broker involved gets
    ``rate`` as both replication rates (a per-broker dynamic config, sent to that broker)."""
    leaders, followers = {}, {}
    brokers = set()
    for (t, p), target in plan.items():
        before = current.get((t, p), [])
        if sorted(before) == sorted(target):
            continue
        leaders.setdefault(t, []).extend("%d:%d" % (p, b) for b in before)
        followers.setdefault(t, []).extend("%d:%d" % (p, b) for b in target if b not in before)
        brokers |= set(before) | set(target)
    for t in sorted(set(leaders) | set(followers)):
        alter_configs(client, TOPIC, t, {LEADER_REPLICAS: ",".join(leaders.get(t, [])),
                                         FOLLOWER_REPLICAS: ",".join(followers.get(t, []))}, [],
                      "altering the configs of %s" % t)
    for b in sorted(brokers):
        alter_configs(client, BROKER, str(b), {LEADER_RATE: rate, FOLLOWER_RATE: rate}, [],
                      "altering the configs of %d" % b, client.node(b))
    return sorted(brokers)


def clear_throttles(client, topics, brokers, out):
    out.write("Clearing broker-level throttles on brokers %s\n" % ",".join(str(b) for b in sorted(brokers)))
    for b in sorted(brokers):
        try:
            alter_configs(client, BROKER, str(b), {}, [LEADER_RATE, FOLLOWER_RATE],
                          "altering the configs of %d" % b, client.node(b))
        except ClientError as e:
            out.write("Could not clear the throttles of broker %d: %s\n" % (b, e))
    for t in sorted(topics):
        out.write("Clearing topic-level throttles on topic %s\n" % t)
        alter_configs(client, TOPIC, t, {}, [LEADER_REPLICAS, FOLLOWER_REPLICAS],
                      "altering the configs of %s" % t)


# -- the modes -----------------------------------------------------------------------------------

def spread(n_partitions, rf, brokers, start):
    """Kafka's rack-unaware assignReplicasToBrokers: replica 0 round-robin from ``start``, the
    others at a shift that grows every pass over the brokers."""
    n = len(brokers)
    out = {}
    shift = start
    for p in range(n_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [brokers[first]]
        for j in range(rf - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        out[p] = replicas
    return out


def generate(client, topics, broker_list, rng=None):
    """``(current, proposed)``: each topic's partitions spread over ``broker_list`` with its
    replication factor, as Kafka's --generate (rack-unaware, a random start per topic)."""
    import random

    rng = rng or random
    current, racks = current_assignment(client, topics)
    missing = [b for b in broker_list if b not in racks]
    if missing:
        raise UsageError("brokers %s in --broker-list are not in the cluster" % missing)
    brokers = sorted(set(broker_list))
    proposed = {}
    for topic in sorted(topics):
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])])
        if rf > len(brokers):
            raise ClientError("cannot place %s: replication factor %d is more than the %d broker(s) listed"
                              % (topic, rf, len(brokers)))
        assignment = spread(len(parts), rf, brokers, rng.randrange(len(brokers)))
        for i, p in enumerate(parts):
            proposed[(topic, p)] = assignment[i]
    return current, proposed


def cmd_reassign(client, args):
    out = args.out
    if args.list:
        found = list_reassignments(client)
        if not found:
            out.write("No partition reassignments found.\n")
        for (t, p), (replicas, adding, removing) in sorted(found.items()):
            out.write("%s-%d: replicas: %s. adding: %s. removing: %s.\n"
                      % (t, p, ",".join(map(str, replicas)), ",".join(map(str, adding)), ",".join(map(str, removing))))
        return 0
    if args.generate:
        if not args.topics_to_move_json_file or not args.broker_list:
            raise UsageError("--generate needs --topics-to-move-json-file and --broker-list")
        doc = _read_json(args.topics_to_move_json_file, "--topics-to-move-json-file")
        try:
            topics = sorted({str(t["topic"]) for t in doc["topics"]})
            brokers = [int(b) for b in args.broker_list.split(",") if b.strip()]
        except (KeyError, TypeError, ValueError) as e:
            raise UsageError("bad topics to move or broker list (%s)" % (e,)) from None
        if not topics:
            raise UsageError("--topics-to-move-json-file lists no topics")
        current, proposed = generate(client, topics, brokers)
        out.write("Current partition replica assignment\n%s\n\n" % format_reassignment(current))
        out.write("Proposed partition reassignment configuration\n%s\n" % format_reassignment(proposed))
        return 0
    if not args.reassignment_json_file:
        raise UsageError("this mode needs --reassignment-json-file")
    plan = parse_reassignment(_read_json(args.reassignment_json_file, "--reassignment-json-file"))
    topics = sorted({t for t, _ in plan})
    if args.execute:
        current, _ = current_assignment(client, topics)
        unknown = [tp for tp in plan if tp not in current]
        if unknown:
            raise ClientError("the partitions %s do not exist" % ", ".join("%s-%d" % tp for tp in sorted(unknown)))
        if list_reassignments(client, list(plan)):
            raise ClientError("there is an existing assignment running for these partitions")
        out.write("Current partition replica assignment\n\n%s\n\n" % format_reassignment(
            {tp: current[tp] for tp in plan}))
        out.write("Save this to use as the --reassignment-json-file option during rollback\n")
        if args.throttle >= 0:
            brokers = set_throttles(client, plan, current, args.throttle)
            out.write("Warning: You must run --verify periodically, until the reassignment completes, to "
                      "ensure the throttle is removed.\nThe inter-broker throttle limit was set to %d B/s "
                      "on brokers %s\n" % (args.throttle, ",".join(map(str, brokers))))
        results = alter_reassignments(client, plan)
        return _report(results, "started", out)
    if args.cancel:
        running = list_reassignments(client, list(plan))
        results = alter_reassignments(client, {tp: None for tp in running}) if running else {}
        status = _report(results, "cancelled", out)
        if not args.preserve_throttles:
            current, _ = current_assignment(client, topics)
            brokers = {b for tp in plan for b in plan[tp] + current.get(tp, [])}
            clear_throttles(client, topics, brokers, out)
        return status
    # --verify
    running = list_reassignments(client, list(plan))
    current, _ = current_assignment(client, topics)
    out.write("Status of partition reassignment:\n")
    done = True
    for tp in sorted(plan):
        if tp in running:
            done = False
            out.write("Reassignment of partition %s-%d is still in progress.\n" % tp)
        elif current.get(tp) == plan[tp]:
            out.write("Reassignment of partition %s-%d is completed.\n" % tp)
        else:
            done = False
            out.write("There is no active reassignment of partition %s-%d, but replica set is %s rather "
                      "than %s.\n" % (tp + (current.get(tp), plan[tp])))
    if done and not args.preserve_throttles:
        out.write("\n")
        brokers = {b for tp in plan for b in plan[tp]} | set(_all_brokers(client))
        clear_throttles(client, topics, brokers, out)
    return 0 if done else 1


def _all_brokers(client):
    return [b.node_id for b in client.metadata([]).brokers]


def _report(results, what, out):
    ok = sorted(tp for tp, (code, _) in results.items() if code == errors.NONE)
    failed = sorted((tp, r) for tp, r in results.items() if r[0] != errors.NONE)
    if ok:
        out.write("Successfully %s partition reassignments for: %s\n" % (what, ",".join("%s-%d" % tp for tp in ok)))
    if failed:
        lines = ["%s-%d: %s" % (tp + ((msg or errors.error_name(code)),)) for tp, (code, msg) in failed]
        raise ClientError("Error reassigning partition(s):\n" + "\n".join(lines))
    return 0
