"""UnifiedLog: one partition's log (Kafka's UnifiedLog + LocalLog + LogLoader): segments in a
directory, append (validate, assign offsets, roll, index), read (cut at LEO/HW/LSO byte
positions, FileRegion only), high watermark, retention/DeleteRecords/truncation, leader epochs,
loading and recovery. Scheduling, checkpoints across partitions and threads belong to LogManager.
"""

import base64
import bisect
import locale
import os
import shutil
import time
import uuid

from twisted.logger import Logger
from zope.interface import implementer

from kafkatw.crash_points import crash_point
from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError

from . import checkpoint
from .descriptors import is_resource_error
from .config import LogConfig
from .file_records import FileRecords
from .interfaces import ILog
from .lazy import loaded_on_use
from .leader_epoch import LeaderEpochFileCache
from .offsets import FetchDataInfo, FetchIsolation, LogOffsetMetadata
from .producer_state import SNAPSHOT_SUFFIX
from .segment import (CLEANED_SUFFIX, DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX,
                      TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LogSegment)
from .summary import LogSummary
from .summary import usable as summary_usable
from .txn_index import AbortedTxn
from .validator import validate_and_assign

log = Logger()

PARTITION_METADATA_FILE = "partition.metadata"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


def parse_topic_partition(dirname):
    """``"<topic>-<partition>"`` (optionally with a ``.<uuid>-delete`` tail) -> (topic, partition)."""
    name = dirname
    if name.endswith(DELETE_DIR_SUFFIX) and "." in name:
        name = name[:name.rindex(".")]
    topic, _, part = name.rpartition("-")
    if not topic or not part.isdigit():
        raise ValueError("directory %r is not <topic>-<partition>" % (dirname,))
    return topic, int(part)


_new = tuple.__new__  # a named tuple built in C, fields in order (no Python __new__)
# (globals: a member read off its Enum class takes EnumType's slow __getattr__ path)
_LOG_END, _HIGH_WATERMARK = FetchIsolation.LOG_END, FetchIsolation.HIGH_WATERMARK


def _load_deferred(log, name):
    """The segments (``_segments``, ``_bases``) of a log made from a clean-shutdown summary,
    opened when first read; any other log without them has none."""
    if log.__dict__.get("_summary") is None:
        raise AttributeError(name)
    log._load_deferred()


def summary_may_delete(summary, log_start_offset, config, now_ms):
    """Whether retention may delete a segment of a log not yet opened (a superset of
    :meth:`UnifiedLog.delete_old_segments`' rules, decided from its summary)."""
    if summary.first_base != summary.active_base and log_start_offset > summary.first_base:
        return True
    if not config.delete:
        return False
    if config.retention_ms >= 0 and now_ms - summary.first_largest_ts > config.retention_ms:
        return True
    return 0 <= config.retention_bytes <= summary.size


def summary_offsets(summary):
    """(log start, recovery point, high watermark) of a log made from ``summary`` (a usable
    one: see :func:`~kafkatw.storage.summary.usable`), as it would report them unopened."""
    leo = summary.log_end_offset
    start = max(summary.log_start_offset, summary.first_base)
    return start, min(leo, summary.recovery_point), max(start, min(summary.high_watermark, leo))


def summary_retention_due_ms(summary, config):
    """:meth:`UnifiedLog.retention_due_ms` of a log not yet opened, from its summary."""
    if not config.delete or config.retention_ms < 0:
        return None
    if summary.first_base == summary.active_base and summary.active_size == 0:
        return None
    return summary.first_largest_ts + config.retention_ms + 1


def _make_dir(directory):
    """Make ``directory``; True if this call made it (so it is empty), False if it was there."""
    try:
        os.mkdir(directory)
        return True
    except FileExistsError:
        return False
    except FileNotFoundError:
        os.makedirs(os.path.dirname(directory), exist_ok=True)
        return _make_dir(directory)


def _as_summarised(lg, summary):
    """The log's segments (just listed) are the ones ``summary`` describes."""
    if summary is None or len(lg._bases) != summary.segment_count:
        return False
    active = lg._segments[lg._bases[-1]]
    return (lg._bases[0] == summary.first_base and active.base_offset == summary.active_base
            and active.size == summary.active_size)


def _system_ms():
    return int(time.time() * 1000)


def read_partition_metadata(path):
    # os.open/os.read: a text-mode open() adds two fstats, an isatty ioctl and two lseeks to
    # every one of a 1,000-partition load; decoded as open(path) would (locale encoding;
    # splitlines below sees \r\n and \r as open's newline translation would).
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    text = b"".join(chunks).decode(locale.getpreferredencoding(False))
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    raw = fields.get("topic_id", "").strip()
    if not raw:
        return None
    return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))


def write_partition_metadata(path, topic_id, new=False):
    """Write (temp + rename) without fsync: the topic id is durable in the cluster metadata
    store, which re-writes this file if a crash leaves it empty; an fsync per partition made
    creating a 1,000-partition topic take seconds. ``new``: the directory was just made, so
    there is no file to replace: written in place (one small write: whole or empty)."""
    text = "version: 0\ntopic_id: %s\n" % (
        base64.urlsafe_b64encode(topic_id).decode("ascii").rstrip("="),)
    if new:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, text.encode("ascii"))
        finally:
            os.close(fd)
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class FlushPlan:
    """What one flush fsyncs: built on the reactor by :meth:`UnifiedLog.plan_flush`, run in a
    thread; it holds the segments (and the leader-epoch checkpoint's path), not the log, so
    the thread reads no log state."""

    __slots__ = ("offset", "segments", "unflushed_messages", "epochs", "epochs_error")

    def __init__(self, offset, segments, unflushed_messages, epochs=None):
        self.offset = offset
        self.segments = segments
        self.unflushed_messages = unflushed_messages
        #: None, or (checkpoint path, writes) of a leader-epoch checkpoint written unsynced
        self.epochs = epochs
        self.epochs_error = None

    def run(self):
        """fsync each segment (and the leader-epoch checkpoint); returns ``[(segment,
        OSError)]`` (a segment deleted and closed meanwhile needs no flush: the log decides
        on the reactor)."""
        failures = []
        if self.epochs is not None:
            try:
                LeaderEpochFileCache.sync_file(*self.epochs)
            except OSError as e:
                self.epochs_error = e
        for segment in self.segments:
            try:
                segment.flush()
            except OSError as e:
                failures.append((segment, e))
            except (ValueError, TypeError):
                pass  # closed under us
        return failures


