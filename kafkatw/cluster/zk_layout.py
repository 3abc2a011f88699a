"""Kafka's ZooKeeper layout: znode paths and the JSON each one holds (Kafka's ZkData.scala),
so a ZooKeeper written by kafkatw reads like one written by Kafka 2.x-3.9 in ZooKeeper mode.

Pure functions of values and bytes; no ZooKeeper client, no broker state.
"""

import json
import time

from kafkatw.cluster.state import BrokerInfo, LeaderAndIsr
from kafkatw.protocol.uuids import uuid_from_base64, uuid_to_base64

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
DELETE_TOPICS = "/admin/delete_topics"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
LOG_DIR_FAILURE_EVENT = 1

#: what Kafka's KafkaZkClient creates at start (createTopLevelPaths), minus what kafkatw never uses
PERSISTENT_PATHS = ("/brokers/ids", "/brokers/topics", "/config/topics", "/config/brokers",
                    "/config/changes", "/config/clients", "/config/users", "/admin/delete_topics",
                    LOG_DIR_EVENT_NOTIFICATION)


def broker_path(broker_id):
    return "%s/%d" % (BROKER_IDS, broker_id)


def topic_path(topic):
    return "%s/%s" % (TOPICS, topic)


def partitions_path(topic):
    return "%s/%s/partitions" % (TOPICS, topic)


def partition_path(topic, partition):
    return "%s/%s/partitions/%d" % (TOPICS, topic, partition)


def partition_state_path(topic, partition):
    return partition_path(topic, partition) + "/state"


def topic_config_path(topic):
    return "%s/%s" % (CONFIG_TOPICS, topic)


def delete_topic_path(topic):
    return "%s/%s" % (DELETE_TOPICS, topic)


def _dumps(value):
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode("utf-8")


def _loads(data):
    if not data:
        return None
    return json.loads(data.decode("utf-8"))


# -- /cluster/id -----------------------------------------------------------------------------

def encode_cluster_id(cluster_id):
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data):
    return _loads(data)["id"]


# -- /controller, /controller_epoch ------------------------------------------------------------

def encode_controller(broker_id, now_ms=None):
    if now_ms is None:
        now_ms = int(time.time() * 1000)
    return _dumps({"version": 2, "brokerid": broker_id, "timestamp": str(now_ms),
                   "kraftControllerEpoch": -1})


def decode_controller(data):
    """The controller's broker id (Kafka also accepts a bare integer, the version 0 form)."""
    value = _loads(data)
    if isinstance(value, int):
        return value
    return int(value["brokerid"])


def encode_controller_epoch(epoch):
    return str(epoch).encode("ascii")


def decode_controller_epoch(data):
    return int(data.decode("ascii"))


# -- /brokers/ids/<id> ----------------------------------------------------------------------------

def encode_broker(broker_id, endpoints, security_protocols, rack=None, now_ms=None):
    """Kafka's BrokerIdZNode version 5. ``endpoints``: ``[(listener, host, port)]`` in config order."""
    if now_ms is None:
        now_ms = int(time.time() * 1000)
    first = endpoints[0] if endpoints else (None, "", -1)
    plaintext = [e for e in endpoints if security_protocols.get(e[0]) == "PLAINTEXT"]
    host, port = (plaintext[0][1], plaintext[0][2]) if plaintext else (first[1], first[2])
    return _dumps({
        "version": 5,
        "host": host,
        "port": port,
        "jmx_port": -1,
        "timestamp": str(now_ms),
        "endpoints": ["%s://%s:%d" % (name, h, p) for name, h, p in endpoints],
        "listener_security_protocol_map": {name: security_protocols[name] for name, _, _ in endpoints},
        "rack": rack,
        "features": {},
    })


def decode_broker(broker_id, data, epoch=-1):
    """A :class:`BrokerInfo` from ``/brokers/ids/<id>``'s JSON and the znode's czxid."""
    value = _loads(data)
    protocols = dict(value.get("listener_security_protocol_map") or {})
    endpoints = {}
    for entry in value.get("endpoints", []):
        name, _, rest = entry.partition("://")
        host, _, port = rest.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        endpoints[name] = (host, int(port))
        protocols.setdefault(name, name)
    return BrokerInfo(node_id=broker_id, rack=value.get("rack"), endpoints=endpoints,
                      security_protocols=protocols, epoch=epoch)


