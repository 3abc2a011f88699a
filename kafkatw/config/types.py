"""The vocabulary of configuration: ConfigError, Password, Kafka's value types and validators,
ConfigKey/ConfigDef tables and the ConfigSource codes DescribeConfigs reports.

Imports nothing of the broker, so any layer (storage included) may build on it. It defines no
property names: the broker table is in ``broker.py``, the topic table in ``topic.py``.
"""

import re

import attr

INT_MAX = 2 ** 31 - 1
INT_MIN = -(2 ** 31)
LONG_MAX = 2 ** 63 - 1
LONG_MIN = -(2 ** 63)
SHORT_MAX = 2 ** 15 - 1
SHORT_MIN = -(2 ** 15)

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
MINUTE_MS = 60 * 1000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS


class ConfigError(ValueError):
    """A configuration problem; ``str()`` is one line naming key, value and what is allowed."""

    def __init__(self, message, name=None, value=None, reason=None):
        super().__init__(_one_line(message))
        self.name = name
        self.value = value
        self.reason = reason

    @classmethod
    def invalid(cls, name, value, reason=None):
        """Kafka's wording: ``Invalid value V for configuration K: reason``."""
        shown = "[hidden]" if isinstance(value, Password) else value
        text = "Invalid value %s for configuration %s" % (shown, name)
        if reason:
            text += ": " + reason
        return cls(text, name, value, reason)


def _one_line(text):
    return str(text).replace("\r", "\\r").replace("\n", "\\n")


class Password:
    """A secret value: compares by value, never prints it."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, Password) and other.value == self.value

    def __hash__(self):
        return hash(self.value)

    def __repr__(self):
        return "[hidden]"

    __str__ = __repr__


# -- types --------------------------------------------------------------------------------------
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = (
    "BOOLEAN", "STRING", "INT", "SHORT", "LONG", "DOUBLE", "LIST", "CLASS", "PASSWORD")

#: DescribeConfigsResponse ConfigType codes.
CONFIG_TYPE_CODES = {BOOLEAN: 1, STRING: 2, INT: 3, SHORT: 4, LONG: 5, DOUBLE: 6, LIST: 7,
                     CLASS: 8, PASSWORD: 9}

_INTEGER_BOUNDS = {INT: (INT_MIN, INT_MAX), SHORT: (SHORT_MIN, SHORT_MAX), LONG: (LONG_MIN, LONG_MAX)}
_INTEGER_RE = re.compile(r"[+-]?[0-9]+\Z")
_DOUBLE_RE = re.compile(r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)[dDfF]?\Z")
_CLASS_RE = re.compile(r"[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*\Z")
_LIST_SPLIT_RE = re.compile(r"\s*,\s*")




def split_list(text):
    """A comma separated string -> stripped items ([] for an empty string)."""
    return _LIST_SPLIT_RE.split(text.strip()) if text and text.strip() else []


def is_integer_text(text):
    return bool(_INTEGER_RE.match(text))

def parse_type(name, type_, value):
    """Convert ``value`` (a string from a file, or an already typed value) to ``type_``."""
    if value is None:
        return None
    if isinstance(value, str):
        trimmed = value.strip()
    if type_ == BOOLEAN:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and trimmed.lower() in ("true", "false"):
            return trimmed.lower() == "true"
        raise ConfigError.invalid(name, value, "Expected value to be either true or false")
    if type_ in _INTEGER_BOUNDS:
        lo, hi = _INTEGER_BOUNDS[type_]
        if isinstance(value, bool):
            pass
        elif isinstance(value, int):
            if lo <= value <= hi:
                return value
        elif isinstance(value, str) and _INTEGER_RE.match(trimmed):
            number = int(trimmed)
            if lo <= number <= hi:
                return number
        raise ConfigError.invalid(name, value, "Not a number of type %s" % type_)
    if type_ == DOUBLE:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and _DOUBLE_RE.match(trimmed):
            return float(trimmed.rstrip("dDfF").replace("Infinity", "inf"))
        raise ConfigError.invalid(name, value, "Not a number of type DOUBLE")
    if type_ == STRING:
        if isinstance(value, str):
            return trimmed
        raise ConfigError.invalid(name, value, "Expected value to be a string")
    if type_ == LIST:
        if isinstance(value, (list, tuple)):
            return [str(v).strip() for v in value]
        if isinstance(value, str):
            return [] if not trimmed else _LIST_SPLIT_RE.split(trimmed)
        raise ConfigError.invalid(name, value, "Expected a comma separated list.")
    if type_ == PASSWORD:
        if isinstance(value, Password):
            return value
        if isinstance(value, str):
            return Password(trimmed)
        raise ConfigError.invalid(name, value, "Expected value to be a string")
    if type_ == CLASS:
        if isinstance(value, str) and (_CLASS_RE.match(trimmed) or not trimmed):
            return trimmed
        if isinstance(value, type):
            return "%s.%s" % (value.__module__, value.__qualname__)
        raise ConfigError.invalid(name, value, "Expected a class name (dotted Python name).")
    raise AssertionError("unknown config type %r" % (type_,))


def to_config_string(type_, value):
    """A typed value rendered the way Kafka's DescribeConfigs renders it (None stays None)."""
    if value is None:
        return None
    if type_ == BOOLEAN:
        return "true" if value else "false"
    if type_ == LIST:
        return ",".join(value)
    if type_ == PASSWORD:
        return None
    if type_ == DOUBLE:
        return repr(float(value))
    return str(value)


