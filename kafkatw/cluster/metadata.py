"""The single-node metadata store: cluster id, topics (name, id, partitions, configs,
leader epochs), producer-id blocks, and Kafka's topic-name rules.

Persists itself as one JSON file under the first log dir and ``meta.properties`` in every
log dir; it never touches partition logs (listeners do, see :meth:`ClusterMetadata.add_listener`).
"""

import json
import os
import re
import uuid

import attr
from twisted.internet import defer, threads
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from kafkatw.background_failures import FailingTask
from kafkatw.cluster.assignment import assign_replicas
from kafkatw.cluster.interfaces import IClusterMetadata
from kafkatw.cluster.state import BrokerInfo, PartitionState
from kafkatw.durable_file import write_atomically
from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError
from kafkatw.protocol.uuids import ZERO_UUID, uuid_from_base64, uuid_to_base64

log = Logger()

METADATA_FILE = "__kafkatw_metadata.json"
META_PROPERTIES = "meta.properties"
PARTITION_METADATA = "partition.metadata"

MAX_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
INTERNAL_TOPICS = frozenset([GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME])

# Kafka's ProducerIdManager hands out ids in blocks; we persist the end of the current block.
PRODUCER_ID_BLOCK_SIZE = 1000

TOPIC_CREATED = "created"
TOPIC_DELETED = "deleted"
TOPIC_CONFIGS_CHANGED = "configs-changed"
TOPIC_PARTITIONS_ADDED = "partitions-added"


def random_uuid():
    """A random uuid that is neither zero nor Kafka's reserved METADATA_TOPIC_ID (1)."""
    while True:
        raw = uuid.uuid4().bytes
        if raw != ZERO_UUID and raw != bytes(15) + b"\x01" and not uuid_to_base64(raw).startswith("-"):
            return raw


