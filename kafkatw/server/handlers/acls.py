"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31): the wire side of Kafka's ``AclApis``.

Owns turning request fields into ACL bindings and filters (unknown or out-of-range codes are
INVALID_REQUEST, as Kafka's request validation does), grouping described ACLs by resource, and
SECURITY_DISABLED without an authorizer. Storing and matching is the authorizer's
(``apis.authorizer``); the DESCRIBE/ALTER on the cluster these APIs need is ``server/authz.py``'s.
"""

from twisted.internet import defer
from zope.interface import provider

from kafkatw.protocol import errors
from kafkatw.protocol.messages import CreateAclsResponse, DeleteAclsResponse, DescribeAclsResponse
from kafkatw.security.authorizer import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclValidationError,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafkatw.server.authz import request_context
from kafkatw.server.interfaces import IApiHandler

NO_AUTHORIZER = "No Authorizer is configured on the broker"
VERSIONS = (0, 3)


def _enum(cls, code, what):
    try:
        return cls(code)
    except ValueError:
        raise AclValidationError("Unknown %s %d" % (what, code)) from None


def _filter_of(f, version):
    pattern_type = f.pattern_type_filter if version >= 1 else PatternType.LITERAL
    rtype = _enum(ResourceType, f.resource_type_filter, "resource type")
    ptype = _enum(PatternType, pattern_type, "pattern type")
    op = _enum(AclOperation, f.operation, "operation")
    perm = _enum(AclPermissionType, f.permission_type, "permission type")
    if rtype == ResourceType.UNKNOWN or ptype == PatternType.UNKNOWN or op == AclOperation.UNKNOWN \
            or perm == AclPermissionType.UNKNOWN:
        raise AclValidationError("The filter must not contain UNKNOWN elements")
    return AclBindingFilter(ResourcePatternFilter(rtype, f.resource_name_filter, ptype),
                            AccessControlEntryFilter(f.principal_filter, f.host_filter, op, perm))


def _binding_of(c, version):
    pattern_type = c.resource_pattern_type if version >= 1 else PatternType.LITERAL
    return AclBinding(
        ResourcePattern(_enum(ResourceType, c.resource_type, "resource type"), c.resource_name,
                        _enum(PatternType, pattern_type, "pattern type")),
        AccessControlEntry(c.principal, c.host, _enum(AclOperation, c.operation, "operation"),
                           _enum(AclPermissionType, c.permission_type, "permission type")))


def _parse_each(items, parse, version):
    """Per item: ``parse(item, version)``, or ``(INVALID_REQUEST, message)`` when it is invalid."""
    slots = []
    for item in items:
        try:
            slots.append(parse(item, version))
        except AclValidationError as e:
            slots.append((errors.INVALID_REQUEST, str(e)))
    return slots


def _grouped(bindings):
    """``[(ResourcePattern, [AccessControlEntry])]`` in a stable order."""
    by_pattern = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    return sorted(by_pattern.items(), key=lambda kv: (kv[0].resource_type, kv[0].pattern_type, kv[0].name))


@provider(IApiHandler)
class DescribeAcls:
    API_KEY = 29
    VERSIONS = VERSIONS

    @staticmethod
    def handle(apis, request):
        if apis.authorizer is None:
            return DescribeAcls.error_response(request, errors.SECURITY_DISABLED, NO_AUTHORIZER)
        try:
            flt = _filter_of(request.body, request.api_version)
        except AclValidationError as e:
            return DescribeAcls.error_response(request, errors.INVALID_REQUEST, str(e))
        d = defer.maybeDeferred(apis.authorizer.acls, flt)

        def respond(bindings):
            Resource = DescribeAclsResponse.DescribeAclsResource
            Description = DescribeAclsResponse.AclDescription
            resources = []
            for pattern, entries in _grouped(bindings):
                if request.api_version == 0 and pattern.pattern_type != PatternType.LITERAL:
                    continue  # v0 cannot say PREFIXED
                resources.append(Resource(
                    resource_type=pattern.resource_type, resource_name=pattern.name,
                    pattern_type=pattern.pattern_type,
                    acls=[Description(principal=e.principal, host=e.host, operation=e.operation,
                                      permission_type=e.permission_type) for e in entries]))
            return DescribeAclsResponse(throttle_time_ms=0, error_code=errors.NONE, error_message=None,
                                        resources=resources)
        return d.addCallback(respond)

    @staticmethod
    def error_response(request, code, message):
        return DescribeAclsResponse(throttle_time_ms=0, error_code=code, error_message=message, resources=[])


def _error_text(e):
    if isinstance(e, AclValidationError):
        return errors.INVALID_REQUEST, str(e)
    if isinstance(e, errors.KafkaError):
        return e.code, e.message
    return errors.UNKNOWN_SERVER_ERROR, str(e)


@provider(IApiHandler)
class CreateAcls:
    API_KEY = 30
    VERSIONS = VERSIONS

    @staticmethod
    def handle(apis, request):
        if apis.authorizer is None:
            return CreateAcls.error_response(request, errors.SECURITY_DISABLED, NO_AUTHORIZER)
        Result = CreateAclsResponse.AclCreationResult
        # per creation: a binding to create, or an (error, message) known already
        slots = _parse_each(request.body.creations, _binding_of, request.api_version)
        bindings = [s for s in slots if isinstance(s, AclBinding)]
        d = defer.maybeDeferred(apis.authorizer.create_acls, request_context(request), bindings)

        def respond(outcomes):
            outcomes = iter(list(outcomes))
            results = []
            for s in slots:
                if isinstance(s, AclBinding):
                    outcome = next(outcomes)
                    if outcome is None:
                        results.append(Result(error_code=errors.NONE, error_message=None))
                    else:
                        code, message = _error_text(outcome)
                        results.append(Result(error_code=code, error_message=message))
                else:
                    results.append(Result(error_code=s[0], error_message=s[1]))
            return CreateAclsResponse(throttle_time_ms=0, results=results)
        return d.addCallback(respond)

    @staticmethod
    def error_response(request, code, message):
        Result = CreateAclsResponse.AclCreationResult
        return CreateAclsResponse(throttle_time_ms=0, results=[
            Result(error_code=code, error_message=message) for _ in request.body.creations])


@provider(IApiHandler)
class DeleteAcls:
    API_KEY = 31
    VERSIONS = VERSIONS

    @staticmethod
    def handle(apis, request):
        if apis.authorizer is None:
            return DeleteAcls.error_response(request, errors.SECURITY_DISABLED, NO_AUTHORIZER)
        version = request.api_version
        FilterResult = DeleteAclsResponse.DeleteAclsFilterResult
        Matching = DeleteAclsResponse.DeleteAclsMatchingAcl
        slots = _parse_each(request.body.filters, _filter_of, version)
        filters = [s for s in slots if isinstance(s, AclBindingFilter)]
        d = defer.maybeDeferred(apis.authorizer.delete_acls, request_context(request), filters)

        def respond(outcomes):
            outcomes = iter(list(outcomes))
            results = []
            for s in slots:
                if not isinstance(s, AclBindingFilter):
                    results.append(FilterResult(error_code=s[0], error_message=s[1], matching_acls=[]))
                    continue
                outcome = next(outcomes)
                if isinstance(outcome, Exception):
                    code, message = _error_text(outcome)
                    results.append(FilterResult(error_code=code, error_message=message, matching_acls=[]))
                    continue
                results.append(FilterResult(error_code=errors.NONE, error_message=None, matching_acls=[
                    Matching(error_code=errors.NONE, error_message=None,
                             resource_type=b.pattern.resource_type, resource_name=b.pattern.name,
                             pattern_type=b.pattern.pattern_type, principal=b.entry.principal,
                             host=b.entry.host, operation=b.entry.operation,
                             permission_type=b.entry.permission_type)
                    for b in outcome if version >= 1 or b.pattern.pattern_type == PatternType.LITERAL]))
            return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)
        return d.addCallback(respond)

    @staticmethod
    def error_response(request, code, message):
        FilterResult = DeleteAclsResponse.DeleteAclsFilterResult
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
            FilterResult(error_code=code, error_message=message, matching_acls=[])
            for _ in request.body.filters])


HANDLERS = (DescribeAcls, CreateAcls, DeleteAcls)
