"""The broker's CPU per GB of compressed produce with the client's cost taken out (issue 23
item 5): ``python -m bench.compressed_produce [--batches 3000] [--rounds 3] [--baseline TREE]
[--tansu]``.

librdkafka's own batches (1 KiB text values of ``bench.workloads.text_values``, 64 KiB batches,
compression.type none, lz4, zstd) are captured once from a kafkatw log, then replayed as Produce
v9 requests (acks=1, one batch each, 8 in flight on one connection) against each broker, rounds
interleaved: CPU per GB of uncompressed values at the rate the broker takes them, whatever
compressing costs the client (librdkafka's zstd made the client, not the broker, the limit in
``make bench``'s rows, and a slow client sends part-full batches). ``--tansu`` replays the same
requests to Tansu too: the broker's own cost per request against another broker's. Prints a
Markdown table (with broker CPU µs per request); asserts nothing.
"""

import argparse
import glob
import os
import socket
import statistics
import struct
import sys
import time

from bench.brokers import Kafkatw, Tansu
from bench.procstat import cpu_seconds
from bench.scale import decode, frame, recv_exact
from bench.workloads import create_topic, text_values
from kafkatw.protocol import messages as m
from kafkatw.protocol.records import iter_batch_headers

CODECS = ("none", "lz4", "zstd")
VALUE_SIZE = 1024
IN_FLIGHT = 8
PRODUCE_VERSION = 9


def capture(codec, count, data_root=None):
    """``count`` batches as librdkafka writes them with ``codec`` (64 KiB, full), and the
    records each holds."""
    from confluent_kafka import Producer

    broker = Kafkatw(data_root=data_root).start()
    try:
        topic = "capture-" + codec
        create_topic(broker.bootstrap, topic)
        p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec,
                      "batch.size": 64 * 1024, "linger.ms": 100, "acks": 1,
                      "enable.idempotence": False, "queue.buffering.max.kbytes": 1024 * 1024})
        values = text_values(VALUE_SIZE)
        for i in range(count * 64):
            while True:
                try:
                    p.produce(topic, values[i % len(values)])
                    break
                except BufferError:
                    p.poll(0.01)
        if p.flush(120):
            raise RuntimeError("capture of %s batches did not complete" % codec)
        (log,) = glob.glob(os.path.join(broker.work, "**", topic + "-0", "*.log"), recursive=True)
        with open(log, "rb") as f:
            data = f.read()
    finally:
        broker.stop()
    headers = list(iter_batch_headers(data))
    return ([bytes(data[pos:pos + h.size_in_bytes]) for pos, h in headers],
            [h.records_count for _, h in headers])


def _frames(topic, batches):
    P = m.ProduceRequest
    return [frame(0, PRODUCE_VERSION, i, P(
        transactional_id=None, acks=1, timeout_ms=30000, topic_data=[P.TopicProduceData(
            name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])]))
        for i, batch in enumerate(batches)]


def _recv_response(sock):
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    body = decode(0, PRODUCE_VERSION, memoryview(recv_exact(sock, size)))
    code = body.responses[0].partition_responses[0].error_code
    if code:
        raise RuntimeError("produce answered error %d" % code)


def replay(broker, topic, batches, counts, requests):
    """Send ``requests`` Produce requests cycling over ``batches`` (``counts``: the records of
    each); returns the result dict."""
    create_topic(broker.bootstrap, topic)
    frames = _frames(topic, batches)
    host, port = broker.bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        b0 = cpu_seconds(broker.pid)
        t0 = time.perf_counter()
        sent = answered = 0
        while answered < requests:
            while sent < requests and sent - answered < IN_FLIGHT:
                sock.sendall(frames[sent % len(frames)])
                sent += 1
            _recv_response(sock)
            answered += 1
        elapsed = time.perf_counter() - t0
        broker_cpu = cpu_seconds(broker.pid) - b0
    finally:
        sock.close()
    cycles, rest = divmod(requests, len(batches))
    nbytes = (cycles * sum(counts) + sum(counts[:rest])) * VALUE_SIZE
    return {"requests": requests, "bytes": nbytes, "elapsed_s": elapsed, "broker_cpu_s": broker_cpu,
            "mb_s": nbytes / elapsed / 1e6, "broker_cpu_s_per_gb": broker_cpu / (nbytes / 1e9)}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.compressed_produce", description=__doc__)
    ap.add_argument("--batches", type=int, default=3000, help="Produce requests per trial")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", metavar="TREE", help="also run this kafkatw checkout (PYTHONPATH)")
    ap.add_argument("--tansu", action="store_true", help="also run Tansu (memory storage)")
    a = ap.parse_args(argv)
    captured = {}
    for codec in CODECS:
        batches, counts = capture(codec, 256)
        captured[codec] = (batches, counts)
        records = sum(counts)
        wire = sum(len(b) for b in batches)
        sys.stderr.write("captured %d %s batches, %d records, %.1f KiB each on the wire (%.2f:1)\n"
                         % (len(batches), codec, records, wire / len(batches) / 1024,
                            records * VALUE_SIZE / wire))
    brokers = [Kafkatw().start()]
    if a.baseline:
        brokers.append(Kafkatw(tree=a.baseline).start())
    if a.tansu:
        brokers.append(Tansu().start())
    results = {(b.name, c): [] for b in brokers for c in CODECS}
    try:
        for rnd in range(a.rounds):
            for codec in CODECS:
                batches, counts = captured[codec]
                for b in brokers:
                    r = replay(b, "replay-%s-%d" % (codec, rnd), batches, counts, a.batches)
                    results[(b.name, codec)].append(r)
                    sys.stderr.write("round %d %-5s %-28s %7.1f MB/s %6.2f broker CPU s/GB\n" % (
                        rnd + 1, codec, b.name, r["mb_s"], r["broker_cpu_s_per_gb"]))
    finally:
        for b in brokers:
            b.stop()
    print("| broker | codec | MB/s of values, median (min-max) | broker CPU s/GB, median (min-max) "
          "| broker CPU µs per request | CPU / uncompressed |")
    print("|---|---|---|---|---|---|")
    for b in brokers:
        base = statistics.median(r["broker_cpu_s_per_gb"] for r in results[(b.name, "none")])
        for codec in CODECS:
            rs = results[(b.name, codec)]
            mb = [r["mb_s"] for r in rs]
            cpu = [r["broker_cpu_s_per_gb"] for r in rs]
            per_request = statistics.median(r["broker_cpu_s"] / r["requests"] * 1e6 for r in rs)
            print("| %s | %s | %.1f (%.1f-%.1f) | %.2f (%.2f-%.2f) | %.0f | %.2fx |" % (
                b.name, codec, statistics.median(mb), min(mb), max(mb), statistics.median(cpu),
                min(cpu), max(cpu), per_request, statistics.median(cpu) / base))
    print("\nload average at the end: %.1f %.1f %.1f" % os.getloadavg())


if __name__ == "__main__":
    main()
