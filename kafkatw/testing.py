"""A real kafkatw broker for any Python test suite: ``KafkaBroker`` and the trial mixin.

Owns starting ``twistd -n kafka`` as a subprocess on free loopback ports with a temporary data
folder, waiting until it answers ApiVersions, creating start-up topics over the wire, and turning
a failed start into one clear exception. The pytest fixtures live in :mod:`kafkatw.pytest_plugin`.
A subprocess (not an in-process reactor) keeps the broker independent of the test's own event
loop (asyncio, threads, Twisted's trial reactor) and makes ``kill()`` a real SIGKILL crash.
"""

import json
import os
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

__all__ = ["KafkaBroker", "KafkaBrokerMixin", "BrokerStartError", "api_versions_ok", "ZooKeeperServer",
           "KafkaCluster", "ZooKeeperUnavailable"]

#: Kafka's TOPIC_ALREADY_EXISTS: start-up topics survive a restart on the same data.
_TOPIC_ALREADY_EXISTS = 36
_CREATE_TOPICS_VERSION = 4  # non-flexible, supported by every kafkatw and Kafka broker


class BrokerStartError(RuntimeError):
    """The broker did not come up.

    ``reason`` is one line naming the cause (a bad property, a port clash, a crash), ``log_tail``
    the last lines of the broker's log and stderr; ``str()`` holds both.
    """

    def __init__(self, reason, log_tail="", log_path=None):
        self.reason = reason
        self.log_tail = log_tail
        self.log_path = log_path
        message = reason
        if log_tail:
            message += "\n--- last lines of the broker log (%s) ---\n%s" % (log_path, log_tail)
        RuntimeError.__init__(self, message)


def _twistd():
    candidate = os.path.join(os.path.dirname(sys.executable), "twistd")
    return [candidate] if os.path.exists(candidate) else [sys.executable, "-m", "twisted.scripts.twistd"]


_bytecode_checked = False


def _ensure_bytecode():
    """Compile stale or missing kafkatw bytecode once per test process.

    With PYTHONDONTWRITEBYTECODE=1 (or a fresh editable install) the broker would compile the
    ~2 MB generated codec on every start, about a second each. compileall only rewrites what is
    stale (a few ms otherwise); a read-only install is left alone.
    """
    global _bytecode_checked
    if _bytecode_checked:
        return
    _bytecode_checked = True
    try:
        import compileall
        import importlib.util

        package = os.path.dirname(importlib.util.find_spec("kafkatw").origin)
        compileall.compile_dir(package, quiet=2)
    except Exception:  # best effort: a slower start is not an error
        pass


_fork_server_instance = None


def _fork_server():
    """The process-wide fork server, started on first use; None where it cannot work."""
    global _fork_server_instance
    from kafkatw import testing_forkserver

    if _fork_server_instance is None:
        if not testing_forkserver.available():
            return None
        _register_exit()
        _fork_server_instance = testing_forkserver.ForkServer()
    return _fork_server_instance


_exit_registered = False


def _register_exit():
    """At exit: stop the class-scoped brokers first, then the fork server that reaps them."""
    global _exit_registered
    if not _exit_registered:
        import atexit

        atexit.register(_at_exit)
        _exit_registered = True


def _at_exit():
    _stop_class_brokers()
    if _fork_server_instance is not None:
        _fork_server_instance.close()


# -- talking to the broker -----------------------------------------------------------------------

def _recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return bytes(buf)


def _connect(host, port, timeout, ssl_context=None):
    sock = socket.create_connection((host, port), timeout=timeout)
    if ssl_context is not None:
        try:
            sock = ssl_context.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
    return sock


def _request(sock, body):
    sock.sendall(struct.pack(">i", len(body)) + body)
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    return _recv_exact(sock, size)


def api_versions_ok(host, port, timeout=2.0, ssl_context=None):
    """True when the broker at host:port answers an ApiVersions v0 request with error 0."""
    client_id = b"kafkatw.testing"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    try:
        with _connect(host, port, timeout, ssl_context) as s:
            payload = _request(s, body)
    except OSError:
        return False
    correlation_id, error_code = struct.unpack_from(">ih", payload, 0)
    return correlation_id == 1 and error_code == 0


def _exchange(host, port, api_key, version, request, timeout, ssl_context=None, sasl=None,
              failed=ConnectionError):
    """One request on a connection of its own and its decoded response. ``sasl`` is
    ``(mechanism, user, password)`` to log in first (the CLI client's connection does that);
    a failed login or connection there raises ``failed`` with its message."""
    from kafkatw.protocol import messages as m

    if sasl is not None:
        from kafkatw.cli.client import BrokerConnection, ClientError

        try:
            conn = BrokerConnection(host, port, ssl_context, "kafkatw.testing", timeout, sasl=sasl)
            try:
                return conn.send(request, version, api_key=api_key)
            finally:
                conn.close()
        except ClientError as e:
            raise failed(str(e)) from None
    header = m.RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=7,
                             client_id="kafkatw.testing")
    body = header.encode_bytes(m.request_header_version(api_key, version)) + request.encode_bytes(version)
    with _connect(host, port, timeout, ssl_context) as s:
        payload = _request(s, body)
    _, pos = m.ResponseHeader.decode_from(payload, 0, m.response_header_version(api_key, version))
    response, _ = m.RESPONSES[api_key].decode_from(payload, pos, version)
    return response


