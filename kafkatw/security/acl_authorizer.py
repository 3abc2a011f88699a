"""The default authorizer: Kafka's ACL semantics (``AclAuthorizer`` / ``StandardAuthorizer``).

Owns deciding an action against the ACLs (super users, LITERAL/``*``/PREFIXED patterns,
``User:*`` and host wildcards, DENY before ALLOW, implied DESCRIBE/DESCRIBE_CONFIGS, ALL,
``allow.everyone.if.no.acl.found``), the audit log (``kafka.authorizer.logger``), and keeping
the ACLs: in memory for checks (no I/O per request), durable in one JSON file in the metadata
log dir, each change written (temp, fsync, rename) off the reactor and visible once on disk.
In cluster mode (``zookeeper.connect``) the ACLs are the cluster's, kept in ZooKeeper as Kafka's
(``security/zk_acls.py``), not in a file. It knows nothing of APIs: ``server/authz.py`` says which
actions a request needs.
"""

import json
import os

from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import implementer

from kafkatw.config import ConfigError
from kafkatw.durable_file import write_atomically_off_reactor
from kafkatw.protocol.messages import API_NAMES
from kafkatw.security import zk_acls
from kafkatw.security.authorizer import (
    ALLOWED,
    DENIED,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    AclValidationError,
    IAuthorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
    validate_binding,
)

ACLS_FILE = "__kafkatw_acls.json"
_FORMAT_VERSION = 1

audit = Logger(namespace="kafka.authorizer.logger")
log = Logger(namespace="kafkatw.security.acl_authorizer")

