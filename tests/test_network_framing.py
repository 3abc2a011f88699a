"""FrameDecoder and the mute state machine, without sockets."""

import struct

from twisted.trial import unittest

from kafkatw.network.framing import FrameDecoder, InvalidReceive, MIN_HEADER_SIZE
from kafkatw.network.mute import ChannelMute, ChannelMuteEvent as E, ChannelMuteState as S, IllegalMuteTransition


def framed(payload):
    return struct.pack(">i", len(payload)) + payload


class FrameDecoderTests(unittest.SynchronousTestCase):
    def test_byte_by_byte(self):
        d = FrameDecoder(100)
        payload = bytes(range(20))
        data = framed(payload) + framed(b"x" * 8)
        frames = []
        for i in range(len(data)):
            d.feed(data[i:i + 1])
            f = d.next_frame()
            while f is not None:
                frames.append(bytes(f))
                f = d.next_frame()
        self.assertEqual(frames, [payload, b"x" * 8])
        self.assertEqual(d.buffered, 0)

    def test_frames_within_and_across_chunks(self):
        # a whole chunk, a frame inside a chunk, one ending a chunk, one spanning three chunks
        d = FrameDecoder(100)
        d.feed(framed(b"a" * 8))
        self.assertEqual(bytes(d.next_frame()), b"a" * 8)
        d.feed(framed(b"b" * 9) + framed(b"c" * 10) + framed(b"d" * 11)[:5])
        self.assertEqual(bytes(d.next_frame()), b"b" * 9)
        self.assertEqual(bytes(d.next_frame()), b"c" * 10)
        self.assertIsNone(d.next_frame())
        d.feed(b"d" * 3)
        d.feed(b"d" * 7 + framed(b"e" * 8))
        frame = d.next_frame()
        self.assertIsInstance(frame, bytearray)  # writable: storage rewrites offsets in place
        self.assertEqual(bytes(frame), b"d" * 11)
        self.assertEqual(bytes(d.next_frame()), b"e" * 8)
        self.assertIsNone(d.next_frame())
        self.assertEqual(d.buffered, 0)

    def test_frames_stay_until_asked(self):
        d = FrameDecoder(100)
        d.feed(framed(b"a" * 8) + framed(b"b" * 9) + b"\x00\x00")
        self.assertEqual(bytes(d.next_frame()), b"a" * 8)
        self.assertEqual(d.buffered, 4 + 9 + 2)
        self.assertEqual(bytes(d.next_frame()), b"b" * 9)
        self.assertIsNone(d.next_frame())
        self.assertEqual(d.buffered, 2)

    def test_frame_is_writable(self):
        d = FrameDecoder(100)
        d.feed(framed(b"a" * 10))
        f = d.next_frame()
        self.assertIsInstance(f, bytearray)
        memoryview(f)[0] = 0x41  # storage rewrites offsets in place

    def test_oversize_raises_before_body(self):
        d = FrameDecoder(1000)
        d.feed(struct.pack(">i", 1001))
        with self.assertRaises(InvalidReceive) as cm:
            d.next_frame()
        self.assertEqual(cm.exception.size, 1001)

    def test_negative_and_too_small(self):
        for size in (-1, 0, MIN_HEADER_SIZE - 1):
            d = FrameDecoder(1000)
            d.feed(struct.pack(">i", size))
            self.assertRaises(InvalidReceive, d.next_frame)

    def test_large_frame_in_many_chunks(self):
        d = FrameDecoder(32 * 1024 * 1024)
        payload = bytes(range(256)) * (64 * 1024)  # 16 MiB
        data = framed(payload)
        for i in range(0, len(data), 65536):
            d.feed(data[i:i + 65536])
        self.assertEqual(bytes(d.next_frame()), payload)


class MuteStateTests(unittest.SynchronousTestCase):
    def test_normal_cycle(self):
        m = ChannelMute()
        m.mute()
        self.assertIs(m.state, S.MUTED)
        m.handle_event(E.REQUEST_RECEIVED)
        self.assertIs(m.state, S.MUTED_AND_RESPONSE_PENDING)
        self.assertFalse(m.maybe_unmute())
        m.handle_event(E.RESPONSE_SENT)
        self.assertIs(m.state, S.MUTED)
        self.assertTrue(m.maybe_unmute())
        self.assertIs(m.state, S.NOT_MUTED)

    def test_throttle_outlasts_response(self):
        m = ChannelMute()
        m.mute()
        m.handle_event(E.REQUEST_RECEIVED)
        m.handle_event(E.THROTTLE_STARTED)
        self.assertIs(m.state, S.MUTED_AND_THROTTLED_AND_RESPONSE_PENDING)
        m.handle_event(E.RESPONSE_SENT)
        self.assertIs(m.state, S.MUTED_AND_THROTTLED)
        self.assertFalse(m.maybe_unmute())
        m.handle_event(E.THROTTLE_ENDED)
        self.assertTrue(m.maybe_unmute())

    def test_throttle_ends_first(self):
        m = ChannelMute()
        m.mute()
        m.handle_event(E.REQUEST_RECEIVED)
        m.handle_event(E.THROTTLE_STARTED)
        m.handle_event(E.THROTTLE_ENDED)
        self.assertIs(m.state, S.MUTED_AND_RESPONSE_PENDING)
        m.handle_event(E.RESPONSE_SENT)
        self.assertTrue(m.maybe_unmute())

    def test_combined_calls_match_the_steps(self):
        # request_received = mute() + REQUEST_RECEIVED; response_sent = RESPONSE_SENT + maybe_unmute()
        m = ChannelMute()
        m.request_received()
        self.assertIs(m.state, S.MUTED_AND_RESPONSE_PENDING)
        self.assertTrue(m.response_sent())
        self.assertIs(m.state, S.NOT_MUTED)
        m.request_received()
        m.handle_event(E.THROTTLE_STARTED)
        self.assertFalse(m.response_sent())
        self.assertIs(m.state, S.MUTED_AND_THROTTLED)
        self.assertRaises(IllegalMuteTransition, m.request_received)
        m.handle_event(E.THROTTLE_ENDED)
        self.assertTrue(m.maybe_unmute())
        self.assertRaises(IllegalMuteTransition, m.response_sent)
        self.assertIs(m.state, S.NOT_MUTED)

    def test_illegal_transitions(self):
        m = ChannelMute()
        self.assertRaises(IllegalMuteTransition, m.handle_event, E.REQUEST_RECEIVED)
        self.assertRaises(IllegalMuteTransition, m.handle_event, E.RESPONSE_SENT)
        m.mute()
        self.assertRaises(IllegalMuteTransition, m.handle_event, E.RESPONSE_SENT)
        self.assertRaises(IllegalMuteTransition, m.handle_event, E.THROTTLE_STARTED)
        self.assertRaises(IllegalMuteTransition, m.handle_event, E.THROTTLE_ENDED)
        m.handle_event(E.REQUEST_RECEIVED)
        self.assertRaises(IllegalMuteTransition, m.handle_event, E.REQUEST_RECEIVED)