def _topic_spec(spec, default_partitions):
    """``"name"`` | ``(name, partitions)`` | ``(name, partitions, {config: value})``."""
    if isinstance(spec, str):
        return spec, default_partitions, {}
    spec = tuple(spec)
    name = spec[0]
    partitions = spec[1] if len(spec) > 1 and spec[1] is not None else default_partitions
    configs = dict(spec[2]) if len(spec) > 2 and spec[2] else {}
    return name, partitions, configs


def create_topics(host, port, topics, timeout=10.0, ssl_context=None, sasl=None):
    """Create ``topics`` (see :func:`_topic_spec`) with CreateTopics over the wire.

    ``sasl`` is ``(mechanism, user, password)`` to log in first (a SASL-only broker).
    An existing topic is fine; any other error raises ``RuntimeError`` naming topic and error.
    """
    from kafkatw.protocol import messages as m  # the codec is big: load it only when needed

    req = m.CreateTopicsRequest(timeout_ms=int(timeout * 1000))
    for name, partitions, configs in topics:
        req.topics.append(m.CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=-1 if partitions is None else int(partitions),
            replication_factor=-1,
            configs=[m.CreateTopicsRequest.CreatableTopicConfig(name=k, value=str(v))
                     for k, v in configs.items()]))
    resp = _exchange(host, port, 19, _CREATE_TOPICS_VERSION, req, timeout, ssl_context, sasl,
                     failed=RuntimeError)
    failures = []
    for t in resp.topics:
        if t.error_code not in (0, _TOPIC_ALREADY_EXISTS):
            from kafkatw.protocol.errors import error_name

            err = error_name(t.error_code)
            failures.append("%s: %s%s" % (t.name, err, " (%s)" % t.error_message if t.error_message else ""))
    if failures:
        raise RuntimeError("cannot create topics: " + "; ".join(failures))


# -- failure diagnosis ---------------------------------------------------------------------------

_EXCEPTION_LINE = re.compile(r"(?:^|\s)((?:[\w.]+\.)?(\w+(?:Error|Exception))): (.+)$")


def _failure_reason(stderr_lines, log_lines, returncode):
    """One line naming why the broker exited: its own config message, a port clash, or the error."""
    for line in reversed(stderr_lines):
        if line.startswith("kafkatw: "):
            text = line[len("kafkatw: "):]
            if text.startswith("Socket server failed to bind"):
                return "port clash: " + text
            return "bad broker configuration: " + text
    return _last_error(log_lines + stderr_lines) or "broker exited with status %s during start" % (
        returncode,)


def _last_error(lines):
    """The last ``SomeError: text`` line, a port clash or a config error named as such."""
    for line in reversed(lines):
        m = _EXCEPTION_LINE.search(line)
        if m:
            kind, text = m.group(2), m.group(3).strip()
            if kind == "CannotListenError" or "Address already in use" in text:
                return "port clash: " + text
            if kind == "ConfigError":
                return "bad broker configuration: " + text
            return "%s: %s" % (kind, text)
    return None


def _keep_data_asked():
    """``KAFKATW_TESTING_KEEP_DATA=1``: every broker and cluster keeps its work folder (logs,
    data) after close, for a post-mortem of a test run."""
    return os.environ.get("KAFKATW_TESTING_KEEP_DATA") == "1"


