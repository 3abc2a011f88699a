"""DescribeClientQuotas (key 48, v0-v1) and AlterClientQuotas (key 49, v0-v1).

Owns Kafka's validation of quota entities and keys (``ClientQuotaControlManager``) and the
describe filter (exact / default / any name, strict). Entities are stored durably with the
cluster metadata; once on disk a change is handed to ``apis.quotas`` and is in force for the
next request. Measuring and throttling are ``kafkatw.server.quota``'s.
"""

import ipaddress

from zope.interface import provider

from kafkatw.protocol import errors
from kafkatw.protocol.messages import AlterClientQuotasResponse, DescribeClientQuotasResponse
from kafkatw.security.quota import CLIENT_ID, CLIENT_QUOTA_KEYS, IP, IP_QUOTA_KEYS, USER
from kafkatw.server.interfaces import IApiHandler

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
#: keys whose values Kafka types as LONG (the rest are DOUBLE)
_INTEGRAL_KEYS = frozenset(["producer_byte_rate", "consumer_byte_rate", "connection_creation_rate"])


def _resolvable(host):
    """An IP literal (Kafka also resolves host names; a DNS lookup would block the reactor)."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def validate_entity(components):
    """``(entity components, None)`` or ``(None, (code, message))`` as Kafka's ``validateEntity``."""
    if not components:
        return None, (errors.INVALID_REQUEST, "Invalid empty client quota entity")
    seen = {}
    for entity_type, name in components:
        if entity_type in seen:
            return None, (errors.INVALID_REQUEST,
                          "Invalid empty client quota entity, duplicate entity entry " + entity_type)
        if entity_type not in (USER, CLIENT_ID, IP):
            return None, (errors.UNSUPPORTED_VERSION, "Unhandled client quota entity type: " + entity_type)
        if entity_type == IP and name is not None and not _resolvable(name):
            return None, (errors.INVALID_REQUEST, "Unable to resolve address " + name)
        if name is not None and name == "":
            return None, (errors.INVALID_REQUEST, "Empty %s not supported" % entity_type)
        seen[entity_type] = name
    if IP in seen and len(seen) > 1:
        return None, (errors.INVALID_REQUEST,
                      "Invalid quota entity combination, IP entity should not be combined with User or ClientId")
    return tuple(sorted(seen.items())), None


def validate_op(components, key, value, remove):
    """``None`` or ``(code, message)`` for one quota key and value of an entity."""
    allowed = IP_QUOTA_KEYS if components[0][0] == IP else CLIENT_QUOTA_KEYS
    if key not in allowed:
        return errors.INVALID_REQUEST, "Invalid configuration key " + key
    if remove:
        return None
    if key in _INTEGRAL_KEYS and abs(value - round(value)) > 1e-6:
        return errors.INVALID_REQUEST, "Configuration %s must be a Long value" % key
    if value <= 0:
        return errors.INVALID_REQUEST, "Configuration %s must be greater than 0, was %s" % (key, value)
    return None


