"""Tests for the generated codec (kafkatw.protocol.messages) and its primitives (codec).

Round trips every schema class at every valid version with hypothesis values built from
the generated ``SCHEMA`` descriptions, plus targeted wire-format checks.
"""

import os
import struct
import subprocess
import sys
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.protocol import codec, messages as m
from kafkatw.protocol.codec import ProtocolDecodeError, UnsupportedVersionError
from kafkatw.protocol.parts import FileRegion, join_parts, parts_size

SETTINGS = settings(
    max_examples=5,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)

INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "uint16": (0, (1 << 16) - 1),
    "uint32": (0, (1 << 32) - 1),
}
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=6)


def _in(r, v):
    return r is not None and r[0] <= v <= r[1]


def prim(t):
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, -1 if lo < 0 else 1]))
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "uuid":
        return st.binary(min_size=16, max_size=16)
    if t == "string":
        return TEXT
    if t in ("bytes", "records"):
        return st.binary(max_size=12)
    raise AssertionError(t)


def struct_strategy(cls, v, flexible):
    """Values of ``cls`` valid at version ``v``: absent fields keep their defaults."""
    kwargs = {}
    for attr, typ, versions, nullable, tagged, tag, ignorable, flex, sub in cls.SCHEMA:
        if not _in(versions, v):
            continue
        if typ.startswith("[]"):
            elem = struct_strategy(sub, v, flexible) if sub is not None else prim(typ[2:])
            s = st.lists(elem, max_size=3)
        elif sub is not None:
            s = struct_strategy(sub, v, flexible)
        else:
            s = prim(typ)
        if _in(nullable, v):
            s = st.one_of(st.none(), s)
        kwargs[attr] = s
    if flexible:
        known = {f[5] for f in cls.SCHEMA if f[5] is not None}
        tags = st.integers(0, 300).filter(lambda t: t not in known)
        kwargs["unknown_tagged_fields"] = st.dictionaries(tags, st.binary(max_size=5), max_size=2)
    return st.builds(cls, **kwargs)


def is_flexible(cls, v):
    fv = cls.FLEXIBLE_VERSIONS_START
    return fv is not None and v >= fv


def make_roundtrip_test(cls):
    lo, hi = cls.VALID_VERSIONS
    versions = list(range(lo, hi + 1))
    everything = st.tuples(*[struct_strategy(cls, v, is_flexible(cls, v)) for v in versions])

    def test(self):
        @SETTINGS
        @given(everything)
        def check(values):
            for v, obj in zip(versions, values):
                data = obj.encode_bytes(v)
                back = cls.decode(data, v)
                self.assertEqual(back, obj, "%s v%d" % (cls.__name__, v))
                self.assertEqual(back.encode_bytes(v), data)

        check()

    test.__name__ = "test_roundtrip_" + cls.__name__
    return test


class RoundTripTests(SynchronousTestCase):
    """decode(encode(x)) == x for every schema class at every valid version."""


for _cls in m.all_messages():
    setattr(RoundTripTests, "test_roundtrip_" + _cls.__name__, make_roundtrip_test(_cls))


def produce(records, version=9):
    return m.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            m.ProduceRequest.TopicProduceData(
                name="topic",
                partition_data=[m.ProduceRequest.PartitionProduceData(index=0, records=records)],
            )
        ],
    )


