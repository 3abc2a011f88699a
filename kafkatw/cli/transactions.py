"""``kafkatw transactions list|describe|describe-producers|find-hanging|abort``, Kafka's
kafka-transactions tool over ListTransactions, FindCoordinator + DescribeTransactions,
DescribeProducers and WriteTxnMarkers (KIP-664: ``find-hanging`` lists open transactions on
partitions that no coordinator knows of or that outlived the longest allowed timeout; ``abort``
ends one by writing an ABORT marker for its producer, found by the transaction's start offset).
"""

import time

from kafkatw.cli.client import ClientError, check
from kafkatw.cli.helpers import print_table
from kafkatw.cli.output import json_rows, wants_json, write_json
from kafkatw.protocol import messages

TRANSACTION_KEY_TYPE = 1


def add_parser(sub):
    p = sub.add_parser("transactions", help="list, describe and abort transactions")
    tsub = p.add_subparsers(dest="action", metavar="ACTION")
    tsub.required = True
    q = tsub.add_parser("list", help="list transactions on every broker")
    q.add_argument("--duration-filter", type=int, default=-1, metavar="MS",
                   help="only transactions running longer than this")
    q.add_argument("--state", action="append", default=[], help="only these states")
    q.set_defaults(func=cmd_list)
    q = tsub.add_parser("describe", help="the state of one transactional id")
    q.add_argument("--transactional-id", required=True)
    q.set_defaults(func=cmd_describe)
    q = tsub.add_parser("describe-producers", help="producer states of one partition")
    q.add_argument("--topic", required=True)
    q.add_argument("--partition", type=int, required=True)
    q.set_defaults(func=cmd_describe_producers)
    q = tsub.add_parser("find-hanging", help="open transactions no coordinator will end")
    q.add_argument("--topic", required=True)
    q.add_argument("--partition", type=int, action="append",
                   help="only these partitions (default: all)")
    q.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                   help="transaction.max.timeout.ms of the cluster, in minutes (default 15)")
    q.set_defaults(func=cmd_find_hanging)
    q = tsub.add_parser("abort", help="abort a hanging transaction on one partition")
    q.add_argument("--topic", required=True)
    q.add_argument("--partition", type=int, required=True)
    q.add_argument("--start-offset", type=int, help="first offset of the transaction to abort")
    q.add_argument("--producer-id", type=int)
    q.add_argument("--producer-epoch", type=int)
    q.add_argument("--coordinator-epoch", type=int)
    q.set_defaults(func=cmd_abort)


def _brokers(client):
    md = client.metadata([])
    return sorted(b.node_id for b in md.brokers)


def _table(headers, rows, out, args):
    """Kafka's kafka-transactions table, or with ``--output json`` one JSON document."""
    if wants_json(args):
        write_json(out, json_rows(headers, rows))
    else:
        print_table(headers, rows, out)


def cmd_list(client, args):
    rows = []
    for node in _brokers(client):
        req = messages.ListTransactionsRequest(state_filters=list(args.state), producer_id_filters=[])
        max_version = None
        if args.duration_filter >= 0:
            req.duration_filter = args.duration_filter
        else:
            max_version = 0
        resp = client.call(req, client.node(node), max_version=max_version)
        check(resp.error_code, what="ListTransactions on broker %d" % node)
        for t in resp.transaction_states:
            rows.append([t.transactional_id, node, t.producer_id, t.transaction_state])
    rows.sort(key=lambda r: r[0])
    _table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows, args.out, args)


def _txn_coordinator(client, transactional_id):
    resp = client.call(messages.FindCoordinatorRequest(key=transactional_id,
                                                       key_type=TRANSACTION_KEY_TYPE),
                       max_version=3)
    check(resp.error_code, resp.error_message,
          "FindCoordinator for transactional id %s" % transactional_id)
    return resp.node_id, client.node(resp.node_id)


def cmd_describe(client, args):
    node, conn = _txn_coordinator(client, args.transactional_id)
    resp = client.call(messages.DescribeTransactionsRequest(
        transactional_ids=[args.transactional_id]), conn)
    s = resp.transaction_states[0]
    check(s.error_code, what="DescribeTransactions %s" % args.transactional_id)
    now = int(time.time() * 1000)
    start = s.transaction_start_time_ms
    partitions = ",".join("%s-%d" % (t.topic, p) for t in s.topics for p in t.partitions)
    _table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                 "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                 "TransactionDurationMs", "TopicPartitions"],
                [[node, s.transactional_id, s.producer_id, s.producer_epoch, s.transaction_state,
                  s.transaction_timeout_ms, start if start >= 0 else "None",
                  now - start if start >= 0 else "None", partitions]], args.out, args)


