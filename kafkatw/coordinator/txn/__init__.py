"""Kafka's transaction coordinator (KIP-98, with KIP-890 part 1 verification): one transactional
id's state machine (``metadata``), persistence on ``__transaction_state`` (``txn_log``), markers
(``markers``) and the :class:`~kafkatw.coordinator.txn.coordinator.TransactionCoordinator`.
"""
