"""Tests for the generated row writers (``ProduceResponse.Rows``, ``FetchResponse.Rows``): for
every version, hypothesis values encode to the same bytes and parts as the message objects'
generic ``encode``, raise the same errors, and ``to_message()`` gives back those objects.
"""

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.protocol import messages as m
from kafkatw.protocol.codec import UnsupportedVersionError
from kafkatw.protocol.parts import FileRegion
from tests.test_protocol_codec import SETTINGS, struct_strategy

ROW_MESSAGES = (m.ProduceResponse, m.FetchResponse)
#: more examples than the codec round trips: two messages, and byte equality is the point
ROW_SETTINGS = settings(SETTINGS, max_examples=25)


def row_of(obj, defaults_as_none=False):
    """The row of a message object, walking its SCHEMA (independent of the generated code)."""
    out = []
    for attr, typ, versions, nullable, tagged, tag, ignorable, flex, sub in type(obj).SCHEMA:
        val = getattr(obj, attr)
        if sub is not None and val is not None:
            if typ.startswith("[]"):
                val = [row_of(e, defaults_as_none) for e in val]
            elif defaults_as_none and val._is_default():
                val = None
            else:
                val = row_of(val, defaults_as_none)
        elif typ.startswith("[]") and val is not None:
            val = tuple(val)
        out.append(val)
    return tuple(out)


def rows_of(obj, defaults_as_none=False):
    return obj.Rows(*row_of(obj, defaults_as_none))


def flat(parts):
    return [(p.file, p.position, p.count) if type(p) is FileRegion else p for p in parts]


def make_test(cls):
    lo, hi = cls.VALID_VERSIONS
    versions = list(range(lo, hi + 1))
    everything = st.tuples(*[struct_strategy(cls, v, False) for v in versions])

    def test(self):
        @ROW_SETTINGS
        @given(everything, st.booleans())
        def check(values, defaults_as_none):
            for v, obj in zip(versions, values):
                rows = rows_of(obj, defaults_as_none)
                self.assertEqual(flat(rows.encode(v)), flat(obj.encode(v)), "%s v%d" % (cls.__name__, v))
                self.assertEqual(rows.to_message(), obj)

        check()

    test.__name__ = "test_same_bytes_" + cls.__name__
    return test


class RowWriterTests(SynchronousTestCase):
    """Row writers against the generic generated encoder, every version."""

    def test_rows_class(self):
        rows = m.ProduceResponse.Rows()
        self.assertEqual((rows.responses, rows.throttle_time_ms, rows.node_endpoints), ((), 0, ()))
        self.assertIs(rows.MESSAGE, m.ProduceResponse)
        self.assertEqual(rows.to_message(), m.ProduceResponse())
        self.assertIn("throttle_time_ms=0", repr(rows))
        self.assertRaises(UnsupportedVersionError, rows.encode, 12)
        self.assertRaises(UnsupportedVersionError, m.FetchResponse.Rows().encode, -1)

    def test_throttle_time_in_every_version_that_has_it(self):
        for cls in ROW_MESSAGES:
            lo, hi = cls.VALID_VERSIONS
            for v in range(lo, hi + 1):
                obj = cls(throttle_time_ms=1234)
                rows = rows_of(obj)
                if v == 0:  # not in v0 (ignorable): not written
                    self.assertEqual(rows.encode_bytes(v), cls().encode_bytes(v))
                self.assertEqual(rows.encode_bytes(v), obj.encode_bytes(v), (cls, v))
                self.assertEqual(cls.decode(rows.encode_bytes(v), v).throttle_time_ms, 1234 if v else 0)

    def test_file_regions_and_large_records_are_parts(self):
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(bytes(range(256)) * 40)
        f = open(path, "rb")
        self.addCleanup(f.close)
        F = m.FetchResponse
        partitions = [
            F.PartitionData(partition_index=0, records=FileRegion(f, 10, 200)),
            F.PartitionData(partition_index=1, records=b"\x07" * 5000),  # >= 4096: its own part
            F.PartitionData(partition_index=2, records=b"\x01\x02", aborted_transactions=[
                F.AbortedTransaction(producer_id=5, first_offset=10)]),
            F.PartitionData(partition_index=3, records=None, diverging_epoch=F.EpochEndOffset(1, 20),
                            current_leader=F.LeaderIdAndEpoch(2, 3)),
            F.PartitionData(partition_index=4, records=FileRegion(f, 0, 0)),
        ]
        obj = F(throttle_time_ms=3, error_code=0, session_id=9, responses=[
            F.FetchableTopicResponse(topic="t", topic_id=b"\x01" * 16, partitions=partitions)],
            node_endpoints=[F.NodeEndpoint(node_id=1, host="h", port=9092, rack=None)])
        endpoints = obj.node_endpoints
        for v in range(12, 18):  # diverging_epoch and current_leader exist from v12
            obj.node_endpoints = endpoints if v >= 16 else []
            want = obj.encode(v)
            got = rows_of(obj).encode(v)
            self.assertEqual(flat(got), flat(want), v)
            self.assertEqual(sum(type(p) is FileRegion for p in got), 2)
            self.assertIn(b"\x07" * 5000, got)

    def test_absent_and_null_values_raise_as_the_objects_do(self):
        P = m.ProduceResponse
        cases = [
            # current_leader exists from v10 (tagged, not ignorable)
            (P(responses=[P.TopicProduceResponse(name="t", partition_responses=[
                P.PartitionProduceResponse(current_leader=P.LeaderIdAndEpoch(1, 2))])]), range(0, 10)),
            # node_endpoints from v10
            (P(node_endpoints=[P.NodeEndpoint(node_id=1, host="h", port=1)]), range(0, 10)),
            # a null topic name is never allowed
            (P(responses=[P.TopicProduceResponse(name=None)]), range(0, 12)),
            # session_id exists from v7, preferred_read_replica from v11 (neither ignorable)
            (m.FetchResponse(session_id=3), range(0, 7)),
            (m.FetchResponse(responses=[m.FetchResponse.FetchableTopicResponse(partitions=[
                m.FetchResponse.PartitionData(preferred_read_replica=1)])]), range(0, 11)),
        ]
        for obj, versions in cases:
            for v in versions:
                with self.assertRaises(UnsupportedVersionError) as want:
                    obj.encode(v)
                with self.assertRaises(UnsupportedVersionError) as got:
                    rows_of(obj).encode(v)
                self.assertEqual(str(got.exception), str(want.exception))
            hi = type(obj).VALID_VERSIONS[1]
            if versions[-1] < hi:  # present from the next version on: the same bytes
                self.assertEqual(rows_of(obj).encode_bytes(hi), obj.encode_bytes(hi))


for _cls in ROW_MESSAGES:
    setattr(RowWriterTests, "test_same_bytes_" + _cls.__name__, make_test(_cls))