# -- /brokers/topics/<t> ----------------------------------------------------------------------

def encode_topic_assignment(topic_id, assignment, adding=None, removing=None):
    """Kafka's TopicZNode version 3: ``assignment`` is ``{partition: [replicas]}`` (during a
    reassignment the full set RS = ORS + TRS), ``adding``/``removing`` the partitions being
    reassigned's AR and RR (KIP-455)."""
    return _dumps({
        "version": 3,
        "topic_id": uuid_to_base64(topic_id),
        "partitions": {str(p): list(replicas) for p, replicas in sorted(assignment.items())},
        "adding_replicas": {str(p): list(r) for p, r in sorted((adding or {}).items()) if r},
        "removing_replicas": {str(p): list(r) for p, r in sorted((removing or {}).items()) if r},
    })


def decode_topic_assignment(data):
    """``(topic_id or None, {partition: [replicas]})``."""
    value = _loads(data)
    topic_id = value.get("topic_id")
    return (uuid_from_base64(topic_id) if topic_id else None,
            {int(p): [int(r) for r in replicas] for p, replicas in value["partitions"].items()})


def decode_topic_reassignments(data):
    """``({partition: [adding]}, {partition: [removing]})`` of a topic znode (empty for the
    versions before 2, which had no reassignment state)."""
    value = _loads(data) or {}

    def ints(key):
        return {int(p): [int(r) for r in rs] for p, rs in (value.get(key) or {}).items() if rs}
    return ints("adding_replicas"), ints("removing_replicas")


# -- /admin/reassign_partitions (the legacy way to ask for a reassignment) ----------------------

def encode_reassign_partitions(targets):
    """``{(topic, partition): [replicas]}`` as Kafka's ReassignPartitionsZNode version 1."""
    return _dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(targets.items())]})


def decode_reassign_partitions(data):
    value = _loads(data) or {}
    return {(str(e["topic"]), int(e["partition"])): [int(r) for r in e["replicas"]]
            for e in value.get("partitions", [])}


# -- .../partitions/<p>/state -------------------------------------------------------------------

def encode_partition_state(state):
    return _dumps({"version": 1, "leader": state.leader, "leader_epoch": state.leader_epoch,
                   "isr": list(state.isr), "controller_epoch": state.controller_epoch,
                   "leader_recovery_state": state.leader_recovery_state})


def decode_partition_state(data, zk_version):
    value = _loads(data)
    return LeaderAndIsr(leader=int(value["leader"]), leader_epoch=int(value["leader_epoch"]),
                        isr=[int(b) for b in value["isr"]], controller_epoch=int(value["controller_epoch"]),
                        partition_epoch=zk_version,
                        leader_recovery_state=int(value.get("leader_recovery_state", 0)))


# -- /config/<type>/<name>, /config/changes ---------------------------------------------------------

def encode_entity_config(configs):
    return _dumps({"version": 1, "config": {k: str(v) for k, v in configs.items()}})


def decode_entity_config(data):
    value = _loads(data)
    return {} if value is None else {str(k): str(v) for k, v in value.get("config", {}).items()}


def encode_config_change(entity_type, name):
    return _dumps({"version": 2, "entity_path": "%s/%s" % (entity_type, name)})


def decode_config_change(data):
    """``(entity type, name)`` of a change notification (version 2's ``entity_path``)."""
    value = _loads(data)
    entity_type, _, name = value["entity_path"].partition("/")
    return entity_type, name


# -- ACLs: /kafka-acl (LITERAL), /kafka-acl-extended/prefixed, their change notifications -----------
# (Kafka's ZkAclStore / ZkAclChangeStore). Resource types are Kafka's ZooKeeper names ("Topic",
# "TransactionalId"...); the ACL JSON itself is the authorizer's (security/zk_acls.py).

ACL_CHANGE_PREFIX = "acl_changes_"
_ACL_STORES = {"LITERAL": ("/kafka-acl", "/kafka-acl-changes"),
               "PREFIXED": ("/kafka-acl-extended/prefixed", "/kafka-acl-extended-changes")}
ACL_PATTERN_TYPES = tuple(_ACL_STORES)


def acl_store_path(pattern_type):
    return _ACL_STORES[pattern_type][0]


