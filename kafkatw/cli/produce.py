"""``kafkatw produce``: lines from stdin or a file as records (optional key separator, headers),
batched per partition (keys by Kafka's murmur2 partitioner) and sent with Produce. It reads no
offsets and knows nothing of groups.
"""

import sys
import time

from kafkatw.cli.client import ClientError, check
from kafkatw.cli.helpers import Progress, parse_kv
from kafkatw.cli.output import progress_wanted
from kafkatw.protocol import messages
from kafkatw.protocol.records import Record, build_batch

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
BATCH_BYTES = 256 * 1024


def murmur2(data):
    """Kafka's ``Utils.murmur2`` (the default partitioner's hash) as an unsigned 32-bit int."""
    length = len(data)
    seed, m, r = 0x9747B28C, 0x5BD1E995, 24
    h = (seed ^ length) & 0xFFFFFFFF
    n4 = length // 4
    for i in range(n4):
        k = data[i * 4] | (data[i * 4 + 1] << 8) | (data[i * 4 + 2] << 16) | (data[i * 4 + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    extra = length % 4
    base = n4 * 4
    if extra >= 3:
        h ^= data[base + 2] << 16
    if extra >= 2:
        h ^= data[base + 1] << 8
    if extra >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def partition_for_key(key, num_partitions):
    """Kafka's ``toPositive(murmur2(key)) % numPartitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


def add_parser(sub):
    p = sub.add_parser("produce", help="send lines from stdin or a file as records")
    p.add_argument("--topic", required=True)
    p.add_argument("--file", help="read lines from FILE instead of stdin")
    p.add_argument("--key-separator", help="split each line into KEY<sep>VALUE at the first separator")
    p.add_argument("--header", action="append", metavar="KEY=VALUE", help="header for every record")
    p.add_argument("--partition", type=int, help="send everything to this partition")
    p.add_argument("--acks", type=int, default=-1, choices=(-1, 0, 1))
    p.add_argument("--compression", default="none", choices=sorted(CODECS))
    p.add_argument("--batch-size", type=int, default=1000, help="records per batch (default 1000)")
    p.set_defaults(func=cmd_produce)


class _Sender:
    def __init__(self, client, topic, leaders, acks, codec):
        self.client, self.topic, self.leaders = client, topic, leaders
        self.acks, self.codec = acks, codec
        self.sent = 0

    def send(self, partition, records):
        conn = self.client.leader(self.topic, partition, self.leaders)
        version = conn.version_for(0)
        if version < 3:
            raise ClientError("the broker only supports Produce v%d (magic v2 batches need v3+)" % version)
        batch = build_batch(records, compression=self.codec)
        R = messages.ProduceRequest
        req = R(transactional_id=None, acks=self.acks, timeout_ms=30000, topic_data=[
            R.TopicProduceData(name=self.topic, partition_data=[
                R.PartitionProduceData(index=partition, records=batch)])])
        if self.acks == 0:
            _send_no_response(conn, req, version)
        else:
            resp = conn.send(req, version)
            for t in resp.responses:
                for p in t.partition_responses:
                    check(p.error_code, p.error_message, "produce to %s-%d" % (self.topic, p.index))
        self.sent += len(records)


def _send_no_response(conn, req, version):
    import struct

    conn._correlation += 1
    header = messages.RequestHeader(request_api_key=0, request_api_version=version,
                                    correlation_id=conn._correlation, client_id=conn.client_id)
    data = header.encode_bytes(messages.request_header_version(0, version)) + req.encode_bytes(version)
    conn.sock.sendall(struct.pack(">i", len(data)) + data)


def _lines(args):
    if args.file:
        try:
            f = open(args.file, "rb")
        except OSError as e:
            raise ClientError("cannot read %s: %s" % (args.file, e.strerror))
    else:
        f = getattr(args.stdin, "buffer", args.stdin)
    with f:
        for line in f:
            if isinstance(line, str):
                line = line.encode("utf-8")
            yield line.rstrip(b"\r\n")


def cmd_produce(client, args):
    leaders = client.topic_partitions(args.topic)
    if args.partition is not None and args.partition not in leaders:
        raise ClientError("topic %s has no partition %d" % (args.topic, args.partition))
    headers = [(k.encode("utf-8"), v.encode("utf-8")) for k, v in parse_kv(args.header, "header").items()]
    sep = args.key_separator.encode("utf-8") if args.key_separator is not None else None
    n = len(leaders)
    sender = _Sender(client, args.topic, leaders, args.acks, CODECS[args.compression])
    pending = {}   # partition -> [Record]
    sizes = {}
    sticky = [0]
    progress = Progress(label="produced", enabled=progress_wanted(False))

    def flush(partition):
        records = pending.pop(partition, None)
        sizes.pop(partition, None)
        if records:
            sender.send(partition, records)
            progress.update(len(records))

    for line in _lines(args):
        key, value = None, line
        if sep is not None:
            if sep not in line:
                raise ClientError("no key separator %r in line %r" % (args.key_separator, line[:80]))
            key, value = line.split(sep, 1)
        if args.partition is not None:
            partition = args.partition
        elif key is not None:
            partition = partition_for_key(key, n)
        else:
            partition = sticky[0] % n
        rec = Record(key=key, value=value, headers=list(headers), timestamp=int(time.time() * 1000))
        pending.setdefault(partition, []).append(rec)
        sizes[partition] = sizes.get(partition, 0) + len(value) + len(key or b"") + 16
        if len(pending[partition]) >= args.batch_size or sizes[partition] >= BATCH_BYTES:
            flush(partition)
            if key is None and args.partition is None:
                sticky[0] += 1
    for partition in list(pending):
        flush(partition)
    progress.close()
    sys.stderr.flush()
    return 0
