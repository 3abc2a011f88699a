"""Partition administration on a single node: CreatePartitions (key 37, v0-v3), DeleteRecords
(21, v0-v2), DescribeLogDirs (35, v1-v4), AlterReplicaLogDirs (34, v1-v2), OffsetForLeaderEpoch
(23, v2-v4), DescribeProducers (61, v0) and ElectLeaders (43, v0-v2; in cluster mode handed to the
controller). Logs are reached through the replica/log managers only.
"""

import os
from collections import Counter

from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import provider

from kafkatw.cluster.interfaces import ControllerMovedError
from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError
from kafkatw.protocol.messages import (
    AlterReplicaLogDirsResponse,
    CreatePartitionsResponse,
    DeleteRecordsResponse,
    DescribeLogDirsResponse,
    DescribeProducersResponse,
    ElectLeadersResponse,
    OffsetForLeaderEpochResponse,
)
from kafkatw.security.authorizer import AclOperation as Op, ResourceType as RT
from kafkatw.security.authorizer import CLUSTER_NAME
from kafkatw.server.handlers.topics import EXCESSIVE_PARTITIONS, MAX_PARTITIONS_PER_BATCH
from kafkatw.server.interfaces import IApiHandler
from kafkatw.server.quota import mutation_quota, with_mutation_throttle

log = Logger()

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
HIGH_WATERMARK = -1  # DeleteRecords offset meaning "up to the high watermark"


def _message(code):
    return _DEFAULT_MESSAGES.get(code)


_DEFAULT_MESSAGES = {
    errors.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    errors.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
}


# -- CreatePartitions --------------------------------------------------------------------------

def _create_partitions_one(apis, topic, validate_only):
    meta = apis.metadata
    info = meta.get_topic(topic.name)
    if info is None:
        raise KafkaError(errors.UNKNOWN_TOPIC_OR_PARTITION, "The topic '%s' does not exist." % topic.name)
    current = info.num_partitions
    if topic.count < current:
        raise KafkaError(errors.INVALID_PARTITIONS,
                         "The topic %s currently has %d partition(s); %d would not be an increase."
                         % (topic.name, current, topic.count))
    if topic.count == current:
        raise KafkaError(errors.INVALID_PARTITIONS, "Topic already has %d partition(s)." % current)
    if topic.count - current > MAX_PARTITIONS_PER_BATCH:
        raise KafkaError(errors.POLICY_VIOLATION, EXCESSIVE_PARTITIONS)
    if topic.assignments is not None:
        added = topic.count - current
        if len(topic.assignments) != added:
            raise KafkaError(errors.INVALID_REPLICA_ASSIGNMENT,
                             "Attempted to add %d additional partition(s), but only %d assignment(s) "
                             "were specified." % (added, len(topic.assignments)))
        for a in topic.assignments:
            for b in a.broker_ids:
                if b != apis.node_id:
                    raise KafkaError(errors.INVALID_REPLICA_ASSIGNMENT,
                                     "The manual partition assignment includes broker %d, but no broker "
                                     "with that ID was found." % b)
            if len(a.broker_ids) != 1:
                raise KafkaError(errors.INVALID_REPLICA_ASSIGNMENT,
                                 "The manual partition assignment includes a partition with %d replica(s), "
                                 "but this is not consistent with previous partitions, which have 1 "
                                 "replica(s)." % len(a.broker_ids))
    if validate_only:
        return
    d = meta.create_partitions(topic.name, topic.count)  # its listener creates the new logs
    d.addCallback(lambda _: log.info("topic {name}: {a} -> {b} partitions", name=topic.name,
                                     a=current, b=topic.count))
    return d


def _failed(failure, result):
    log.failure("creating partitions of {name} failed", failure, name=result.name)
    result.error_code = errors.KAFKA_STORAGE_ERROR
    result.error_message = "The metadata could not be written: %s" % (failure.getErrorMessage(),)


