"""What each console page shows, as JSON-ready dicts: the cluster, the topic list, one topic,
the group list, one group.

Owns asking the broker through Kafka requests (:mod:`.client`), so what a principal may not
DESCRIBE is missing exactly as it is from a client's Metadata or ListGroups, and reading the
numbers those APIs do not carry (log sizes, segment counts) from the log manager for the
partitions the requests returned. Formatting for the browser is the page script's job.
"""

import os

from twisted.internet import defer

from kafkatw import __version__
from kafkatw.console.client import describe_error
from kafkatw.protocol import messages as m
from kafkatw.protocol.uuids import uuid_to_base64
from kafkatw.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType

DESCRIBE, TOPIC, CLUSTER = AclOperation.DESCRIBE, ResourceType.TOPIC, ResourceType.CLUSTER
METADATA_KEY, DESCRIBE_LOG_DIRS_KEY = 3, 35

EARLIEST, LATEST = -2, -1
CONFIG_TOPIC = 2
#: DescribeConfigs config_source values (Kafka's ConfigSource)
CONFIG_SOURCES = {0: "unknown", 1: "topic", 2: "dynamic broker", 3: "dynamic default broker",
                  4: "static broker", 5: "default", 6: "dynamic broker logger"}


def _log_of(broker, topic, partition):
    """The log as a listing reads it (a log not opened since the start stays unopened)."""
    logs = broker.log_manager
    return logs.log_view(topic, partition) if logs is not None else None


def log_dirs(broker):
    """Each log dir: partitions, bytes of their logs, the disk's size and free space (what
    DescribeLogDirs answers, summed from the logs instead of listing every partition)."""
    logs = broker.log_manager
    if logs is None:
        return []
    offline = {os.path.abspath(d) for d in logs.offline_dirs}
    by_dir = {os.path.abspath(d): [0, 0] for d in broker.config.log_dirs}
    parents = {}  # a partition dir's parent, as given -> absolute
    for lg in logs.log_views():  # (an unopened log's from its summary)
        parent = os.path.dirname(lg.dir)
        absolute = parents.get(parent)
        if absolute is None:
            absolute = parents[parent] = os.path.abspath(parent)
        entry = by_dir.setdefault(absolute, [0, 0])
        entry[0] += 1
        entry[1] += lg.size
    out = []
    for d, (partitions, size) in sorted(by_dir.items()):
        total = usable = -1
        if d not in offline:
            try:
                st = os.statvfs(d)  # one system call, no file read
                total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
            except OSError:
                pass
        out.append({"path": d, "offline": d in offline, "partitions": partitions, "sizeBytes": size,
                    "totalBytes": total, "usableBytes": usable})
    return out


@defer.inlineCallbacks
def overview(client, broker):
    """Brokers, racks, controller, version, listeners, log dirs with usage, counts."""
    cluster = yield client.call(m.DescribeClusterRequest(), 1)
    out = {"version": __version__, "clusterId": cluster.cluster_id, "controllerId": cluster.controller_id,
           "brokers": [{"id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack}
                       for b in sorted(cluster.brokers, key=lambda b: b.broker_id)],
           "error": describe_error(cluster.error_code, cluster.error_message) if cluster.error_code else None}
    config = broker.config
    out["listeners"] = [{"name": ep.listener_name, "securityProtocol": ep.security_protocol,
                         "host": ep.host, "port": ep.port} for ep in config.advertised_listeners]
    allowed = yield client.authorize(DESCRIBE, CLUSTER, [CLUSTER_NAME], DESCRIBE_LOG_DIRS_KEY)
    if not allowed:  # as DescribeLogDirs answers without DESCRIBE on the cluster
        out["logDirs"] = []
        out["logDirsError"] = "CLUSTER_AUTHORIZATION_FAILED"
    else:
        out["logDirs"] = log_dirs(broker)
    topics = yield topic_list(client, broker, with_sizes=False)
    out["topics"] = len(topics["topics"])
    out["partitions"] = sum(t["partitions"] for t in topics["topics"])
    out["underReplicated"] = sum(t["underReplicated"] for t in topics["topics"])
    out["offline"] = sum(t["offline"] for t in topics["topics"])
    return out


@defer.inlineCallbacks
def topic_list(client, broker, search="", with_sizes=True, history=None):
    """Every topic the principal may DESCRIBE, with partition counts, replication factor,
    under-replicated partitions (ISR smaller than the replicas), offline partitions (no leader,
    or led here and their log dir failed), size and records (high watermark minus log start)
    of the replicas on this broker.

    Read from the broker's metadata and logs, filtered by one authorize call: a Metadata
    request for every topic builds an object per partition (about 10 us each, 100 ms at
    10,000 partitions), more than a page may take. A topic's own page asks Metadata."""
    metadata = broker.metadata
    needle = (search or "").lower()
    infos = [info for name, info in sorted(metadata.topics.items()) if not needle or needle in name.lower()]
    allowed = yield client.authorize(DESCRIBE, TOPIC, [info.name for info in infos], METADATA_KEY)
    allowed = set(allowed)
    node = metadata.node_id
    rows = []
    for info in infos:
        if info.name not in allowed:
            continue
        offline = under = replication = size = records = 0
        for p in range(info.num_partitions):
            state = metadata.partition_state(info.name, p)
            lg = _log_of(broker, info.name, p)
            local = lg is not None and not lg.is_offline
            if state is None or state.leader < 0 or (state.leader == node and not local):
                offline += 1
            if state is not None:
                replication = max(replication, len(state.replicas))
                under += len(state.isr) < len(state.replicas)
            if with_sizes and local:
                size += lg.size
                records += max(0, lg.high_watermark - lg.log_start_offset)
        row = {"name": info.name, "internal": bool(info.is_internal), "partitions": info.num_partitions,
               "replicationFactor": replication, "underReplicated": under, "offline": offline}
        if with_sizes:
            row["sizeBytes"] = size
            row["records"] = records
            row["rate"] = history.topic_rates(info.name) if history is not None else []
        rows.append(row)
    return {"topics": rows}


@defer.inlineCallbacks
def list_offsets(client, by_topic, timestamp):
    """``{(topic, partition): offset}`` (-1 where the partition answered an error) of one
    ListOffsets request for ``by_topic`` ({topic: [partitions]})."""
    if not by_topic:
        return {}
    LT = m.ListOffsetsRequest.ListOffsetsTopic
    LP = m.ListOffsetsRequest.ListOffsetsPartition
    body = m.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        LT(name=t, partitions=[LP(partition_index=p, timestamp=timestamp) for p in sorted(ps)])
        for t, ps in sorted(by_topic.items())])
    resp = yield client.call(body, 7)
    out = {}
    for t in resp.topics:
        for p in t.partitions:
            out[(t.name, p.partition_index)] = p.offset if not p.error_code else -1
    return out


