"""ApiVersions (key 18, v0-v4): the served API ranges, and the feature lists under the rule
that keeps old librdkafka (< 2.1.2, e.g. Debian's kcat on 2.0.2) working: such clients never
get non-empty tagged fields. It does not decide the ranges (``KafkaApis.register`` does).
"""

import re

from zope.interface import moduleProvides

from kafkatw.protocol import errors
from kafkatw.protocol.messages import ApiVersionsResponse
from kafkatw.server.interfaces import IApiHandler

moduleProvides(IApiHandler)

API_KEY = 18
VERSIONS = (0, 4)

# Kafka's ApiVersionsRequest.isValid: name and version match this when sent (v3+).
_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")

# librdkafka before 2.1.2 mis-skips non-empty tagged fields in responses.
_TAG_SAFE_LIBRDKAFKA = (2, 1, 2)


def parse_version(text):
    """Leading numeric components of a version string: '2.0.2' -> (2, 0, 2); '' -> ()."""
    out = []
    for part in re.split(r"[.\-+]", text or ""):
        m = re.match(r"\d+", part)
        if not m:
            break
        out.append(int(m.group(0)))
        if m.end() != len(part):
            break
    return tuple(out)


def mis_skips_tagged_fields(software_name, software_version):
    """True for clients known to mishandle non-empty tagged fields in responses."""
    if (software_name or "").lower() != "librdkafka":
        return False
    version = parse_version(software_version)
    return not version or version < _TAG_SAFE_LIBRDKAFKA


def _software(request):
    body = request.body
    name = getattr(body, "client_software_name", "") or ""
    version = getattr(body, "client_software_version", "") or ""
    if not name:
        ctx = request.context
        name = getattr(ctx, "client_software_name", "") or ""
        version = getattr(ctx, "client_software_version", "") or ""
    return name, version


def handle(apis, request):
    version = request.api_version
    body = request.body
    if version >= 3:
        name = getattr(body, "client_software_name", "")
        sw_version = getattr(body, "client_software_version", "")
        if not (_SOFTWARE.match(name or "") and _SOFTWARE.match(sw_version or "")):
            return error_response(request, errors.INVALID_REQUEST, None)
    response = ApiVersionsResponse(
        error_code=errors.NONE,
        api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=key, min_version=lo, max_version=hi)
            for key, (lo, hi) in sorted(apis.api_versions().items())
        ],
        throttle_time_ms=0,
    )
    if version >= 3 and not mis_skips_tagged_fields(*_software(request)):
        supported = apis.supported_features
        if version < 4:
            # v0-v3 clients choke on a MinVersion of 0; Kafka omits those features.
            supported = [f for f in supported if f[1] != 0]
        response.supported_features = [
            ApiVersionsResponse.SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
            for n, lo, hi in supported
        ]
        if apis.finalized_features_epoch >= 0:
            response.finalized_features_epoch = apis.finalized_features_epoch
            response.finalized_features = [
                ApiVersionsResponse.FinalizedFeatureKey(name=n, min_version_level=lo, max_version_level=hi)
                for n, lo, hi in apis.finalized_features
            ]
    return response


def error_response(request, code, message):
    return ApiVersionsResponse(error_code=code, api_keys=[], throttle_time_ms=0)
