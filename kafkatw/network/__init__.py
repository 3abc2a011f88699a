"""The network layer: listeners, framing, mute/unmute, request channel, transport.

Owns bytes and connections; knows nothing of handlers beyond ``IRequestHandler``.
Entry point: ``listener.SocketServer(endpoints, handler, reactor, settings=SocketServerSettings
.from_config(config), request_logger=request_log.RequestLogger(path=..., to_logger=...))``;
``start()`` binds the listeners, ``bound_port(name)``, ``stop()``, ``metrics``.
"""
