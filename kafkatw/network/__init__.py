"""The network layer: listeners, framing, mute/unmute, request channel, transport.

Owns bytes and connections; knows nothing of handlers beyond ``IRequestHandler``.
"""