def _read_lines(path, offset=0):
    """The lines of ``path`` from byte ``offset`` on (an appended log: one attempt's own lines)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []


class KafkaBroker:
    """One broker process. Use as a context manager or call ``start()``/``close()``.

    :param overrides: broker properties (Kafka names) as a dict, e.g. ``{"num.partitions": 3}``.
    :param num_partitions: shorthand for the ``num.partitions`` override.
    :param listeners: security protocols to listen with, e.g. ``("PLAINTEXT", "SSL")`` (each on
        a free loopback port), or full Kafka listener entries ``"NAME://host:port"``. An SSL
        listener gets a throwaway CA and server certificate (``ssl_ca_path``).
    :param topics: topics to create at start: ``"name"``, ``("name", partitions)`` or
        ``("name", partitions, {"cleanup.policy": "compact"})``.
    :param data_dir: where logs live; a temporary folder (removed on close) by default.
    :param keep_data: keep the temporary folder after close (also when the environment has
        ``KAFKATW_TESTING_KEEP_DATA=1``: a flaky test's logs survive the run).
    :param log_path: the broker's log file (default ``broker.log`` in the work folder).
    :param request_log: ``True`` (``request.log`` in the work folder) or a path: log every request.
    :param host: loopback address to listen on.
    :param start_timeout: seconds to wait for the first answered ApiVersions.
    :param config_file: a server.properties file; ``overrides`` win over it.
    :param fork_server: fork the broker from a helper with kafkatw pre-imported (about 5x
        faster starts); False (or ``KAFKATW_TESTING_FORK_SERVER=0``) runs ``twistd`` directly.
    :param sasl_users: ``{user: password}`` accepted on SASL_PLAINTEXT/SASL_SSL listeners: PLAIN
        users in each SASL listener's JAAS config, SCRAM credentials written into the data folder
        before the first start (as ``kafka-storage format --add-scram`` does).
    :param sasl_mechanisms: the ``sasl.enabled.mechanisms`` of SASL listeners.
    :param open_file_limit: run the broker with this RLIMIT_NOFILE (soft and hard), as under
        ``ulimit -n``; implies no fork server.
    """

    def __init__(self, overrides=None, num_partitions=None, data_dir=None, keep_data=False,
                 host="127.0.0.1", start_timeout=30.0, config_file=None, listeners=("PLAINTEXT",),
                 topics=(), log_path=None, request_log=False, fork_server=True, sasl_users=None,
                 sasl_mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), open_file_limit=None):
        self.overrides = dict(overrides or {})
        self.open_file_limit = open_file_limit
        self.fork_server = (fork_server and open_file_limit is None
                            and os.environ.get("KAFKATW_TESTING_FORK_SERVER", "1") != "0")
        if num_partitions is not None:
            self.overrides["num.partitions"] = num_partitions
        self._own_dir = data_dir is None
        self.work_dir = tempfile.mkdtemp(prefix="kafkatw-") if self._own_dir else None
        self.data_dir = (os.path.join(self.work_dir, "kafka-logs") if self._own_dir
                         else os.path.abspath(data_dir))
        if self.work_dir is None:
            self.work_dir = tempfile.mkdtemp(prefix="kafkatw-run-")
        self.keep_data = keep_data or _keep_data_asked()
        self.host = host
        self.start_timeout = start_timeout
        self.config_file = config_file and os.path.abspath(config_file)
        self.process = None
        self.log_path = os.path.abspath(log_path or os.path.join(self.work_dir, "broker.log"))
        self.stderr_path = self.log_path + ".stderr"
        self._ready_path = os.path.join(self.work_dir, "ready.json")
        if request_log is True:
            request_log = os.path.join(self.work_dir, "request.log")
        self.request_log_path = os.path.abspath(request_log) if request_log else None
        if isinstance(listeners, str):
            listeners = [x.strip() for x in listeners.split(",") if x.strip()]
        self._listeners = [self._listener_entry(x) for x in listeners]
        self.ports = {}  # listener name -> bound port, kept for restarts
        self.metrics_port = None  # kafkatw.metrics.listener's bound port, when configured
        self.console_port = None  # kafkatw.console.listener's bound port, when configured
        self.topics = [_topic_spec(t, None) for t in topics]
        self.ssl_ca_path = self.ssl_client_cert_path = self.ssl_client_key_path = None
        self.pki = None
        self.sasl_users = dict(sasl_users or {})
        self.sasl_mechanisms = tuple(sasl_mechanisms)

    def _listener_entry(self, item):
        if "://" in item:
            name, _, rest = item.partition("://")
            host, _, port = rest.rpartition(":")
            return name.strip().upper(), host or self.host, int(port)
        return item.strip().upper(), self.host, 0

    # -- addresses ---------------------------------------------------------------------------
    def _protocol(self, name):
        mapping = str(self.overrides.get("listener.security.protocol.map", ""))
        for pair in mapping.split(","):
            listener, _, proto = pair.partition(":")
            if listener.strip().upper() == name:
                return proto.strip().upper()
        return name

    def _address(self, protocol):
        for name, host, _ in self._listeners:
            if self._protocol(name) == protocol and name in self.ports:
                return host, self.ports[name]
        return None

    def _main_address(self):
        """The PLAINTEXT listener's (host, port), else the first listener's; port 0 before start."""
        addr = self._address("PLAINTEXT")
        if addr is None and self._listeners:
            name, host, _ = self._listeners[0]
            addr = (host, self.ports.get(name, 0))
        return addr or (self.host, 0)

    @property
    def port(self):
        """The PLAINTEXT listener's port (the first listener's without one; 0 before start)."""
        return self._main_address()[1]

    @property
    def bootstrap_servers(self):
        """``host:port`` of the PLAINTEXT listener (of the first listener when there is none)."""
        return "%s:%d" % self._main_address()

    @property
    def ssl_bootstrap_servers(self):
        """``host:port`` of the SSL listener, or None without one."""
        addr = self._address("SSL")
        return "%s:%d" % addr if addr else None

    @property
    def sasl_bootstrap_servers(self):
        """``host:port`` of the SASL_PLAINTEXT listener, or None without one."""
        addr = self._address("SASL_PLAINTEXT")
        return "%s:%d" % addr if addr else None

    @property
    def sasl_ssl_bootstrap_servers(self):
        """``host:port`` of the SASL_SSL listener, or None without one."""
        addr = self._address("SASL_SSL")
        return "%s:%d" % addr if addr else None

    def _main_protocol(self):
        if self._address("PLAINTEXT") is not None or not self._listeners:
            return "PLAINTEXT"
        return self._protocol(self._listeners[0][0])

    def main_ssl_context(self):
        """:meth:`ssl_context` when the listener of :meth:`_main_address` is SSL or SASL_SSL,
        else None."""
        return self.ssl_context() if self._main_protocol() in ("SSL", "SASL_SSL") else None

    def main_sasl(self):
        """``(mechanism, user, password)`` to log in on the listener of :meth:`_main_address`
        when it is a SASL one (:meth:`_sasl_login`), else None."""
        return self._sasl_login() if self._main_protocol().startswith("SASL_") else None

    def _sasl_login(self):
        """The first of ``sasl_users`` with the first mechanism the CLI client speaks; None
        without a user or such a mechanism."""
        usable = [m for m in self.sasl_mechanisms if m in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")]
        if not (usable and self.sasl_users):
            return None
        user = sorted(self.sasl_users)[0]
        return usable[0], user, self.sasl_users[user]

    def ssl_context(self):
        """A client ``ssl.SSLContext`` trusting the throwaway CA (for the readiness probe, tests)."""
        import ssl

        ctx = ssl.create_default_context(cafile=self.ssl_ca_path)
        if self.ssl_client_cert_path:
            ctx.load_cert_chain(self.ssl_client_cert_path, self.ssl_client_key_path)
        return ctx

    # -- life cycle ----------------------------------------------------------------------------
    def _needs_pki(self):
        return any(self._protocol(name) in ("SSL", "SASL_SSL") for name, _, _ in self._listeners)

    def _make_pki(self):
        if self.pki is not None or not self._needs_pki():
            return
        from kafkatw.tls_certs import make_test_pki

        directory = os.path.join(self.work_dir, "pki")
        os.makedirs(directory, exist_ok=True)
        self.pki = make_test_pki(directory)
        self.ssl_ca_path = self.pki.ca_cert
        self.ssl_client_cert_path = self.pki.client_cert
        self.ssl_client_key_path = self.pki.client_key

    def _ssl_props(self):
        if self.pki is None:
            return {}
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": self.pki.server_keystore,
            "ssl.key.password": self.pki.key_password,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": self.pki.ca_cert,
        }

    def _sasl_listener_names(self):
        return [name for name, _, _ in self._listeners
                if self._protocol(name) in ("SASL_PLAINTEXT", "SASL_SSL")]

    def _sasl_props(self):
        names = self._sasl_listener_names()
        if not names:
            return {}
        props = {"sasl.enabled.mechanisms": ",".join(self.sasl_mechanisms)}
        for mechanism in self.sasl_mechanisms:
            if mechanism.startswith("SCRAM-"):
                for name in names:
                    props["listener.name.%s.%s.sasl.jaas.config" % (name.lower(), mechanism.lower())] = \
                        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        if "PLAIN" in self.sasl_mechanisms and self.sasl_users:
            users = " ".join('user_%s="%s"' % (u, p.replace("\\", "\\\\").replace('"', '\\"'))
                             for u, p in sorted(self.sasl_users.items()))
            jaas = "org.apache.kafka.common.security.plain.PlainLoginModule required %s;" % users
            for name in names:
                props["listener.name.%s.plain.sasl.jaas.config" % name.lower()] = jaas
        return props

    def _write_scram_users(self):
        """SCRAM credentials of ``sasl_users`` that the data folder does not hold yet."""
        mechanisms = [m for m in self.sasl_mechanisms if m.startswith("SCRAM-")]
        if not (mechanisms and self.sasl_users and self._sasl_listener_names()):
            return
        from kafkatw.security.credentials import ScramCredentialStore
        from kafkatw.security.scram import MECHANISMS, make_credential

        os.makedirs(self.data_dir, exist_ok=True)
        store = ScramCredentialStore.in_dir(self.data_dir)
        new = [(user, mech, make_credential(MECHANISMS[mech], password))
               for user, password in sorted(self.sasl_users.items()) for mech in mechanisms
               if store.get(user, mech) is None]
        if new:
            store.alter(upsertions=new)

    def properties(self):
        """The broker properties passed as ``--override`` (listeners, dirs, TLS, overrides)."""
        listeners = ",".join("%s://%s:%d" % (name, host, self.ports.get(name, port) or port)
                             for name, host, port in self._listeners)
        props = {"listeners": listeners, "log.dirs": self.data_dir,
                 "kafkatw.ready.file": self._ready_path}
        if self.request_log_path:
            props["kafkatw.request.log.enable"] = "true"
            props["kafkatw.request.log.file"] = self.request_log_path
        props.update(self._ssl_props())
        props.update(self._sasl_props())
        props.update({k: str(v).lower() if isinstance(v, bool) else str(v)
                      for k, v in self.overrides.items()})
        return props

    def twistd_args(self):
        """``twistd`` arguments: no daemon, no pidfile, our log file, the kafka plugin."""
        args = ["-n", "--pidfile=", "--logfile=" + self.log_path, "kafka"]
        if self.config_file:
            args += ["--config", self.config_file]
        for k, v in self.properties().items():
            args += ["--override", "%s=%s" % (k, v)]
        return args

    def command(self):
        """The command line that runs this broker without the fork server."""
        return _twistd() + self.twistd_args()

    def _spawn(self):
        server = _fork_server() if self.fork_server else None
        if server is not None:
            process = server.spawn(["twistd"] + self.twistd_args(), self.work_dir, self.stderr_path,
                                   os.path.join(self.work_dir, "exit-status"))
            if process is not None:
                return process
        preexec = None
        if self.open_file_limit is not None:
            limit = self.open_file_limit

            def preexec():
                resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
        with open(self.stderr_path, "wb") as stderr:
            return subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=stderr, cwd=self.work_dir, preexec_fn=preexec,
            )

    def open_descriptors(self):
        """How many descriptors the running broker process holds now (``/proc/PID/fd``)."""
        return len(os.listdir("/proc/%d/fd" % self.process.pid))

    def start(self):
        """Start the broker (again, on the same data and ports) and wait until it answers."""
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("broker already running (pid %d)" % self.process.pid)
        _ensure_bytecode()
        self._make_pki()
        self._write_scram_users()
        if os.path.exists(self._ready_path):
            os.unlink(self._ready_path)
        self.process = self._spawn()
        deadline = time.monotonic() + self.start_timeout
        delay = 0.002
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._fail_exited()
            if self._read_ready() and self._answers():
                self._create_topics()
                return self
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
        self.kill()
        reason = "broker did not answer ApiVersions within %.0f s" % self.start_timeout
        error = _last_error(_read_lines(self.log_path) + _read_lines(self.stderr_path))
        if error:
            reason += "; last error in its log: " + error
        raise BrokerStartError(reason, self.log_tail(), self.log_path)

    def _answers(self):
        addr = self._address("PLAINTEXT")
        if addr is not None:
            return api_versions_ok(addr[0], addr[1])
        addr = self._address("SSL")
        if addr is not None:
            return api_versions_ok(addr[0], addr[1], ssl_context=self.ssl_context())
        addr = self._address("SASL_PLAINTEXT")  # ApiVersions is answered before authentication
        if addr is not None:
            return api_versions_ok(addr[0], addr[1])
        addr = self._address("SASL_SSL")
        if addr is not None:
            return api_versions_ok(addr[0], addr[1], ssl_context=self.ssl_context())
        return True

    def _create_topics(self):
        if not self.topics:
            return
        addr = self._address("PLAINTEXT")
        ctx = sasl = None
        if addr is None and self._address("SSL") is not None:
            addr, ctx = self._address("SSL"), self.ssl_context()
        elif addr is None:
            # SASL only: log in as the first user with the first mechanism the CLI client speaks
            sasl = self._sasl_login()
            if sasl is None:
                self.stop()
                raise BrokerStartError("cannot create topics on a SASL-only broker without sasl_users "
                                       "and a PLAIN or SCRAM mechanism", self.log_tail(), self.log_path)
            addr = self._address("SASL_PLAINTEXT")
            if addr is None:
                addr, ctx = self._address("SASL_SSL"), self.ssl_context()
        try:
            create_topics(addr[0], addr[1], self.topics, ssl_context=ctx, sasl=sasl)
        except (RuntimeError, OSError) as e:
            self.stop()
            raise BrokerStartError(str(e), self.log_tail(), self.log_path) from None

    def _fail_exited(self):
        returncode = self.process.returncode
        self.process = None
        reason = _failure_reason(_read_lines(self.stderr_path), _read_lines(self.log_path), returncode)
        raise BrokerStartError(reason, self.log_tail(), self.log_path)

    def _read_ready(self):
        try:
            with open(self._ready_path) as f:
                info = json.load(f)
        except (OSError, ValueError):
            return False
        for listener in info.get("listeners", []):
            self.ports[listener["name"].upper()] = int(listener["port"])
        self.metrics_port = info.get("metrics_port")
        self.console_port = info.get("console_port")
        return True

    def stop(self, timeout=30.0):
        """SIGTERM and wait: a clean shutdown (flush, checkpoints, clean-shutdown marker)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a paused broker cannot stop
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self):
        """SIGKILL: a crash, for recovery tests. ``start()`` recovers the same data."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process = None

    def pause(self):
        """SIGSTOP: the broker freezes (its ZooKeeper session expires in cluster mode)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self):
        """SIGCONT after :meth:`pause`."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)

    def restart(self):
        """A clean stop and a start on the same data and ports."""
        self.stop()
        return self.start()

    @property
    def running(self):
        return self.process is not None and self.process.poll() is None

    def close(self):
        """Stop and remove the temporary folder (unless ``keep_data``)."""
        self.stop()
        if not self.keep_data:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "running" if self.running else "stopped"
        return "<KafkaBroker %s %s data=%s>" % (self.bootstrap_servers, state, self.data_dir)

    # -- diagnostics ---------------------------------------------------------------------------
    def log_tail(self, lines=40):
        """The last ``lines`` lines of the broker log and of its stderr."""
        out = []
        for path in (self.log_path, self.stderr_path):
            out.extend(_read_lines(path)[-lines:])
        return "\n".join(out)


#: the loggers of controller, leadership and ISR changes (KafkaCluster.state_change_log)
_STATE_CHANGE_LOGGERS = re.compile(r"\[kafkatw\.(controller|server\.partition|server\.replica_manager|"
                                   r"server\.alter_partition)[.#]")


# -- ZooKeeper and a cluster ----------------------------------------------------------------------

#: where Debian's ``zookeeper`` package puts its jars
ZOOKEEPER_CLASSPATH = "/usr/share/java/*"
_ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"


class ZooKeeperUnavailable(RuntimeError):
    """Java or Debian's ZooKeeper jars are missing (``apt-get install zookeeper``)."""


