"""Tests only: memory snapshots of a broker process for ``tests.wire_fuzz --tracemalloc``.

Python imports this module at start-up only when this directory is on ``PYTHONPATH`` (the
fuzzer puts it there for the broker it starts, never a shipped path). With
``KAFKATW_TRACEMALLOC_DIR`` set it starts ``tracemalloc`` and writes a snapshot
``<dir>/<n>.snap`` on each SIGUSR2, so a run can be diffed start against end.
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
