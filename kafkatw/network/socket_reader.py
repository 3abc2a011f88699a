"""Receives a large frame straight into its buffer on a plain TCP connection.

Twisted's ``doRead`` receives into a new bytes object per read (1 MiB here), which the
frame decoder then copies into the frame: two allocations and a copy per megabyte of a
produce request or a follower's fetch answer. While the decoder waits for the rest of a
large frame (``FrameDecoder.receive_view``), this reads with ``recv_into`` into the frame
itself; every other read is Twisted's own. A TLS transport decrypts into the frame itself
when it offers ``receive_frames_into`` (``network.tls_protocol``).

It also stops a muted connection's reading at the first read event while muted (nothing is
read, as Kafka removes OP_READ), so that a request answered later (a parked fetch) whose
client sends nothing meanwhile costs no epoll change to stop reading and one to resume.
"""

import errno

from twisted.internet import main, tcp

from kafkatw.network.mute import NOT_MUTED

_RETRY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EINTR)


def receive_into(sock, buf):
    """One ``recv_into(buf)``: the byte count, or what a ``doRead`` answers instead: None
    (nothing to read yet), ``CONNECTION_LOST`` (a socket error) or ``CONNECTION_DONE`` (EOF)."""
    try:
        n = sock.recv_into(buf)
    except OSError as e:
        return None if e.errno in _RETRY else main.CONNECTION_LOST
    return n if n else main.CONNECTION_DONE


def install(transport, decoder, received_into, mute=None, pause=None):
    """Read large frames of ``decoder`` from ``transport``'s socket straight into them;
    ``received_into(n)`` is called after ``n`` bytes went into the decoder (as ``dataReceived``
    after a read). With ``mute`` (a ``ChannelMute``), a read event while it is muted reads
    nothing and calls ``pause()``, which must stop reading.
    Returns True when the reads of a plain TCP connection go through here (``mute`` is then
    in force), else False: a transport that receives frames itself (TLS) was asked to, any
    other was left as it was."""
    receive_frames_into = getattr(transport, "receive_frames_into", None)
    if receive_frames_into is not None:
        receive_frames_into(decoder, received_into)
        return False
    if not isinstance(transport, tcp.Connection):
        return False
    sock = transport.socket
    twisted_read = transport.doRead
    length = bytearray(4)  # a next frame's length, read alone

    def doRead():
        if mute is not None and mute.state is not NOT_MUTED:
            pause()
            return None
        view = decoder.receive_view()
        if view is not None:
            n = receive_into(sock, view)
            if type(n) is not int:
                return n
            decoder.received_into(n)
            received_into(n)
            return None
        if not (decoder.last_was_large and decoder.buffered == 0):
            return twisted_read()
        # after a large frame, likely another: its length alone (one more recv per megabyte),
        # then the frame straight into its own buffer on the next read
        n = receive_into(sock, length)
        if type(n) is not int:
            return n
        decoder.feed(length[:n])  # a copy: the decoder keeps it
        received_into(n)
        return None

    transport.doRead = doRead  # the reactor calls the selectable's doRead
    return True
