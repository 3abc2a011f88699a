"""Plug-in loading: one way to turn a configured name into an object providing an interface.

Every extension point of the broker (transport, authorizer, principal builder, SASL mechanism,
quota callback, coordination store, replica selector) is a zope interface. A config value naming
one is either a short name that a Twisted plug-in registers (a :class:`PluginDescriptor` found by
``twisted.plugin.getPlugins`` in ``kafkatw.plugins`` or ``twisted.plugins``), or a dotted Python
name. What it resolves to is the implementation itself (an object already providing the interface)
or a factory called with the keyword arguments the caller gives; the result is checked with
``verifyObject`` before the broker starts, and anything wrong is one :class:`ConfigError` line
naming the key, the value and what is missing. This module knows no particular extension point.
"""

import attr
from twisted.plugin import IPlugin, getPlugins
from twisted.python.reflect import namedAny
from zope.interface import Attribute, Interface, implementer
from zope.interface.exceptions import Invalid
from zope.interface.verify import verifyObject

from kafkatw.config import ConfigError


class IKafkaPlugin(Interface):
    """What a Twisted plug-in module exposes for kafkatw: a named way to load one implementation."""

    interface = Attribute("The zope interface the loaded object provides (ITransportLayer, ...).")
    name = Attribute("The short name used in config (case-insensitive), e.g. 'PLAINTEXT'.")
    aliases = Attribute("Other names accepted for it, e.g. Kafka's Java class name.")
    description = Attribute("One line for listings.")

    def load():
        """Import and return the implementation or its factory (called only when configured)."""


@implementer(IPlugin, IKafkaPlugin)
@attr.s(frozen=True)
class PluginDescriptor:
    """A plug-in declared in a drop-in module without importing its implementation.

    ``target`` is the dotted name of the implementation or factory; importing it waits for
    :meth:`load`, so listing plug-ins costs no imports of their code.
    """

    interface = attr.ib()
    name = attr.ib()
    target = attr.ib()
    description = attr.ib(default="")
    aliases = attr.ib(default=(), converter=tuple)

    def load(self):
        return namedAny(self.target)


def plugin_packages():
    """The packages searched for drop-ins: kafkatw's own, then Twisted's shared one."""
    import twisted.plugins

    import kafkatw.plugins

    return (kafkatw.plugins, twisted.plugins)


def plugins_for(interface):
    """``{lower-case name or alias: descriptor}`` of the plug-ins that build ``interface``.

    kafkatw's own plug-ins come first; a third-party drop-in cannot take over a built-in name.
    """
    found = {}
    for package in plugin_packages():
        for plugin in getPlugins(IKafkaPlugin, package):
            if plugin.interface is not interface:
                continue
            for name in (plugin.name,) + tuple(plugin.aliases):
                found.setdefault(name.lower(), plugin)
    return found


def plugin_names(interface):
    """The short names registered for ``interface``, sorted (for error messages and listings)."""
    return sorted({p.name for p in plugins_for(interface).values()})


def resolve(key, value, interface):
    """The implementation or factory ``value`` names, as a short plug-in name or a dotted name.

    Raises :class:`ConfigError` naming ``key`` and ``value`` when nothing by that name exists.
    """
    if not isinstance(value, str) or not value.strip():
        raise ConfigError.invalid(key, value, "a plug-in name or a dotted Python name is required")
    name = value.strip()
    plugin = plugins_for(interface).get(name.lower())
    try:
        if plugin is not None:
            return plugin.load()
        if "." not in name:
            known = ", ".join(plugin_names(interface)) or "none"
            raise ConfigError.invalid(
                key, name, "no %s plug-in is registered under that name (registered: %s) and it is "
                "not a dotted Python name" % (interface.__name__, known))
        return namedAny(name)
    except ConfigError:
        raise
    except Exception as e:  # an import error inside the named module, a missing attribute, ...
        raise ConfigError.invalid(key, name, "cannot be loaded: %s: %s" % (type(e).__name__, e)) from None


def load(key, value, interface, **kwargs):
    """The object providing ``interface`` that config ``key = value`` names, verified.

    A resolved object that already provides ``interface`` is used as it is; otherwise it must be
    callable (a class or factory) and is called with ``kwargs``. If the result has a
    ``configure(configs)`` method and ``configs`` was given, it is called (Kafka's
    ``Configurable``). The result must pass ``verifyObject(interface, obj)``.
    """
    configs = kwargs.pop("configs", None)
    target = resolve(key, value, interface)
    if interface.providedBy(target):
        obj = target
    elif callable(target):
        try:
            obj = target(**kwargs)
        except ConfigError:
            raise  # already one line naming its own key
        except Exception as e:
            raise ConfigError.invalid(key, value, "constructing it failed: %s: %s"
                                      % (type(e).__name__, e)) from None
    else:
        raise ConfigError.invalid(key, value, "%r neither provides %s nor can be called to make one"
                                  % (target, interface.__name__))
    check(key, value, interface, obj)
    if configs is not None and callable(getattr(obj, "configure", None)):
        try:
            obj.configure(configs)
        except ConfigError:
            raise
        except Exception as e:
            raise ConfigError.invalid(key, value, "configure() failed: %s: %s"
                                      % (type(e).__name__, e)) from None
    return obj


def check(key, value, interface, obj):
    """``verifyObject(interface, obj)``, failing as one ConfigError line naming what is missing."""
    try:
        verifyObject(interface, obj)
    except Invalid as e:
        what = " ".join(str(e).split())
        raise ConfigError.invalid(key, value, "does not provide %s: %s" % (interface.__name__, what)) from None
    return obj