def zookeeper_available():
    return shutil.which("java") is not None and os.path.exists(_ZOOKEEPER_JAR)


def _free_port(host):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def zookeeper_command(host, port, command="srvr", timeout=1.0):
    """A ZooKeeper four-letter word's answer, or None if it does not answer."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(command.encode("ascii"))
            chunks = []
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
    except OSError:
        return None
    return b"".join(chunks).decode("utf-8", "replace")


def _die_with_test_process():
    """PR_SET_PDEATHSIG in the ZooKeeper child: it never outlives the test process (trial's
    workers end without running atexit, where the clusters would be closed)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except Exception:
        pass


class _PortTaken(Exception):
    """ZooKeeper could not have the port it was given."""


class ZooKeeperServer:
    """A standalone ZooKeeper (Debian's package, Java) on a free loopback port with its data in
    ``work_dir``. ``tick_time_ms`` 500 allows session timeouts from 1 to 10 seconds."""

    def __init__(self, work_dir=None, host="127.0.0.1", port=0, tick_time_ms=500, start_timeout=60.0):
        if not zookeeper_available():
            raise ZooKeeperUnavailable("ZooKeeper needs java and %s (Debian's zookeeper package)" % _ZOOKEEPER_JAR)
        self._own_dir = work_dir is None
        self.work_dir = tempfile.mkdtemp(prefix="kafkatw-zk-") if work_dir is None else work_dir
        os.makedirs(self.work_dir, exist_ok=True)
        self.host = host
        self.port = port
        self.tick_time_ms = tick_time_ms
        self.start_timeout = start_timeout
        self.process = None
        self.log_path = os.path.join(self.work_dir, "zookeeper.log")

    @property
    def connect(self):
        """``host:port`` for ``zookeeper.connect``."""
        return "%s:%d" % (self.host, self.port)

    def _write_config(self):
        data = os.path.join(self.work_dir, "data")
        os.makedirs(data, exist_ok=True)
        path = os.path.join(self.work_dir, "zoo.cfg")
        with open(path, "w") as f:
            f.write("tickTime=%d\ndataDir=%s\nclientPort=%d\nclientPortAddress=%s\nmaxClientCnxns=0\n"
                    "admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,conf\n"
                    % (self.tick_time_ms, data, self.port, self.host))
        return path

    def start(self):
        """Start and wait until it answers as itself. A port picked here (none given) that
        another process took between the pick and Java's bind is picked again, up to five times;
        a restart keeps its port (the clients' connect strings name it)."""
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("ZooKeeper already running (pid %d)" % self.process.pid)
        picked = not self.port
        for attempt in range(5 if picked else 1):
            if picked:
                self.port = _free_port(self.host)
            try:
                return self._start_once()
            except _PortTaken as e:
                if not picked or attempt == 4:
                    raise BrokerStartError("ZooKeeper could not bind %s: %s" % (self.connect, e),
                                           "\n".join(_read_lines(self.log_path)[-40:]), self.log_path)

    def _start_once(self):
        config = self._write_config()
        data_dir = os.path.join(self.work_dir, "data")
        with open(self.log_path, "ab") as out:
            # the log is appended to by every attempt and restart: this one's lines start here
            since = out.seek(0, os.SEEK_END)
            self.process = subprocess.Popen(
                ["java", "-Xmx256m", "-XX:+UseSerialGC", "-Dzookeeper.log.dir=" + self.work_dir,
                 "-cp", ZOOKEEPER_CLASSPATH, "org.apache.zookeeper.server.ZooKeeperServerMain", config],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=self.work_dir,
                preexec_fn=_die_with_test_process)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                lines = _read_lines(self.log_path, since)[-40:]
                if any("Address already in use" in line for line in lines):
                    self.process = None
                    raise _PortTaken("the port is in use")
                raise BrokerStartError("ZooKeeper exited with status %s" % self.process.returncode,
                                       "\n".join(lines), self.log_path)
            answer = zookeeper_command(self.host, self.port)
            if answer and "Mode: standalone" in answer:
                # the answer may come from another test's ZooKeeper that holds the port
                conf = zookeeper_command(self.host, self.port, "conf") or ""
                if data_dir in conf:
                    return self
                if conf:
                    self.kill()
                    raise _PortTaken("another ZooKeeper answers there")
            time.sleep(0.05)
        self.kill()
        raise BrokerStartError("ZooKeeper did not answer srvr within %.0f s" % self.start_timeout,
                               "\n".join(_read_lines(self.log_path)[-40:]), self.log_path)

    def _signal(self, sig):
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)

    def pause(self):
        """SIGSTOP: ZooKeeper stops answering (sessions are not expired while it is stopped)."""
        self._signal(signal.SIGSTOP)

    def resume(self):
        self._signal(signal.SIGCONT)

    def kill(self):
        if self.process is None:
            return
        self._signal(signal.SIGCONT)
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process = None

    def stop(self, timeout=30.0):
        if self.process is None:
            return
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    @property
    def running(self):
        return self.process is not None and self.process.poll() is None

    def close(self):
        self.kill()
        if self._own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc):
        self.close()


