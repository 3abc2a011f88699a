"""The coordination store on ZooKeeper (``zookeeper.connect``), through kazoo: Kafka's
KafkaZkClient operations over Kafka's znode layout (``cluster.zk_layout``).

It never blocks the reactor: requests use kazoo's asynchronous calls (connecting and recursive
deletes run in the broker's thread pool), and every completion, watch and session-state change
comes back with ``callFromThread``. It keeps no cluster state of its own: the controller and the
broker's metadata decide what to read and write.
"""

import attr
from twisted.internet import defer, task
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from kafkatw.cluster import zk_layout as L
from kafkatw.cluster.interfaces import ControllerMovedError, IClusterCoordinator
from kafkatw.config import ConfigError
from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError

#: seconds between sends of a request whose connection dropped before its answer
RETRY_S = 0.1

log = Logger(namespace="kafkatw.cluster.zk")


def parse_connect(value):
    """``host:port[,host:port][/chroot]`` -> ``(hosts, chroot or "")``; a one-line ConfigError
    naming ``zookeeper.connect`` when it is malformed."""
    if not value or not value.strip():
        raise ConfigError.invalid("zookeeper.connect", value, "host:port[,host:port][/chroot] is required")
    text = value.strip()
    hosts, slash, chroot = text.partition("/")
    chroot = ("/" + chroot.rstrip("/")) if slash else ""
    if chroot == "/":
        chroot = ""
    for part in hosts.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError.invalid("zookeeper.connect", value, "each server must be host:port")
    if "//" in chroot:
        raise ConfigError.invalid("zookeeper.connect", value, "the chroot path is malformed")
    return hosts, chroot


