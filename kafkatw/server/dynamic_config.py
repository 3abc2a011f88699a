"""The logs' part of dynamic broker configs: broker defaults of topic configs (Kafka's
DynamicLogConfig) and the cleaner's backoff, applied live through the LogManager.

Which keys are dynamic and how an update is validated belong to ``kafkatw.config.dynamic``.
"""

from zope.interface import implementer

from kafkatw.config.dynamic import LOG_CLEANER_CONFIGS, LOG_CONFIGS, IBrokerReconfigurable
from kafkatw.storage import LogConfig


@implementer(IBrokerReconfigurable)
class DynamicLogConfig:
    """New broker defaults reach every log without a topic override of that config."""

    reconfigurable_configs = LOG_CONFIGS

    def __init__(self, log_manager):
        self.log_manager = log_manager

    def validate_reconfiguration(self, new_config):
        LogConfig.from_props(new_config.values())

    def reconfigure(self, old_config, new_config):
        self.log_manager.update_broker_defaults(new_config.values())


@implementer(IBrokerReconfigurable)
class DynamicLogCleanerConfig:
    reconfigurable_configs = LOG_CLEANER_CONFIGS

    def __init__(self, log_manager):
        self.log_manager = log_manager

    def validate_reconfiguration(self, new_config):
        pass  # the definition's validator already bounds it

    def reconfigure(self, old_config, new_config):
        self.log_manager.set_cleaner_backoff(new_config["log.cleaner.backoff.ms"])
