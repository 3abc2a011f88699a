"""LogValidator: checks the batches of one append and, for a leader, assigns offsets by rewriting
each v2 header in place (base offset, partition leader epoch, LogAppendTime). Records are walked
by their length prefixes only (decompressed, bounded; on compacted topics the walk also reads
each record's key length), nothing decoded or recompressed. Raises KafkaError with Kafka's codes.
"""

from kafkatw.protocol import compression, errors, records
from kafkatw.protocol.errors import KafkaError

from .offsets import LogAppendInfo

LOG_OVERHEAD = records.LOG_OVERHEAD
MAX_DECOMPRESSED_BATCH_BYTES = compression.MAX_DECOMPRESSED_BATCH_BYTES
validate_batch, check_records = records.validate_batch, records.check_records
set_base_offset_length_and_epoch = records.set_base_offset_length_and_epoch


def validate_and_assign(buf, config, now_ms, next_offset, leader_epoch=None,
                        assign_offsets=True, log_start_offset=0, topic_partition=None,
                        batch_headers=None):
    """Validate every batch in ``buf``; returns ``(LogAppendInfo, batches)`` where ``batches``
    lists ``(position, size, last_offset, max_timestamp)`` for the segment's indexes.
    ``topic_partition`` ((topic, partition)) names the partition in record errors.
    ``batch_headers``: ``[(position, BatchHeader)]`` read from ``buf`` (as ``read_batch_header``
    does) by the caller; a batch at a position not listed there is read here."""
    total = len(buf)
    if total > config.segment_bytes:
        raise KafkaError(errors.RECORD_LIST_TOO_LARGE,
                         "Message batch size is %d bytes in append to partition which exceeds "
                         "the maximum configured segment size of %d." % (total, config.segment_bytes))
    max_message_bytes = config.max_message_bytes
    log_append = config.log_append_time
    lower = upper = None
    if not log_append:
        before = config.message_timestamp_before_max_ms
        after = config.message_timestamp_after_max_ms
        lower = now_ms - before
        upper = now_ms + after
    compacted = assign_offsets and config.compact  # compacted topics check every record's key
    batches = []
    first_offset = -1
    last_offset = -1
    max_ts = -1
    offset_of_max_ts = -1
    record_count = 0
    pos = 0
    expected_next = next_offset
    known = batch_headers or ()
    n_known = len(known)
    i = 0
    while pos < total:
        if i < n_known and known[i][0] == pos:
            header = known[i][1]
        else:
            if total - pos < records.LOG_OVERHEAD:
                raise records.CorruptRecordError(
                    "%d trailing bytes are too few for a record batch" % (total - pos,))
            header = records.read_batch_header(buf, pos)
        i += 1
        size = header.batch_length + LOG_OVERHEAD
        if size > max_message_bytes:
            raise KafkaError(errors.MESSAGE_TOO_LARGE,
                             "The record batch size of %d bytes exceeds the maximum allowed "
                             "batch size %d." % (size, max_message_bytes))
        validate_batch(buf, pos, header)
        if compacted and not header.is_control:
            _check_keys(buf, pos, header, topic_partition)
        elif assign_offsets:
            # Kafka walks every produced batch's records; a garbage or bomb body, or a count
            # the records don't match, is refused here instead of stored for consumers to trip on
            check_records(buf, pos, header, MAX_DECOMPRESSED_BATCH_BYTES)
        if not log_append and assign_offsets:
            # (a follower takes the leader's batches as they are, timestamps included)
            if header.max_timestamp > upper or header.base_timestamp > upper \
                    or (header.base_timestamp < lower and header.base_timestamp != -1):
                raise KafkaError(errors.INVALID_TIMESTAMP,
                                 "Timestamp %d of a record batch is out of range "
                                 "[%d, %d]" % (header.max_timestamp, lower, upper))
        if assign_offsets:
            base = expected_next
            if leader_epoch is not None:
                set_base_offset_length_and_epoch(buf, pos, base, header.batch_length, leader_epoch)
            else:
                records.set_base_offset(buf, pos, base)
            if log_append:
                records.set_log_append_time(buf, pos, now_ms)
                batch_max_ts = now_ms
            else:
                batch_max_ts = header.max_timestamp
        else:
            base = header.base_offset
            if base < expected_next:
                raise KafkaError(errors.INVALID_RECORD, "Out of order offsets: batch base offset %d below %d"
                                % (base, expected_next))
            batch_max_ts = header.max_timestamp
        batch_last = base + header.last_offset_delta
        if first_offset < 0:
            first_offset = base
        if batch_max_ts > max_ts:
            max_ts, offset_of_max_ts = batch_max_ts, batch_last
        record_count += header.records_count
        batches.append((pos, size, batch_last, batch_max_ts))
        last_offset = batch_last
        expected_next = batch_last + 1
        pos += size
    info = LogAppendInfo(first_offset, last_offset, max_ts, offset_of_max_ts,
                         now_ms if log_append else -1, log_start_offset, record_count, pos,
                         leader_epoch if leader_epoch is not None else -1)
    return info, batches


def _check_keys(buf, pos, header, topic_partition):
    """Kafka's LogValidator.validateKey for a compacted topic: every record needs a key;
    INVALID_RECORD with one record error (record index in the batch) per keyless record."""
    keyless = records.keyless_records(buf, pos, header, compression.MAX_DECOMPRESSED_BATCH_BYTES)
    if not keyless:
        return
    tp = "%s-%s" % tuple(topic_partition) if topic_partition else "unknown"
    bad = [(i, "Compacted topic cannot accept message without key in topic partition %s" % tp)
           for i in keyless]
    if bad:
        shown = ", ".join("RecordError(batchIndex=%d, message='%s')" % e for e in bad[:3])
        error = KafkaError(errors.INVALID_RECORD,
                           "One or more records have been rejected due to %d record errors in "
                           "total, and only showing the first three errors at most: [%s]"
                           % (len(bad), shown))
        error.record_errors = bad
        raise error
