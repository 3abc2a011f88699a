"""Tests only: where a process's memory is held, for ``tests.wire_fuzz --malloc-stats``.

Python's object allocator (pymalloc: 1 MiB arenas of 16 kB pools; an arena goes back to the
system only when every object in it is gone) and glibc's malloc (the main heap and one
arena per thread that allocated, up to 8 per core) each keep memory that was freed; RSS
counts it. ``stats()`` reads both, then ``malloc_trim(0)`` and the RSS it leaves.
"""

import ctypes
import json
import os
import re
import sys
import tempfile
import threading


def _status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def pymalloc():
    """The totals of ``sys._debugmallocstats()`` (it prints to the C stderr) as a dict."""
    with tempfile.TemporaryFile(mode="w+") as out:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read()
    found = {}
    for key, pattern in (("arenas", r"# arenas allocated current\s*=\s*([\d,]+)"),
                         ("arenas_highwater", r"# arenas highwater mark\s*=\s*([\d,]+)"),
                         ("allocated_blocks_bytes", r"# bytes in allocated blocks\s*=\s*([\d,]+)"),
                         ("available_blocks_bytes", r"# bytes in available blocks\s*=\s*([\d,]+)"),
                         ("unused_pools", r"(\d+) unused pools \*")):
        match = re.search(pattern, text)
        found[key] = int(match.group(1).replace(",", "")) if match else None
    return found


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _libc():
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        return libc
    except (OSError, AttributeError):  # not glibc, or older than 2.33
        return None


def glibc(libc):
    """mallinfo2 over all arenas, and how many arenas ``malloc_info`` lists."""
    info = libc.mallinfo2()
    out = {"heap_bytes": info.arena, "mmapped_bytes": info.hblkhd,
           "in_use_bytes": info.uordblks, "free_bytes": info.fordblks}
    with tempfile.TemporaryFile() as f:
        libc.fdopen.restype = ctypes.c_void_p
        stream = libc.fdopen(os.dup(f.fileno()), b"w")
        libc.malloc_info(0, ctypes.c_void_p(stream))
        libc.fclose(ctypes.c_void_p(stream))
        f.seek(0)
        out["arenas"] = f.read().count(b"<heap nr=")
    return out


def mappings():
    """File mappings: index files (of any log) and files deleted while mapped; a deleted
    log whose indexes stayed mapped would keep their pages."""
    index = deleted = 0
    with open("/proc/self/maps") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.endswith("(deleted)"):
                deleted += 1
            elif line.endswith(".index") or line.endswith(".timeindex"):
                index += 1
    return {"index_files": index, "deleted_files": deleted}


def stats(trim=True):
    """RSS, anonymous memory, threads, pymalloc's and glibc's totals; with ``trim``, the RSS
    after ``malloc_trim(0)`` (which gives glibc's free pages back)."""
    import gc
    gc.collect()
    out = {"rss_kb": _status_kb("VmRSS"), "anon_kb": _status_kb("RssAnon"),
           "threads": threading.active_count(), "os_threads": _status_kb("Threads"),
           "mappings": mappings(), "pymalloc": pymalloc()}
    libc = _libc()
    if libc is not None:
        out["glibc"] = glibc(libc)
        if trim:
            libc.malloc_trim(0)
            out["rss_kb_after_malloc_trim"] = _status_kb("VmRSS")
    return out


def dump(path, trim=True):
    """``stats()`` as JSON at ``path`` (written whole: a reader polls for the name)."""
    with open(path + ".tmp", "w") as f:
        json.dump(stats(trim), f)
    os.rename(path + ".tmp", path)
