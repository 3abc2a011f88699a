"""kafkatw.network.wire.MessagesWire, the seam between framing and the generated codec: request
header/body decode and response framing, byte for byte what the generated header classes write."""

import struct

from twisted.trial.unittest import SynchronousTestCase

from kafkatw.network.request import Request
from kafkatw.network.wire import MessagesWire, peek_header
from kafkatw.protocol import messages as m
from kafkatw.protocol.codec import ProtocolDecodeError


def request(api_key, api_version, correlation_id):
    r = Request.__new__(Request)
    r.api_key, r.api_version, r.correlation_id = api_key, api_version, correlation_id
    return r


def generated_frame(api_key, version, correlation_id, body):
    """Size, ResponseHeader and body as the generated classes write them."""
    head = m.ResponseHeader(correlation_id=correlation_id).encode_bytes(
        m.response_header_version(api_key, version))
    payload = head + body.encode_bytes(version)
    return struct.pack(">i", len(payload)) + payload


class EncodeResponseTests(SynchronousTestCase):
    def test_every_response_at_its_lowest_and_highest_version(self):
        wire = MessagesWire()
        checked = 0
        for key, cls in sorted(m.RESPONSES.items()):
            lo, hi = cls.VALID_VERSIONS
            for version in sorted({lo, hi}):
                body = cls()
                parts = wire.encode_response(request(key, version, 0x01020304 + key), body)
                self.assertEqual(b"".join(parts), generated_frame(key, version, 0x01020304 + key, body),
                                 (key, version))
                checked += 1
        self.assertEqual(checked, 147)  # 88 APIs, 59 of them with more than one version

    def test_header_v0_and_v1(self):
        wire = MessagesWire()
        # ApiVersions v3: flexible body, header v0 (correlation id only)
        frame = b"".join(wire.encode_response(request(18, 3, 7), m.ApiVersionsResponse()))
        self.assertEqual(frame[:8], struct.pack(">ii", len(frame) - 4, 7))
        self.assertEqual(m.ApiVersionsResponse.decode(frame[8:], 3), m.ApiVersionsResponse())
        # Metadata v12: header v1, an empty tagged-field count after the correlation id
        body = m.MetadataResponse(cluster_id="c", controller_id=1)
        frame = b"".join(wire.encode_response(request(3, 12, -5), body))
        self.assertEqual(frame[:9], struct.pack(">iib", len(frame) - 4, -5, 0))
        self.assertEqual(m.MetadataResponse.decode(frame[9:], 12), body)

    def test_file_regions_stay_parts(self):
        wire = MessagesWire()
        body = m.FetchResponse()
        parts = wire.encode_response(request(1, 12, 1), body)
        self.assertIsInstance(parts, list)
        self.assertEqual(b"".join(parts), generated_frame(1, 12, 1, body))


class DecodeRequestTests(SynchronousTestCase):
    def frame(self, api_key, version, body, client_id="wire-test"):
        header = m.RequestHeader(request_api_key=api_key, request_api_version=version,
                                 correlation_id=42, client_id=client_id)
        return header.encode_bytes(m.request_header_version(api_key, version)) + body.encode_bytes(version)

    def test_header_and_body(self):
        wire = MessagesWire()
        body = m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name="t")])
        for version in (1, 9, 12):
            frame = self.frame(3, version, body)
            self.assertEqual(peek_header(frame), (3, version, 42))
            header, decoded = wire.decode_request(frame, 3, version)
            self.assertEqual((header.correlation_id, header.client_id), (42, "wire-test"))
            self.assertEqual(decoded.encode_bytes(version), body.encode_bytes(version))

    def test_request_classes_load_per_key(self):
        wire = MessagesWire()
        self.assertEqual(dict(wire._requests), {})
        wire.decode_request(self.frame(18, 3, m.ApiVersionsRequest()), 18, 3)
        self.assertEqual(dict(wire._requests), {18: m.ApiVersionsRequest})

    def test_unknown_key_and_bad_body(self):
        wire = MessagesWire()
        with self.assertRaises(KeyError):
            wire.decode_request(b"\x27\x0f\x00\x00\x00\x00\x00\x01\x00\x00", 9999, 0)
        frame = self.frame(3, 12, m.MetadataRequest(topics=None))
        with self.assertRaises(ProtocolDecodeError):
            wire.decode_request(frame[:-3], 3, 12)
        with self.assertRaises(ProtocolDecodeError) as e:  # the header itself cut short
            wire.decode_request(frame[:10], 3, 12)
        self.assertIn("RequestHeader v2", str(e.exception))
        with self.assertRaises(ProtocolDecodeError):  # a version the codec does not know
            wire.decode_request(self.frame(3, 12, m.MetadataRequest())[:8], 3, 99)
        self.assertEqual(wire.api_name(3), "Metadata")
        self.assertEqual(wire.api_name(9999), "Unknown9999")
