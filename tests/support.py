"""Helpers the tests share: unique names, bounded polling, confluent-kafka admin futures, and a
raw-socket client speaking the protocol through ``kafkatw.protocol.messages`` (framing, create
topic, produce, sessionless fetch, request log). No tests here."""

import atexit
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import uuid

from kafkatw.protocol import messages as m
from kafkatw.protocol import records as rec

_TMP = tempfile.mkdtemp(prefix="kafkatw-e2e-")
atexit.register(shutil.rmtree, _TMP, True)

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS, CREATE_TOPICS = 0, 1, 2, 3, 18, 19
FETCH_V = 12  # the last Fetch version with topic names
PRODUCE_V = 9


def tmp_path(name):
    return os.path.join(_TMP, "%s-%s" % (uuid.uuid4().hex[:8], name))


def unique_name(prefix):
    """``prefix-`` and 8 random hex digits: a topic, group or client id no other test uses."""
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def poll_until(predicate, timeout=20.0, interval=0.02, message="condition"):
    """The first truthy value of ``predicate()``, asked every ``interval`` s; fails the test
    naming ``message`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("timed out after %.1f s waiting for %s" % (timeout, message))


def frame(api_key, version, correlation_id, body, client_id="raw"):
    hv = m.request_header_version(api_key, version)
    header = m.RequestHeader(request_api_key=api_key, request_api_version=version,
                             correlation_id=correlation_id, client_id=client_id)
    payload = b"".join(header.encode(hv)) + b"".join(bytes(p) for p in body.encode(version))
    return struct.pack(">i", len(payload)) + payload


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1024 * 1024))
        if not chunk:
            raise ConnectionError("closed after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return bytes(buf)


def closed_by_peer(sock, timeout=5.0):
    """True when the peer closes ``sock`` (EOF or reset) within ``timeout`` with nothing sent."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(1)
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False
    return data == b""


class RawClient:
    """One connection speaking the protocol through ``kafkatw.protocol.messages``.

    Counts bytes on the wire both ways (``bytes_sent``, ``bytes_received``; the size prefix
    included) and remembers the API/version of each outstanding correlation id.
    """

    def __init__(self, broker, client_id="raw", timeout=15.0, port=None):
        self.sock = socket.create_connection((broker.host, port or broker.port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.next_corr = 1
        self.pending = {}
        self.bytes_sent = 0
        self.bytes_received = 0

    def encode(self, api_key, version, body):
        corr = self.next_corr
        self.next_corr += 1
        self.pending[corr] = (api_key, version)
        return corr, frame(api_key, version, corr, body, self.client_id)

    def send(self, api_key, version, body):
        corr, data = self.encode(api_key, version, body)
        self.sock.sendall(data)
        self.bytes_sent += len(data)
        return corr

    def send_raw(self, data):
        self.sock.sendall(data)
        self.bytes_sent += len(data)

    def recv(self):
        """``(correlation_id, response body, bytes on the wire)`` of the next response."""
        (size,) = struct.unpack(">i", recv_exact(self.sock, 4))
        payload = recv_exact(self.sock, size)
        self.bytes_received += 4 + size
        (corr,) = struct.unpack_from(">i", payload, 0)
        api_key, version = self.pending.pop(corr)
        view = memoryview(payload)
        _, pos = m.ResponseHeader.decode_from(view, 0, m.response_header_version(api_key, version))
        body, _ = m.RESPONSES[api_key].decode_from(view, pos, version)
        return corr, body, 4 + size

    def request(self, api_key, version, body):
        corr = self.send(api_key, version, body)
        got, resp, _ = self.recv()
        assert got == corr, (got, corr)
        return resp

    def close(self):
        self.sock.close()


def api_versions_body():
    return m.ApiVersionsRequest(client_software_name="kafkatw-e2e", client_software_version="1.0")


def create_topic(broker, name, partitions=1, configs=None):
    c = RawClient(broker, "e2e-admin", timeout=60)
    try:
        body = m.CreateTopicsRequest(topics=[m.CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=1, assignments=[],
            configs=[m.CreateTopicsRequest.CreatableTopicConfig(name=k, value=str(v))
                     for k, v in (configs or {}).items()])], timeout_ms=10000, validate_only=False)
        resp = c.request(CREATE_TOPICS, 5, body)
    finally:
        c.close()
    assert resp.topics[0].error_code == 0, resp.topics[0]
    return name


def produce_body(topic, partition, values, acks=1, keys=None, **batch_args):
    records = [rec.Record(key=None if keys is None else keys[i], value=v) for i, v in enumerate(values)]
    batch_args.setdefault("base_timestamp", int(time.time() * 1000))
    batch = rec.build_batch(records, **batch_args)
    return m.ProduceRequest(transactional_id=None, acks=acks, timeout_ms=10000, topic_data=[
        m.ProduceRequest.TopicProduceData(name=topic, partition_data=[
            m.ProduceRequest.PartitionProduceData(index=partition, records=batch)])])


def produce(client, topic, partition, values, **kw):
    """Base offset of ``values`` appended as one batch (acks=1); asserts no error."""
    resp = client.request(PRODUCE, PRODUCE_V, produce_body(topic, partition, values, **kw))
    p = resp.responses[0].partition_responses[0]
    assert p.error_code == 0, p
    return p.base_offset


def fetch_body(partitions, max_wait_ms=0, min_bytes=1, session_id=0, epoch=-1, forgotten=(),
               max_bytes=50 * 1024 * 1024, partition_max_bytes=1024 * 1024):
    """``partitions``: [(topic, partition, fetch_offset)] grouped by topic in order."""
    topics = []
    for topic, partition, offset in partitions:
        if not topics or topics[-1].topic != topic:
            topics.append(m.FetchRequest.FetchTopic(topic=topic, partitions=[]))
        topics[-1].partitions.append(m.FetchRequest.FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=partition_max_bytes,
            current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1))
    forgotten_topics = {}
    for topic, partition in forgotten:
        forgotten_topics.setdefault(topic, []).append(partition)
    return m.FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                          isolation_level=0, session_id=session_id, session_epoch=epoch, topics=topics,
                          forgotten_topics_data=[m.FetchRequest.ForgottenTopic(topic=t, partitions=ps)
                                                 for t, ps in forgotten_topics.items()],
                          rack_id="")