def cluster_metadata(host, port, topics=None, timeout=5.0, ssl_context=None, sasl=None):
    """Metadata v9 from one broker: ``(brokers {id: (host, port, rack)}, controller id,
    {topic: {partition: (error, leader, leader_epoch, replicas, isr, offline)}})``; ``sasl`` is
    ``(mechanism, user, password)`` to log in first."""
    from kafkatw.protocol import messages as m

    version = 9
    req = m.MetadataRequest(topics=None if topics is None else [m.MetadataRequest.MetadataRequestTopic(name=t)
                                                                 for t in topics],
                            allow_auto_topic_creation=False)
    # a failed login raises ConnectionError, as a failed socket does: polls try again
    resp = _exchange(host, port, 3, version, req, timeout, ssl_context, sasl)
    brokers = {b.node_id: (b.host, b.port, b.rack) for b in resp.brokers}
    out = {}
    for t in resp.topics:
        out[t.name] = {p.partition_index: (p.error_code, p.leader_id, p.leader_epoch, list(p.replica_nodes),
                                           list(p.isr_nodes), list(p.offline_replicas))
                       for p in t.partitions}
        if t.error_code and not t.partitions:
            out[t.name] = t.error_code
    return brokers, resp.controller_id, out


class KafkaCluster:
    """Brokers ``1..brokers`` coordinated through a ZooKeeper started in the work folder.

    :param racks: ``broker.rack`` per broker (a list in id order), or None.
    :param overrides: properties for every broker; ``broker_overrides`` ``{id: {...}}`` per broker.
    :param topics: created once every broker is registered, as :class:`KafkaBroker`'s.
    :param session_timeout_ms: the brokers' ``zookeeper.session.timeout.ms`` (how long a killed
        broker stays registered).
    ``broker(id)`` is a :class:`KafkaBroker` with ``kill``/``stop``/``start``/``restart``; the
    cluster's ``zookeeper`` has ``kill``/``pause``/``resume``.
    """

    def __init__(self, brokers=3, racks=None, overrides=None, broker_overrides=None, topics=(),
                 session_timeout_ms=6000, chroot="/kafkatw", keep_data=False, start_timeout=60.0,
                 fork_server=True, listeners=("PLAINTEXT",)):
        self.work_dir = tempfile.mkdtemp(prefix="kafkatw-cluster-")
        self.keep_data = keep_data or _keep_data_asked()
        self.zookeeper = ZooKeeperServer(os.path.join(self.work_dir, "zookeeper"))
        self.chroot = chroot
        self.start_timeout = start_timeout
        self.topics = [_topic_spec(t, None) for t in topics]
        self.brokers = {}
        for i in range(1, brokers + 1):
            props = {"broker.id": i, "zookeeper.session.timeout.ms": session_timeout_ms,
                     "zookeeper.connection.timeout.ms": 20000,
                     # a stop with partitions nobody else can lead waits 3 x this, not 3 x 5 s
                     "controlled.shutdown.retry.backoff.ms": 300,
                     # leaders move back to preferred replicas only in the tests that turn it on
                     # (a long-running test cluster must not see leadership move on a timer)
                     "auto.leader.rebalance.enable": False}
            if racks is not None and racks[i - 1] is not None:
                props["broker.rack"] = racks[i - 1]
            props.update(overrides or {})
            props.update((broker_overrides or {}).get(i, {}))
            directory = os.path.join(self.work_dir, "broker-%d" % i)
            os.makedirs(directory, exist_ok=True)
            self.brokers[i] = KafkaBroker(overrides=props, data_dir=os.path.join(directory, "kafka-logs"),
                                          log_path=os.path.join(directory, "broker.log"),
                                          start_timeout=start_timeout, fork_server=fork_server,
                                          listeners=listeners)
        self._share_pki()

    def _share_pki(self):
        """SSL listeners: one throwaway CA for the whole cluster, so brokers trust each other
        (inter-broker TLS) and a client trusts every broker; each broker's key store holds a
        certificate good for server and client auth."""
        if not any(b._needs_pki() for b in self.brokers.values()):
            return
        import attr

        from kafkatw.tls_certs import make_test_pki

        pki = make_test_pki(os.path.join(self.work_dir, "pki"))
        pki = attr.evolve(pki, server_keystore=pki.broker_keystore)
        for b in self.brokers.values():
            b.pki = pki
            b.ssl_ca_path = pki.ca_cert
            b.ssl_client_cert_path = pki.client_cert
            b.ssl_client_key_path = pki.client_key

    @property
    def zookeeper_connect(self):
        return self.zookeeper.connect + (self.chroot or "")

    def broker(self, broker_id):
        return self.brokers[broker_id]

    def start(self):
        """Start ZooKeeper and every broker not running, wait until they all agree on the
        brokers, create the topics. If that fails, every process is stopped (the work folder
        stays with ``keep_data``) and the error raised."""
        try:
            if not self.zookeeper.running:
                self.zookeeper.start()
            for b in self.brokers.values():
                b.overrides["zookeeper.connect"] = self.zookeeper_connect
                if not b.running:
                    b.start()
            self.wait_for_brokers(sorted(self.brokers))
            if self.topics:
                b = self.running_broker()
                create_topics(*b._main_address(), self.topics, timeout=self.start_timeout,
                              ssl_context=b.main_ssl_context(), sasl=b.main_sasl())
        except BaseException:
            for b in self.brokers.values():
                b.kill()
            self.zookeeper.kill()
            raise
        return self

    def running_broker(self):
        for b in self.brokers.values():
            if b.running:
                return b
        raise RuntimeError("no broker is running")

    @property
    def bootstrap_servers(self):
        return ",".join(b.bootstrap_servers for b in self.brokers.values() if b.running)

    def metadata(self, broker_id=None, topics=None):
        """:func:`cluster_metadata` from ``broker_id`` (the first running broker by default)."""
        b = self.brokers[broker_id] if broker_id is not None else self.running_broker()
        host, port = b._main_address()
        return cluster_metadata(host, port, topics, ssl_context=b.main_ssl_context(), sasl=b.main_sasl())

    def wait_for(self, condition, timeout=30.0, what="condition", explain=None):
        """Poll ``condition()`` (exceptions count as false) until true, at most ``timeout`` s;
        a timeout's message ends with ``explain()``'s text when given (what the cluster did)."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                value = condition()
                if value:
                    return value
                last = "last answer: %r" % (value,)
            except (OSError, ConnectionError, ValueError) as e:
                last = "last error: %s" % (e,)
            time.sleep(0.05)
        message = "timed out after %.0f s waiting for %s%s" % (timeout, what, " (%s)" % last if last else "")
        if explain is not None:
            try:
                message += "\n" + explain()
            except Exception as e:  # the story helps; the timeout is the failure, never hidden
                message += "\n(explaining it failed: %r)" % (e,)
        raise AssertionError(message)

    def state_change_log(self, lines=80, containing=()):
        """The last ``lines`` lines of every broker's log (running or not) about controllers,
        leaders and ISRs, in time order, each naming its broker: a failed wait's story. The
        logs' times are whole seconds: lines of one second keep each broker's own order.
        ``containing``: only the lines with one of these strings (a partition's name)."""
        picked = []
        for broker_id, b in sorted(self.brokers.items()):
            for line in _read_lines(b.log_path):
                if _STATE_CHANGE_LOGGERS.search(line) and (
                        not containing or any(c in line for c in containing)):
                    picked.append((line[:24], broker_id, line))
        picked.sort(key=lambda p: p[0])  # stable: a second's lines stay in their file's order
        return "\n".join("[broker %d] %s" % (broker_id, line) for _, broker_id, line in picked[-lines:])

    def wait_for_brokers(self, ids, timeout=None):
        """Until every running broker's Metadata lists exactly ``ids`` and a controller."""
        ids = sorted(ids)

        def all_agree():
            for b in self.brokers.values():
                if not b.running:
                    continue
                brokers, controller, _ = cluster_metadata(*b._main_address(), ssl_context=b.main_ssl_context(),
                                                          sasl=b.main_sasl())
                if sorted(brokers) != ids or controller not in ids:
                    return False
            return True
        self.wait_for(all_agree, timeout or self.start_timeout, "brokers %s in every broker's metadata" % ids)

    def controller_id(self):
        return self.metadata()[1]

    def close(self):
        for b in self.brokers.values():
            try:
                b.kill() if self.zookeeper.process is None else b.stop(timeout=15)
            finally:
                b.close()
        self.zookeeper.close()
        if not self.keep_data:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc):
        self.close()


