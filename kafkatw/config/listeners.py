"""Listener parsing: ``listeners``-style URIs and ``listener.security.protocol.map`` into
:class:`Endpoint` values, validated with one-line errors naming the key.

It binds nothing; the network layer and the service use the endpoints.
"""

import re

import attr

from kafkatw.config.types import ConfigError, split_list

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@attr.s(slots=True, frozen=True)
class Endpoint:
    """A listener: name, security protocol, host ("" = all interfaces) and port (0 = any)."""

    listener_name = attr.ib()
    security_protocol = attr.ib()
    host = attr.ib()
    port = attr.ib()

    def connection_string(self):
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "%s://%s:%d" % (self.listener_name, host, self.port)

    def __str__(self):
        return self.connection_string()


_ENDPOINT_RE = re.compile(r"(.*)://\[?([0-9a-zA-Z\-%._:]*?)\]?:(-?[0-9]+)\Z")


def parse_host_port(name, value, example):
    """``HOST:PORT`` of an HTTP listener key (``[::1]:9404`` for IPv6, an empty host for all
    interfaces, port 0 for any) -> (host, port); ConfigError naming ``name`` otherwise."""
    host, sep, port = (value or "").strip().rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError.invalid(name, value, "expected HOST:PORT, e.g. %s" % (example,))
    return host.strip("[]"), int(port)


def parse_protocol_map(name, text):
    mapping = {}
    for entry in split_list(text):
        listener, sep, protocol = entry.partition(":")
        listener, protocol = listener.strip().upper(), protocol.strip().upper()
        if not sep or not listener or not protocol:
            raise ConfigError.invalid(name, text, "entry %r must be of the form "
                                      "LISTENER_NAME:SECURITY_PROTOCOL" % (entry,))
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError.invalid(name, text, "security protocol %s of listener %s is not one "
                                      "of %s" % (protocol, listener, ", ".join(SECURITY_PROTOCOLS)))
        if listener in mapping:
            raise ConfigError.invalid(name, text, "listener %s is mapped twice" % (listener,))
        mapping[listener] = protocol
    return mapping


def parse_listeners(name, text, protocol_map):
    """``listeners``-style text -> [Endpoint]; names are upper-cased as Kafka normalises them."""
    endpoints = []
    for entry in split_list(text):
        m = _ENDPOINT_RE.match(entry)
        if m is None:
            raise ConfigError.invalid(name, text, "Unable to parse %s to a broker endpoint "
                                      "(expected NAME://host:port)" % (entry,))
        listener = m.group(1).upper()
        host = m.group(2)
        port = int(m.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError.invalid(name, text, "port %d of listener %s is not between 0 and "
                                      "65535" % (port, listener))
        protocol = protocol_map.get(listener)
        if protocol is None:
            raise ConfigError.invalid(name, text, "No security protocol defined for listener %s "
                                      "(listener.security.protocol.map has %s)"
                                      % (listener, ", ".join(protocol_map) or "no entries"))
        endpoints.append(Endpoint(listener, protocol, host, port))
    names = [e.listener_name for e in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError.invalid(name, text, "Each listener must have a different name")
    ports = [e.port for e in endpoints if e.port != 0]
    if len(set(ports)) != len(ports):
        raise ConfigError.invalid(name, text, "Each listener must have a different port")
    return endpoints

