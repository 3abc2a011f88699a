"""Broker CPU per Produce request (or per parked Fetch woken by a Produce), in process: a ``BrokerService`` with real segment files, Produce
v9 acks=1 frames fed straight to ``KafkaConnection.dataReceived`` (no epoll/recv), responses sent
by ``sendmsg`` to a real loopback socket that is drained. What docs/performance.md
"Per-request cost" reports; not a client benchmark (``python -m bench`` is).

Each request carries P partitions x one batch of R records of V bytes; the defaults (1 x 1 x
100 B) are the one-message request of issue 9, ``--partitions 200 --records 2 --value-bytes 1024``
the many-partition case (what librdkafka sends to a 1,000-partition topic).

``--wake`` measures the end-to-end path instead, per *pair*: on a second connection a Fetch v16
as confluent-kafka 2.16 (librdkafka) sends it while a consumer waits at the log end (no fetch
session: session 0, epoch -1; topic id, read_committed, current leader epoch, max_wait_ms 500,
min_bytes 1) parks in the fetch purgatory, then a one-record Produce (P, R, V as above, default
one 8 B record) on the first connection appends and completes it; both responses are drained.
``--wake --follower``: the Fetch is a follower's as the replica fetcher sends it instead (v15,
ReplicaState replica id 1, read_uncommitted, last fetched epoch set, in an incremental fetch
session: a full fetch opens it before measuring, each pair's Fetch is the session's next epoch).
The broker is the embedded single-node one, so the follower bookkeeping of a cluster leader
(``Partition.update_follower_fetch_state``, the HW it moves, the acks=all produce it completes)
is not in it: it counts the park/wake/read/answer path of a follower's fetch only.

    python bench/per_request.py                      # µs of process CPU per request (best of 5)
    python bench/per_request.py --profile out.prof   # cProfile of N requests
    python bench/per_request.py --instructions       # valgrind: instructions per request
    python bench/per_request.py --instructions --tree /tmp/old   # the same for another tree
    python bench/per_request.py --wake --instructions            # per parked-Fetch + Produce pair
    python bench/per_request.py --wake --follower --instructions # the same, a follower's Fetch
    python bench/per_request.py --bytecodes [--top 40]           # Python bytecodes per request
    python bench/per_request.py --instructions --reactor broker  # through a reactor's poll (or epoll)

``--instructions`` runs this script twice under ``valgrind --tool=cachegrind --cache-sim=no``,
after the same warm-up, with N requests and with none, and prints (I(N) - I(0)) / N (and / N / P
per partition): deterministic to well under 1%, so an A/B of two trees (``--tree`` puts the
other tree's ``kafkatw`` first on ``PYTHONPATH``, e.g. one made with ``git archive HEAD kafkatw
| tar -x -C /tmp/old``) needs one run each. User-space only: kernel time of ``sendmsg`` and
``pwrite`` is not in it, the µs figure includes it.

``--bytecodes`` counts the Python bytecodes executed per request (``sys.settrace`` opcode
events; also deterministic, and seconds instead of minutes) and lists the functions executing
the most: where the instructions go, at roughly 60-70 instructions per bytecode on CPython 3.11.
cProfile misleads here (it charges its own per-call cost to call-heavy code).
"""