_class_brokers = {}


def _stop_class_brokers():
    for broker in list(_class_brokers.values()):
        broker.close()
    _class_brokers.clear()


class KafkaBrokerMixin:
    """A trial/unittest mixin giving ``self.broker`` (a running :class:`KafkaBroker`).

    ``broker_scope = "class"`` (default) shares one broker among the tests of a class; it
    starts with the first test and stops when the test process exits (trial has no
    ``setUpClass``). ``broker_scope = "test"`` starts a fresh broker for every test and closes
    it after. ``broker_overrides`` holds broker properties, ``broker_options`` any other
    :class:`KafkaBroker` keyword (``topics``, ``listeners``, ``num_partitions``...).
    """

    broker_scope = "class"
    broker_overrides = {}
    broker_options = {}

    def _make_broker(self):
        return KafkaBroker(overrides=self.broker_overrides, **self.broker_options).start()

    def setUp(self):
        super().setUp()
        if self.broker_scope == "test":
            self.broker = self._make_broker()
            self.addCleanup(self.broker.close)
            return
        key = type(self)
        broker = _class_brokers.get(key)
        if broker is None or not broker.running:
            if broker is not None:
                broker.close()  # a test stopped it: start afresh
            _register_exit()
            broker = _class_brokers[key] = self._make_broker()
        self.broker = broker


