"""CPU seconds and resident memory of a process, read from ``/proc/<pid>/stat`` and
``/proc/<pid>/status`` (Linux only). Nothing else."""

import os

_TICKS = os.sysconf("SC_CLK_TCK")


def _user_system_ticks(stat_path):
    """(utime, stime), in clock ticks, of a ``/proc/.../stat`` file."""
    with open(stat_path) as f:
        data = f.read()
    # the command name may hold spaces: fields start after the last ')'
    fields = data[data.rindex(")") + 2:].split()
    return int(fields[11]), int(fields[12])


def _cpu_ticks(stat_path):
    """utime + stime, in clock ticks, of a ``/proc/.../stat`` file."""
    return sum(_user_system_ticks(stat_path))


def cpu_seconds(pid="self"):
    """utime + stime of ``pid`` in seconds (threads included)."""
    return _cpu_ticks("/proc/%s/stat" % pid) / _TICKS


def user_system_seconds(pid="self"):
    """``(utime, stime)`` of ``pid`` in seconds: the system share is where the kernel's copies
    (page cache, sockets) and, on a VM, the host's first touch of guest memory land."""
    user, system = _user_system_ticks("/proc/%s/stat" % pid)
    return user / _TICKS, system / _TICKS


def _threads(pid, prefix=""):
    """The ids of the live threads of ``pid`` whose name starts with ``prefix``."""
    for tid in os.listdir("/proc/%s/task" % pid):
        try:
            with open("/proc/%s/task/%s/comm" % (pid, tid)) as f:
                if f.read().startswith(prefix):
                    yield tid
        except FileNotFoundError:  # the thread ended meanwhile
            continue


def threads_cpu_seconds(prefix, pid="self"):
    """utime + stime of the live threads of ``pid`` whose name starts with ``prefix`` (e.g.
    librdkafka's ``rdk:broker``), summed."""
    return sum(threads_cpu(pid, prefix).values())


def threads_cpu(pid="self", prefix=""):
    """``{tid: utime + stime seconds}`` of the live threads of ``pid`` named ``prefix...``."""
    out = {}
    for tid in _threads(pid, prefix):
        try:
            out[int(tid)] = _cpu_ticks("/proc/%s/task/%s/stat" % (pid, tid)) / _TICKS
        except FileNotFoundError:  # the thread ended meanwhile
            continue
    return out


def thread_schedstat():
    """``(on-CPU s, runnable-but-waiting s)`` of the calling thread (``/proc/thread-self/schedstat``):
    a thread that spent a window on the CPU or waiting for one was never idle, whatever its CPU
    seconds say on a loaded machine; ``(0.0, 0.0)`` without schedstats."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            run_ns, wait_ns = f.read().split()[:2]
    except (OSError, ValueError):
        return 0.0, 0.0
    return int(run_ns) / 1e9, int(wait_ns) / 1e9


def threads_schedstat(prefix, pid="self"):
    """``{tid: (on-CPU s, runnable-but-waiting s)}`` of the live threads of ``pid`` whose name
    starts with ``prefix`` (librdkafka's ``rdk:broker``: the thread that compresses a producer's
    batches and sends them); ``{}`` without schedstats."""
    out = {}
    for tid in _threads(pid, prefix):
        try:
            with open("/proc/%s/task/%s/schedstat" % (pid, tid)) as f:
                run_ns, wait_ns = f.read().split()[:2]
        except (OSError, ValueError):  # ended meanwhile, or no schedstats
            continue
        out[tid] = (int(run_ns) / 1e9, int(wait_ns) / 1e9)
    return out


def rss_bytes(pid="self"):
    with open("/proc/%s/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0
