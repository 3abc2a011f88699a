"""The server's part of dynamic broker configs: broker defaults of topic configs (Kafka's
DynamicLogConfig) and the cleaner's backoff through the LogManager, producer id expiry through
the replica manager, applied live.

Which keys are dynamic and how an update is validated belong to ``kafkatw.config.dynamic``.
"""

from zope.interface import implementer

from kafkatw.config.dynamic import (
    LOG_CLEANER_CONFIGS,
    LOG_CONFIGS,
    PRODUCER_STATE_CONFIGS,
    REPLICATION_QUOTA_CONFIGS,
    IBrokerReconfigurable,
)
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


@implementer(IBrokerReconfigurable)
class DynamicProducerStateConfig:
    reconfigurable_configs = PRODUCER_STATE_CONFIGS

    def __init__(self, replica_manager):
        self.replica_manager = replica_manager

    def validate_reconfiguration(self, new_config):
        pass  # the definition's validator already bounds it

    def reconfigure(self, old_config, new_config):
        self.replica_manager.set_producer_id_expiration_ms(new_config["producer.id.expiration.ms"])


@implementer(IBrokerReconfigurable)
class DynamicReplicationQuotaConfig:
    """The leader and follower replication throttles (bytes/s) in force at once."""

    reconfigurable_configs = REPLICATION_QUOTA_CONFIGS

    def __init__(self, replica_manager):
        self.replica_manager = replica_manager

    def validate_reconfiguration(self, new_config):
        pass  # the definitions' validators already bound them

    def reconfigure(self, old_config, new_config):
        rm = self.replica_manager
        rm.leader_quota.update_quota(new_config["leader.replication.throttled.rate"])
        rm.follower_quota.update_quota(new_config["follower.replication.throttled.rate"])