def main(argv=None):
    """``python -m kafkatw.testing``: a throwaway broker until Ctrl-C, or ``--starts N`` timings."""
    import argparse
    import statistics

    # started in the background by a shell (``cmd &``), Python inherits SIGINT ignored and
    # keeps it so: Ctrl-C (SIGINT) would then never stop the broker
    signal.signal(signal.SIGINT, signal.default_int_handler)

    parser = argparse.ArgumentParser(prog="python -m kafkatw.testing", description=main.__doc__)
    parser.add_argument("--starts", type=int, default=0,
                        help="start and close N brokers; print the start times (to first answer)")
    parser.add_argument("--topic", action="append", default=[], help="a topic to create at start")
    parser.add_argument("--ssl", action="store_true", help="add an SSL listener")
    parser.add_argument("--sasl-user", action="append", default=[], metavar="NAME=PASSWORD",
                        help="add SASL_PLAINTEXT (and SASL_SSL with --ssl) listeners with this user "
                             "(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512); repeatable")
    parser.add_argument("--no-fork-server", action="store_true", help="run twistd directly")
    args = parser.parse_args(argv)
    listeners = ["PLAINTEXT"] + (["SSL"] if args.ssl else [])
    users = {}
    for item in args.sasl_user:
        name, sep, password = item.partition("=")
        if not sep or not name or not password:
            parser.error("--sasl-user needs NAME=PASSWORD, got %r" % (item,))
        users[name] = password
    if users:
        listeners += ["SASL_PLAINTEXT"] + (["SASL_SSL"] if args.ssl else [])
    options = {"topics": args.topic, "listeners": tuple(listeners), "sasl_users": users,
               "fork_server": not args.no_fork_server}
    if args.starts:
        _ensure_bytecode()
        if not args.no_fork_server and _fork_server() is not None:
            _fork_server().ready(timeout=60)  # time the steady state, not the helper's start
        starts = []
        began = time.monotonic()
        for _ in range(args.starts):
            broker = KafkaBroker(**options)
            t0 = time.monotonic()
            broker.start()
            starts.append(time.monotonic() - t0)
            broker.close()
        total = time.monotonic() - began
        print("%d starts: median %.3f s, min %.3f s, max %.3f s; %.1f s in all with close"
              % (len(starts), statistics.median(starts), min(starts), max(starts), total))
        return
    with KafkaBroker(**options) as broker:
        print("bootstrap.servers=%s" % broker.bootstrap_servers)
        if broker.ssl_bootstrap_servers:
            print("ssl: bootstrap.servers=%s ssl.ca.location=%s"
                  % (broker.ssl_bootstrap_servers, broker.ssl_ca_path))
        if broker.sasl_bootstrap_servers:
            print("sasl_plaintext: bootstrap.servers=%s sasl.mechanism=PLAIN|SCRAM-SHA-256|SCRAM-SHA-512 "
                  "users=%s" % (broker.sasl_bootstrap_servers, ",".join(sorted(users))))
        if broker.sasl_ssl_bootstrap_servers:
            print("sasl_ssl: bootstrap.servers=%s ssl.ca.location=%s"
                  % (broker.sasl_ssl_bootstrap_servers, broker.ssl_ca_path))
        print("log: %s (Ctrl-C stops the broker and removes its data)" % broker.log_path)
        sys.stdout.flush()
        try:
            while broker.running:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
