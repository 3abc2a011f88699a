"""A wire fuzzer against a running broker (issue 26): mutated requests of every API and version
the broker advertises, seeded with real client traffic (``tests/corpus/client_requests.bin``)
and with each request class encoded at each advertised version, sent from a few connections
at once (one request in flight on each; a connection the broker closes, or one whose request
it parks, is replaced by a new one), while a control connection
asks ApiVersions every 200 ms and must be answered each time within a bound.

Afterwards: the broker runs, its log has no traceback and no unhandled error, and once what
the fuzzed requests made is removed (topics, groups, ACLs, SCRAM users, quotas; transactional
ids expire) its open descriptors come back to the baseline, and the memory its objects hold
(``--malloc-stats``) to the warm baseline, taken after a warm-up that sent every seed frame
once; RSS is reported against both baselines, cold and warm (docs/reliability.md: why it may
stay above them). ``tests/test_e2e_wire_fuzz.py`` runs a short form; the long form is::

    .venv/bin/python -m tests.wire_fuzz --requests 1000000

which prints a JSON summary with RSS samples over the run (docs/reliability.md keeps the last
one). ``--tracemalloc 1`` adds the broker's largest allocation growth, start against end.
"""

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import struct
import sys
import tempfile
import threading
import time

from kafkatw.protocol import messages as m
from kafkatw.stall_probe import StallLog
from kafkatw.testing import KafkaBroker
from tests.support import API_VERSIONS, RawClient, api_versions_body, poll_until, rss_kb
from tests.test_fuzz_decoders import CORPUS, INTS

#: The broker the command line starts: the stall probe says where the reactor was held.
BROKER_PROPS = {"kafkatw.reactor.stall.probe.ms": 50,
                # deleted topics' directories go a second after the deletion (the clean-up
                # before the last RSS reading waits for them)
                "log.segment.delete.delay.ms": 1000,
                # what fuzzed requests leave that no request can delete expires within seconds
                # (Kafka's defaults: 30 min, 15 min, 7 days, 1 h, 1 day): members of groups,
                # transactions, transactional ids and producer ids
                "group.max.session.timeout.ms": 10000,
                "transaction.max.timeout.ms": 10000,
                "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
                "transactional.id.expiration.ms": 5000,
                "transaction.remove.expired.transaction.cleanup.interval.ms": 1000,
                "producer.id.expiration.ms": 10000,
                "producer.id.expiration.check.interval.ms": 1000}

#: What a clean log never says (twisted.logger's failure lines carry a traceback).
BAD_LOG_MARKERS = ("Traceback", "Unhandled", "#critical]")


def advertised(broker):
    """{api_key: (min, max)} from the broker's ApiVersions answer."""
    c = RawClient(broker, "fuzz-versions")
    try:
        body = c.request(API_VERSIONS, 3, api_versions_body())
    finally:
        c.close()
    return {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}


def seeds(apis):
    """[(api_key, version, frame without size prefix)]: the recorded client requests, and every
    advertised request class, default-built, at every advertised version our codec knows."""
    out = [(k, v, f) for k, v, f in CORPUS if k in apis]
    for api_key, (lo, hi) in sorted(apis.items()):
        cls = m.REQUESTS.get(api_key)
        if cls is None:
            continue
        for version in range(max(lo, cls.VALID_VERSIONS[0]), min(hi, cls.VALID_VERSIONS[1]) + 1):
            hv = m.request_header_version(api_key, version)
            header = m.RequestHeader(request_api_key=api_key, request_api_version=version,
                                     correlation_id=0, client_id="fuzz")
            try:
                body = b"".join(bytes(p) for p in cls().encode(version))
            except Exception:
                continue  # a default the schema does not allow at that version
            out.append((api_key, version, b"".join(bytes(p) for p in header.encode(hv)) + body))
    return out