@provider(IApiHandler)
class CreatePartitions:
    API_KEY = 37
    VERSIONS = (0, 3)

    @staticmethod
    def handle(apis, request):
        body = request.body
        counts = Counter(t.name for t in body.topics)
        quota = mutation_quota(apis, request, strict_from_version=3)  # KIP-599
        results = []
        pending = []
        for t in body.topics:
            result = CreatePartitionsResponse.CreatePartitionsTopicResult(
                name=t.name, error_code=errors.NONE, error_message=None)
            results.append(result)
            try:
                if counts[t.name] > 1:
                    raise KafkaError(errors.INVALID_REQUEST, "Duplicate topic in request.")
                if not apis.allowed(request, Op.ALTER, RT.TOPIC, t.name):
                    raise KafkaError(errors.TOPIC_AUTHORIZATION_FAILED, "The topic authorization is failed.")
                info = apis.metadata.get_topic(t.name)
                if not body.validate_only and info is not None and t.count > info.num_partitions:
                    quota.record(t.count - info.num_partitions)
                d = _create_partitions_one(apis, t, body.validate_only)
            except KafkaError as e:
                result.error_code, result.error_message = e.code, e.message
                continue
            if d is not None:
                d.addErrback(_failed, result)
                pending.append(d)
        response = CreatePartitionsResponse(throttle_time_ms=0, results=results)
        if not pending:
            return with_mutation_throttle(response, quota)
        return defer.gatherResults(pending).addCallback(lambda _: with_mutation_throttle(response, quota))

    @staticmethod
    def error_response(request, code, message):
        return CreatePartitionsResponse(throttle_time_ms=0, results=[
            CreatePartitionsResponse.CreatePartitionsTopicResult(
                name=t.name, error_code=code, error_message=message) for t in request.body.topics])


# -- DeleteRecords -----------------------------------------------------------------------------

def delete_records(apis, topic, partition, offset):
    """(low watermark, error code) after deleting records of one partition below ``offset``."""
    rm = apis.replica_manager
    log_, code = rm.get_partition_or_error(topic, partition)
    if code != errors.NONE:
        return -1, code
    if not log_.config.delete:
        return -1, errors.POLICY_VIOLATION
    target = log_.high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0:
        return -1, errors.OFFSET_OUT_OF_RANGE
    try:
        low = log_.delete_records_before(target)
    except KafkaError as e:
        return -1, e.code
    return low, errors.NONE


@provider(IApiHandler)
class DeleteRecords:
    API_KEY = 21
    VERSIONS = (0, 2)

    @staticmethod
    def handle(apis, request):
        topics = []
        for t in request.body.topics:
            result = DeleteRecordsResponse.DeleteRecordsTopicResult(name=t.name, partitions=[])
            allowed = apis.allowed(request, Op.DELETE, RT.TOPIC, t.name)
            for p in t.partitions:
                if allowed:
                    low, code = delete_records(apis, t.name, p.partition_index, p.offset)
                else:
                    low, code = -1, errors.TOPIC_AUTHORIZATION_FAILED
                result.partitions.append(DeleteRecordsResponse.DeleteRecordsPartitionResult(
                    partition_index=p.partition_index, low_watermark=low, error_code=code))
            topics.append(result)
        return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)

    @staticmethod
    def error_response(request, code, message):
        return DeleteRecordsResponse(throttle_time_ms=0, topics=[
            DeleteRecordsResponse.DeleteRecordsTopicResult(name=t.name, partitions=[
                DeleteRecordsResponse.DeleteRecordsPartitionResult(
                    partition_index=p.partition_index, low_watermark=-1, error_code=code)
                for p in t.partitions]) for t in request.body.topics])


# -- DescribeLogDirs ---------------------------------------------------------------------------

