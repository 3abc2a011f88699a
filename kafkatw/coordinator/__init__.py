"""Coordinators: the group coordinator (``group``) on ``__consumer_offsets``; a transaction
coordinator may live beside it. Nothing here is imported by the network or storage layers.
"""