@implementer(IClusterCoordinator)
class ZkClusterCoordinator:
    """KafkaZkClient on kazoo. ``run_blocking(fn, *args)`` returns a Deferred of ``fn`` run in a
    thread (the broker's pool); ``client`` may be injected by tests."""

    def __init__(self, reactor, connect, session_timeout_ms=18000, connection_timeout_ms=None,
                 run_blocking=None, client=None, max_in_flight_requests=10):
        from kazoo.client import KazooClient

        self._reactor = reactor
        self._hosts, self._root = parse_connect(connect)
        self.connect = connect
        self._connection_timeout = (connection_timeout_ms or session_timeout_ms) / 1000.0
        if run_blocking is None:
            from twisted.internet import threads

            def run_blocking(fn, *args):
                return threads.deferToThread(fn, *args)
        self._run_blocking = run_blocking
        self._client = client if client is not None else KazooClient(
            hosts=self._hosts, timeout=session_timeout_ms / 1000.0)
        self._listeners = []
        self._watchers = {}  # callback -> kazoo watcher: one ZooKeeper watch per callback
        self._connection_waiters = []  # [(Deferred, timer)] of requests waiting for a connection
        # zookeeper.max.in.flight.requests: Kafka's ZooKeeperClient inFlightRequests semaphore
        self._in_flight = defer.DeferredSemaphore(max_in_flight_requests)
        self._client.add_listener(self._kazoo_state)

    @classmethod
    def from_config(cls, reactor, config, run_blocking=None):
        return cls(reactor, config["zookeeper.connect"], config["zookeeper.session.timeout.ms"],
                   config["zookeeper.connection.timeout.ms"], run_blocking=run_blocking,
                   max_in_flight_requests=config["zookeeper.max.in.flight.requests"])

    # -- plumbing ------------------------------------------------------------------------------

    def _p(self, path):
        return self._root + path

    def _kazoo_state(self, state):
        """kazoo's thread: hop to the reactor (and never block kazoo's event thread)."""
        self._reactor.callFromThread(self._state_changed, str(state))
        return False

    def _state_changed(self, state):
        if state == "CONNECTED":
            waiters, self._connection_waiters = self._connection_waiters, []
            for waiting, timer in waiters:
                if timer.active():
                    timer.cancel()
                waiting.callback(None)
        for listener in list(self._listeners):
            try:
                listener(state)
            except Exception:
                log.failure("ZooKeeper state listener failed on {state}", state=state)

    def _watch(self, callback):
        if callback is None:
            return None
        fired = self._watchers.get(callback)
        if fired is None:
            def fired(event):  # kazoo's event thread
                self._reactor.callFromThread(callback)
            self._watchers[callback] = fired
        return fired

    def _run(self, call):
        """``call()`` (a kazoo ``*_async`` call) once the session is connected, as a Deferred: while
        kazoo reconnects it refuses requests, so they wait (at most the connection timeout), as
        Kafka's ZooKeeperClient waits until connected. At most ``max_in_flight_requests`` are
        sent and unanswered at once; the rest queue here."""
        def send(_=None):
            return self._in_flight.run(lambda: self._deferred(call()))
        if self._client.connected:
            return send()
        waiting = defer.Deferred()
        timer = self._reactor.callLater(self._connection_timeout, self._not_connected, waiting)
        self._connection_waiters.append((waiting, timer))
        return waiting.addCallback(send)

    @defer.inlineCallbacks
    def _request(self, call, applied=None):
        """``_run(call)``, sent again when the connection drops before its answer (kazoo's
        ConnectionLoss; the session lives on and kazoo reconnects), as Kafka's ZooKeeperClient
        retries every request until connected; for at most the connection timeout. A lost read
        failed the controller event that made it; a lost registration left a broker out of the
        cluster.

        A write whose answer was lost may have been applied, and its resend then meets its own
        effect (NodeExists, BadVersion, NoNode). ``applied(outcome)`` decides on the resend's
        outcome (its result or its Failure) for such a write: it gives what the write answers
        when it applied (a first send that applied it) or the outcome as it is (a conflict),
        as the checker of Kafka's conditionalUpdatePath. Without it the resend's outcome stands:
        right for reads and for writes that may be done twice."""
        from kazoo.exceptions import ConnectionLoss

        deadline = self._reactor.seconds() + self._connection_timeout
        lost = False
        while True:
            try:
                result = yield self._run(call)
            except ConnectionLoss:
                if self._reactor.seconds() >= deadline:
                    raise
                lost = True
                yield task.deferLater(self._reactor, RETRY_S, lambda: None)
                continue
            except Exception:
                if not (lost and applied is not None):
                    raise
                result = Failure()
            if lost and applied is not None:
                result = yield defer.maybeDeferred(applied, result)
            return result

    def _holds(self, path, data, answer):
        """An ``applied`` check for a write that leaves ``path`` holding ``data``: when its
        resend fails (NodeExists, BadVersion), the node read back with exactly those bytes was
        written by the lost send; ``answer(stat)`` is then what the write answers."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        @defer.inlineCallbacks
        def applied(outcome):
            if isinstance(outcome, Failure) and outcome.check(BadVersionError, NodeExistsError):
                try:
                    now, stat = yield self._request(lambda: self._client.get_async(path))
                except NoNodeError:
                    now = None
                if now == data:
                    return answer(stat)
            if isinstance(outcome, Failure):
                outcome.raiseException()
            return outcome
        return applied

    @staticmethod
    def _gone(answer):
        """An ``applied`` check for a delete: NoNode on its resend after a lost answer means the
        node is gone as the delete wanted (by its first send); ``answer`` is then the result."""
        from kazoo.exceptions import NoNodeError

        def applied(outcome):
            if isinstance(outcome, Failure) and outcome.check(NoNodeError):
                return answer
            return outcome
        return applied

    def _notify(self, prefix, data):
        """A sequential znode ``prefix<n>`` (Kafka's createSequentialPersistentPath). A resend
        after a lost answer may add a second one, harmless as in Kafka, which resends it the
        same way: a change notification only makes brokers read the entity again, and the
        controller takes log dir events as a set of brokers."""
        return self._request(lambda: self._client.create_async(self._p(prefix), data, sequence=True, makepath=True))

    def _session_id(self):
        """The session's id, the ephemeralOwner of the znodes it creates (kazoo's; it keeps it
        while it reconnects, when ``client_id`` is None)."""
        return self._client._session_id

    def _not_connected(self, waiting):
        self._connection_waiters = [(d, t) for d, t in self._connection_waiters if d is not waiting]
        waiting.errback(KafkaError(errors.UNKNOWN_SERVER_ERROR,
                                   "not connected to ZooKeeper at %s" % (self.connect,)))

    def _deferred(self, async_result):
        """A Deferred fired on the reactor with a kazoo IAsyncResult's value or exception."""
        d = defer.Deferred()

        def done(result):  # kazoo's thread (or this one if already done)
            try:
                value = result.get_nowait()
            except Exception as e:
                failure = Failure(e)
                self._reactor.callFromThread(d.errback, failure)
            else:
                self._reactor.callFromThread(d.callback, value)
        async_result.rawlink(done)
        return d

    # -- session -------------------------------------------------------------------------------

    def add_state_listener(self, listener):
        self._listeners.append(listener)

    def start(self):
        client, root, timeout = self._client, self._root, self._connection_timeout

        def connect():
            from kazoo.handlers.threading import KazooTimeoutError
            from kazoo.retry import KazooRetry

            try:
                client.start(timeout=timeout)
            except KazooTimeoutError:
                client.stop()
                raise ConfigError("cannot connect to ZooKeeper at %s within %d ms"
                                  % (self.connect, int(timeout * 1000)), "zookeeper.connect") from None

            def make_paths():
                if root:
                    client.ensure_path(root)  # Kafka creates a missing chroot
                for path in L.PERSISTENT_PATHS:
                    client.ensure_path(root + path)

            # the paths are made again if the connection drops or the new session expires
            # meanwhile (kazoo reconnects), within the connection timeout for them all (a
            # KazooRetry's deadline starts again at each call): a busy machine and a short
            # session timeout made a broker's start fail on a SessionExpiredError here
            KazooRetry(max_tries=-1, deadline=timeout, ignore_expire=True)(make_paths)
        return self._run_blocking(connect)

    def stop(self):
        client = self._client

        def close():
            client.stop()
            client.close()
        return self._run_blocking(close)

    # -- cluster id, brokers ---------------------------------------------------------------------

    @defer.inlineCallbacks
    def get_or_create_cluster_id(self, proposed):
        from kazoo.exceptions import NodeExistsError, NoNodeError

        try:
            data, _ = yield self._request(lambda: self._client.get_async(self._p(L.CLUSTER_ID)))
            return L.decode_cluster_id(data)
        except NoNodeError:
            pass
        try:
            yield self._request(lambda: self._client.create_async(
                self._p(L.CLUSTER_ID), L.encode_cluster_id(proposed), makepath=True))
            return proposed
        except NodeExistsError:
            data, _ = yield self._request(lambda: self._client.get_async(self._p(L.CLUSTER_ID)))
            return L.decode_cluster_id(data)

    @defer.inlineCallbacks
    def register_broker(self, broker_id, data):
        """Kafka's checkedEphemeralCreate: a node already there that this session owns is this
        registration (a create whose answer was lost and was sent again), and its czxid the
        broker epoch; another session's node is an error."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        path = self._p(L.broker_path(broker_id))
        while True:
            try:
                _, stat = yield self._request(lambda: self._client.create_async(
                    path, data, ephemeral=True, makepath=True, include_data=True))
                return stat.czxid
            except NodeExistsError:
                pass
            try:
                _, stat = yield self._request(lambda: self._client.get_async(path))
            except NoNodeError:
                continue  # gone while read (its session ended): create it again
            if stat.ephemeralOwner == self._session_id():
                return stat.czxid
            raise KafkaError(errors.BROKER_ID_NOT_REGISTERED,
                             "Error while creating ephemeral at %s, node already exists and owner '0x%x' does "
                             "not match current session '0x%x'"
                             % (L.broker_path(broker_id), stat.ephemeralOwner, self._session_id()))

    @defer.inlineCallbacks
    def broker_ids(self, watch=None):
        children = yield self._request(lambda: self._client.get_children_async(
            self._p(L.BROKER_IDS), watch=self._watch(watch)))
        return sorted(int(c) for c in children if c.isdigit())

    @defer.inlineCallbacks
    def get_broker(self, broker_id):
        from kazoo.exceptions import NoNodeError

        try:
            data, stat = yield self._request(lambda: self._client.get_async(self._p(L.broker_path(broker_id))))
        except NoNodeError:
            return None
        return L.decode_broker(broker_id, data, stat.czxid)

    # -- controller ---------------------------------------------------------------------------------

    @defer.inlineCallbacks
    def get_controller_id(self, watch=None):
        from kazoo.exceptions import NoNodeError

        stat = yield self._request(lambda: self._client.exists_async(self._p(L.CONTROLLER), watch=self._watch(watch)))
        if stat is None:
            return -1
        try:
            data, _ = yield self._request(lambda: self._client.get_async(self._p(L.CONTROLLER)))
        except NoNodeError:
            return -1
        return L.decode_controller(data)

    @defer.inlineCallbacks
    def elect_controller(self, broker_id):
        """Kafka's registerControllerAndIncrementControllerEpoch: read the epoch (creating it at
        0), then create ``/controller`` and bump the epoch conditionally, in one multi. When the
        multi fails, Kafka's checkControllerAndEpoch: a ``/controller`` of this session with
        the epoch this multi wrote means a lost answer's first send made this broker controller."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        client = self._client
        try:
            data, stat = yield self._request(lambda: client.get_async(self._p(L.CONTROLLER_EPOCH)))
            epoch, version = L.decode_controller_epoch(data), stat.version
        except NoNodeError:
            try:
                yield self._request(lambda: client.create_async(self._p(L.CONTROLLER_EPOCH),
                                                                L.encode_controller_epoch(0)))
            except NodeExistsError:
                pass  # another broker's, or this one's whose answer was lost
            data, stat = yield self._request(lambda: client.get_async(self._p(L.CONTROLLER_EPOCH)))
            epoch, version = L.decode_controller_epoch(data), stat.version

        def multi():  # a kazoo transaction is committed once: a resend needs a new one
            txn = client.transaction()
            txn.create(self._p(L.CONTROLLER), L.encode_controller(broker_id), ephemeral=True)
            txn.set_data(self._p(L.CONTROLLER_EPOCH), L.encode_controller_epoch(epoch + 1), version=version)
            return txn.commit_async()
        results = yield self._request(multi)
        if not any(isinstance(r, Exception) for r in results):
            return epoch + 1, results[1].version
        try:
            data, stat = yield self._request(lambda: client.get_async(self._p(L.CONTROLLER)))
        except NoNodeError:
            return None
        if stat.ephemeralOwner != self._session_id() or L.decode_controller(data) != broker_id:
            return None  # another broker registered first, or bumped the epoch in between
        data, stat = yield self._request(lambda: client.get_async(self._p(L.CONTROLLER_EPOCH)))
        if L.decode_controller_epoch(data) != epoch + 1:
            return None
        return epoch + 1, stat.version

    @defer.inlineCallbacks
    def resign_controller(self, broker_id):
        """Delete ``/controller`` if it names this broker, behind the controller epoch check as
        Kafka's deleteController. The epoch's zkVersion is read before ``/controller``: a node
        of this broker read after it is of that epoch. A fresh ``/controller`` is always version
        0, so its version alone let a delete resent after a lost answer remove the node of the
        broker elected meanwhile; that election moved the epoch, and the check fails."""
        from kazoo.exceptions import NoNodeError

        epoch = yield self._request(lambda: self._client.exists_async(self._p(L.CONTROLLER_EPOCH)))
        try:
            data, stat = yield self._request(lambda: self._client.get_async(self._p(L.CONTROLLER)))
        except NoNodeError:
            return
        if L.decode_controller(data) == broker_id:
            try:
                if epoch is None:  # no election ever bumped it: nothing to fence against
                    yield self._request(lambda: self._client.delete_async(self._p(L.CONTROLLER),
                                                                          version=stat.version))
                else:
                    yield self._controller_multi(epoch.version, lambda txn: txn.delete(
                        self._p(L.CONTROLLER), version=stat.version))
            except Exception:
                pass  # gone (also by a resent delete's lost first send), replaced, or the epoch moved

    def _check_epoch(self, txn, epoch_zk_version):
        txn.check(self._p(L.CONTROLLER_EPOCH), epoch_zk_version)

    @defer.inlineCallbacks
    def _controller_multi(self, epoch_zk_version, add_ops, applied=None):
        """One multi: the controller epoch check then ``add_ops(txn)``; the results of the
        ops after the check. ControllerMovedError when the check fails, also on a resend after
        a lost answer (whatever the first send did, this controller is deposed). When only an
        op failed on such a resend, ``applied(error)`` decides: the ops' results if the first
        send applied them, else it raises (given the error as a Failure: ``_holds`` fits)."""
        from kazoo.exceptions import BadVersionError, RolledBackError

        def multi():  # a kazoo transaction is committed once: a resend needs a new one
            txn = self._client.transaction()
            self._check_epoch(txn, epoch_zk_version)
            add_ops(txn)
            return txn.commit_async()

        def first_error(results):
            return next((r for r in results[1:] if isinstance(r, Exception) and not isinstance(r, RolledBackError)),
                        None)

        def resent(results):
            if isinstance(results, Failure) or isinstance(results[0], BadVersionError):
                return results
            error = first_error(results)
            if error is None:
                return results
            return defer.maybeDeferred(applied, Failure(error)).addCallback(lambda ops: [True] + list(ops))
        results = yield self._request(multi, None if applied is None else resent)
        if isinstance(results[0], BadVersionError):
            raise ControllerMovedError("controller epoch zkVersion %d is no longer current" % epoch_zk_version)
        error = first_error(results)
        if error is not None:
            raise error
        return results[1:]

    # -- topics -------------------------------------------------------------------------------------

    @defer.inlineCallbacks
    def topics(self, watch=None):
        children = yield self._request(lambda: self._client.get_children_async(
            self._p(L.TOPICS), watch=self._watch(watch)))
        return sorted(children)

    @defer.inlineCallbacks
    def topic_assignment(self, topic, watch=None):
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = yield self._request(lambda: self._client.get_async(
                self._p(L.topic_path(topic)), watch=self._watch(watch)))
        except NoNodeError:
            return None
        return L.decode_topic_assignment(data)

    @defer.inlineCallbacks
    def topic_full_assignment(self, topic, watch=None):
        """``(topic_id, {partition: [replicas]}, {partition: [adding]}, {partition: [removing]})``
        of a topic znode (KIP-455's reassignment state), or None."""
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = yield self._request(lambda: self._client.get_async(
                self._p(L.topic_path(topic)), watch=self._watch(watch)))
        except NoNodeError:
            return None
        topic_id, assignment = L.decode_topic_assignment(data)
        adding, removing = L.decode_topic_reassignments(data)
        return topic_id, assignment, adding, removing

    def set_topic_assignment(self, epoch_zk_version, topic, topic_id, assignment, adding, removing):
        """The controller rewrites a topic's assignment (a reassignment's steps), behind the
        controller epoch check."""
        data = L.encode_topic_assignment(topic_id, assignment, adding, removing)
        return self._controller_multi(epoch_zk_version, lambda txn: txn.set_data(
            self._p(L.topic_path(topic)), data))

    @defer.inlineCallbacks
    def reassign_partitions(self, watch=None):
        """``{(topic, partition): [target replicas]}`` of ``/admin/reassign_partitions`` (empty
        when absent), watching for its creation or change."""
        from kazoo.exceptions import NoNodeError

        path = self._p(L.REASSIGN_PARTITIONS)
        stat = yield self._request(lambda: self._client.exists_async(path, watch=self._watch(watch)))
        if stat is None:
            return {}
        try:
            data, _ = yield self._request(lambda: self._client.get_async(path))
        except NoNodeError:
            return {}
        try:
            return L.decode_reassign_partitions(data)
        except (ValueError, KeyError, TypeError):
            return {}

    @defer.inlineCallbacks
    def set_reassign_partitions(self, epoch_zk_version, targets):
        """The controller's rewrite of ``/admin/reassign_partitions``: deleted when empty."""
        from kazoo.exceptions import NoNodeError

        path = self._p(L.REASSIGN_PARTITIONS)
        try:
            if targets:
                data = L.encode_reassign_partitions(targets)
                yield self._controller_multi(epoch_zk_version, lambda txn: txn.set_data(path, data))
            else:
                yield self._controller_multi(epoch_zk_version, lambda txn: txn.delete(path))
        except NoNodeError:
            pass

    def request_reassignment(self, targets):
        """Create ``/admin/reassign_partitions`` (a tool's request, as Kafka's old
        ``--zookeeper`` path); NodeExistsError while one is pending."""
        path, data = self._p(L.REASSIGN_PARTITIONS), L.encode_reassign_partitions(targets)
        return self._request(lambda: self._client.create_async(path, data, makepath=True),
                             self._holds(path, data, lambda stat: path))

    @defer.inlineCallbacks
    def create_topic(self, topic, topic_id, assignment, configs):
        from kazoo.exceptions import NodeExistsError

        client = self._client
        if (yield self._request(lambda: client.exists_async(self._p(L.delete_topic_path(topic))))) is not None:
            # its deletion waits for a broker: nothing of it may be overwritten (AdminZkClient)
            raise KafkaError(errors.TOPIC_ALREADY_EXISTS, 'Topic "%s" is marked for deletion.' % (topic,))
        # Kafka's AdminZkClient: the config first (brokers read it when the topic appears)
        try:
            yield self._set_or_create(L.topic_config_path(topic), L.encode_entity_config(configs or {}))
            # a lost answer's resend meets the node: the topic id in it tells whether it is this one
            path, data = self._p(L.topic_path(topic)), L.encode_topic_assignment(topic_id, assignment)
            yield self._request(lambda: client.create_async(path, data, makepath=True),
                                self._holds(path, data, lambda stat: path))
        except NodeExistsError:
            raise KafkaError(errors.TOPIC_ALREADY_EXISTS, "Topic '%s' already exists." % (topic,)) from None

    @defer.inlineCallbacks
    def add_partitions(self, topic, topic_id, assignment):
        """The new partitions' assignment; a reassignment running in the topic keeps its adding
        and removing replicas (the write is conditional on the version read)."""
        path = self._p(L.topic_path(topic))
        data, stat = yield self._request(lambda: self._client.get_async(path))
        adding, removing = L.decode_topic_reassignments(data)
        data = L.encode_topic_assignment(topic_id, assignment, adding, removing)
        yield self._request(lambda: self._client.set_async(path, data, version=stat.version),
                            self._holds(path, data, lambda stat: stat))

    @defer.inlineCallbacks
    def _set_or_create(self, path, data):
        """Unconditional writes: a resend after a lost answer writes the same again."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        try:
            yield self._request(lambda: self._client.set_async(self._p(path), data))
        except NoNodeError:
            try:
                yield self._request(lambda: self._client.create_async(self._p(path), data, makepath=True))
            except NodeExistsError:
                yield self._request(lambda: self._client.set_async(self._p(path), data))

    @defer.inlineCallbacks
    def partition_states(self, topic, partitions):
        from kazoo.exceptions import NoNodeError

        pending = [(p, self._request(lambda p=p: self._client.get_async(self._p(L.partition_state_path(topic, p)))))
                   for p in partitions]
        out = {}
        for p, d in pending:
            try:
                data, stat = yield d
            except NoNodeError:
                continue
            out[p] = L.decode_partition_state(data, stat.version)
        return out

    @defer.inlineCallbacks
    def create_partition_states(self, epoch_zk_version, topic, states):
        """One multi per partition (Kafka's createTopicPartitionStatesRaw): the partition znode
        and its state, each behind the controller epoch check."""
        client = self._client
        yield self._request(lambda: client.ensure_path_async(self._p(L.partitions_path(topic))))
        pending = {}
        for p, state in states.items():
            path, data = self._p(L.partition_state_path(topic, p)), L.encode_partition_state(state)

            def ops(txn, p=p, path=path, data=data):
                txn.create(self._p(L.partition_path(topic, p)), b"")
                txn.create(path, data)
            # a resend after a lost answer meets the znodes: they are this write's if the state holds its bytes
            pending[p] = self._controller_multi(epoch_zk_version, ops,
                                                self._holds(path, data, lambda stat, path=path: [path, path]))
        out = {}
        for p, d in pending.items():
            try:
                yield d
                out[p] = attr.evolve(states[p], partition_epoch=0)
            except Exception:
                out[p] = Failure()
        return out

    @defer.inlineCallbacks
    def update_partition_states(self, epoch_zk_version, topic, states):
        pending = {}
        for p, state in states.items():
            path, data = self._p(L.partition_state_path(topic, p)), L.encode_partition_state(state)

            def ops(txn, path=path, data=data, version=state.partition_epoch):
                txn.set_data(path, data, version=version)
            # Kafka's conditionalUpdatePath checker (checkLeaderAndIsrZkData): after a lost answer,
            # BadVersion with the state holding exactly this write's bytes (its leader and controller
            # epochs) is this write, applied by the first send; anything else stays a conflict
            pending[p] = self._controller_multi(epoch_zk_version, ops, self._holds(path, data, lambda stat: [stat]))
        out = {}
        for p, d in pending.items():
            try:
                results = yield d
                out[p] = attr.evolve(states[p], partition_epoch=results[0].version)
            except Exception:
                out[p] = Failure()
        return out

    # -- configs --------------------------------------------------------------------------------------

    @defer.inlineCallbacks
    def topic_configs(self, topic):
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = yield self._request(lambda: self._client.get_async(self._p(L.topic_config_path(topic))))
        except NoNodeError:
            return {}
        return L.decode_entity_config(data)

    @defer.inlineCallbacks
    def set_topic_configs(self, topic, configs):
        yield self._set_or_create(L.topic_config_path(topic), L.encode_entity_config(configs))
        yield self._notify(L.CONFIG_CHANGES + "/" + L.CONFIG_CHANGE_PREFIX, L.encode_config_change("topics", topic))

    @defer.inlineCallbacks
    def config_changes(self, watch=None, after=""):
        from kazoo.exceptions import NoNodeError

        children = yield self._request(lambda: self._client.get_children_async(
            self._p(L.CONFIG_CHANGES), watch=self._watch(watch)))
        pending = [(name, self._request(lambda name=name: self._client.get_async(
            self._p(L.CONFIG_CHANGES + "/" + name)))) for name in sorted(children) if name > after]
        out = []
        for name, d in pending:
            try:
                data, _ = yield d
            except NoNodeError:
                continue
            entity_type, entity = L.decode_config_change(data)
            out.append((name, entity_type, entity))
        return out

    def purge_config_changes(self, max_age_ms, now_ms):
        """Kafka's purgeObsoleteNotifications: delete the change notifications created more
        than ``max_age_ms`` before ``now_ms`` (oldest first, up to the first younger one): a
        Deferred of how many went. Every broker may purge; one deleted meanwhile is skipped."""
        return self._purge_notifications(L.CONFIG_CHANGES, max_age_ms, now_ms)

    @defer.inlineCallbacks
    def _purge_notifications(self, parent, max_age_ms, now_ms):
        from kazoo.exceptions import NoNodeError

        children = yield self._request(lambda: self._client.get_children_async(self._p(parent)))
        purged = 0
        for name in sorted(children):
            path = self._p(parent + "/" + name)
            stat = yield self._request(lambda path=path: self._client.exists_async(path))
            if stat is None:
                continue
            if now_ms - stat.ctime <= max_age_ms:
                break
            try:
                yield self._request(lambda path=path: self._client.delete_async(path))
                purged += 1
            except NoNodeError:
                pass
        return purged

    # -- client quota entities ----------------------------------------------------------------------

    @defer.inlineCallbacks
    def entity_configs(self, entity_path):
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = yield self._request(lambda: self._client.get_async(self._p("/config/" + entity_path)))
        except NoNodeError:
            return None
        return data

    @defer.inlineCallbacks
    def set_entity_configs(self, entity_path, data):
        yield self._set_or_create("/config/" + entity_path, data)
        entity_type, _, name = entity_path.partition("/")
        yield self._notify(L.CONFIG_CHANGES + "/" + L.CONFIG_CHANGE_PREFIX, L.encode_config_change(entity_type, name))

    @defer.inlineCallbacks
    def quota_entities(self):
        from kazoo.exceptions import NoNodeError

        @defer.inlineCallbacks
        def children(path):
            try:
                found = yield self._request(lambda: self._client.get_children_async(self._p(path)))
            except NoNodeError:
                found = []
            return sorted(found)
        paths = []
        for kind in ("clients", "ips", "users"):
            for name in (yield children("/config/" + kind)):
                paths.append("%s/%s" % (kind, name))
                if kind == "users":
                    for client in (yield children("/config/users/%s/clients" % name)):
                        paths.append("users/%s/clients/%s" % (name, client))
        out = {}
        for path in paths:
            data = yield self.entity_configs(path)
            if data:
                out[path] = data
        return out

    # -- ACLs (Kafka's ZkAclStore: a node per resource pattern, change notifications) ---------------
    # ``pattern_type`` is "LITERAL" or "PREFIXED", ``resource_type`` ZooKeeper's name ("Topic");
    # the node's JSON is the authorizer's.

    @defer.inlineCallbacks
    def acl_resources(self, pattern_type):
        """``[(resource type, name, data)]`` of every resource with an ACL node in one store."""
        from kazoo.exceptions import NoNodeError

        root = L.acl_store_path(pattern_type)
        try:
            types = yield self._request(lambda: self._client.get_children_async(self._p(root)))
        except NoNodeError:
            return []
        out = []
        for resource_type in sorted(types):
            try:
                names = yield self._request(lambda t=resource_type: self._client.get_children_async(
                    self._p("%s/%s" % (root, t))))
            except NoNodeError:
                continue
            for name in sorted(names):
                data, _ = yield self.resource_acls(pattern_type, resource_type, name)
                if data is not None:
                    out.append((resource_type, name, data))
        return out

    @defer.inlineCallbacks
    def resource_acls(self, pattern_type, resource_type, name):
        """``(data, zkVersion)`` of one resource's ACL node; ``(None, -1)`` when there is none."""
        from kazoo.exceptions import NoNodeError

        try:
            data, stat = yield self._request(lambda: self._client.get_async(
                self._p(L.acl_resource_path(pattern_type, resource_type, name))))
        except NoNodeError:
            return None, -1
        return data, stat.version

    @defer.inlineCallbacks
    def write_resource_acls(self, pattern_type, resource_type, name, data, expected_version):
        """Replace a resource's ACL node if it is still at ``expected_version`` (-1: absent), or
        delete it when ``data`` is None, then add a change notification, as Kafka's conditional
        updates: False when another broker changed it first (read it again and retry)."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        path = self._p(L.acl_resource_path(pattern_type, resource_type, name))
        try:
            # a lost answer's resend meets its own write: then the notification is still added
            # (read again, the store would look changed already and no broker would hear of it)
            if expected_version < 0:
                if data is not None:
                    yield self._request(lambda: self._client.create_async(path, data, makepath=True),
                                        self._holds(path, data, lambda stat: path))
            elif data is None:
                yield self._request(lambda: self._client.delete_async(path, version=expected_version),
                                    self._gone(True))
            else:
                yield self._request(lambda: self._client.set_async(path, data, version=expected_version),
                                    self._holds(path, data, lambda stat: stat))
        except (BadVersionError, NodeExistsError, NoNodeError):
            return False
        yield self._notify(L.acl_changes_path(pattern_type) + "/" + L.ACL_CHANGE_PREFIX,
                           L.encode_acl_change(pattern_type, resource_type, name))
        return True

    def purge_acl_changes(self, pattern_type, max_age_ms, now_ms):
        """``purge_config_changes`` for one ACL store's change notifications."""
        return self._purge_notifications(L.acl_changes_path(pattern_type), max_age_ms, now_ms)

    @defer.inlineCallbacks
    def acl_changes(self, pattern_type, watch=None, after=""):
        """``[(notification, resource type, name)]`` of the store's change notifications after
        ``after``, oldest first; ``watch()`` is called once when the next one is added."""
        from kazoo.exceptions import NoNodeError

        path = L.acl_changes_path(pattern_type)
        yield self._request(lambda: self._client.ensure_path_async(self._p(path)))
        children = yield self._request(lambda: self._client.get_children_async(self._p(path), watch=self._watch(watch)))
        out = []
        for child in sorted(c for c in children if c > after):
            try:
                data, _ = yield self._request(lambda c=child: self._client.get_async(self._p(path + "/" + c)))
            except NoNodeError:
                continue
            out.append((child,) + L.decode_acl_change(pattern_type, data))
        return out

    # -- deletion -------------------------------------------------------------------------------------

    @defer.inlineCallbacks
    def mark_topic_for_deletion(self, topic):
        from kazoo.exceptions import NodeExistsError

        try:
            yield self._request(lambda: self._client.create_async(self._p(L.delete_topic_path(topic)), b"",
                                                           makepath=True))
        except NodeExistsError:
            pass

    @defer.inlineCallbacks
    def topics_to_delete(self, watch=None):
        children = yield self._request(lambda: self._client.get_children_async(
            self._p(L.DELETE_TOPICS), watch=self._watch(watch)))
        return sorted(children)

    @defer.inlineCallbacks
    def delete_topic(self, epoch_zk_version, topic):
        """The topic's znodes in one multi behind the epoch check (a deposed controller deletes
        nothing), then its config and deletion mark."""
        from kazoo.exceptions import NoNodeError

        client, p = self._client, self._p

        @defer.inlineCallbacks
        def children(path):
            try:
                found = yield self._request(lambda: client.get_children_async(p(path)))
            except NoNodeError:
                found = None
            return found

        paths = []  # deepest first
        partitions = yield children(L.partitions_path(topic))
        for partition in partitions or []:
            below = yield children(L.partitions_path(topic) + "/" + partition)
            paths += [L.partitions_path(topic) + "/" + partition + "/" + c for c in below or []]
            paths.append(L.partitions_path(topic) + "/" + partition)
        if partitions is not None:
            paths.append(L.partitions_path(topic))
        if (yield self._request(lambda: client.exists_async(p(L.topic_path(topic))))) is not None:
            paths.append(L.topic_path(topic))
        if paths:
            def ops(txn):
                for path in paths:
                    txn.delete(p(path))
            # atomic, and only the controller deletes them: NoNode on a resend after a lost
            # answer means the first send deleted them all
            yield self._controller_multi(epoch_zk_version, ops, self._gone([True] * len(paths)))
        for path in (L.topic_config_path(topic), L.delete_topic_path(topic)):
            try:
                yield self._request(lambda: client.delete_async(p(path)))
            except NoNodeError:
                pass

    # -- log dir failures ------------------------------------------------------------------------------

    def propagate_log_dir_event(self, broker_id):
        return self._notify(L.LOG_DIR_EVENT_NOTIFICATION + "/" + L.LOG_DIR_EVENT_PREFIX,
                            L.encode_log_dir_event(broker_id))

    @defer.inlineCallbacks
    def log_dir_event_notifications(self, watch=None):
        children = yield self._request(lambda: self._client.get_children_async(
            self._p(L.LOG_DIR_EVENT_NOTIFICATION), watch=self._watch(watch)))
        return sorted(c for c in children if c.startswith(L.LOG_DIR_EVENT_PREFIX))

    @defer.inlineCallbacks
    def log_dir_event_brokers(self, names):
        from kazoo.exceptions import NoNodeError

        pending = [self._request(lambda name=name: self._client.get_async(
            self._p(L.LOG_DIR_EVENT_NOTIFICATION + "/" + name))) for name in names]
        brokers = []
        for d in pending:
            try:
                data, _ = yield d
            except NoNodeError:
                continue
            broker_id = L.decode_log_dir_event(data)
            if broker_id is not None and broker_id not in brokers:
                brokers.append(broker_id)
        return brokers

    @defer.inlineCallbacks
    def delete_log_dir_event_notifications(self, epoch_zk_version, names):
        from kazoo.exceptions import NoNodeError

        for name in names:
            def ops(txn, name=name):
                txn.delete(self._p(L.LOG_DIR_EVENT_NOTIFICATION + "/" + name))
            try:
                yield self._controller_multi(epoch_zk_version, ops)
            except NoNodeError:
                pass  # handled meanwhile, or by a resend's lost first send

    # -- producer ids ----------------------------------------------------------------------------------

    @defer.inlineCallbacks
    def allocate_producer_id_block(self, broker_id, size):
        """Kafka's ZkProducerIdManager.getNewProducerIdBlock: read, write conditionally, retry.
        A write whose answer was lost meets its own effect when resent (NodeExists, BadVersion)
        and takes the next block: the lost one is skipped, never handed out twice (the same
        bytes could be another allocation of this broker's, so they prove nothing)."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        client, path = self._client, self._p(L.PRODUCER_ID_BLOCK)
        for _ in range(100):
            try:
                data, stat = yield self._request(lambda: client.get_async(path))
            except NoNodeError:
                start, end = 0, size - 1
                try:
                    yield self._request(lambda: client.create_async(
                        path, L.encode_producer_id_block(broker_id, start, end)))
                    return start, end
                except NodeExistsError:
                    continue
            last = L.decode_producer_id_block(data)
            start = 0 if last is None else last[1] + 1
            end = start + size - 1
            try:
                yield self._request(lambda: client.set_async(
                    path, L.encode_producer_id_block(broker_id, start, end), version=stat.version))
                return start, end
            except BadVersionError:
                continue
        raise KafkaError(errors.UNKNOWN_SERVER_ERROR, "could not allocate a producer id block")
