"""Tests only: memory snapshots of a broker process for ``tests.wire_fuzz``.

Python imports this module at start-up only when this directory is on ``PYTHONPATH`` (the
fuzzer puts it there for the broker it starts, never a shipped path). With
``KAFKATW_TRACEMALLOC_DIR`` set it starts ``tracemalloc`` and writes a snapshot
``<dir>/<n>.snap`` on each SIGUSR2, so a run can be diffed start against end. With
``KAFKATW_MALLOC_STATS_DIR`` set, each SIGUSR1 writes ``<dir>/<n>.json``: where the RSS
is held (Python's object allocator, glibc's arenas) and what ``malloc_trim(0)`` gives back.
"""

import os

_DIR = os.environ.get("KAFKATW_TRACEMALLOC_DIR")

if _DIR:
    import gc
    import signal
    import tracemalloc

    tracemalloc.start(int(os.environ.get("KAFKATW_TRACEMALLOC_FRAMES", "1")))
    _count = [0]

    def _dump(signum, frame):
        _count[0] += 1
        path = os.path.join(_DIR, "%d.snap" % _count[0])
        gc.collect()  # garbage awaiting the cycle collector is not what stays
        tracemalloc.take_snapshot().dump(path + ".tmp")
        os.rename(path + ".tmp", path)

    signal.signal(signal.SIGUSR2, _dump)

_STATS_DIR = os.environ.get("KAFKATW_MALLOC_STATS_DIR")

if _STATS_DIR:
    import signal

    import malloc_stats

    _taken = [0]

    def _stats(signum, frame):
        _taken[0] += 1
        malloc_stats.dump(os.path.join(_STATS_DIR, "%d.json" % _taken[0]))

    signal.signal(signal.SIGUSR1, _stats)
