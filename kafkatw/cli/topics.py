"""``kafkatw topics list|describe|create|delete|alter``: Metadata, CreateTopics, DeleteTopics,
CreatePartitions, DescribeConfigs and IncrementalAlterConfigs as Kafka's kafka-topics does.
"""

from kafkatw.cli.client import ClientError, UsageError, check
from kafkatw.cli.helpers import parse_kv, print_table
from kafkatw.cli.output import wants_json, write_json
from kafkatw.protocol import messages
from kafkatw.protocol.uuids import uuid_to_base64

TOPIC_RESOURCE = 2
TOPIC_CONFIG_SOURCE = 1

#: kafka-topics --describe's partition filters (several list the partitions matching any of them).
REPORTS = (
    ("--under-replicated-partitions", "only partitions whose ISR is smaller than their replicas"),
    ("--unavailable-partitions", "only partitions without a leader or whose leader is not live"),
    ("--under-min-isr-partitions", "only partitions without a leader or whose ISR is below min.insync.replicas"),
    ("--at-min-isr-partitions", "only partitions whose ISR is exactly min.insync.replicas"),
)


def add_parser(sub):
    p = sub.add_parser("topics", help="list, describe, create, delete and alter topics")
    tsub = p.add_subparsers(dest="action", metavar="ACTION")
    tsub.required = True

    q = tsub.add_parser("list", help="list topic names")
    q.add_argument("--exclude-internal", action="store_true", help="leave out internal topics")
    q.set_defaults(func=cmd_list)

    q = tsub.add_parser("describe", help="partitions, leaders, replicas and overridden configs")
    q.add_argument("--topic", action="append", help="topic(s) to describe (default: all)")
    q.add_argument("--exclude-internal", action="store_true")
    for flag, text in REPORTS:
        q.add_argument(flag, action="store_true", help=text)
    q.set_defaults(func=cmd_describe)

    q = tsub.add_parser("create", help="create a topic")
    q.add_argument("--topic", required=True)
    q.add_argument("--partitions", type=int, default=-1, help="default: the broker's num.partitions")
    q.add_argument("--replication-factor", type=int, default=-1)
    q.add_argument("--config", action="append", metavar="KEY=VALUE", help="topic config override")
    q.add_argument("--if-not-exists", action="store_true")
    q.add_argument("--validate-only", action="store_true")
    q.set_defaults(func=cmd_create)

    q = tsub.add_parser("delete", help="delete a topic")
    q.add_argument("--topic", required=True, action="append")
    q.add_argument("--if-exists", action="store_true")
    q.set_defaults(func=cmd_delete)

    q = tsub.add_parser("alter", help="add partitions or change topic configs")
    q.add_argument("--topic", required=True)
    q.add_argument("--partitions", type=int, help="new total number of partitions (increase only)")
    q.add_argument("--config", action="append", metavar="KEY=VALUE", help="set a topic config")
    q.add_argument("--delete-config", action="append", metavar="KEY", help="remove a topic config override")
    q.set_defaults(func=cmd_alter)


def _topics(client, names=None):
    md = client.metadata(names)
    out = []
    for t in md.topics:
        if names is not None:
            check(t.error_code, what="topic %s" % t.name)
        out.append(t)
    return sorted(out, key=lambda t: t.name)


def cmd_list(client, args):
    topics = [t for t in _topics(client) if not (args.exclude_internal and t.is_internal)]
    if wants_json(args):
        write_json(args.out, [{"name": t.name, "internal": bool(t.is_internal)} for t in topics])
        return
    for t in topics:
        args.out.write(t.name + "\n")


def describe_configs(client, topic):
    """{name: value} of a topic's overridden configs (or {} when the broker can't say)."""
    conn = client.any_connection()
    if 32 not in conn.api_versions:
        return {}
    req = messages.DescribeConfigsRequest(resources=[messages.DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=TOPIC_RESOURCE, resource_name=topic, configuration_keys=None)])
    resp, version = client.request(req)
    out = {}
    for r in resp.results:
        check(r.error_code, r.error_message, "DescribeConfigs %s" % topic)
        for c in r.configs:
            dynamic = (c.config_source == TOPIC_CONFIG_SOURCE) if version >= 1 else not c.is_default
            if dynamic:
                out[c.name] = c.value
    return out


