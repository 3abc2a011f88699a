"""The nemesis' verdict: lost acknowledged records, duplicates, reordering and offset moves from
what the producers were told and what a final read returns, and replica divergence from the
batches in every broker's segment files (read after a clean stop). Pure functions over data;
collecting that data is the workload's and runner's job."""

import os

import attr

from kafkatw.nemesis.workload import parse_value
from kafkatw.protocol.records import iter_batch_headers

_LOG_SUFFIX = ".log"


@attr.s
class Verdict:
    """What the checker found; ``ok`` when nothing is lost, duplicated, reordered or divergent.

    Each list holds short descriptions naming the partition and offsets, for the report."""
    acked = attr.ib(default=0)
    read = attr.ib(default=0)
    lost = attr.ib(factory=list)
    duplicates = attr.ib(factory=list)
    reordered = attr.ib(factory=list)
    moved = attr.ib(factory=list)
    divergent = attr.ib(factory=list)
    lagging = attr.ib(factory=list)
    consumer_anomalies = attr.ib(factory=list)
    #: acknowledged without an offset (librdkafka's implicit acks), found where they belong
    unplaced = attr.ib(default=0)
    #: values written again by their producer under a newer epoch of its id: not a broker
    #: duplicate (see :func:`check_records`)
    resent = attr.ib(factory=list)

    @property
    def ok(self):
        return not (self.lost or self.duplicates or self.reordered or self.moved or self.divergent)

    def summary(self):
        return ("%d acknowledged (%d without an offset), %d read back: %d lost, %d duplicated, %d reordered, %d moved, "
                "%d divergent replica offsets, %d lagging replicas, %d live-consumer anomalies, "
                "%d re-sent under a new producer epoch"
                % (self.acked, self.unplaced, self.read, len(self.lost), len(self.duplicates), len(self.reordered),
                   len(self.moved), len(self.divergent), len(self.lagging), len(self.consumer_anomalies),
                   len(self.resent)))


def check_records(acked, final, producers=None):
    """Compare acknowledgements with the final read.

    :param acked: ``[(partition, offset, value)]`` every producer was told was written. The
        offset is None for a record librdkafka acknowledged implicitly: a request whose outcome
        it did not learn (a timeout, a lost connection) followed by a later request of the same
        producer and partition that succeeded, which proves the earlier one written. Such a
        record must still be in its partition; where in it is not known to the producer.
    :param final: ``{partition: [(offset, value)]}`` read back from offset 0.
    :param producers: ``{partition: {offset: (producer id, producer epoch)}}`` from the segment
        files (:func:`read_producers`), or None. With it, a value found again in its partition
        in a batch of the same producer id and a *newer epoch* is listed in ``resent``, not in
        ``duplicates``: the broker deduplicates retries within one epoch (Kafka's guarantee);
        librdkafka, bumping its epoch after an out-of-order answer on another partition,
        renumbers every unacknowledged message, including ones whose earlier send was written
        but not answered (a lost connection). Any broker would store those twice.
    ``lost`` are acknowledged values absent from the log; ``moved`` acknowledged at one offset
    but found at another; ``duplicates`` values found more than once; ``reordered`` a
    producer's sequence going backwards within a partition.
    """
    verdict = Verdict(acked=len(acked), read=sum(map(len, final.values())))
    where = {}
    copies = {}  # value -> offsets of its re-sent copies
    for partition, records in sorted(final.items()):
        last_seq = {}
        origin = (producers or {}).get(partition, {})
        for offset, value in records:
            if value in where:
                first = where[value]
                was, now = origin.get(first[1]), origin.get(offset)
                if first[0] == partition and was and now and was[0] == now[0] and now[1] > was[1]:
                    verdict.resent.append("%r at %d-%d (producer %d epoch %d), again at %d-%d (epoch %d)"
                                          % (value, partition, first[1], was[0], was[1], partition, offset, now[1]))
                    copies.setdefault(value, set()).add(offset)
                    continue  # the copy is not the producer's sequence going backwards
                verdict.duplicates.append("%r at %d-%d and %d-%d" % (value, *first, partition, offset))
            else:
                where[value] = (partition, offset)
            parsed = parse_value(value)
            if parsed is None:
                continue
            producer, seq = parsed
            if producer in last_seq and seq <= last_seq[producer][0]:
                verdict.reordered.append("partition %d: producer %d's %d at offset %d after its %d at offset %d"
                                         % (partition, producer, seq, offset, *last_seq[producer]))
            last_seq[producer] = (seq, offset)
    for partition, offset, value in acked:
        found = where.get(value)
        if offset is None:
            verdict.unplaced += 1
            if found is None:
                verdict.lost.append("%r acknowledged in partition %d without an offset" % (value, partition))
            elif found[0] != partition:
                verdict.moved.append("%r acknowledged in partition %d without an offset, found at %d-%d"
                                     % (value, partition, *found))
        elif found is None:
            verdict.lost.append("%r acknowledged at %d-%d" % (value, partition, offset))
        elif found != (partition, offset) and offset not in copies.get(value, ()):
            verdict.moved.append("%r acknowledged at %d-%d, found at %d-%d" % (value, partition, offset, *found))
    return verdict


