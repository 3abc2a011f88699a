"""Broker config -> the SASL setup of each SASL listener, checked before anything listens.

Owns reading Kafka's keys (``sasl.enabled.mechanisms``, ``listener.name.<l>.<mechanism>.sasl.jaas.config``,
``connections.max.reauth.ms``, ``sasl.server.max.receive.size``, ``principal.builder.class``,
their ``listener.name.<l>.`` overrides) and loading each mechanism through :mod:`kafkatw.registry`.
A SASL listener with no usable mechanism is a :class:`ConfigError` line: never served open.
"""

import attr

from kafkatw import registry
from kafkatw.config import BROKER_CONFIG_DEF, ConfigError, Password
from kafkatw.security.jaas import JaasError, parse_jaas_config
from kafkatw.security.principal import principal_builders
from kafkatw.security.sasl import ISaslServerFactory

SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


@attr.s
class SaslListener:
    """The SASL side of one listener, handed to the network layer's authenticator.

    ``mechanisms``: ``{name: ISaslServerFactory}`` in the enabled order; ``reauth_ms``:
    ``{name: connections.max.reauth.ms}`` (0 = sessions never expire); ``max_receive_size``:
    largest frame before authentication; ``principal_builder``: an ``IPrincipalBuilder``;
    ``failed_authentication_delay_ms``: how long a failed connection stays open after its answer.
    """

    listener_name = attr.ib()
    security_protocol = attr.ib()
    mechanisms = attr.ib()
    reauth_ms = attr.ib()
    max_receive_size = attr.ib()
    principal_builder = attr.ib()
    failed_authentication_delay_ms = attr.ib(default=0)

    @property
    def enabled(self):
        return list(self.mechanisms)


def listener_prefix(listener_name):
    return "listener.name.%s." % listener_name.lower()


def _raw(value):
    return value.value if isinstance(value, Password) else value


def listener_configs(config, listener_name):
    """Kafka's ``valuesWithPrefixOverride``: broker originals, then the listener's overrides."""
    out = {k: _raw(v) for k, v in config.originals.items() if not k.startswith("listener.name.")}
    out.update({k: _raw(v) for k, v in config.with_prefix(listener_prefix(listener_name)).items()})
    return out


def _typed(config, configs, name):
    if name in configs and isinstance(configs[name], str):
        return BROKER_CONFIG_DEF[name].parse(configs[name])
    return configs[name] if name in configs else config[name]


def _jaas(listener_name, mechanism, configs):
    key = "%s.sasl.jaas.config" % mechanism.lower()
    text = configs.get(key)
    if text is None:
        return None
    try:
        return parse_jaas_config(text)
    except JaasError as e:
        raise ConfigError("%s%s: %s" % (listener_prefix(listener_name), key, e),
                          listener_prefix(listener_name) + key) from None


def sasl_listener(config, endpoint, credentials, builder=None):
    """The :class:`SaslListener` of one SASL endpoint; raises :class:`ConfigError` (one line)."""
    name = endpoint.listener_name
    prefix = listener_prefix(name)
    configs = listener_configs(config, name)
    enabled_key = (prefix if "sasl.enabled.mechanisms" in config.with_prefix(prefix) else "") \
        + "sasl.enabled.mechanisms"
    enabled = [m.strip() for m in _typed(config, configs, "sasl.enabled.mechanisms") or [] if m.strip()]
    if not enabled:
        raise ConfigError("Listener %s uses %s but enables no SASL mechanism; set "
                          "sasl.enabled.mechanisms or %ssasl.enabled.mechanisms"
                          % (name, endpoint.security_protocol, prefix), enabled_key)
    mechanisms = {}
    reauth = {}
    default_reauth = _typed(config, configs, "connections.max.reauth.ms")
    for mechanism in enabled:
        if mechanism in mechanisms:
            continue
        mechanisms[mechanism] = registry.load(
            enabled_key, mechanism, ISaslServerFactory, mechanism=mechanism, listener_name=name,
            jaas=_jaas(name, mechanism, configs), settings=configs, credentials=credentials)
        per_mech = configs.get("%s.connections.max.reauth.ms" % mechanism.lower())
        reauth[mechanism] = (BROKER_CONFIG_DEF["connections.max.reauth.ms"].parse(per_mech)
                             if per_mech is not None else default_reauth)
    return SaslListener(listener_name=name, security_protocol=endpoint.security_protocol,
                        mechanisms=mechanisms, reauth_ms=reauth,
                        max_receive_size=_typed(config, configs, "sasl.server.max.receive.size"),
                        principal_builder=builder or principal_builders(config)[name],
                        failed_authentication_delay_ms=config["connection.failed.authentication.delay.ms"])


def sasl_listeners(config, credentials, builders=None):
    """``{listener_name: SaslListener}`` for every SASL_PLAINTEXT/SASL_SSL listener of ``config``;
    ``builders``: the listeners' principal builders (``principal.principal_builders``)."""
    builders = principal_builders(config) if builders is None else builders
    return {ep.listener_name: sasl_listener(config, ep, credentials, builders[ep.listener_name])
            for ep in config.listeners if ep.security_protocol in SASL_PROTOCOLS}
