"""Socket buffer sizes from Kafka's configs (socket.send.buffer.bytes,
socket.receive.buffer.bytes, replica.socket.receive.buffer.bytes): -1 keeps the OS default.

Owns only setting them on a socket; which socket gets which value is the listener's and the
client's business.
"""

import socket

#: Kafka's Selectable.USE_DEFAULT_BUFFER_SIZE
USE_DEFAULT_BUFFER_SIZE = -1


def set_buffer_sizes(sock, send_bytes=USE_DEFAULT_BUFFER_SIZE, receive_bytes=USE_DEFAULT_BUFFER_SIZE):
    """SO_SNDBUF / SO_RCVBUF of ``sock``, each unless it is -1 (the kernel's own sizing then,
    including its auto-tuning, which a set size turns off)."""
    if send_bytes != USE_DEFAULT_BUFFER_SIZE:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_bytes)
    if receive_bytes != USE_DEFAULT_BUFFER_SIZE:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_bytes)
