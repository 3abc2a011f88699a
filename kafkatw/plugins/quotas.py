"""The built-in client quota callback, as a drop-in plug-in (``client.quota.callback.class``).

Only names live here: the implementation is imported when config names it.
"""

from kafkatw.registry import PluginDescriptor
from kafkatw.security.quota import IClientQuotaCallback

default_quota_callback = PluginDescriptor(
    IClientQuotaCallback, "default", "kafkatw.security.quota.DefaultQuotaCallback",
    "the user/client-id quotas set with AlterClientQuotas, in Kafka's precedence",
    aliases=("org.apache.kafka.server.quota.DefaultQuotaCallback",))
