"""Replace a small file durably: the one way the broker's own state files are written.

A temp file beside the target is written and fsynced, renamed over the target, and the directory
is fsynced so the rename itself survives a power cut. Blocking: callers on the reactor run it in
the thread pool. Used for the metadata store, meta.properties and the SCRAM credential store.
"""

import os

from twisted.internet import defer


def write_atomically(path, data, mode=0o644):
    """Write ``data`` (bytes) to ``path`` so a crash leaves the old file or the new one, whole.

    ``mode`` applies when the temp file is created (0o600 for secrets); a stale ``.tmp`` left
    by a crash is truncated and reused.
    """
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_atomically_off_reactor(run_blocking, path, data, mode=0o644):
    """:func:`write_atomically` through ``run_blocking(fn, *args) -> Deferred`` (the broker's
    thread pool), or inline when it is None (unit tests); a Deferred either way."""
    if run_blocking is None:
        return defer.maybeDeferred(write_atomically, path, data, mode)
    return run_blocking(write_atomically, path, data, mode)
