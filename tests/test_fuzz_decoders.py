"""Coverage-hungry fuzzing of what parses client bytes (issue 26): the request decoders and
the record batch walker of the produce path, seeded with frames real clients sent
(``tests/corpus/client_requests.bin``, written by ``tools/capture_corpus.py``).

Each case takes a seed, applies a few mutations (bit flips, byte and integer overwrites with
boundary values, insertions, deletions, truncation; for batches also a fixed-up CRC so the
mutation reaches the records) and runs the real code. The only acceptable failures are the
documented ones: ``ProtocolDecodeError`` from a decoder, ``KafkaError`` (with Kafka's codes)
from the batch checks. Anything else (IndexError, struct.error, a hang) is a bug a client
could trigger.

``KAFKATW_FUZZ_EXAMPLES`` sets the cases per test (default 1000, deterministic); the long
form (``make fuzz``) runs 200,000 random ones per test.
"""

import os
import struct
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.trial import unittest

from kafkatw.network.wire import MessagesWire as Wire
from kafkatw.protocol import compression
from kafkatw.protocol import messages as m
from kafkatw.protocol import records as rec
from kafkatw.protocol.codec import ProtocolDecodeError
from kafkatw.protocol.errors import KafkaError
from kafkatw.storage.config import LogConfig
from kafkatw.storage.validator import validate_and_assign

CORPUS_PATH = os.path.join(os.path.dirname(__file__), "corpus", "client_requests.bin")
EXAMPLES = int(os.environ.get("KAFKATW_FUZZ_EXAMPLES", "1000"))
LONG = EXAMPLES > 20000
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=not LONG,
                suppress_health_check=list(HealthCheck), print_blob=True)
INTS = [0, 1, -1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, -0x80000000]


def load_corpus(path=CORPUS_PATH):
    """[(api_key, api_version, frame)] of the recorded client requests."""
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack_from(">i", data, pos)
        frame = data[pos + 4:pos + 4 + n]
        pos += 4 + n
        api_key, version = struct.unpack_from(">hh", frame, 0)
        out.append((api_key, version, frame))
    return out


CORPUS = load_corpus()


def _batch_seeds():
    """Record bytes of the recorded produce requests, and batches of every codec."""
    wire = Wire()
    seeds = []
    for api_key, version, frame in CORPUS:
        if api_key != 0:
            continue
        _, body = wire.decode_request(frame, api_key, version)
        for t in body.topic_data:
            for p in t.partition_data:
                if p.records is not None and len(p.records):
                    seeds.append(bytes(p.records))
    records = [rec.Record(key=b"k%d" % i if i % 3 else None, value=b"v" * (i * 7),
                          headers=[("h", b"x")] if i == 2 else [])
               for i in range(6)]
    for codec in compression.CODEC_NAMES:
        seeds.append(rec.build_batch(records, compression=codec, base_timestamp=1_700_000_000_000))
    seeds.append(seeds[-1] + seeds[-2])  # two batches in one append
    return seeds


BATCHES = _batch_seeds()


@st.composite
def mutations(draw, data):
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["flip", "byte", "int16", "int32", "varint", "insert",
                                     "delete", "truncate"]))
        pos = draw(st.integers(0, max(0, len(buf) - 1)))
        if kind == "flip" and buf:
            buf[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte" and buf:
            buf[pos] = draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF]))
        elif kind in ("int16", "int32"):
            fmt = ">h" if kind == "int16" else ">i"
            v = draw(st.sampled_from(INTS))
            v = struct.unpack(fmt, struct.pack(">i", v)[-struct.calcsize(fmt):])[0]
            chunk = struct.pack(fmt, v)
            buf[pos:pos + len(chunk)] = chunk
        elif kind == "varint":
            buf[pos:pos + 1] = draw(st.sampled_from([b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x01",
                                                     b"\x00", b"\x01", b"\xfe\xff\xff\xff\x0f"]))
        elif kind == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del buf[pos:pos + draw(st.integers(1, 16))]
        elif kind == "truncate":
            del buf[pos:]
    return bytes(buf)


@st.composite
def mutated_requests(draw):
    api_key, version, frame = draw(st.sampled_from(CORPUS))
    cls = m.REQUESTS[api_key]
    lo, hi = cls.VALID_VERSIONS
    if draw(st.booleans()):
        version = draw(st.integers(lo, hi))
    return api_key, version, draw(mutations(frame))


@st.composite
def mutated_batches(draw):
    buf = bytearray(draw(mutations(draw(st.sampled_from(BATCHES)))))
    if draw(st.booleans()) and len(buf) >= rec.BATCH_HEADER_SIZE:
        try:
            rec._rewrite_crc(buf, 0)  # let the mutation reach the records
        except Exception:
            pass
    return bytes(buf), draw(st.booleans())


class RequestDecoderFuzzTests(unittest.SynchronousTestCase):
    def test_corpus_decodes(self):
        """The seeds are what clients send: every one decodes (else the fuzzing starts from
        errors only)."""
        wire = Wire()
        self.assertGreaterEqual(len({k for k, _, _ in CORPUS}), 15)
        for api_key, version, frame in CORPUS:
            wire.decode_request(frame, api_key, version)

    @FUZZ
    @given(mutated_requests())
    def test_mutated_requests_raise_only_decode_errors(self, case):
        api_key, version, frame = case
        try:
            Wire().decode_request(frame, api_key, version)
        except ProtocolDecodeError:
            pass


class BatchWalkerFuzzTests(unittest.SynchronousTestCase):
    def test_seeds_are_valid(self):
        config = LogConfig.from_props({}, {})
        for seed in BATCHES:
            # the recorded batches carry the time they were recorded: any later now accepts them
            validate_and_assign(bytearray(seed), config, int(time.time() * 1000), 0)

    @FUZZ
    @given(mutated_batches())
    def test_mutated_batches_raise_only_kafka_errors(self, case):
        buf, compact = case
        config = LogConfig.from_props({}, {"cleanup.policy": "compact" if compact else "delete",
                                            "message.timestamp.type": "LogAppendTime"})
        try:
            validate_and_assign(bytearray(buf), config, 1_700_000_000_000, 0, leader_epoch=1)
        except KafkaError:
            pass
        try:
            for _header, records in rec.iter_batches(buf, allow_partial_tail=True):
                list(records)
        except KafkaError:
            pass
