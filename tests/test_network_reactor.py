"""kafkatw.network.reactor: the broker's epoll reactor hands ready sockets to their readers as
Twisted's does (without the legacy log context), keeps serving the other sockets when one
fails, and is what ``twistd kafka`` runs."""

import socket

from twisted.internet.interfaces import IReadDescriptor
from twisted.python import failure
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from kafkatw.network.reactor import BrokerReactor
from kafkatw.testing import KafkaBroker


@implementer(IReadDescriptor)
class Reader:
    """One end of a socket pair as a read descriptor that records what the reactor did."""

    def __init__(self, sock, on_read=None, lost_error=None):
        self.sock = sock
        self.on_read = on_read
        self.lost_error = lost_error
        self.reads = []
        self.lost = []

    def fileno(self):
        return self.sock.fileno()

    def logPrefix(self):
        return "Reader"

    def doRead(self):
        self.reads.append(self.sock.recv(100))
        if self.on_read is not None:
            return self.on_read()

    def connectionLost(self, reason):
        self.lost.append(reason)
        if self.lost_error is not None:
            raise self.lost_error


class BrokerReactorTests(SynchronousTestCase):
    def setUp(self):
        self.reactor = BrokerReactor()
        self.addCleanup(self._close)
        self.sockets = []

    def _close(self):
        self.reactor.removeAll()
        self.reactor.waker.connectionLost(None)
        self.reactor._poller.close()
        for s in self.sockets:
            s.close()

    def ready_reader(self, data=b"x", **kw):
        """A reader added to the reactor with ``data`` waiting on its socket."""
        ours, theirs = socket.socketpair()
        self.sockets += [ours, theirs]
        theirs.sendall(data)
        reader = Reader(ours, **kw)
        self.reactor.addReader(reader)
        return reader

    def test_ready_socket_read(self):
        reader = self.ready_reader(b"hello")
        self.reactor.doIteration(0)
        self.assertEqual(reader.reads, [b"hello"])
        self.assertEqual(reader.lost, [])
        self.assertIn(reader, self.reactor.getReaders())

    def test_idle_socket_not_read(self):
        ours, theirs = socket.socketpair()
        self.sockets += [ours, theirs]
        reader = Reader(ours)
        self.reactor.addReader(reader)
        self.reactor.doIteration(0)
        self.assertEqual(reader.reads, [])

    def test_failing_read_disconnects_that_reader_only(self):
        def fail():
            raise ValueError("bad frame")

        bad = self.ready_reader(on_read=fail)
        good = self.ready_reader(b"ok")
        self.reactor.doIteration(0)
        self.assertEqual(good.reads, [b"ok"])
        self.assertEqual(good.lost, [])
        self.assertEqual(len(bad.lost), 1)
        self.assertIsInstance(bad.lost[0], failure.Failure)
        self.assertIsInstance(bad.lost[0].value, ValueError)
        self.assertNotIn(bad, self.reactor.getReaders())
        self.assertIn(good, self.reactor.getReaders())
        self.assertEqual(len(self.flushLoggedErrors(ValueError)), 1)

    def test_error_escaping_dispatch_is_logged_and_the_loop_goes_on(self):
        """A connectionLost that raises escapes ``_doReadOrWrite``: logged, as
        ``callWithLogger`` did, and the other ready socket of the same poll is still read."""
        bad = self.ready_reader(on_read=lambda: ConnectionResetError("gone"),
                                lost_error=RuntimeError("connectionLost failed"))
        good = self.ready_reader(b"ok")
        self.reactor.doIteration(0)
        self.assertEqual(len(bad.lost), 1)
        self.assertEqual(good.reads, [b"ok"])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_reader_removed_by_an_earlier_one_in_the_same_poll_is_skipped(self):
        readers = []

        def remove_the_other():
            other = readers[1] if readers[0].reads else readers[0]
            self.reactor.removeReader(other)
            self.sockets.remove(other.sock)
            other.sock.close()

        readers.append(self.ready_reader(b"a", on_read=remove_the_other))
        readers.append(self.ready_reader(b"b", on_read=remove_the_other))
        self.reactor.doIteration(0)
        self.assertEqual(sum(len(r.reads) for r in readers), 1)
        self.assertEqual(self.flushLoggedErrors(), [])


class InstalledTests(SynchronousTestCase):
    def test_twistd_kafka_runs_the_broker_reactor(self):
        """As ``twistd -n kafka`` starts it, from the fork server and as a plain process."""
        for fork_server in (True, False):
            broker = KafkaBroker(fork_server=fork_server)
            broker.start()
            try:
                with open(broker.log_path) as f:
                    lines = [line for line in f if "reactor class:" in line]
            finally:
                broker.close()
            self.assertEqual(len(lines), 1, lines)
            self.assertIn("reactor class: kafkatw.network.reactor.BrokerReactor.", lines[0])


class SignalTests(SynchronousTestCase):
    def test_a_second_sigterm_while_stopping_is_ignored(self):
        """Two SIGTERMs before the reactor runs the first one's stop, and a SIGINT after it:
        one shutdown, no ReactorNotRunning in the log (Twisted's handler stops again)."""
        import signal

        reactor = BrokerReactor()
        ran = []

        def signals():
            reactor.sigTerm(signal.SIGTERM)
            reactor.sigTerm(signal.SIGTERM)
            reactor.addSystemEventTrigger("during", "shutdown", lambda: reactor.sigInt(signal.SIGINT))
            ran.append(True)

        reactor.callWhenRunning(signals)
        reactor.callLater(30, reactor.stop)  # (a bound, if the signals stopped nothing)
        reactor.run(installSignalHandlers=False)
        self.assertEqual(ran, [True])
        self.assertEqual(self.flushLoggedErrors(), [])
        self.assertEqual(reactor._exitSignal, signal.SIGINT)
