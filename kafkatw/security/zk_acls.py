"""ACLs kept in ZooKeeper, as Kafka's AclAuthorizer keeps them in ZooKeeper mode, so every broker
of a cluster enforces the same ACLs: one node per resource pattern holding its entries (Kafka's
JSON: ``{"version":1,"acls":[{"principal","permissionType","operation","host"}]}`` with Kafka's
names, "Allow", "Read", "Topic"), written at the version it was read at, and a change
notification per write that the other brokers follow to reload that one resource.

Owns that JSON, the read-modify-write retries and following the notifications. The ZooKeeper
calls are the cluster coordinator's (``cluster/zk.py``), handed in by the broker, never imported;
deciding and caching stays with ``security/acl_authorizer.py``.
"""

import json
import time

from twisted.internet import defer
from twisted.logger import Logger

from kafkatw.security.authorizer import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

log = Logger(namespace="kafkatw.security.zk_acls")

#: the coordinator methods this store needs (a coordinator plug-in without them cannot keep ACLs)
REQUIRED = ("acl_resources", "resource_acls", "write_resource_acls", "acl_changes")
#: read-modify-write attempts when other brokers keep changing the same resource
MAX_ATTEMPTS = 50
#: change notifications older than this go (Kafka's 15 minutes), checked at most once a minute
CHANGE_EXPIRATION_MS = 15 * 60 * 1000
PURGE_INTERVAL_S = 60

_TYPE_NAMES = {ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group", ResourceType.CLUSTER: "Cluster",
               ResourceType.TRANSACTIONAL_ID: "TransactionalId",
               ResourceType.DELEGATION_TOKEN: "DelegationToken", ResourceType.USER: "User"}
_OPERATION_NAMES = {AclOperation.ALL: "All", AclOperation.READ: "Read", AclOperation.WRITE: "Write",
                    AclOperation.CREATE: "Create", AclOperation.DELETE: "Delete", AclOperation.ALTER: "Alter",
                    AclOperation.DESCRIBE: "Describe", AclOperation.CLUSTER_ACTION: "ClusterAction",
                    AclOperation.DESCRIBE_CONFIGS: "DescribeConfigs",
                    AclOperation.ALTER_CONFIGS: "AlterConfigs", AclOperation.IDEMPOTENT_WRITE: "IdempotentWrite",
                    AclOperation.CREATE_TOKENS: "CreateTokens", AclOperation.DESCRIBE_TOKENS: "DescribeTokens"}
_PERMISSION_NAMES = {AclPermissionType.ALLOW: "Allow", AclPermissionType.DENY: "Deny"}
_TYPES = {v: k for k, v in _TYPE_NAMES.items()}
_OPERATIONS = {v: k for k, v in _OPERATION_NAMES.items()}
_PERMISSIONS = {v: k for k, v in _PERMISSION_NAMES.items()}
STORED_PATTERN_TYPES = (PatternType.LITERAL, PatternType.PREFIXED)


def encode_entries(entries):
    """A resource node's JSON for ``entries`` (AccessControlEntry), in a stable order."""
    acls = [{"principal": e.principal, "permissionType": _PERMISSION_NAMES[e.permission_type],
             "operation": _OPERATION_NAMES[e.operation], "host": e.host}
            for e in sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission_type))]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":"), sort_keys=True).encode("utf-8")


def decode_entries(data):
    """The entries of a resource node (an empty node has none)."""
    if not data:
        return frozenset()
    doc = json.loads(data.decode("utf-8"))
    return frozenset(AccessControlEntry(a["principal"], a["host"], _OPERATIONS[a["operation"]],
                                        _PERMISSIONS[a["permissionType"]]) for a in doc.get("acls", ()))


def pattern_of(pattern_type, zk_type, name):
    return ResourcePattern(_TYPES[zk_type], name, PatternType[pattern_type])


def _key(pattern):
    return pattern.pattern_type.name, _TYPE_NAMES[pattern.resource_type]


class ConcurrentAclUpdate(RuntimeError):
    """Other brokers kept changing the resource's ACLs; nothing was written."""