def fetched_records(partition_data):
    """[(offset, key, value)] of a response partition's records."""
    data = partition_data.records
    if data is None or len(data) == 0:
        return []
    out = []
    for header, records in rec.iter_batches(bytes(data), allow_partial_tail=True):
        for r in records:
            out.append((r.offset, r.key, r.value))
    return out


def read_all(broker, topic, partition, start=0, client_id="e2e-reader"):
    """Every record from ``start`` to the high watermark, with raw sessionless fetches."""
    c = RawClient(broker, client_id)
    out = []
    offset = start
    try:
        while True:
            resp = c.request(FETCH, FETCH_V, fetch_body([(topic, partition, offset)], epoch=-1))
            p = resp.responses[0].partitions[0]
            assert p.error_code == 0, p
            got = [r for r in fetched_records(p) if r[0] >= offset]
            out.extend(got)
            if got:
                offset = got[-1][0] + 1
            if offset >= p.high_watermark:
                return out
            if not got:
                raise AssertionError("no progress at offset %d (hw %d)" % (offset, p.high_watermark))
    finally:
        c.close()


def request_log(path):
    """The JSON entries of a request log file."""
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("Completed request:"):
                out.append(json.loads(line[len("Completed request:"):]))
    return out


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for %d" % pid)


def futures_result(futures, timeout=15):
    """Results of a dict of confluent-kafka futures (keep the AdminClient referenced until done:
    a destroyed client fails its pending futures)."""
    return {k: f.result(timeout) for k, f in futures.items()}


def futures_error(futures):
    """The ``KafkaError`` a dict of futures fails with; fails the test when none does."""
    from confluent_kafka import KafkaException

    try:
        futures_result(futures)
    except KafkaException as e:
        return e.args[0]
    raise AssertionError("no error")


def env_without_pythonpath():
    """Our environment without PYTHONPATH: trial's worker processes (``trial -j``) get the
    parent's sys.path there, the project root included, which would make a throwaway
    environment import the tree's kafkatw instead of the one installed into it."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


class ThrowawayVenv:
    """A virtual environment without pip of its own that imports the dependencies (Twisted, pip,
    setuptools, the clients) from ours through a ``.pth`` file in its site-packages.

    ``see_our_kafkatw``: also read our site-packages' own ``.pth`` files and the project root,
    so the tree's kafkatw is importable (for third-party plug-in packages); otherwise a plain
    path line, so only a kafkatw installed into this environment is seen (packaging tests).
    """

    def __init__(self, path, see_our_kafkatw):
        self.path = path
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", path], check=True)
        self.python = os.path.join(path, "bin", "python")
        self.purelib = self.run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip()
        ours = sysconfig.get_paths()["purelib"]
        with open(os.path.join(self.purelib, "kafkatw-test-env.pth"), "w") as f:
            if see_our_kafkatw:
                import kafkatw

                f.write("import site; site.addsitedir(%r)\n" % ours)
                f.write(os.path.dirname(os.path.dirname(os.path.abspath(kafkatw.__file__))) + "\n")
            else:
                f.write(ours + "\n")

    @staticmethod
    def run(args, **kwargs):
        """``args``' output (stdout and stderr); fails on a non-zero exit. No PYTHONPATH."""
        kwargs.setdefault("env", env_without_pythonpath())
        return subprocess.run(args, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=300, **kwargs).stdout

    def pip_install(self, *args):
        """pip of our environment installing into this one, offline, with our setuptools."""
        return self.run([self.python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                         "--disable-pip-version-check"] + list(args))

    def twistd(self):
        return [self.python, "-c", "import sys; from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; run()"]


class LoopbackProxy:
    """A loopback TCP proxy to ``target`` (settable after start, before the first connection),
    each accepted connection relayed by two threads, ``relay(pair, upstream)`` of a subclass:
    ``pair`` holds ``"client"`` and ``"server"`` sockets (and what the subclass keeps per
    connection), ``upstream`` is the client-to-server direction. Tests cut, drop or hold
    traffic there; ``close()`` ends every connection."""

    def __init__(self, target=None):
        self.target = target
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.pairs = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def new_pair(self, client, server):
        """The per-connection state ``relay`` gets; a subclass adds its own keys."""
        return {"client": client, "server": server}

    def relay(self, pair, upstream):
        raise NotImplementedError

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            pair = self.new_pair(client, server)
            with self.lock:
                self.pairs.append(pair)
            for upstream in (True, False):
                threading.Thread(target=self._run, args=(pair, upstream), daemon=True).start()

    def _run(self, pair, upstream):
        try:
            self.relay(pair, upstream)
        except OSError:
            pass
        for s in (pair["client"], pair["server"]):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.closed = True
        self.listener.close()
        with self.lock:
            for pair in self.pairs:
                for s in (pair["client"], pair["server"]):
                    try:
                        s.close()
                    except OSError:
                        pass