def mutate(rng, frame):
    """A copy of ``frame`` with 0-6 mutations; the api key, version and correlation id (first
    8 bytes) are kept so the broker routes it to the API under test."""
    head, buf = frame[:8], bytearray(frame[8:])
    for _ in range(rng.choice((0, 1, 1, 2, 3, 6))):
        pos = rng.randrange(len(buf)) if buf else 0
        kind = rng.randrange(7)
        if kind == 0 and buf:
            buf[pos] ^= 1 << rng.randrange(8)
        elif kind == 1 and buf:
            buf[pos] = rng.choice((0, 1, 0x7F, 0x80, 0xFF))
        elif kind == 2:
            buf[pos:pos + 4] = struct.pack(">i", rng.choice(INTS))
        elif kind == 3:
            buf[pos:pos + 2] = struct.pack(">h", rng.choice((0, 1, -1, 0x7FFF, -0x8000)))
        elif kind == 4:
            buf[pos:pos] = os.urandom(rng.randrange(1, 17))
        elif kind == 5:
            del buf[pos:pos + rng.randrange(1, 17)]
        else:
            del buf[pos:]
    return head + bytes(buf)


class Sender(threading.Thread):
    """One connection at a time: sends a mutated frame (a new correlation id), waits for its
    answer (which must carry that id), the broker closing the connection, or ``patience``
    seconds (a request the broker parks, e.g. a JoinGroup waiting for its rebalance): then
    the connection is dropped and a new one opened."""

    def __init__(self, broker, frames, count, seed, stop, patience=1.0, mutated=True):
        super().__init__(daemon=True)
        self.broker, self.frames, self.count = broker, frames, count
        self.rng = random.Random(seed)
        self.mutated = mutated  # False: each frame once, in order, as recorded or built
        self.stop_event = stop
        self.patience = patience
        self.sent = self.answered = self.closed = self.parked = self.connections = 0
        self.error = None

    def run(self):
        try:
            self._run()
        except Exception as e:  # reported by the caller
            self.error = e

    def _recv_exact(self, sock, n):
        out = bytearray()
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ConnectionResetError("closed by the broker")
            out += chunk
        return bytes(out)

    def _run(self):
        sock = None
        corr = 0
        while self.sent < self.count and not self.stop_event.is_set():
            if sock is None:
                sock = socket.create_connection((self.broker.host, self.broker.port), timeout=10)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(self.patience)
                self.connections += 1
            if self.mutated:
                _api_key, _version, frame = self.rng.choice(self.frames)
                data = bytearray(mutate(self.rng, frame))
            else:
                data = bytearray(self.frames[self.sent % len(self.frames)][2])
            corr = (corr + 1) & 0x7FFFFFFF
            if len(data) >= 8:
                struct.pack_into(">i", data, 4, corr)
            try:
                sock.sendall(struct.pack(">i", len(data)) + bytes(data))
                self.sent += 1
                (size,) = struct.unpack(">i", self._recv_exact(sock, 4))
                payload = self._recv_exact(sock, size)
                (got,) = struct.unpack_from(">i", payload, 0)
                if got != corr:
                    raise AssertionError("answer with correlation id %d to request %d" % (got, corr))
                self.answered += 1
                continue
            except socket.timeout:
                self.parked += 1
            except (ConnectionError, OSError):
                self.closed += 1
            sock.close()
            sock = None
        if sock is not None:
            sock.close()


class Control(threading.Thread):
    """ApiVersions every ``interval`` on its own connection: the broker must keep answering."""

    def __init__(self, broker, stop, interval=0.2):
        super().__init__(daemon=True)
        self.broker, self.stop_event, self.interval = broker, stop, interval
        self.answered = 0
        self.max_latency = 0.0
        self.error = None

    def run(self):
        try:
            c = RawClient(self.broker, "fuzz-control", timeout=10)
            while not self.stop_event.is_set():
                t0 = time.monotonic()
                body = c.request(API_VERSIONS, 3, api_versions_body())
                assert body.error_code == 0, body
                self.max_latency = max(self.max_latency, time.monotonic() - t0)
                self.answered += 1
                self.stop_event.wait(self.interval)
            c.close()
        except Exception as e:
            self.error = e


class Janitor(threading.Thread):
    """Deletes the topics fuzzed CreateTopics requests made, every ``interval`` seconds, on its
    own connection: each partition keeps its segment files open, and the first million-request
    run ended when 7,030 partition directories had used up the machine's 20,000 descriptors
    (the broker then stops, as Kafka does when a log dir cannot open files). Not enough alone:
    one fuzzed CreateTopics or CreatePartitions can ask for thousands of partitions (the second
    run reached 8,704 directories between two passes). Internal topics stay."""

    def __init__(self, broker, stop, interval=30.0):
        super().__init__(daemon=True)
        self.broker, self.stop_event, self.interval = broker, stop, interval
        self.deleted = 0
        self.error = None

    def run(self):
        try:
            while not self.stop_event.wait(self.interval):
                self.sweep()
        except Exception as e:
            self.error = e

    def sweep(self):
        """Delete every topic but the internal ones: how many were asked to go."""
        c = RawClient(self.broker, "fuzz-janitor", timeout=60)
        try:
            md = c.request(3, 9, m.MetadataRequest(topics=None, allow_auto_topic_creation=False))
            names = [t.name for t in md.topics if t.name and not t.name.startswith("__")]
            for i in range(0, len(names), 100):
                c.request(20, 4, m.DeleteTopicsRequest(topic_names=names[i:i + 100], timeout_ms=60000))
            self.deleted += len(names)
            return len(names)
        finally:
            c.close()


