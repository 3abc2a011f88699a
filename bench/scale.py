"""Scale on one broker (issue 21): partitions and connections, measured the way a user meets
them. ``make bench-scale`` or

    .venv/bin/python -m bench.scale [--partitions 1000 10000 50000] [--connections 1000 10000]
                                    [--limit 20000] [--tansu | --only-tansu]
    .venv/bin/python -m bench.scale --start-only DATA_DIR [--rounds 3]

Partitions, for each count: topics of at most 2,000 partitions created with confluent-kafka's
admin client (the slowest CreateTopics of a topic and the total), Metadata for every topic on
one connection (median of 5, request sent to the last response byte received; the client's
decoding not included), RSS and open descriptors, one record produced to every
partition by confluent-kafka, a clean restart (start time to the first answered ApiVersions,
the broker's CPU time by then, and the first Metadata for every topic after it), a kill -9 and the start after it, and the descriptors after each; after the produce and each
start confluent-kafka consumers (one per topic, in turn) read every partition back from
offset 0 (each must hold exactly its one record). The broker runs under
``ulimit -n`` = ``--limit`` (soft and hard).

Connections, for each count: that many connections each send ApiVersions and Metadata (one
topic) and stay open; the broker's RSS before and after, then Metadata on a new connection
(median and worst of 20) while they are open.

``--tansu`` measures Tansu (memory storage) the same way where it can. ``--start-only``
starts kafkatw on a data dir a clean stop left (its topics created and produced to as a
partitions run does, by a broker given that ``data_dir``) ``--rounds`` times: from spawning the process to ready (the first Metadata for
every topic answered), the broker's CPU then, the first Metadata's time, the clean stop; which
kafkatw runs is the one ``PYTHONPATH`` gives (an A/B against another worktree). Prints one
line per figure; nothing is asserted.
"""

import argparse
import os
import resource
import socket
import struct
import time

from kafkatw.protocol import messages as m

from bench.brokers import Tansu
from bench.procstat import cpu_seconds, rss_bytes

TOPIC_SIZE = 2000


def frame(api_key, version, corr, body):
    header = m.RequestHeader(request_api_key=api_key, request_api_version=version,
                             correlation_id=corr, client_id="bench-scale")
    payload = (b"".join(header.encode(m.request_header_version(api_key, version)))
               + b"".join(bytes(p) for p in body.encode(version)))
    return struct.pack(">i", len(payload)) + payload


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def exchange(sock, api_key, version, body, corr=1):
    """The response's bytes (timed without the client's decoding)."""
    sock.sendall(frame(api_key, version, corr, body))
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    return memoryview(recv_exact(sock, size))


def decode(api_key, version, payload):
    _, pos = m.ResponseHeader.decode_from(payload, 0, m.response_header_version(api_key, version))
    return m.RESPONSES[api_key].decode_from(payload, pos, version)[0]


def request(sock, api_key, version, body, corr=1):
    return decode(api_key, version, exchange(sock, api_key, version, body, corr))


def metadata_body(topics):
    return m.MetadataRequest(topics=None if topics is None else [
        m.MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
        allow_auto_topic_creation=False)


def time_metadata(host, port, topics, runs=5):
    """(median ms, partitions answered) of Metadata for ``topics`` on one connection."""
    with socket.create_connection((host, port)) as sock:
        times = []
        for i in range(runs):
            t = time.perf_counter()
            payload = exchange(sock, 3, 12, metadata_body(topics), corr=i + 1)
            times.append((time.perf_counter() - t) * 1000)
    resp = decode(3, 12, payload)
    times.sort()
    return times[len(times) // 2], sum(len(t.partitions) for t in resp.topics)


def open_fds(pid):
    import os

    return len(os.listdir("/proc/%d/fd" % pid))


def topic_names(partitions):
    sizes = []
    left = partitions
    while left > 0:
        sizes.append(min(TOPIC_SIZE, left))
        left -= sizes[-1]
    return [("scale-%03d" % i, n) for i, n in enumerate(sizes)]


def create(bootstrap, topics):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    slowest = 0.0
    started = time.monotonic()
    for name, n in topics:
        t = time.monotonic()
        admin.create_topics([NewTopic(name, n, 1)], operation_timeout=300,
                            request_timeout=300)[name].result()
        slowest = max(slowest, time.monotonic() - t)
    return time.monotonic() - started, slowest


def consume_everywhere(bootstrap, topics, delivered, idle=60):
    """(seconds, records read, partitions with exactly their one record) reading every
    partition from offset 0: one confluent-kafka consumer per topic, one after the other,
    until each partition ``delivered`` to has been read or nothing came for ``idle`` s."""
    from confluent_kafka import Consumer, TopicPartition

    got = {}
    started = time.monotonic()
    for name, n in topics:
        wanted = sum(1 for t, _ in delivered if t == name)
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-scale",
                      "enable.auto.commit": False, "log_level": 3})
        try:
            c.assign([TopicPartition(name, part, 0) for part in range(n)])
            count, last = 0, time.monotonic()
            while count < wanted and time.monotonic() - last < idle:
                for msg in c.consume(5000, 1.0):
                    if msg.error():
                        continue
                    got.setdefault((msg.topic(), msg.partition()), []).append(msg.value())
                    count += 1
                    last = time.monotonic()
        finally:
            c.close()
    exact = sum(got.get(tp) == [b"%s/%d" % (tp[0].encode(), tp[1])] for tp in delivered)
    return time.monotonic() - started, sum(len(v) for v in got.values()), exact


