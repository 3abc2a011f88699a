"""Authorization's vocabulary: Kafka's ACL enums, resource patterns, ACL bindings and filters,
the ``IAuthorizer`` interface (KIP-504's shape), and the one function that turns a configured
``authorizer.class.name`` into a verified authorizer (or None when authorization is off).

It decides nothing itself: the default ACL authorizer is ``security/acl_authorizer.py`` and the
per-API checks live with the handlers (``server/authz.py``).
"""

import enum
import typing

import attr
from zope.interface import Interface

from kafkatw.security.principal import KafkaPrincipal

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class AuthorizationResult(enum.IntEnum):
    ALLOWED = 0
    DENIED = 1


ALLOWED = AuthorizationResult.ALLOWED
DENIED = AuthorizationResult.DENIED

# The operations each resource type supports, for authorized-operations bit sets (Kafka's
# AclEntry.supportedOperations).
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


@attr.s(frozen=True, slots=True)
class ResourcePattern:
    """A resource (type, name) with how the name matches: LITERAL (``*`` = every name) or PREFIXED."""

    resource_type = attr.ib(converter=ResourceType)
    name = attr.ib()
    pattern_type = attr.ib(converter=PatternType, default=PatternType.LITERAL)

    def __str__(self):
        return "ResourcePattern(resourceType=%s, name=%s, patternType=%s)" % (
            self.resource_type.name, self.name, self.pattern_type.name)


@attr.s(frozen=True, slots=True)
class AccessControlEntry:
    """Who (``User:name`` text, ``User:*``), from where (host or ``*``), what, allow or deny."""

    principal = attr.ib()
    host = attr.ib()
    operation = attr.ib(converter=AclOperation)
    permission_type = attr.ib(converter=AclPermissionType)

    def __str__(self):
        return "(principal=%s, host=%s, operation=%s, permissionType=%s)" % (
            self.principal, self.host, self.operation.name, self.permission_type.name)


@attr.s(frozen=True, slots=True)
class AclBinding:
    pattern = attr.ib()  # ResourcePattern
    entry = attr.ib()  # AccessControlEntry

    def __str__(self):
        return "(pattern=%s, entry=%s)" % (self.pattern, self.entry)


@attr.s(frozen=True, slots=True)
class ResourcePatternFilter:
    """``None`` name matches any name; ANY type/pattern match any; MATCH finds the patterns that
    would apply to the literal ``name`` (literal, ``*`` and prefixes of it)."""

    resource_type = attr.ib(converter=ResourceType)
    name = attr.ib()
    pattern_type = attr.ib(converter=PatternType)

    def matches(self, pattern):
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return False


@attr.s(frozen=True, slots=True)
class AccessControlEntryFilter:
    principal = attr.ib()  # None = any
    host = attr.ib()  # None = any
    operation = attr.ib(converter=AclOperation)
    permission_type = attr.ib(converter=AclPermissionType)

    def matches(self, entry):
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and self.operation in (AclOperation.ANY, entry.operation)
                and self.permission_type in (AclPermissionType.ANY, entry.permission_type))


@attr.s(frozen=True, slots=True)
class AclBindingFilter:
    pattern = attr.ib()  # ResourcePatternFilter
    entry = attr.ib()  # AccessControlEntryFilter

    def matches(self, binding):
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)


ANY_FILTER = AclBindingFilter(ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY),
                              AccessControlEntryFilter(None, None, AclOperation.ANY, AclPermissionType.ANY))


@attr.s(frozen=True, slots=True)
class Action:
    """One thing a request wants to do (Kafka's ``Action``): the operation, the resource
    (a LITERAL :class:`ResourcePattern`), how many times the request refers to it, and whether
    the audit log names it when allowed / denied. Immutable: the broker reuses one object for
    every request naming the same action (an authorizer may cache decisions by its identity)."""

    operation = attr.ib(converter=AclOperation)
    resource = attr.ib()
    count = attr.ib(default=1)
    log_if_allowed = attr.ib(default=True)
    log_if_denied = attr.ib(default=True)


