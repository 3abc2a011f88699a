"""The log storage engine (Kafka's UnifiedLog/LocalLog/LogSegment/indexes/LogManager/LogCleaner).
Imports only kafkatw.protocol; knows nothing of sockets, requests or handlers.
"""

from .config import LogConfig
from .log import UnifiedLog
from .offsets import (UNKNOWN_OFFSET_METADATA, FetchDataInfo, FetchIsolation, LogAppendInfo,
                      LogOffsetMetadata)

__all__ = ["FetchIsolation", "LogOffsetMetadata", "UNKNOWN_OFFSET_METADATA", "FetchDataInfo",
           "LogAppendInfo", "LogConfig", "UnifiedLog", "LogManager"]


def __getattr__(name):
    if name == "LogManager":
        from .manager import LogManager
        return LogManager
    raise AttributeError(name)
