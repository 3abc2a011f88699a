"""``kafkatw leaders elect``: Kafka's kafka-leader-election.sh. Sends ElectLeaders (preferred or
unclean) to the controller for the partitions named by ``--topic/--partition``, a JSON file, or
all of them, and prints the tool's messages (``--output json``: one object per partition); the
elections themselves are the controller's."""

import argparse
import json

from kafkatw.cli.client import ClientError, KafkaResponseError, UsageError, check
from kafkatw.cli.output import wants_json, write_json
from kafkatw.protocol import errors, messages

ELECTION_TYPES = {"PREFERRED": 0, "UNCLEAN": 1}


def add_parser(sub):
    p = sub.add_parser("leaders", help="elect preferred (or, for offline partitions, any) replicas as leaders")
    lsub = p.add_subparsers(dest="action", metavar="ACTION")
    lsub.required = True
    q = lsub.add_parser("elect", help="as kafka-leader-election.sh")
    q.add_argument("--election-type", type=str.upper, choices=sorted(ELECTION_TYPES), metavar="preferred|unclean",
                   help="preferred: the first assigned replica leads where it is alive and in the ISR; "
                        "unclean: a partition without a live leader elects any live replica")
    q.add_argument("--topic", help="the topic of --partition")
    q.add_argument("--partition", type=int, help="the partition of --topic")
    q.add_argument("--all-topic-partitions", action="store_true", help="every partition of every topic")
    q.add_argument("--path-to-json-file", metavar="FILE",
                   help='{"partitions": [{"topic": "foo", "partition": 1}, ...]}')
    q.add_argument("--admin.config", dest="command_config", metavar="FILE", default=argparse.SUPPRESS,
                   help="the tool's name for --command-config")
    q.set_defaults(func=cmd_elect)


def partitions_from_args(args):
    """[(topic, partition)] the arguments name, or None for every partition; the tool's checks
    and messages."""
    if args.election_type is None:
        raise UsageError("Missing required option(s): election-type")
    chosen = [args.topic is not None, args.all_topic_partitions, args.path_to_json_file is not None]
    if sum(chosen) != 1:
        raise UsageError("One and only one of the following options is required: "
                         "all-topic-partitions, topic, path-to-json-file")
    if args.topic is not None and args.partition is None:
        raise UsageError("Missing required option(s): partition")
    if args.topic is None and args.partition is not None:
        raise UsageError("Option partition is only allowed if topic is used")
    if args.all_topic_partitions:
        return None
    if args.topic is not None:
        return [(args.topic, args.partition)]
    return read_json_file(args.path_to_json_file)


def read_json_file(path):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise ClientError("cannot read --path-to-json-file %s: %s" % (path, e.strerror)) from None
    except ValueError as e:
        raise ClientError("--path-to-json-file %s is not JSON: %s" % (path, e)) from None
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not all(
            isinstance(e, dict) and isinstance(e.get("topic"), str) and isinstance(e.get("partition"), int)
            for e in entries):
        raise ClientError('--path-to-json-file %s: expected {"partitions": [{"topic": ..., "partition": ...}]}'
                          % path)
    partitions = [(e["topic"], e["partition"]) for e in entries]
    duplicates = sorted({tp for tp in partitions if partitions.count(tp) > 1})
    if duplicates:
        raise ClientError("Replica election data contains duplicate partitions: %s"
                          % ", ".join("%s-%d" % tp for tp in duplicates))
    return partitions


def elect(client, partitions, election_type):
    """ElectLeaders sent to the controller: ``{(topic, partition): (error code, message)}``."""
    controller = client.metadata([]).controller_id
    conn = client.node(controller) if controller is not None and controller >= 0 else client.any_connection()
    by_topic = {}
    for topic, p in partitions or ():
        by_topic.setdefault(topic, []).append(p)
    R = messages.ElectLeadersRequest
    request = R(election_type=ELECTION_TYPES[election_type], timeout_ms=int(client.timeout * 1000),
                topic_partitions=None if partitions is None else
                [R.TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()])
    resp, version = client.request(request, conn)
    if version >= 1:
        check(resp.error_code, None, "ElectLeaders")
    return {(r.topic, p.partition_id): (p.error_code, p.error_message)
            for r in resp.replica_election_results for p in r.partition_result}


def cmd_elect(client, args):
    partitions = partitions_from_args(args)
    try:
        results = elect(client, partitions, args.election_type)
    except KafkaResponseError as e:
        if e.code == errors.CLUSTER_AUTHORIZATION_FAILED:
            args.out.write("Not authorized to perform leader election\n")
        raise
    failed = [(tp, r) for tp, r in results.items() if r[0] not in (errors.NONE, errors.ELECTION_NOT_NEEDED)]
    if wants_json(args):
        write_json(args.out, [{"topic": t, "partition": p, "error": None if code == errors.NONE else
                               errors.error_name(code), "message": message}
                              for (t, p), (code, message) in results.items()])
        if failed:
            raise KafkaResponseError(failed[0][1][0], "%d replica(s) could not be elected" % len(failed))
        return
    succeeded = [tp for tp, (code, _) in results.items() if code == errors.NONE]
    noop = [tp for tp, (code, _) in results.items() if code == errors.ELECTION_NOT_NEEDED]

    def names(tps):
        return ", ".join("%s-%d" % tp for tp in tps)
    if succeeded:
        args.out.write("Successfully completed leader election (%s) for partitions %s\n"
                       % (args.election_type, names(succeeded)))
    if noop:
        args.out.write("Valid replica already elected for partitions %s\n" % names(noop))
    if failed:
        for tp, (code, message) in failed:
            args.out.write("Error completing leader election (%s) for partition: %s-%d: %s%s\n"
                           % (args.election_type, tp[0], tp[1], errors.error_name(code),
                              ": " + message if message else ""))
        raise KafkaResponseError(failed[0][1][0], "%d replica(s) could not be elected" % len(failed))
