"""Authentication and identity: principals, SASL mechanisms and their credentials.

Owns the security layer's value objects, zope interfaces and default implementations; it
imports only ``kafkatw.protocol``, ``kafkatw.config`` and ``kafkatw.registry``. The per-connection
state machine that drives a mechanism lives in ``kafkatw.network.authenticator``.
"""