import argparse
import os
import re
import select
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

    def __init__(self, partitions, acls=0):
        from twisted.internet import reactor

        from kafkatw.config import KafkaConfig
        from kafkatw.protocol import messages
        from kafkatw.service import BrokerService

        self.reactor = reactor
        self.messages = messages
        self.waker = None
        self.dir = tempfile.mkdtemp(prefix="per-request-")
        props = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": self.dir,
                 "kafkatw.request.log.enable": "false"}
        if acls:
            props["authorizer.class.name"] = "acl"
        cfg = KafkaConfig.from_properties(props)
        self.service = BrokerService(cfg, reactor=reactor)
        self.service.startService()
        if acls:
            self.add_acls(acls)
        server = self.service.socket_server
        self.sock, self.conn = self.connect()
        m = messages
        create = m.CreateTopicsRequest(topics=[m.CreateTopicsRequest.CreatableTopic(
            name=TOPIC, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=10000, validate_only=False)
        self.conn.dataReceived(_frame(m, 19, 5, 1, create))
        # the logs are made in the thread pool: until the answer is written the connection is
        # muted, and requests fed meanwhile would only pile up unread (a loaded machine took
        # longer than a fixed number of reactor turns for 200 partitions)
        deadline = time.monotonic() + 60
        while self.conn.in_flight is not None or self.service.log_manager.get_log(TOPIC, partitions - 1) is None:
            if time.monotonic() > deadline:
                raise SystemExit("CreateTopics of %d partitions did not finish in 60 s" % partitions)
            reactor.iterate(0.01)
        self.drain()

    def add_acls(self, n):
        """``n`` ACLs: the ones this client (User:ANONYMOUS) needs plus others on other topics,
        prefixes and principals, as a broker shared by many applications has."""
        from kafkatw.security.authorizer import AccessControlEntry, AclBinding, ResourcePattern
        from kafkatw.security.authorizer import AclOperation as Op
        from kafkatw.security.authorizer import AclPermissionType as Perm
        from kafkatw.security.authorizer import PatternType as PT
        from kafkatw.security.authorizer import ResourceType as RT

        def b(rtype, name, principal, op, pattern=PT.LITERAL, perm=Perm.ALLOW):
            return AclBinding(ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, "*", op, perm))

        bindings = [b(RT.CLUSTER, "kafka-cluster", "User:ANONYMOUS", Op.CREATE),
                    b(RT.TOPIC, TOPIC, "User:ANONYMOUS", Op.WRITE)]
        i = 0
        while len(bindings) < n:
            kind = i % 4
            if kind == 0:
                bindings.append(b(RT.TOPIC, "app-%d" % i, "User:app%d" % i, Op.WRITE))
            elif kind == 1:
                bindings.append(b(RT.TOPIC, "team-%d-" % i, "User:team%d" % i, Op.READ, PT.PREFIXED))
            elif kind == 2:
                bindings.append(b(RT.GROUP, "grp-%d" % i, "User:app%d" % i, Op.READ))
            else:
                bindings.append(b(RT.TOPIC, TOPIC, "User:other%d" % i, Op.READ, perm=Perm.DENY))
            i += 1
        d = self.service.authorizer.create_acls(None, bindings[:n])
        done = []
        d.addBoth(done.append)
        while not done:
            self.reactor.iterate(0.01)
        assert done[0] == [None] * n, done[0]

    def connect(self):
        """(client socket, the broker's KafkaConnection of it) of a new connection."""
        server = self.service.socket_server
        before = set(server.connections)
        sock = socket.create_connection(("127.0.0.1", server.bound_port("PLAINTEXT")))
        sock.setblocking(False)
        for _ in range(500):
            self.reactor.iterate(0.01)
            if set(server.connections) - before:
                break
        conn = (set(server.connections) - before).pop()
        return sock, getattr(conn, "protocol", conn)

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

    def drain(self, sock=None):
        sock = sock or self.sock
        try:
            while sock.recv(1 << 20):
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

    def run_through_reactor(self, frame, n):
        """Each request sent on the client socket and answered before the next, the broker's
        side run by the reactor's poll (``--reactor``): what ``run`` skips, the reactor's
        dispatch of the ready socket and Twisted's ``doRead``, is in the count, and so is this
        client's send, ``select`` and receive."""
        sock, iterate = self.sock, self.reactor.iterate
        sock.setblocking(True)
        try:
            for _ in range(n):
                sock.sendall(frame)
                while not select.select([sock], [], [], 0)[0]:
                    iterate(0.05)
                (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
                sock.recv(size, socket.MSG_WAITALL)
        finally:
            sock.setblocking(False)

    def stop(self):
        if self.waker is not None:
            self.waker.sock.close()
        # the service tree stops child by child, each after the last one's Deferred fired (the
        # listeners' ports close on the reactor): iterate until it has, or the thread pool,
        # stopped last, keeps the interpreter from exiting (under valgrind it had started a thread)
        d = self.service.stopService()
        for _ in range(500):
            if d is None or d.called:
                break
            self.reactor.iterate(0.01)
        self.sock.close()
        shutil.rmtree(self.dir, True)


class Waker:
    """A second connection whose Fetch parks at the log end of every partition, so that the
    broker's Produce on the first one completes it (the end-to-end latency path)."""

    OFFSET_MARK = 0x0123456789ABCDEF
    EPOCH_MARK = struct.pack(">i", 0x7EA0C4D1)  # a follower's session epoch, set per pair

    def __init__(self, broker, partitions, follower=False):
        m = broker.messages
        self.broker = broker
        self.sock, self.conn = broker.connect()
        service = broker.service
        topic_id = service.metadata.topic_id(TOPIC)
        epoch = service.metadata.leader_epoch(TOPIC, 0)
        self.logs = [service.log_manager.get_log(TOPIC, p) for p in range(partitions)]
        F = m.FetchRequest

        if follower:  # as kafkatw's replica fetcher (replica_fetcher.py) sends it
            version, client_id, last_epoch, log_start = 15, "broker-1-fetcher-0", epoch, 0
            top = dict(replica_state=F.ReplicaState(replica_id=1, replica_epoch=-1),
                       max_bytes=10485760, isolation_level=0)
        else:  # librdkafka's consumer
            version, client_id, last_epoch, log_start = 16, "rdkafka", -1, -1
            top = dict(replica_id=-1, max_bytes=52428800, isolation_level=1)

        def frame(session_id, session_epoch):
            body = F(max_wait_ms=500, min_bytes=1, session_id=session_id, session_epoch=session_epoch,
                     rack_id="", forgotten_topics_data=[], topics=[F.FetchTopic(
                         topic_id=topic_id, partitions=[F.FetchPartition(
                             partition=p, current_leader_epoch=epoch, fetch_offset=self.OFFSET_MARK,
                             last_fetched_epoch=last_epoch, log_start_offset=log_start,
                             partition_max_bytes=1048576) for p in range(partitions)])], **top)
            return _frame(m, 1, version, 9, body, client_id=client_id)

        self.epoch = None
        if follower:
            # a full fetch (epoch 0) opens the session; its answer carries the session id
            self.pieces = frame(0, 0).split(struct.pack(">q", self.OFFSET_MARK))
            self.conn.dataReceived(self.fetch_frame())
            session_id = self._session_id()
            template = frame(session_id, struct.unpack(">i", self.EPOCH_MARK)[0])
            self.epoch = 1
        else:
            template = frame(0, -1)
        # every partition's fetch_offset at the log end of the partition before each pair
        self.pieces = template.split(struct.pack(">q", self.OFFSET_MARK))

    def _session_id(self):
        """The session id of the first answer on this connection (FetchResponse v15: size,
        correlation id, tagged fields, throttle time, error code, then the session id)."""
        got = b""
        deadline = time.monotonic() + 30
        while len(got) < 15:
            if time.monotonic() > deadline:
                raise SystemExit("no answer to the follower's first Fetch in 30 s")
            self.broker.reactor.iterate(0.01)
            try:
                got += self.sock.recv(1 << 20)
            except BlockingIOError:
                pass
        error, session_id = struct.unpack_from(">hi", got, 13)
        if error != 0 or session_id == 0:
            raise SystemExit("the follower's first Fetch opened no session (error %d)" % error)
        self.broker.drain(self.sock)
        return session_id

    def fetch_frame(self):
        pieces = self.pieces
        out = [pieces[0]]
        for log_, piece in zip(self.logs, pieces[1:]):
            out.append(struct.pack(">q", log_.log_end_offset))
            out.append(piece)
        frame = b"".join(out)
        if self.epoch is not None:
            frame = frame.replace(self.EPOCH_MARK, struct.pack(">i", self.epoch))
            self.epoch += 1
        return frame

    def run(self, produce, n):
        broker = self.broker
        fetch_received = self.conn.dataReceived
        produce_received = broker.conn.dataReceived
        sock = self.sock
        for _ in range(n):
            fetch_received(self.fetch_frame())
            produce_received(produce)
            broker.drain(sock)
            broker.drain()


def _count_bytecodes(run, n, top):
    """Bytecodes and calls per request over ``n`` requests, and the ``top`` functions."""
    import collections

    ops = collections.Counter()
    calls = collections.Counter()

    def tracer(frame, event, arg):
        code = frame.f_code
        if event == "opcode":
            ops[code] += 1
        elif event == "call":
            frame.f_trace_opcodes = True
            calls[code] += 1
        return tracer

    sys.settrace(tracer)
    try:
        run(n)
    finally:
        sys.settrace(None)
    print("%.0f bytecodes and %.1f Python calls per request (%d requests)"
          % (sum(ops.values()) / n, sum(calls.values()) / n, n))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    for code, count in ops.most_common(top):
        print("%8.1f %6.2f  %s:%d %s" % (count / n, calls[code] / n, code.co_filename.replace(root, ""),
                                          code.co_firstlineno, code.co_name))


def _count_instructions(args, n, tree):
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = "0"  # the same string hashes, so the same dict collisions, every run
    if tree:
        env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, os.path.abspath(__file__), "--count", str(n), "--warm", str(args.warm),
           "--partitions", str(args.partitions), "--records", str(args.records),
           "--value-bytes", str(args.value_bytes), "--acls", str(args.acls)] + (["--wake"] if args.wake else []) \
        + (["--follower"] if args.follower else []) + (["--reactor", args.reactor] if args.reactor else [])
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
    ap.add_argument("--value-bytes", type=int, default=None, help="default 100, with --wake 8")
    ap.add_argument("--wake", action="store_true",
                    help="per pair of a parked Fetch (second connection) and the Produce completing it")
    ap.add_argument("--follower", action="store_true",
                    help="with --wake: the parked Fetch is a follower's, in a fetch session")
    ap.add_argument("--warm", type=int, default=None, help="requests before measuring (default 500 / P + 5)")
    ap.add_argument("--profile", metavar="OUT", help="write a cProfile of the measured requests")
    ap.add_argument("--instructions", action="store_true", help="count instructions under valgrind")
    ap.add_argument("--tree", help="with --instructions: a directory holding another tree's kafkatw")
    ap.add_argument("--bytecodes", action="store_true",
                    help="count Python bytecodes and calls per request (sys.settrace), list the top functions")
    ap.add_argument("--top", type=int, default=40, help="with --bytecodes: functions listed")
    ap.add_argument("--acls", type=int, default=0,
                    help="run with the ACL authorizer and this many ACLs (2 of them for this client)")
    ap.add_argument("--reactor", choices=("epoll", "broker"),
                    help="send each request over the socket and answer it through this reactor's "
                         "poll: Twisted's epoll reactor, or the broker's (kafkatw.network.reactor)")
    ap.add_argument("--count", type=int, help=argparse.SUPPRESS)  # one valgrind child
    args = ap.parse_args()
    if args.value_bytes is None:
        args.value_bytes = 8 if args.wake else 100
    if args.warm is None:
        args.warm = 500 // args.partitions + 5
    if args.instructions:
        n = args.requests or max(20, 2000 // args.partitions)
        base = _count_instructions(args, 0, args.tree)
        total = _count_instructions(args, n, args.tree)
        per = (total - base) / n
        import kafkatw  # noqa: F401 (only to name the tree measured)

        what = "pair" if args.wake else "request"
        where = args.tree or os.path.dirname(os.path.dirname(os.path.abspath(kafkatw.__file__)))
        print("%s: %d instructions/%s, %d/partition (%d %ss of %d partition(s) x %d record(s) "
              "of %d B)" % (where, per, what, per / args.partitions, n, what, args.partitions,
                            args.records, args.value_bytes))
        return
    if args.reactor:
        if args.wake:
            raise SystemExit("--reactor measures the one-request path; not with --wake")
        from importlib import import_module

        import_module({"epoll": "twisted.internet.epollreactor",
                       "broker": "kafkatw.network.reactor"}[args.reactor]).install()
    broker = InProcessBroker(args.partitions, args.acls)
    frame = broker.produce_frame(args.partitions, args.records, args.value_bytes)
    if args.reactor:
        run = lambda n: broker.run_through_reactor(frame, n)  # noqa: E731
    elif args.wake:
        broker.waker = Waker(broker, args.partitions, follower=args.follower)
        run = lambda n: broker.waker.run(frame, n)  # noqa: E731
    else:
        run = lambda n: broker.run(frame, n)  # noqa: E731
    run(args.warm)
    try:
        if args.count is not None:
            run(args.count)
        elif args.bytecodes:
            _count_bytecodes(run, args.requests or max(20, 200 // args.partitions), args.top)
        elif args.profile:
            import cProfile

            n = args.requests or 20000 // args.partitions
            prof = cProfile.Profile()
            prof.enable()
            run(n)
            prof.disable()
            prof.dump_stats(args.profile)
        else:
            n = args.requests or 20000 // args.partitions
            best = None
            for _ in range(5):
                t0 = time.process_time()
                run(n)
                elapsed = time.process_time() - t0
                best = elapsed if best is None else min(best, elapsed)
            print("%.1f µs of process CPU per %s, %.2f per partition (best of 5 x %d)"
                  % (best / n * 1e6, "pair" if args.wake else "request", best / n / args.partitions * 1e6, n))
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
