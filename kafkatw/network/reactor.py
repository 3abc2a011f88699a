"""The broker's reactor: Twisted's epoll reactor, handing a ready socket to its connection
without the legacy log context.

Twisted's ``EPollReactor.doPoll`` runs each ready socket's read or write through
``twisted.python.log.callWithLogger``: the selectable's ``logPrefix()``, a copied context dict
and two nested ``context.call``s, so that a ``twisted.python.log.msg`` made inside names the
connection. The broker logs through ``twisted.logger``, which does not read that context, and
the cost is the same for every request: 9 Python calls, ~18k instructions, about 5% of a
one-message Produce (docs/performance.md, "the reactor's share"). This reactor calls
``_doReadOrWrite`` directly. The wrapper also logged an exception that escaped
``_doReadOrWrite`` and went on with the next ready socket; that is kept.

A second SIGTERM or SIGINT during shutdown (a supervisor's repeat; the test fork server's
``PR_SET_PDEATHSIG`` after a close already stopped the broker) is ignored, as a JVM ignores
one while its shutdown hook runs: Twisted's handler calls ``stop()`` again, which raises
``ReactorNotRunning`` into the log as an unhandled error.

``twistd kafka`` installs it when no reactor is installed yet (``kafkatw.tap.makeService``,
which twistd runs before it imports one); ``twistd --reactor epoll kafka`` keeps Twisted's.
"""

import errno

from twisted.internet.epollreactor import EPollReactor
from twisted.logger import Logger

_log = Logger()


class BrokerReactor(EPollReactor):
    """``EPollReactor`` with a leaner :meth:`doPoll`; everything else is Twisted's."""

    def doPoll(self, timeout):
        if timeout is None:
            timeout = -1  # wait indefinitely
        try:
            ready = self._poller.poll(timeout, len(self._selectables))
        except OSError as err:
            if err.errno == errno.EINTR:
                return
            raise
        selectables = self._selectables
        dispatch = self._doReadOrWrite
        for fd, event in ready:
            selectable = selectables.get(fd)
            if selectable is None:  # removed by an earlier socket's callbacks in this batch
                continue
            try:
                dispatch(selectable, fd, event)
            except KeyboardInterrupt:
                raise
            except BaseException:
                # (what callWithLogger did: _doReadOrWrite catches a read's or write's errors
                # itself, so this is a connectionLost that raised)
                _log.failure("Unhandled error on {selectable!r}", selectable=selectable)

    doIteration = doPoll

    def sigTerm(self, number, frame=None):
        self._stop_on_signal("SIGTERM", number)

    def sigInt(self, number, frame=None):
        self._stop_on_signal("SIGINT", number)

    def _stop_on_signal(self, name, number):
        # (Twisted's sigTerm/sigInt, but the stop is checked when it runs: two signals may
        # arrive before the reactor runs the first one's stop)
        _log.info("Received {signal}, shutting down.", signal=name)
        self.callFromThread(self._stop_unless_stopping)
        self._exitSignal = number

    def _stop_unless_stopping(self):
        if not self._stopped:
            self.stop()


def install():
    """Install a :class:`BrokerReactor` as the global reactor (as Twisted's ``epollreactor.install``)."""
    from twisted.internet.main import installReactor

    reactor = BrokerReactor()
    installReactor(reactor)
    return reactor
