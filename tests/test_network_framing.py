"""FrameDecoder and the mute state machine, without sockets."""

import struct

from twisted.trial import unittest

from kafkatw.network.framing import LARGE_FRAME, FrameDecoder, FramePool, InvalidReceive, MIN_HEADER_SIZE
from kafkatw.network.mute import ChannelMute, ChannelMuteEvent as E, ChannelMuteState as S, IllegalMuteTransition


def framed(payload):
    return struct.pack(">i", len(payload)) + payload


class FrameDecoderTests(unittest.SynchronousTestCase):
    def test_large_frame_received_into_its_buffer(self):
        """A frame of LARGE_FRAME bytes or more, once its length is read, is offered as a
        writable view of its own buffer; bytes written there and reported make the frame,
        bytes fed meanwhile go in too, and what follows it is the next frame."""
        size = LARGE_FRAME + 1000
        payload = bytes(i % 251 for i in range(size))
        d = FrameDecoder(10 * size)
        self.assertIsNone(d.receive_view())  # no length yet
        d.feed(framed(payload)[:100])
        self.assertIsNone(d.next_frame())
        view = d.receive_view()
        self.assertEqual(len(view), size - 96)  # the first 96 bytes are in the frame already
        view[:1000] = payload[96:1096]
        d.received_into(1000)
        self.assertIsNone(d.next_frame())
        d.feed(payload[1096:2000])  # a plain read meanwhile (e.g. a smaller receive)
        view = d.receive_view()
        self.assertEqual(len(view), size - 2000)
        view[:] = payload[2000:]
        d.received_into(size - 2000)
        self.assertIsNone(d.receive_view())  # complete: nothing more to receive into it
        frame = d.next_frame()
        self.assertIsInstance(frame, bytearray)
        self.assertEqual(bytes(frame), payload)
        self.assertEqual(d.buffered, 0)
        # a feed running past the frame's end leaves the rest for the next frame
        d.feed(framed(payload)[:10])
        self.assertIsNone(d.next_frame())
        d.receive_view()
        d.feed(framed(payload)[10:] + framed(b"small-12345"))
        self.assertEqual(bytes(d.next_frame()), payload)
        self.assertEqual(bytes(d.next_frame()), b"small-12345")
        self.assertIsNone(d.next_frame())
        self.assertEqual(d.buffered, 0)

    def test_large_frame_memory_reused_only_when_released(self):
        """The next large frame reuses the last one's buffer once nothing refers to it, and
        never while something still does (a parked request's records: a view of the frame).
        What a buffer held before the frame's bytes went in tells: a fresh one holds zeros, a
        reused one the last frame's bytes (an id alone can match a new object at a freed
        object's address)."""
        d = FrameDecoder(10 * LARGE_FRAME, pool=FramePool())

        def receive(payload):
            d.feed(framed(payload)[:8])
            self.assertIsNone(d.next_frame())
            view = d.receive_view()
            before = bytes(view[:6])  # frame bytes 4..9, not written yet
            view[:] = payload[4:]
            d.received_into(len(view))
            return d.next_frame(), before

        fresh = bytes(6)
        a_payload = b"a" * (LARGE_FRAME + 500)
        a, before = receive(a_payload)
        self.assertEqual(before, fresh)
        held = memoryview(a)[10:20]  # only a view left: still referred to, not reused
        del a
        b_payload = b"b" * (LARGE_FRAME + 500)  # the same size: no resize would refuse it
        b, before = receive(b_payload)
        self.assertEqual(before, fresh)
        self.assertEqual(bytes(held), b"a" * 10)
        self.assertEqual(bytes(held.obj), a_payload)
        self.assertIsNot(held.obj, b)
        b_id = id(b)
        del b  # released: the next one reuses its memory, resized
        c_payload = bytes(i % 253 for i in range(LARGE_FRAME + 700))
        c, before = receive(c_payload)
        self.assertEqual(before, b"b" * 6)
        self.assertEqual(id(c), b_id)
        self.assertEqual(bytes(c), c_payload)
        self.assertEqual(len(c), LARGE_FRAME + 700)
        del c
        e_payload = b"e" * (LARGE_FRAME + 10)  # smaller: shrunk in place
        e, before = receive(e_payload)
        self.assertEqual(before, c_payload[4:10])
        self.assertEqual(id(e), b_id)
        self.assertEqual(bytes(e), e_payload)
        self.assertEqual(bytes(held.obj), a_payload)

    def test_frame_pool_is_shared_and_bounded(self):
        """Decoders share one pool: a frame released by one connection serves another's next
        large frame, and what the pool keeps is bounded in frames and bytes, whatever the
        number of connections that once sent a large request (idle ones keep nothing)."""
        size = LARGE_FRAME + 100
        pool = FramePool(max_frames=3, max_bytes=5 * size)
        decoders = [FrameDecoder(10 * LARGE_FRAME, pool=pool) for _ in range(6)]

        def receive(d, fill):
            payload = bytes([fill]) * size
            d.feed(framed(payload)[:8])
            self.assertIsNone(d.next_frame())
            view = d.receive_view()
            before = bytes(view[:4])
            view[:] = payload[4:]
            d.received_into(len(view))
            frame = d.next_frame()
            self.assertEqual(bytes(frame), payload)
            return before

        for i, d in enumerate(decoders):
            receive(d, i + 1)  # each frame released at once
            self.assertLessEqual(len(pool), 3)
        self.assertEqual(len(pool), 1)  # each one reused the last: one buffer went round
        # another connection's next large frame reuses the released memory
        self.assertEqual(receive(decoders[0], 9), bytes([6]) * 4)
        held = []
        for i, d in enumerate(decoders):  # frames kept alive: new buffers, the pool bounded
            d.feed(framed(bytes([20 + i]) * size)[:8])
            d.next_frame()
            view = d.receive_view()
            view[:] = bytes([20 + i]) * len(view)
            d.received_into(len(view))
            held.append(d.next_frame())
            self.assertLessEqual(len(pool), 3)
        self.assertEqual(len(set(map(id, held))), 6)
        large = FramePool(max_bytes=size - 1)
        large.remember(bytearray(size))  # larger than the whole bound: never kept
        self.assertEqual(len(large), 0)

    def test_frame_pool_bytes_bound_counts_what_it_holds(self):
        """The byte bound evicts the oldest frames even below the frame bound, and counts only
        what the pool still holds (a frame taken out no longer counts)."""
        size = LARGE_FRAME + 100
        pool = FramePool(max_frames=10, max_bytes=2 * size)
        pool.remember(bytearray(size))
        taken = pool.take(size)  # nothing else referred to it: out of the pool
        self.assertEqual((len(taken), len(pool)), (size, 0))
        kept = [bytearray(size) for _ in range(3)]
        pool.remember(kept[0])
        pool.remember(kept[1])
        self.assertEqual(len(pool), 2)  # the taken frame's bytes are not counted any more
        pool.remember(kept[2])
        self.assertEqual(len(pool), 2)  # three would pass the byte bound: the oldest goes
        ids = [id(frame) for frame in kept]
        del kept[1:]  # the two the pool holds are free now, the evicted one is not
        self.assertEqual(id(pool.take(size)), ids[1])
        self.assertEqual(id(pool.take(size)), ids[2])
        self.assertEqual(len(pool), 0)

    def test_small_frames_are_not_received_into(self):
        d = FrameDecoder(10 * LARGE_FRAME)
        d.feed(framed(b"x" * (LARGE_FRAME - 1))[:50])
        self.assertIsNone(d.next_frame())
        self.assertIsNone(d.receive_view())

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