class RegistryTests(SynchronousTestCase):
    def test_registries(self):
        self.assertIs(m.REQUESTS[0], m.ProduceRequest)
        self.assertIs(m.RESPONSES[1], m.FetchResponse)
        self.assertEqual(m.API_NAMES[18], "ApiVersions")
        self.assertEqual(m.ProduceRequest.API_NAME, "Produce")
        self.assertEqual(m.FetchRequest.API_KEY, 1)
        self.assertEqual(m.MetadataRequest.FLEXIBLE_VERSIONS_START, 9)
        self.assertIsNone(m.ConsumerProtocolSubscription.FLEXIBLE_VERSIONS_START)
        self.assertEqual(set(m.REQUESTS), set(m.RESPONSES))
        self.assertEqual(set(m.REQUESTS), set(m.API_NAMES))

    def test_registries_are_read_only_mappings_of_every_key(self):
        self.assertEqual(len(m.REQUESTS), len(m.API_NAMES))
        self.assertIn(0, m.REQUESTS)
        self.assertNotIn(9999, m.REQUESTS)
        self.assertIsNone(m.REQUESTS.get(9999))
        self.assertIs(m.REQUESTS.get(1), m.FetchRequest)
        with self.assertRaises(KeyError):
            m.RESPONSES[9999]
        with self.assertRaises(KeyError):
            m.request_header_version(9999, 0)
        self.assertEqual(dict(m.RESPONSES)[18], m.ApiVersionsResponse)
        with self.assertRaises(TypeError):
            m.REQUESTS[0] = m.FetchRequest

    def test_all_messages(self):
        everything = m.all_messages()
        self.assertEqual(len(everything), 186)
        self.assertEqual(len(set(everything)), 186)
        self.assertIs(m.ALL_MESSAGES, everything)
        self.assertEqual(everything[:2], (m.AddOffsetsToTxnRequest, m.AddOffsetsToTxnResponse))
        self.assertEqual({cls for cls in everything if cls.API_KEY is not None},
                         set(m.REQUESTS.values()) | set(m.RESPONSES.values()))
        self.assertIn("ProduceRequest", dir(m))
        with self.assertRaises(AttributeError):
            m.NoSuchRequest
        with self.assertRaises(ImportError):
            from kafkatw.protocol.messages import NoSuchResponse  # noqa: F401

    def test_header_versions_match_the_classes(self):
        for key, cls in m.REQUESTS.items():
            fv = cls.FLEXIBLE_VERSIONS_START
            for v in range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1):
                flexible = fv is not None and v >= fv
                self.assertEqual(m.request_header_version(key, v),
                                 0 if (key, v) == (7, 0) else 2 if flexible else 1, (key, v))
        for key, cls in m.RESPONSES.items():
            fv = cls.FLEXIBLE_VERSIONS_START
            for v in range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1):
                flexible = fv is not None and v >= fv and key != 18
                self.assertEqual(m.response_header_version(key, v), 1 if flexible else 0, (key, v))

    def test_nested_class_names(self):
        self.assertIs(m.ProduceRequest.TopicProduceData.PartitionProduceData, m.ProduceRequest.PartitionProduceData)
        p = m.FetchResponse.PartitionData()
        self.assertEqual(p.diverging_epoch, m.FetchResponse.EpochEndOffset(epoch=-1, end_offset=-1))
        self.assertEqual(p.preferred_read_replica, -1)
        self.assertIsNone(p.records)
        # common structs are classes of their message too
        self.assertTrue(hasattr(m.LeaderAndIsrRequest, "LeaderAndIsrPartitionState"))

    def test_defaults(self):
        self.assertEqual(m.FetchRequest().max_bytes, 0x7FFFFFFF)
        self.assertEqual(m.FetchRequest.FetchTopic().topic_id, bytes(16))
        self.assertIsNone(m.ConsumerGroupHeartbeatResponse().assignment)
        a, b = m.MetadataRequest(), m.MetadataRequest()
        self.assertIsNot(a.topics, b.topics)
        self.assertEqual(a.allow_auto_topic_creation, True)

    def test_header_versions(self):
        self.assertEqual(m.response_header_version(18, 3), 0)
        self.assertEqual(m.response_header_version(18, 0), 0)
        self.assertEqual(m.response_header_version(3, 9), 1)
        self.assertEqual(m.response_header_version(3, 8), 0)
        self.assertEqual(m.request_header_version(18, 3), 2)
        self.assertEqual(m.request_header_version(18, 2), 1)
        self.assertEqual(m.request_header_version(7, 0), 0)
        self.assertEqual(m.request_header_version(7, 1), 1)
        self.assertEqual(m.request_header_version(0, 9), 2)

    def test_api_versions_response_header_v0(self):
        # ApiVersions v3 response body is flexible, but its header is v0: correlation id only.
        header = m.ResponseHeader(correlation_id=7)
        self.assertEqual(header.encode_bytes(m.response_header_version(18, 3)), b"\x00\x00\x00\x07")
        self.assertEqual(header.encode_bytes(1), b"\x00\x00\x00\x07\x00")

    def test_request_header_client_id_never_compact(self):
        h = m.RequestHeader(request_api_key=18, request_api_version=3, correlation_id=1, client_id="ab")
        self.assertEqual(h.encode_bytes(2), b"\x00\x12\x00\x03\x00\x00\x00\x01\x00\x02ab\x00")
        self.assertEqual(m.RequestHeader.decode_from(h.encode_bytes(2) + b"body", 0, 2), (h, 13))
        h.client_id = None
        self.assertEqual(h.encode_bytes(1), b"\x00\x12\x00\x03\x00\x00\x00\x01\xff\xff")


