"""Client quotas as a policy: ``IClientQuotaCallback`` (Kafka's KIP-257 ``ClientQuotaCallback``),
quota entities, and the default callback that resolves the configured entities in Kafka's order.

Owns which quota applies to a (principal, client id); not measuring rates or throttling
(``kafkatw.server.quota``) nor storing the entities (``kafkatw.cluster.metadata``).
"""

import enum

import attr
from zope.interface import Interface, implementer

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

#: metric tag names (Kafka's ``quotaMetricTags`` keys)
USER_TAG = "user"
CLIENT_ID_TAG = "client-id"


class ClientQuotaType(enum.Enum):
    """What a quota limits, with the quota config key that sets it."""

    PRODUCE = "producer_byte_rate"
    FETCH = "consumer_byte_rate"
    REQUEST = "request_percentage"
    CONTROLLER_MUTATION = "controller_mutation_rate"

    @property
    def config_key(self):
        return self.value


#: every quota config key AlterClientQuotas accepts for user/client-id entities
CLIENT_QUOTA_KEYS = frozenset(t.value for t in ClientQuotaType)
#: and for ip entities (KIP-612)
IP_QUOTA_KEYS = frozenset(["connection_creation_rate"])


@attr.s(frozen=True, slots=True)
class ClientQuotaEntity:
    """One quota entity: ``((type, name), ...)`` sorted by type; a ``None`` name is the
    type's default entity (``<default>`` in Kafka's tools)."""

    components = attr.ib(converter=lambda c: tuple(sorted(c)))

    @classmethod
    def of(cls, user=False, client_id=False):
        """``of(user="alice")``, ``of(client_id=None)`` (the default client id), ...; a component
        left ``False`` is absent."""
        parts = []
        if user is not False:
            parts.append((USER, user))
        if client_id is not False:
            parts.append((CLIENT_ID, client_id))
        return cls(parts)

    def as_dict(self):
        return dict(self.components)

    def __str__(self):
        return ", ".join("%s=%s" % (t, "<default>" if n is None else n) for t, n in self.components)


class IClientQuotaCallback(Interface):
    """Kafka's ``ClientQuotaCallback`` (``client.quota.callback.class``).

    Metric tags group clients that share one quota sensor: ``{"user": u, "client-id": c}``
    with ``""`` for a tag that plays no part. ``quota_limit`` is called with those tags and
    returns the quota (bytes/s, percent, mutations/s) or ``None`` for no quota.
    """

    def quota_metric_tags(quota_type, principal, client_id):
        """The metric tags of a request from ``principal`` (a KafkaPrincipal) and ``client_id``."""

    def quota_limit(quota_type, metric_tags):
        """The quota of the clients sharing ``metric_tags``, or ``None`` (unlimited)."""

    def update_quota(quota_type, entity, new_value):
        """A quota of ``entity`` (a :class:`ClientQuotaEntity`) was set to ``new_value``."""

    def remove_quota(quota_type, entity):
        """The quota of ``entity`` was removed."""

    def quota_reset_required(quota_type):
        """True when every sensor's quota must be read again from ``quota_limit`` (returns
        True at most once per change)."""

    def close():
        """The broker is stopping."""


@implementer(IClientQuotaCallback)
class DefaultQuotaCallback:
    """The entities set with AlterClientQuotas, resolved as Kafka's ``DefaultQuotaCallback``.

    Precedence (most specific first): user + client-id, user + default client-id, user,
    default user + client-id, default user + default client-id, default user, client-id,
    default client-id. The sensor a client shares is named after the entity that matched,
    so all clients under ``user=alice`` share one rate, while a default client-id quota
    applies to each client id separately.
    """

    def __init__(self):
        self._quotas = {t: {} for t in ClientQuotaType}  # type -> {entity: value}

    def configure(self, configs):
        pass

    def update_quota(self, quota_type, entity, new_value):
        self._quotas[quota_type][entity] = float(new_value)

    def remove_quota(self, quota_type, entity):
        self._quotas[quota_type].pop(entity, None)

    def quota_reset_required(self, quota_type):
        return False  # the quota manager re-reads limits itself after every update

    def close(self):
        pass

    def _lookup_order(self, user, client_id):
        """``(entity, tags)`` candidates in Kafka's precedence for ``user`` and ``client_id``."""
        e = ClientQuotaEntity.of
        both = {USER_TAG: user, CLIENT_ID_TAG: client_id}
        only_user = {USER_TAG: user, CLIENT_ID_TAG: ""}
        only_client = {USER_TAG: "", CLIENT_ID_TAG: client_id}
        return (
            (e(user=user, client_id=client_id), both),
            (e(user=user, client_id=None), both),
            (e(user=user), only_user),
            (e(user=None, client_id=client_id), both),
            (e(user=None, client_id=None), both),
            (e(user=None), only_user),
            (e(client_id=client_id), only_client),
            (e(client_id=None), only_client),
        )

    def quota_metric_tags(self, quota_type, principal, client_id):
        quotas = self._quotas[quota_type]
        user = principal.name if principal is not None else ""
        client_id = client_id or ""
        for entity, tags in self._lookup_order(user, client_id):
            if entity in quotas:
                return dict(tags)
        return {USER_TAG: "", CLIENT_ID_TAG: client_id}

    def quota_limit(self, quota_type, metric_tags):
        quotas = self._quotas[quota_type]
        user = metric_tags.get(USER_TAG, "")
        client_id = metric_tags.get(CLIENT_ID_TAG, "")
        e = ClientQuotaEntity.of
        if user and client_id:
            candidates = (e(user=user, client_id=client_id), e(user=user, client_id=None),
                          e(user=None, client_id=client_id), e(user=None, client_id=None))
        elif user:
            candidates = (e(user=user), e(user=None))
        elif client_id:
            candidates = (e(client_id=client_id), e(client_id=None))
        else:
            candidates = ()
        for entity in candidates:
            value = quotas.get(entity)
            if value is not None:
                return value
        return None

    def entities(self, quota_type):
        """``{entity: value}`` of ``quota_type`` (read-only view for tests and describes)."""
        return dict(self._quotas[quota_type])


def load_quota_callback(config):
    """The verified ``IClientQuotaCallback`` that ``client.quota.callback.class`` names (a plug-in
    or dotted name, configured with the broker's properties), else the default callback. A name
    that cannot be loaded is a one-line ConfigError before anything starts."""
    from kafkatw import registry

    name = config.get("client.quota.callback.class") or "default"
    originals = getattr(config, "originals", None)
    configs = dict(originals) if isinstance(originals, dict) else {}
    return registry.load("client.quota.callback.class", name, IClientQuotaCallback, configs=configs)