def validate_topic_name(name):
    """Raise ``KafkaError(INVALID_TOPIC_EXCEPTION)`` unless ``name`` is legal (Kafka's Topic.validate)."""
    if name is None or name == "":
        raise KafkaError(errors.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise KafkaError(errors.INVALID_TOPIC_EXCEPTION, "Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_NAME_LENGTH:
        raise KafkaError(
            errors.INVALID_TOPIC_EXCEPTION,
            "Topic name is illegal, it can't be longer than %d characters, topic name: %s"
            % (MAX_NAME_LENGTH, name),
        )
    if not _LEGAL_NAME.match(name):
        raise KafkaError(
            errors.INVALID_TOPIC_EXCEPTION,
            "Topic name \"%s\" is illegal, it contains a character other than ASCII "
            "alphanumerics, '.', '_' and '-'" % (name,),
        )


def is_valid_topic_name(name):
    try:
        validate_topic_name(name)
    except KafkaError:
        return False
    return True


def unify_collision_chars(name):
    """Kafka's ``Topic.unifyCollisionChars``: '.' and '_' collide in metric names."""
    return name.replace(".", "_")


@attr.s(slots=True)
class TopicInfo:
    """One topic as the single-node controller knows it; this node leads every partition."""

    name = attr.ib()
    topic_id = attr.ib()  # 16 bytes
    num_partitions = attr.ib()
    configs = attr.ib(factory=dict)  # str -> str, topic-level overrides only
    leader_epochs = attr.ib(factory=list)  # per partition
    is_internal = attr.ib(default=False)

    def to_json(self):
        return {
            "name": self.name,
            "topic_id": uuid_to_base64(self.topic_id),
            "num_partitions": self.num_partitions,
            "configs": dict(self.configs),
            "leader_epochs": list(self.leader_epochs),
            "is_internal": self.is_internal,
        }

    @classmethod
    def from_json(cls, d):
        n = int(d["num_partitions"])
        epochs = [int(e) for e in d.get("leader_epochs", [])]
        epochs += [0] * (n - len(epochs))
        return cls(
            name=d["name"],
            topic_id=uuid_from_base64(d["topic_id"]),
            num_partitions=n,
            configs={str(k): (None if v is None else str(v)) for k, v in d.get("configs", {}).items()},
            leader_epochs=epochs[:n],
            is_internal=bool(d.get("is_internal", d["name"] in INTERNAL_TOPICS)),
        )


def read_properties(path):
    props = {}
    with open(path, "r", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#") or line.startswith("!"):
                continue
            key, sep, value = line.partition("=")
            if sep:
                props[key.strip()] = value.strip()
    return props


def read_partition_metadata_topic_id(partition_dir):
    """The topic id in a ``partition.metadata`` file (``version: 0`` / ``topic_id: ...``), or None."""
    path = os.path.join(partition_dir, PARTITION_METADATA)
    try:
        with open(path, "r", encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "topic_id":
                    return uuid_from_base64(value.strip())
    except (OSError, ValueError):
        return None
    return None


class _Staged:
    """What the state file holds: topics by name and id, the producer-id block end, dynamic
    broker configs, client quotas. The reactor changes it; a write gets a :meth:`copy`."""

    __slots__ = ("topics", "by_id", "producer_id_block_end", "broker_configs", "default_broker_configs",
                 "client_quotas", "deleted_ids")

    def __init__(self, topics=None, by_id=None, producer_id_block_end=0, broker_configs=None,
                 default_broker_configs=None, client_quotas=None, deleted_ids=frozenset()):
        self.topics = topics if topics is not None else {}
        self.by_id = by_id if by_id is not None else {}
        self.producer_id_block_end = producer_id_block_end
        self.broker_configs = broker_configs if broker_configs is not None else {}
        self.default_broker_configs = default_broker_configs if default_broker_configs is not None else {}
        self.client_quotas = client_quotas if client_quotas is not None else {}
        # ids of deleted topics whose partition directories may still exist (a frozenset)
        self.deleted_ids = deleted_ids

    def copy(self):
        return _Staged(dict(self.topics), dict(self.by_id), self.producer_id_block_end,
                       self.broker_configs, self.default_broker_configs, self.client_quotas,
                       self.deleted_ids)


@implementer(IClusterMetadata)
class ClusterMetadata:
    """Single-node metadata: what Kafka's MetadataCache and controller hold, for one node.

    ``ClusterMetadata.load(log_dirs, node_id)`` reads (or initialises) the persisted state.
    Mutations (:meth:`create_topic`, :meth:`delete_topic`, :meth:`next_producer_id`...)
    validate at once against the staged state (what Kafka's controller has accepted: pending
    changes included) and return a Deferred. The state file is written (fsync, rename) in the
    thread pool, one write at a time, each covering every change staged before it started;
    once a change is durable its listeners run (in order, each change after the previous one's
    listeners finished), then queries see it and the Deferred fires. Without a thread pool
    (tests) the write runs inline and the Deferred has fired on return.
    """

    def __init__(self, log_dirs, node_id, cluster_id=None, rack=None, reactor=None, threadpool=None):
        if isinstance(log_dirs, str):
            log_dirs = [d for d in log_dirs.split(",") if d]
        self.log_dirs = list(log_dirs)
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.rack = rack
        self.topics = {}  # name -> TopicInfo, published: durable and announced to listeners
        #: bumped whenever :attr:`topics` changes (what leader_state answers may have): a
        #: parked fetch reuses its look-ups while it and the log manager's are unchanged
        self.published_version = 0
        #: name -> (TopicInfo, [PartitionState]): states made once per published TopicInfo
        #: (a new one replaces it on every change), so Metadata's reads are look-ups
        self._partition_states = {}
        self._by_id = {}  # topic id -> TopicInfo
        self._producer_id_next = 0
        self._producer_id_block_end = 0  # persisted: ids below it may have been handed out
        # dynamic broker configs (AlterConfigs on BROKER resources): this node's and the
        # cluster-wide default (resource name ""), name -> string, as Kafka's ConfigRecords
        self.broker_configs = {}
        self.default_broker_configs = {}
        # client quotas (AlterClientQuotas): ((entity type, name or None), ...) -> {key: float}
        self.client_quotas = {}
        #: deleted topics whose partition directories may remain (persisted; see delete_topic)
        self.deleted_topic_ids = frozenset()
        self._listeners = []
        self._reactor = reactor
        self._threadpool = threadpool
        # The staged state: published plus accepted changes not yet applied. TopicInfo and
        # config dicts are never changed in place (a change stages a new object), so a write
        # in the thread pool reads a snapshot the reactor no longer touches.
        self._staged = _Staged()
        self._staged_version = 0  # bumped by every staged change
        self._durable_version = 0  # the staged version the file on disk holds
        self._durable_state = _Staged()  # the state the file on disk holds
        self._writing = False
        self._waiting = []  # [(version, Deferred fired when that version is durable)]
        self._applied = defer.succeed(None)  # tail of the in-order apply chain
        #: a failing metadata write is logged once, then at increasing intervals (a client
        #: retrying CreateTopics, or FindCoordinator creating __consumer_offsets, each retry)
        self.write_failures = FailingTask("writing %s" % METADATA_FILE, reactor)

    # -- loading / persistence ---------------------------------------------------------

    @classmethod
    def load(cls, log_dirs, node_id, rack=None, reactor=None, threadpool=None):
        """Read (or initialise) the persisted state, synchronously: start-up, before serving."""
        self = cls(log_dirs, node_id, rack=rack, reactor=reactor, threadpool=threadpool)
        for d in self.log_dirs:
            os.makedirs(d, exist_ok=True)
        for d in self.log_dirs:  # writes a crash interrupted (write_atomically)
            for name in (META_PROPERTIES, METADATA_FILE):
                try:
                    os.unlink(os.path.join(d, name + ".tmp"))
                except FileNotFoundError:
                    pass
        self._load_meta_properties()
        self._load_metadata_file()
        self._cross_check_partition_dirs()
        self._write_meta_properties()
        self._staged = _Staged(dict(self.topics), dict(self._by_id), self._producer_id_block_end,
                               self.broker_configs, self.default_broker_configs, self.client_quotas,
                               self.deleted_topic_ids)
        self._durable_state = self._staged.copy()
        self._write_state(self._durable_state)
        return self

    @property
    def metadata_path(self):
        return os.path.join(self.log_dirs[0], METADATA_FILE)

    def _load_meta_properties(self):
        for d in self.log_dirs:
            path = os.path.join(d, META_PROPERTIES)
            if not os.path.exists(path):
                continue
            props = read_properties(path)
            cid = props.get("cluster.id")
            nid = props.get("node.id", props.get("broker.id"))
            if nid is not None and int(nid) != self.node_id:
                raise ValueError(
                    "Stored node id %s in %s doesn't match configured node.id %d" % (nid, path, self.node_id)
                )
            if cid:
                if self.cluster_id is not None and cid != self.cluster_id:
                    raise ValueError(
                        "Inconsistent cluster.id in %s: %s, others have %s" % (path, cid, self.cluster_id)
                    )
                self.cluster_id = cid
        if self.cluster_id is None:
            self.cluster_id = uuid_to_base64(random_uuid())

    def adopt_cluster_id(self, cluster_id):
        """Cluster mode: the coordination store's cluster id replaces the one this node made
        up at its first start, in ``meta.properties`` and the state file: a Deferred, once
        durable."""
        self.cluster_id = cluster_id
        text = self._meta_properties_text()

        def write():
            for d in self.log_dirs:
                write_atomically(os.path.join(d, META_PROPERTIES), text)
        d = self._run_blocking(write)
        return d.addCallback(lambda _: self._stage(lambda: None))

    def _meta_properties_text(self):
        return ("#\n#Written by kafkatw\nversion=1\ncluster.id=%s\nnode.id=%d\n"
                % (self.cluster_id, self.node_id)).encode("utf-8")

    def _write_meta_properties(self):
        for d in self.log_dirs:
            path = os.path.join(d, META_PROPERTIES)
            if os.path.exists(path):
                continue
            write_atomically(path, self._meta_properties_text())

    def _load_metadata_file(self):
        path = self.metadata_path
        if not os.path.exists(path):
            return
        with open(path, "rb") as f:
            state = json.loads(f.read().decode("utf-8"))
        if state.get("cluster_id") and state["cluster_id"] != self.cluster_id:
            log.warn("metadata file cluster id {a} differs from meta.properties {b}",
                     a=state["cluster_id"], b=self.cluster_id)
        for d in state.get("topics", []):
            info = TopicInfo.from_json(d)
            self._add(info)
        self._producer_id_block_end = int(state.get("producer_id_block_end", 0))
        self._producer_id_next = self._producer_id_block_end
        self.broker_configs = {str(k): str(v) for k, v in state.get("broker_configs", {}).items()}
        self.default_broker_configs = {
            str(k): str(v) for k, v in state.get("default_broker_configs", {}).items()}
        self.client_quotas = {
            tuple((str(t), n) for t, n in q["entity"]): {str(k): float(v) for k, v in q["values"].items()}
            for q in state.get("client_quotas", [])}
        self.deleted_topic_ids = frozenset(
            uuid_from_base64(t) for t in state.get("deleted_topic_ids", []))

    def _cross_check_partition_dirs(self):
        """Recover topics whose partition directories exist but the metadata file lost."""
        found = {}  # name -> (max partition, topic id or None)
        valid = {}  # name -> is_valid_topic_name(name), asked once a topic, not once a partition
        for d in self.log_dirs:
            try:
                entries = list(os.scandir(d))
            except OSError:
                continue
            for entry in entries:
                m = _PARTITION_DIR.match(entry.name)
                if not m:
                    continue
                try:
                    if not entry.is_dir():  # follows symlinks, as os.path.isdir
                        continue
                except OSError:
                    continue
                name, partition = m.group(1), int(m.group(2))
                ok = valid.get(name)
                if ok is None:
                    ok = valid[name] = is_valid_topic_name(name)
                if not ok:
                    continue  # "-delete", "-future", "-stray" and the like
                prev = found.get(name, (-1, None))
                # The first topic id found wins: once a topic has one, its other partitions'
                # files would not change it, so they are not read (one read per topic, not
                # one per partition: LogManager reads every file again when it opens the logs).
                topic_id = prev[1] or read_partition_metadata_topic_id(entry.path)
                if topic_id is not None and topic_id in self.deleted_topic_ids:
                    continue  # a deleted topic's directory left by a crash: not recovered
                found[name] = (max(prev[0], partition), topic_id)
        for name, (max_partition, topic_id) in sorted(found.items()):
            info = self.topics.get(name)
            if info is None:
                if topic_id is None or topic_id in self._by_id:
                    topic_id = random_uuid()
                info = TopicInfo(name, topic_id, max_partition + 1, {}, [0] * (max_partition + 1),
                                 name in INTERNAL_TOPICS)
                log.warn("recovered topic {name} ({n} partitions) from its log directories",
                         name=name, n=info.num_partitions)
                self._add(info)
            else:
                if topic_id is not None and topic_id != info.topic_id:
                    log.error("topic {name}: partition.metadata topic id {a} differs from metadata {b}",
                              name=name, a=uuid_to_base64(topic_id), b=uuid_to_base64(info.topic_id))
                if max_partition >= info.num_partitions:
                    log.warn("topic {name}: log directory for partition {p} beyond {n} partitions",
                             name=name, p=max_partition, n=info.num_partitions)

    def _write_state(self, staged):
        """Write ``staged`` to the state file (fsync, rename): runs in the thread pool."""
        state = {
            "version": 1,
            "cluster_id": self.cluster_id,
            "node_id": self.node_id,
            "producer_id_block_end": staged.producer_id_block_end,
            "broker_configs": dict(staged.broker_configs),
            "default_broker_configs": dict(staged.default_broker_configs),
            "client_quotas": [{"entity": [list(c) for c in entity], "values": dict(values)}
                              for entity, values in sorted(staged.client_quotas.items(),
                                                           key=lambda kv: repr(kv[0]))],
            "topics": [t.to_json() for t in sorted(staged.topics.values(), key=lambda t: t.name)],
            "deleted_topic_ids": sorted(uuid_to_base64(t) for t in staged.deleted_ids),
        }
        # (no indent: the C encoder; with one, the pure-Python encoder took most of a
        # CreateTopics' time once there were tens of thousands of partitions)
        write_atomically(self.metadata_path, json.dumps(state, sort_keys=True).encode("utf-8"))

    def _run_blocking(self, fn, *args):
        if self._threadpool is None:
            return defer.maybeDeferred(fn, *args)
        return threads.deferToThreadPool(self._reactor, self._threadpool, fn, *args)

    def _stage(self, apply):
        """Call after changing ``self._staged``: returns a Deferred firing with ``apply()``'s
        result once the change is durable and the changes staged before it are applied
        (``apply`` publishes the change and returns what its listeners return). A failed
        write fails it (and everything pending)."""
        self._staged_version += 1
        durable = defer.Deferred()
        self._waiting.append((self._staged_version, durable))
        result = defer.Deferred()

        def run(_):
            # After the previous change is applied: wait for durability, then apply.
            durable.addCallback(lambda _: apply())
            durable.addBoth(_fire)
            return durable.addBoth(lambda _: None)

        def _fire(outcome):
            if isinstance(outcome, Failure):
                result.errback(outcome)
            else:
                result.callback(outcome)
            return None

        self._applied.addCallback(run)
        self._kick()
        return result

    def _kick(self):
        if self._writing or self._durable_version >= self._staged_version:
            return
        self._writing = True
        version, staged = self._staged_version, self._staged.copy()
        d = self._run_blocking(self._write_state, staged)
        d.addCallbacks(self._written, self._write_failed, callbackArgs=(version, staged),
                       errbackArgs=(version,))

    def _written(self, _, version, staged):
        self._writing = False
        self._durable_version = version
        self._durable_state = staged
        self.write_failures.succeeded()
        ready = [d for v, d in self._waiting if v <= version]
        self._waiting = [(v, d) for v, d in self._waiting if v > version]
        for d in ready:
            d.callback(None)
        self._kick()

    def _write_failed(self, failure, version):
        """Nothing staged since the last good write happened: back to that state, every
        pending change fails with the write's error."""
        self._writing = False
        self.write_failures.failed(failure)
        waiting, self._waiting = self._waiting, []
        self._staged = self._durable_state.copy()
        self._durable_version = self._staged_version
        for _, d in waiting:
            d.errback(failure)

    def _add(self, info):
        self.topics[info.name] = info
        self._by_id[info.topic_id] = info
        self.published_version += 1

    # -- listeners --------------------------------------------------------------------

    def add_listener(self, listener):
        """``listener(event, topic_info)`` after persisting; event is TOPIC_CREATED, TOPIC_DELETED,
        TOPIC_CONFIGS_CHANGED or TOPIC_PARTITIONS_ADDED (listeners ignore events they don't know).
        A listener may return a Deferred: the change is published when it fires (a created
        topic becomes visible once its logs exist)."""
        self._listeners.append(listener)

    def remove_listener(self, listener):
        self._listeners.remove(listener)

    def _notify(self, event, info):
        """Call every listener; a Deferred firing when the Deferreds they returned have
        (a listener's failure is logged: the change is durable already)."""
        # (every one gathered: a Deferred already fired may still wait on one it returned,
        # as a DeferredLock's run does, and ``called`` says nothing of that)
        pending = []
        for listener in list(self._listeners):
            d = defer.maybeDeferred(listener, event, info)
            d.addErrback(lambda f: log.failure("metadata listener failed on {event} {topic}", f,
                                               event=event, topic=info.name))
            pending.append(d)
        return defer.gatherResults(pending)

    # -- queries (what the replica manager and handlers ask) -----------------------------

    def get_topic(self, name):
        return self.topics.get(name)

    def topic_by_id(self, topic_id):
        return self._by_id.get(topic_id)

    def topic_id(self, name):
        info = self.topics.get(name)
        return ZERO_UUID if info is None else info.topic_id

    def topic_name(self, topic_id):
        info = self._by_id.get(topic_id)
        return None if info is None else info.name

    def contains_topic(self, name):
        return name in self.topics

    def contains_partition(self, topic, partition):
        info = self.topics.get(topic)
        return info is not None and 0 <= partition < info.num_partitions

    def partition_count(self, topic):
        info = self.topics.get(topic)
        return None if info is None else info.num_partitions

    def leader(self, topic, partition):
        """The leader node id of a partition, or None if the partition is unknown."""
        info = self.topics.get(topic)
        return self.node_id if info is not None and 0 <= partition < info.num_partitions else None

    def leader_state(self, topic, partition):
        """``(topic_id, leader, leader_epoch, is_internal)`` of a partition in one look-up
        (what :meth:`topic_id`, :meth:`leader`, :meth:`leader_epoch` and :meth:`is_internal`
        answer), None if unknown."""
        info = self.topics.get(topic)
        if info is None or not 0 <= partition < info.num_partitions:
            return None
        return info.topic_id, self.node_id, info.leader_epochs[partition], info.is_internal

    def leader_epoch(self, topic, partition):
        info = self.topics.get(topic)
        if info is None or not 0 <= partition < info.num_partitions:
            return None
        return info.leader_epochs[partition]

    def topic_configs(self, topic):
        info = self.topics.get(topic)
        return {} if info is None else info.configs

    def partition_configs(self, topic, partition):
        info = self.topics.get(topic)
        return info.configs if info is not None and 0 <= partition < info.num_partitions else None

    def is_internal(self, topic):
        info = self.topics.get(topic)
        return info.is_internal if info is not None else topic in INTERNAL_TOPICS

    @property
    def controller_id(self):
        """The embedded controller is this node."""
        return self.node_id

    def live_brokers(self):
        return [BrokerInfo(node_id=self.node_id, rack=self.rack)]

    def live_broker(self, node_id):
        return BrokerInfo(node_id=self.node_id, rack=self.rack) if node_id == self.node_id else None

    def partition_state(self, topic, partition):
        """This node leads every partition, alone in its ISR."""
        info = self.topics.get(topic)
        if info is None or not 0 <= partition < info.num_partitions:
            return None
        return self.topic_partition_states(topic)[partition]

    def topic_partition_states(self, topic):
        """Every partition's state of ``topic`` (known) in partition order, one list while
        the topic is unchanged (not to be modified): Metadata checks its cached answer of a
        topic against them all (one :meth:`partition_state` call each took 15-20 ms of every
        Metadata for 50,000 partitions; the same list again compares at once). An unknown
        topic has none."""
        info = self.topics.get(topic)
        if info is None:
            return []
        memo = self._partition_states.get(topic)
        if memo is None or memo[0] is not info:
            if len(self._partition_states) > 2 * len(self.topics) + 16:
                self._partition_states.clear()  # deleted topics
            node = (self.node_id,)
            memo = self._partition_states[topic] = (info, [
                PartitionState(leader=self.node_id, leader_epoch=epoch, isr=node, replicas=node)
                for epoch in info.leader_epochs])
        return memo[1]

    def topic_configs_loaded(self, topics):
        return defer.succeed(None)

    def metadata_ready(self):
        return defer.succeed(None)

    # -- mutations ---------------------------------------------------------------------

    def check_new_topic(self, name):
        """Raise KafkaError if a topic ``name`` may not be created now (name rules, existence,
        collision), counting topics whose creation is accepted but not yet durable."""
        validate_topic_name(name)
        staged = self._staged.topics
        if name in staged:
            raise KafkaError(errors.TOPIC_ALREADY_EXISTS, "Topic '%s' already exists." % (name,))
        unified = unify_collision_chars(name)
        for other in staged:
            if unify_collision_chars(other) == unified:
                raise KafkaError(
                    errors.INVALID_TOPIC_EXCEPTION,
                    "Topic '%s' collides with existing topic: %s" % (name, other),
                )

    def _staged_topic(self, name):
        info = self._staged.topics.get(name)
        if info is None:
            raise KafkaError(errors.UNKNOWN_TOPIC_OR_PARTITION, "Topic %s does not exist." % (name,))
        return info

    def _replace(self, info):
        """Publish ``info`` in place of the topic of the same name and id."""
        self.topics[info.name] = info
        self._by_id[info.topic_id] = info
        self.published_version += 1

    def assign_replicas(self, num_partitions, replication_factor, start_partition=0):
        """Every partition on this node (a replication factor above 1 is refused as Kafka does
        with one registered broker)."""
        return assign_replicas(num_partitions, replication_factor, {self.node_id: None},
                               start_partition=start_partition, fixed_start_index=0)

    def create_topic(self, name, num_partitions, configs=None, topic_id=None, assignment=None):
        """Create a topic (``assignment`` can only name this node). Raises KafkaError if refused; else a Deferred firing with its
        :class:`TopicInfo` once it is durable and its listeners (the partition logs) are done."""
        self.check_new_topic(name)
        if num_partitions < 1:
            raise KafkaError(errors.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        if topic_id is None:
            topic_id = random_uuid()
            while topic_id in self._staged.by_id:
                topic_id = random_uuid()
        info = TopicInfo(name, topic_id, num_partitions, dict(configs or {}), [0] * num_partitions,
                         name in INTERNAL_TOPICS)
        self._staged.topics[name] = info
        self._staged.by_id[topic_id] = info

        def apply():
            d = self._notify(TOPIC_CREATED, info)
            d.addCallback(lambda _: self._add(info))
            return d.addCallback(lambda _: info)
        return self._stage(apply)

    def delete_topic(self, name):
        """Delete a topic. Raises KafkaError if unknown; else a Deferred firing with the deleted
        :class:`TopicInfo` once that is durable (queries stop seeing it, then listeners run)."""
        info = self._staged.topics.get(name)
        if info is None:
            raise KafkaError(errors.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        del self._staged.topics[name]
        del self._staged.by_id[info.topic_id]
        # Remembered until its directories are renamed away (forget_deleted_topic), so a
        # crash in between does not bring the topic back from them at the next start.
        self._staged.deleted_ids = self._staged.deleted_ids | {info.topic_id}

        def apply():
            self.topics.pop(name, None)
            self._by_id.pop(info.topic_id, None)
            self.published_version += 1
            self._partition_states.pop(name, None)
            self.deleted_topic_ids = self.deleted_topic_ids | {info.topic_id}
            return self._notify(TOPIC_DELETED, info).addCallback(lambda _: info)
        return self._stage(apply)

    def forget_deleted_topic(self, topic_id):
        """The partition directories of deleted topic ``topic_id`` are gone (renamed to
        ``-delete``): stop remembering it. A Deferred, once durable. Never wait on it from a
        metadata listener: it is applied after the change that runs the listener."""
        if topic_id not in self._staged.deleted_ids:
            return defer.succeed(None)
        self._staged.deleted_ids = self._staged.deleted_ids - {topic_id}

        def apply():
            self.deleted_topic_ids = self.deleted_topic_ids - {topic_id}
            return defer.succeed(None)
        return self._stage(apply)

    def alter_topic_configs(self, name, configs):
        """Replace the topic-level overrides of ``name`` (name -> str): a Deferred of the new
        :class:`TopicInfo` once durable. Raises KafkaError for an unknown topic."""
        info = attr.evolve(self._staged_topic(name),
                           configs={k: v for k, v in configs.items() if v is not None})
        self._staged.topics[name] = info
        self._staged.by_id[info.topic_id] = info

        def apply():
            self._replace(info)
            return self._notify(TOPIC_CONFIGS_CHANGED, info).addCallback(lambda _: info)
        return self._stage(apply)

    def create_partitions(self, name, total):
        """Grow topic ``name`` to ``total`` partitions (increase only): a Deferred of the new
        :class:`TopicInfo` once durable and its listeners (the new logs) are done."""
        current = self._staged_topic(name)
        if total <= current.num_partitions:
            raise KafkaError(errors.INVALID_PARTITIONS,
                             "Topic currently has %d partitions, which is higher than the requested %d."
                             % (current.num_partitions, total) if total < current.num_partitions else
                             "Topic already has %d partitions." % (current.num_partitions,))
        info = attr.evolve(current, num_partitions=total,
                           leader_epochs=list(current.leader_epochs) + [0] * (total - current.num_partitions))
        self._staged.topics[name] = info
        self._staged.by_id[info.topic_id] = info

        def apply():
            d = self._notify(TOPIC_PARTITIONS_ADDED, info)
            d.addCallback(lambda _: self._replace(info))
            return d.addCallback(lambda _: info)
        return self._stage(apply)

    def set_broker_configs(self, configs, default=False):
        """Replace this node's (or, with ``default``, the cluster-default) dynamic broker
        configs: a Deferred firing once they are durable."""
        clean = {k: v for k, v in configs.items() if v is not None}
        attr_name = "default_broker_configs" if default else "broker_configs"
        setattr(self._staged, attr_name, clean)

        def apply():
            setattr(self, attr_name, clean)
        return self._stage(apply)

    def set_client_quotas(self, quotas):
        """Replace the client quotas (``{entity components: {key: value}}``, entities without
        values dropped): a Deferred firing once they are durable."""
        clean = {entity: dict(values) for entity, values in quotas.items() if values}
        self._staged.client_quotas = clean

        def apply():
            self.client_quotas = clean
        return self._stage(apply)

    @property
    def staged_client_quotas(self):
        """The client quotas including changes accepted but not yet durable."""
        return self._staged.client_quotas

    def next_producer_id(self):
        """A Deferred of a producer id never handed out before, even across restarts: ids are
        handed out only below a persisted block end (Kafka's ProducerIdManager blocks)."""
        pid = self._producer_id_next
        self._producer_id_next += 1
        if pid < self._durable_state.producer_id_block_end:
            return defer.succeed(pid)
        if pid >= self._staged.producer_id_block_end:
            self._staged.producer_id_block_end = pid + PRODUCER_ID_BLOCK_SIZE
        block_end = self._staged.producer_id_block_end

        def apply():
            self._producer_id_block_end = max(self._producer_id_block_end, block_end)
            return pid
        return self._stage(apply)
