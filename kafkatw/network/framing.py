"""Kafka's size-delimited framing: a 4-byte big-endian length, then that many bytes.

Owns buffering of received chunks and the size checks of ``NetworkReceive``; it knows
nothing about headers beyond their minimum size, nor about sockets.
"""

import collections
import struct
import sys

_SIZE = struct.Struct(">i")

# api_key int16 + api_version int16 + correlation_id int32: every header version has them.
MIN_HEADER_SIZE = 8

#: a frame at least this large is assembled in its own buffer, which a reader may receive
#: straight into (:meth:`FrameDecoder.receive_view`): one copy, by the kernel
LARGE_FRAME = 64 * 1024


class InvalidReceive(Exception):
    """A frame length outside ``[MIN_HEADER_SIZE, max_size]`` (Kafka's ``InvalidReceiveException``)."""

    def __init__(self, size, max_size):
        Exception.__init__(self, "invalid frame size %d (allowed %d..%d)" % (size, MIN_HEADER_SIZE, max_size))
        self.size = size
        self.max_size = max_size


class FramePool:
    """Large frames handed out lately, whose memory the next large frame reuses once nothing
    else refers to them (CPython's reference count: the request a frame carried is done, no
    view or pending write holds it). A fresh megabyte is zeroed and page-faulted in each time;
    a reused one is not. Shared by every connection and bounded in frames and bytes, so idle
    connections keep no memory of their last large request."""

    def __init__(self, max_frames=4, max_bytes=8 * 1024 * 1024):
        self.max_frames = max_frames
        self.max_bytes = max_bytes
        self._frames = collections.deque()
        self._bytes = 0

    def __len__(self):
        return len(self._frames)

    def take(self, need):
        """A bytearray of ``need`` bytes: a remembered frame of a near size nothing else refers
        to, resized in place, or a new one."""
        frames = self._frames
        for i in range(len(frames)):
            frame = frames[i]
            # three references: the deque, ``frame`` here and getrefcount's argument
            if need // 2 <= len(frame) <= 2 * need and sys.getrefcount(frame) == 3:
                del frames[i]
                self._bytes -= len(frame)
                size = len(frame)
                if size > need:
                    del frame[need:]
                elif size < need:
                    frame.extend(bytes(need - size))
                return frame
        return bytearray(need)

    def remember(self, frame):
        """``frame`` was handed out: its memory may serve a later frame once it is released."""
        if len(frame) > self.max_bytes:
            return
        frames = self._frames
        frames.append(frame)
        self._bytes += len(frame)
        while len(frames) > self.max_frames or self._bytes > self.max_bytes:
            self._bytes -= len(frames.popleft())


#: the pool of every connection's decoder (the broker's requests, the follower's answers)
FRAME_POOL = FramePool()


