"""DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (key 51).

Owns Kafka's request validation and per-user results (``ScramControlManager``/``ScramImage``):
empty names, unknown mechanisms, iteration bounds, a user altered or described twice, deleting
what does not exist. The clients send a salted password; only salt, StoredKey, ServerKey and
iterations are stored (``apis.scram_credentials``, a ``security.credentials`` store).
"""

from zope.interface import provider

from kafkatw.protocol import errors
from kafkatw.protocol.messages import (
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsResponse,
)
from kafkatw.security.scram import (
    MAX_ITERATIONS,
    MECHANISMS,
    MECHANISMS_BY_TYPE,
    credential_from_salted_password,
)
from kafkatw.server.interfaces import IApiHandler

_DUPLICATE_ALTER = "A user credential cannot be altered twice in the same request"


@provider(IApiHandler)
class DescribeUserScramCredentials:
    API_KEY = 50
    VERSIONS = (0, 0)

    @staticmethod
    def handle(apis, request):
        store = apis.scram_credentials
        if store is None:
            return DescribeUserScramCredentials.error_response(request, errors.UNSUPPORTED_VERSION,
                                                               "SCRAM credentials are not kept by this broker")
        Result = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
        Info = DescribeUserScramCredentialsResponse.CredentialInfo
        names = [u.name for u in request.body.users or []]
        duplicated = {n for n in names if names.count(n) > 1}
        results = []
        for user in (dict.fromkeys(names) if names else store.users()):
            if user in duplicated:
                results.append(Result(user=user, error_code=errors.DUPLICATE_RESOURCE,
                                      error_message="Cannot describe SCRAM credentials for the same user "
                                                    "twice in a single request: " + user))
                continue
            infos = [Info(mechanism=MECHANISMS[mech].type_id, iterations=i) for mech, i in store.describe(user)]
            if not infos:
                results.append(Result(user=user, error_code=errors.RESOURCE_NOT_FOUND,
                                      error_message="Attempt to describe a user credential that does not "
                                                    "exist: " + user))
            else:
                results.append(Result(user=user, error_code=errors.NONE, credential_infos=infos))
        return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=errors.NONE, results=results)

    @staticmethod
    def error_response(request, code, message):
        return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=code, error_message=message)


def _check_name_and_mechanism(name, mechanism_type):
    if not name:
        return errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism_type not in MECHANISMS_BY_TYPE:
        return errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


@provider(IApiHandler)
class AlterUserScramCredentials:
    API_KEY = 51
    VERSIONS = (0, 0)

    @staticmethod
    def handle(apis, request):
        store = apis.scram_credentials
        if store is None:
            return AlterUserScramCredentials.error_response(request, errors.UNSUPPORTED_VERSION,
                                                            "SCRAM credentials are not kept by this broker")
        # checked and written with no other change in between (the write runs in a thread)
        return store.exclusively(_alter, store, request.body)

    @staticmethod
    def error_response(request, code, message):
        Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
        names = dict.fromkeys([d.name for d in request.body.deletions or []]
                              + [u.name for u in request.body.upsertions or []])
        return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
            Result(user=n, error_code=code, error_message=message) for n in names])


def _alter(store, body):
    failed = {}  # user -> (code, message)
    deletions = {}
    upserts = {}
    for d in body.deletions or []:
        if d.name in failed:
            continue
        if deletions.pop(d.name, None) is not None:
            failed[d.name] = (errors.DUPLICATE_RESOURCE, _DUPLICATE_ALTER)
            continue
        error = _check_name_and_mechanism(d.name, d.mechanism)
        if error is None and store.get(d.name, MECHANISMS_BY_TYPE[d.mechanism].name) is None:
            error = (errors.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        if error is not None:
            failed[d.name] = error
        else:
            deletions[d.name] = d
    for u in body.upsertions or []:
        if u.name in failed:
            continue
        if deletions.pop(u.name, None) is not None or upserts.pop(u.name, None) is not None:
            failed[u.name] = (errors.DUPLICATE_RESOURCE, _DUPLICATE_ALTER)
            continue
        error = _check_name_and_mechanism(u.name, u.mechanism)
        if error is None:
            mech = MECHANISMS_BY_TYPE[u.mechanism]
            if u.iterations < mech.min_iterations:
                error = (errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
            elif u.iterations > MAX_ITERATIONS:
                error = (errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
            elif not u.salt or not u.salted_password:
                error = (errors.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
        if error is not None:
            failed[u.name] = error
        else:
            upserts[u.name] = u
    Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult

    def response(_=None):
        results = [Result(user=name, error_code=errors.NONE) for name in list(deletions) + list(upserts)]
        results += [Result(user=name, error_code=code, error_message=message)
                    for name, (code, message) in failed.items()]
        return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=results)

    if not (deletions or upserts):
        return response()
    return store.write(
        upsertions=[(u.name, MECHANISMS_BY_TYPE[u.mechanism].name, credential_from_salted_password(
            MECHANISMS_BY_TYPE[u.mechanism], bytes(u.salted_password), bytes(u.salt), u.iterations))
            for u in upserts.values()],
        deletions=[(d.name, MECHANISMS_BY_TYPE[d.mechanism].name) for d in deletions.values()],
    ).addCallback(response)


HANDLERS = (DescribeUserScramCredentials, AlterUserScramCredentials)
