"""Byte-for-byte agreement of the generated codec with kafka-python's independent codecs.

kafka-python 3.x ships its own schema-driven message classes (``kafka.protocol.*``) and the
older hand-written ``Struct`` classes (``kafka.protocol.old``); both serve as oracles here.
"""

import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from kafka.protocol import admin as kp_admin
from kafka.protocol import consumer as kp_consumer
from kafka.protocol import metadata as kp_metadata
from kafka.protocol import producer as kp_producer
from kafka.protocol.old import api_versions as old_api_versions
from kafka.protocol.old import find_coordinator as old_find_coordinator
from kafka.protocol.old import metadata as old_metadata
from kafka.protocol.old import produce as old_produce

from kafkatw.protocol import messages as m
from tests.test_protocol_codec import struct_strategy

SETTINGS = settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def _in(r, v):
    return r is not None and r[0] <= v <= r[1]


def to_theirs(obj, their_cls, v):
    """Build kafka-python's object equal to our ``obj`` at version ``v``."""
    kwargs = {}
    default = type(obj)()
    for attr, typ, versions, nullable, tagged, tag, ignorable, flex, sub in obj.SCHEMA:
        if not _in(versions, v):
            continue
        val = getattr(obj, attr)
        if _in(tagged, v) and val == getattr(default, attr):
            continue  # kafka-python writes every tagged field it was given; Kafka skips defaults
        kwargs[attr] = _value_to_theirs(val, typ, sub, their_cls, v)
    return their_cls(**kwargs)


def _value_to_theirs(val, typ, sub, their_cls, v):
    if val is None:
        return None
    if typ.startswith("[]"):
        return [_value_to_theirs(e, typ[2:], sub, their_cls, v) for e in val]
    if sub is not None:
        return to_theirs(val, getattr(their_cls, sub.__name__), v)
    if typ == "uuid":
        return uuid.UUID(bytes=bytes(val))
    if typ in ("bytes", "records"):
        return bytes(val)
    return val


def assert_same_values(test, ours, theirs, v, path="msg"):
    """Field-by-field comparison of our object with kafka-python's decoded object."""
    for attr, typ, versions, nullable, tagged, tag, ignorable, flex, sub in ours.SCHEMA:
        if not _in(versions, v):
            continue
        a = getattr(ours, attr)
        b = getattr(theirs, attr)
        where = "%s.%s" % (path, attr)
        if b is None and _in(tagged, v) and a == getattr(type(ours)(), attr):
            continue  # kafka-python leaves an absent tagged struct as None; it is our default
        if typ == "uuid" and b is None:
            b = bytes(16)  # kafka-python decodes the all-zero uuid as None
        if a is None or b is None:
            test.assertEqual(a is None, b is None, where)
            continue
        if typ.startswith("[]"):
            test.assertEqual(len(a), len(b), where)
            for i, (x, y) in enumerate(zip(a, b)):
                if sub is not None:
                    assert_same_values(test, x, y, v, "%s[%d]" % (where, i))
                else:
                    test.assertEqual(_norm(x, typ[2:]), _norm(y, typ[2:]), where)
        elif sub is not None:
            assert_same_values(test, a, b, v, where)
        else:
            test.assertEqual(_norm(a, typ), _norm(b, typ), where)


def _norm(x, typ):
    if typ == "uuid":
        return x.bytes if isinstance(x, uuid.UUID) else bytes(x)
    if typ in ("bytes", "records"):
        return bytes(x)
    return x


# (our class, kafka-python class); versions are the intersection of both ranges.
PAIRS = [
    (m.ApiVersionsRequest, kp_metadata.ApiVersionsRequest),
    (m.ApiVersionsResponse, kp_metadata.ApiVersionsResponse),
    (m.MetadataRequest, kp_metadata.MetadataRequest),
    (m.MetadataResponse, kp_metadata.MetadataResponse),
    (m.FindCoordinatorRequest, kp_metadata.FindCoordinatorRequest),
    (m.FindCoordinatorResponse, kp_metadata.FindCoordinatorResponse),
    (m.ProduceRequest, kp_producer.ProduceRequest),
    (m.ProduceResponse, kp_producer.ProduceResponse),
    (m.FetchRequest, kp_consumer.FetchRequest),
    (m.FetchResponse, kp_consumer.FetchResponse),
    (m.ListOffsetsRequest, kp_consumer.ListOffsetsRequest),
    (m.ListOffsetsResponse, kp_consumer.ListOffsetsResponse),
    (m.JoinGroupRequest, kp_consumer.JoinGroupRequest),
    (m.JoinGroupResponse, kp_consumer.JoinGroupResponse),
    (m.SyncGroupRequest, kp_consumer.SyncGroupRequest),
    (m.HeartbeatRequest, kp_consumer.HeartbeatRequest),
    (m.OffsetCommitRequest, kp_consumer.OffsetCommitRequest),
    (m.OffsetCommitResponse, kp_consumer.OffsetCommitResponse),
    (m.OffsetFetchRequest, kp_consumer.OffsetFetchRequest),
    (m.OffsetFetchResponse, kp_consumer.OffsetFetchResponse),
    (m.CreateTopicsRequest, kp_admin.CreateTopicsRequest),
    (m.CreateTopicsResponse, kp_admin.CreateTopicsResponse),
    (m.DeleteTopicsRequest, kp_admin.DeleteTopicsRequest),
    (m.DescribeConfigsResponse, kp_admin.DescribeConfigsResponse),
    (m.InitProducerIdRequest, kp_producer.InitProducerIdRequest),
    (m.LeaveGroupRequest, kp_consumer.LeaveGroupRequest),
]