@provider(IApiHandler)
class DescribeLogDirs:
    API_KEY = 35
    VERSIONS = (1, 4)

    @staticmethod
    def handle(apis, request):
        lm = apis.log_manager
        wanted = None
        if request.body.topics is not None:
            wanted = {}
            for t in request.body.topics:
                wanted.setdefault(t.topic, set()).update(t.partitions)
        by_dir = {d: {} for d in lm.log_dirs}
        # (log, offset lag, is future): a replica being moved has a second, future log
        # whose lag is how far its copy is behind (Kafka's getLogEndOffsetLag)
        entries = [(lg, 0, False) for lg in lm.log_views()]  # (none is made for this)
        mover = getattr(apis.replica_manager, "log_dir_mover", None)
        if mover is not None:
            entries += [(future, max(0, current.log_end_offset - future.log_end_offset), True)
                        for current, future in mover.future_logs()]
        for lg, lag, future in entries:
            if wanted is not None and lg.partition not in wanted.get(lg.topic, ()):
                continue
            directory = os.path.dirname(lg.dir)
            by_dir.setdefault(directory, {}).setdefault(lg.topic, []).append((lg, lag, future))
        results = []
        offline = lm.offline_dirs
        for directory in lm.log_dirs:
            result = DescribeLogDirsResponse.DescribeLogDirsResult(
                error_code=errors.NONE, log_dir=directory, topics=[])
            if directory in offline:
                result.error_code = errors.KAFKA_STORAGE_ERROR
                results.append(result)
                continue
            if request.api_version >= 4:
                try:
                    st = os.statvfs(directory)
                    result.total_bytes = st.f_blocks * st.f_frsize
                    result.usable_bytes = st.f_bavail * st.f_frsize
                except OSError:
                    pass
            for topic, logs in sorted(by_dir.get(directory, {}).items()):
                result.topics.append(DescribeLogDirsResponse.DescribeLogDirsTopic(
                    name=topic, partitions=[
                        DescribeLogDirsResponse.DescribeLogDirsPartition(
                            partition_index=lg.partition, partition_size=lg.size, offset_lag=lag,
                            is_future_key=future)
                        for lg, lag, future in sorted(logs, key=lambda e: (e[0].partition, e[2]))]))
            results.append(result)
        return DescribeLogDirsResponse(throttle_time_ms=0, error_code=errors.NONE, results=results)

    @staticmethod
    def error_response(request, code, message):
        if request.api_version < 3:
            return None  # no top-level error code before v3: close, as Kafka does
        return DescribeLogDirsResponse(throttle_time_ms=0, error_code=code, results=[])


# -- AlterReplicaLogDirs -----------------------------------------------------------------------

@provider(IApiHandler)
class AlterReplicaLogDirs:
    """Move replicas of this broker to another of its log dirs (ALTER on the cluster, the gate's);
    the copy runs in the background (``server/log_dir_mover.py``), DescribeLogDirs shows it."""

    API_KEY = 34
    VERSIONS = (1, 2)

    @staticmethod
    def handle(apis, request):
        R = AlterReplicaLogDirsResponse
        mover = apis.replica_manager.log_dir_mover
        results = {}
        for d in request.body.dirs:
            for t in d.topics:
                for p in t.partitions:
                    results[(t.name, p)] = mover.alter(t.name, p, d.path)
        by_topic = {}
        for (topic, p), code in results.items():
            by_topic.setdefault(topic, []).append(R.AlterReplicaLogDirPartitionResult(
                partition_index=p, error_code=code))
        return R(throttle_time_ms=0, results=[R.AlterReplicaLogDirTopicResult(topic_name=t, partitions=ps)
                                              for t, ps in by_topic.items()])

    @staticmethod
    def error_response(request, code, message):
        R = AlterReplicaLogDirsResponse
        by_topic = {}
        for d in request.body.dirs:
            for t in d.topics:
                by_topic.setdefault(t.name, []).extend(
                    R.AlterReplicaLogDirPartitionResult(partition_index=p, error_code=code) for p in t.partitions)
        return R(throttle_time_ms=0, results=[R.AlterReplicaLogDirTopicResult(topic_name=t, partitions=ps)
                                              for t, ps in by_topic.items()])


# -- OffsetForLeaderEpoch ----------------------------------------------------------------------

def _epoch_end_offset(partition, code=errors.NONE):
    return OffsetForLeaderEpochResponse.EpochEndOffset(
        error_code=code, partition=partition, leader_epoch=UNDEFINED_EPOCH, end_offset=UNDEFINED_EPOCH_OFFSET)


