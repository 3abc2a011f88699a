"""``kafkatw acls add|list|remove``: ACLs through CreateAcls/DescribeAcls/DeleteAcls with
``kafka-acls.sh``'s concepts (``--allow-principal``, ``--deny-principal``, ``--allow-host``,
``--deny-host``, ``--operation``, ``--topic``, ``--group``, ``--cluster``, ``--transactional-id``,
``--resource-pattern-type``). It only builds requests and prints answers; the broker decides.
"""

import argparse
import re

from kafkatw.cli.client import ClientError, check
from kafkatw.cli.helpers import print_table
from kafkatw.cli.output import wants_json, write_json
from kafkatw.protocol import messages
from kafkatw.security.authorizer import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)


def _codes(enum_cls):
    """Kafka's wire code by enum name (UNKNOWN is never sent)."""
    return {member.name: int(member) for member in enum_cls if member.name != "UNKNOWN"}


RESOURCE_TYPES = _codes(ResourceType)
PATTERN_TYPES = _codes(PatternType)
OPERATIONS = _codes(AclOperation)
PERMISSIONS = _codes(AclPermissionType)
# what kafka-acls.sh accepts per resource type (AclEntry.supportedOperations, plus ALL)
SUPPORTED = {rtype.name: tuple(op.name for op in ops) for rtype, ops in SUPPORTED_OPERATIONS.items()}


def _name(table, code):
    for name, value in table.items():
        if value == code:
            return name
    return "UNKNOWN(%d)" % code


def operation(text):
    """``Read``, ``ClusterAction``, ``DESCRIBE_CONFIGS``, ``describe-configs`` -> Kafka's enum name."""
    text = text.strip()
    if any(c.islower() for c in text) and "_" not in text and "-" not in text:
        text = re.sub(r"(?<!^)(?=[A-Z])", "_", text)
    op = text.upper().replace("-", "_")
    if op not in OPERATIONS or op == "ANY":
        raise argparse.ArgumentTypeError("unknown operation %s (one of %s)" % (
            text, ", ".join(o for o in OPERATIONS if o != "ANY")))
    return op


def add_parser(sub):
    p = sub.add_parser("acls", help="manage ACLs (kafka-acls.sh)")
    asub = p.add_subparsers(dest="action", metavar="ACTION")
    asub.required = True
    for name, func, helptext in (("add", cmd_add, "add ACLs for the principals, hosts and operations given"),
                                 ("list", cmd_list, "list ACLs (of the resources given, or all)"),
                                 ("remove", cmd_remove, "remove the ACLs matching what is given")):
        q = asub.add_parser(name, help=helptext)
        q.add_argument("--topic", action="append", default=[], metavar="NAME")
        q.add_argument("--group", action="append", default=[], metavar="NAME")
        q.add_argument("--transactional-id", action="append", default=[], metavar="ID")
        q.add_argument("--cluster", action="store_true", help="the cluster resource")
        q.add_argument("--resource-pattern-type", type=str.upper, metavar="TYPE",
                       default="LITERAL" if name == "add" else None,
                       choices=["LITERAL", "PREFIXED"] + (["ANY", "MATCH"] if name != "add" else []),
                       help="LITERAL (default for add), PREFIXED; list/remove also ANY and MATCH "
                            "(default for list/remove: ANY; for list LITERAL with a name, as kafka-acls.sh)")
        if name == "list":
            q.add_argument("--principal", action="append", default=[], metavar="Type:name")
        else:
            q.add_argument("--allow-principal", action="append", default=[], metavar="Type:name")
            q.add_argument("--deny-principal", action="append", default=[], metavar="Type:name")
            q.add_argument("--allow-host", action="append", default=[], metavar="HOST")
            q.add_argument("--deny-host", action="append", default=[], metavar="HOST")
            q.add_argument("--operation", action="append", default=[], type=operation, metavar="OP",
                           help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                                "DescribeConfigs, AlterConfigs, IdempotentWrite, All (repeatable)")
        q.set_defaults(func=func)


def _resources(args, default_any=False):
    out = [("TOPIC", t) for t in args.topic] + [("GROUP", g) for g in args.group] + \
        [("TRANSACTIONAL_ID", t) for t in args.transactional_id]
    if args.cluster:
        out.append(("CLUSTER", CLUSTER_NAME))
    if not out and default_any:
        out.append(("ANY", None))
    return out


