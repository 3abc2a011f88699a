"""``kafkatw consume``: Fetch from chosen partitions, starting at the beginning, an offset, a
timestamp or a group's committed offsets (committed back with OffsetCommit, no group membership);
prints records as text, key/value or JSON. Control batches and aborted data are not shown.
"""

import base64
import datetime
import json
import time

from kafkatw.cli.client import ClientError, UsageError, check
from kafkatw.cli.helpers import Progress
from kafkatw.cli.output import progress_wanted
from kafkatw.protocol import messages
from kafkatw.protocol.records import iter_batch_headers, decode_batch

EARLIEST, LATEST = -2, -1


def add_parser(sub):
    p = sub.add_parser("consume", help="print records of a topic")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, action="append", help="partition(s) (default: all)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    start.add_argument("--offset", help="start offset: a number, 'earliest' or 'latest'")
    start.add_argument("--timestamp", help="start at the first record at/after this time "
                                           "(ms since epoch or ISO-8601)")
    p.add_argument("--group", help="start at, and commit, this group's offsets")
    p.add_argument("--max-messages", type=int, help="exit after this many records")
    p.add_argument("--timeout-ms", type=int, help="exit when no record arrives for this long")
    p.add_argument("--format", default="text", choices=("text", "kv", "json"),
                   help="text: value; kv: key<sep>value; json: one object per record")
    p.add_argument("--key-separator", default="\t", help="separator for --format kv (default TAB)")
    p.add_argument("--isolation-level", default="read_uncommitted",
                   choices=("read_uncommitted", "read_committed"))
    p.set_defaults(func=cmd_consume)


def parse_timestamp(text):
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        dt = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError("invalid timestamp %r (ms since epoch or ISO-8601)" % (text,))
    if dt.tzinfo is None:
        dt = dt.astimezone()
    return int(dt.timestamp() * 1000)


def committed_offsets(client, conn, group, topic, partitions):
    """{partition: committed offset or -1} of ``group``."""
    R = messages.OffsetFetchRequest
    req = R(group_id=group, topics=[R.OffsetFetchRequestTopic(name=topic, partition_indexes=list(partitions))])
    resp = client.call(req, conn)
    if getattr(resp, "error_code", 0):
        check(resp.error_code, what="OffsetFetch for group %s" % group)
    out = {}
    for t in resp.topics:
        for p in t.partitions:
            check(p.error_code, what="OffsetFetch %s-%d" % (topic, p.partition_index))
            out[p.partition_index] = p.committed_offset
    return out


def commit_offsets(client, conn, group, topic, offsets):
    R = messages.OffsetCommitRequest
    req = R(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
        R.OffsetCommitRequestTopic(name=topic, partitions=[
            R.OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_metadata="")
            for p, o in sorted(offsets.items())])])
    resp = client.call(req, conn)
    for t in resp.topics:
        for p in t.partitions:
            check(p.error_code, what="OffsetCommit %s-%d for group %s" % (topic, p.partition_index, group))


def _text(b):
    return "null" if b is None else bytes(b).decode("utf-8", "replace")


def _json_bytes(b):
    if b is None:
        return None
    try:
        return bytes(b).decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(bytes(b)).decode("ascii")}


def format_record(fmt, sep, topic, partition, rec):
    if fmt == "text":
        return _text(rec.value)
    if fmt == "kv":
        return _text(rec.key) + sep + _text(rec.value)
    return json.dumps({
        "topic": topic, "partition": partition, "offset": rec.offset, "timestamp": rec.timestamp,
        "key": _json_bytes(rec.key), "value": _json_bytes(rec.value),
        "headers": [[_text(k) if isinstance(k, (bytes, bytearray, memoryview)) else k, _json_bytes(v)]
                    for k, v in rec.headers]}, sort_keys=True)


def start_offsets(client, args, partitions, leaders, group_conn):
    if args.offset is not None:
        if args.offset in ("earliest", "latest"):
            return client.list_offsets(args.topic, partitions,
                                       EARLIEST if args.offset == "earliest" else LATEST, leaders)
        try:
            value = int(args.offset)
        except ValueError:
            raise UsageError("invalid --offset %r" % (args.offset,))
        return {p: value for p in partitions}
    if args.timestamp is not None:
        ts = parse_timestamp(args.timestamp)
        found = client.list_offsets(args.topic, partitions, ts, leaders)
        latest = client.list_offsets(args.topic, partitions, LATEST, leaders)
        return {p: (found[p] if found[p] >= 0 else latest[p]) for p in partitions}
    default = client.list_offsets(args.topic, partitions,
                                  EARLIEST if args.from_beginning else LATEST, leaders)
    if group_conn is not None:
        committed = committed_offsets(client, group_conn, args.group, args.topic, partitions)
        return {p: committed[p] if committed.get(p, -1) >= 0 else default[p] for p in partitions}
    return default