class FrameDecoder:
    """Accumulates received chunks and cuts complete frames, one at a time.

    Chunks are kept in a list and copied exactly once: into the ``bytearray`` of the
    frame they belong to (writable, so storage may rewrite offsets in place).  A frame
    is only cut when asked (:meth:`next_frame`), so a muted connection leaves later
    frames unparsed in the buffer.  The length is checked before any allocation.
    """

    __slots__ = ("max_size", "_chunks", "_offset", "buffered", "_need", "_frame", "_filled",
                 "last_was_large", "_pool")

    def __init__(self, max_size, pool=FRAME_POOL):
        self.max_size = max_size
        self._chunks = collections.deque()  # bytes-like; the first one is consumed from _offset
        self._offset = 0
        #: bytes received and not yet returned as frames (including a partial length)
        self.buffered = 0
        self._need = -1  # size of the frame being read, -1 while reading the length
        self._frame = None  # the large frame being received into (bytearray of _need bytes)
        self._filled = 0  # bytes of _frame received so far
        #: the last frame cut was a large one: a reader may expect another (read its length
        #: alone, then the frame straight into its buffer)
        self.last_was_large = False
        self._pool = pool

    @property
    def receiving(self):
        """True while some bytes of an incomplete frame (or its length) are buffered."""
        return self.buffered > 0

    def feed(self, data):
        if data:
            self.buffered += len(data)
            frame = self._frame
            if frame is not None:  # the frame's bytes go into it, any beyond into the chunks
                step = min(len(data), self._need - self._filled)
                frame[self._filled:self._filled + step] = memoryview(data)[:step]
                self._filled += step
                if step == len(data):
                    return
                data = memoryview(data)[step:]
            self._chunks.append(data)

    def receive_view(self):
        """A writable view of the rest of the large frame being read, or None.

        Once a frame's length is known to be at least ``LARGE_FRAME`` and more of it is to
        come, its buffer is made (the bytes buffered so far copied in) and the rest can be
        received straight into it: report how many bytes were with :meth:`received_into`.
        """
        frame = self._frame
        need = self._need
        if frame is None:
            if need < LARGE_FRAME or self.buffered >= need:
                return None
            frame = self._frame = self._pool.take(need)
            filled = 0
            chunks = self._chunks
            offset = self._offset
            while chunks:  # all of them belong to this frame: fewer than need bytes
                chunk = chunks.popleft()
                n = len(chunk) - offset
                frame[filled:filled + n] = memoryview(chunk)[offset:]
                filled += n
                offset = 0
            self._offset = 0
            self._filled = filled
        elif self._filled >= need:
            return None  # complete, not cut yet: the next bytes belong to the next frame
        return memoryview(frame)[self._filled:need]

    def received_into(self, n):
        """``n`` bytes were written into the view :meth:`receive_view` gave."""
        self._filled += n
        self.buffered += n

    def _take(self, n):
        """Remove and return the next ``n`` buffered bytes as one bytearray (one copy)."""
        out = bytearray(n)
        filled = 0
        chunks = self._chunks
        while filled < n:
            chunk = chunks[0]
            avail = len(chunk) - self._offset
            step = min(avail, n - filled)
            out[filled:filled + step] = memoryview(chunk)[self._offset:self._offset + step]
            filled += step
            if step == avail:
                chunks.popleft()
                self._offset = 0
            else:
                self._offset += step
        self.buffered -= n
        return out

    def next_frame(self):
        """Return the next complete frame (without its length) or ``None``.

        Raises :class:`InvalidReceive` as soon as an out-of-range length is read.
        """
        need = self._need
        if need < 0:
            if self.buffered < 4:
                return None
            chunk = self._chunks[0]
            offset = self._offset
            n = len(chunk)
            if n - offset >= 4:
                need = _SIZE.unpack_from(chunk, offset)[0]
                offset += 4
                end = offset + need
                if end <= n and MIN_HEADER_SIZE <= need <= self.max_size:
                    # the common case, length and frame within the first chunk: cut at once
                    # (no length state kept between the two; one copy)
                    self.buffered -= need + 4
                    self.last_was_large = need >= LARGE_FRAME
                    if end == n:
                        self._chunks.popleft()
                        self._offset = 0
                        if offset == 4:  # the chunk is this frame: copy it, drop the length
                            frame = bytearray(chunk)
                            del frame[:4]  # (a bytearray drops its head in place, no copy)
                            return frame
                    else:
                        self._offset = end
                    return bytearray(memoryview(chunk)[offset:end])
                self.buffered -= 4
                if offset == n:
                    self._chunks.popleft()
                    offset = 0
                self._offset = offset
            else:
                need = _SIZE.unpack(bytes(self._take(4)))[0]
            if need < MIN_HEADER_SIZE or need > self.max_size:
                self._need = -1
                raise InvalidReceive(need, self.max_size)
            self._need = need
        frame = self._frame
        if frame is not None:
            if self._filled < need:
                return None
            self._frame = None
            self._need = -1
            self.buffered -= need
            self.last_was_large = True
            self._pool.remember(frame)
            return frame
        if self.buffered < need:
            return None
        self._need = -1
        self.last_was_large = need >= LARGE_FRAME
        # the common case, a frame within the first chunk: one copy, no loop
        chunk = self._chunks[0]
        offset = self._offset
        end = offset + need
        n = len(chunk)
        if end > n:
            return self._take(need)
        self.buffered -= need
        if end == n:
            self._chunks.popleft()
            self._offset = 0
            if offset == 0:
                return bytearray(chunk)
        else:
            self._offset = end
        return bytearray(memoryview(chunk)[offset:end])