def _entries(args, default_all_hosts=True):
    """[(principal, host, permission)] from --allow/--deny-principal and --allow/--deny-host."""
    out = []
    for perm, principals, hosts in (("ALLOW", args.allow_principal, args.allow_host),
                                    ("DENY", args.deny_principal, args.deny_host)):
        for principal in principals:
            for host in (hosts or (["*"] if default_all_hosts else [None])):
                out.append((principal, host, perm))
    return out


def cmd_add(client, args):
    resources = _resources(args)
    if not resources:
        raise ClientError("acls add needs a resource: --topic, --group, --transactional-id or --cluster")
    entries = _entries(args)
    if not entries:
        raise ClientError("acls add needs --allow-principal or --deny-principal")
    ops = args.operation or ["ALL"]
    for rt, _ in resources:
        for op in ops:
            if op != "ALL" and op not in SUPPORTED[rt]:
                raise ClientError("ResourceType %s only supports operations %s" % (rt, ",".join(SUPPORTED[rt])))
    Creation = messages.CreateAclsRequest.AclCreation
    creations = [Creation(resource_type=RESOURCE_TYPES[rt], resource_name=name,
                          resource_pattern_type=PATTERN_TYPES[args.resource_pattern_type], principal=principal,
                          host=host, operation=OPERATIONS[op], permission_type=PERMISSIONS[perm])
                 for rt, name in resources for principal, host, perm in entries for op in ops]
    resp = client.call(messages.CreateAclsRequest(creations=creations))
    for c, r in zip(creations, resp.results):
        check(r.error_code, r.error_message, "ACL %s %s on %s %s" % (
            c.principal, _name(OPERATIONS, c.operation), _name(RESOURCE_TYPES, c.resource_type), c.resource_name))
    args.out.write("Added %d ACL(s).\n" % len(creations))


def cmd_list(client, args):
    rows = []
    pattern = args.resource_pattern_type or "ANY"
    for rt, name in _resources(args, default_any=True):
        for principal in (args.principal or [None]):
            resp = client.call(messages.DescribeAclsRequest(
                resource_type_filter=RESOURCE_TYPES[rt], resource_name_filter=name,
                pattern_type_filter=PATTERN_TYPES[pattern], principal_filter=principal, host_filter=None,
                operation=OPERATIONS["ANY"], permission_type=PERMISSIONS["ANY"]))
            check(resp.error_code, resp.error_message, "DescribeAcls")
            for r in resp.resources:
                for a in r.acls:
                    rows.append([_name(RESOURCE_TYPES, r.resource_type), r.resource_name,
                                 _name(PATTERN_TYPES, r.pattern_type), a.principal, a.host,
                                 _name(OPERATIONS, a.operation), _name(PERMISSIONS, a.permission_type)])
    if wants_json(args):
        write_json(args.out, [dict(zip(("resourceType", "name", "patternType", "principal", "host", "operation",
                                        "permissionType"), row)) for row in sorted(rows)])
        return
    print_table(["RESOURCE_TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"],
                sorted(rows), out=args.out)


def cmd_remove(client, args):
    pattern = args.resource_pattern_type or "ANY"
    entries = _entries(args, default_all_hosts=False) or [(None, None, "ANY")]
    ops = args.operation or ["ANY"]
    Filter = messages.DeleteAclsRequest.DeleteAclsFilter
    filters = [Filter(resource_type_filter=RESOURCE_TYPES[rt], resource_name_filter=name,
                      pattern_type_filter=PATTERN_TYPES[pattern], principal_filter=principal, host_filter=host,
                      operation=OPERATIONS[op], permission_type=PERMISSIONS[perm])
               for rt, name in _resources(args, default_any=True) for principal, host, perm in entries
               for op in ops]
    resp = client.call(messages.DeleteAclsRequest(filters=filters))
    removed = 0
    for r in resp.filter_results:
        check(r.error_code, r.error_message, "DeleteAcls")
        removed += len(r.matching_acls)
    args.out.write("Removed %d ACL(s).\n" % removed)

