"""LogConfig: the topic-level log settings under Kafka's names, resolved from broker defaults
(broker property names) and per-topic overrides. It validates values; it applies nothing.
"""

LONG_MAX = 2 ** 63 - 1

# topic name -> (broker property names in priority order, default, type, unit multiplier list)
_INT, _FLOAT, _BOOL, _STR, _LIST = "int", "float", "bool", "str", "list"

# Each entry: topic config name -> (type, default, [(broker name, multiplier), ...]).
_DEFS = {
    "segment.bytes": (_INT, 1073741824, [("log.segment.bytes", 1)]),
    "segment.ms": (_INT, 604800000, [("log.roll.ms", 1), ("log.roll.hours", 3600000)]),
    "segment.jitter.ms": (_INT, 0, [("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3600000)]),
    "segment.index.bytes": (_INT, 10485760, [("log.index.size.max.bytes", 1)]),
    "index.interval.bytes": (_INT, 4096, [("log.index.interval.bytes", 1)]),
    "retention.ms": (_INT, 604800000, [("log.retention.ms", 1), ("log.retention.minutes", 60000),
                                        ("log.retention.hours", 3600000)]),
    "retention.bytes": (_INT, -1, [("log.retention.bytes", 1)]),
    "cleanup.policy": (_LIST, "delete", [("log.cleanup.policy", 1)]),
    "delete.retention.ms": (_INT, 86400000, [("log.cleaner.delete.retention.ms", 1)]),
    "min.cleanable.dirty.ratio": (_FLOAT, 0.5, [("log.cleaner.min.cleanable.ratio", 1)]),
    "min.compaction.lag.ms": (_INT, 0, [("log.cleaner.min.compaction.lag.ms", 1)]),
    "max.compaction.lag.ms": (_INT, LONG_MAX, [("log.cleaner.max.compaction.lag.ms", 1)]),
    "max.message.bytes": (_INT, 1048588, [("message.max.bytes", 1)]),
    "message.timestamp.type": (_STR, "CreateTime", [("log.message.timestamp.type", 1)]),
    "message.timestamp.before.max.ms": (_INT, LONG_MAX,
                                        [("log.message.timestamp.before.max.ms", 1)]),
    "message.timestamp.after.max.ms": (_INT, 3600000, [("log.message.timestamp.after.max.ms", 1)]),
    "file.delete.delay.ms": (_INT, 60000, [("log.segment.delete.delay.ms", 1)]),
    "flush.messages": (_INT, LONG_MAX, [("log.flush.interval.messages", 1)]),
    "flush.ms": (_INT, LONG_MAX, [("log.flush.interval.ms", 1),
                                  ("log.flush.scheduler.interval.ms", 1)]),
    "compression.type": (_STR, "producer", [("compression.type", 1)]),
    "preallocate": (_BOOL, False, [("log.preallocate", 1)]),
    "min.insync.replicas": (_INT, 1, [("min.insync.replicas", 1)]),
    "unclean.leader.election.enable": (_BOOL, False, [("unclean.leader.election.enable", 1)]),
    "message.downconversion.enable": (_BOOL, True, [("log.message.downconversion.enable", 1)]),
}

TOPIC_CONFIG_NAMES = tuple(sorted(_DEFS))


def _parse(name, kind, value):
    try:
        if kind == _INT:
            return int(value)
        if kind == _FLOAT:
            return float(value)
        if kind == _BOOL:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text not in ("true", "false"):
                raise ValueError(value)
            return text == "true"
        if kind == _LIST:
            if isinstance(value, (list, tuple)):
                return tuple(v.strip() for v in value)
            return tuple(v.strip() for v in str(value).split(",") if v.strip())
        return str(value)
    except (TypeError, ValueError):
        raise ValueError("Invalid value %r for configuration %s" % (value, name))


class LogConfig:
    """Resolved topic config; attribute access in Python spelling (``config.segment_bytes``)."""

    def __init__(self, values=None):
        self._values = {}
        for name, (kind, default, _) in _DEFS.items():
            self._values[name] = _parse(name, kind, default)
        for name, value in (values or {}).items():
            self._set(name, value)
        self._validate()

    def _set(self, name, value):
        if name not in _DEFS:
            self._values[name] = value  # unknown topic configs are kept verbatim
            return
        self._values[name] = _parse(name, _DEFS[name][0], value)

    def _validate(self):
        v = self._values
        if v["segment.bytes"] < 14:
            raise ValueError("segment.bytes must be at least 14")
        if v["segment.index.bytes"] < 8:
            raise ValueError("segment.index.bytes must be at least 8")
        for p in v["cleanup.policy"]:
            if p not in ("delete", "compact"):
                raise ValueError("Invalid value %s for configuration cleanup.policy" % (p,))
        if v["message.timestamp.type"] not in ("CreateTime", "LogAppendTime"):
            raise ValueError("Invalid message.timestamp.type %r" % (v["message.timestamp.type"],))
        if not 0.0 <= v["min.cleanable.dirty.ratio"] <= 1.0:
            raise ValueError("min.cleanable.dirty.ratio must be in [0, 1]")

    @classmethod
    def from_props(cls, broker_defaults=None, overrides=None):
        """Topic config from broker properties (``log.retention.hours``...) then topic overrides."""
        broker_defaults = broker_defaults or {}
        values = {}
        for name, (kind, _default, sources) in _DEFS.items():
            for broker_name, mult in sources:
                if broker_name in broker_defaults and broker_defaults[broker_name] is not None:
                    raw = broker_defaults[broker_name]
                    if mult != 1:
                        parsed = _parse(broker_name, _INT, raw)
                        values[name] = parsed * mult if parsed >= 0 else parsed
                    else:
                        values[name] = raw
                    break
        for name, value in (overrides or {}).items():
            if value is not None:
                values[name] = value
        return cls(values)

    def get(self, name):
        return self._values[name]

    def to_dict(self):
        return dict(self._values)

    def __getattr__(self, attr_name):
        if attr_name.startswith("_"):
            raise AttributeError(attr_name)
        name = attr_name.replace("_", ".")
        try:
            value = self._values[name]
        except KeyError:
            raise AttributeError(attr_name)
        # immutable once built: later reads are plain attribute hits (several per append)
        self.__dict__[attr_name] = value
        return value

    @property
    def compact(self):
        return "compact" in self._values["cleanup.policy"]

    @property
    def delete(self):
        return "delete" in self._values["cleanup.policy"]

    @property
    def log_append_time(self):
        return self._values["message.timestamp.type"] == "LogAppendTime"

    @property
    def max_index_entries_offset(self):
        return self._values["segment.index.bytes"] // 8

    def __eq__(self, other):
        return isinstance(other, LogConfig) and self._values == other._values

    def __repr__(self):
        return "LogConfig(%r)" % (self._values,)
