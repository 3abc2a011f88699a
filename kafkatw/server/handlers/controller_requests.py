"""The controller's requests to a cluster-mode broker (LeaderAndIsr, UpdateMetadata, StopReplica),
and AlterPartition and ControlledShutdown from brokers to the controller, with Kafka's epoch checks
(STALE_CONTROLLER_EPOCH, STALE_BROKER_EPOCH). Registered only in cluster mode.

What the requests do belongs to the replica manager, the metadata cache and the controller.
"""

from twisted.internet import defer
from zope.interface import provider

from kafkatw.protocol import errors
from kafkatw.protocol.messages import (
    AlterPartitionResponse,
    ControlledShutdownResponse,
    LeaderAndIsrResponse,
    StopReplicaResponse,
    UpdateMetadataResponse,
)
from kafkatw.server.interfaces import IApiHandler


def _epoch_error(apis, body):
    """Kafka's KafkaApis checks: an older registration of this broker, an older controller."""
    meta = apis.metadata
    if meta.is_broker_epoch_stale(body.broker_epoch):
        return errors.STALE_BROKER_EPOCH
    return meta.check_controller_epoch(body.controller_epoch)


@provider(IApiHandler)
class UpdateMetadata:
    API_KEY = 6
    VERSIONS = (7, 8)

    @staticmethod
    def handle(apis, request):
        code = _epoch_error(apis, request.body)
        if code != errors.NONE:
            return UpdateMetadataResponse(error_code=code)
        apis.metadata.update_metadata(request.body)
        return UpdateMetadataResponse(error_code=errors.NONE)

    @staticmethod
    def error_response(request, code, message):
        return UpdateMetadataResponse(error_code=code)


@provider(IApiHandler)
class LeaderAndIsr:
    API_KEY = 4
    VERSIONS = (5, 7)

    @staticmethod
    def handle(apis, request):
        body = request.body
        code = _epoch_error(apis, body)
        if code != errors.NONE:
            return LeaderAndIsr.error_response(request, code, None)
        states = [p for t in body.topic_states for p in t.partition_states]
        topic_ids = {t.topic_name: t.topic_id for t in body.topic_states}
        for t in body.topic_states:
            for p in t.partition_states:
                p.topic_name = t.topic_name
        live_leaders = {b.broker_id: (b.host_name, b.port) for b in body.live_leaders}
        d = apis.metadata.topic_configs_loaded(sorted(topic_ids))
        d.addCallback(lambda _: apis.replica_manager.become_leader_or_follower(
            body.controller_id, body.controller_epoch, states, topic_ids, live_leaders))

        def answer(results):
            by_topic = {}
            for (topic, partition), err in sorted(results.items()):
                by_topic.setdefault(topic, []).append(LeaderAndIsrResponse.LeaderAndIsrPartitionError(
                    topic_name=topic, partition_index=partition, error_code=err))
            return LeaderAndIsrResponse(error_code=errors.NONE, topics=[
                LeaderAndIsrResponse.LeaderAndIsrTopicError(topic_id=topic_ids[t], partition_errors=errs)
                for t, errs in by_topic.items()])
        return d.addCallback(answer)

    @staticmethod
    def error_response(request, code, message):
        body = request.body
        return LeaderAndIsrResponse(error_code=code, topics=[
            LeaderAndIsrResponse.LeaderAndIsrTopicError(topic_id=t.topic_id, partition_errors=[
                LeaderAndIsrResponse.LeaderAndIsrPartitionError(
                    topic_name=t.topic_name, partition_index=p.partition_index, error_code=code)
                for p in t.partition_states]) for t in body.topic_states])


@provider(IApiHandler)
class StopReplica:
    API_KEY = 5
    VERSIONS = (3, 4)

    @staticmethod
    def handle(apis, request):
        body = request.body
        code = _epoch_error(apis, body)
        if code != errors.NONE:
            return StopReplica.error_response(request, code, None)
        partitions = [(t.topic_name, p.partition_index, p.leader_epoch, p.delete_partition)
                      for t in body.topic_states for p in t.partition_states]
        d = defer.maybeDeferred(apis.replica_manager.stop_replicas, body.controller_id, body.controller_epoch,
                                partitions)

        def answer(results):
            return StopReplicaResponse(error_code=errors.NONE, partition_errors=[
                StopReplicaResponse.StopReplicaPartitionError(topic_name=t, partition_index=p, error_code=err)
                for (t, p), err in sorted(results.items())])
        return d.addCallback(answer)

    @staticmethod
    def error_response(request, code, message):
        return StopReplicaResponse(error_code=code, partition_errors=[
            StopReplicaResponse.StopReplicaPartitionError(topic_name=t.topic_name, partition_index=p.partition_index,
                                                          error_code=code)
            for t in request.body.topic_states for p in t.partition_states])


@provider(IApiHandler)
class AlterPartition:
    """Answered by the active controller (NOT_CONTROLLER elsewhere, as a ZooKeeper-mode broker)."""

    API_KEY = 56
    VERSIONS = (0, 3)

    @staticmethod
    def handle(apis, request):
        controller = apis.controller
        if controller is None or not controller.active:
            return AlterPartitionResponse(error_code=errors.NOT_CONTROLLER, topics=[])
        return controller.alter_partition(request.body, request.api_version)

    @staticmethod
    def error_response(request, code, message):
        return AlterPartitionResponse(error_code=code, topics=[])


@provider(IApiHandler)
class ControlledShutdown:
    """A stopping broker asks the active controller to move its leaderships (v2+: with its epoch)."""

    API_KEY = 7
    VERSIONS = (1, 3)

    @staticmethod
    def handle(apis, request):
        controller = apis.controller
        if controller is None or not controller.active:
            return ControlledShutdown.error_response(request, errors.NOT_CONTROLLER, None)
        body = request.body
        epoch = body.broker_epoch if request.api_version >= 2 else -1
        d = controller.controlled_shutdown(body.broker_id, epoch)

        def answer(result):
            code, remaining = result
            return ControlledShutdownResponse(error_code=code, remaining_partitions=[
                ControlledShutdownResponse.RemainingPartition(topic_name=t, partition_index=p)
                for t, p in remaining])
        return d.addCallback(answer)

    @staticmethod
    def error_response(request, code, message):
        return ControlledShutdownResponse(error_code=code, remaining_partitions=[])


def apply_quota_changes(quotas, changes):
    """Client quotas changed in the cluster's store (through another broker, or read at start)."""
    from kafkatw.server.handlers.client_quotas import apply_changes

    apply_changes(quotas, changes)


HANDLERS = (UpdateMetadata, LeaderAndIsr, StopReplica, AlterPartition, ControlledShutdown)
