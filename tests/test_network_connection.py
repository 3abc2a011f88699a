"""One connection end to end on StringTransports and a Clock: mute ordering, NoOp,
close_connection, header checks, back pressure, idle expiry, quotas, throttling."""

import struct

from twisted.internet import defer
from twisted.trial import unittest

from kafkatw.network.mute import ChannelMuteState as S
from kafkatw.network.request import Response
from kafkatw.network.settings import SocketServerSettings
from kafkatw.protocol import messages as m
from kafkatw.protocol.parts import FileRegion, join_parts

from tests.test_network_support import (
    Harness,
    ManualTransportLayer,
    RawBody,
    ScriptedHandler,
    api_versions_frame,
    frame,
    split_responses,
)


class MuteOrderingTests(unittest.SynchronousTestCase):
    def test_pipelined_requests_answered_in_order_second_unparsed(self):
        handler = ScriptedHandler(hold={1})
        h = Harness(handler)
        proto, tr = h.connect()
        f1 = frame(3, 12, 1)
        f2 = api_versions_frame(2)
        proto.dataReceived(f1 + f2)
        # one request with the handler, the second still raw bytes in the buffer
        self.assertEqual([r.correlation_id for r in handler.calls], [1])
        self.assertEqual(proto.decoder.buffered, len(f2))
        self.assertEqual(tr.producerState, "paused")
        self.assertIs(proto.mute.state, S.MUTED_AND_RESPONSE_PENDING)
        handler.release(1)
        # response handed to the transport layer but not yet fully written: still muted
        self.assertEqual(len(h.layer.sends), 1)
        self.assertEqual([r.correlation_id for r in handler.calls], [1])
        self.assertEqual(proto.decoder.buffered, len(f2))
        h.layer.drain()
        # now the second request is parsed and answered
        self.assertEqual([r.correlation_id for r in handler.calls], [1, 2])
        h.layer.drain()
        self.assertEqual([cid for cid, _ in split_responses(tr.value())], [1, 2])
        self.assertEqual(tr.producerState, "producing")
        self.assertIs(proto.mute.state, S.NOT_MUTED)

    def test_noop_unmutes_without_writing(self):
        handler = ScriptedHandler(responder=lambda r: Response(None, noop=True) if r.api_key == 0
                                  else ScriptedHandler().respond(r))
        h = Harness(handler, auto_drain=True)
        proto, tr = h.connect()
        produce = m.REQUESTS[0](acks=0, timeout_ms=1000)
        proto.dataReceived(frame(0, 9, 1, produce) + frame(0, 9, 2, produce) + api_versions_frame(3))
        self.assertEqual([r.correlation_id for r in handler.calls], [1, 2, 3])
        self.assertEqual([cid for cid, _ in split_responses(tr.value())], [3])
        self.assertFalse(tr.disconnecting)

    def test_close_connection_without_body(self):
        handler = ScriptedHandler(responder=lambda r: Response(None, close_connection=True))
        h = Harness(handler, auto_drain=True)
        proto, tr = h.connect()
        proto.dataReceived(frame(0, 9, 1) + api_versions_frame(2))
        self.assertEqual(tr.value(), b"")
        self.assertTrue(tr.disconnecting)
        self.assertEqual(len(handler.calls), 1)

    def test_close_connection_after_body(self):
        handler = ScriptedHandler(responder=lambda r: Response(ScriptedHandler().respond(r).body,
                                                               close_connection=True))
        h = Harness(handler)
        proto, tr = h.connect()
        proto.dataReceived(api_versions_frame(1) + api_versions_frame(2))
        self.assertFalse(tr.disconnecting)  # not before the body is written
        h.layer.drain()
        self.assertTrue(tr.disconnecting)
        self.assertEqual([cid for cid, _ in split_responses(tr.value())], [1])
        self.assertEqual(len(handler.calls), 1)

    def test_throttle_keeps_muted_until_it_ends(self):
        handler = ScriptedHandler(responder=lambda r: Response(ScriptedHandler().respond(r).body,
                                                               throttle_time_ms=100))
        h = Harness(handler, auto_drain=True)
        proto, tr = h.connect()
        proto.dataReceived(api_versions_frame(1) + api_versions_frame(2))
        self.assertEqual(len(handler.calls), 1)
        self.assertIs(proto.mute.state, S.MUTED_AND_THROTTLED)
        h.clock.advance(0.099)
        self.assertEqual(len(handler.calls), 1)
        h.clock.advance(0.002)
        self.assertEqual(len(handler.calls), 2)

    def test_handler_failure_closes(self):
        from twisted.internet import defer

        class Boom(ScriptedHandler):
            def handle(self, request):
                return defer.fail(RuntimeError("boom"))

        h = Harness(Boom(), auto_drain=True)
        proto, tr = h.connect()
        proto.dataReceived(api_versions_frame(1))
        self.assertTrue(tr.disconnecting)
        self.flushLoggedErrors(RuntimeError)

    def test_parked_request_failing_later_closes(self):
        handler = ScriptedHandler(hold={1})
        h = Harness(handler, auto_drain=True)
        proto, tr = h.connect()
        proto.dataReceived(api_versions_frame(1) + api_versions_frame(2))
        self.assertFalse(tr.disconnecting)
        _, d = handler.pending.pop(1)
        d.errback(RuntimeError("boom"))
        self.assertTrue(tr.disconnecting)
        self.assertEqual(tr.value(), b"")
        self.assertEqual([r.correlation_id for r in handler.calls], [1])  # the next one unread
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)


