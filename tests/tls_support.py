"""Helpers for the TLS and zero-copy tests: listener settings for PLAINTEXT + SSL + mutual TLS
(``kafkatw.testing.KafkaBroker`` makes the throwaway PKI), broker RSS, bulk produce and
checksummed consume with confluent-kafka and kafka-python. No tests here."""

import hashlib
import os
import re
import time

MTLS_LISTENERS = ("PLAINTEXT", "SSL", "MTLS://127.0.0.1:0")
#: MTLS is an SSL listener that requires a client certificate, set through the listener prefix.
MTLS_OVERRIDES = {
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
    "listener.name.mtls.ssl.client.auth": "required",
    "message.max.bytes": 2 * 1024 * 1024,
}


def rss_bytes(pid):
    """Resident set size of ``pid`` (VmRSS of /proc/<pid>/status)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS for pid %d" % pid)


class RssWatch:
    """Samples a process's RSS from a thread; ``peak`` and ``start`` in bytes."""

    def __init__(self, pid, interval=0.05):
        import threading

        self.pid = pid
        self.interval = interval
        self.start = rss_bytes(pid)
        self.peak = self.start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
            except (OSError, RuntimeError):
                return
            self._stop.wait(self.interval)

    def stop(self):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes(self.pid))
        return self.peak - self.start


def payload(i, size):
    """Message ``i``: a counter then pseudo-random bytes (cheap, distinct per message)."""
    block = _block(size)
    head = b"%012d" % i
    off = (i * 7919) % (len(block) - size + 1)
    return head + block[off:off + size - len(head)]


_BLOCKS = {}


def _block(size):
    if size not in _BLOCKS:
        _BLOCKS[size] = os.urandom(size * 2)
    return _BLOCKS[size]


def produce_bulk(bootstrap, topic, total_bytes, value_size=64 * 1024):
    """Produce ``total_bytes`` in ``value_size`` messages to partition 0 (confluent-kafka,
    uncompressed, big batches); return ``(count, sha256 hex of the values in order)``."""
    import confluent_kafka

    count = total_bytes // value_size
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1024 * 1024,
        "compression.type": "none", "acks": 1, "queue.buffering.max.kbytes": 256 * 1024,
        "message.max.bytes": 2 * 1024 * 1024, "enable.idempotence": False,
    })
    digest = hashlib.sha256()
    errors = []

    def report(err, msg):
        if err is not None:
            errors.append(err)

    for i in range(count):
        value = payload(i, value_size)
        digest.update(value)
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(120)
    if left or errors:
        raise AssertionError("produce failed: %d undelivered, errors %s" % (left, errors[:3]))
    return count, digest.hexdigest()


def confluent_consume(conf, topic, count, timeout=120):
    """Read ``count`` messages of partition 0 from offset 0; return ``(count, sha256 hex)``."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer(dict({
        "group.id": "zc-%s" % os.urandom(4).hex(), "enable.auto.commit": False,
        "fetch.max.bytes": 50 * 1024 * 1024, "max.partition.fetch.bytes": 50 * 1024 * 1024,
        "receive.message.max.bytes": 60 * 1024 * 1024, "queued.max.messages.kbytes": 64 * 1024,
    }, **conf))
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    digest = hashlib.sha256()
    got = 0
    deadline = time.monotonic() + timeout
    try:
        while got < count and time.monotonic() < deadline:
            for msg in consumer.consume(500, 1.0):
                if msg.error():
                    raise AssertionError("consume error: %s" % msg.error())
                if msg.offset() != got:
                    raise AssertionError("offset %d, expected %d" % (msg.offset(), got))
                digest.update(msg.value())
                got += 1
    finally:
        consumer.close()
    return got, digest.hexdigest()


def kafka_python_consume(conf, topic, count, timeout=120):
    """As :func:`confluent_consume` with kafka-python's KafkaConsumer."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(enable_auto_commit=False, fetch_max_bytes=50 * 1024 * 1024,
                             max_partition_fetch_bytes=50 * 1024 * 1024, request_timeout_ms=60000,
                             **conf)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    digest = hashlib.sha256()
    got = 0
    deadline = time.monotonic() + timeout
    try:
        while got < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000, max_records=2000).values():
                for rec in records:
                    if rec.offset != got:
                        raise AssertionError("offset %d, expected %d" % (rec.offset, got))
                    digest.update(rec.value)
                    got += 1
                    if got == count:
                        break
    finally:
        consumer.close()
    return got, digest.hexdigest()


