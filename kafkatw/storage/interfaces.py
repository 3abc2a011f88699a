"""The storage layer's contract with its callers: :class:`ILog`, one partition's log as the
replica manager, the cleaner, the coordinators and the admin handlers use it. The engine
behind it (segments, indexes, recovery) is :class:`kafkatw.storage.log.UnifiedLog`'s own.
"""

from zope.interface import Attribute, Interface


class ILog(Interface):
    """One partition's log (Kafka's UnifiedLog as ReplicaManager and Partition see it).

    Offsets are ints; ``*_metadata`` are :class:`~kafkatw.storage.offsets.LogOffsetMetadata`
    (an offset with its segment and byte position where known). Every call runs on the
    reactor thread; a method touching a file raises ``KafkaError(KAFKA_STORAGE_ERROR)`` once
    the log's dir is offline.
    """

    topic = Attribute("The topic name.")
    partition = Attribute("The partition index.")
    topic_id = Attribute("The topic id (16 bytes) in partition.metadata, or None if it has none.")
    dir = Attribute("The partition's directory (its parent is the log dir).")
    config = Attribute("The LogConfig in force (replaced by update_config).")

    log_start_offset = Attribute("The first offset still readable.")
    log_end_offset = Attribute("The offset the next appended record gets (LEO).")
    log_end_offset_metadata = Attribute("The LEO with its segment position.")
    high_watermark = Attribute("The high watermark: consumers read below it.")
    high_watermark_metadata = Attribute("The HW with its segment position where it can be found.")
    last_stable_offset = Attribute("The LSO: read_committed consumers read below it (<= HW).")
    last_stable_offset_metadata = Attribute("The LSO with its segment position where found.")
    is_offline = Attribute("True once the log's dir went offline or the log is being deleted.")
    size = Attribute("Bytes in all segments (DescribeLogDirs).")
    segments = Attribute("The segments in offset order, a new list (the cleaner's view).")

    first_unstable_offset = Attribute(
        "None or the first offset of the oldest open transaction (an int or LogOffsetMetadata); "
        "the replica manager sets it from producer state, and the LSO stops there.")
    producer_state_manager = Attribute(
        "The partition's ProducerStateManager once the replica manager loaded it, else None; "
        "the cleaner keeps each active producer's last batch.")
    leader_epoch_cache = Attribute(
        "The LeaderEpochFileCache (epoch, start offset): a new leader assigns its epoch there, "
        "a follower names its latest epoch in its fetches.")
    roll_listener = Attribute(
        "None or ``callable(log, new_base_offset)``, called after a segment roll (the replica "
        "manager snapshots producer state there; it chains a listener already installed).")

    def may_have_producer_snapshot():
        """Whether a producer state snapshot may be in :attr:`dir` (only such logs can hold
        open transactions at start-up; a log not yet opened answers from its summary)."""

    def append_as_leader(buf, leader_epoch, batch_headers=None):
        """Validate the v2 batches in the writable ``buf``, assign offsets in place, write them
        and return a LogAppendInfo. ``batch_headers``: ``[(position, BatchHeader)]`` of ``buf``
        if the caller read them already. Raises KafkaError for invalid batches."""

    def append_as_follower(buf, batch_headers=None):
        """A follower's append: the v2 batches in ``buf`` keep the offsets and epochs their
        leader gave them; validated and written, a LogAppendInfo returned. Raises KafkaError
        for invalid batches or ones below the log end."""

    def truncate_to(offset):
        """A follower's truncation: remove everything at and after ``offset``; True if
        anything was removed."""

    def truncate_fully_and_start_at(offset):
        """Empty the log and start it at ``offset`` (a follower behind its leader's log start)."""

    def maybe_increment_log_start_offset(offset):
        """Raise the log start offset to ``offset`` (never lower it): a follower learns it from
        its leader. True if it moved."""

    def append_aborted_txn(producer_id, first_offset, last_offset, last_stable_offset):
        """Record a transaction aborted by the marker at ``last_offset`` in the transaction
        index of the segment holding it (Kafka's LogSegment.updateTxnIndex, after the append)."""

    def fetch_offset_snapshot():
        """``(log_start_offset, high_watermark, last_stable_offset)`` in one call: what a
        fetch answers, read before its records (Kafka's fetchOffsetSnapshot)."""

    def read(start_offset, max_length, isolation, min_one_message):
        """A FetchDataInfo for up to ``max_length`` bytes from ``start_offset`` below the bound
        of ``isolation`` (a FetchIsolation); ``min_one_message`` lets the first batch exceed
        ``max_length``. Its records are a FileRegion: no record byte is read. Raises
        KafkaError(OFFSET_OUT_OF_RANGE) outside [log start, LEO]."""

    def update_high_watermark(offset):
        """Set the HW, clamped to [log start, LEO]; returns the value set."""

    def maybe_increment_high_watermark(offset):
        """Raise the HW to ``offset`` (never lower it); True if it moved."""

    def fetch_offset_by_timestamp(timestamp):
        """``(offset, timestamp, leader_epoch)`` for ListOffsets (a timestamp or Kafka's
        special values -1/-2/-3/-4/-5), or None when no record matches."""

    def end_offset_for_epoch(epoch):
        """``(epoch, end offset)`` as OffsetForLeaderEpoch answers for ``epoch``."""

    def delete_records_before(offset):
        """DeleteRecords: move the log start offset up to ``offset`` (at most the HW; beyond
        raises KafkaError(OFFSET_OUT_OF_RANGE)); returns the new log start offset."""

    def floor_segment(offset):
        """The segment holding ``offset`` (the last one whose base is <= it), or None."""

    def replace_segments(replacements):
        """Swap cleaned segments in (Kafka's replaceSegments): ``replacements`` is
        ``[(new segment named .cleaned, [old segments it replaces])]``. Each new file becomes
        .swap, the old ones .deleted (removed in the background), then the new one its final
        name. Returns False (and takes the dir offline) on an I/O error; a restart then
        completes the swap."""
