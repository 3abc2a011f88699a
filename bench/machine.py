"""The machine's own ceilings, measured in the same run as the brokers: sendfile of a
page-cached file over loopback into a Python ``recv_into`` loop (another process), and the
raw append rate (``os.write`` of 1 MiB chunks into a fresh file on the brokers' filesystem),
and what a write into the page cache costs the writer's CPU, new pages against cached ones.
"""

import multiprocessing
import os
import socket
import time

from bench.procstat import cpu_seconds

MIB = 1024 * 1024


def _receiver(port, total, ready):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * MIB)
    buf = bytearray(MIB)
    view = memoryview(buf)
    got = 0
    while got < total:
        n = s.recv_into(view)
        if not n:
            break
        got += n
    s.close()


def sendfile_rate(folder, size=1 << 30):
    """MB/s of os.sendfile from a page-cached ``size``-byte file to a recv_into loop."""
    path = os.path.join(folder, "sendfile.bench")
    chunk = os.urandom(MIB)
    with open(path, "wb") as f:
        for _ in range(size // MIB):
            f.write(chunk)
    try:
        with open(path, "rb") as f:  # make sure it is cached
            while f.read(8 * MIB):
                pass
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(1)
        port = lsock.getsockname()[1]
        proc = multiprocessing.get_context("fork").Process(target=_receiver, args=(port, size, None))
        proc.start()
        conn, _ = lsock.accept()
        fd = os.open(path, os.O_RDONLY)
        t0 = time.perf_counter()
        c0 = cpu_seconds()
        sent = 0
        while sent < size:
            sent += os.sendfile(conn.fileno(), fd, sent, size - sent)
        proc.join()
        elapsed = time.perf_counter() - t0
        sender_cpu = cpu_seconds() - c0
        os.close(fd)
        conn.close()
        lsock.close()
    finally:
        os.unlink(path)
    return {"mb_s": size / elapsed / 1e6, "elapsed_s": elapsed, "sender_cpu_s": sender_cpu}


def _write_passes(folder, name, size, passes):
    """``[(seconds, CPU seconds)]`` of each pass of ``os.write`` of 1 MiB chunks over the same
    ``size`` bytes of a file made fresh for the first pass (its pages new to the page cache; a
    later pass writes over them, cached)."""
    path = os.path.join(folder, name)
    chunk = os.urandom(MIB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        out = []
        for _ in range(passes):
            os.lseek(fd, 0, os.SEEK_SET)
            c0, t0 = cpu_seconds(), time.perf_counter()
            for _ in range(size // MIB):
                os.write(fd, chunk)
            out.append((time.perf_counter() - t0, cpu_seconds() - c0))
    finally:
        os.close(fd)
        os.unlink(path)
    return out


def append_rate(folder, size=3 << 30):
    """MB/s of os.write of 1 MiB chunks into a fresh file (page cache growth included)."""
    [(elapsed, _)] = _write_passes(folder, "append.bench", size, 1)
    return {"mb_s": size / elapsed / 1e6, "elapsed_s": elapsed, "bytes": size}


def page_cache_write_cost(folder, size=1 << 30):
    """CPU seconds per GB that ``os.write`` of 1 MiB chunks costs the writer: into a fresh file
    (the page cache grows: pages allocated, zeroed and, on a VM whose memory the host backs on
    first touch or takes back through free page reporting, faulted in on the host), then over
    the same, now cached, pages (a copy only). Every broker pays the first for each byte it
    appends, so a replicated topic pays it once per replica."""
    (_, new), (_, cached) = _write_passes(folder, "pagecache.bench", size, 2)
    return {"new_pages_cpu_s_per_gb": new / (size / 1e9), "cached_pages_cpu_s_per_gb": cached / (size / 1e9)}