class ZkAclStore:
    """The cluster's ACLs in ZooKeeper through ``coordinator`` (``cluster.zk.ZkClusterCoordinator``)."""

    def __init__(self, coordinator, clock=None):
        self.coordinator = coordinator
        self._clock = clock  # ``seconds()``; the wall clock when None
        self._last_purge = {}
        self._seen = {}  # pattern type name -> the last change notification handled
        self._on_change = None
        self._watches = {}
        self._session_lost = False

    @defer.inlineCallbacks
    def load(self):
        """Every stored ACL binding. The notifications present are taken as seen first, so a
        change made while loading is reloaded after (reloading a resource is idempotent)."""
        for pattern_type in STORED_PATTERN_TYPES:
            changes = yield self.coordinator.acl_changes(pattern_type.name)
            self._seen[pattern_type.name] = changes[-1][0] if changes else ""
        bindings = []
        for pattern_type in STORED_PATTERN_TYPES:
            for zk_type, name, data in (yield self.coordinator.acl_resources(pattern_type.name)):
                if zk_type not in _TYPES:
                    continue  # a resource type this broker does not know: Kafka skips it too
                pattern = pattern_of(pattern_type.name, zk_type, name)
                bindings.extend(AclBinding(pattern, e) for e in decode_entries(data))
        return bindings

    @defer.inlineCallbacks
    def update(self, pattern, add=(), remove=()):
        """Add and remove entries of one resource pattern at the version read (retried when
        another broker wrote first); the resource's entries after it."""
        pattern_type, zk_type = _key(pattern)
        for _ in range(MAX_ATTEMPTS):
            data, version = yield self.coordinator.resource_acls(pattern_type, zk_type, pattern.name)
            current = decode_entries(data)
            wanted = (current | frozenset(add)) - frozenset(remove)
            if wanted == current:
                return current
            written = yield self.coordinator.write_resource_acls(
                pattern_type, zk_type, pattern.name, encode_entries(wanted) if wanted else None, version)
            if written:
                return wanted
        raise ConcurrentAclUpdate("the ACLs of %s kept changing; try again" % (pattern,))

    def follow(self, on_change):
        """Call ``on_change(pattern, entries)`` for every resource another broker (or this one)
        changes from now on."""
        self._on_change = on_change
        for pattern_type in STORED_PATTERN_TYPES:
            name = pattern_type.name
            # one watch callback per store for good (the coordinator keeps one watcher per callback)
            self._watches[name] = lambda name=name: self._poll(name)
            self._poll(name)
        listen = getattr(self.coordinator, "add_state_listener", None)
        if listen is not None:
            listen(self._session_state)

    def _session_state(self, state):
        """A new ZooKeeper session has none of the old one's watches: read what was missed."""
        if state == "LOST":
            self._session_lost = True
        elif state == "CONNECTED" and self._session_lost:
            self._session_lost = False
            for name in self._watches:
                self._poll(name)

    def _poll(self, pattern_type):
        d = self.coordinator.acl_changes(pattern_type, watch=self._watches[pattern_type],
                                         after=self._seen.get(pattern_type, ""))
        d.addCallback(self._changed, pattern_type)
        d.addErrback(lambda f: log.failure("following ACL changes in ZooKeeper failed", f))

    def _maybe_purge(self, pattern_type):
        """Kafka's purgeObsoleteNotifications, off the path that applies the changes."""
        now = self._clock.seconds() if self._clock is not None else time.time()
        last = self._last_purge.get(pattern_type)
        if last is not None and now - last < PURGE_INTERVAL_S:
            return
        self._last_purge[pattern_type] = now
        purge = getattr(self.coordinator, "purge_acl_changes", None)
        if purge is not None:
            purge(pattern_type, CHANGE_EXPIRATION_MS, int(now * 1000)).addErrback(
                lambda f: log.info("purging old ACL change notifications failed: {err}", err=f.getErrorMessage()))

    @defer.inlineCallbacks
    def _changed(self, changes, pattern_type):
        if changes:
            self._maybe_purge(pattern_type)
        for notification, zk_type, name in changes:
            if notification <= self._seen.get(pattern_type, ""):
                continue
            self._seen[pattern_type] = notification
            if zk_type not in _TYPES:
                continue
            data, _ = yield self.coordinator.resource_acls(pattern_type, zk_type, name)
            self._on_change(pattern_of(pattern_type, zk_type, name), decode_entries(data))
