"""``twistd kafka``: command-line options and the top of the service tree.

Owns option parsing (``--config FILE``, repeatable ``--override key=value``), loading the
configuration and turning a configuration error into one line on stderr. The wiring of the
broker itself belongs to :func:`kafkatw.service.make_broker_service`.
"""

import sys

from twisted.application import service
from twisted.python import usage

from kafkatw.config import ConfigError, KafkaConfig, parse_override

#: Exit status when the configuration is invalid.
CONFIG_ERROR_EXIT = 2
#: Security protocols whose listeners speak TLS.
TLS_PROTOCOLS = ("SSL", "SASL_SSL")


class Options(usage.Options):
    synopsis = "[--config FILE] [--override key=value ...]"
    longdesc = (
        "Run a kafkatw broker. Properties use Apache Kafka's names (server.properties syntax); "
        "without --config the built-in defaults are used (PLAINTEXT on 127.0.0.1:9092)."
    )
    optParameters = [
        ["config", "c", None,
         "Broker properties file (Java .properties syntax, Kafka's property names)."],
    ]

    def __init__(self):
        usage.Options.__init__(self)
        self["overrides"] = []

    def opt_override(self, value):
        """Set a broker property, overriding the config file (key=value; repeatable)."""
        try:
            self["overrides"].append(parse_override(value))
        except ConfigError as e:
            raise usage.UsageError(str(e))

    def load_config(self):
        """The validated :class:`KafkaConfig` (raises :class:`ConfigError`)."""
        return KafkaConfig.from_file(self["config"], overrides=self["overrides"])


def _fail(message, stderr=None):
    stream = stderr if stderr is not None else sys.stderr
    stream.write("kafkatw: %s\n" % (message,))
    stream.flush()
    raise SystemExit(CONFIG_ERROR_EXIT)


#: Twisted modules that import pyOpenSSL when first imported, TLS used or not.
TLS_PROBING_MODULES = ("twisted.internet.posixbase", "twisted.internet.tcp", "twisted.internet.endpoints")


def import_twisted_tcp_without_tls():
    """First-import Twisted's TCP, reactor base and endpoint modules with pyOpenSSL unimportable.

    ``twisted.internet.tcp`` (startTLS), ``twisted.internet.posixbase`` (listenSSL) and
    ``twisted.internet.endpoints`` (``ssl:`` endpoints) try to import pyOpenSSL when they are
    first imported, TLS used or not, which loads pyOpenSSL and cryptography (~12 MB RSS,
    ~0.1 s). Imported while ``sys.modules["OpenSSL"]`` is None (an import of it then fails),
    they take their own ``except ImportError`` branch: TCP transports without startTLS and no
    ``ssl:`` endpoint strings, neither of which the broker uses (its listeners are ``tcp:``).
    OpenSSL stays importable afterwards; SSL listeners wrap their factory in TLS themselves
    (``SocketServer.listen``). Does nothing when one of those modules or pyOpenSSL is loaded
    already (``--reactor``, a fork server, trial).
    """
    loaded = sys.modules
    if "OpenSSL" in loaded or any(name in loaded for name in TLS_PROBING_MODULES):
        return
    loaded["OpenSSL"] = None
    try:
        import twisted.internet.endpoints  # noqa: F401
        import twisted.internet.posixbase  # noqa: F401
        import twisted.internet.tcp  # noqa: F401
    finally:
        if loaded.get("OpenSSL", False) is None:
            del loaded["OpenSSL"]


def install_broker_reactor():
    """Install ``kafkatw.network.reactor.BrokerReactor`` unless a reactor is installed already
    (``twistd --reactor NAME``, trial). After :func:`import_twisted_tcp_without_tls`: the
    reactor's modules are the ones that function imports first."""
    if "twisted.internet.reactor" in sys.modules:
        return
    from kafkatw.network import reactor

    reactor.install()


def makeService(options, stderr=None):
    """Load the configuration and build the broker's service tree.

    A bad configuration writes one line to stderr and exits with status 2; no traceback.
    twistd calls this before it imports the reactor: without an SSL listener, the reactor
    comes without pyOpenSSL (:func:`import_twisted_tcp_without_tls`), and it is the broker's
    (:func:`install_broker_reactor`) unless ``--reactor`` named one.
    """
    try:
        config = options.load_config()
    except ConfigError as e:
        _fail(e, stderr)
    if not any(ep.security_protocol in TLS_PROTOCOLS for ep in config.listeners):
        import_twisted_tcp_without_tls()
    install_broker_reactor()
    from kafkatw import service as broker_service  # imported late: nothing runs at import time

    try:
        broker = broker_service.make_broker_service(config)
    except ConfigError as e:
        _fail(e, stderr)
    top = KafkaService(stderr)
    broker.setServiceParent(top)
    return top


class KafkaService(service.MultiService):
    """The top of ``twistd kafka``'s tree: a configuration error met while starting (a log dir
    that cannot be written) is one line on stderr and exit status 2, as one met while building.
    The broker has stopped what it had started by then."""

    def __init__(self, stderr=None):
        super().__init__()
        self.stderr = stderr

    def startService(self):
        try:
            super().startService()
        except ConfigError as e:
            # twistd has redirected sys.stderr into its log by now; the line goes to the real one
            _fail(e, self.stderr if self.stderr is not None else sys.__stderr__)