# -- validators ---------------------------------------------------------------------------------
class Range:
    """``[min,...]``, ``[...,max]`` or ``[min,...,max]`` (Kafka's atLeast / between)."""

    def __init__(self, min=None, max=None):
        self.min = min
        self.max = max

    def __call__(self, name, value):
        if self.min is not None and value < self.min:
            raise ConfigError.invalid(name, value, "Value must be at least %s" % (self.min,))
        if self.max is not None and value > self.max:
            raise ConfigError.invalid(name, value, "Value must be no more than %s" % (self.max,))

    def __str__(self):
        if self.max is None:
            return "[%s,...]" % (self.min,)
        if self.min is None:
            return "[...,%s]" % (self.max,)
        return "[%s,...,%s]" % (self.min, self.max)


def at_least(minimum):
    return Range(min=minimum)


def between(minimum, maximum):
    return Range(min=minimum, max=maximum)


class OneOf:
    """The value (a string) is one of a fixed set (Kafka's ValidString)."""

    def __init__(self, *values, case_insensitive=False):
        self.values = values
        self.case_insensitive = case_insensitive

    def _ok(self, value):
        if self.case_insensitive:
            return value.lower() in (v.lower() for v in self.values)
        return value in self.values

    def __call__(self, name, value):
        if not self._ok(value):
            kind = " (case insensitive)" if self.case_insensitive else ""
            raise ConfigError.invalid(name, value, "String must be one of%s: %s"
                                      % (kind, ", ".join(self.values)))

    def __str__(self):
        return "[%s]" % (", ".join(self.values),)


class ListOf(OneOf):
    """Every entry of a list value is one of a fixed set (Kafka's ValidList)."""

    def __call__(self, name, value):
        for item in value:
            if not self._ok(item):
                raise ConfigError.invalid(name, ",".join(value), "String must be one of: %s"
                                          % (", ".join(self.values),))


class IntOneOfOrRange:
    """An int that is either one of a few special values or within a range (compression levels)."""

    def __init__(self, specials, low, high):
        self.specials = tuple(specials)
        self.range = Range(low, high)

    def __call__(self, name, value):
        if value not in self.specials:
            try:
                self.range(name, value)
            except ConfigError:
                raise ConfigError.invalid(name, value, "Value must be %s" % (self,))

    def __str__(self):
        return "%s or %s" % (self.range, " or ".join(str(s) for s in self.specials))


# -- definitions ----------------------------------------------------------------------------------
HIGH, MEDIUM, LOW = "HIGH", "MEDIUM", "LOW"


@attr.s(slots=True, frozen=True)
class ConfigKey:
    """One defined property: name, type, typed default, validator, importance, documentation."""

    name = attr.ib()
    type = attr.ib()
    default = attr.ib()
    validator = attr.ib()
    importance = attr.ib()
    documentation = attr.ib()

    @property
    def sensitive(self):
        return self.type == PASSWORD

    def parse(self, value):
        typed = parse_type(self.name, self.type, value)
        if typed is not None and self.validator is not None:
            try:
                self.validator(self.name, typed)
            except ConfigError as e:
                if isinstance(value, str):  # name the value as it was written
                    raise ConfigError.invalid(self.name, value.strip(), e.reason) from None
                raise
        return typed

    @property
    def valid_values(self):
        return "" if self.validator is None else str(self.validator)


class ConfigDef:
    """An ordered table of :class:`ConfigKey` s."""

    def __init__(self):
        self.keys = {}

    def define(self, name, type_, default, validator=None, importance=MEDIUM, doc=""):
        if name in self.keys:
            raise AssertionError("Configuration %s is defined twice." % (name,))
        key = ConfigKey(name, type_, default, validator, importance, doc)
        if default is not None:
            key.parse(default)  # a default must satisfy its own type and validator
        self.keys[name] = key
        return self

    def __contains__(self, name):
        return name in self.keys

    def __getitem__(self, name):
        return self.keys[name]

    def __iter__(self):
        return iter(self.keys.values())

    def names(self):
        return list(self.keys)


# -- sources ------------------------------------------------------------------------------------
#: DescribeConfigsResponse ConfigSource codes.
UNKNOWN_SOURCE = 0
TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

CONFIG_SOURCE_NAMES = {
    UNKNOWN_SOURCE: "UNKNOWN", TOPIC_CONFIG: "DYNAMIC_TOPIC_CONFIG",
    DYNAMIC_BROKER_CONFIG: "DYNAMIC_BROKER_CONFIG",
    DYNAMIC_DEFAULT_BROKER_CONFIG: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    STATIC_BROKER_CONFIG: "STATIC_BROKER_CONFIG", DEFAULT_CONFIG: "DEFAULT_CONFIG",
}

