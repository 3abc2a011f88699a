"""SaslHandshake (key 17, v0-v1) and SaslAuthenticate (key 36, v0-v2) as KafkaApis sees them.

On a SASL listener both are answered by ``network.authenticator`` before any request reaches
the handlers (as Kafka's ``SaslServerAuthenticator``); what arrives here came over a listener
without SASL, or after authentication, and gets Kafka's ILLEGAL_SASL_STATE. Registering them
also makes ApiVersions advertise them, which SASL clients require.
"""

from zope.interface import provider

from kafkatw.protocol import errors
from kafkatw.protocol.messages import SaslAuthenticateResponse, SaslHandshakeResponse
from kafkatw.server.interfaces import IApiHandler


@provider(IApiHandler)
class SaslHandshake:
    API_KEY = 17
    VERSIONS = (0, 1)

    @staticmethod
    def handle(apis, request):
        return SaslHandshakeResponse(error_code=errors.ILLEGAL_SASL_STATE, mechanisms=[])

    @staticmethod
    def error_response(request, code, message):
        return SaslHandshakeResponse(error_code=code, mechanisms=[])


@provider(IApiHandler)
class SaslAuthenticate:
    API_KEY = 36
    VERSIONS = (0, 2)

    @staticmethod
    def handle(apis, request):
        return SaslAuthenticate.error_response(
            request, errors.ILLEGAL_SASL_STATE, "SaslAuthenticate request received after successful "
            "authentication" if request.context.security_protocol.startswith("SASL_")
            else "SaslAuthenticate request received on a listener without SASL")

    @staticmethod
    def error_response(request, code, message):
        return SaslAuthenticateResponse(error_code=code, error_message=message, auth_bytes=b"")


HANDLERS = (SaslHandshake, SaslAuthenticate)