def cmd_consume(client, args):
    leaders = client.topic_partitions(args.topic)
    partitions = sorted(args.partition) if args.partition else sorted(leaders)
    for p in partitions:
        if p not in leaders:
            raise ClientError("topic %s has no partition %d" % (args.topic, p))
    group_conn = client.coordinator(args.group) if args.group else None
    positions = start_offsets(client, args, partitions, leaders, group_conn)
    isolation = 1 if args.isolation_level == "read_committed" else 0
    progress = Progress(total=args.max_messages, label="consumed", enabled=progress_wanted(True, args.out))
    count = 0
    last_data = time.monotonic()
    by_node = {}
    for p in partitions:
        by_node.setdefault(leaders[p], []).append(p)
    out = args.out
    try:
        while args.max_messages is None or count < args.max_messages:
            got = 0
            for node_id, parts in by_node.items():
                conn = client.node(node_id)
                version = conn.version_for(1)
                R = messages.FetchRequest
                req = R(replica_id=-1, max_wait_ms=200 if len(by_node) > 1 else 500, min_bytes=1,
                        max_bytes=50 * 1024 * 1024, topics=[R.FetchTopic(topic=args.topic, partitions=[
                            R.FetchPartition(partition=p, fetch_offset=positions[p],
                                             partition_max_bytes=10 * 1024 * 1024) for p in parts])])
                if version >= 4:
                    req.isolation_level = isolation
                resp = conn.send(req, version)
                if version >= 7:
                    check(resp.error_code, what="Fetch")
                for t in resp.responses:
                    for pd in t.partitions:
                        p = pd.partition_index
                        if pd.error_code == 1:  # OFFSET_OUT_OF_RANGE: reset as auto.offset.reset
                            reset = EARLIEST if args.from_beginning else LATEST
                            positions[p] = client.list_offsets(args.topic, [p], reset, leaders)[p]
                            continue
                        check(pd.error_code, what="Fetch %s-%d" % (args.topic, p))
                        for rec in _records(pd, positions[p], isolation):
                            out.write(format_record(args.format, args.key_separator, args.topic, p, rec) + "\n")
                            positions[p] = rec.offset + 1
                            count += 1
                            got += 1
                            progress.update()
                            if args.max_messages is not None and count >= args.max_messages:
                                break
                        if args.max_messages is not None and count >= args.max_messages:
                            break
            out.flush()
            if got:
                last_data = time.monotonic()
            elif args.timeout_ms is not None and (time.monotonic() - last_data) * 1000 >= args.timeout_ms:
                break
    finally:
        progress.close()
        if group_conn is not None:
            commit_offsets(client, group_conn, args.group, args.topic, positions)
    if args.max_messages is not None and count < args.max_messages:
        raise ClientError("timed out after %d of %d messages" % (count, args.max_messages))
    return 0


def _records(pd, position, isolation):
    """Data records of a fetched partition at or after ``position`` (transactional aborts skipped)."""
    buf = pd.records
    if not buf:
        return
    aborted = {}
    for a in (pd.aborted_transactions or []) if isolation else []:
        aborted.setdefault(a.producer_id, []).append(a.first_offset)
    aborting = set()
    for pos, header in iter_batch_headers(buf, allow_partial_tail=True):
        if header.magic != 2:
            raise ClientError("legacy message format v%d is not supported by kafkatw consume" % header.magic)
        if header.is_control:
            if header.is_transactional:
                aborting.discard(header.producer_id)
            continue
        if header.last_offset < position:
            continue
        if isolation and header.is_transactional:
            starts = aborted.get(header.producer_id, [])
            if any(s <= header.base_offset for s in starts):
                aborting.add(header.producer_id)
            if header.producer_id in aborting:
                continue
        _, records = decode_batch(buf, pos)
        for rec in records:
            if rec.offset >= position:
                yield rec