def acl_resource_path(pattern_type, resource_type, name):
    return "%s/%s/%s" % (_ACL_STORES[pattern_type][0], resource_type, name)


def acl_changes_path(pattern_type):
    return _ACL_STORES[pattern_type][1]


def encode_acl_change(pattern_type, resource_type, name):
    """The LITERAL store's notification is ``Type:name``; the extended one's a JSON event with
    the enum names (``TOPIC``, ``PREFIXED``), as Kafka writes them."""
    if pattern_type == "LITERAL":
        return ("%s:%s" % (resource_type, name)).encode("utf-8")
    return _dumps({"version": 1, "resourceType": _ACL_ENUM_NAMES.get(resource_type, resource_type.upper()),
                   "name": name, "patternType": pattern_type})


def decode_acl_change(pattern_type, data):
    """``(resource type, name)`` (ZooKeeper's type name) of an ACL change notification."""
    if pattern_type == "LITERAL":
        resource_type, _, name = data.decode("utf-8").partition(":")
        return resource_type, name
    value = _loads(data)
    enum_name = value["resourceType"]
    return _ACL_ZK_NAMES.get(enum_name, enum_name), value["name"]


_ACL_ENUM_NAMES = {"Topic": "TOPIC", "Group": "GROUP", "Cluster": "CLUSTER", "TransactionalId": "TRANSACTIONAL_ID",
                   "DelegationToken": "DELEGATION_TOKEN", "User": "USER"}
_ACL_ZK_NAMES = {v: k for k, v in _ACL_ENUM_NAMES.items()}


# -- client quota entities (/config/users, /config/clients, /config/ips) -------------------------------

DEFAULT_ENTITY = "<default>"
_QUOTA_DIRS = {"user": "users", "client-id": "clients", "ip": "ips"}


def _sanitize(name):
    """Kafka's Sanitizer: a name as a znode name (URL encoding), None as ``<default>``."""
    from urllib.parse import quote

    return DEFAULT_ENTITY if name is None else quote(name, safe="")


def _desanitize(name):
    from urllib.parse import unquote

    return None if name == DEFAULT_ENTITY else unquote(name)


def quota_entity_path(components):
    """The entity path under /config of quota entity ``((type, name or None), ...)``."""
    entity = dict(components)
    if "user" in entity and "client-id" in entity:
        return "users/%s/clients/%s" % (_sanitize(entity["user"]), _sanitize(entity["client-id"]))
    (entity_type, name), = entity.items()
    return "%s/%s" % (_QUOTA_DIRS[entity_type], _sanitize(name))


def quota_entity_components(path):
    """The inverse of :func:`quota_entity_path` (components sorted by type), or None."""
    parts = path.split("/")
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return (("client-id", _desanitize(parts[3])), ("user", _desanitize(parts[1])))
    kinds = {v: k for k, v in _QUOTA_DIRS.items()}
    if len(parts) == 2 and parts[0] in kinds:
        return ((kinds[parts[0]], _desanitize(parts[1])),)
    return None


def encode_quota_values(values):
    """``{key: float}`` as a config map (integral values without a fraction, as Kafka writes longs)."""
    return encode_entity_config({k: (str(int(v)) if float(v).is_integer() else repr(float(v)))
                                 for k, v in values.items()})


def decode_quota_values(data):
    return {k: float(v) for k, v in decode_entity_config(data).items()}


# -- /latest_producer_id_block ------------------------------------------------------------------

def encode_producer_id_block(broker_id, start, end):
    return _dumps({"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(end)})


def decode_producer_id_block(data):
    """``(start, end)`` of the last block handed out (end inclusive), or None."""
    value = _loads(data)
    if value is None:
        return None
    return int(value["block_start"]), int(value["block_end"])


# -- /log_dir_event_notification ------------------------------------------------------------------

def encode_log_dir_event(broker_id, event=LOG_DIR_FAILURE_EVENT):
    """Kafka's LogDirEventNotificationSequenceZNode: which broker had a log dir event."""
    return _dumps({"version": 1, "broker": broker_id, "event": event})


def decode_log_dir_event(data):
    """The broker id of a log dir failure notification, or None for another event."""
    value = _loads(data)
    if not value or value.get("event") != LOG_DIR_FAILURE_EVENT:
        return None
    return int(value["broker"])
