"""Index writes on a full filesystem (issue 26): offset and time indexes are preallocated
sparse files written through a mapping, and a store into a hole the filesystem cannot back
is SIGBUS, which kills the broker with no line at all. Each new page is now written with
pwrite first, so a full disk is an OSError (ENOSPC) that takes the log dir offline.

Runs in a child process (a regression would kill it, not trial) on a tmpfs the test mounts
(skipped without CAP_SYS_ADMIN)."""

import subprocess
import sys
import textwrap

from twisted.trial import unittest

from tests.test_e2e_disk_full import SmallFilesystem

SCRIPT = textwrap.dedent("""
    import errno, os, sys
    from kafkatw.storage.index import OffsetIndex, TimeIndex
    d, kind = sys.argv[1], sys.argv[2]
    cls = OffsetIndex if kind == "offset" else TimeIndex
    idx = cls(os.path.join(d, "00000000000000000000." + kind), 0, 1024 * 1024)
    add = (lambda i: idx.append(i, i * 100)) if kind == "offset" else \\
        (lambda i: idx.maybe_append(1000 + i, i))
    add(1)  # opens the index: its first page is allocated
    fd = os.open(os.path.join(d, "ballast"), os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    os.close(fd)
    for i in range(2, 100000):
        try:
            add(i)
        except OSError as e:
            print("%s %d" % (errno.errorcode[e.errno], i))
            sys.exit(0)
    print("no error")
""")


class IndexOnFullDiskTests(unittest.SynchronousTestCase):
    def check(self, kind, entry_size):
        fs = SmallFilesystem(512)
        self.addCleanup(fs.close)
        proc = subprocess.run([sys.executable, "-c", SCRIPT, fs.path, kind],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, "killed by signal %d? %s"
                         % (-proc.returncode, proc.stderr[-500:]))
        # the first entry that needs a second page fails, cleanly
        self.assertEqual(proc.stdout.strip(), "ENOSPC %d" % (4096 // entry_size + 1))

    def test_offset_index(self):
        self.check("offset", 8)

    def test_time_index(self):
        self.check("timeindex", 12)