@defer.inlineCallbacks
def topic_detail(client, broker, name):
    """One topic's partitions (leader, replicas, ISR, start/end offsets, segments, size) and
    configs (with whether each is a default and where it comes from)."""
    T = m.MetadataRequest.MetadataRequestTopic
    meta = yield client.call(m.MetadataRequest(topics=[T(name=name)], allow_auto_topic_creation=False), 12)
    (t,) = meta.topics
    if t.error_code:
        return {"name": name, "error": describe_error(t.error_code)}
    indexes = [p.partition_index for p in t.partitions]
    starts = yield list_offsets(client, {name: indexes}, EARLIEST)
    ends = yield list_offsets(client, {name: indexes}, LATEST)
    partitions = []
    for p in sorted(t.partitions, key=lambda p: p.partition_index):
        lg = _log_of(broker, name, p.partition_index)
        partitions.append({
            "partition": p.partition_index, "leader": p.leader_id, "leaderEpoch": p.leader_epoch,
            "replicas": list(p.replica_nodes), "isr": list(p.isr_nodes), "offlineReplicas": list(p.offline_replicas),
            "startOffset": starts.get((name, p.partition_index), -1),
            "endOffset": ends.get((name, p.partition_index), -1),
            "segments": lg.number_of_segments if lg is not None else None,
            "sizeBytes": lg.size if lg is not None else None,
            "error": describe_error(p.error_code) if p.error_code else None})
    R = m.DescribeConfigsRequest.DescribeConfigsResource
    described = yield client.call(m.DescribeConfigsRequest(
        resources=[R(resource_type=CONFIG_TOPIC, resource_name=name, configuration_keys=None)]), 4)
    (result,) = described.results
    configs, configs_error = [], None
    if result.error_code:
        configs_error = describe_error(result.error_code, result.error_message)
    else:
        configs = [{"name": c.name, "value": None if c.is_sensitive else c.value, "sensitive": bool(c.is_sensitive),
                    "readOnly": bool(c.read_only), "isDefault": c.config_source in (4, 5),
                    "source": CONFIG_SOURCES.get(c.config_source, str(c.config_source))}
                   for c in sorted(result.configs, key=lambda c: c.name)]
    return {"name": name, "topicId": uuid_to_base64(t.topic_id) if t.topic_id else None,
            "internal": bool(t.is_internal), "partitions": partitions, "configs": configs,
            "configsError": configs_error,
            "records": sum(max(0, p["endOffset"] - p["startOffset"]) for p in partitions
                           if p["endOffset"] >= 0 and p["startOffset"] >= 0)}


def decode_assignment(data):
    """``{topic: [partitions]}`` of a consumer's ConsumerProtocolAssignment, {} if it is not one."""
    if not data or len(data) < 2:
        return {}
    try:
        version = int.from_bytes(bytes(data[:2]), "big", signed=True)
        cls = m.ConsumerProtocolAssignment
        obj, _ = cls.decode_from(memoryview(bytes(data)), 2, max(0, min(version, cls.VALID_VERSIONS[1])))
    except Exception:  # another protocol type's bytes (connect, a custom assignor)
        return {}
    return {tp.topic: sorted(tp.partitions) for tp in obj.assigned_partitions}


