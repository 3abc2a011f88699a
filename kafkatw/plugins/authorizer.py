"""The built-in authorizer as a drop-in plug-in: Kafka's ACL authorizer under its own and
Kafka's class names (so an existing server.properties keeps working). Names only: the
implementation is imported when config names it."""

from kafkatw.registry import PluginDescriptor
from kafkatw.security.authorizer import IAuthorizer

acl = PluginDescriptor(
    IAuthorizer, "acl", "kafkatw.security.acl_authorizer.AclAuthorizer",
    "Kafka's ACLs (super.users, allow.everyone.if.no.acl.found), kept in the metadata log dir",
    aliases=("kafka.security.authorizer.AclAuthorizer",
             "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
             "kafka.security.auth.SimpleAclAuthorizer"))
