"""DescribeCluster (key 60, v0-v1): the live brokers on the request's listener, the cluster
id, the controller id (on one node itself, as a KRaft broker answers) and the cluster's
authorized operations. Listener selection is shared with ``handlers.metadata``.
"""

from zope.interface import moduleProvides

from kafkatw.protocol import errors
from kafkatw.protocol.messages import DescribeClusterResponse
from kafkatw.security.authorizer import CLUSTER_NAME, ResourceType
from kafkatw.server.handlers.metadata import (
    AUTHORIZED_OPERATIONS_OMITTED,
    authorized_operations,
    broker_endpoints,
)
from kafkatw.server.interfaces import IApiHandler

moduleProvides(IApiHandler)

API_KEY = 60
VERSIONS = (0, 1)

BROKERS_ENDPOINT, CONTROLLERS_ENDPOINT = 1, 2


def handle(apis, request):
    body = request.body
    endpoint_type = body.endpoint_type if request.api_version >= 1 else BROKERS_ENDPOINT
    if endpoint_type == CONTROLLERS_ENDPOINT:
        return error_response(request, errors.MISMATCHED_ENDPOINT_TYPE,
                              "The request was sent to an endpoint of type BROKER, but we wanted "
                              "an endpoint of type CONTROLLER")
    if endpoint_type != BROKERS_ENDPOINT:
        return error_response(request, errors.UNSUPPORTED_ENDPOINT_TYPE,
                              "Unsupported endpoint type %d" % endpoint_type)
    brokers = [DescribeClusterResponse.DescribeClusterBroker(broker_id=node, host=host, port=port, rack=rack)
               for node, host, port, rack in broker_endpoints(apis, request)]
    ops = AUTHORIZED_OPERATIONS_OMITTED
    if body.include_cluster_authorized_operations:
        ops = authorized_operations(apis, request, ResourceType.CLUSTER, CLUSTER_NAME)
    return DescribeClusterResponse(
        throttle_time_ms=0, error_code=errors.NONE, error_message=None, endpoint_type=endpoint_type,
        cluster_id=apis.metadata.cluster_id, controller_id=apis.metadata.controller_id, brokers=brokers,
        cluster_authorized_operations=ops)


def error_response(request, code, message):
    endpoint_type = request.body.endpoint_type if request.api_version >= 1 else BROKERS_ENDPOINT
    return DescribeClusterResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                   endpoint_type=endpoint_type, cluster_id="", controller_id=-1,
                                   brokers=[], cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