def min_insync_replicas(client, topic):
    """The topic's effective min.insync.replicas (its override or the broker's default)."""
    req = messages.DescribeConfigsRequest(resources=[messages.DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=TOPIC_RESOURCE, resource_name=topic, configuration_keys=["min.insync.replicas"])])
    for r in client.call(req).results:
        check(r.error_code, r.error_message, "DescribeConfigs %s" % topic)
        for c in r.configs:
            if c.name == "min.insync.replicas" and c.value is not None:
                return int(c.value)
    raise ClientError("the broker did not say topic %s's min.insync.replicas" % topic)


def partition_reports(partition, live_brokers, min_isr):
    """Which of kafka-topics' filters (the option names, without dashes) ``partition`` matches,
    with Kafka's rules: a partition without a leader is unavailable and under min ISR."""
    has_leader = partition.leader_id >= 0
    isr = len(partition.isr_nodes)
    found = set()
    if isr < len(partition.replica_nodes):
        found.add("under_replicated_partitions")
    if not has_leader or partition.leader_id not in live_brokers:
        found.add("unavailable_partitions")
    if not has_leader or isr < min_isr:
        found.add("under_min_isr_partitions")
    if isr == min_isr:
        found.add("at_min_isr_partitions")
    return found


def cmd_describe(client, args):
    reports = {flag[2:].replace("-", "_") for flag, _ in REPORTS if getattr(args, flag[2:].replace("-", "_"))}
    if reports:
        return describe_filtered(client, args, reports)
    topics = _topics(client, args.topic)
    described = []
    for t in topics:
        if args.exclude_internal and t.is_internal:
            continue
        configs = describe_configs(client, t.name)

        rf = len(t.partitions[0].replica_nodes) if t.partitions else 0
        tid = uuid_to_base64(t.topic_id) if getattr(t, "topic_id", None) else "-"
        if wants_json(args):
            described.append({
                "name": t.name, "topicId": tid, "internal": bool(t.is_internal),
                "partitionCount": len(t.partitions), "replicationFactor": rf, "configs": configs,
                "partitions": [{"partition": p.partition_index, "leader": p.leader_id,
                                "replicas": list(p.replica_nodes), "isr": list(p.isr_nodes)}
                               for p in sorted(t.partitions, key=lambda p: p.partition_index)]})
            continue
        args.out.write("Topic: %s\tTopicId: %s\tPartitionCount: %d\tReplicationFactor: %d\tConfigs: %s\n"
                       % (t.name, tid, len(t.partitions), rf,
                          ",".join("%s=%s" % kv for kv in sorted(configs.items()))))
        rows = [[t.name, p.partition_index, p.leader_id, ",".join(map(str, p.replica_nodes)),
                 ",".join(map(str, p.isr_nodes))]
                for p in sorted(t.partitions, key=lambda p: p.partition_index)]
        print_table(["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"], rows, args.out)
    if wants_json(args):
        write_json(args.out, described)