def produce_everywhere(bootstrap, topics):
    """(seconds, not delivered, {(topic, partition)} delivered). ``message.timeout.ms`` is
    an hour: with librdkafka's default 300 s most of 50,000 first appends (each fsyncs its
    leader-epoch checkpoint) expired in the client, which ``flush`` does not count."""
    from confluent_kafka import Producer

    delivered = set()

    def report(err, msg):
        if err is None:
            delivered.add((msg.topic(), msg.partition()))

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 3,
                  "message.timeout.ms": 3600000})
    started = time.monotonic()
    total = 0
    for name, n in topics:
        for part in range(n):
            p.produce(name, b"%s/%d" % (name.encode(), part), partition=part, on_delivery=report)
            p.poll(0)
            total += 1
    p.flush(3600)
    return time.monotonic() - started, total - len(delivered), delivered


class Subject:
    """kafkatw under ``ulimit -n``, or Tansu (memory storage; no restarts)."""

    def __init__(self, name, limit):
        self.name = name
        self.limit = limit
        self.broker = None

    def start(self):
        if self.name == "tansu":
            self.broker = Tansu().start()
            self.bootstrap = self.broker.bootstrap
            self.pid = self.broker.pid
            return 0.0
        from kafkatw.testing import KafkaBroker

        if self.broker is None:
            self.broker = KafkaBroker(open_file_limit=self.limit, start_timeout=600, overrides={
                "kafkatw.request.log.enable": "false"})
        t = time.monotonic()
        self.broker.start()
        elapsed = time.monotonic() - t
        self.bootstrap = self.broker.bootstrap_servers
        self.pid = self.broker.process.pid
        return elapsed

    @property
    def restartable(self):
        return self.name == "kafkatw"

    def stop(self):
        t = time.monotonic()
        self.broker.stop(timeout=600)  # (the default 30 s kills a broker of 50,000 logs)
        return time.monotonic() - t

    def kill(self):
        self.broker.kill()

    def close(self):
        if self.name == "tansu":
            self.broker.stop()
        else:
            self.broker.close()


def say(subject, what, value):
    print("%-8s %-44s %s" % (subject, what, value), flush=True)


def consumed(s, name, what, topics, delivered):
    secs, records, exact = consume_everywhere(s.bootstrap, topics, delivered)
    say(name, what, "%.1f s (%d records; %d of the %d delivered hold exactly theirs), "
        "%d descriptors" % (secs, records, exact, len(delivered), open_fds(s.pid)))


def partitions_run(name, partitions, limit):
    s = Subject(name, limit)
    s.start()
    try:
        topics = topic_names(partitions)
        host, port = s.bootstrap.rsplit(":", 1)
        port = int(port)
        label = "%d partitions" % partitions
        total, slowest = create(s.bootstrap, topics)
        say(name, label + ": create", "%.1f s (slowest topic of %d: %.2f s)"
            % (total, topics[0][1], slowest))
        ms, answered = time_metadata(host, port, None)
        say(name, label + ": Metadata, all topics", "%.1f ms (%d partitions)" % (ms, answered))
        say(name, label + ": RSS, descriptors", "%.0f MB, %d" % (rss_bytes(s.pid) / 1e6,
                                                                 open_fds(s.pid)))
        secs, failed, delivered = produce_everywhere(s.bootstrap, topics)
        say(name, label + ": produce one to each", "%.1f s (%d not delivered)" % (secs, failed))
        say(name, label + ": RSS, descriptors", "%.0f MB, %d" % (rss_bytes(s.pid) / 1e6,
                                                                 open_fds(s.pid)))
        consumed(s, name, label + ": consume all", topics, delivered)
        if s.restartable:
            stop = s.stop()
            start = s.start()
            say(name, label + ": clean stop, start", "%.1f s, %.1f s (the start's CPU %.1f s)"
                % (stop, start, cpu_seconds(s.pid)))
            t = time.monotonic()
            with socket.create_connection((host, port)) as sock:
                exchange(sock, 3, 12, metadata_body(None))  # (it builds each topic's answer)
            say(name, label + ": first Metadata after start", "%.0f ms"
                % ((time.monotonic() - t) * 1000))
            ms, answered = time_metadata(host, port, None)
            say(name, label + ": Metadata after start", "%.1f ms (%d partitions)" % (ms, answered))
            consumed(s, name, label + ": consume all after the clean start", topics, delivered)
            s.kill()
            start = s.start()
            say(name, label + ": start after kill -9", "%.1f s" % start)
            consumed(s, name, label + ": consume all after kill -9", topics, delivered)
            with open(s.broker.log_path) as f:
                lines = [ln.split("] ", 1)[-1].strip() for ln in f
                         if "after an unclean stop" in ln or "after a clean shutdown" in ln]
            for line in lines[-2:]:
                say(name, label + ": broker says", line)
            say(name, label + ": descriptors after start", "%d" % open_fds(s.pid))
    finally:
        s.close()


