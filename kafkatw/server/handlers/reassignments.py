"""AlterPartitionReassignments (key 45) and ListPartitionReassignments (46), KIP-455: answered
by the active controller, NOT_CONTROLLER elsewhere (as a ZooKeeper-mode Kafka broker).
Registered only in cluster mode; ALTER / DESCRIBE on the cluster are checked by the gates.

What a reassignment does belongs to ``kafkatw.controller.reassignment``.
"""

from zope.interface import provider

from kafkatw.protocol import errors
from kafkatw.protocol.messages import AlterPartitionReassignmentsResponse, ListPartitionReassignmentsResponse
from kafkatw.server.interfaces import IApiHandler

_NOT_CONTROLLER = "This is not the correct controller for this cluster."


def _controller(apis):
    controller = apis.controller
    return controller if controller is not None and controller.active else None


@provider(IApiHandler)
class AlterPartitionReassignments:
    API_KEY = 45
    VERSIONS = (0, 0)

    @staticmethod
    def handle(apis, request):
        R = AlterPartitionReassignmentsResponse
        controller = _controller(apis)
        if controller is None:
            return AlterPartitionReassignments.error_response(request, errors.NOT_CONTROLLER, _NOT_CONTROLLER)
        targets = {}
        for t in request.body.topics:
            for p in t.partitions:
                targets[(t.name, p.partition_index)] = None if p.replicas is None else list(p.replicas)

        def answer(results):
            if any(code == errors.NOT_CONTROLLER for code, _ in results.values()):
                return AlterPartitionReassignments.error_response(request, errors.NOT_CONTROLLER, _NOT_CONTROLLER)
            topics = []
            for t in request.body.topics:
                topics.append(R.ReassignableTopicResponse(name=t.name, partitions=[
                    R.ReassignablePartitionResponse(
                        partition_index=p.partition_index,
                        error_code=results[(t.name, p.partition_index)][0],
                        error_message=results[(t.name, p.partition_index)][1])
                    for p in t.partitions]))
            return R(throttle_time_ms=0, error_code=errors.NONE, error_message=None, responses=topics)
        return controller.alter_partition_reassignments(targets).addCallback(answer)

    @staticmethod
    def error_response(request, code, message):
        R = AlterPartitionReassignmentsResponse
        return R(throttle_time_ms=0, error_code=code, error_message=message, responses=[
            R.ReassignableTopicResponse(name=t.name, partitions=[
                R.ReassignablePartitionResponse(partition_index=p.partition_index, error_code=code,
                                                error_message=message) for p in t.partitions])
            for t in request.body.topics])


@provider(IApiHandler)
class ListPartitionReassignments:
    API_KEY = 46
    VERSIONS = (0, 0)

    @staticmethod
    def handle(apis, request):
        R = ListPartitionReassignmentsResponse
        controller = _controller(apis)
        if controller is None:
            return ListPartitionReassignments.error_response(request, errors.NOT_CONTROLLER, _NOT_CONTROLLER)
        wanted = None
        if request.body.topics is not None:
            wanted = [(t.name, p) for t in request.body.topics for p in t.partition_indexes]

        def answer(found):
            if found is None:
                return ListPartitionReassignments.error_response(request, errors.NOT_CONTROLLER, _NOT_CONTROLLER)
            by_topic = {}
            for (topic, p), a in sorted(found.items()):
                by_topic.setdefault(topic, []).append(R.OngoingPartitionReassignment(
                    partition_index=p, replicas=list(a.replicas), adding_replicas=list(a.adding),
                    removing_replicas=list(a.removing)))
            return R(throttle_time_ms=0, error_code=errors.NONE, error_message=None, topics=[
                R.OngoingTopicReassignment(name=t, partitions=ps) for t, ps in by_topic.items()])
        return controller.list_partition_reassignments(wanted).addCallback(answer)

    @staticmethod
    def error_response(request, code, message):
        return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                                  topics=[])


HANDLERS = (AlterPartitionReassignments, ListPartitionReassignments)
