"""``kafkatw configs describe|alter`` for topics and brokers (DescribeConfigs,
IncrementalAlterConfigs), as Kafka's kafka-configs: dynamic configs by default, ``--all`` for all.
"""

from kafkatw.cli.client import UsageError, check
from kafkatw.cli.helpers import parse_kv, print_table
from kafkatw.cli.output import wants_json, write_json
from kafkatw.cli.topics import alter_configs
from kafkatw.config import CONFIG_SOURCE_NAMES
from kafkatw.protocol import messages

RESOURCE_TYPES = {"topics": 2, "topic": 2, "brokers": 4, "broker": 4}
STATIC_AND_DEFAULT = (4, 5)  # STATIC_BROKER_CONFIG, DEFAULT_CONFIG


def add_parser(sub):
    p = sub.add_parser("configs", help="describe and alter topic and broker configs")
    csub = p.add_subparsers(dest="action", metavar="ACTION")
    csub.required = True
    for name, func, text in (("describe", cmd_describe, "show configs"),
                             ("alter", cmd_alter, "set or delete dynamic configs")):
        q = csub.add_parser(name, help=text)
        q.add_argument("--entity-type", required=True, choices=sorted(RESOURCE_TYPES))
        q.add_argument("--entity-name", help="topic name or broker id")
        q.add_argument("--entity-default", action="store_true",
                       help="the cluster-wide default (brokers only)")
        q.set_defaults(func=func)
        if name == "describe":
            q.add_argument("--all", action="store_true", help="all configs, not only dynamic ones")
        else:
            q.add_argument("--add-config", action="append", metavar="K=V[,K=V]",
                           help="configs to set (comma-separated pairs; repeatable)")
            q.add_argument("--delete-config", action="append", metavar="K[,K]",
                           help="configs to remove (comma-separated; repeatable)")


def _resource(args):
    rtype = RESOURCE_TYPES[args.entity_type]
    if args.entity_default:
        if rtype != 4:
            raise UsageError("--entity-default applies to brokers only")
        return rtype, ""
    if args.entity_name is None:
        raise UsageError("--entity-name or --entity-default is required")
    return rtype, args.entity_name


def _split_pairs(items):
    out = []
    for item in items or []:
        # "a=1,b=2" but keep list values in brackets: "cleanup.policy=[compact,delete]"
        buf, depth = "", 0
        for ch in item:
            if ch == "[":
                depth += 1
            elif ch == "]":
                depth -= 1
            if ch == "," and depth == 0:
                out.append(buf)
                buf = ""
            else:
                buf += ch
        if buf:
            out.append(buf)
    return [x.replace("[", "").replace("]", "") for x in out]


def cmd_describe(client, args):
    rtype, name = _resource(args)
    R = messages.DescribeConfigsRequest
    req = R(resources=[R.DescribeConfigsResource(resource_type=rtype, resource_name=name,
                                                 configuration_keys=None)],
            include_synonyms=True, include_documentation=False)
    resp, version = client.request(req)
    rows, records = [], []
    for r in resp.results:
        check(r.error_code, r.error_message, "describe configs of %s %s" % (args.entity_type, name))
        for c in sorted(r.configs, key=lambda c: c.name):
            source = c.config_source if version >= 1 else (5 if c.is_default else 1)
            if not args.all and source in STATIC_AND_DEFAULT:
                continue
            value = "[hidden]" if c.is_sensitive else ("null" if c.value is None else c.value)
            records.append({"name": c.name, "value": None if c.is_sensitive else c.value,
                            "source": CONFIG_SOURCE_NAMES.get(source, source),
                            "sensitive": bool(c.is_sensitive), "readOnly": bool(c.read_only)})
            rows.append([c.name, value, CONFIG_SOURCE_NAMES.get(source, source),
                         "true" if c.is_sensitive else "false", "true" if c.read_only else "false"])
    kind = "topic" if rtype == 2 else "broker"
    if wants_json(args):
        write_json(args.out, records)
        return
    label = "default" if name == "" else name
    args.out.write("%s configs for %s %s are:\n" % ("All" if args.all else "Dynamic", kind, label))
    if rows:
        print_table(["NAME", "VALUE", "SOURCE", "SENSITIVE", "READ-ONLY"], rows, args.out)


def cmd_alter(client, args):
    rtype, name = _resource(args)
    sets = parse_kv(_split_pairs(args.add_config), "config")
    deletes = [k.strip() for k in _split_pairs(args.delete_config) if k.strip()]
    if not sets and not deletes:
        raise UsageError("nothing to alter: give --add-config and/or --delete-config")
    kind = "topic" if rtype == 2 else "broker"
    alter_configs(client, rtype, name, sets, deletes, "alter configs of %s %s" % (kind, name or "default"))
    args.out.write("Completed updating config for %s %s.\n" % (kind, name or "default"))