@provider(IApiHandler)
class OffsetForLeaderEpoch:
    API_KEY = 23
    VERSIONS = (2, 4)

    @staticmethod
    def handle(apis, request):
        rm = apis.replica_manager
        topics = []
        # brokers (CLUSTER_ACTION) may ask about every topic; consumers (KIP-320) about the
        # topics they may describe
        replica = apis.allowed(request, Op.CLUSTER_ACTION, RT.CLUSTER, CLUSTER_NAME)
        for t in request.body.topics:
            result = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(topic=t.topic, partitions=[])
            allowed = replica or apis.allowed(request, Op.DESCRIBE, RT.TOPIC, t.topic)
            for p in t.partitions:
                out = _epoch_end_offset(p.partition)
                result.partitions.append(out)
                if not allowed:
                    out.error_code = errors.TOPIC_AUTHORIZATION_FAILED
                    continue
                log_, code = rm.get_partition_or_error(t.topic, p.partition)
                if code == errors.NONE:
                    code = rm.check_leader_epoch(t.topic, p.partition, p.current_leader_epoch)
                if code != errors.NONE:
                    out.error_code = code
                    continue
                epoch, offset = log_.end_offset_for_epoch(p.leader_epoch)
                out.leader_epoch, out.end_offset = epoch, offset
            topics.append(result)
        return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)

    @staticmethod
    def error_response(request, code, message):
        return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=[
            OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(topic=t.topic, partitions=[
                _epoch_end_offset(p.partition, code) for p in t.partitions])
            for t in request.body.topics])


# -- DescribeProducers -------------------------------------------------------------------------

def _producers_partition(index, code=errors.NONE, message=None):
    return DescribeProducersResponse.PartitionResponse(
        partition_index=index, error_code=code, error_message=message, active_producers=[])


def _describe_producers(out, ps):
    for entry in sorted(ps.producers.values(), key=lambda e: e.producer_id):
        out.active_producers.append(DescribeProducersResponse.ProducerState(
            producer_id=entry.producer_id, producer_epoch=entry.producer_epoch,
            last_sequence=entry.last_seq, last_timestamp=entry.last_timestamp,
            coordinator_epoch=entry.coordinator_epoch,
            current_txn_start_offset=entry.current_txn_first_offset))


@provider(IApiHandler)
class DescribeProducers:
    API_KEY = 61
    VERSIONS = (0, 0)

    @staticmethod
    def handle(apis, request):
        rm = apis.replica_manager
        topics = []
        loading = []  # (partition entry, topic, index): producer state being rebuilt
        for t in request.body.topics:
            result = DescribeProducersResponse.TopicResponse(name=t.name, partitions=[])
            allowed = apis.allowed(request, Op.READ, RT.TOPIC, t.name)
            for index in t.partition_indexes:
                out = _producers_partition(index)
                result.partitions.append(out)
                if not allowed:
                    code = errors.TOPIC_AUTHORIZATION_FAILED
                    out.error_code, out.error_message = code, _message(code)
                    continue
                log_, code = rm.get_partition_or_error(t.name, index)
                if code != errors.NONE:
                    out.error_code, out.error_message = code, _message(code)
                    continue
                ps = rm.producer_state_or_load(t.name, index, log_)
                if ps is None:
                    loading.append((out, t.name, index))
                    continue
                _describe_producers(out, ps)
            topics.append(result)
        response = DescribeProducersResponse(throttle_time_ms=0, topics=topics)
        if not loading:
            return response

        # rebuilt from the log in slices on the reactor: answer once they are (or failed)
        def loaded(_):
            for out, topic, index in loading:
                _, code = rm.get_partition_or_error(topic, index)  # deleted meanwhile?
                ps = rm.loaded_producer_state(topic, index) if code == errors.NONE else None
                if ps is not None:
                    _describe_producers(out, ps)
                    continue
                if code == errors.NONE:
                    code = errors.UNKNOWN_SERVER_ERROR  # the rebuild failed (and was logged)
                out.error_code, out.error_message = code, _message(code)
            return response
        waits = [rm.when_producer_state_loaded(topic, index) for _, topic, index in loading]
        return defer.DeferredList(waits, consumeErrors=True).addCallback(loaded)

    @staticmethod
    def error_response(request, code, message):
        return DescribeProducersResponse(throttle_time_ms=0, topics=[
            DescribeProducersResponse.TopicResponse(name=t.name, partitions=[
                _producers_partition(i, code, message) for i in t.partition_indexes])
            for t in request.body.topics])