@defer.inlineCallbacks
def committed_offsets(client, group_ids):
    """``{group: ({(topic, partition): offset}, error or None)}`` of one OffsetFetch (v8, all
    groups in one request)."""
    if not group_ids:
        return {}
    G = m.OffsetFetchRequest.OffsetFetchRequestGroup
    resp = yield client.call(m.OffsetFetchRequest(groups=[G(group_id=g, topics=None) for g in group_ids],
                                                  require_stable=False), 8)
    out = {}
    for g in resp.groups:
        offsets = {}
        for t in g.topics:
            for p in t.partitions:
                if not p.error_code and p.committed_offset >= 0:
                    offsets[(t.name, p.partition_index)] = p.committed_offset
        out[g.group_id] = (offsets, describe_error(g.error_code) if g.error_code else None)
    return out


@defer.inlineCallbacks
def _lags(client, committed, ends=None):
    """{(topic, partition): (committed, end, lag)} of committed offsets against each
    partition's end offset (ListOffsets LATEST: the high watermark); ``ends`` if already listed."""
    if ends is None:
        ends = yield _ends(client, committed)
    out = {}
    for tp, offset in committed.items():
        end = ends.get(tp, -1)
        out[tp] = (offset, end, max(0, end - offset) if end >= 0 else None)
    return out


def _ends(client, partitions):
    """One ListOffsets LATEST for every (topic, partition) of ``partitions``."""
    by_topic = {}
    for t, p in partitions:
        by_topic.setdefault(t, set()).add(p)
    return list_offsets(client, by_topic, LATEST)


@defer.inlineCallbacks
def group_list(client, broker, history=None):
    """Every group the principal may DESCRIBE: state, protocol, members, total lag."""
    listed = yield client.call(m.ListGroupsRequest(states_filter=[], types_filter=[]), 5)
    ids = sorted(g.group_id for g in listed.groups)
    described = {}
    if ids:
        resp = yield client.call(m.DescribeGroupsRequest(groups=ids, include_authorized_operations=False), 5)
        described = {g.group_id: g for g in resp.groups}
    committed = yield committed_offsets(client, ids)
    # the high watermarks of the partitions OffsetFetch returned (so the principal may describe
    # them) read from their logs, as the metrics exporter's lag is: a ListOffsets request for
    # every committed partition of every group would build an object each
    ends = {}
    for offsets, _ in committed.values():
        for tp in offsets:
            if tp not in ends:
                lg = _log_of(broker, tp[0], tp[1])
                ends[tp] = lg.high_watermark if lg is not None and not lg.is_offline else -1
    rows = []
    for gid in ids:
        offsets, error = committed.get(gid, ({}, None))
        lags = yield _lags(client, offsets, ends)
        total = sum(lag for _, _, lag in lags.values() if lag is not None)
        g = described.get(gid)
        rows.append({"groupId": gid, "state": g.group_state if g is not None else "",
                     "protocolType": g.protocol_type if g is not None else "",
                     "members": len(g.members) if g is not None else 0,
                     "topics": sorted({t for t, _ in offsets}), "lag": total, "error": error})
        if history is not None:
            history.record_lag(gid, total)
    return {"groups": rows}


@defer.inlineCallbacks
def group_detail(client, broker, group_id, history=None):
    """One group: state, members with their assignments, committed offset, end and lag per
    partition, total lag and its history."""
    resp = yield client.call(m.DescribeGroupsRequest(groups=[group_id], include_authorized_operations=False), 5)
    (g,) = resp.groups
    if g.error_code:
        return {"groupId": group_id, "error": describe_error(g.error_code)}
    owner = {}
    members = []
    for mem in g.members:
        assignment = decode_assignment(mem.member_assignment) if g.protocol_type == "consumer" else {}
        for t, ps in assignment.items():
            for p in ps:
                owner[(t, p)] = mem.member_id
        members.append({"memberId": mem.member_id, "groupInstanceId": mem.group_instance_id,
                        "clientId": mem.client_id, "host": mem.client_host,
                        "assignment": [{"topic": t, "partitions": ps} for t, ps in sorted(assignment.items())]})
    committed = yield committed_offsets(client, [group_id])
    offsets, error = committed.get(group_id, ({}, None))
    lags = yield _lags(client, offsets)
    partitions = [{"topic": t, "partition": p, "committed": c, "end": e, "lag": lag, "member": owner.get((t, p))}
                  for (t, p), (c, e, lag) in sorted(lags.items())]
    total = sum(row["lag"] for row in partitions if row["lag"] is not None)
    if history is not None:
        history.record_lag(group_id, total)
    return {"groupId": group_id, "state": g.group_state, "protocolType": g.protocol_type,
            "protocol": g.protocol_data, "members": members, "partitions": partitions, "lag": total,
            "offsetsError": error, "lagHistory": history.lag_history(group_id) if history is not None else []}