def _producers(client, topic, partition):
    conn = client.leader(topic, partition)
    resp = client.call(messages.DescribeProducersRequest(topics=[
        messages.DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[partition])]),
        conn)
    p = resp.topics[0].partitions[0]
    check(p.error_code, p.error_message, "DescribeProducers %s-%d" % (topic, partition))
    return conn, p.active_producers


def cmd_describe_producers(client, args):
    _, producers = _producers(client, args.topic, args.partition)
    _table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                 "LastTimestamp", "CurrentTransactionStartOffset"],
                [[p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence,
                  p.last_timestamp, p.current_txn_start_offset if p.current_txn_start_offset >= 0
                  else "None"] for p in producers], args.out, args)


def _transactions_of(client, producer_id):
    """[(transactional id, coordinator node)] whose producer id is ``producer_id``."""
    found = []
    for node in _brokers(client):
        resp = client.call(messages.ListTransactionsRequest(
            state_filters=[], producer_id_filters=[producer_id]), client.node(node), max_version=0)
        check(resp.error_code, what="ListTransactions on broker %d" % node)
        found += [(t.transactional_id, node) for t in resp.transaction_states]
    return found


def _is_hanging(client, topic, partition, producer):
    """Kafka's rule: hanging unless a coordinator has this producer's ongoing transaction
    holding the partition at the same epoch."""
    for tid, node in _transactions_of(client, producer.producer_id):
        resp = client.call(messages.DescribeTransactionsRequest(transactional_ids=[tid]),
                           client.node(node))
        s = resp.transaction_states[0]
        if s.error_code or s.transaction_state != "Ongoing" or s.producer_epoch != producer.producer_epoch:
            continue
        if any(t.topic == topic and partition in t.partitions for t in s.topics):
            return False
    return True


def cmd_find_hanging(client, args):
    partitions = args.partition or sorted(client.topic_partitions(args.topic))
    now = int(time.time() * 1000)
    limit = args.max_transaction_timeout * 60000
    rows = []
    for partition in partitions:
        _, producers = _producers(client, args.topic, partition)
        for p in producers:
            if p.current_txn_start_offset < 0 or now - p.last_timestamp < limit:
                continue
            if _is_hanging(client, args.topic, partition, p):
                rows.append([args.topic, partition, p.producer_id, p.producer_epoch,
                             p.coordinator_epoch, p.current_txn_start_offset, p.last_timestamp,
                             (now - p.last_timestamp) // 60000])
    _table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                 "StartOffset", "LastTimestamp", "Duration(min)"], rows, args.out, args)


def cmd_abort(client, args):
    conn, producers = _producers(client, args.topic, args.partition)
    if args.start_offset is not None:
        found = [p for p in producers if p.current_txn_start_offset == args.start_offset]
        if not found:
            raise ClientError("no open transaction starts at offset %d of %s-%d"
                              % (args.start_offset, args.topic, args.partition))
        pid, epoch = found[0].producer_id, found[0].producer_epoch
        coordinator_epoch = max(found[0].coordinator_epoch, 0)
    else:
        if None in (args.producer_id, args.producer_epoch, args.coordinator_epoch):
            raise ClientError("abort needs --start-offset, or --producer-id, --producer-epoch "
                              "and --coordinator-epoch")
        pid, epoch, coordinator_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
    W = messages.WriteTxnMarkersRequest
    resp = client.call(W(markers=[W.WritableTxnMarker(
        producer_id=pid, producer_epoch=epoch, transaction_result=False,
        coordinator_epoch=coordinator_epoch,
        topics=[W.WritableTxnMarkerTopic(name=args.topic, partition_indexes=[args.partition])])]),
        conn)
    code = resp.markers[0].topics[0].partitions[0].error_code
    check(code, what="WriteTxnMarkers %s-%d" % (args.topic, args.partition))
    args.out.write("Aborted the transaction of producer %d (epoch %d) on %s-%d.\n"
                   % (pid, epoch, args.topic, args.partition))
