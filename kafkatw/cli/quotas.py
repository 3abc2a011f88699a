"""``kafkatw quotas set|describe|delete``: client quotas through AlterClientQuotas and
DescribeClientQuotas, with the entity options of Kafka's kafka-configs (``--user``,
``--user-default``, ``--client-id``, ``--client-id-default``, ``--ip``, ``--ip-default``).
"""

from kafkatw.cli.client import ClientError, check
from kafkatw.cli.helpers import print_table
from kafkatw.cli.output import wants_json, write_json
from kafkatw.protocol import messages

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
DEFAULT = object()  # an entity's default (<default>), as opposed to a name


def _entity_options(p):
    for kind, flag in (("user", "user"), ("client-id", "client_id"), ("ip", "ip")):
        p.add_argument("--" + kind, dest=flag, metavar="NAME", help="the %s entity" % kind)
        p.add_argument("--%s-default" % kind, dest=flag, action="store_const", const=DEFAULT,
                       help="the default %s entity" % kind)


def add_parser(sub):
    p = sub.add_parser("quotas", help="manage client quotas (producer_byte_rate, consumer_byte_rate, ...)")
    qsub = p.add_subparsers(dest="action", metavar="ACTION")
    qsub.required = True

    q = qsub.add_parser("set", help="set quota values of one entity")
    _entity_options(q)
    q.add_argument("--add-config", action="append", required=True, metavar="KEY=VALUE[,KEY=VALUE]",
                   help="e.g. producer_byte_rate=1048576,consumer_byte_rate=2097152")
    q.add_argument("--validate-only", action="store_true")
    q.set_defaults(func=cmd_set)

    q = qsub.add_parser("delete", help="remove quota values of one entity (all of them by default)")
    _entity_options(q)
    q.add_argument("--delete-config", action="append", metavar="KEY[,KEY]")
    q.set_defaults(func=cmd_delete)

    q = qsub.add_parser("describe", help="quotas of the entities matching the options (all by default)")
    _entity_options(q)
    q.add_argument("--strict", action="store_true", help="only entities with exactly the given types")
    q.set_defaults(func=cmd_describe)


def _entity(args):
    """``[(type, name or None)]`` from the entity options; at least one is required."""
    out = []
    for kind, flag in (("user", "user"), ("client-id", "client_id"), ("ip", "ip")):
        value = getattr(args, flag)
        if value is not None:
            out.append((kind, None if value is DEFAULT else value))
    if not out:
        raise ClientError("name an entity: --user, --client-id, --ip or their --*-default")
    return out


def _alter(client, entity, ops, validate_only=False):
    R = messages.AlterClientQuotasRequest
    resp = client.call(R(validate_only=validate_only, entries=[R.EntryData(
        entity=[R.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        ops=[R.OpData(key=k, value=v if v is not None else 0.0, remove=v is None) for k, v in ops])]))
    for e in resp.entries:
        check(e.error_code, e.error_message, "entity " + _entity_text(entity))


def _entity_text(entity):
    return ", ".join("%s=%s" % (t, "<default>" if n is None else n) for t, n in entity)


def _split(items):
    return [part.strip() for item in items or [] for part in item.split(",") if part.strip()]


def cmd_set(client, args):
    entity = _entity(args)
    ops = []
    for item in _split(args.add_config):
        key, sep, value = item.partition("=")
        if not sep:
            raise ClientError("invalid quota %r (expected key=value)" % item)
        try:
            ops.append((key.strip(), float(value)))
        except ValueError:
            raise ClientError("invalid value %r for %s (a number is expected)" % (value, key)) from None
    _alter(client, entity, ops, args.validate_only)
    verb = "Validated" if args.validate_only else "Set"
    args.out.write("%s %s for %s.\n" % (verb, ", ".join("%s=%s" % (k, _num(v)) for k, v in ops),
                                        _entity_text(entity)))


def _describe(client, components, strict):
    R = messages.DescribeClientQuotasRequest
    resp = client.call(R(strict=strict, components=[R.ComponentData(entity_type=t, match_type=m, match=n)
                                                    for t, m, n in components]))
    check(resp.error_code, resp.error_message, "DescribeClientQuotas")
    return [([(e.entity_type, e.entity_name) for e in entry.entity], {v.key: v.value for v in entry.values})
            for entry in resp.entries or ()]


def cmd_delete(client, args):
    entity = _entity(args)
    keys = _split(args.delete_config)
    if not keys:
        exact = [(t, MATCH_DEFAULT if n is None else MATCH_EXACT, n) for t, n in entity]
        found = [values for e, values in _describe(client, exact, True) if sorted(e) == sorted(entity)]
        keys = sorted(found[0]) if found else []
        if not keys:
            raise ClientError("no quotas are set for " + _entity_text(entity))
    _alter(client, entity, [(k, None) for k in keys])
    args.out.write("Deleted %s for %s.\n" % (", ".join(keys), _entity_text(entity)))


def _num(v):
    return str(int(v)) if float(v).is_integer() else repr(v)


def cmd_describe(client, args):
    components = []
    for kind, flag in (("user", "user"), ("client-id", "client_id"), ("ip", "ip")):
        value = getattr(args, flag)
        if value is DEFAULT:
            components.append((kind, MATCH_DEFAULT, None))
        elif value is not None:
            components.append((kind, MATCH_EXACT, value))
    described = _describe(client, components, args.strict)
    if wants_json(args):
        write_json(args.out, sorted(({"entity": _entity_text(entity), "quota": key, "value": values[key]}
                                     for entity, values in described for key in values),
                                    key=lambda row: (row["entity"], row["quota"])))
        return
    rows = []
    for entity, values in described:
        for key in sorted(values):
            rows.append([_entity_text(entity), key, _num(values[key])])
    print_table(["ENTITY", "QUOTA", "VALUE"], sorted(rows), args.out)