@provider(IApiHandler)
class AlterClientQuotas:
    API_KEY = 49
    VERSIONS = (0, 1)

    @staticmethod
    def handle(apis, request):
        Entry = AlterClientQuotasResponse.EntryData
        Entity = AlterClientQuotasResponse.EntityData
        current = apis.metadata.staged_client_quotas
        updated = dict(current)
        results = []
        changes = []  # (entity components, key, value or None)
        for entry in request.body.entries:
            raw = [(e.entity_type, e.entity_name) for e in entry.entity]
            out_entity = [Entity(entity_type=t, entity_name=n) for t, n in raw]
            components, err = validate_entity(raw)
            if err is None:
                values = dict(updated.get(components, {}))
                mine = []
                for op in entry.ops:
                    err = validate_op(components, op.key, op.value, op.remove)
                    if err is not None:
                        break
                    if op.remove:
                        values.pop(op.key, None)
                        mine.append((components, op.key, None))
                    else:
                        values[op.key] = float(op.value)
                        mine.append((components, op.key, float(op.value)))
            if err is not None:
                results.append(Entry(error_code=err[0], error_message=err[1], entity=out_entity))
                continue
            results.append(Entry(error_code=errors.NONE, error_message=None, entity=out_entity))
            if request.body.validate_only:
                continue
            updated[components] = values
            changes.extend(mine)
        response = AlterClientQuotasResponse(throttle_time_ms=0, entries=results)
        if not changes:
            return response
        d = apis.metadata.set_client_quotas(updated)

        def durable(_):
            apply_changes(apis.quotas, changes)
            return response

        def failed(failure):
            failure.trap(Exception)
            for e in results:
                if e.error_code == errors.NONE:
                    e.error_code = errors.UNKNOWN_SERVER_ERROR
                    e.error_message = "storing the client quotas failed"
            return response
        d.addCallbacks(durable, failed)
        return d

    @staticmethod
    def error_response(request, code, message):
        Entry = AlterClientQuotasResponse.EntryData
        Entity = AlterClientQuotasResponse.EntityData
        return AlterClientQuotasResponse(throttle_time_ms=0, entries=[
            Entry(error_code=code, error_message=message,
                  entity=[Entity(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity])
            for entry in request.body.entries])


def apply_changes(quotas, changes):
    """Hand ``[(components, key, value or None)]`` to the quota managers (ip entities'
    connection_creation_rate goes to the connection quotas, not the client quota callback)."""
    from kafkatw.security.quota import ClientQuotaEntity

    for components, key, value in changes:
        if key not in CLIENT_QUOTA_KEYS:
            if key in IP_QUOTA_KEYS:
                quotas.set_ip_quota(dict(components).get(IP), value)
            continue
        entity = ClientQuotaEntity(components)
        if value is None:
            quotas.remove_quota(entity, key)
        else:
            quotas.set_quota(entity, key, value)


def _matches(components, filters, strict):
    entity = dict(components)
    for entity_type, match_type, match in filters:
        if entity_type not in entity:
            return False
        name = entity[entity_type]
        if match_type == MATCH_EXACT and name != match:
            return False
        if match_type == MATCH_DEFAULT and name is not None:
            return False
        if match_type == MATCH_SPECIFIED and name is None:
            return False
    if strict and set(entity) != {f[0] for f in filters}:
        return False
    return True


@provider(IApiHandler)
class DescribeClientQuotas:
    API_KEY = 48
    VERSIONS = (0, 1)

    @staticmethod
    def handle(apis, request):
        body = request.body
        filters = []
        seen = set()
        for c in body.components:
            if c.entity_type in seen:
                return DescribeClientQuotas.error_response(
                    request, errors.INVALID_REQUEST, "Duplicate entity type " + c.entity_type)
            seen.add(c.entity_type)
            if c.entity_type not in (USER, CLIENT_ID, IP):
                return DescribeClientQuotas.error_response(
                    request, errors.INVALID_REQUEST, "Invalid entity type " + c.entity_type)
            if c.match_type == MATCH_EXACT:
                if c.match is None:
                    return DescribeClientQuotas.error_response(
                        request, errors.INVALID_REQUEST, "Entity match must be specified for exact match")
            elif c.match_type not in (MATCH_DEFAULT, MATCH_SPECIFIED):
                return DescribeClientQuotas.error_response(
                    request, errors.INVALID_REQUEST, "Unknown match type %d" % c.match_type)
            filters.append((c.entity_type, c.match_type, c.match))
        if IP in seen and len(seen) > 1:
            return DescribeClientQuotas.error_response(
                request, errors.INVALID_REQUEST,
                "Invalid entity filter component combination, IP filter component should not be used with "
                "user or clientId filter component.")
        Entry = DescribeClientQuotasResponse.EntryData
        Entity = DescribeClientQuotasResponse.EntityData
        Value = DescribeClientQuotasResponse.ValueData
        entries = []
        for components, values in sorted(apis.metadata.client_quotas.items(), key=lambda kv: repr(kv[0])):
            if not values or not _matches(components, filters, body.strict):
                continue
            entries.append(Entry(
                entity=[Entity(entity_type=t, entity_name=n) for t, n in components],
                values=[Value(key=k, value=v) for k, v in sorted(values.items())]))
        return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=errors.NONE, error_message=None,
                                            entries=entries)

    @staticmethod
    def error_response(request, code, message):
        return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                            entries=None)


HANDLERS = (DescribeClientQuotas, AlterClientQuotas)