def start_only(data_dir, limit, rounds):
    """Clean starts of kafkatw on ``data_dir`` (see the module's doc)."""
    import kafkatw
    from kafkatw.testing import KafkaBroker

    # (the broker, a twistd process, takes kafkatw from PYTHONPATH before the installed one)
    where = os.environ.get("PYTHONPATH") or os.path.dirname(
        os.path.dirname(os.path.abspath(kafkatw.__file__)))
    for i in range(rounds):
        b = KafkaBroker(data_dir=data_dir, keep_data=True, open_file_limit=limit,
                        start_timeout=600, overrides={"kafkatw.request.log.enable": "false"})
        t0 = time.monotonic()
        b.start()
        answered, cpu_answered = time.monotonic() - t0, cpu_seconds(b.process.pid)
        host, port = b.bootstrap_servers.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as sock:
            t = time.monotonic()
            resp = decode(3, 12, exchange(sock, 3, 12, metadata_body(None)))
            ready = time.monotonic()
        cpu_ready = cpu_seconds(b.process.pid)
        t = ready - t
        with open(b.log_path) as f:
            loaded = [ln.split("] ", 1)[-1].strip() for ln in f
                      if "after a clean shutdown" in ln or "after an unclean stop" in ln]
        stopped = time.monotonic()
        b.stop(timeout=600)
        label = "start %d (%s)" % (i + 1, where)
        say("kafkatw", label + ": ApiVersions answered", "%.2f s (the broker's CPU %.2f s)"
            % (answered, cpu_answered))
        say("kafkatw", label + ": ready", "%.2f s (the broker's CPU %.2f s; first Metadata "
            "%.0f ms, %d partitions)" % (ready - t0, cpu_ready, t * 1000,
                                         sum(len(tp.partitions) for tp in resp.topics)))
        say("kafkatw", label + ": clean stop", "%.1f s" % (time.monotonic() - stopped))
        say("kafkatw", label + ": broker says", loaded[-1] if loaded else "?")


def connections_run(name, count, limit):
    s = Subject(name, limit)
    s.start()
    socks = []
    try:
        host, port = s.bootstrap.rsplit(":", 1)
        port = int(port)
        create(s.bootstrap, [("conn", 1)])
        before = rss_bytes(s.pid)
        started = time.monotonic()
        for i in range(count):
            sock = socket.create_connection((host, port))
            request(sock, 18, 3, m.ApiVersionsRequest(client_software_name="bench",
                                                       client_software_version="1"), 1)
            request(sock, 3, 12, metadata_body(["conn"]), 2)
            socks.append(sock)
        opened = time.monotonic() - started
        time.sleep(1.0)
        after = rss_bytes(s.pid)
        label = "%d connections" % count
        say(name, label + ": opened (ApiVersions + Metadata each)", "%.1f s" % opened)
        say(name, label + ": RSS", "%.0f MB -> %.0f MB (+%.0f MB)"
            % (before / 1e6, after / 1e6, (after - before) / 1e6))
        times = []
        for _ in range(20):
            t = time.perf_counter()
            with socket.create_connection((host, port)) as sock:
                request(sock, 3, 12, metadata_body(["conn"]))
            times.append((time.perf_counter() - t) * 1000)
        times.sort()
        say(name, label + ": Metadata on a new connection", "median %.1f ms, worst %.1f ms"
            % (times[10], times[-1]))
    finally:
        for sock in socks:
            sock.close()
        s.close()


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, nargs="*", default=[1000, 10000, 50000])
    ap.add_argument("--connections", type=int, nargs="*", default=[1000, 10000])
    ap.add_argument("--limit", type=int, default=20000, help="the broker's ulimit -n")
    ap.add_argument("--tansu", action="store_true", help="Tansu too")
    ap.add_argument("--only-tansu", action="store_true")
    ap.add_argument("--start-only", metavar="DATA_DIR",
                    help="only clean starts of kafkatw on this data dir (see above)")
    ap.add_argument("--rounds", type=int, default=1, help="starts for --start-only")
    a = ap.parse_args(argv)
    if a.start_only:
        start_only(a.start_only, a.limit, a.rounds)
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if max(a.connections or [0]) + 100 > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    subjects = ([] if a.only_tansu else ["kafkatw"]) + (["tansu"] if a.tansu or a.only_tansu else [])
    for name in subjects:
        for n in a.partitions:
            partitions_run(name, n, a.limit)
        for n in a.connections:
            connections_run(name, n, a.limit)


if __name__ == "__main__":
    main()