NON_EMPTY_GROUP = 68


def clean_up(broker, bound=60.0):
    """Remove what fuzzed requests made: topics (until their directories are gone), groups
    (members the fuzzer left behind expire within ``group.max.session.timeout.ms``), ACLs,
    SCRAM users and client quotas; transactional ids expire by themselves (``BROKER_PROPS``:
    this waits for them). {kind: how many were removed, ``*_left``: what did not go}."""
    c = RawClient(broker, "fuzz-cleaner", timeout=60)
    removed = {}
    try:
        removed["topics"] = Janitor(broker, None).sweep()
        R = m.DeleteAclsRequest
        body = c.request(31, 3, R(filters=[R.DeleteAclsFilter(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
            principal_filter=None, host_filter=None, operation=1, permission_type=1)]))
        removed["acls"] = sum(len(r.matching_acls) for r in body.filter_results)
        body = c.request(50, 0, m.DescribeUserScramCredentialsRequest(users=None))
        R = m.AlterUserScramCredentialsRequest
        deletions = [R.ScramCredentialDeletion(name=r.user, mechanism=i.mechanism)
                     for r in body.results for i in r.credential_infos]
        if deletions:
            c.request(51, 0, R(deletions=deletions, upsertions=[]))
        removed["scram_credentials"] = len(deletions)
        body = c.request(48, 1, m.DescribeClientQuotasRequest(components=[], strict=False))
        R = m.AlterClientQuotasRequest
        entries = [R.EntryData(entity=[R.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                                       for e in entry.entity],
                               ops=[R.OpData(key=v.key, value=0.0, remove=True) for v in entry.values])
                   for entry in body.entries or ()]
        if entries:
            c.request(49, 1, R(entries=entries, validate_only=False))
        removed["quota_entities"] = len(entries)
        deadline = time.monotonic() + bound
        removed["groups"] = 0
        while True:
            groups = [g.group_id for g in c.request(16, 4, m.ListGroupsRequest(states_filter=[])).groups]
            if groups:
                body = c.request(42, 2, m.DeleteGroupsRequest(groups_names=groups))
                removed["groups"] += sum(1 for r in body.results if r.error_code == 0)
            if not groups or time.monotonic() > deadline:
                removed["groups_left"] = len(groups)
                break
            time.sleep(0.5)
        while True:  # transactional ids expire (BROKER_PROPS): ongoing ones abort first
            left = c.request(66, 0, m.ListTransactionsRequest(
                state_filters=[], producer_id_filters=[])).transaction_states
            if not left or time.monotonic() > deadline:
                removed["transactional_ids_left"] = len(left)
                break
            time.sleep(0.5)
        while topic_dirs(broker.data_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        return removed
    finally:
        c.close()


class _Hook:
    """What both probes share: the broker is started with ``tests/memhook`` on its
    ``PYTHONPATH`` (its ``sitecustomize``, never loaded by a shipped path) and answers a signal
    by writing ``<directory>/<n>.<suffix>``, which ``_ask`` waits for."""

    HOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "memhook")

    def __init__(self, directory):
        self.directory = directory
        self.taken = 0

    def _environ(self, **extra):
        """The broker's environment: the hook first on ``PYTHONPATH`` (one probe a run: both
        together are refused), no fork server (it would not inherit it), and ``extra``."""
        path = os.environ.get("PYTHONPATH")
        return dict(extra, PYTHONPATH=self.HOOK + (os.pathsep + path if path else ""),
                    KAFKATW_TESTING_FORK_SERVER="0")

    def _ask(self, pid, signum, suffix, timeout, what):
        """Signal ``pid`` and wait for the file it writes; its path."""
        self.taken += 1
        path = os.path.join(self.directory, "%d.%s" % (self.taken, suffix))
        os.kill(pid, signum)
        poll_until(lambda: os.path.exists(path), timeout=timeout, interval=0.1,
                   message="%s from the broker" % what)
        return path


