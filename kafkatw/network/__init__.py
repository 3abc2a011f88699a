"""The network layer: listeners, framing, mute/unmute, request channel, transport.

Owns bytes and connections; knows nothing of handlers beyond ``IRequestHandler``.
Entry point: ``listener.SocketServer(endpoints, handler, reactor, settings=SocketServerSettings
.from_config(config), request_logger=request_log.RequestLogger(path=..., to_logger=...))``;
``start()`` binds the listeners (``listen(endpoint)`` one, as ``listener.ListenerService`` does
in the broker's service tree), ``bound_port(name)``, ``stop()``, ``metrics``. Each listener's
``transport.ITransportLayer`` comes from the plug-in registry (``kafkatw/plugins/transports.py``).
"""