def expected_digest(count, value_size):
    digest = hashlib.sha256()
    for i in range(count):
        digest.update(payload(i, value_size))
    return digest.hexdigest()


# -- strace ---------------------------------------------------------------------------------
_CALL = re.compile(r"^(?:\[pid\s+)?(\d+)\]?\s+(sendfile|pread64|preadv2|read)\((\d+)<([^>]*)>, (.*)\) = (-?\d+)")


def strace_unavailable():
    """Why strace cannot attach to a child here, or None when it can."""
    import shutil
    import subprocess

    if shutil.which("strace") is None:
        return "strace is not installed"
    probe = subprocess.Popen(["sleep", "5"])
    try:
        out = subprocess.run(["strace", "-e", "trace=none", "-p", str(probe.pid)],
                             capture_output=True, timeout=0.5)
        text = out.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired as e:  # still running: attached, unless it said why not
        text = (e.stderr or b"").decode(errors="replace")
        if "Operation not permitted" not in text:
            return None
    finally:
        probe.kill()
        probe.wait()
    if "Operation not permitted" in text or "ptrace" in text.lower():
        return "ptrace is not permitted here: %s" % text.strip().splitlines()[-1:]
    return None


class Strace:
    """``strace -f -y -s 0 -e trace=sendfile,read,pread64,preadv2 -p <pid>`` around a block of work."""

    def __init__(self, pid, output):
        import subprocess

        self.output = output
        self.stderr = output + ".stderr"
        self._err = open(self.stderr, "wb")
        self.process = subprocess.Popen(
            ["strace", "-f", "-y", "-s", "0", "-e", "trace=sendfile,read,pread64,preadv2", "-o", output,
             "-p", str(pid)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._err)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(self.stderr, errors="replace") as f:
                if "attached" in f.read():
                    return
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("strace did not attach: %s" % open(self.stderr, errors="replace").read())

    def stop(self):
        import signal

        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(30)
        self._err.close()

    def calls(self, path_suffix=".log"):
        """``[(syscall, path, args, result)]`` on file descriptors whose path ends with
        ``path_suffix`` (for sendfile: the input file), in order."""
        with open(self.output, errors="replace") as f:
            return traced_calls(f, path_suffix)


_UNFINISHED = " <unfinished ...>"
_PID = re.compile(r"^(?:\[pid\s+)?(\d+)")
_RESUMED = re.compile(r"^(?:\[pid\s+)?(\d+)\]?\s+<\.\.\. \w+ resumed>(.*)$")


def traced_calls(lines, path_suffix=".log"):
    """The calls of ``Strace.calls`` from strace's output lines. With ``-f``, a call that another
    thread interrupts is printed in two halves (``<unfinished ...>``, then ``<... name
    resumed>``); the halves are joined, so no call of a busy worker thread goes uncounted."""
    out = []
    pending = {}
    for line in lines:
        line = line.rstrip("\n")
        if line.endswith(_UNFINISHED):
            pending[_PID.match(line).group(1)] = line[:-len(_UNFINISHED)]
            continue
        resumed = _RESUMED.match(line)
        if resumed is not None:
            line = pending.pop(resumed.group(1), "") + resumed.group(2)
        m = _CALL.match(line)
        if m is None:
            continue
        _, name, _, first_path, rest, result = m.groups()
        path = first_path
        if name == "sendfile":
            m2 = re.match(r"\d+<([^>]*)>", rest)
            path = m2.group(1) if m2 else ""
        if path.endswith(path_suffix):
            out.append((name, path, rest, int(result)))
    return out


def pread_size(args):
    """The count argument of a traced ``pread64(fd, buf, count, offset)`` (``args`` after fd)."""
    return int(args.rsplit(",", 2)[-2])