LAZY_PROBE = r"""
import sys
loaded = lambda: sorted(n.rsplit(".", 1)[1] for n in sys.modules
                        if n.startswith("kafkatw.protocol.messages."))
from kafkatw.protocol import messages
print(loaded())
print(sorted(messages.REQUESTS) == sorted(messages.API_NAMES), len(messages.RESPONSES), loaded())
print(messages.request_header_version(0, 9), messages.response_header_version(1, 12), loaded())
produce = messages.ProduceRequest
print(produce.__name__, "ProduceResponse" in vars(messages), messages.ProduceResponse.API_KEY, loaded())
from kafkatw.protocol.messages import FetchResponse
print(messages.REQUESTS[1] is messages.FetchRequest, messages.RESPONSES.get(3).__name__, loaded())
print(len(messages.all_messages()), len(loaded()))
"""


class LazyLoadingTests(SynchronousTestCase):
    """A fresh interpreter loads an API's classes only when one of them is first used."""

    def test_submodules_load_on_first_use(self):
        out = subprocess.run([sys.executable, "-c", LAZY_PROBE], capture_output=True, text=True,
                             check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self.assertEqual(out.stdout.splitlines(), [
            "[]",
            "True 88 []",
            "2 1 []",
            "ProduceRequest True 0 ['produce']",
            "True MetadataResponse ['fetch', 'metadata', 'produce']",
            "186 98",
        ])

    def test_loaded_classes_are_package_globals(self):
        cls = m.DescribeClusterRequest
        self.assertIs(vars(m)["DescribeClusterRequest"], cls)
        self.assertIs(vars(m)["DescribeClusterResponse"], m.DescribeClusterResponse)


class WireFormatTests(SynchronousTestCase):
    def test_nullable_string_and_array(self):
        req = m.MetadataRequest(topics=None)
        self.assertEqual(req.encode_bytes(1), b"\xff\xff\xff\xff")
        self.assertIsNone(m.MetadataRequest.decode(b"\xff\xff\xff\xff", 1).topics)
        # compact (flexible) null array is a zero uvarint
        data = req.encode_bytes(9)
        self.assertEqual(data[0], 0)
        self.assertIsNone(m.MetadataRequest.decode(data, 9).topics)
        # v0 topics is not nullable
        self.assertRaises(UnsupportedVersionError, req.encode, 0)
        self.assertRaises(ProtocolDecodeError, m.MetadataRequest.decode, b"\xff\xff\xff\xff", 0)
        # nullable string in flexible version
        t = m.MetadataRequest.MetadataRequestTopic(name=None)
        self.assertIsNone(m.MetadataRequest.decode(m.MetadataRequest(topics=[t]).encode_bytes(12), 12).topics[0].name)

    def test_tagged_fields_written_only_when_not_default(self):
        p = m.FetchResponse.PartitionData(partition_index=1, records=b"")
        plain = m.FetchResponse(responses=[m.FetchResponse.FetchableTopicResponse(topic="t", partitions=[p])])
        base = plain.encode_bytes(12)
        p.current_leader = m.FetchResponse.LeaderIdAndEpoch(leader_id=3, leader_epoch=9)
        tagged = plain.encode_bytes(12)
        # tag count 1, tag 1, size 9, then leader id, epoch, and the struct's own empty tag section
        self.assertEqual(len(tagged) - len(base), 1 + 1 + 8 + 1)
        self.assertIn(b"\x01\x01\x09\x00\x00\x00\x03\x00\x00\x00\x09\x00", tagged)
        back = m.FetchResponse.decode(tagged, 12)
        self.assertEqual(back.responses[0].partitions[0].current_leader.leader_id, 3)
        self.assertEqual(back, plain)

    def test_unknown_tags_preserved_and_ordered(self):
        p = m.FetchResponse.PartitionData(
            partition_index=1,
            records=b"",
            current_leader=m.FetchResponse.LeaderIdAndEpoch(leader_id=3, leader_epoch=9),
            unknown_tagged_fields={7: b"\xaa", 0x100: b"xyz"},
        )
        resp = m.FetchResponse(responses=[m.FetchResponse.FetchableTopicResponse(topic="t", partitions=[p])])
        data = resp.encode_bytes(12)
        # merged in tag order: tag 1 (known) then 7 then 256 (uvarint 0x80 0x02)
        self.assertIn(b"\x03\x01\x09", data)
        self.assertIn(b"\x07\x01\xaa\x80\x02\x03xyz", data)
        back = m.FetchResponse.decode(data, 12)
        self.assertEqual(back.responses[0].partitions[0].unknown_tagged_fields, {7: b"\xaa", 256: b"xyz"})
        self.assertEqual(back.encode_bytes(12), data)

    def test_unknown_tag_in_crafted_top_level(self):
        # ApiVersionsRequest v3: client software name/version, then tags {42: b"hi"}
        data = b"\x02a\x021\x01\x2a\x02hi"
        req = m.ApiVersionsRequest.decode(data, 3)
        self.assertEqual((req.client_software_name, req.client_software_version), ("a", "1"))
        self.assertEqual(req.unknown_tagged_fields, {42: b"hi"})
        self.assertEqual(req.encode_bytes(3), data)

    def test_absent_field_non_default(self):
        req = produce(b"")
        req.transactional_id = "tx"
        self.assertRaises(UnsupportedVersionError, req.encode, 2)
        # ignorable fields are silently skipped
        f = m.FetchRequest(isolation_level=1, max_bytes=5)
        self.assertEqual(m.FetchRequest.decode(f.encode_bytes(3), 3).isolation_level, 0)

    def test_version_range(self):
        self.assertRaises(UnsupportedVersionError, m.ProduceRequest().encode, 99)
        self.assertRaises(ProtocolDecodeError, m.ProduceRequest.decode, b"", 99)

    def test_records_zero_copy(self):
        payload = bytes(range(256)) * 4
        data = bytearray(produce(payload).encode_bytes(9))
        req = m.ProduceRequest.decode(data, 9)
        rec = req.topic_data[0].partition_data[0].records
        self.assertIsInstance(rec, memoryview)
        self.assertIs(rec.obj, data)
        self.assertEqual(bytes(rec), payload)
        data[len(data) - 4] ^= 0xFF  # last records byte, before three empty tag sections
        self.assertEqual(rec[-1], payload[-1] ^ 0xFF)
        self.assertIsNone(m.ProduceRequest.decode(produce(None).encode_bytes(9), 9).topic_data[0].partition_data[0].records)

    def test_decode_from_offset(self):
        body = produce(b"abc").encode_bytes(9)
        obj, pos = m.ProduceRequest.decode_from(b"xx" + body + b"yy", 2, 9)
        self.assertEqual(pos, 2 + len(body))
        self.assertEqual(obj, produce(b"abc"))
        self.assertRaises(ProtocolDecodeError, m.ProduceRequest.decode, body + b"y", 9)

    def test_file_region_is_own_part(self):
        with tempfile.TemporaryFile() as fh:
            fh.write(b"R" * 100)
            fh.flush()
            regions = [FileRegion(fh, i, 10) for i in range(3)]
            big = b"B" * 5000
            resp = m.FetchResponse(
                responses=[
                    m.FetchResponse.FetchableTopicResponse(
                        topic="t",
                        partitions=[
                            m.FetchResponse.PartitionData(partition_index=0, records=regions[0]),
                            m.FetchResponse.PartitionData(partition_index=1, records=[regions[1], regions[2]]),
                            m.FetchResponse.PartitionData(partition_index=2, records=big),
                            m.FetchResponse.PartitionData(partition_index=3, records=b"small"),
                        ],
                    )
                ]
            )
            parts = resp.encode(12)
            self.assertIs(parts[1], regions[0])
            self.assertIs(parts[3], regions[1])
            self.assertIs(parts[4], regions[2])
            self.assertIs(parts[6], big)
            for i in (0, 2, 5, 7):
                self.assertIsInstance(parts[i], bytes)
            self.assertEqual(len(parts), 8)
            self.assertIn(b"small", parts[7])
            whole = join_parts(parts)
            self.assertEqual(len(whole), parts_size(parts))
            back = m.FetchResponse.decode(whole, 12)
            recs = [bytes(p.records) for p in back.responses[0].partitions]
            self.assertEqual(recs, [b"R" * 10, b"R" * 20, big, b"small"])
            self.assertEqual(resp.encode_bytes(12), whole)

    def test_truncated_input_names_field(self):
        data = produce(b"x" * 40).encode_bytes(9)
        for cut in range(len(data)):
            with self.assertRaises(ProtocolDecodeError) as ctx:
                m.ProduceRequest.decode(data[:cut], 9)
            self.assertTrue(str(ctx.exception).startswith("ProduceRequest v9: "), str(ctx.exception))
        err = self.assertRaises(ProtocolDecodeError, m.ProduceRequest.decode, data[:-10], 9)
        self.assertEqual(
            str(err), "ProduceRequest v9: topic_data[0].partition_data[0].records: length 40 exceeds remaining 33 bytes"
        )
        err = self.assertRaises(ProtocolDecodeError, m.ProduceRequest.decode, data[:6], 9)
        self.assertIn("timeout_ms", str(err).replace("acks", "timeout_ms"))
        self.assertIsInstance(err, ValueError)

    def test_nested_structs_read_inline_name_their_path(self):
        # the message's reader reads its nested structs inline: an error names the element
        # being read at each depth, and none once that depth is done
        req = produce(b"x" * 40)
        topic = req.topic_data[0]
        topic.partition_data.append(m.ProduceRequest.PartitionProduceData(index=1, records=b"y" * 20))
        req.topic_data.append(m.ProduceRequest.TopicProduceData(name="other", partition_data=[]))
        data = req.encode_bytes(9)
        cases = {
            data.index(b"y" * 20) + 5: "topic_data[0].partition_data[1].records: length 20 exceeds remaining 5 bytes",
            data.index(b"other") + 2: "topic_data[1].name: length 5 exceeds remaining 2 bytes",
            len(data) - 1: "<tagged fields>: truncated input",
        }
        for cut, expected in cases.items():
            err = self.assertRaises(ProtocolDecodeError, m.ProduceRequest.decode, data[:cut], 9)
            self.assertTrue(str(err).startswith("ProduceRequest v9: " + expected), str(err))
        # a nested class decoded on its own reads with its own reader
        part = m.ProduceRequest.PartitionProduceData(index=3, records=b"z")
        self.assertEqual(m.ProduceRequest.PartitionProduceData.decode(part.encode_bytes(9), 9), part)
        self.assertEqual(m.ProduceRequest.decode(data, 9), req)

    def test_bad_utf8_and_negative_length(self):
        err = self.assertRaises(ProtocolDecodeError, m.FindCoordinatorRequest.decode, b"\x00\x02\xff\xfe", 0)
        self.assertIn("key", str(err))
        err = self.assertRaises(ProtocolDecodeError, m.ProduceRequest.decode,
                                b"\xff\xff\x00\x01\x00\x00\x00\x00\xff\xff\xff\xfe", 3)
        self.assertIn("topic_data: invalid length -2", str(err))

    def test_arrays_of_primitives(self):
        r = m.ListOffsetsResponse(topics=[])
        self.assertEqual(m.ListOffsetsResponse.decode(r.encode_bytes(0), 0), r)
        p = m.ListOffsetsResponse.ListOffsetsPartitionResponse(partition_index=1, old_style_offsets=[1, -2, 3])
        r.topics = [m.ListOffsetsResponse.ListOffsetsTopicResponse(name="t", partitions=[p])]
        self.assertEqual(m.ListOffsetsResponse.decode(r.encode_bytes(0), 0), r)
        d = m.DescribeTopicPartitionsRequest()
        self.assertEqual(m.DescribeTopicPartitionsRequest.decode(d.encode_bytes(0), 0), d)

    def test_compact_lengths_of_one_two_and_three_bytes(self):
        # the readers take one- and two-byte lengths inline and longer ones through read_uvarint
        for n in (0, 126, 127, 128, 300, 16382, 16383, 16384, 70000):
            r = m.ApiVersionsRequest(client_software_name="x" * n, client_software_version="1")
            data = r.encode_bytes(3)
            self.assertEqual(data[:len(codec.write_uvarint(n + 1))], codec.write_uvarint(n + 1))
            self.assertEqual(m.ApiVersionsRequest.decode(data, 3), r, n)
        # a two-byte length cut after its first byte
        err = self.assertRaises(ProtocolDecodeError, m.ApiVersionsRequest.decode, b"\x81", 3)
        self.assertIn("client_software_name", str(err))


class PrimitiveTests(SynchronousTestCase):
    def test_uvarint(self):
        for n in (0, 1, 127, 128, 300, 16383, 16384, (1 << 31) - 1, (1 << 32) - 1):
            enc = codec.write_uvarint(n)
            self.assertEqual(codec.read_uvarint(enc + b"z", 0), (n, len(enc)))
        self.assertEqual(codec.write_uvarint(300), b"\xac\x02")

    def test_varint(self):
        for n in (0, -1, 1, -64, 63, 64, -(1 << 31), (1 << 31) - 1, -(1 << 63), (1 << 63) - 1):
            enc = codec.write_varint(n)
            self.assertEqual(codec.read_varint(enc, 0), (n, len(enc)))
        self.assertEqual(codec.write_varint(-1), b"\x01")
        self.assertEqual(codec.write_varint(1), b"\x02")

    def test_compact_len(self):
        self.assertEqual(codec.read_compact_len(b"\x00", 0, True), (-1, 1))
        self.assertEqual(codec.read_compact_len(b"\x03ab", 0, False), (2, 1))
        self.assertRaises(codec.DecodeFailure, codec.read_compact_len, b"\x00", 0, False)
        self.assertRaises(codec.DecodeFailure, codec.read_compact_len, b"\x05ab", 0, False)

    def test_uuid_field(self):
        tid = bytes(range(16))
        t = m.MetadataRequest.MetadataRequestTopic(topic_id=tid, name="x")
        data = m.MetadataRequest(topics=[t]).encode_bytes(12)
        self.assertIn(tid, data)
        self.assertEqual(m.MetadataRequest.decode(data, 12).topics[0].topic_id, tid)
        self.assertEqual(struct.calcsize(">16s"), 16)
