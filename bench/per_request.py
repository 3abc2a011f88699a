"""Broker CPU per Produce request, in process: a ``BrokerService`` with real segment files, Produce
v9 acks=1 frames fed straight to ``KafkaConnection.dataReceived`` (no epoll/recv), responses sent
by ``sendmsg`` to a real loopback socket that is drained. What docs/performance.md
"Per-request cost" reports; not a client benchmark (``python -m bench`` is).

Each request carries P partitions x one batch of R records of V bytes; the defaults (1 x 1 x
100 B) are the one-message request of issue 9, ``--partitions 200 --records 2 --value-bytes 1024``
the many-partition case (what librdkafka sends to a 1,000-partition topic).

    python bench/per_request.py                      # µs of process CPU per request (best of 5)
    python bench/per_request.py --profile out.prof   # cProfile of N requests
    python bench/per_request.py --instructions       # valgrind: instructions per request
    python bench/per_request.py --instructions --tree /tmp/old   # the same for another tree

``--instructions`` runs this script twice under ``valgrind --tool=cachegrind --cache-sim=no``,
after the same warm-up, with N requests and with none, and prints (I(N) - I(0)) / N (and / N / P
per partition): deterministic to well under 1%, so an A/B of two trees (``--tree`` puts the
other tree's ``kafkatw`` first on ``PYTHONPATH``, e.g. one made with ``git archive HEAD kafkatw
| tar -x -C /tmp/old``) needs one run each. User-space only: kernel time of ``sendmsg`` and
``pwrite`` is not in it, the µs figure includes it.
"""

import argparse
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

TOPIC = "per-request"


def _frame(messages, api_key, version, correlation_id, body, client_id="per-request"):
    hv = messages.request_header_version(api_key, version)
    header = messages.RequestHeader(request_api_key=api_key, request_api_version=version,
                                    correlation_id=correlation_id, client_id=client_id)
    payload = b"".join(header.encode(hv)) + b"".join(bytes(p) for p in body.encode(version))
    return struct.pack(">i", len(payload)) + payload


class InProcessBroker:
    """A started BrokerService, one accepted connection and the client socket of it."""

    def __init__(self, partitions):
        from twisted.internet import reactor

        from kafkatw.config import KafkaConfig
        from kafkatw.protocol import messages
        from kafkatw.service import BrokerService

        self.reactor = reactor
        self.messages = messages
        self.dir = tempfile.mkdtemp(prefix="per-request-")
        cfg = KafkaConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": self.dir,
                                           "kafkatw.request.log.enable": "false"})
        self.service = BrokerService(cfg, reactor=reactor)
        self.service.startService()
        server = self.service.socket_server
        self.sock = socket.create_connection(("127.0.0.1", server.bound_port("PLAINTEXT")))
        self.sock.setblocking(False)
        for _ in range(500):
            reactor.iterate(0.01)
            if server.connections:
                break
        conn = next(iter(server.connections))
        self.conn = getattr(conn, "protocol", conn)
        m = messages
        create = m.CreateTopicsRequest(topics=[m.CreateTopicsRequest.CreatableTopic(
            name=TOPIC, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=10000, validate_only=False)
        self.conn.dataReceived(_frame(m, 19, 5, 1, create))
        for _ in range(20):
            reactor.iterate(0.01)
        self.drain()

    def produce_frame(self, partitions, records, value_bytes):
        from kafkatw.protocol import records as rec

        m = self.messages
        value = os.urandom(value_bytes)
        now = int(time.time() * 1000)
        P = m.ProduceRequest
        body = P(transactional_id=None, acks=1, timeout_ms=30000, topic_data=[P.TopicProduceData(
            name=TOPIC, partition_data=[P.PartitionProduceData(index=p, records=rec.build_batch(
                [rec.Record(value=value, offset_delta=i) for i in range(records)], base_timestamp=now))
                for p in range(partitions)])])
        return _frame(m, 0, 9, 7, body)

    def drain(self):
        try:
            while self.sock.recv(1 << 20):
                pass
        except BlockingIOError:
            pass

    def run(self, frame, n):
        received = self.conn.dataReceived
        drain_every = 64 if len(frame) < 4096 else 1
        for i in range(n):
            received(frame)
            if i % drain_every == 0:
                self.drain()
        self.drain()

    def stop(self):
        self.service.stopService()
        self.sock.close()
        shutil.rmtree(self.dir, True)


def _count_instructions(args, n, tree):
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, os.path.abspath(__file__), "--count", str(n), "--warm", str(args.warm),
           "--partitions", str(args.partitions), "--records", str(args.records),
           "--value-bytes", str(args.value_bytes)]
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, check=True).stdout
    found = re.search(r"I\s+refs:\s+([\d,]+)", out)
    if found is None:
        raise SystemExit("no instruction count in valgrind's output:\n" + out[-2000:])
    return int(found.group(1).replace(",", ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--requests", type=int, default=None,
                    help="requests measured (default 20000 timed, 2000 counted / P)")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--records", type=int, default=1, help="records per batch (one batch per partition)")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--warm", type=int, default=None, help="requests before measuring (default 500 / P + 5)")
    ap.add_argument("--profile", metavar="OUT", help="write a cProfile of the measured requests")
    ap.add_argument("--instructions", action="store_true", help="count instructions under valgrind")
    ap.add_argument("--tree", help="with --instructions: a directory holding another tree's kafkatw")
    ap.add_argument("--count", type=int, help=argparse.SUPPRESS)  # one valgrind child
    args = ap.parse_args()
    if args.warm is None:
        args.warm = 500 // args.partitions + 5
    if args.instructions:
        n = args.requests or max(20, 2000 // args.partitions)
        base = _count_instructions(args, 0, args.tree)
        total = _count_instructions(args, n, args.tree)
        per = (total - base) / n
        import kafkatw  # noqa: F401 (only to name the tree measured)

        where = args.tree or os.path.dirname(os.path.dirname(os.path.abspath(kafkatw.__file__)))
        print("%s: %d instructions/request, %d/partition (%d requests of %d partition(s) x %d record(s) "
              "of %d B)" % (where, per, per / args.partitions, n, args.partitions, args.records,
                            args.value_bytes))
        return
    broker = InProcessBroker(args.partitions)
    frame = broker.produce_frame(args.partitions, args.records, args.value_bytes)
    broker.run(frame, args.warm)
    try:
        if args.count is not None:
            broker.run(frame, args.count)
        elif args.profile:
            import cProfile

            n = args.requests or 20000 // args.partitions
            prof = cProfile.Profile()
            prof.enable()
            broker.run(frame, n)
            prof.disable()
            prof.dump_stats(args.profile)
        else:
            n = args.requests or 20000 // args.partitions
            best = None
            for _ in range(5):
                t0 = time.process_time()
                broker.run(frame, n)
                elapsed = time.process_time() - t0
                best = elapsed if best is None else min(best, elapsed)
            print("%.1f µs of process CPU per request, %.2f per partition (best of 5 x %d)"
                  % (best / n * 1e6, best / n / args.partitions * 1e6, n))
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
