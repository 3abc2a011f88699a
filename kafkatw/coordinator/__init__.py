"""Coordinators: the group coordinator (``group``) on ``__consumer_offsets`` and the transaction
coordinator (``txn``) on ``__transaction_state``. Nothing here is imported by the network or
storage layers.
"""
