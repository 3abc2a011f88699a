"""CPU seconds and resident memory of a process, read from ``/proc/<pid>/stat`` and
``/proc/<pid>/status`` (Linux only). Nothing else."""

import os

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid="self"):
    """utime + stime of ``pid`` in seconds (threads included)."""
    with open("/proc/%s/stat" % pid) as f:
        data = f.read()
    # the command name may hold spaces: fields start after the last ')'
    fields = data[data.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def rss_bytes(pid="self"):
    with open("/proc/%s/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0
