"""Kafka's classic consumer-group protocol: the group state machine (``group``), its delayed
operations (``delayed``), persistence on ``__consumer_offsets`` (``offsets_log``) and the
:class:`~kafkatw.coordinator.group.coordinator.GroupCoordinator` tying them together.
"""