def describe_filtered(client, args, reports):
    """Only the partitions matching one of ``reports``, without the topic lines (as Kafka)."""
    md = client.metadata(args.topic)
    live = {b.node_id for b in md.brokers}
    rows = []
    for t in sorted(md.topics, key=lambda t: t.name):
        if args.topic is not None:
            check(t.error_code, what="topic %s" % t.name)
        if args.exclude_internal and t.is_internal:
            continue
        needs_min_isr = reports & {"under_min_isr_partitions", "at_min_isr_partitions"}
        min_isr = min_insync_replicas(client, t.name) if needs_min_isr else 0
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            if partition_reports(p, live, min_isr) & reports:
                rows.append((t.name, p))
    if wants_json(args):
        write_json(args.out, [{"topic": name, "partition": p.partition_index, "leader": p.leader_id,
                               "replicas": list(p.replica_nodes), "isr": list(p.isr_nodes),
                               "offline": list(p.offline_replicas)} for name, p in rows])
        return
    print_table(["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "OFFLINE"],
                [[name, p.partition_index, p.leader_id if p.leader_id >= 0 else "none",
                  ",".join(map(str, p.replica_nodes)), ",".join(map(str, p.isr_nodes)),
                  ",".join(map(str, p.offline_replicas))] for name, p in rows], args.out)


def cmd_create(client, args):
    configs = parse_kv(args.config, "config")
    R = messages.CreateTopicsRequest
    req = R(topics=[R.CreatableTopic(
        name=args.topic, num_partitions=args.partitions, replication_factor=args.replication_factor,
        configs=[R.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])],
        timeout_ms=30000, validate_only=args.validate_only)
    conn = client.any_connection()
    version = conn.version_for(19)
    if version < 4 and (args.partitions == -1 or args.replication_factor == -1):
        req.topics[0].num_partitions = 1 if args.partitions == -1 else args.partitions
        req.topics[0].replication_factor = 1 if args.replication_factor == -1 else args.replication_factor
    if version == 0:
        req.validate_only = False
    resp = conn.send(req, version)
    for r in resp.topics:
        if r.error_code == 36 and args.if_not_exists:  # TOPIC_ALREADY_EXISTS
            return
        check(r.error_code, getattr(r, "error_message", None), "create topic %s" % r.name)
    args.out.write("%s topic %s.\n" % ("Validated" if args.validate_only else "Created", args.topic))


def cmd_delete(client, args):
    conn = client.any_connection()
    version = conn.version_for(20)
    R = messages.DeleteTopicsRequest
    if version >= 6:
        req = R(topics=[R.DeleteTopicState(name=t) for t in args.topic], timeout_ms=30000)
    else:
        req = R(topic_names=list(args.topic), timeout_ms=30000)
    resp = conn.send(req, version)
    for r in resp.responses:
        if r.error_code == 3 and args.if_exists:  # UNKNOWN_TOPIC_OR_PARTITION
            continue
        check(r.error_code, getattr(r, "error_message", None), "delete topic %s" % r.name)
        args.out.write("Deleted topic %s.\n" % r.name)


def alter_configs(client, resource_type, name, sets, deletes, what, conn=None):
    """IncrementalAlterConfigs: SET ``sets`` (values as strings) and DELETE ``deletes`` on one
    resource, sent on ``conn`` (a broker's own, for its per-broker configs) if given."""
    R = messages.IncrementalAlterConfigsRequest
    ops = [R.AlterableConfig(name=k, config_operation=0, value=str(v)) for k, v in sets.items()]
    ops += [R.AlterableConfig(name=k, config_operation=1, value=None) for k in deletes]
    req = R(resources=[R.AlterConfigsResource(resource_type=resource_type, resource_name=name,
                                              configs=ops)], validate_only=False)
    resp = client.call(req, conn)
    for r in resp.responses:
        check(r.error_code, r.error_message, what)


def cmd_alter(client, args):
    if args.partitions is None and not args.config and not args.delete_config:
        raise UsageError("nothing to alter: give --partitions, --config or --delete-config")
    if args.partitions is not None:
        R = messages.CreatePartitionsRequest
        req = R(topics=[R.CreatePartitionsTopic(name=args.topic, count=args.partitions, assignments=None)],
                timeout_ms=30000, validate_only=False)
        resp = client.call(req)
        for r in resp.results:
            check(r.error_code, r.error_message, "alter partitions of %s" % r.name)
        args.out.write("Topic %s now has %d partitions.\n" % (args.topic, args.partitions))
    if args.config or args.delete_config:
        alter_configs(client, TOPIC_RESOURCE, args.topic, parse_kv(args.config, "config"),
                      args.delete_config or [], "alter configs of topic %s" % args.topic)
        args.out.write("Completed updating config for topic %s.\n" % args.topic)
