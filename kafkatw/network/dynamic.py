"""The socket server's part of dynamic broker configs: connection limits (``max.connections``,
``max.connections.per.ip`` and its overrides) and ``num.io.threads``, applied live.

Which keys are dynamic and how an update is validated belong to ``kafkatw.config.dynamic``.
"""

from zope.interface import implementer

from kafkatw.config.dynamic import (
    SOCKET_SERVER_CONFIGS,
    THREAD_POOL_CONFIGS,
    IBrokerReconfigurable,
)
from kafkatw.network.settings import SocketServerSettings


@implementer(IBrokerReconfigurable)
class DynamicSocketServerConfig:
    reconfigurable_configs = SOCKET_SERVER_CONFIGS | THREAD_POOL_CONFIGS

    def __init__(self, socket_server):
        self.socket_server = socket_server

    def validate_reconfiguration(self, new_config):
        SocketServerSettings.from_config(new_config)

    def reconfigure(self, old_config, new_config):
        self.socket_server.update_settings(SocketServerSettings.from_config(new_config))