# kafka-python's MetadataResponse classes reject ClusterAuthorizedOperations (v8-10) and
# TopicAuthorizedOperations (v8+) as constructor arguments.
SKIP_VERSIONS = {m.MetadataResponse: range(8, 100)}


def common_versions(ours, theirs):
    lo = max(ours.VALID_VERSIONS[0], theirs.valid_versions[0])
    hi = min(ours.VALID_VERSIONS[1], theirs.valid_versions[1])
    return [v for v in range(lo, hi + 1) if v not in SKIP_VERSIONS.get(ours, ())]


def make_oracle_test(ours, theirs):
    versions = common_versions(ours, theirs)
    # No unknown tagged fields here: kafka-python's objects have no place to carry ours.
    everything = st.tuples(*[struct_strategy(ours, v, False) for v in versions])

    def test(self):
        self.assertTrue(versions, "no common versions")

        @SETTINGS
        @given(everything)
        def check(values):
            for v, obj in zip(versions, values):
                ctx = "%s v%d" % (ours.__name__, v)
                if ours is m.ApiVersionsResponse:
                    # kafka-python reads an error response as v0 (the broker's fallback).
                    obj.error_code = 0
                data = obj.encode_bytes(v)
                other = to_theirs(obj, theirs, v)
                self.assertEqual(bytes(other.encode(version=v)), data, ctx)
                decoded = theirs.decode(data, version=v)
                assert_same_values(self, obj, decoded, v, ctx)
                self.assertEqual(ours.decode(bytes(other.encode(version=v)), v), obj, ctx)

        check()

    test.__name__ = "test_oracle_" + ours.__name__
    return test


class KafkaPythonOracleTests(SynchronousTestCase):
    """Random values at every version both sides know: same bytes, same decoded fields."""


for _ours, _theirs in PAIRS:
    setattr(KafkaPythonOracleTests, "test_oracle_" + _ours.__name__, make_oracle_test(_ours, _theirs))


class LegacyStructOracleTests(SynchronousTestCase):
    """kafka-python's older hand-written Struct classes, written field by field."""

    def test_metadata_request_v0_v1(self):
        for v, cls in ((0, old_metadata.MetadataRequest_v0), (1, old_metadata.MetadataRequest_v1)):
            theirs = cls(topics=["a", "bc"]).encode()
            ours = m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name=n) for n in ("a", "bc")])
            self.assertEqual(ours.encode_bytes(v), bytes(theirs))
        self.assertEqual(m.MetadataRequest(topics=None).encode_bytes(1),
                         bytes(old_metadata.MetadataRequest_v1(topics=None).encode()))

    def test_metadata_response_v0(self):
        theirs = old_metadata.MetadataResponse_v0(
            brokers=[(1, "host", 9092)],
            topics=[(0, "t", [(0, 3, 1, [1, 2], [1])])],
        ).encode()
        ours = m.MetadataResponse.decode(bytes(theirs), 0)
        self.assertEqual(ours.brokers[0].host, "host")
        self.assertEqual(ours.brokers[0].port, 9092)
        p = ours.topics[0].partitions[0]
        self.assertEqual((p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes), (3, 1, [1, 2], [1]))
        self.assertEqual(ours.encode_bytes(0), bytes(theirs))

    def test_find_coordinator_v0(self):
        self.assertEqual(m.FindCoordinatorRequest(key="grp").encode_bytes(0),
                         bytes(old_find_coordinator.FindCoordinatorRequest_v0("grp").encode()))

    def test_api_versions_response_v0(self):
        theirs = old_api_versions.ApiVersionsResponse_v0(error_code=0, api_versions=[(0, 0, 9), (1, 0, 12)]).encode()
        ours = m.ApiVersionsResponse.decode(bytes(theirs), 0)
        self.assertEqual([(k.api_key, k.min_version, k.max_version) for k in ours.api_keys], [(0, 0, 9), (1, 0, 12)])
        self.assertEqual(ours.encode_bytes(0), bytes(theirs))

    def test_produce_request_v3(self):
        records = b"\x00" * 70
        theirs = old_produce.ProduceRequest_v3(
            transactional_id=None, required_acks=-1, timeout=1000, topics=[("t", [(0, records)])]
        ).encode()
        ours = m.ProduceRequest.decode(bytes(theirs), 3)
        self.assertEqual(bytes(ours.topic_data[0].partition_data[0].records), records)
        self.assertEqual(ours.encode_bytes(3), bytes(theirs))