class AuthorizableRequestContext(typing.NamedTuple):
    """What an authorizer is told about the request (Kafka's ``AuthorizableRequestContext``).

    A named tuple: the broker makes one for every request it authorizes, and a tuple is made
    without running Python code."""

    principal: KafkaPrincipal
    host: str  # the client's address, e.g. "127.0.0.1"
    listener_name: typing.Optional[str] = None
    security_protocol: typing.Optional[str] = None
    request_type: typing.Optional[int] = None  # API key
    request_version: typing.Optional[int] = None
    client_id: typing.Optional[str] = None
    correlation_id: typing.Optional[int] = None


class AclValidationError(ValueError):
    """An ACL that cannot be created; the message is Kafka's INVALID_REQUEST text."""


def validate_binding(binding):
    """Raise :class:`AclValidationError` for what Kafka refuses to store (unknown/ANY elements,
    MATCH/ANY patterns, an empty name, a CLUSTER not named kafka-cluster, a bad principal)."""
    p, e = binding.pattern, binding.entry
    if p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise AclValidationError("Invalid resourceType %s" % p.resource_type.name)
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclValidationError("Invalid patternType %s" % p.pattern_type.name)
    if e.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise AclValidationError("Invalid operation %s" % e.operation.name)
    if e.permission_type in (AclPermissionType.UNKNOWN, AclPermissionType.ANY):
        raise AclValidationError("Invalid permissionType %s" % e.permission_type.name)
    if not p.name:
        raise AclValidationError("Resource name should not be empty")
    if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        raise AclValidationError("The only valid name for the CLUSTER resource is %s" % CLUSTER_NAME)
    if e.host is None or e.host == "":
        raise AclValidationError("Invalid host")
    try:
        principal = KafkaPrincipal.from_string(e.principal)
    except ValueError:
        raise AclValidationError("Could not parse principal from `%s` (no colon is present separating the "
                                 "principal type from the principal name)" % (e.principal,)) from None
    if not principal.name:
        raise AclValidationError("Invalid principal %s" % e.principal)


class IAuthorizer(Interface):
    """Kafka's ``org.apache.kafka.server.authorizer.Authorizer`` (KIP-504) in Python.

    Every method may answer directly or with a Deferred (an authorizer backed by a remote
    service): a request waiting on one is parked like any other pending answer.
    """

    def start(server_info):
        """Called once before the broker serves, with the broker's ``AuthorizerServerInfo``
        (cluster id, broker id, config, log dirs, ``run_blocking``, reactor); may return a
        Deferred, which the listeners wait for."""

    def stop():
        """Called when the broker stops; may return a Deferred."""

    def authorize(context, actions):
        """``[ALLOWED | DENIED]``, one per :class:`Action`, for an :class:`AuthorizableRequestContext`."""

    def create_acls(context, bindings):
        """One result per :class:`AclBinding`: None when created, else an exception (its message
        is sent to the client; :class:`AclValidationError` is INVALID_REQUEST)."""

    def delete_acls(context, filters):
        """One result per :class:`AclBindingFilter`: the list of :class:`AclBinding` deleted, or
        an exception."""

    def acls(filter):
        """The :class:`AclBinding` s matching an :class:`AclBindingFilter`."""


def load_authorizer(config):
    """The :class:`IAuthorizer` that ``authorizer.class.name`` names (through the plug-in
    registry, verified and configured with the broker's properties), or None when it is empty."""
    from kafkatw import registry

    name = config["authorizer.class.name"]
    if not name or not name.strip():
        return None
    # Kafka's configure() sees every property, the authorizer's own keys too (typed where defined)
    configs = dict(config.originals, **config.values())
    return registry.load("authorizer.class.name", name, IAuthorizer, configs=configs)
