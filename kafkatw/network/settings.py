"""The network layer's settings (Kafka's SocketServer configs), read from a config object.

Owns names and defaults of the settings this package uses; parsing and validation of the
broker configuration belong to ``kafkatw.config``.
"""

import attr


@attr.s(slots=True, frozen=True)
class SocketServerSettings:
    socket_request_max_bytes = attr.ib(default=100 * 1024 * 1024)
    socket_listen_backlog_size = attr.ib(default=50)
    socket_send_buffer_bytes = attr.ib(default=-1)  # -1: the OS default (Kafka's: 102400)
    socket_receive_buffer_bytes = attr.ib(default=-1)
    queued_max_requests = attr.ib(default=500)
    num_io_threads = attr.ib(default=8)
    max_connections = attr.ib(default=2 ** 31 - 1)
    max_connections_per_ip = attr.ib(default=2 ** 31 - 1)
    max_connections_per_ip_overrides = attr.ib(default=attr.Factory(dict))  # host/ip -> limit
    max_connection_creation_rate = attr.ib(default=2 ** 31 - 1)  # per second, all but inter-broker
    #: listener name -> listener.name.<l>.max.connections / .max.connection.creation.rate
    listener_max_connections = attr.ib(default=attr.Factory(dict))
    listener_max_connection_creation_rate = attr.ib(default=attr.Factory(dict))
    quota_window_num = attr.ib(default=11)
    quota_window_size_seconds = attr.ib(default=1)
    connections_max_idle_ms = attr.ib(default=10 * 60 * 1000)
    inter_broker_listener_name = attr.ib(default=None)  # exempt from max.connections
    #: listener name -> the transport layer it names (listener.name.<l>.transport.class);
    #: a listener not in it uses the one registered under its security protocol
    transport_classes = attr.ib(default=attr.Factory(dict))
    #: listener name -> its properties for ``configure()`` of plug-ins: the broker's own with
    #: ``listener.name.<l>.`` ones overriding (Kafka's ``valuesWithPrefixOverride``)
    listener_configs = attr.ib(default=attr.Factory(dict))

    @classmethod
    def from_config(cls, config):
        """Read Kafka's property names from ``config``.

        Accepts an object with snake_case attributes (``config.socket_request_max_bytes``)
        or a mapping / ``get()`` of dotted names (``"socket.request.max.bytes"``).
        """
        values = {}
        for field in attr.fields(cls):
            dotted = field.name.replace("_", ".")
            value = getattr(config, field.name, None)
            if value is None and hasattr(config, "get"):
                try:
                    value = config.get(dotted)
                except Exception:
                    value = None
            if value is not None:
                values[field.name] = value
        overrides = values.get("max_connections_per_ip_overrides")
        if isinstance(overrides, str):
            values["max_connections_per_ip_overrides"] = parse_overrides(overrides)
        originals = getattr(config, "originals", None)
        if isinstance(originals, dict):
            values.update(per_listener(originals, getattr(config, "listeners", ())))
        return cls(**values)


def listener_prefix(listener_name):
    """Kafka's ``ListenerName.configPrefix``: ``listener.name.<lower-case name>.``."""
    return "listener.name.%s." % listener_name.lower()


def per_listener(originals, endpoints):
    """``transport_classes`` and ``listener_configs`` of ``endpoints`` from the properties."""
    classes, configs, max_conns, max_rate = {}, {}, {}, {}
    for ep in endpoints:
        prefix = listener_prefix(ep.listener_name)
        own = {k[len(prefix):]: v for k, v in originals.items() if k.startswith(prefix)}
        configs[ep.listener_name] = {**originals, **own}
        if own.get("transport.class"):
            classes[ep.listener_name] = own["transport.class"]
        for key, out in (("max.connections", max_conns), ("max.connection.creation.rate", max_rate)):
            if own.get(key) not in (None, ""):
                try:
                    out[ep.listener_name] = int(own[key])
                except (TypeError, ValueError):
                    from kafkatw.config import ConfigError
                    raise ConfigError.invalid(prefix + key, own[key], "an integer is required") from None
    return {"transport_classes": classes, "listener_configs": configs,
            "listener_max_connections": max_conns, "listener_max_connection_creation_rate": max_rate}


def parse_overrides(text):
    """``"host1:10,127.0.0.1:200"`` -> ``{"host1": 10, "127.0.0.1": 200}``."""
    out = {}
    for item in text.split(","):
        item = item.strip()
        if item:
            host, _, limit = item.rpartition(":")
            out[host.strip()] = int(limit)
    return out
