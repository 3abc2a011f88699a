"""The plaintext (and SSL) consume path of kafkatw against the machine's raw sendfile-over-
loopback rate, measured in the same run. ``python -m bench.zero_copy [--mb 1000]``.

Two readers of one single-partition topic: a raw Fetch loop (one 50 MiB Fetch v11 after another,
``recv_into`` like the sendfile receiver, no record decoding) and a confluent-kafka consumer.
It prints a Markdown table; it asserts nothing.
"""

import argparse
import os
import platform
import socket
import ssl
import statistics
import struct
import sys
import tempfile
import time

from bench.machine import sendfile_rate
from bench.procstat import cpu_seconds, rss_bytes
from kafkatw.protocol import messages as m
from kafkatw.protocol.records import iter_batch_headers
from kafkatw.testing import KafkaBroker

MIB = 1024 * 1024
TOPIC = "zero-copy-bench"
FETCH_MAX = 50 * MIB


def produce(bootstrap, total, value_size=64 * 1024):
    import confluent_kafka

    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": MIB,
        "compression.type": "none", "acks": 1, "queue.buffering.max.kbytes": 256 * 1024,
        "enable.idempotence": False})
    value = os.urandom(value_size)
    count = total // value_size
    for _ in range(count):
        while True:
            try:
                producer.produce(TOPIC, value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(300)
    return count


def _fetch_frame(topic, offset, correlation_id, max_bytes, max_wait_ms):
    body = m.FetchRequest(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
        session_id=0, session_epoch=-1,
        topics=[m.FetchRequest.FetchTopic(topic=topic, partitions=[
            m.FetchRequest.FetchPartition(partition=0, fetch_offset=offset,
                                          partition_max_bytes=max_bytes)])])
    header = m.RequestHeader(request_api_key=1, request_api_version=11,
                             correlation_id=correlation_id, client_id="zero-copy-bench")
    payload = header.encode_bytes(m.request_header_version(1, 11)) + body.encode_bytes(11)
    return struct.pack(">i", len(payload)) + payload


def _recv_into(sock, view):
    # 1 MiB at a time, like the sendfile receiver of bench.machine
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:got + MIB])
        if not n:
            raise ConnectionError("broker closed the connection")
        got += n


def raw_fetch(host, port, count, ssl_context=None, topic=TOPIC, max_bytes=FETCH_MAX, max_wait_ms=0):
    """Fetch offsets [0, count) of partition 0 with back-to-back Fetch v11 requests that only
    walk batch headers to find the next offset; return the bytes received."""
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * MIB)
    if ssl_context is not None:
        sock = ssl_context.wrap_socket(sock, server_hostname="localhost")
    buf = bytearray(max_bytes + MIB)
    view = memoryview(buf)
    offset, received, cid = 0, 0, 0
    with sock:
        while offset < count:
            cid += 1
            sock.sendall(_fetch_frame(topic, offset, cid, max_bytes, max_wait_ms))
            _recv_into(sock, view[:4])
            (size,) = struct.unpack_from(">i", buf, 0)
            if size > len(buf):
                raise RuntimeError("response of %d bytes over the %d asked for" % (size, max_bytes))
            _recv_into(sock, view[:size])
            received += size + 4
            response = m.FetchResponse.decode(view[4:size], 11)
            if not response.responses:
                raise RuntimeError("no topics in the fetch response at offset %d: %r" % (offset, response))
            part = response.responses[0].partitions[0]
            if part.error_code:
                raise RuntimeError("fetch error %d at offset %d" % (part.error_code, offset))
            last = None
            for _, header in iter_batch_headers(part.records or b"", allow_partial_tail=True):
                last = header
            if last is None:
                raise RuntimeError("empty fetch at offset %d of %d" % (offset, count))
            offset = last.next_offset
    return received


def confluent_read(conf, count):
    import confluent_kafka

    consumer = confluent_kafka.Consumer(dict({
        "group.id": "bench", "enable.auto.commit": False, "fetch.max.bytes": FETCH_MAX,
        "max.partition.fetch.bytes": FETCH_MAX, "receive.message.max.bytes": FETCH_MAX + MIB,
        "queued.max.messages.kbytes": 256 * 1024}, **conf))
    consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
    got = nbytes = 0
    while got < count:
        for msg in consumer.consume(1000, 1.0):
            nbytes += len(msg.value())
            got += 1
    consumer.close()
    return nbytes


def timed(pid, fn, *args):
    c0 = cpu_seconds(pid)
    t0 = time.perf_counter()
    nbytes = fn(*args)
    elapsed = time.perf_counter() - t0
    return nbytes, elapsed, cpu_seconds(pid) - c0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1000, help="topic size in MB (MiB)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    total = args.mb * MIB
    rows = []
    with KafkaBroker(listeners=("PLAINTEXT", "SSL"), overrides={"message.max.bytes": 2 * MIB}) as b:
        pid = b.process.pid
        count = produce(b.bootstrap_servers, total)
        ctx = ssl.create_default_context(cafile=b.ssl_ca_path)
        host, ssl_port = b.ssl_bootstrap_servers.rsplit(":", 1)
        for _ in range(args.rounds):  # interleaved, so drift hits every reader alike
            raw = sendfile_rate(tempfile.gettempdir(), size=total)
            rows.append(("raw `os.sendfile` over loopback (no broker)", total, raw["elapsed_s"],
                         raw["sender_cpu_s"]))
            rows.append(("raw Fetch loop, PLAINTEXT",) + timed(pid, raw_fetch, "127.0.0.1", b.port, count))
            rows.append(("raw Fetch loop, SSL",) + timed(pid, raw_fetch, host, int(ssl_port), count, ctx))
            rows.append(("confluent-kafka consumer, PLAINTEXT",) + timed(
                pid, confluent_read, {"bootstrap.servers": b.bootstrap_servers}, count))
            rows.append(("confluent-kafka consumer, SSL",) + timed(
                pid, confluent_read, {"bootstrap.servers": b.ssl_bootstrap_servers,
                                      "security.protocol": "SSL", "ssl.ca.location": b.ssl_ca_path},
                count))
        broker_rss = rss_bytes(pid)
    by_name = {}
    for name, nbytes, elapsed, cpu in rows:
        by_name.setdefault(name, []).append((nbytes / elapsed / 1e6, cpu / (nbytes / 1e9), nbytes))
    raw_median = statistics.median(r for r, _, _ in by_name[rows[0][0]])
    print("| reader | MB per round | MB/s per round | median MB/s | broker CPU s/GB (median) "
          "| % of raw sendfile (median) |")
    print("|---|---:|---|---:|---:|---:|")
    for name, results in by_name.items():
        rates = [r for r, _, _ in results]
        median = statistics.median(rates)
        print("| %s | %d | %s | %.0f | %.2f | %.0f |" % (
            name, results[0][2] / 1e6, " / ".join("%.0f" % r for r in rates), median,
            statistics.median(c for _, c, _ in results), 100 * median / raw_median))
    print()
    print("Broker RSS after the run: %.0f MB. Machine: %s, %d CPUs, Python %s."
          % (broker_rss / 1e6, platform.machine(), os.cpu_count(), platform.python_version()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
