"""Run the trial suite and end with the plain line CI reads: ``N passed, M failed[, K skipped]``.

Trial prints its own summary (``PASSED (successes=N)`` / ``FAILED (failures=.., errors=..)``);
this wrapper streams trial's output unchanged, then restates the counts in that plain form
and exits non-zero when anything failed or errored (or when trial itself failed to run).

The run gets a temporary folder of its own (``TMPDIR`` for trial and everything it starts),
removed when trial ends: whatever a test, a broker or a ZooKeeper leaves in it (a worker that
died, a fixture that forgot) is gone with the run instead of piling up in the system's temp
folder. With ``KAFKATW_TESTING_KEEP_DATA=1`` it stays, and its path is printed.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

SUMMARY = re.compile(r"^(PASSED|FAILED) \((.*)\)\s*$")


def main(argv):
    tests = argv or ["tests"]
    jobs = os.environ.get("TRIAL_JOBS", "2")
    trial = os.path.join(os.path.dirname(sys.executable), "trial")
    cmd = [trial, "--temp-directory=_trial_temp"]
    if jobs and jobs != "1":
        cmd.append("--jobs=%s" % jobs)
    cmd += tests
    run_tmp = tempfile.mkdtemp(prefix="kafkatw-tests-")
    env = dict(os.environ, TMPDIR=run_tmp)
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        counts = None
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            m = SUMMARY.match(line.strip())
            if m:
                counts = dict(
                    (k.strip(), int(v)) for k, v in (item.split("=") for item in m.group(2).split(","))
                )
        rc = proc.wait()
    finally:
        if os.environ.get("KAFKATW_TESTING_KEEP_DATA") == "1":
            print("the run's temporary files are kept in %s" % run_tmp)
        else:
            shutil.rmtree(run_tmp, ignore_errors=True)
    if counts is None:
        print("trial printed no summary (exit %d)" % rc)
        print("0 passed, 1 failed")
        return 1
    passed = counts.get("successes", 0)
    failed = counts.get("failures", 0) + counts.get("errors", 0) + counts.get("unexpectedSuccesses", 0)
    skipped = counts.get("skips", 0)
    line = "%d passed, %d failed" % (passed, failed)
    if skipped:
        line += ", %d skipped" % skipped
    print(line)
    return 1 if (failed or rc != 0 or passed == 0) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
