"""kafkatw.registry: a configured name -> a verified object, one way for every extension point."""

import os
import sys
import textwrap

import twisted.plugins
from twisted.trial import unittest
from zope.interface import Interface, implementer

from kafkatw import registry
from kafkatw.config import ConfigError


class IGreeter(Interface):
    """A made-up extension point for these tests."""

    def greet(name):
        """Return a greeting."""


@implementer(IGreeter)
class Greeter:
    def __init__(self, greeting="hello"):
        self.greeting = greeting
        self.configs = None

    def greet(self, name):
        return "%s %s" % (self.greeting, name)

    def configure(self, configs):
        self.configs = configs


#: an instance already providing the interface: used as it is
GREETER = Greeter("hi")


@implementer(IGreeter)
class Mute:
    """Claims IGreeter but has no greet(): verifyObject refuses it."""


class NotAGreeter:
    def greet(self, name):
        return name


def broken_factory():
    raise RuntimeError("no greeting today")


class DottedNameTests(unittest.TestCase):
    def test_class_is_called_with_kwargs(self):
        obj = registry.load("greeter.class", __name__ + ".Greeter", IGreeter, greeting="hey")
        self.assertIsInstance(obj, Greeter)
        self.assertEqual(obj.greet("you"), "hey you")

    def test_provider_is_used_as_is(self):
        self.assertIs(registry.load("greeter.class", __name__ + ".GREETER", IGreeter), GREETER)

    def test_configure_is_called_with_configs(self):
        obj = registry.load("greeter.class", __name__ + ".Greeter", IGreeter, configs={"a": 1})
        self.assertEqual(obj.configs, {"a": 1})

    def test_unknown_module(self):
        e = self.assertRaises(ConfigError, registry.load, "greeter.class", "nosuchpkg.Thing", IGreeter)
        self.assertIn("Invalid value nosuchpkg.Thing for configuration greeter.class", str(e))
        self.assertIn("cannot be loaded", str(e))
        self.assertNotIn("\n", str(e))

    def test_unknown_short_name_lists_registered(self):
        e = self.assertRaises(ConfigError, registry.load, "greeter.class", "nosuch", IGreeter)
        self.assertIn("no IGreeter plug-in is registered under that name (registered: none)", str(e))

    def test_empty_value(self):
        e = self.assertRaises(ConfigError, registry.load, "greeter.class", " ", IGreeter)
        self.assertIn("configuration greeter.class", str(e))

    def test_refused_when_a_method_is_missing(self):
        e = self.assertRaises(ConfigError, registry.load, "greeter.class", __name__ + ".Mute", IGreeter)
        self.assertIn("configuration greeter.class", str(e))
        self.assertIn("does not provide IGreeter", str(e))
        self.assertIn("greet", str(e))
        self.assertNotIn("\n", str(e))

    def test_refused_when_interface_not_declared(self):
        e = self.assertRaises(ConfigError, registry.load, "greeter.class",
                              __name__ + ".NotAGreeter", IGreeter)
        self.assertIn("does not provide IGreeter", str(e))

    def test_refused_when_construction_fails(self):
        e = self.assertRaises(ConfigError, registry.load, "greeter.class",
                              __name__ + ".broken_factory", IGreeter)
        self.assertIn("RuntimeError: no greeting today", str(e))

    def test_not_callable(self):
        e = self.assertRaises(ConfigError, registry.load, "greeter.class", "os.sep", IGreeter)
        self.assertIn("neither provides IGreeter nor can be called", str(e))


class TwistedPluginTests(unittest.TestCase):
    """A drop-in in a ``twisted/plugins`` directory registers a short name."""

    def setUp(self):
        base = self.mktemp()
        plugdir = os.path.join(base, "twisted", "plugins")
        os.makedirs(plugdir)
        with open(os.path.join(plugdir, "kafkatw_test_greeters.py"), "w") as f:
            f.write(textwrap.dedent("""
                from kafkatw.registry import PluginDescriptor
                from tests.test_registry import IGreeter

                friendly = PluginDescriptor(IGreeter, "friendly", "tests.test_registry.Greeter",
                                            description="says hello", aliases=("org.example.Friendly",))
                """))
        twisted.plugins.__path__.append(plugdir)
        self.addCleanup(twisted.plugins.__path__.remove, plugdir)
        self.addCleanup(sys.modules.pop, "twisted.plugins.kafkatw_test_greeters", None)

    def test_short_name(self):
        obj = registry.load("greeter.class", "friendly", IGreeter, greeting="yo")
        self.assertEqual(obj.greet("x"), "yo x")

    def test_names_are_case_insensitive_and_aliases_work(self):
        self.assertIsInstance(registry.load("k", "FRIENDLY", IGreeter), Greeter)
        self.assertIsInstance(registry.load("k", "org.example.Friendly", IGreeter), Greeter)

    def test_listed(self):
        self.assertEqual(registry.plugin_names(IGreeter), ["friendly"])
        e = self.assertRaises(ConfigError, registry.load, "k", "unfriendly", IGreeter)
        self.assertIn("(registered: friendly)", str(e))

    def test_other_interfaces_do_not_see_it(self):
        class IOther(Interface):
            pass

        self.assertEqual(registry.plugin_names(IOther), [])