# -- ElectLeaders ------------------------------------------------------------------------------

def _election_response(results, version, all_partitions, code=errors.NONE):
    """``results`` {(topic, partition): (code, message)} grouped by topic in request order; for
    a request naming no partitions Kafka leaves out those that needed no election."""
    by_topic = {}
    for (topic, p), (err, message) in results.items():
        if all_partitions and err == errors.ELECTION_NOT_NEEDED:
            continue
        by_topic.setdefault(topic, []).append(ElectLeadersResponse.PartitionResult(
            partition_id=p, error_code=err, error_message=message))
    return ElectLeadersResponse(
        throttle_time_ms=0, error_code=code if version >= 1 else errors.NONE,
        replica_election_results=[ElectLeadersResponse.ReplicaElectionResult(topic=t, partition_result=ps)
                                  for t, ps in by_topic.items()])


@provider(IApiHandler)
class ElectLeaders:
    """On a single node its only replica always leads; in cluster mode the controller elects
    (other brokers answer NOT_CONTROLLER per partition, as Kafka's ZooKeeper mode) and the answer
    waits until this broker's metadata shows the new leaders (Kafka's DelayedElectLeader)."""

    API_KEY = 43
    VERSIONS = (0, 2)

    @staticmethod
    def handle(apis, request):
        body = request.body
        version = request.api_version
        wanted = None if body.topic_partitions is None else \
            [(t.topic, p) for t in body.topic_partitions for p in t.partitions]
        # ALTER on the cluster is checked before (server/authz.py's gate), as Kafka does first
        if apis.controller is None:
            meta = apis.metadata
            results = {}
            for tp in wanted or ():  # none named: every partition already has its leader
                code = (errors.ELECTION_NOT_NEEDED if meta.contains_partition(*tp)
                        else errors.UNKNOWN_TOPIC_OR_PARTITION)
                results[tp] = (code, _message(code))
            return _election_response(results, version, wanted is None)
        election_type = body.election_type if version >= 1 else 0
        if election_type not in (0, 1):
            code = errors.INVALID_REQUEST
            return _election_response({tp: (code, "Unknown election type %d" % election_type)
                                       for tp in wanted or ()}, version, False, code)
        d = apis.controller.elect_leaders(wanted, election_type)

        def elected(results):
            if results is None:  # deposed before the election ran, asked for every partition
                return _election_response({}, version, True, errors.NOT_CONTROLLER)
            expected = {tp: leader for tp, (_, _, leader) in results.items() if leader is not None}
            answer = {tp: (code, message) for tp, (code, message, _) in results.items()}
            if not expected:
                return _election_response(answer, version, wanted is None)

            def published(done):
                for tp in expected:
                    if tp not in done:
                        answer[tp] = (errors.REQUEST_TIMED_OUT, None)
                return _election_response(answer, version, wanted is None)
            return apis.metadata.when_leaders(expected, max(0, body.timeout_ms) / 1000.0).addCallback(published)

        def moved(failure):  # deposed while electing: what is written stays, the client asks again
            failure.trap(ControllerMovedError)
            return _election_response({tp: (errors.NOT_CONTROLLER, None) for tp in wanted or ()}, version,
                                      False)
        return d.addCallbacks(elected, moved)

    @staticmethod
    def error_response(request, code, message):
        return ElectLeadersResponse(
            throttle_time_ms=0, error_code=code if request.api_version >= 1 else errors.NONE,
            replica_election_results=[
            ElectLeadersResponse.ReplicaElectionResult(topic=t.topic, partition_result=[
                ElectLeadersResponse.PartitionResult(partition_id=p, error_code=code, error_message=message)
                for p in t.partitions]) for t in (request.body.topic_partitions or [])])