def consumer_anomalies(seen, final):
    """What a live read_committed consumer saw that the final log contradicts: offsets going
    backwards in its delivery order, and values it delivered at an offset that finally holds
    something else (a read of data later lost: Kafka's HW should prevent it)."""
    found = []
    for partition, records in sorted(seen.items()):
        truth = dict(final.get(partition, ()))
        last = -1
        for offset, value in records:
            if offset <= last:
                found.append("partition %d: offset %d delivered after %d" % (partition, offset, last))
            last = max(last, offset)
            if truth.get(offset, value) != value:
                found.append("partition %d: %r delivered at offset %d which finally holds %r"
                             % (partition, value, offset, truth[offset]))
    return found


def _headers(partition_dir):
    """Every batch header in a partition directory's segment files, in offset order (a torn
    tail after a crash is left out, as log recovery would)."""
    names = sorted(n for n in os.listdir(partition_dir) if n.endswith(_LOG_SUFFIX))
    for name in names:
        with open(os.path.join(partition_dir, name), "rb") as f:
            data = f.read()
        for _, header in iter_batch_headers(data, allow_partial_tail=True):
            yield header


def read_batches(partition_dir):
    """``[(base_offset, last_offset, crc)]`` of every batch in a partition directory's segment
    files, in offset order."""
    return [(h.base_offset, h.last_offset, h.crc) for h in _headers(partition_dir)]


def read_producers(partition_dir):
    """``{offset: (producer id, producer epoch)}`` of every record of an idempotent producer
    in a partition directory's segment files (control batches left out)."""
    return _producers(_headers(partition_dir))


def _producers(headers):
    producers = {}
    for h in headers:
        if h.producer_id >= 0 and not h.is_control:
            producers.update(dict.fromkeys(range(h.base_offset, h.last_offset + 1),
                                           (h.producer_id, h.producer_epoch)))
    return producers


def _ends(replica_batches):
    """{broker: log end} of ``{broker:`` :func:`read_batches` ``}``."""
    return {b: (batches[-1][1] + 1 if batches else 0) for b, batches in replica_batches.items()}


def _longest(ends):
    """The broker id of the longest replica (``ends``: {broker: log end}), the lowest id of
    equals."""
    return max(sorted(ends), key=lambda b: ends[b])


def check_replicas(replica_batches):
    """``(divergent, lagging)`` for one partition: ``replica_batches`` maps a broker id to its
    :func:`read_batches`. Replicas must hold the same batch (offsets and CRC) wherever both
    have one: ``divergent`` names each batch where they do not; ``lagging`` each replica whose
    log ends before the longest one (not a divergence: a replica out of the ISR may lag)."""
    divergent, lagging = [], []
    if not replica_batches:
        return divergent, lagging
    ends = _ends(replica_batches)
    reference_id = _longest(ends)
    reference = {base: (last, crc) for base, last, crc in replica_batches[reference_id]}
    for broker, batches in sorted(replica_batches.items()):
        if broker == reference_id:
            continue
        for base, last, crc in batches:
            if reference.get(base) != (last, crc):
                divergent.append("broker %d offsets %d-%d (crc %d) differ from broker %d's %s"
                                 % (broker, base, last, crc, reference_id,
                                    "batch %d-%d (crc %d)" % ((base,) + reference[base])
                                    if base in reference else "batches"))
        if ends[broker] < ends[reference_id]:
            lagging.append("broker %d ends at %d, broker %d at %d" % (broker, ends[broker], reference_id,
                                                                     ends[reference_id]))
    return divergent, lagging


def check_data_dirs(data_dirs, topic, partitions, producers=None):
    """Divergence and lag over every partition of ``topic`` whose directory exists in the
    brokers' ``data_dirs`` (``{broker id: path}``); returns ``(divergent, lagging)`` with the
    partition named in each line. Given a dict, ``producers`` gets ``{partition:``
    :func:`read_producers` ``}`` of the longest replica (the one the others are compared with),
    from the same read of the files."""
    divergent, lagging = [], []
    for p in range(partitions):
        replicas, headers = {}, {}
        for broker, data_dir in sorted(data_dirs.items()):
            path = os.path.join(data_dir, "%s-%d" % (topic, p))
            if os.path.isdir(path):
                found = headers[broker] = list(_headers(path))
                replicas[broker] = [(h.base_offset, h.last_offset, h.crc) for h in found]
        d, lag = check_replicas(replicas)
        divergent += ["%s-%d: %s" % (topic, p, line) for line in d]
        lagging += ["%s-%d: %s" % (topic, p, line) for line in lag]
        if producers is not None:
            producers[p] = _producers(headers[_longest(_ends(replicas))]) if replicas else {}
    return divergent, lagging