class HeaderCheckTests(unittest.SynchronousTestCase):
    def test_unsupported_api_versions_version_answer_bytes(self):
        h = Harness(ScriptedHandler(), auto_drain=True)
        proto, tr = h.connect()
        raw = struct.pack(">hhih", 18, 99, 7, 1) + b"c"
        proto.dataReceived(struct.pack(">i", len(raw)) + raw)
        # size 16 | correlation 7 | error 35 | [1 entry: key 18, min 0, max 4]  (header v0, body v0)
        self.assertEqual(tr.value(), bytes.fromhex("00000010" "00000007" "0023" "00000001" "0012" "0000" "0004"))
        self.assertFalse(tr.disconnecting)
        # the connection keeps working: a supported ApiVersions afterwards is answered
        proto.dataReceived(api_versions_frame(8))
        self.assertEqual([cid for cid, _ in split_responses(tr.value())], [7, 8])

    def test_too_new_metadata_closes_only_that_connection(self):
        handler = ScriptedHandler()
        h = Harness(handler, auto_drain=True)
        bad, bad_tr = h.connect()
        good, good_tr = h.connect()
        raw = struct.pack(">hhih", 3, 13, 1, 1) + b"c"
        bad.dataReceived(struct.pack(">i", len(raw)) + raw)
        self.assertTrue(bad_tr.disconnecting)
        self.assertEqual(bad_tr.value(), b"")
        good.dataReceived(frame(3, 12, 5))
        self.assertFalse(good_tr.disconnecting)
        self.assertEqual([cid for cid, _ in split_responses(good_tr.value())], [5])
        self.assertEqual(handler.calls[0].correlation_id, 5)

    def test_unknown_api_key_closes(self):
        h = Harness(ScriptedHandler(), auto_drain=True)
        proto, tr = h.connect()
        raw = struct.pack(">hhih", 999, 0, 1, -1)
        proto.dataReceived(struct.pack(">i", len(raw)) + raw)
        self.assertTrue(tr.disconnecting)

    def test_oversize_length_closes_without_allocating(self):
        h = Harness(ScriptedHandler(), settings=SocketServerSettings(socket_request_max_bytes=1000),
                    auto_drain=True)
        proto, tr = h.connect()
        proto.dataReceived(struct.pack(">i", 1001) + b"x" * 10)
        self.assertTrue(tr.disconnecting)
        self.assertEqual(h.server.metrics.invalid_frames, 1)

    def test_garbage_closes(self):
        h = Harness(ScriptedHandler(), auto_drain=True)
        proto, tr = h.connect()
        proto.dataReceived(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertTrue(tr.disconnecting)

    def test_undecodable_body_closes(self):
        h = Harness(ScriptedHandler(), auto_drain=True)
        proto, tr = h.connect()
        f = frame(3, 12, 1, m.REQUESTS[3](topics=[m.REQUESTS[3].MetadataRequestTopic(name="t")]))
        payload = f[4:-3]  # cut the body short, keep the frame length consistent
        proto.dataReceived(struct.pack(">i", len(payload)) + payload)
        self.assertTrue(tr.disconnecting)

    def test_truncated_frame_then_disconnect(self):
        handler = ScriptedHandler()
        h = Harness(handler, auto_drain=True)
        proto, tr = h.connect()
        f = api_versions_frame(1)
        proto.dataReceived(f[:-2])
        h.disconnect(proto)
        self.assertEqual(handler.calls, [])
        self.assertEqual(h.server.quotas.total, 0)
        self.assertEqual(h.server.metrics.connections["PLAINTEXT"], 0)


class BackPressureTests(unittest.SynchronousTestCase):
    def test_slow_handler_small_queue(self):
        handler = ScriptedHandler(hold_all=True)
        h = Harness(handler, settings=SocketServerSettings(queued_max_requests=2, num_io_threads=1),
                    auto_drain=True)
        conns = [h.connect() for _ in range(5)]
        for i, (proto, tr) in enumerate(conns):
            proto.dataReceived(api_versions_frame(i) + api_versions_frame(100 + i))
        ch = h.server.channel
        self.assertEqual(len(handler.calls), 1)
        self.assertEqual((ch.size, ch.blocked), (2, 2))
        self.assertEqual(h.server.metrics.request_queue_size, 2)
        self.assertTrue(all(tr.producerState == "paused" for _, tr in conns))
        # release one at a time; each frees a slot and the next request runs
        order = []
        while handler.pending:
            cid = min(handler.pending)
            order.append(cid)
            handler.release(cid)
        self.assertEqual(sorted(order), list(range(5)) + list(range(100, 105)))
        self.assertEqual(order[:5], [0, 1, 2, 3, 4])
        for i, (proto, tr) in enumerate(conns):
            self.assertEqual([cid for cid, _ in split_responses(tr.value())], [i, 100 + i])
            self.assertEqual(tr.producerState, "producing")
        self.assertEqual((ch.size, ch.blocked, ch.busy), (0, 0, 0))

    def test_parked_request_frees_its_slot(self):
        class Parking(ScriptedHandler):
            def handle(self, request):
                d = ScriptedHandler.handle(self, request)
                if request.api_key == 1:
                    request.mark_api_local_complete()
                return d

        handler = Parking(hold={1})
        h = Harness(handler, settings=SocketServerSettings(num_io_threads=1), auto_drain=True)
        a, _ = h.connect()
        b, btr = h.connect()
        a.dataReceived(frame(1, 12, 1))
        b.dataReceived(api_versions_frame(2))
        self.assertEqual([cid for cid, _ in split_responses(btr.value())], [2])


class ConnectionLimitTests(unittest.SynchronousTestCase):
    def test_connection_id_format(self):
        h = Harness(ScriptedHandler())
        p1, _ = h.connect()
        p2, _ = h.connect()
        self.assertEqual(p1.connection_id, "127.0.0.1:9092-127.0.0.1:50000-0-0")
        self.assertEqual(p2.connection_id, "127.0.0.1:9092-127.0.0.1:50001-0-1")

    def test_max_connections_per_ip_and_overrides(self):
        settings = SocketServerSettings(max_connections_per_ip=2,
                                        max_connections_per_ip_overrides={"127.0.0.2": 3})
        h = Harness(ScriptedHandler(), settings=settings)
        a = [h.connect("127.0.0.1")[0] for _ in range(3)]
        self.assertIsNone(a[2])
        b = [h.connect("127.0.0.2")[0] for _ in range(4)]
        self.assertEqual([p is None for p in b], [False, False, False, True])
        self.assertEqual(h.server.metrics.connections_rejected["PLAINTEXT"], 2)
        h.disconnect(a[0])
        self.assertIsNotNone(h.connect("127.0.0.1")[0])

    def test_max_connections(self):
        h = Harness(ScriptedHandler(), settings=SocketServerSettings(max_connections=2))
        p1, _ = h.connect("127.0.0.1")
        h.connect("127.0.0.2")
        self.assertIsNone(h.connect("127.0.0.3")[0])
        h.disconnect(p1)
        self.assertIsNotNone(h.connect("127.0.0.3")[0])

    def test_idle_timeout(self):
        h = Harness(ScriptedHandler(hold={2}), settings=SocketServerSettings(connections_max_idle_ms=1000),
                    auto_drain=True)
        proto, tr = h.connect()
        h.clock.advance(0.5)
        proto.dataReceived(api_versions_frame(1))
        h.clock.advance(0.9)
        self.assertFalse(tr.disconnecting)
        h.clock.advance(0.11)
        self.assertTrue(tr.disconnecting)

    def test_no_idle_close_while_request_in_flight(self):
        handler = ScriptedHandler(hold={1})
        h = Harness(handler, settings=SocketServerSettings(connections_max_idle_ms=1000), auto_drain=True)
        proto, tr = h.connect()
        proto.dataReceived(api_versions_frame(1))
        h.clock.advance(5)
        self.assertFalse(tr.disconnecting)
        handler.release(1)
        h.clock.advance(1.01)
        self.assertTrue(tr.disconnecting)


class SendNowLayer(ManualTransportLayer):
    """A layer with ``send_now`` like the plaintext one: records each call; the byte count
    when 'the socket took everything', else (``full``) a Deferred the test drains."""

    batch_answers = True

    def __init__(self):
        ManualTransportLayer.__init__(self)
        self.calls = []
        self.full = False

    def send_now(self, transport, parts):
        data = join_parts(parts)
        self.calls.append(data)
        transport.write(data)
        if not self.full:
            return len(data)
        d = defer.Deferred()
        self.sends.append((data, d))
        return d


class HeldResponseTests(unittest.SynchronousTestCase):
    """Byte-only responses answered in one frame loop leave in one send, in order."""

    def setUp(self):
        self.handler = ScriptedHandler()
        self.layer = SendNowLayer()
        self.h = Harness(self.handler, layer=self.layer)
        self.proto, self.tr = self.h.connect()

    def test_pipelined_answers_leave_in_one_send(self):
        self.proto.dataReceived(b"".join(api_versions_frame(cid) for cid in range(1, 6)))
        self.assertEqual([r.correlation_id for r in self.handler.calls], [1, 2, 3, 4, 5])
        self.assertEqual(len(self.layer.calls), 1)
        self.assertEqual([cid for cid, _ in split_responses(self.layer.calls[0])], [1, 2, 3, 4, 5])
        self.assertEqual(self.h.server.metrics.bytes_out, len(self.layer.calls[0]))
        self.assertEqual(self.tr.producerState, "producing")
        self.assertIs(self.proto.mute.state, S.NOT_MUTED)
        self.proto.dataReceived(api_versions_frame(6))
        self.assertEqual(len(self.layer.calls), 2)
        self.assertEqual([cid for cid, _ in split_responses(self.tr.value())], [1, 2, 3, 4, 5, 6])

    def test_a_held_send_the_socket_does_not_take_stops_reading_until_drained(self):
        self.layer.full = True
        self.proto.dataReceived(api_versions_frame(1) + api_versions_frame(2))
        self.assertEqual(len(self.layer.calls), 1)
        self.assertEqual(self.tr.producerState, "paused")
        self.proto.dataReceived(api_versions_frame(3))  # already in the kernel's buffer
        self.assertEqual([r.correlation_id for r in self.handler.calls], [1, 2])
        self.layer.full = False
        self.layer.drain()
        self.assertEqual([r.correlation_id for r in self.handler.calls], [1, 2, 3])
        self.assertEqual([cid for cid, _ in split_responses(self.tr.value())], [1, 2, 3])
        self.assertEqual(self.tr.producerState, "producing")

    def test_a_response_with_a_file_region_goes_out_after_the_held_ones_in_one_send(self):
        with open(self.mktemp(), "w+b") as f:
            f.write(b"RECORDS")
            f.flush()
            region = FileRegion(f, 0, 7)

            def responder(request):
                if request.api_key == 1:
                    return Response(RawBody([b"\x00\x00", region, b"\x01"]))
                return ScriptedHandler().respond(request)

            self.handler.responder = responder
            self.proto.dataReceived(api_versions_frame(1) + frame(1, 12, 2) + api_versions_frame(3))
            self.assertEqual(len(self.layer.calls), 2)
            self.assertEqual([cid for cid, _ in split_responses(self.layer.calls[0])], [1, 2])
            self.assertTrue(self.layer.calls[0].endswith(b"\x00\x00RECORDS\x01"))
            self.assertEqual([cid for cid, _ in split_responses(self.layer.calls[1])], [3])
            self.assertEqual(self.h.server.metrics.bytes_out, len(self.tr.value()))

    def test_answers_before_a_bad_frame_still_go_out_then_the_connection_closes(self):
        raw = struct.pack(">hhih", 999, 0, 3, -1)  # an unknown API key
        self.proto.dataReceived(api_versions_frame(1) + api_versions_frame(2)
                                + struct.pack(">i", len(raw)) + raw)
        self.assertEqual([cid for cid, _ in split_responses(self.tr.value())], [1, 2])
        self.assertEqual(len(self.layer.calls), 1)
        self.assertTrue(self.tr.disconnecting)

    def test_a_parked_request_ends_the_loop_and_flushes_what_was_held(self):
        self.handler.hold = {2}
        self.proto.dataReceived(api_versions_frame(1) + api_versions_frame(2) + api_versions_frame(3))
        self.assertEqual([cid for cid, _ in split_responses(self.tr.value())], [1])
        self.assertEqual(self.tr.producerState, "paused")
        self.handler.release(2)  # answered outside any frame loop: sent at once, then 3
        self.assertEqual([cid for cid, _ in split_responses(self.tr.value())], [1, 2, 3])
        self.assertEqual(len(self.layer.calls), 3)
