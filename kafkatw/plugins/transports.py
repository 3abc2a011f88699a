"""The built-in transport layers as plug-ins, named by Kafka's security protocols.

A listener's transport is the one registered under its security protocol unless
``listener.name.<listener>.transport.class`` names another (a short name or a dotted name).
Only names live here: the implementations are imported when a listener uses them.
"""

from kafkatw.network.transport import ITransportLayer
from kafkatw.registry import PluginDescriptor

plaintext = PluginDescriptor(
    ITransportLayer, "PLAINTEXT", "kafkatw.network.transport.PlaintextTransportLayer",
    "Plain TCP; fetched records go out with os.sendfile (zero copy).",
    aliases=("SASL_PLAINTEXT",))

ssl = PluginDescriptor(
    ITransportLayer, "SSL", "kafkatw.network.transport.TlsTransportLayer",
    "TLS; fetched records are read and encrypted in worker threads, 1 MiB at a time, and written "
    "through the TLS transport.",
    aliases=("SASL_SSL",))