@implementer(ILog)
class UnifiedLog:
    # What every log starts with, as class attributes: a start after a clean shutdown makes
    # 50,000 logs, and each attribute set in __init__ was a share of it (assigning one on a
    # log shadows it, as a set in __init__ would have).
    _offline = False
    _deleted = False
    _leftovers = False  # files renamed .deleted wait for a scheduled delete
    first_unstable_offset = None  # hook for transactions (offset or LogOffsetMetadata)
    producer_state_manager = None
    roll_listener = None  # called with the new segment's base offset after a roll
    recovered_segments = 0  # segments scanned by recovery while loading
    truncated_bytes = 0  # bytes cut off torn or corrupt tails while loading
    _unflushed_messages = 0
    # (not __getattr__: a class with one has every attribute read take the slow path)
    _segments = loaded_on_use(_load_deferred)
    _bases = loaded_on_use(_load_deferred)
    _summary = None
    #: None or a set the log adds itself to when its recovery point, log start or high
    #: watermark changes (the log manager's checkpoints look at those logs only)
    offsets_changed = None
    #: None or a set the log adds itself to when retention may find more to delete than
    #: it did (an append, a moved offset, a config): with :meth:`retention_due_ms`, what
    #: lets the retention task pass over idle logs
    retention_changed = None

    def __init__(self, directory, config=None, topic=None, partition=None, topic_id=None,
                 clock=None, recovery_point=0, log_start_offset=0, high_watermark=None,
                 needs_recovery=False, dir_failure_handler=None, scheduler=None,
                 sync_metadata=True, dir_exists=False, summary=None):
        """``clock()`` returns milliseconds; ``scheduler(delay_ms, fn)`` runs ``fn`` later
        (file deletes); without one, deleted files are removed at once. ``dir_exists``: the
        caller has just listed ``directory`` (loading), so it is not created. ``summary``: the
        :class:`~kafkatw.storage.summary.LogSummary` a clean shutdown left; the log's files
        are then read on first use (see :meth:`_load_deferred`)."""
        self.dir = directory
        # (the instance's own, not only the class default: CPython 3.11 specialises no read of
        # an attribute the instance lacks, and every append and read tests this one)
        self._offline = False
        if topic is None:
            topic, partition = parse_topic_partition(os.path.basename(directory))
        self.topic = topic
        self.partition = partition
        self.config = config if config is not None else LogConfig()
        self._clock = clock or _system_ms
        self._scheduler = scheduler
        self._dir_failure_handler = dir_failure_handler
        self._sync = sync_metadata
        self.recovery_log = []  # what loading recovered, per segment (debug log)
        # (os.sep, not os.path.join: this runs for each of 50,000 logs at start)
        self._metadata_path = directory + os.sep + PARTITION_METADATA_FILE
        self._last_flush_ms = self._clock()
        if summary is not None and summary_usable(summary):  # (its log start is the one given)
            self._init_from_summary(summary, recovery_point, log_start_offset)
        else:
            self._init_from_files(topic_id, recovery_point, log_start_offset, needs_recovery,
                                  dir_exists)
        hw = high_watermark if high_watermark is not None else self._log_start_offset
        self._hw_metadata = LogOffsetMetadata(
            max(self._log_start_offset, min(hw, self.log_end_offset)))

    def _init_from_files(self, topic_id, recovery_point, log_start_offset, needs_recovery,
                         dir_exists):
        directory = self.dir
        if not dir_exists and _make_dir(directory):
            self._init_new(topic_id, log_start_offset)
            return
        self.leader_epoch_cache = LeaderEpochFileCache(
            os.path.join(directory, checkpoint.LEADER_EPOCH_CHECKPOINT), self._sync)
        stored_id = read_partition_metadata(self._metadata_path)
        if topic_id is not None and stored_id is not None and stored_id != topic_id:
            raise KafkaError(errors.INCONSISTENT_TOPIC_ID,
                             "topic id %s in %s differs from %s"
                             % (uuid.UUID(bytes=stored_id), self._metadata_path,
                                uuid.UUID(bytes=topic_id)))
        self.topic_id = stored_id if stored_id is not None else topic_id
        if stored_id is None and topic_id is not None:
            write_partition_metadata(self._metadata_path, topic_id)
        self._segments = {}
        self._bases = []
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._load(needs_recovery)

    def _init_new(self, topic_id, log_start_offset):
        """A partition whose directory was just made: nothing to read, one empty segment
        (a .log and partition.metadata are the only files written; 2,000 partitions of a
        CreateTopics made ~20 system calls each before)."""
        self.leader_epoch_cache = LeaderEpochFileCache(
            os.path.join(self.dir, checkpoint.LEADER_EPOCH_CHECKPOINT), self._sync, new=True)
        self.topic_id = topic_id
        if topic_id is not None:
            write_partition_metadata(self._metadata_path, topic_id, new=True)
        self._segments = {}
        self._bases = []
        self._log_start_offset = log_start_offset
        self._recovery_point = log_start_offset
        self._add_segment(LogSegment.open(self.dir, log_start_offset, self.config,
                                          created_ms=self._clock(), new=True))
        self._leo_metadata = LogOffsetMetadata(log_start_offset, log_start_offset, 0)

    def _init_from_summary(self, summary, recovery_point, log_start_offset):
        """After a clean shutdown: offsets, sizes and the topic id from the summary; the
        segments (and the leader epoch checkpoint) are read on first use. 50,000 partitions
        took over a minute to open at start, and most may not be used for a while."""
        self._summary = summary
        self.leader_epoch_cache = LeaderEpochFileCache(
            self.dir + os.sep + checkpoint.LEADER_EPOCH_CHECKPOINT, self._sync, lazy=True)
        self.topic_id = summary.topic_id
        leo = summary.log_end_offset
        self._log_start_offset = max(log_start_offset, summary.first_base)
        self._recovery_point = min(leo, recovery_point)
        self._leo_metadata = LogOffsetMetadata(leo, summary.active_base, summary.active_size)

    def _load_deferred(self):
        """Open the segments of a log made from a summary, as a clean load does (leftover
        files removed, the active segment's indexes checked, the log end read from the
        file). Fails as an I/O error of the log; out of descriptors, the next use retries."""
        summary = self._summary
        self._summary = None
        self._segments, self._bases = {}, []
        try:
            self._load(False, summary)
        except BaseException as e:
            del self._segments, self._bases
            self._summary = summary
            if isinstance(e, OSError):
                raise self._io_failed(e)
            raise
        self._note_offsets()  # (loading may move the log start and recovery point)
        if self.log_end_offset != summary.log_end_offset:
            log.warn("{tp}: log end offset {leo} in the files, {summary} in the clean-shutdown "
                     "summary", tp="%s-%d" % (self.topic, self.partition),
                     leo=self.log_end_offset, summary=summary.log_end_offset)
            self._reset_cached_metadata()

    @property
    def is_loaded(self):
        """Whether the segments are open (False for a log made from a summary, until used)."""
        return self._summary is None

    def summarise(self):
        """A :class:`~kafkatw.storage.summary.LogSummary` of the log now, for a clean shutdown
        (call before :meth:`close`), or None when the next start must read its files: files
        left to delete, a compacted log (the cleaner reads its segments anyway), offline."""
        if self._offline or self._leftovers or self.config.compact:
            return None
        if self._summary is not None:
            return self._summary._replace(
                log_start_offset=self._log_start_offset, recovery_point=self._recovery_point,
                high_watermark=self.high_watermark, topic_id=self.topic_id)
        first, active = self.segments[0], self.active_segment
        # (an empty segment has no timestamp: its file's time, without making its indexes)
        largest = first.largest_timestamp() if first.size else first.last_modified_ms
        return LogSummary(self._log_start_offset, self._recovery_point, self.high_watermark,
                          self.log_end_offset, active.base_offset, active.size, self.size,
                          len(self._bases), first.base_offset, largest, self.topic_id,
                          self._list_snapshots())

    def _list_snapshots(self):
        try:
            return any(name.endswith(SNAPSHOT_SUFFIX) for name in os.listdir(self.dir))
        except OSError:
            return False

    def may_have_producer_snapshot(self):
        """Whether a producer state snapshot may be in the partition's directory (a start-up
        loads producer state only for those logs)."""
        if self._summary is not None:
            return self._summary.producer_snapshot
        return self._list_snapshots()

    # -- segments -----------------------------------------------------------------------

    def _add_segment(self, segment):
        base = segment.base_offset
        if base not in self._segments:
            bisect.insort(self._bases, base)
        self._segments[base] = segment

    def _remove_segment(self, base):
        del self._segments[base]
        self._bases.pop(bisect.bisect_left(self._bases, base))

    @property
    def segments(self):
        """Segments in offset order (for tools and tests)."""
        return [self._segments[b] for b in self._bases]

    @property
    def active_segment(self):
        return self._segments[self._bases[-1]]

    def _floor_index(self, offset):
        return bisect.bisect_right(self._bases, offset) - 1

    def floor_segment(self, offset):
        i = self._floor_index(offset)
        return self._segments[self._bases[i]] if i >= 0 else None

    @property
    def size(self):
        if self._summary is not None:
            return self._summary.size
        return sum(s.size for s in self._segments.values())

    @property
    def number_of_segments(self):
        if self._summary is not None:
            return self._summary.segment_count  # (a metrics scrape asks every log)
        return len(self._bases)

    # -- loading ------------------------------------------------------------------------

    def _new_segment(self, base, suffix=""):
        return LogSegment.open(self.dir, base, self.config, created_ms=self._clock(),
                               suffix=suffix)

    def _load(self, needs_recovery, summary=None):
        """``summary``: what the clean shutdown said of these files; when the active segment
        is as it said, its end is taken from it and the indexes are not checked (as Kafka's
        clean load, which leaves index checks to recovery: they were closed cleanly)."""
        # The directory is listed again only after a step below changed it.
        names = os.listdir(self.dir)
        # Leftovers of interrupted operations (Kafka's removeTempFilesAndCollectSwapFiles).
        removed = False
        for name in names:
            if name.endswith(DELETED_SUFFIX) or name.endswith(CLEANED_SUFFIX) \
                    or name.endswith(".tmp"):
                os.unlink(os.path.join(self.dir, name))
                removed = True
        if removed:
            names = os.listdir(self.dir)
        swaps = [name for name in sorted(names) if name.endswith(SWAP_SUFFIX)]
        for name in swaps:
            self._complete_swap(name)
        if swaps:
            names = os.listdir(self.dir)
        present = set(names)
        bases = []
        for name in names:
            if name.endswith(LOG_SUFFIX):
                try:
                    bases.append(int(name[:-len(LOG_SUFFIX)]))
                except ValueError:
                    continue
            elif (name.endswith(INDEX_SUFFIX) or name.endswith(TIME_INDEX_SUFFIX)
                  or name.endswith(TXN_INDEX_SUFFIX)):
                stem = name.rsplit(".", 1)[0]
                if stem + LOG_SUFFIX not in present:
                    os.unlink(os.path.join(self.dir, name))  # orphan index
        bases.sort()
        to_recover = set()
        for base in bases:
            seg = self._new_segment(base)
            if seg.size > 0 and (not os.path.exists(seg.offset_index.path) or
                                 not os.path.exists(seg.time_index.path)):
                to_recover.add(base)
            elif seg.txn_index.corrupt is not None:
                self.recovery_log.append("segment %d: %s" % (base, seg.txn_index.corrupt))
                to_recover.add(base)
            self._add_segment(seg)
        new_log = not self._bases
        if new_log:
            self._add_segment(self._new_segment(self._log_start_offset))
        # Which segments to scan: all from the one holding the recovery point (unclean stop),
        # plus any with missing or corrupt indexes.
        if needs_recovery:
            i = max(0, self._floor_index(self._recovery_point))
            to_recover.update(self._bases[i:])
        elif not new_log and not _as_summarised(self, summary):
            i = max(0, self._floor_index(self._recovery_point))
            for base in self._bases[i:]:
                try:
                    self._segments[base].sanity_check()
                except Exception as e:  # CorruptIndexError, FileNotFoundError
                    self.recovery_log.append("segment %d: index check failed (%s)" % (base, e))
                    to_recover.add(base)
        for base in sorted(to_recover):
            if base not in self._segments:
                continue  # removed by an earlier truncation
            seg = self._segments[base]
            truncated = seg.recover(self.config.max_message_bytes, self.leader_epoch_cache)
            self.recovered_segments += 1
            self.truncated_bytes += truncated
            self.recovery_log.append("segment %d: recovered %d bytes, truncated %d bytes"
                                     % (base, seg.size, truncated))
            if truncated:
                # Everything after a corrupt point is suspect: drop later segments.
                for later in [b for b in self._bases if b > base]:
                    self.recovery_log.append("segment %d: deleted after corruption in %d"
                                             % (later, base))
                    self.truncated_bytes += self._segments[later].size
                    self._segments[later].delete_if_exists()
                    self._remove_segment(later)
        active = self.active_segment
        summarised = not to_recover and _as_summarised(self, summary)
        if active.size == 0:
            leo = active.base_offset
        elif summarised:
            leo = summary.log_end_offset
        else:
            leo = active.read_next_offset()
        self._log_start_offset = max(self._log_start_offset, self._bases[0])
        if leo < self._log_start_offset:
            # Everything was deleted: start afresh at the log start offset.
            for seg in self.segments:
                seg.delete_if_exists()
            self._segments, self._bases = {}, []
            self._add_segment(self._new_segment(self._log_start_offset))
            leo = self._log_start_offset
        self._recovery_point = min(leo, self._recovery_point) if not needs_recovery else leo
        self._leo_metadata = LogOffsetMetadata(leo, self.active_segment.base_offset,
                                               self.active_segment.size)
        if not (summarised and leo == summary.log_end_offset):
            # (a summarised log's cache was cut to these offsets before the shutdown, and
            # is read when first asked)
            self.leader_epoch_cache.truncate_from_end(leo)
            self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        recovered = sorted(b for b in to_recover if b in self._segments)
        if recovered:
            self._rebuild_txn_indexes(recovered)
        if self.recovery_log:
            log.debug("{tp}: {lines}", tp="%s-%d" % (self.topic, self.partition),
                     lines="; ".join(self.recovery_log))

    def _complete_swap(self, name):
        """A cleaned segment renamed to ``.swap`` but not yet swapped in (Kafka's LogLoader):
        index files are dropped (rebuilt on recovery); a ``.log.swap`` replaces every segment
        whose base offset lies in its offset range, then takes its final name."""
        path = os.path.join(self.dir, name)
        target = path[:-len(SWAP_SUFFIX)]
        stem = os.path.basename(target).rsplit(".", 1)[0]
        if not target.endswith(LOG_SUFFIX):
            os.unlink(path)
            if os.path.exists(target):
                os.unlink(target)
            return
        base = int(stem)
        swap = FileRecords(path)
        try:
            next_offset = base
            for _, header in swap.batches_from(0):
                next_offset = header.next_offset
        finally:
            swap.close()
        for other in os.listdir(self.dir):
            if not other.endswith(LOG_SUFFIX):
                continue
            try:
                other_base = int(other[:-len(LOG_SUFFIX)])
            except ValueError:
                continue
            if base <= other_base < max(next_offset, base + 1):
                for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                    p = os.path.join(self.dir, "%020d%s" % (other_base, suffix))
                    if os.path.exists(p):
                        os.unlink(p)
        os.replace(path, target)
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            p = os.path.join(self.dir, stem + suffix)
            if os.path.exists(p):
                os.unlink(p)  # rebuilt: the segment has no index, so it is recovered

    # -- offsets ------------------------------------------------------------------------

    @property
    def log_start_offset(self):
        return self._log_start_offset

    @property
    def log_end_offset(self):
        return self._leo_metadata.message_offset

    @property
    def log_end_offset_metadata(self):
        return self._leo_metadata

    @property
    def recovery_point(self):
        return self._recovery_point

    @property
    def high_watermark(self):
        return self._hw_metadata.message_offset

    @property
    def high_watermark_metadata(self):
        meta = self._hw_metadata
        if meta.segment_base_offset == -1 and meta.relative_position_in_segment == -1:
            return self.fetch_high_watermark_metadata()  # its position, found now
        return meta

    def fetch_high_watermark_metadata(self):
        meta = self._hw_metadata
        if meta.segment_base_offset == -1 and meta.relative_position_in_segment == -1:
            # message_offset_only, inline: every consumer read and parked-fetch check asks
            if meta.message_offset >= self.log_end_offset:
                meta = self._leo_metadata
            else:
                try:
                    meta = self._convert_to_offset_metadata(meta.message_offset)
                except KafkaError:
                    return meta
            self._hw_metadata = meta
        return meta

    def update_high_watermark(self, offset):
        """Set the HW, clamped to [log start, LEO]; returns the new value."""
        if type(offset) is not int and hasattr(offset, "message_offset"):
            offset = offset.message_offset
        leo = self._leo_metadata.message_offset
        if offset > leo:
            offset = leo
        if offset < self._log_start_offset:
            offset = self._log_start_offset
        old = self._hw_metadata.message_offset
        if offset == leo:
            self._hw_metadata = self._leo_metadata
        elif offset != old:
            self._hw_metadata = LogOffsetMetadata(offset)
        if offset != old:  # (_note_offsets inline: once per append)
            if self.offsets_changed is not None:
                self.offsets_changed.add(self)
            if self.retention_changed is not None:
                self.retention_changed.add(self)
        return offset

    def _note_offsets(self):
        if self.offsets_changed is not None:
            self.offsets_changed.add(self)
        if self.retention_changed is not None:
            self.retention_changed.add(self)

    def maybe_increment_high_watermark(self, offset):
        """Raise the HW (never lower it); True if it moved."""
        old = self.high_watermark
        if offset > old:
            return self.update_high_watermark(offset) != old
        return False

    @property
    def last_stable_offset(self):
        fuo = self.first_unstable_offset
        if fuo is None:
            return self.high_watermark
        # an open transaction whose start was deleted (retention, DeleteRecords) holds the
        # LSO at the log start, as Kafka's updateFirstUnstableOffset does
        fuo = max(getattr(fuo, "message_offset", fuo), self._log_start_offset)
        return min(fuo, self.high_watermark)

    @property
    def last_stable_offset_metadata(self):
        fuo = self.first_unstable_offset
        hw = self._hw_metadata
        if hw.segment_base_offset == -1 and hw.relative_position_in_segment == -1:
            hw = self.fetch_high_watermark_metadata()  # its position, found now
        if fuo is None:
            return hw
        offset = max(getattr(fuo, "message_offset", fuo), self._log_start_offset)
        if offset >= hw.message_offset:
            return hw
        if isinstance(fuo, LogOffsetMetadata) and not fuo.message_offset_only \
                and fuo.message_offset == offset:
            return fuo
        try:
            return self._convert_to_offset_metadata(offset)
        except KafkaError:
            return LogOffsetMetadata(offset)

    def fetch_offset_snapshot(self):
        """``(log start offset, HW, LSO)`` in one call, as a fetch answers them (Kafka's
        fetchOffsetSnapshot; three property reads were four calls per partition read)."""
        hw = self._hw_metadata.message_offset
        return (self._log_start_offset, hw,
                hw if self.first_unstable_offset is None else self.last_stable_offset)

    def _reset_cached_metadata(self):
        hw = self._hw_metadata.message_offset
        self._hw_metadata = LogOffsetMetadata(hw)
        if hw >= self.log_end_offset:
            self._hw_metadata = self._leo_metadata

    def _convert_to_offset_metadata(self, offset):
        self._check_log_start_offset(offset)
        return self._local_read(offset, 1, False, self._leo_metadata).fetch_offset_metadata

    # -- failure handling ---------------------------------------------------------------

    @property
    def is_offline(self):
        return self._offline

    def mark_offline(self):
        self._offline = True

    def mark_deleted(self):
        """The log is being deleted: its files move away under background work (a flush after
        a roll, a checkpoint) that may still be running in a thread; an I/O error from that work
        is expected and must not take the whole log dir offline."""
        self._deleted = True
        self._offline = True

    def _check_online(self):
        if self._offline:
            raise KafkaError(errors.KAFKA_STORAGE_ERROR,
                             "Log dir of %s-%d is offline" % (self.topic, self.partition))

    def _io_failed(self, exc):
        if is_resource_error(exc):
            # out of descriptors or memory: this operation fails, the log stays online
            if self._dir_failure_handler is not None:
                self._dir_failure_handler(os.path.dirname(self.dir), exc)
            return KafkaError(errors.KAFKA_STORAGE_ERROR, "%s-%d: %s (the log dir stays online)"
                              % (self.topic, self.partition, exc))
        self._offline = True
        if self._deleted:
            return KafkaError(errors.KAFKA_STORAGE_ERROR, "log %s-%d was deleted" % (self.topic, self.partition))
        if self._dir_failure_handler is not None:
            self._dir_failure_handler(os.path.dirname(self.dir), exc)
        return KafkaError(errors.KAFKA_STORAGE_ERROR,
                          "I/O error on %s: %s" % (self.dir, exc))

    # -- append -------------------------------------------------------------------------

    def append_as_follower(self, buf, batch_headers=None):
        """Write batches whose offsets the leader assigned (``batch_headers`` as for
        :meth:`append_as_leader`)."""
        return self._append(buf, None, batch_headers, False)

    def _append(self, buf, leader_epoch, batch_headers=None, assign_offsets=True):
        """Validate the batches in ``buf``, assign offsets in place (``assign_offsets``, a
        leader's append) and write them.

        ``batch_headers``: ``[(position, BatchHeader)]`` the caller already read from ``buf``
        (the replica manager has, for producer state); each is used instead of a new read."""
        if self._offline:  # (_check_online's test inline: once per append)
            self._check_online()
        now = self._clock()
        config = self.config
        leo = self._leo_metadata.message_offset
        info, batches = validate_and_assign(
            buf, config, now, leo, leader_epoch, assign_offsets,
            self._log_start_offset, (self.topic, self.partition), batch_headers)
        if not batches:
            return info
        if not assign_offsets and info.first_offset < leo:
            raise KafkaError(errors.INVALID_RECORD,
                             "follower append at %d below the log end offset %d"
                             % (info.first_offset, leo))
        try:
            segment = self._segments[self._bases[-1]]
            if segment.should_roll(config, now, len(buf), info.last_offset, info.max_timestamp):
                segment = self.roll(info.first_offset)
            size = segment.append(buf, batches)
        except OSError as e:
            raise self._io_failed(e)
        if assign_offsets:
            if leader_epoch is not None:
                # (flush=True, durable=False positionally: a keyword call is a slower call)
                self.leader_epoch_cache.assign(leader_epoch, info.first_offset, True, False)
        else:
            epochs = {}
            # Each batch's epoch: read back from the buffer (headers were not rewritten).
            from kafkatw.protocol import records
            for pos, _size, _last, _ts in batches:
                h = records.read_batch_header(buf, pos)
                if h.partition_leader_epoch >= 0 and h.partition_leader_epoch not in epochs:
                    epochs[h.partition_leader_epoch] = h.base_offset
            for epoch in sorted(epochs):
                latest = self.leader_epoch_cache.latest_epoch()
                if latest is None or epoch > latest:
                    self.leader_epoch_cache.assign(epoch, epochs[epoch], durable=False)
        self._leo_metadata = LogOffsetMetadata(info.last_offset + 1, segment.base_offset, size)
        self._unflushed_messages += info.record_count
        if self.retention_changed is not None:
            self.retention_changed.add(self)
        if self._unflushed_messages >= config.flush_messages:
            self.flush()
        return info

    # A leader's append is _append itself (its defaults), not a method calling it: one
    # Python call less per produced partition.
    append_as_leader = _append

    def roll(self, expected_next_offset=None):
        """Start a new active segment at max(expected, LEO)."""
        self._check_online()
        leo = self.log_end_offset
        new_base = max(expected_next_offset or 0, leo)
        active = self.active_segment
        if active.base_offset == new_base:
            if active.size == 0:
                return active
            raise KafkaError(errors.KAFKA_STORAGE_ERROR,
                             "trying to roll a new segment at %d which exists" % (new_base,))
        try:
            active.on_become_inactive_segment()
            crash_point("log.roll.before_new_segment")
            for path in (os.path.join(self.dir, "%020d%s" % (new_base, s))
                         for s in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)):
                if os.path.exists(path):
                    os.unlink(path)
            segment = self._new_segment(new_base)
            crash_point("log.roll.after_new_segment")
        except OSError as e:
            raise self._io_failed(e)
        self._add_segment(segment)
        self._leo_metadata = LogOffsetMetadata(leo, new_base, 0)
        if self._hw_metadata.message_offset == leo:
            self._hw_metadata = self._leo_metadata
        if self.roll_listener is not None:
            self.roll_listener(self, new_base)
        return segment

    # -- read ---------------------------------------------------------------------------

    def _check_log_start_offset(self, offset):
        if offset < self._log_start_offset:
            raise KafkaError(errors.OFFSET_OUT_OF_RANGE,
                             "Received request for offset %d for partition %s-%d, but we only "
                             "have log segments starting from offset: %d."
                             % (offset, self.topic, self.partition, self._log_start_offset))

    def read(self, start_offset, max_length, isolation=FetchIsolation.LOG_END,
             min_one_message=False):
        """FetchDataInfo for a fetch from ``start_offset``; no record byte is read."""
        if self._offline or start_offset < self._log_start_offset:  # (every fetch reads here)
            self._check_online()
            self._check_log_start_offset(start_offset)
        try:
            max_meta = self._read_end(isolation)
            # (an empty read, what a consumer at the LSO gets, has no aborted transaction)
            aborted = None if isolation is _LOG_END or isolation is _HIGH_WATERMARK else []
            # (a read at that end, once _local_read's checks pass, is its _empty(max_meta):
            # no test of its own here, a consumer's parking fetch does not read at all)
            if aborted is None:
                return self._local_read(start_offset, max_length, min_one_message, max_meta)
            info = self._local_read(start_offset, max_length, min_one_message, max_meta)
            return _new(FetchDataInfo, (info[0], info[1], info[2],
                                        self._aborted_for_fetch(info, max_meta)
                                        if info[1].count else aborted))
        except OSError as e:
            raise self._io_failed(e)

    def _read_end(self, isolation):
        """The LogOffsetMetadata of the end a read with ``isolation`` may reach."""
        if isolation is _LOG_END:
            return self._leo_metadata
        end = self._hw_metadata
        if end.segment_base_offset == -1 and end.relative_position_in_segment == -1:
            end = self.fetch_high_watermark_metadata()  # its position, found now
        if isolation is _HIGH_WATERMARK or self.first_unstable_offset is None:
            return end  # (no open transaction: the LSO is the HW, without the property's call)
        return self.last_stable_offset_metadata

    def _at_read_end(self, start_offset, end):
        """A read from ``start_offset`` to ``end`` is empty and valid: it starts there, in
        the log (at or past the first segment, not past the log end)."""
        return start_offset == end.message_offset \
            and self._bases[0] <= start_offset <= self._leo_metadata.message_offset

    def end_if_read_empty(self, start_offset, isolation):
        """The LogOffsetMetadata a read from ``start_offset`` with ``isolation`` answers when
        it starts at the end that isolation may read to, with no error (the log online, the
        offset in it): an empty read, :meth:`read`'s ``_empty`` of that end, which a fetch
        parking there needs only the metadata of. None for any other read."""
        if self._offline or start_offset < self._log_start_offset:
            return None  # read raises
        end = self._read_end(isolation)
        return end if self._at_read_end(start_offset, end) else None

    # -- transactions ---------------------------------------------------------------------

    def append_aborted_txn(self, producer_id, first_offset, last_offset, last_stable_offset):
        """Record a transaction aborted by the marker at ``last_offset`` in the segment that
        holds the marker (Kafka's LogSegment.updateTxnIndex, called after the append)."""
        self._check_online()
        seg = self._segments[self._bases[self._floor_index(last_offset)]]
        try:
            seg.txn_index.append(AbortedTxn(producer_id, first_offset, last_offset,
                                            last_stable_offset))
        except OSError as e:
            raise self._io_failed(e)

    def collect_aborted_transactions(self, start_offset, upper_bound_offset):
        """[AbortedTxn] overlapping [start_offset, upper_bound_offset), segment by segment from
        the one holding ``start_offset`` (Kafka's LocalLog.collectAbortedTransactions)."""
        out = []
        bases = self._bases
        i = max(0, self._floor_index(start_offset))
        while i < len(bases):
            found, done = self._segments[bases[i]].txn_index.collect(start_offset, upper_bound_offset)
            out.extend(found)
            if done:
                break
            i += 1
        return out

    def _aborted_for_fetch(self, info, max_meta):
        """The aborted transactions a READ_COMMITTED fetch needs: those overlapping the offsets
        it returns (up to the next segment or the LSO; a few too many do no harm, the client
        applies an entry only to that producer's batches). An empty list when none. Asked
        for a read that returned records (a FileRegion, this log's reads)."""
        start = info.fetch_offset_metadata.message_offset
        base = info.fetch_offset_metadata.segment_base_offset
        bases = self._bases
        i = bisect.bisect_right(bases, base)
        if i == len(bases) and bases[-1] == base and not self._segments[base].txn_index.entries:
            return []  # a read of the active segment, which has no aborted transaction
        upper = bases[i] if i < len(bases) else max_meta.message_offset
        upper = min(upper, max_meta.message_offset)
        return [(t.producer_id, t.first_offset)
                for t in self.collect_aborted_transactions(start, upper)]

    def _rebuild_txn_indexes(self, bases):
        """Recovered segments lost their ``.txnindex``: re-derive it from the markers. A
        producer has one open transaction at a time, so an ABORT whose transaction began before
        the scanned range aborted everything it wrote from the range's start on."""
        scan_start = bases[0]
        rebuilt = set(bases)
        open_txns = {}  # pid -> first offset of its open transaction within the scan
        from kafkatw.protocol import records as _records

        for base in self._bases[self._floor_index(scan_start):]:
            seg = self._segments[base]
            for pos, header in seg.log.batches_from(0):
                pid = header.producer_id
                if pid < 0 or not header.is_transactional:
                    continue
                if not header.is_control:
                    open_txns.setdefault(pid, header.base_offset)
                    continue
                raw = seg.log.read(pos, header.size_in_bytes)
                _, recs = _records.decode_batch(raw, 0, verify=False)
                ctl = None
                if recs:
                    try:
                        ctl = _records.decode_control_record(recs[0])
                    except _records.InvalidRecordError:
                        ctl = None
                first = open_txns.pop(pid, scan_start)
                if ctl is None or not ctl.is_abort:
                    continue
                others = [o for p, o in open_txns.items() if p != pid]
                lso = min(others) if others else header.base_offset + 1
                if base in rebuilt:  # the others kept their .txnindex
                    seg.txn_index.append(AbortedTxn(pid, first, header.base_offset, lso))

    def _empty(self, metadata, aborted=None):
        seg = self._segments.get(metadata.segment_base_offset) or self.active_segment
        pos = metadata.relative_position_in_segment
        if pos < 0 or pos > seg.size:
            pos = seg.size
        return _new(FetchDataInfo, (metadata, seg.log.slice(pos, 0), False, aborted))

    def _local_read(self, start_offset, max_length, min_one_message, max_meta):
        end_offset = self._leo_metadata.message_offset
        i = bisect.bisect_right(self._bases, start_offset) - 1  # (_floor_index inline)
        if start_offset > end_offset or i < 0:
            raise KafkaError(errors.OFFSET_OUT_OF_RANGE,
                             "Received request for offset %d for partition %s-%d, but we only "
                             "have log segments upto %d." % (start_offset, self.topic,
                                                            self.partition, end_offset))
        if start_offset == max_meta.message_offset:
            return self._empty(max_meta)
        if start_offset > max_meta.message_offset:
            return self._empty(self._convert_to_offset_metadata(start_offset))
        bases = self._bases
        while i < len(bases):
            segment = self._segments[bases[i]]
            if segment.base_offset < max_meta.segment_base_offset:
                max_position = segment.size
            elif segment.base_offset == max_meta.segment_base_offset and not (
                    max_meta.segment_base_offset == -1
                    and max_meta.relative_position_in_segment == -1):  # message_offset_only
                max_position = max_meta.relative_position_in_segment
            else:
                max_position = None
            info = segment.read(start_offset, max_length, max_position, min_one_message)
            if info is not None:
                return info
            i += 1
        return self._empty(self._leo_metadata)

    # -- timestamps and epochs ---------------------------------------------------------------

    def fetch_offset_by_timestamp(self, timestamp):
        """(offset, timestamp, leader_epoch) for ListOffsets, or None."""
        self._check_online()
        cache = self.leader_epoch_cache
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            epoch = cache.epoch_for_offset(self._log_start_offset)
            return self._log_start_offset, -1, -1 if epoch is None else epoch
        if timestamp in (LATEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP):
            epoch = cache.latest_epoch()
            return self.log_end_offset, -1, -1 if epoch is None else epoch
        if timestamp == MAX_TIMESTAMP:
            best = None
            for seg in self.segments:
                if seg.size and (best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far):
                    best = seg
            if best is None or best.max_timestamp_so_far < 0:
                return None
            found = best.find_offset_by_timestamp(best.max_timestamp_so_far,
                                                  self._log_start_offset)
            if found is None:
                return None
            ts, offset, epoch = found
            return offset, ts, epoch
        for seg in self.segments:
            if seg.size and seg.largest_timestamp() >= timestamp:
                found = seg.find_offset_by_timestamp(timestamp, self._log_start_offset)
                if found is not None:
                    ts, offset, epoch = found
                    return offset, ts, epoch
        return None

    def latest_epoch(self):
        return self.leader_epoch_cache.latest_epoch()

    def end_offset_for_epoch(self, epoch):
        return self.leader_epoch_cache.end_offset_for(epoch, self._leo_metadata.message_offset)

    # -- log start, truncation, retention ----------------------------------------------------

    def maybe_increment_log_start_offset(self, new_start):
        if new_start > self._log_start_offset:
            self._log_start_offset = new_start
            self.leader_epoch_cache.truncate_from_start(new_start)
            if self._recovery_point < new_start:
                self._recovery_point = new_start
            self._note_offsets()
            return True
        return False

    def delete_records_before(self, offset):
        """DeleteRecords: advance the log start offset (segments go at the next retention run)."""
        self._check_online()
        if offset > self.high_watermark:
            raise KafkaError(errors.OFFSET_OUT_OF_RANGE,
                             "Cannot increment the log start offset to %d of partition %s-%d "
                             "since it is larger than the high watermark %d"
                             % (offset, self.topic, self.partition, self.high_watermark))
        self.maybe_increment_log_start_offset(offset)
        return self._log_start_offset

    def truncate_to(self, target_offset):
        """Remove everything at and after ``target_offset``; True if anything was removed."""
        self._check_online()
        if target_offset < 0:
            raise ValueError("cannot truncate to a negative offset %d" % (target_offset,))
        if target_offset >= self.log_end_offset:
            # nothing to cut, but the epoch cache may end in an epoch this broker started as
            # leader at its log end and wrote nothing in, before another leader was elected:
            # kept, it is the follower's last fetched epoch, which the new leader does not
            # have, so every fetch is answered the same divergence (Kafka's truncateTo
            # truncates the cache here too)
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            return False
        if target_offset < self._bases[0] or target_offset < self._log_start_offset:
            self.truncate_fully_and_start_at(target_offset)
            return True
        try:
            doomed = [self._segments[b] for b in self._bases if b > target_offset]
            for seg in doomed:
                self._remove_segment(seg.base_offset)
            self._async_delete(doomed)
            active = self.active_segment
            active.truncate_to(target_offset)
            leo = active.read_next_offset() if active.size else active.base_offset
        except OSError as e:
            raise self._io_failed(e)
        self._leo_metadata = LogOffsetMetadata(leo, active.base_offset, active.size)
        self._recovery_point = min(self._recovery_point, leo)
        self.leader_epoch_cache.truncate_from_end(leo)
        self._hw_metadata = LogOffsetMetadata(min(self.high_watermark, leo))
        self._reset_cached_metadata()
        self._note_offsets()
        return True

    def truncate_fully_and_start_at(self, new_offset):
        self._check_online()
        doomed = self.segments
        self._segments, self._bases = {}, []
        try:
            self._async_delete(doomed)
            self._add_segment(self._new_segment(new_offset))
        except OSError as e:
            raise self._io_failed(e)
        self._log_start_offset = new_offset
        self._recovery_point = new_offset
        self._leo_metadata = LogOffsetMetadata(new_offset, new_offset, 0)
        self._hw_metadata = self._leo_metadata
        self.leader_epoch_cache.clear()
        self._note_offsets()

    def _async_delete(self, segments):
        """Kafka's two-step delete: rename to .deleted now, remove after file.delete.delay.ms."""
        for seg in segments:
            seg.change_file_suffixes("", DELETED_SUFFIX)
        if segments:
            self._leftovers = True

        def delete():
            for seg in segments:
                seg.delete_if_exists()

        if self._scheduler is not None and segments:
            self._scheduler(self.config.file_delete_delay_ms, delete)
        else:
            delete()

    def replace_segments(self, replacements):
        """Kafka's replaceSegments, for the cleaner: each ``(new segment named .cleaned, [old
        segments])`` becomes .swap, the old ones .deleted (removed after file.delete.delay.ms),
        then the new one takes its final name. False after an I/O error: the dir goes offline
        and loading completes the swap from the files left."""
        old = []
        try:
            for new, replaced in replacements:
                new.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
                crash_point("cleaner.swap.after_swap_files")
                for seg in replaced:
                    self._remove_segment(seg.base_offset)
                    seg.change_file_suffixes("", DELETED_SUFFIX)
                    old.append(seg)
                crash_point("cleaner.swap.after_old_deleted")
                new.change_file_suffixes(SWAP_SUFFIX, "")
                self._add_segment(new)
        except OSError as e:
            self._io_failed(e)
            return False
        self._async_delete_renamed(old)
        self._reset_cached_metadata()
        return True

    def _async_delete_renamed(self, segments):
        """Schedule removal of segments already renamed to .deleted."""
        if segments:
            self._leftovers = True
        def delete():
            for seg in segments:
                seg.delete_if_exists()

        if self._scheduler is not None and segments:
            self._scheduler(self.config.file_delete_delay_ms, delete)
        else:
            delete()

    def _deletable_segments(self, predicate):
        result = []
        hw = self.high_watermark
        bases = self._bases
        for i, base in enumerate(bases):
            seg = self._segments[base]
            nxt = self._segments[bases[i + 1]] if i + 1 < len(bases) else None
            upper = nxt.base_offset if nxt is not None else self.log_end_offset
            last_and_empty = nxt is None and seg.size == 0
            if upper <= hw and not last_and_empty and predicate(seg, nxt):
                result.append(seg)
            else:
                break
        return result

    def delete_old_segments(self, now_ms=None):
        """Retention: log start offset breach, then retention.ms and retention.bytes (when the
        policy includes delete). Returns the number of segments deleted."""
        self._check_online()
        now_ms = self._clock() if now_ms is None else now_ms
        if self._summary is not None and not self._summary_may_delete(now_ms):
            return 0  # its files stay closed
        start = self._log_start_offset
        deleted = self._delete_segments(self._deletable_segments(
            lambda seg, nxt: nxt is not None and nxt.base_offset <= start), "log start offset")
        if not self.config.delete:
            return deleted
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            deleted += self._delete_segments(self._deletable_segments(
                lambda seg, nxt: now_ms - seg.largest_timestamp() > retention_ms),
                "retention time %dms" % retention_ms)
        retention_bytes = self.config.retention_bytes
        if retention_bytes >= 0:
            state = {"diff": self.size - retention_bytes}

            def size_breach(seg, nxt):
                if state["diff"] - seg.size >= 0:
                    state["diff"] -= seg.size
                    return True
                return False
            deleted += self._delete_segments(self._deletable_segments(size_breach),
                                             "retention size %d bytes" % retention_bytes)
        return deleted

    def retention_due_ms(self):
        """The time from which retention.ms could delete the first segment, or None if only an
        append, a moved offset or a new config can give retention something to do (the other
        rules change with those only; so does the first segment of a log). Reads no file of a
        log not yet opened."""
        config = self.config
        if not config.delete or config.retention_ms < 0:
            return None
        summary = self._summary
        if summary is not None:
            return summary_retention_due_ms(summary, config)
        first = self._segments[self._bases[0]]
        if len(self._bases) == 1 and first.size == 0:
            return None
        return first.largest_timestamp() + config.retention_ms + 1

    def _summary_may_delete(self, now_ms):
        return summary_may_delete(self._summary, self._log_start_offset, self.config, now_ms)

    def _delete_segments(self, doomed, reason):
        if not doomed:
            return 0
        try:
            if len(doomed) == len(self._bases):
                self.roll()
            for seg in doomed:
                self._remove_segment(seg.base_offset)
            self.maybe_increment_log_start_offset(self._bases[0])
            self._async_delete(doomed)
        except OSError as e:
            raise self._io_failed(e)
        self._reset_cached_metadata()
        log.info("{tp}: deleted {n} segment(s) {bases} due to {reason}",
                 tp="%s-%d" % (self.topic, self.partition), n=len(doomed),
                 bases=[s.base_offset for s in doomed], reason=reason)
        return len(doomed)

    # -- flush, close, delete -----------------------------------------------------------

    def flush(self, offset=None):
        """fsync segments holding offsets below ``offset`` (default: LEO) and advance the
        recovery point, at once on the calling thread (shutdown, ``flush.messages``, tests).
        Background flushes run :meth:`plan_flush`'s plan in a thread instead."""
        plan = self.plan_flush(offset)
        if plan is None:
            return
        try:
            self.leader_epoch_cache.flush()
        except OSError as e:
            raise self._io_failed(e)
        plan.epochs = None  # (synced just now)
        self.finish_flush(plan, plan.run())

    def plan_flush(self, offset=None):
        """On the reactor: the segments a flush up to ``offset`` (default: LEO) must fsync, as a
        :class:`FlushPlan` whose ``run()`` a thread may call (it touches only those files), or
        None when the recovery point is there already. Hand ``run()``'s result to
        :meth:`finish_flush` on the reactor. (The leader epoch checkpoint is written whenever
        it changes; an append's new epoch is fsynced by the plan, before the recovery point
        passes it.)"""
        self._check_online()
        offset = self.log_end_offset if offset is None else offset
        if offset <= self._recovery_point:
            return None
        bases = self._bases
        lo = max(0, bisect.bisect_right(bases, self._recovery_point) - 1)
        segments = []
        for base in bases[lo:]:
            if base >= offset:
                break
            segments.append(self._segments[base])
        cache = self.leader_epoch_cache
        writes = cache.unsynced_writes()
        epochs = None if writes is None else (cache.path, writes)
        return FlushPlan(offset, segments, self._unflushed_messages, epochs)

    def finish_flush(self, plan, failures):
        """On the reactor, after ``plan.run()`` gave ``failures``: an I/O error on a segment
        still in the log takes the log (and its dir) offline; else the recovery point moves
        to the plan's offset (no further than a truncation since)."""
        for segment, exc in failures:
            if self._segments.get(segment.base_offset) is segment:
                raise self._io_failed(exc)
        if plan.epochs is not None:
            cache = self.leader_epoch_cache
            if plan.epochs_error is None:
                cache.mark_synced(plan.epochs[1])
            elif cache.path == plan.epochs[0] and not self._deleted:
                raise self._io_failed(plan.epochs_error)
        recovery_point = max(self._recovery_point, min(plan.offset, self.log_end_offset))
        if recovery_point != self._recovery_point:
            self._recovery_point = recovery_point
            self._note_offsets()
        self._unflushed_messages = max(0, self._unflushed_messages - plan.unflushed_messages)
        self._last_flush_ms = self._clock()

    @property
    def last_flush_ms(self):
        return self._last_flush_ms

    @property
    def unflushed_messages(self):
        return self._unflushed_messages

    def close(self):
        if self._summary is not None:
            return  # nothing was opened
        for seg in self.segments:
            try:
                seg.close()
            except (OSError, ValueError):
                seg.close_handlers()

    def close_handlers(self):
        if self._summary is not None:
            return
        for seg in self.segments:
            seg.close_handlers()

    def rename_dir(self, new_dir):
        os.rename(self.dir, new_dir)
        self.dir = new_dir
        for seg in ([] if self._summary is not None else self.segments):
            for obj in (seg.log, seg.offset_index, seg.time_index):
                obj.path = os.path.join(new_dir, os.path.basename(obj.path))
        self.leader_epoch_cache.path = os.path.join(new_dir, checkpoint.LEADER_EPOCH_CHECKPOINT)
        self._metadata_path = os.path.join(new_dir, PARTITION_METADATA_FILE)

    def delete(self):
        """Close and remove the whole directory."""
        self.close_handlers()
        self._segments, self._bases = {}, []
        self._summary = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def update_config(self, config):
        self.config = config
        if self.retention_changed is not None:
            self.retention_changed.add(self)

    def __repr__(self):
        return "UnifiedLog(%s-%d, start=%d, hw=%d, leo=%d)" % (
            self.topic, self.partition, self._log_start_offset, self.high_watermark,
            self.log_end_offset)
