"""The console's admin actions, each one Kafka request (or a few) made in process: create a
topic, add partitions, alter or delete a topic config, delete records, reset a group's offsets,
delete a group or a topic.

Owns checking an action's parameters (one line naming what is wrong) and mapping it to the
request Kafka's own tools send (kafka-topics, kafka-configs, kafka-delete-records,
kafka-consumer-groups --reset-offsets); the handlers and the authorizer do the rest, exactly
as for a client. It knows nothing of HTTP, confirmation or CSRF (:mod:`.web` does).
"""

from twisted.internet import defer

from kafkatw.console.client import describe_error
from kafkatw.console.views import EARLIEST, LATEST, list_offsets
from kafkatw.protocol import messages as m

CONFIG_TOPIC = 2
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
TIMEOUT_MS = 30000


class ActionError(ValueError):
    """An action refused, by the console's checks or by the broker (one line)."""


def _int(params, name, low=None, required=True, default=None):
    raw = params.get(name)
    if raw in (None, ""):
        if required:
            raise ActionError("%s is required" % name)
        return default
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise ActionError("%s must be an integer, not %r" % (name, raw)) from None
    if low is not None and value < low:
        raise ActionError("%s must be at least %d" % (name, low))
    return value


def _str(params, name):
    value = params.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ActionError("%s is required" % name)
    return value.strip()


def _fail(code, message, what):
    if code:
        raise ActionError("%s: %s" % (what, describe_error(code, message)))


@defer.inlineCallbacks
def create_topic(client, params):
    name = _str(params, "topic")
    partitions = _int(params, "partitions", 1, required=False, default=-1)
    replication = _int(params, "replicationFactor", 1, required=False, default=-1)
    configs = params.get("configs") or {}
    if not isinstance(configs, dict):
        raise ActionError("configs must be an object of name: value")
    CT = m.CreateTopicsRequest.CreatableTopic
    CFG = m.CreateTopicsRequest.CreatableTopicConfig
    resp = yield client.call(m.CreateTopicsRequest(topics=[CT(
        name=name, num_partitions=partitions, replication_factor=replication, assignments=[],
        configs=[CFG(name=str(k), value=None if v is None else str(v)) for k, v in sorted(configs.items())])],
        timeout_ms=TIMEOUT_MS, validate_only=False), 7)
    (r,) = resp.topics
    _fail(r.error_code, r.error_message, "create topic %s" % name)
    return {"done": "created topic %s with %d partitions" % (name, r.num_partitions)}


@defer.inlineCallbacks
def add_partitions(client, params):
    name = _str(params, "topic")
    total = _int(params, "partitions", 1)
    CP = m.CreatePartitionsRequest.CreatePartitionsTopic
    resp = yield client.call(m.CreatePartitionsRequest(topics=[CP(name=name, count=total, assignments=None)],
                                                       timeout_ms=TIMEOUT_MS, validate_only=False), 3)
    (r,) = resp.results
    _fail(r.error_code, r.error_message, "add partitions to %s" % name)
    return {"done": "%s has %d partitions" % (name, total)}


@defer.inlineCallbacks
def alter_config(client, params):
    """``value`` null deletes the override (the default applies again)."""
    name = _str(params, "topic")
    key = _str(params, "name")
    value = params.get("value")
    R = m.IncrementalAlterConfigsRequest.AlterConfigsResource
    C = m.IncrementalAlterConfigsRequest.AlterableConfig
    op = DELETE if value is None else SET
    resp = yield client.call(m.IncrementalAlterConfigsRequest(resources=[R(
        resource_type=CONFIG_TOPIC, resource_name=name,
        configs=[C(name=key, config_operation=op, value=None if value is None else str(value))])],
        validate_only=False), 1)
    (r,) = resp.responses
    _fail(r.error_code, r.error_message, "alter %s of %s" % (key, name))
    return {"done": "%s of %s %s" % (key, name, "reset to its default" if value is None else "set to %s" % value)}


@defer.inlineCallbacks
def delete_records(client, params):
    name = _str(params, "topic")
    partition = _int(params, "partition", 0)
    offset = _int(params, "offset", -1)  # -1: up to the high watermark (Kafka's tool's meaning)
    T = m.DeleteRecordsRequest.DeleteRecordsTopic
    P = m.DeleteRecordsRequest.DeleteRecordsPartition
    resp = yield client.call(m.DeleteRecordsRequest(topics=[T(name=name, partitions=[
        P(partition_index=partition, offset=offset)])], timeout_ms=TIMEOUT_MS), 2)
    (t,) = resp.topics
    (p,) = t.partitions
    _fail(p.error_code, None, "delete records of %s-%d" % (name, partition))
    return {"done": "%s-%d now starts at offset %d" % (name, partition, p.low_watermark),
            "lowWatermark": p.low_watermark}


