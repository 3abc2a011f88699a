"""InitProducerId (key 22, v0-v5): for idempotent producers a fresh producer id (never reused,
the metadata store persists the id block high-water) and epoch 0; a transactional id goes to the
transaction coordinator (epoch bumps, fencing, KIP-360 retries). Without a coordinator it is
refused clearly.
"""

from twisted.logger import Logger
from zope.interface import moduleProvides

from kafkatw.protocol import errors
from kafkatw.protocol.messages import InitProducerIdResponse
from kafkatw.server.interfaces import IApiHandler

moduleProvides(IApiHandler)

log = Logger()

API_KEY = 22
VERSIONS = (0, 5)


def handle(apis, request):
    body = request.body
    transactional_id = body.transactional_id
    if transactional_id is None:
        # Kafka's TransactionCoordinator.handleInitProducerId: without a transactional id the
        # request is accepted blindly with a new producer id at epoch 0, even when it names an
        # existing producer id/epoch (KIP-360 bumps only apply to transactional producers).
        d = apis.metadata.next_producer_id()  # durable before it is handed out
        return d.addCallback(lambda producer_id: InitProducerIdResponse(
            throttle_time_ms=0, error_code=errors.NONE, producer_id=producer_id, producer_epoch=0))
    if transactional_id == "":
        return error_response(request, errors.INVALID_REQUEST, None)
    coordinator = apis.txn_coordinator
    if coordinator is None:
        log.info("InitProducerId for transactional id {tid} refused: no transaction coordinator",
                 tid=transactional_id)
        return error_response(request, errors.COORDINATOR_NOT_AVAILABLE, None)
    version = request.api_version
    expected_pid = body.producer_id if version >= 3 else -1
    expected_epoch = body.producer_epoch if version >= 3 else -1
    d = coordinator.handle_init_producer_id(transactional_id, body.transaction_timeout_ms,
                                            expected_pid, expected_epoch)

    def respond(result):
        code = result.error
        if code == errors.PRODUCER_FENCED and version < 4:
            code = errors.INVALID_PRODUCER_EPOCH  # KIP-588: older clients know this one
        return InitProducerIdResponse(throttle_time_ms=0, error_code=code,
                                      producer_id=result.producer_id,
                                      producer_epoch=result.producer_epoch)

    return d.addCallback(respond)


def error_response(request, code, message):
    return InitProducerIdResponse(throttle_time_ms=0, error_code=code, producer_id=-1, producer_epoch=-1)
