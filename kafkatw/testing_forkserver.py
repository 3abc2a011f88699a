"""A fork server that starts ``twistd kafka`` brokers from a process with kafkatw pre-imported.

Owns only spawning: a helper process imports Twisted and kafkatw once (without installing a
reactor) and forks one broker per request, so a start skips ~0.4 s of imports. Each broker is
still its own process, runs twistd as usual, and is signalled and awaited through a pidfd. What
to run (the twistd command line) and when it is ready belong to :mod:`kafkatw.testing`.
"""

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

#: Modules the broker needs at start; none of them installs a reactor.
PRELOAD = (
    "twisted.scripts.twistd", "twisted.application.app", "twisted.internet.epollreactor",
    "twisted.internet.tcp", "twisted.internet.ssl", "twisted.logger",
    "kafkatw.tap", "kafkatw.service", "kafkatw.config", "kafkatw.protocol.messages",
    "kafkatw.network.listener", "kafkatw.network.connection", "kafkatw.network.reactor",
    "kafkatw.network.request_log",
    "kafkatw.network.settings", "kafkatw.server.apis", "kafkatw.server.fetch_session",
    "kafkatw.server.replica_manager", "kafkatw.storage", "kafkatw.cluster.metadata",
    "twisted.internet.endpoints", "kafkatw.registry", "kafkatw.plugins.transports",
)


# -- the server side (runs in the helper process) -------------------------------------------------

def _preload():
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # a module in flux: the broker imports (and reports) it itself
            pass
        if "twisted.internet.reactor" in sys.modules:  # a reactor must never cross a fork
            raise SystemExit("kafkatw fork server: %s installed a reactor" % name)
    try:
        from twisted.application.service import IServiceMaker
        from twisted.plugin import getPlugins

        list(getPlugins(IServiceMaker))
    except Exception:
        pass


def _reap(statuses):
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        path = statuses.pop(pid, None)
        if path:
            tmp = path + ".tmp"
            try:
                with open(tmp, "w") as f:
                    f.write(str(os.waitstatus_to_exitcode(status)))
                os.replace(tmp, path)
            except OSError:  # its folder is gone: nobody is waiting
                pass


def _die_with_parent():
    """PR_SET_PDEATHSIG: a broker never outlives the fork server, hence the test process."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except Exception:
        pass


def _run_child(request, server_pid):
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    code = 1
    try:
        _die_with_parent()
        if os.getppid() != server_pid:  # the server died before prctl took effect
            raise SystemExit(1)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(err, 2)
        os.close(err)
        os.close(devnull)
        os.chdir(request["cwd"])
        sys.argv = list(request["argv"])
        from twisted.scripts.twistd import run

        run()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            sys.stderr.write("%s\n" % (e.code,))
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve():
    """The helper's main loop: one JSON request per stdin line, the child's pid per reply."""
    _preload()
    import ctypes  # noqa: F401 -- loaded once here, used by every child

    statuses = {}
    server_pid = os.getpid()
    signal.signal(signal.SIGCHLD, lambda *_: _reap(statuses))
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
        try:
            pid = os.fork()
            if pid == 0:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
                _run_child(request, server_pid)
            statuses[pid] = request["status"]
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
        out.write("%d\n" % pid)
        out.flush()


# -- the client side (runs in the test process) ---------------------------------------------------

def _readable(fd, timeout):
    """poll(), not select(): a test process holding many sockets has descriptors past 1024."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(None if timeout is None else int(timeout * 1000)))


class ForkedProcess:
    """The ``subprocess.Popen`` subset KafkaBroker and its users need, for a forked broker."""

    def __init__(self, pid, status_path, server_alive=lambda: True):
        self.pid = pid
        self.returncode = None
        self._status_path = status_path
        self._server_alive = server_alive
        try:
            self._pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            # it exited (a refused config) and the fork server reaped it before we looked:
            # the status file says how
            self._pidfd = None

    def _exited(self, timeout):
        return self._pidfd is None or _readable(self._pidfd, timeout)

    def _collect(self):
        # the fork server reaps the process and writes its status; without a server, no status
        deadline = time.monotonic() + 2.0
        code = None
        while code is None and time.monotonic() < deadline:
            try:
                with open(self._status_path) as f:
                    code = int(f.read())
            except (OSError, ValueError):
                if not self._server_alive():
                    break
                time.sleep(0.002)
        self.returncode = code if code is not None else -1
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def poll(self):
        if self.returncode is None and self._exited(0):
            self._collect()
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            if not self._exited(timeout):
                raise subprocess.TimeoutExpired("kafkatw broker %d" % self.pid, timeout)
            self._collect()
        return self.returncode

    def send_signal(self, sig):
        if self.returncode is None and self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:
                pass

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def __del__(self):
        if getattr(self, "_pidfd", None) is not None:
            os.close(self._pidfd)


class ForkServer:
    """The client of one helper process; ``spawn()`` returns None until the helper is ready."""

    def __init__(self):
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from kafkatw.testing_forkserver import serve; serve()",
             "kafkatw-testing-fork-server"],  # forked brokers show this command line in ps
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            close_fds=True, text=True, bufsize=1,
        )
        self._ready = False
        self._dead = False

    def ready(self, timeout=0.0):
        if self._ready or self._dead:
            return self._ready
        if self._proc.poll() is not None:
            self._dead = True
            return False
        if _readable(self._proc.stdout.fileno(), timeout):
            self._ready = self._proc.stdout.readline().strip() == "ready"
            self._dead = not self._ready
        return self._ready

    def spawn(self, argv, cwd, stderr_path, status_path):
        """Fork a broker running ``argv`` (a twistd command line); None if the helper is unusable."""
        with self._lock:
            if not self.ready():
                return None
            if os.path.exists(status_path):
                os.unlink(status_path)
            request = {"argv": argv, "cwd": cwd, "stderr": stderr_path, "status": status_path}
            try:
                self._proc.stdin.write(json.dumps(request) + "\n")
                self._proc.stdin.flush()
                pid = int(self._proc.stdout.readline())
            except (OSError, ValueError):
                self._dead, self._ready = True, False
                return None
        return ForkedProcess(pid, status_path, lambda: self._proc.poll() is None)

    def close(self):
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._dead, self._ready = True, False


def available():
    return hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal") and hasattr(os, "fork")