#: Group states whose offsets may be reset (kafka-consumer-groups refuses a group with members).
RESETTABLE = ("Empty", "Dead")


@defer.inlineCallbacks
def reset_offsets(client, params):
    """To ``earliest``, ``latest``, an ``offset`` or the first offset at a ``timestamp`` (ms),
    for every partition of ``topic`` (or one ``partition``), as kafka-consumer-groups
    --reset-offsets --execute does: only while the group has no members."""
    group = _str(params, "group")
    topic = _str(params, "topic")
    to = _str(params, "to")
    if to not in ("earliest", "latest", "offset", "timestamp"):
        raise ActionError("to must be earliest, latest, offset or timestamp, not %r" % to)
    described = yield client.call(m.DescribeGroupsRequest(groups=[group], include_authorized_operations=False), 5)
    (g,) = described.groups
    _fail(g.error_code, None, "describe group %s" % group)
    if g.group_state not in RESETTABLE:
        raise ActionError("group %s is %s: its offsets can be reset only while it has no members (stop its "
                          "consumers first)" % (group, g.group_state))
    T = m.MetadataRequest.MetadataRequestTopic
    meta = yield client.call(m.MetadataRequest(topics=[T(name=topic)], allow_auto_topic_creation=False), 12)
    (t,) = meta.topics
    _fail(t.error_code, None, "topic %s" % topic)
    partitions = sorted(p.partition_index for p in t.partitions)
    if params.get("partition") not in (None, ""):
        one = _int(params, "partition", 0)
        if one not in partitions:
            raise ActionError("%s has no partition %d" % (topic, one))
        partitions = [one]
    if to == "offset":
        wanted = _int(params, "offset", 0)
        starts = yield list_offsets(client, {topic: partitions}, EARLIEST)
        ends = yield list_offsets(client, {topic: partitions}, LATEST)
        # as Kafka's tool: an offset outside the log is clamped to its start or end
        targets = {p: min(max(wanted, starts[(topic, p)]), ends[(topic, p)]) for p in partitions}
    else:
        timestamp = {"earliest": EARLIEST, "latest": LATEST}.get(to)
        if timestamp is None:
            timestamp = _int(params, "timestamp", 0)
        found = yield list_offsets(client, {topic: partitions}, timestamp)
        if to == "timestamp":
            ends = yield list_offsets(client, {topic: partitions}, LATEST)
            found = {tp: (o if o >= 0 else ends[tp]) for tp, o in found.items()}
        targets = {p: found[(topic, p)] for p in partitions}
    bad = [p for p, o in targets.items() if o < 0]
    if bad:
        raise ActionError("cannot list the offsets of %s partitions %s" % (topic, bad))
    CT = m.OffsetCommitRequest.OffsetCommitRequestTopic
    CP = m.OffsetCommitRequest.OffsetCommitRequestPartition
    resp = yield client.call(m.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        retention_time_ms=-1, topics=[CT(name=topic, partitions=[
            CP(partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="")
            for p, o in sorted(targets.items())])]), 8)
    for rt in resp.topics:
        for rp in rt.partitions:
            _fail(rp.error_code, None, "commit the offset of %s-%d for %s" % (rt.name, rp.partition_index, group))
    return {"done": "reset %s on %s: %s" % (group, topic, ", ".join("%d->%d" % kv for kv in sorted(targets.items()))),
            "offsets": {str(p): o for p, o in sorted(targets.items())}}


@defer.inlineCallbacks
def delete_group(client, params):
    group = _str(params, "group")
    resp = yield client.call(m.DeleteGroupsRequest(groups_names=[group]), 2)
    (r,) = resp.results
    _fail(r.error_code, None, "delete group %s" % group)
    return {"done": "deleted group %s" % group}


@defer.inlineCallbacks
def delete_topic(client, params):
    name = _str(params, "topic")
    D = m.DeleteTopicsRequest.DeleteTopicState
    resp = yield client.call(m.DeleteTopicsRequest(topics=[D(name=name)], topic_names=[name],
                                                   timeout_ms=TIMEOUT_MS), 6)
    (r,) = resp.responses
    _fail(r.error_code, r.error_message, "delete topic %s" % name)
    return {"done": "deleted topic %s" % name}


ACTIONS = {
    "create-topic": create_topic,
    "add-partitions": add_partitions,
    "alter-config": alter_config,
    "delete-records": delete_records,
    "reset-offsets": reset_offsets,
    "delete-group": delete_group,
    "delete-topic": delete_topic,
}
