"""librdkafka's own C benchmark client, ``rdkafka_performance``, for the small-message rows.

Why: with 100 B records the Python client, not the broker, sets the rate (confluent-kafka's
``produce()`` loop costs ~20 CPU s/GB, both brokers 3-9; docs/performance.md, "Session 9").
``rdkafka_performance`` is the benchmark program in librdkafka's source (``examples/``): one
``rd_kafka_produce`` call per message from one static buffer, or the simple consumer's
callback loop, so the client's cost is librdkafka's own.

It is compiled here, never committed: from the librdkafka source that
``tests/librdkafka/build.sh`` unpacks from Debian's source package (2.0.2; run first if it is
missing), with ``-O2``, and linked against the librdkafka that confluent-kafka's wheel bundles
(2.16: the same library as the Python rows; Debian's 2.0.2 cannot read Tansu's ApiVersions
answer). The binary is cached beside that source, keyed by the library it links.
"""

import glob
import hashlib
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def source_dir():
    """The unpacked librdkafka source of tests/librdkafka/build.sh (same default and variable)."""
    home = os.path.expanduser("~")
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return os.path.join(os.environ.get("KAFKATW_LIBRDKAFKA_DIR") or
                        os.path.join(cache, "kafkatw", "librdkafka-2.0.2"), "src")


def bundled_library():
    """The librdkafka shared library inside the installed confluent-kafka wheel."""
    import confluent_kafka

    site = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
    found = sorted(glob.glob(os.path.join(site, "confluent_kafka.libs", "librdkafka*.so*")))
    if not found:
        raise RuntimeError("no librdkafka in confluent-kafka's wheel (confluent_kafka.libs)")
    return found[0]


def binary():
    """Path of the compiled ``rdkafka_performance``, built on first use."""
    src = source_dir()
    example = os.path.join(src, "examples", "rdkafka_performance.c")
    if not os.path.exists(example):
        subprocess.run(["bash", os.path.join(ROOT, "tests", "librdkafka", "build.sh")], check=True,
                       stdout=sys.stderr)
    lib = bundled_library()
    tag = hashlib.sha256(lib.encode() + str(os.path.getmtime(lib)).encode()).hexdigest()[:12]
    out = os.path.join(os.path.dirname(src), "rdkafka_performance-%s" % tag)
    if not os.access(out, os.X_OK):
        tmp = out + ".tmp%d" % os.getpid()
        subprocess.run(["gcc", "-O2", "-I", os.path.join(src, "src"), "-o", tmp, example, lib,
                        "-Wl,-rpath," + os.path.dirname(lib), "-lm", "-lpthread"], check=True)
        os.replace(tmp, out)
    return out


def _run(args, timeout):
    out = subprocess.run([binary()] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         timeout=timeout)
    text = out.stdout.decode(errors="replace")
    if out.returncode != 0:
        raise RuntimeError("rdkafka_performance exited %d: %s" % (
            out.returncode, (out.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]))
    return text


def produce(bootstrap, topic, count, size, acks=1, timeout=300):
    """``count`` values of ``size`` bytes to partition 0, the Python rows' producer settings
    (batch.size 1 MiB, linger.ms 5, no idempotence, no compression). Returns the program's own
    figures: messages delivered and the milliseconds from its first produce to its last report."""
    text = _run(["-P", "-t", topic, "-p", "0", "-b", bootstrap, "-s", str(size), "-c", str(count),
                 "-a", str(acks), "-q",
                 "-X", "linger.ms=5", "-X", "batch.size=%d" % (1 << 20),
                 "-X", "message.max.bytes=%d" % (2 << 20), "-X", "enable.idempotence=false",
                 "-X", "queue.buffering.max.messages=2000000",
                 "-X", "queue.buffering.max.kbytes=1048576"], timeout)
    m = re.search(r"(\d+) messages produced \((\d+) bytes\), (\d+) delivered .*?(\d+) failed\) in (\d+)ms",
                  text)
    if not m:
        raise RuntimeError("rdkafka_performance printed no producer summary: %r" % text[-300:])
    produced, _, delivered, failed, ms = (int(g) for g in m.groups())
    return {"delivered": delivered, "failed": failed, "ms": ms}


def consume(bootstrap, topic, count, timeout=300):
    """``count`` messages of partition 0 from the beginning with the simple consumer's callback
    loop and the Python consume row's fetch sizes (16 MiB). Returns messages and milliseconds
    from the first message to the last, as the program counts them."""
    text = _run(["-C", "-t", topic, "-p", "0", "-b", bootstrap, "-c", str(count), "-o", "beginning",
                 "-q", "-X", "fetch.max.bytes=%d" % (16 << 20),
                 "-X", "max.partition.fetch.bytes=%d" % (16 << 20),
                 "-X", "receive.message.max.bytes=%d" % (32 << 20)], timeout)
    m = re.search(r"(\d+) messages \((\d+) bytes\) consumed in (\d+)ms", text)
    if not m:
        raise RuntimeError("rdkafka_performance printed no consumer summary: %r" % text[-300:])
    got, _, ms = (int(g) for g in m.groups())
    return {"messages": got, "ms": ms}
