"""An instance attribute loaded on first use, without ``__getattr__``.

A class that defines ``__getattr__`` has every attribute read of its instances take
CPython 3.11's generic slow path (its LOAD_ATTR is never specialised), and an append reads
dozens of a log's. A :class:`loaded_on_use` class attribute is consulted only while the
instance has no value of that name: ``load(instance, name)`` sets the value (or raises
AttributeError), and every read after that finds the instance's own.
"""


class loaded_on_use:
    """A non-data descriptor: ``load(instance, name)`` on a read of an attribute not set."""

    __slots__ = ("load", "name")

    def __init__(self, load):
        self.load = load
        self.name = None

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        self.load(instance, self.name)
        return instance.__dict__[self.name]