# an ALLOW of any of these grants the key (Kafka's implied operations)
_IMPLIED_BY = {
    AclOperation.DESCRIBE: (AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                            AclOperation.ALTER),
    AclOperation.DESCRIBE_CONFIGS: (AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
}

#: decisions kept between ACL changes; past it the cache starts again (principals, hosts and
#: resource names come from clients, so it must not grow without bound)
DECISION_CACHE_LIMIT = 100000

class AclStoreError(ValueError):
    """The stored ACL file cannot be read; one line naming the file."""


def _binding_to_json(b):
    p, e = b.pattern, b.entry
    return {"resource_type": p.resource_type.name, "name": p.name, "pattern_type": p.pattern_type.name,
            "principal": e.principal, "host": e.host, "operation": e.operation.name,
            "permission_type": e.permission_type.name}


def _binding_from_json(d):
    return AclBinding(
        ResourcePattern(ResourceType[d["resource_type"]], d["name"], PatternType[d["pattern_type"]]),
        AccessControlEntry(d["principal"], d["host"], AclOperation[d["operation"]],
                           AclPermissionType[d["permission_type"]]))


class _Index:
    """ACL entries by resource type, pattern type, name and principal: a check looks up the
    literal name, ``*`` and each prefix of the name, and there only the entries of its
    principal and of ``User:*``, never every ACL."""

    def __init__(self, bindings):
        self.literal = {}
        self.prefixed = {}
        for b in bindings:
            p = b.pattern
            table = self.literal if p.pattern_type == PatternType.LITERAL else self.prefixed
            table.setdefault((p.resource_type, p.name), {}).setdefault(b.entry.principal, []).append((b.entry, b))
        self.prefix_lengths = {}  # resource type -> {prefix length: how many prefixed names}
        for (rtype, name) in self.prefixed:
            lengths = self.prefix_lengths.setdefault(rtype, {})
            lengths[len(name)] = lengths.get(len(name), 0) + 1

    def _table(self, pattern):
        return self.literal if pattern.pattern_type == PatternType.LITERAL else self.prefixed

    def entries(self, pattern):
        """The entries of one resource pattern."""
        by_principal = self._table(pattern).get((pattern.resource_type, pattern.name), {})
        return frozenset(entry for pairs in by_principal.values() for entry, _ in pairs)

    def replace(self, pattern, bindings):
        """``pattern``'s bindings are now ``bindings``; the other patterns' stay as they are."""
        table = self._table(pattern)
        key = (pattern.resource_type, pattern.name)
        had = table.pop(key, None) is not None
        by_principal = {}
        for b in bindings:
            by_principal.setdefault(b.entry.principal, []).append((b.entry, b))
        if by_principal:
            table[key] = by_principal
        if table is self.prefixed and had != bool(by_principal):
            lengths = self.prefix_lengths.setdefault(pattern.resource_type, {})
            n = lengths.get(len(pattern.name), 0) + (1 if by_principal else -1)
            if n:
                lengths[len(pattern.name)] = n
            else:
                del lengths[len(pattern.name)]

    def matching(self, resource_type, name, principal):
        """``(any ACL on the resource at all, [(entry, binding)] of principal and User:*)``."""
        found = []
        any_acl = False
        keys = [(self.literal, name)]
        if name != WILDCARD_RESOURCE:
            keys.append((self.literal, WILDCARD_RESOURCE))
        lengths = self.prefix_lengths.get(resource_type)
        if lengths:
            for n in lengths:
                if n <= len(name):
                    keys.append((self.prefixed, name[:n]))
        for table, key in keys:
            by_principal = table.get((resource_type, key))
            if by_principal:
                any_acl = True
                entries = by_principal.get(principal)
                if entries:
                    found.extend(entries)
                entries = by_principal.get(WILDCARD_PRINCIPAL)
                if entries:
                    found.extend(entries)
        return any_acl, found


@implementer(IAuthorizer)
class AclAuthorizer:
    """ACLs with Kafka's semantics, configured from ``super.users`` and
    ``allow.everyone.if.no.acl.found``; the ACL file lives in the first log dir."""

    def __init__(self, path=None, run_blocking=None):
        self.path = path
        #: ``run_blocking(fn, *args) -> Deferred`` (the broker's thread pool); None writes inline
        self.run_blocking = run_blocking
        self.super_users = frozenset()
        self.allow_everyone_if_no_acl_found = False
        self.cluster_mode = False
        self._zk = None  # security.zk_acls.ZkAclStore in cluster mode
        self._bindings = ()
        self._index = _Index(())
        #: (id(principal), host, id(action)) -> (allowed, why, principal, action); emptied on
        #: every ACL change
        self._decisions = {}
        self._lock = defer.DeferredLock()
        self.audit_path = None
        self.log_allowed = False  # Kafka's logger at DEBUG: allowed actions are logged too
        self._audit_file = None

    # -- lifecycle ---------------------------------------------------------------------------
    def configure(self, configs):
        # in cluster mode the ACLs are the cluster's, in ZooKeeper: never one broker's file
        self.cluster_mode = bool(configs.get("zookeeper.connect"))
        raw = configs.get("super.users") or ""
        users = set()
        for item in raw.split(";"):
            item = item.strip()
            if not item:
                continue
            if ":" not in item or item.startswith(":"):
                raise ConfigError("Invalid value %s for configuration super.users: a principal must be "
                                  "Type:name, e.g. User:admin" % item, "super.users")
            users.add(item)
        self.super_users = frozenset(users)
        self.allow_everyone_if_no_acl_found = bool(configs.get("allow.everyone.if.no.acl.found"))
        self.audit_path = configs.get("kafkatw.authorizer.log.file") or None
        self.log_allowed = bool(configs.get("kafkatw.authorizer.log.allowed"))
        self._decisions = {}

    def start(self, server_info):
        store = getattr(server_info, "coordination_store", None)
        loaded = None
        if self.cluster_mode or store is not None:
            if store is None or not all(hasattr(store, m) for m in zk_acls.REQUIRED):
                raise AclStoreError("in cluster mode the ACLs are kept in ZooKeeper, and the cluster "
                                    "coordinator given cannot keep them")
            self._zk = zk_acls.ZkAclStore(store, clock=getattr(server_info, "reactor", None))
            loaded = self._zk.load().addCallback(self._loaded_from_zk)
        else:
            if self.path is None and server_info is not None:
                self.path = os.path.join(server_info.log_dirs[0], ACLS_FILE)
                self.run_blocking = server_info.run_blocking
            if self.path is not None:
                self._set(self._load())
        if self.audit_path is not None:
            try:
                self._audit_file = open(self.audit_path, "a", buffering=1)  # a line at a time
            except OSError as e:
                raise AclStoreError("cannot open the authorizer log %s: %s"
                                    % (self.audit_path, e.strerror or e)) from None
        return loaded  # the listeners accept once the cluster's ACLs are in memory

    def _loaded_from_zk(self, bindings):
        self._set(bindings)
        self._zk.follow(self._replace)

    def stop(self):
        if self._audit_file is not None:
            self._audit_file.close()
            self._audit_file = None

    def _load(self):
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            raise AclStoreError("cannot read the ACLs in %s: %s" % (self.path, e.strerror or e)) from None
        try:
            doc = json.loads(raw.decode("utf-8"))
            if doc.get("version") != _FORMAT_VERSION:
                raise ValueError("unknown format version %r" % (doc.get("version"),))
            return [_binding_from_json(d) for d in doc["acls"]]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise AclStoreError("cannot read the ACLs in %s: %s" % (self.path, e)) from None

    def _replace(self, pattern, entries):
        """One resource pattern's entries are now ``entries`` (written here or by another
        broker). Only that pattern's part of the index changes; the same entries again (the
        notification of this broker's own write) change nothing, not even the decisions."""
        if self._index.entries(pattern) == frozenset(entries):
            return
        new = [AclBinding(pattern, e) for e in sorted(entries, key=str)]
        self._bindings = tuple([b for b in self._bindings if b.pattern != pattern] + new)
        self._index.replace(pattern, new)
        self._decisions = {}

    def _set(self, bindings):
        self._bindings = tuple(bindings)
        self._index = _Index(self._bindings)
        self._decisions = {}  # a new object: a decision being made now cannot land in it stale

    # -- deciding ----------------------------------------------------------------------------
    def authorize(self, context, actions):
        """Each action's decision comes from the cache of decisions made since the last ACL
        change, so a repeated request costs a dict lookup per action, whatever the ACLs."""
        principal = context.principal
        host = context.host
        cache = self._decisions
        if len(actions) == 1 and not self.log_allowed:  # the common request: one action, allowed
            decision = cache.get((id(principal), host, id(actions[0])))
            if decision is not None and decision[0]:
                return [ALLOWED]
        results = []
        for action in actions:
            # keyed by identity (the broker reuses its principal and Action objects): an entry
            # holds both, so no other object can have their ids while it exists
            key = (id(principal), host, id(action))
            decision = cache.get(key)
            if decision is None:
                if len(cache) >= DECISION_CACHE_LIMIT:
                    cache.clear()
                decision = cache[key] = self._decide(str(principal), host, action) + (principal, action)
            if decision[0]:
                if self.log_allowed and action.log_if_allowed:
                    self._audit(context, action, True, decision[1])
                results.append(ALLOWED)
            else:
                if action.log_if_denied:
                    self._audit(context, action, False, decision[1])
                results.append(DENIED)
        return results

    def _decide(self, principal, host, action):
        if principal in self.super_users:
            return True, "super user"
        resource = action.resource
        if resource.pattern_type != PatternType.LITERAL:
            raise ValueError("Only literal resources are supported. Got: %s" % resource.pattern_type.name)
        any_acl, acls = self._index.matching(resource.resource_type, resource.name, principal)
        if not any_acl:
            if self.allow_everyone_if_no_acl_found:
                return True, "no ACL found and allow.everyone.if.no.acl.found"
            return False, "no matching ACL"
        op = action.operation
        for entry, binding in acls:
            if (entry.permission_type == AclPermissionType.DENY
                    and entry.operation in (op, AclOperation.ALL)
                    and entry.host in (host, WILDCARD_HOST)):
                return False, binding
        implied = _IMPLIED_BY.get(op, (op,))
        for entry, binding in acls:
            if (entry.permission_type == AclPermissionType.ALLOW
                    and (entry.operation in implied or entry.operation == AclOperation.ALL)
                    and entry.host in (host, WILDCARD_HOST)):
                return True, binding
        return False, "no matching ACL"

    def _audit(self, context, action, allowed, why):
        message = ("Principal = {principal} is {result} operation = {operation} from host = {host} on "
                   "resource = {resource} for request = {request} with resourceRefCount = {count} "
                   "based on {why}")
        if isinstance(why, AclBinding):
            why = "rule %s" % (why,)
        fields = dict(principal=str(context.principal), result="Allowed" if allowed else "Denied",
                      operation=action.operation.name, host=context.host, resource=str(action.resource),
                      request=API_NAMES.get(context.request_type, context.request_type), count=action.count,
                      why=why)
        if allowed:
            audit.debug(message, **fields)
        else:
            audit.info(message, **fields)
        if self._audit_file is not None:
            self._audit_file.write(message.format(**fields) + "\n")

    # -- ACL management ----------------------------------------------------------------------
    def acls(self, filter):
        return [b for b in self._bindings if filter.matches(b)]

    def _write(self, bindings):
        if self.path is None:
            self._set(bindings)
            return defer.succeed(None)
        data = json.dumps({"version": _FORMAT_VERSION,
                           "acls": [_binding_to_json(b) for b in bindings]}, indent=1).encode("utf-8")
        d = write_atomically_off_reactor(self.run_blocking, self.path, data)
        return d.addCallback(lambda _: self._set(bindings))

    def create_acls(self, context, bindings):
        return self._lock.run(self._create_in_zk if self._zk is not None else self._create, bindings)

    @staticmethod
    def _validated(bindings):
        """(one result per binding: None or its AclValidationError, the valid bindings)."""
        results, valid = [], []
        for b in bindings:
            try:
                validate_binding(b)
            except AclValidationError as e:
                results.append(e)
                continue
            results.append(None)
            valid.append(b)
        return results, valid

    @defer.inlineCallbacks
    def _create_in_zk(self, bindings):
        results, valid = self._validated(bindings)
        by_pattern = {}
        for b in valid:
            by_pattern.setdefault(b.pattern, set()).add(b.entry)
        for pattern, entries in by_pattern.items():
            try:
                self._replace(pattern, (yield self._zk.update(pattern, add=entries)))
            except Exception as e:
                log.failure("writing the ACLs of {pattern} to ZooKeeper failed", pattern=str(pattern))
                error = OSError("writing the ACLs failed: %s" % (e,))
                results = [error if r is None and b.pattern == pattern else r for r, b in zip(results, bindings)]
        return results

    def _create(self, bindings):
        results, valid = self._validated(bindings)
        current = list(self._bindings)
        present = set(current)
        for b in valid:
            if b not in present:
                present.add(b)
                current.append(b)
        if len(current) == len(self._bindings):
            return results
        d = self._write(current)

        def failed(f):
            log.failure("writing the ACLs failed", f)
            return [r if r is not None else OSError("writing the ACLs failed: %s" % f.getErrorMessage())
                    for r in results]

        return d.addCallbacks(lambda _: results, failed)

    def delete_acls(self, context, filters):
        return self._lock.run(self._delete_in_zk if self._zk is not None else self._delete, filters)

    @defer.inlineCallbacks
    def _delete_in_zk(self, filters):
        deleted = [[b for b in self._bindings if f.matches(b)] for f in filters]
        by_pattern = {}
        for group in deleted:
            for b in group:
                by_pattern.setdefault(b.pattern, set()).add(b.entry)
        failed = None
        for pattern, entries in by_pattern.items():
            try:
                self._replace(pattern, (yield self._zk.update(pattern, remove=entries)))
            except Exception as e:
                log.failure("writing the ACLs of {pattern} to ZooKeeper failed", pattern=str(pattern))
                failed = OSError("writing the ACLs failed: %s" % (e,))
        if failed is not None:
            return [failed for _ in filters]
        return deleted

    def _delete(self, filters):
        deleted = [[b for b in self._bindings if f.matches(b)] for f in filters]
        gone = {b for group in deleted for b in group}
        if not gone:
            return deleted
        d = self._write([b for b in self._bindings if b not in gone])

        def failed(f):
            log.failure("writing the ACLs failed", f)
            error = OSError("writing the ACLs failed: %s" % f.getErrorMessage())
            return [error for _ in filters]

        return d.addCallbacks(lambda _: deleted, failed)