class MemoryProbe(_Hook):
    """``tracemalloc`` in the broker (``--tracemalloc``): its ``sitecustomize`` dumps a
    snapshot on SIGUSR2; ``growth`` compares the first snapshot with the last."""

    def __init__(self, directory, frames=1):
        super().__init__(directory)
        self.frames = frames

    def environ(self):
        return self._environ(KAFKATW_TRACEMALLOC_DIR=self.directory,
                             KAFKATW_TRACEMALLOC_FRAMES=str(self.frames))

    def snapshot(self, pid, timeout=120.0):
        return self._ask(pid, signal.SIGUSR2, "snap", timeout, "a tracemalloc snapshot")

    def growth(self, pid, top=25):
        """The ``top`` largest differences, last snapshot against the first, as text lines."""
        import tracemalloc
        last = tracemalloc.Snapshot.load(self.snapshot(pid))
        first = tracemalloc.Snapshot.load(os.path.join(self.directory, "1.snap"))
        keep = [tracemalloc.Filter(False, tracemalloc.__file__)]
        stats = last.filter_traces(keep).compare_to(first.filter_traces(keep),
                                                      "traceback" if self.frames > 1 else "lineno")
        total = sum(s.size_diff for s in stats)
        out = ["total %+d kB" % (total // 1024)]
        for s in stats[:top]:
            out.append("%+d kB %+d blocks %s" % (s.size_diff // 1024, s.count_diff,
                                                  " <- ".join(str(f) for f in s.traceback)))
        return out


class MallocProbe(_Hook):
    """Where the broker's RSS is held (``--malloc-stats``): each ``stats`` sends SIGUSR1 and
    reads what ``tests/memhook/malloc_stats.py`` wrote: pymalloc's arenas, glibc's heap and
    arenas, and the RSS after ``malloc_trim(0)``."""

    def environ(self):
        return self._environ(KAFKATW_MALLOC_STATS_DIR=self.directory)

    def stats(self, pid, timeout=60.0):
        with open(self._ask(pid, signal.SIGUSR1, "json", timeout, "malloc stats")) as f:
            return json.load(f)


def live_kb(stats):
    """Memory in use by objects, from a MallocProbe's stats: pymalloc's allocated blocks and
    glibc's in-use bytes (what RSS is without the allocators' free memory)."""
    if "glibc" not in stats or stats["pymalloc"]["allocated_blocks_bytes"] is None:
        return None  # not glibc, or PYTHONMALLOC=malloc
    return (stats["pymalloc"]["allocated_blocks_bytes"] + stats["glibc"]["in_use_bytes"]) // 1024


def internal_topics(broker, bound=60.0):
    """Have the broker create ``__consumer_offsets`` and ``__transaction_state`` (the first
    FindCoordinator does) before the baseline: their 100 logs are the broker's, not the
    fuzzed requests' state, and stay after the clean-up."""
    c = RawClient(broker, "fuzz-coordinators", timeout=60)
    deadline = time.monotonic() + bound
    try:
        for key_type in (0, 1):
            while True:
                body = c.request(10, 3, m.FindCoordinatorRequest(key="fuzz", key_type=key_type))
                if body.error_code == 0:
                    break
                if time.monotonic() > deadline:
                    raise AssertionError("no coordinator of key type %d: %r" % (key_type, body))
                time.sleep(0.1)
    finally:
        c.close()


def warm_up(broker, frames, connections=8):
    """Every seed frame once, unmutated (every advertised API at every version, the recorded
    client traffic), then the clean-up: what a long-running broker has done once (modules
    imported on first use, caches and allocator pools of every request path) before the
    warm baseline. {"requests", "answered", "removed_by_clean_up"}."""
    stop = threading.Event()
    senders = [Sender(broker, frames[i::connections], len(frames[i::connections]), 0, stop,
                      mutated=False) for i in range(connections)]
    for s in senders:
        s.start()
    for s in senders:
        s.join(120)
    if any(s.is_alive() for s in senders):
        stop.set()  # else it would go on sending through the baseline and the run
        raise AssertionError("warm-up: a sender still running after 120 s")
    errors = [repr(s.error) for s in senders if s.error]
    if errors:
        raise AssertionError("warm-up: %s" % errors)
    return {"requests": sum(s.sent for s in senders),
            "answered": sum(s.answered for s in senders),
            "removed_by_clean_up": clean_up(broker)}


def topic_dirs(data_dir):
    """Partition directories of non-internal topics (deleted ones included until removed)."""
    return [n for n in os.listdir(data_dir)
            if os.path.isdir(os.path.join(data_dir, n)) and not n.startswith("__")]


def fd_count(pid, data_dir):
    """Open descriptors of ``pid`` that are not files under ``data_dir``: sockets, pipes and
    the like (a fuzzed CreateTopics legitimately opens segment files)."""
    n = 0
    data_dir = os.path.realpath(data_dir) + os.sep
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if not target.startswith(data_dir):
            n += 1
    return n


def log_files(path):
    """``path`` and the files twistd rotated it to (every 1 MB), oldest first: a long run's
    log is hundreds of files, and reading ``path`` alone checked only the last."""
    n = 0
    while os.path.exists("%s.%d" % (path, n + 1)):
        n += 1
    return ["%s.%d" % (path, i) for i in range(n, 0, -1)] + [path]


def bad_log_lines(path):
    out = []
    for name in log_files(path):
        with open(name, errors="replace") as f:
            out.extend(line.rstrip("\n") for line in f if any(b in line for b in BAD_LOG_MARKERS))
    return out


def run(broker, requests, connections=8, seed=1, time_limit=None, janitor_interval=30.0,
        sample_interval=60.0, memory=None, malloc=None, warm=True):
    """Fuzz ``broker`` with ``requests`` mutated requests; a summary dict. RSS is sampled every
    ``sample_interval`` seconds; ``memory`` (a MemoryProbe) adds the tracemalloc growth,
    ``malloc`` (a MallocProbe) where the RSS is held. Two baselines: cold, once the internal
    topics exist; warm, after ``warm_up`` (docs/reliability.md says why both)."""
    pid = broker.process.pid
    apis = advertised(broker)
    frames = seeds(apis)
    internal_topics(broker)
    time.sleep(0.5)  # let start-up work settle before the baseline
    base_rss, base_fds = rss_kb(pid), fd_count(pid, broker.data_dir)
    warmed = None
    if warm:
        warmed = warm_up(broker, frames)
        time.sleep(0.5)
        warmed["rss_kb"] = rss_kb(pid)
    if memory is not None:
        memory.snapshot(pid)
    malloc_before = malloc.stats(pid) if malloc is not None else None
    stalls = StallLog(broker.log_path).mark()
    stop = threading.Event()
    control = Control(broker, stop)
    control.start()
    janitor = Janitor(broker, stop, janitor_interval) if janitor_interval else None
    if janitor is not None:
        janitor.start()
    per = -(-requests // connections)
    senders = [Sender(broker, frames, per, seed * 1000 + i, stop) for i in range(connections)]
    t0 = time.monotonic()
    for s in senders:
        s.start()
    deadline = None if time_limit is None else t0 + time_limit
    samples = []  # [seconds, requests sent, RSS kB]
    next_sample = t0 + sample_interval
    while any(s.is_alive() for s in senders) and (deadline is None or time.monotonic() < deadline):
        time.sleep(min(0.5, max(0.0, next_sample - time.monotonic())))
        if time.monotonic() >= next_sample and broker.running:
            samples.append([round(time.monotonic() - t0), sum(s.sent for s in senders), rss_kb(pid)])
            next_sample += sample_interval
    stop.set()
    for s in senders:
        s.join(30)
    control.join(30)
    if janitor is not None:
        janitor.join(120)
    elapsed = time.monotonic() - t0
    # back to baseline once the fuzz connections are gone
    fds = fd_count(pid, broker.data_dir)
    settle = time.monotonic() + 20
    while fds > base_fds and time.monotonic() < settle:
        time.sleep(0.1)
        fds = fd_count(pid, broker.data_dir)
    rss_after = rss_kb(pid) if broker.running else None
    dirs_at_end = len(topic_dirs(broker.data_dir))
    # the state the fuzzed requests left (topics, groups, ACLs, SCRAM users, quotas) goes, then
    # RSS again: what is still above the baseline is neither that state nor its caches
    rss_cleaned, removed, snapshots = None, {}, None
    if broker.running:
        removed = clean_up(broker)
        time.sleep(2)
        rss_cleaned = rss_kb(pid)
        if memory is not None:
            snapshots = memory.growth(pid)
    malloc_after = malloc.stats(pid) if malloc is not None and broker.running else None
    return {
        "requests": sum(s.sent for s in senders),
        "answered": sum(s.answered for s in senders),
        "seconds": round(elapsed, 1),
        "apis": len(apis),
        "seed_frames": len(frames),
        "connections_opened": sum(s.connections for s in senders),
        "closed_by_broker": sum(s.closed for s in senders),
        "parked_then_dropped": sum(s.parked for s in senders),
        "control_answers": control.answered,
        "control_max_latency_ms": int(control.max_latency * 1000),
        "reactor_stalls_over_50ms": len(stalls.stalls()),
        "max_stall_ms": max(stalls.stalls() or [0]),
        "broker_running": broker.running,
        "rss_kb_before": base_rss,
        "rss_kb_warm": warmed and warmed["rss_kb"],
        "warm_up": warmed,
        "rss_kb_after": rss_after,
        "rss_kb_after_clean_up": rss_cleaned,
        "partition_dirs_at_end_of_clean_up": len(topic_dirs(broker.data_dir)),
        "rss_samples": samples,
        "removed_by_clean_up": removed,
        "tracemalloc_growth": snapshots,
        "malloc_stats_before": malloc_before,
        "malloc_stats_after": malloc_after,
        "live_kb_growth": (live_kb(malloc_after) - live_kb(malloc_before)
                           if malloc_before and malloc_after and live_kb(malloc_before) else None),
        "fds_before": base_fds,
        "fds_after": fds,
        "topics_deleted_by_janitor": janitor.deleted if janitor is not None else 0,
        "partition_dirs_at_end": dirs_at_end,
        "log_files": len(log_files(broker.log_path)),
        "bad_log_lines": bad_log_lines(broker.log_path)[:20],
        "errors": [repr(e) for e in [control.error, janitor and janitor.error] + [s.error for s in senders] if e],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description="Fuzz a throwaway broker over the wire.")
    parser.add_argument("--requests", type=int, default=1000000)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--janitor-interval", type=float, default=30.0,
                        help="delete the fuzzed topics every this many seconds (0: never)")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="stop sending after this many seconds (the summary counts what was sent)")
    parser.add_argument("--sample", type=float, default=60.0, help="sample RSS every this many seconds")
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="FRAMES",
                        help="trace the broker's allocations (this many frames each) and print "
                             "the largest growth from start to after the clean-up (slow)")
    parser.add_argument("--malloc-stats", action="store_true",
                        help="say where the broker's RSS is held (Python's and glibc's "
                             "allocators) at the warm baseline and after the clean-up, and what "
                             "malloc_trim(0) gives back (it trims at both)")
    parser.add_argument("--no-warm-up", action="store_true",
                        help="skip the warm-up and its baseline")
    args = parser.parse_args(argv)
    if args.malloc_stats and args.tracemalloc:
        # tracemalloc hooks the allocator: sys._debugmallocstats() then says nothing of
        # pymalloc, and live_kb_growth would be missing from the summary
        parser.error("--malloc-stats cannot be used with --tracemalloc: tracing hides "
                     "pymalloc's figures")
    with contextlib.ExitStack() as stack:
        memory = malloc = None
        if args.malloc_stats:
            malloc = MallocProbe(stack.enter_context(tempfile.TemporaryDirectory(
                prefix="fuzz-malloc-")))
            os.environ.update(malloc.environ())
        if args.tracemalloc:
            # the snapshots (MBs each) go with the run: the summary holds what they showed
            memory = MemoryProbe(stack.enter_context(tempfile.TemporaryDirectory(
                prefix="fuzz-tracemalloc-")), args.tracemalloc)
            os.environ.update(memory.environ())
        # tracing allocations slows the start a lot on a loaded machine
        with KafkaBroker(overrides=BROKER_PROPS, start_timeout=120 if memory else 30) as broker:
            summary = run(broker, args.requests, args.connections, args.seed, args.time_limit,
                          args.janitor_interval, args.sample, memory, malloc,
                          warm=not args.no_warm_up)
            summary["seed"] = args.seed
    print(json.dumps(summary, indent=1))
    ok = (summary["broker_running"] and not summary["bad_log_lines"] and not summary["errors"]
          and summary["fds_after"] <= summary["fds_before"])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
