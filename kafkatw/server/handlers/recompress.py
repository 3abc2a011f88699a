"""The ``compression.type`` policy of a produce (Kafka's BrokerCompressionType and the
recompressing branch of LogValidator): which codec a topic stores, and rebuilding a batch in
that codec when it differs from the producer's. Untouched batches are never read.
"""

from kafkatw.protocol import compression, errors
from kafkatw.protocol import records as rec
from kafkatw.protocol.errors import KafkaError

PRODUCER = "producer"
UNCOMPRESSED = "uncompressed"


def target_codec(compression_type, source_codec):
    """The codec a batch compressed with ``source_codec`` is stored with."""
    if compression_type in (None, "", PRODUCER):
        return source_codec
    if compression_type == UNCOMPRESSED:
        return compression.NONE
    return compression.CODEC_IDS[compression_type]


#: The level config of each codec that has one (KIP-390).
LEVEL_CONFIGS = {compression.GZIP: "compression.gzip.level", compression.LZ4: "compression.lz4.level",
                 compression.ZSTD: "compression.zstd.level"}
#: The same by ``compression.type`` value ("gzip", "lz4", "zstd"): one look-up per produced topic.
_LEVEL_CONFIG_OF_TYPE = {compression.CODEC_NAMES[codec]: config for codec, config in LEVEL_CONFIGS.items()}


def topic_compression(apis, overrides):
    """``(compression.type, level)`` of a topic with the config ``overrides`` (the
    metadata's topic_configs): its overrides, else the broker's configs; the level is the one
    of the codec ``compression.type`` names (None where it names none)."""
    value = overrides.get("compression.type")
    if value is None:
        value = apis.compression_type  # (the broker's, kept by KafkaApis per config)
    level = None
    level_config = _LEVEL_CONFIG_OF_TYPE.get(value)
    if level_config is not None:
        level = overrides.get(level_config)
        level = apis.config_value(level_config) if level is None else int(level)
    return value, level


#: A batch with this many records or bytes or more is recompressed in the thread pool: the
#: records are decoded and encoded again in Python, some 12-30 us each, so a 10,000-record
#: batch would hold the reactor for 0.1-0.3 s.
OFF_REACTOR_RECORDS = 64
OFF_REACTOR_BYTES = 64 * 1024


def needs_recompress(compression_type, header):
    """Whether a batch with ``header`` is stored in another codec than it came in."""
    return not header.is_control and target_codec(compression_type, header.compression) != header.compression


def recompress_off_reactor(header):
    """Whether recompressing the batch with ``header`` is long enough for the thread pool."""
    return header.records_count >= OFF_REACTOR_RECORDS or header.size_in_bytes >= OFF_REACTOR_BYTES


def recompress_all(items):
    """``[(key, buf, compression_type, header, level)]`` -> ``[(key, new buffer or KafkaError)]``:
    pure work on the buffers handed in, for a pool thread."""
    out = []
    for key, buf, compression_type, header, level in items:
        try:
            out.append((key, maybe_recompress(buf, compression_type, header, level)))
        except KafkaError as e:
            out.append((key, e))
    return out


def maybe_recompress(buf, compression_type, header=None, level=None):
    """``buf`` (one v2 batch) unchanged when its codec is the target, else a new bytearray with
    the same records, producer fields and timestamps in the target codec, at ``level`` (Kafka's
    level for it; None: the codec's default). ``header``: the batch's header when the caller
    has read it already. Raises KafkaError."""
    if header is None:
        header = rec.read_batch_header(buf, 0)
    target = target_codec(compression_type, header.compression)
    if target == header.compression or header.is_control:
        return buf
    try:
        # records keep their offset deltas and timestamps; a bomb stops at the cap
        _, records = rec.decode_batch(buf, 0, max_size=compression.MAX_DECOMPRESSED_BATCH_BYTES)
    except KafkaError:
        raise
    except Exception as e:
        raise KafkaError(errors.CORRUPT_MESSAGE, "cannot decompress record batch: %s" % (e,))
    out = rec.build_batch(
        records,
        base_offset=header.base_offset,
        compression=target,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        timestamp_type=header.timestamp_type,
        base_timestamp=header.base_timestamp,
        partition_leader_epoch=header.partition_leader_epoch,
        max_timestamp=header.max_timestamp,
        last_offset_delta=header.last_offset_delta,
        compression_level=level,
    )
    return bytearray(out)
