"""LogConfig: one topic's resolved log settings, built from the topic config table of
``kafkatw.config.topic`` (names, types, defaults, validators, broker synonyms), which storage
may import because it imports nothing else of the broker. It validates values; it applies nothing.
"""

from kafkatw.config.topic import TOPIC_CONFIG_DEF, topic_defaults
from kafkatw.config.types import LIST, ConfigError, parse_type

#: Lower floors than the topic table's for storage built directly (tests, tools): Kafka's own
#: log layer accepts segments down to one legacy record overhead, while the 1 MiB minimum is
#: enforced where an administrator sets the value (CreateTopics, AlterConfigs, broker config).
_STORAGE_MINIMUMS = {"segment.bytes": 14, "segment.index.bytes": 8}


def _typed(name, value):
    key = TOPIC_CONFIG_DEF[name]
    typed = parse_type(name, key.type, value)
    floor = _STORAGE_MINIMUMS.get(name)
    if floor is not None:
        if typed < floor:
            raise ConfigError.invalid(name, value, "Value must be at least %d" % (floor,))
    elif key.validator is not None:
        key.validator(name, typed)
    return tuple(typed) if key.type == LIST else typed


def _spelling(name):
    """The attribute spelling of config ``name`` (dots as underscores), None for a name no
    attribute spells (an underscore or leading dot in it)."""
    if "_" in name or name.startswith("."):
        return None
    return name.replace(".", "_")


_DERIVED = ("compact", "delete", "log_append_time")  # set from the values in __init__
#: The attributes of the table's configs: slots of LogConfig (below)
_KNOWN_ATTRS = tuple(_spelling(key.name) for key in TOPIC_CONFIG_DEF)
assert None not in _KNOWN_ATTRS


class LogConfig:
    """Resolved topic config; attribute access in Python spelling (``config.segment_bytes``)."""

    # Every value of the table a slot, and unknown topic configs in the instance's __dict__:
    # CPython 3.11 specialises an attribute read of a slot, but none of an instance whose
    # values live in a materialised __dict__ (more than 30 attributes, or set through
    # __dict__), and an append reads nine of these (validator, log, segment). No
    # __getattr__ either: a class with one gets no specialised attribute read at all.
    __slots__ = _KNOWN_ATTRS + _DERIVED + ("_values", "__dict__")

    def __init__(self, values=None):
        self._values = {key.name: _typed(key.name, key.default) for key in TOPIC_CONFIG_DEF}
        for name, value in (values or {}).items():
            if name in TOPIC_CONFIG_DEF:
                self._values[name] = _typed(name, value)
            else:
                self._values[name] = value  # unknown topic configs are kept verbatim
        # (immutable once built)
        for name, value in self._values.items():
            attr_name = _ATTR_NAMES.get(name)
            if attr_name is None:
                attr_name = _attr_name(name)
                if attr_name is None:
                    continue
            setattr(self, attr_name, value)
        policy = self._values["cleanup.policy"]
        self.compact = "compact" in policy
        self.delete = "delete" in policy
        self.log_append_time = self._values["message.timestamp.type"] == "LogAppendTime"

    @classmethod
    def from_props(cls, broker_defaults=None, overrides=None):
        """Topic config from broker properties (``log.retention.hours``...) then topic overrides."""
        values = topic_defaults(broker_defaults or {})
        for name, value in (overrides or {}).items():
            if value is not None:
                values[name] = value
        return cls(values)

    def get(self, name):
        return self._values[name]

    def to_dict(self):
        return dict(self._values)

    @property
    def max_index_entries_offset(self):
        return self._values["segment.index.bytes"] // 8

    def __eq__(self, other):
        return isinstance(other, LogConfig) and self._values == other._values

    def __repr__(self):
        return "LogConfig(%r)" % (self._values,)


def _attr_name(name):
    """The attribute spelling of an unknown config ``name``, None for a name no attribute
    spells (an underscore or leading dot in it, or a LogConfig method's or slot's)."""
    attr_name = _spelling(name)
    return None if attr_name is None or hasattr(LogConfig, attr_name) else attr_name


_ATTR_NAMES = {key.name: attr for key, attr in zip(TOPIC_CONFIG_DEF, _KNOWN_ATTRS)}
assert None not in _ATTR_NAMES.values()
