"""LogManager: the logs of every log dir. Loads them (recovery after an unclean stop; after a
clean one a log object is made only when its partition is first used), creates and deletes
partitions, runs retention, flushes, checkpoints, delayed file deletes and the cleaner on the
injected reactor, with blocking work in a thread pool; marks failing dirs offline.
"""

import ctypes
import heapq
import itertools
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from twisted.internet import defer, task, threads
from twisted.logger import Logger

from kafkatw.background_failures import FailingTasks
from kafkatw.crash_points import crash_point
from kafkatw.protocol import errors
from kafkatw.protocol.errors import KafkaError

from . import checkpoint, descriptors, summary
from .config import LogConfig
from .log import (DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, UnifiedLog, parse_topic_partition,
                  summary_may_delete, summary_offsets, summary_retention_due_ms)
from .segment import log_file

log = Logger()

_LONG_MAX = 2 ** 63 - 1

#: at most this many directory entries left out of a dir's clean-shutdown summary have their
#: offsets looked up in the checkpoint files instead of the files being parsed whole
_FEW_LEFT_OUT = 1000

#: dirty logs in a log dir from which a clean shutdown syncs the filesystem once instead of
#: fsyncing each log
_SYNCFS_MIN_DIRTY_LOGS = 64


class _PendingLog:
    """A log :meth:`LogManager.create_logs` makes in the thread pool, not attached yet. Its
    ``state``, under the manager's lock: waiting, made by the thread (``made`` holds the log
    or the error), or taken by the reactor (which made it itself: the thread skips it)."""

    __slots__ = ("directory", "topic_id", "state", "made")

    WAITING, BUSY, MADE, TAKEN = range(4)

    def __init__(self, directory, topic_id):
        self.directory = directory
        self.topic_id = topic_id
        self.state = self.WAITING
        self.made = None


def log_delete_dir_name(topic, partition):
    """``<topic>-<partition>.<uuid>-delete`` with the topic cut so the name fits 255 bytes, as
    Kafka's LocalLog.logDeleteDirName does: a 249-character topic's would be 291 and the rename
    would fail with ENAMETOOLONG, taking the whole log dir offline."""
    suffix = "-%d.%s%s" % (partition, uuid.uuid4().hex, DELETE_DIR_SUFFIX)
    prefix = topic.encode("utf-8")[:max(0, 255 - len(suffix))].decode("utf-8", "ignore")
    return prefix + suffix


def _int(props, name, default):
    value = props.get(name)
    return default if value is None else int(value)


def _active_segment_as_summarised(path, summ):
    """One stat: the active segment's file has the size the summary gives it."""
    try:
        return os.stat(log_file(path, summ.active_base)).st_size == summ.active_size
    except OSError:
        return False


class UnopenedLogView:
    """What a listing reads of a log not opened since the start, from its summary (the
    attributes of :class:`UnifiedLog` of the same names)."""

    __slots__ = ("topic", "partition", "dir", "size", "number_of_segments", "log_start_offset",
                 "log_end_offset", "high_watermark", "topic_id", "is_offline")

    def __init__(self, topic, partition, directory, summ, is_offline):
        self.topic = topic
        self.partition = partition
        self.dir = _partition_dir(directory, topic, partition)
        self.size = summ.size
        self.number_of_segments = summ.segment_count
        self.log_start_offset, _, self.high_watermark = summary_offsets(summ)
        self.log_end_offset = summ.log_end_offset
        self.topic_id = summ.topic_id
        self.is_offline = is_offline


def _partition_dir(directory, topic, partition):
    """A partition's directory (joined without ``os.path.join``: 50,000 at a start)."""
    return "%s%s%s-%d" % (directory, os.sep, topic, partition)


class LogManager:
    def __init__(self, log_dirs, broker_defaults=None, reactor=None, threadpool=None,
                 topic_overrides=None):
        """``topic_overrides``: {topic: {config: value}} of the topics known at start, so the
        logs load with their topic's config (Kafka's loadLogs is given them too)."""
        if reactor is None:
            from twisted.internet import reactor
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.broker_defaults = dict(broker_defaults or {})
        self._reactor = reactor
        self._threadpool = threadpool
        self._logs = {}
        #: bumped whenever a log joins or leaves :attr:`_logs` (what get_log answers may
        #: change): a parked fetch reuses its look-ups while it and the metadata's are unchanged
        self.attached_version = 0
        #: {(topic, partition): (log dir, LogSummary)} of the logs a clean shutdown summarised
        #: that no one has used since the start: the log object is made (:meth:`_open`) on first
        #: use. 50,000 made at start were half of the start's CPU.
        self._unopened = {}
        #: which unopened logs retention has yet to look at with the configs of now: True for
        #: all (the first tick, and the first after a broker default changed), else the set of
        #: topics whose config changed since its last look
        self._unopened_retention = True
        #: {topic: LogConfig} shared by the logs :meth:`_open` makes (as a load shares them)
        self._open_configs = {}
        self._overrides = {t: dict(c) for t, c in (topic_overrides or {}).items() if c}
        self._offline_dirs = set()
        self._loops = []
        self._busy = set()
        self._pending_deletes = []
        self._shut_down = False
        #: {(topic, partition): _PendingLog} being created in the thread pool; get_log makes
        #: (or waits for) one asked for before its batch is attached
        self._creating = {}
        self._creating_lock = threading.Condition()
        self._compacted = {}  # {(topic, partition): log} see compacted_logs
        #: one background (``wait=False``) create_logs batch in the thread pool at a time:
        #: several at once (a topic after another) fought the reactor and the metadata writes
        #: for the GIL. The batches an answer waits for take turns beside them, not behind.
        self._creation_turn = defer.DeferredLock()
        self._waited_creation_turn = defer.DeferredLock()
        #: logs whose recovery point, log start or high watermark changed since the periodic
        #: checkpoints last looked; what those last saw, {name: {dir: {tp: offset}}}; the
        #: dirs each must write again
        self._offsets_changed = set()
        #: retention looks at the logs that changed since its last tick and at those whose
        #: retention.ms time has come (a heap of (due ms, n, (topic, partition)); the live
        #: entry of each is ``_retention_due[tp]`` = (due ms, id of its log)), not at every
        #: log. (A deleted partition's heap entry is dropped when its time comes, or when
        #: such entries outnumber the live ones.)
        self._retention_changed = set()
        self._retention_heap = []
        self._retention_due = {}
        self._retention_seq = itertools.count()
        self._checkpointed = {name: {} for name, _ in _CHECKPOINTS}
        self._checkpoint_dirty = {name: set(self.log_dirs) for name, _ in _CHECKPOINTS}
        self.cleaner = None
        self._cleaner_loop = None
        self.default_config = LogConfig.from_props(self.broker_defaults, {})
        #: called with the log dirs once every one of them is offline (the service halts the
        #: broker there, as Kafka's LogManager does); None: the broker keeps running
        self.on_all_dirs_offline = None
        #: called with a dir when it goes offline (in a cluster the broker tells the controller)
        self.dir_offline_listeners = []
        #: background work that fails: logged once, then at increasing intervals; counters
        self.task_failures = FailingTasks(reactor)

    # -- time and threads ---------------------------------------------------------------

    def now_ms(self):
        return int(self._reactor.seconds() * 1000)

    def run_blocking(self, fn, *args):
        """Run ``fn`` in the thread pool (inline without one, as in tests); a Deferred."""
        if self._threadpool is None:
            return defer.maybeDeferred(fn, *args)
        return threads.deferToThreadPool(self._reactor, self._threadpool, fn, *args)

    def _schedule(self, delay_ms, fn):
        call = self._reactor.callLater(max(0, delay_ms) / 1000.0, self._run_delete, fn)
        self._pending_deletes.append(call)

    def _run_delete(self, fn):
        self._pending_deletes = [c for c in self._pending_deletes if c.active()]
        d = self.run_blocking(fn)
        d.addErrback(self.task_failures["delayed file delete"].failed)

    # -- offline dirs -------------------------------------------------------------------

    @property
    def offline_dirs(self):
        return frozenset(self._offline_dirs)

    @property
    def online_dirs(self):
        return [d for d in self.log_dirs if d not in self._offline_dirs]

    def health(self):
        """Plain values for a metrics exporter or a health check (Kafka's OfflineLogDirectoryCount
        and friends): online and offline dirs, and how often each background task failed."""
        return {
            "online_log_dirs": list(self.online_dirs),
            "offline_log_dirs": sorted(self._offline_dirs),
            "offline_log_directory_count": len(self._offline_dirs),
            "background_task_failures": self.task_failures.snapshot(),
        }

    def _dir_of(self, lg):
        return lg.dir.rpartition(os.sep)[0]  # (dirname is Python code: shutdown asks per log)

    def handle_dir_failure(self, directory, exc=None):
        """An operation on ``directory`` failed with ``exc``: an I/O error takes the dir
        offline; running out of descriptors or memory (EMFILE, ENFILE, ENOMEM) fails only the
        operation, logged at increasing intervals, and the dir stays online."""
        if descriptors.is_resource_error(exc):
            self.task_failures["log dir operation (the dir stays online)"].failed(exc)
            return
        self._take_dir_offline(directory, exc)

    def _take_dir_offline(self, directory, exc):
        directory = os.path.abspath(directory)
        if directory in self._offline_dirs:
            return
        self._offline_dirs.add(directory)
        log.error("log dir {dir} is offline after an I/O error: {exc}", dir=directory, exc=exc)
        for lg in self._logs.values():
            if self._dir_of(lg) == directory:
                lg.mark_offline()
                lg.close_handlers()
        for listener in list(self.dir_offline_listeners):
            try:
                listener(directory)
            except Exception:
                log.failure("a log dir offline listener failed")
        if not self.online_dirs and self.on_all_dirs_offline is not None:
            self.on_all_dirs_offline(list(self.log_dirs))

    # -- loading ------------------------------------------------------------------------

    def _config_for(self, topic):
        return LogConfig.from_props(self.broker_defaults, self._overrides.get(topic, {}))

    def load_logs(self):
        """Open every log in every dir (recovering after an unclean stop)."""
        for directory in self.log_dirs:
            try:
                self._load_dir(directory)
            except OSError as e:
                self._take_dir_offline(directory, e)  # a half-loaded dir is never served

    def _load_dir(self, directory):
        started = time.monotonic()
        os.makedirs(directory, exist_ok=True)
        marker = os.path.join(directory, checkpoint.CLEAN_SHUTDOWN_FILE)
        clean = os.path.exists(marker)
        # Nothing a broker ever wrote here beyond meta.properties: a new dir, not a crash.
        fresh = not clean and not any(
            os.path.exists(os.path.join(directory, name)) for name in checkpoint.LOG_DIR_CHECKPOINTS)
        loaded = deferred = recovered = truncated = 0
        for name in checkpoint.LOG_DIR_CHECKPOINTS + (summary.LOG_SUMMARY_FILE,):
            try:  # a write a crash interrupted
                os.unlink(os.path.join(directory, name + ".tmp"))
            except FileNotFoundError:
                pass
        summary_path = os.path.join(directory, summary.LOG_SUMMARY_FILE)
        # After a clean shutdown a log is opened on first use, from what the summary says
        # (the offset checkpoints are read only for the logs it leaves out).
        summaries = self._read_summaries(summary_path) if clean else {}
        checkpoints = []

        def offsets(tp):
            if not checkpoints:
                checkpoints.extend(self._read_checkpoint(directory, name) for name in (
                    checkpoint.RECOVERY_POINT_CHECKPOINT, checkpoint.LOG_START_OFFSET_CHECKPOINT,
                    checkpoint.REPLICATION_OFFSET_CHECKPOINT))
            rps, starts, hws = checkpoints
            return rps.get(tp, 0), starts.get(tp, 0), hws.get(tp)
        configs = {}  # topic -> its LogConfig, shared by its partitions (as update_log_config does)
        with os.scandir(directory) as it:
            entries = {e.name: e for e in it}
        # A summarised partition of a topic that is not compacted keeps its summary until
        # first used (:meth:`_open`); the other entries are looked at one by one below.
        unopened, last_topic, compact = self._unopened, None, False
        before = len(unopened)
        for name, found in summaries.items():
            entry = entries.get(name)
            try:
                if entry is None or not entry.is_dir():
                    continue
            except OSError:
                continue
            topic = found[0]
            if topic != last_topic:  # (the summary is sorted: a topic's lines come together)
                config = configs.get(topic)
                if config is None:
                    config = configs[topic] = self._config_for(topic)
                last_topic, compact = topic, config.compact
            if not compact:  # (a compacted log is made now: the cleaner reads it anyway)
                unopened[topic, found[1]] = (directory, found[2])
                del entries[name]
        loaded = deferred = len(unopened) - before
        if summaries and len(entries) <= _FEW_LEFT_OUT:
            # The few logs the summary leaves out (compacted ones: __consumer_offsets) want
            # their offsets from the checkpoint files: found there, not the files parsed
            # (150,000 lines were ~1 s of a start with one consumer group).
            wanted = []
            for name in entries:
                try:
                    wanted.append(parse_topic_partition(name))
                except ValueError:
                    pass
            checkpoints.extend(self._read_checkpoint(directory, name, wanted) for name in (
                checkpoint.RECOVERY_POINT_CHECKPOINT, checkpoint.LOG_START_OFFSET_CHECKPOINT,
                checkpoint.REPLICATION_OFFSET_CHECKPOINT))
        for _, entry in sorted(entries.items()):
            name, path = entry.name, entry.path
            try:
                if not entry.is_dir():  # follows symlinks, as os.path.isdir; no stat on most fs
                    continue
            except OSError:
                continue
            if name.endswith(DELETE_DIR_SUFFIX):
                self._schedule(0, lambda p=path: _rmtree(p))
                continue
            if name.endswith(FUTURE_DIR_SUFFIX):
                # a replica move (AlterReplicaLogDirs) a stop interrupted: not resumed, its
                # copy removed (the replica stays where it was; ask again to move it)
                self._schedule(0, lambda p=path: _rmtree(p))
                continue
            found = summaries.get(name)
            if found is not None and not _active_segment_as_summarised(path, found[2]):
                # the files changed after the clean shutdown (copied in, appended to by a
                # tool): offsets served from the summary would be wrong, so they decide
                log.warn("{name}: the active segment is not as the clean-shutdown summary says; "
                         "loading it from its files", name=name)
                found = None
            if found is not None:
                topic, partition, summ = found
                rp, start, hw = summ.recovery_point, summ.log_start_offset, summ.high_watermark
            else:
                try:
                    topic, partition = parse_topic_partition(name)
                except ValueError:
                    continue
                summ = None
                rp, start, hw = offsets((topic, partition))
            config = configs.get(topic)
            if config is None:
                config = configs[topic] = self._config_for(topic)
            lg = UnifiedLog(path, config, topic, partition, clock=self.now_ms,
                            recovery_point=rp, log_start_offset=start, high_watermark=hw,
                            needs_recovery=not clean,
                            dir_failure_handler=self.handle_dir_failure,
                            scheduler=self._schedule, dir_exists=True, summary=summ)
            self._attach(lg)
            loaded += 1
            deferred += not lg.is_loaded
            recovered += lg.recovered_segments
            truncated += lg.truncated_bytes
        summary.remove(summary_path)  # true of these files only until they are written again
        if clean:
            os.unlink(marker)
        ms = int((time.monotonic() - started) * 1000)
        if fresh and not loaded:
            log.info("initialised new log dir {dir}", dir=directory)
        elif clean:
            log.info("loaded {n} log(s) from {dir} after a clean shutdown in {ms} ms ({deferred} "
                     "to be opened on first use)", n=loaded, dir=directory, ms=ms,
                     deferred=deferred)
        else:
            # One line per dir however many segments; each segment's detail is at debug level.
            log.info("recovered {dir} after an unclean stop: {n} log(s), {segments} segment(s) "
                     "recovered, {truncated} byte(s) truncated, in {ms} ms", dir=directory,
                     n=loaded, segments=recovered, truncated=truncated, ms=ms)

    def _read_summaries(self, path):
        try:
            return summary.read_summaries(path)
        except summary.SummaryError as e:
            log.warn("ignoring {path}, reading the logs' files instead: {e}", path=path, e=e)
            return {}

    def _read_checkpoint(self, directory, name, wanted=None):
        """A checkpoint file's offsets ({} if unreadable: said), of ``wanted`` only if given."""
        try:
            if wanted is not None:
                return checkpoint.read_offsets_of(os.path.join(directory, name), wanted)
            return checkpoint.read_offsets(os.path.join(directory, name))
        except checkpoint.CheckpointError as e:
            log.warn("ignoring {name} in {dir}: {e}", name=name, dir=directory, e=e)
            return {}

    def _attach(self, lg):
        lg.roll_listener = self._on_roll
        lg.offsets_changed = self._offsets_changed
        self._offsets_changed.add(lg)
        lg.retention_changed = self._retention_changed
        self._retention_changed.add(lg)
        self._note_compaction(lg)
        self._logs[(lg.topic, lg.partition)] = lg
        self.attached_version += 1

    def _on_roll(self, lg, new_base):
        """Flush the segments before the new one in a thread (Kafka's flushUptoOffsetExclusive)."""
        d = self.flush_log(lg, new_base)
        d.addErrback(self._log_error, "flush after segment roll")

    def flush_log(self, lg, offset=None):
        """fsync ``lg`` up to ``offset`` (default: its end) in the thread pool: the plan is made
        and its outcome applied on the reactor, the thread only fsyncs files (two flushes of
        a log may overlap: the recovery point only moves forward). A Deferred (KafkaError if
        the log is offline)."""
        return self._flush_plans(lambda: [(lg, lg.plan_flush(offset))])

    def _flush_plans(self, make_plans):
        """Plans from ``make_plans()`` (reactor) run in one piece of blocking work, each
        finished on the reactor; a Deferred, failed with the first KafkaError of a log."""
        def run(plans):
            return [plan.run() for _, plan in plans]

        def finish(outcomes, plans):
            error = None
            for (lg, plan), failures in zip(plans, outcomes):
                try:
                    lg.finish_flush(plan, failures)
                except KafkaError as e:
                    error = error or e
            if error is not None:
                raise error

        try:
            plans = [(lg, plan) for lg, plan in make_plans() if plan is not None]
        except KafkaError:
            return defer.fail()
        if not plans:
            return defer.succeed(None)
        return self.run_blocking(run, plans).addCallback(finish, plans)

    def _log_error(self, failure, what):
        """A KafkaError is an offline log, said once by :meth:`handle_dir_failure`."""
        if not failure.check(KafkaError):
            self.task_failures[what].failed(failure)

    # -- partitions ---------------------------------------------------------------------

    def _note_compaction(self, lg):
        """Keep :attr:`_compacted` (the logs the cleaner looks at) in step with ``lg``'s config."""
        if lg.config.compact:
            self._compacted[(lg.topic, lg.partition)] = lg
        elif self._compacted:  # (none at all is the common case: 50,000 logs attached at start)
            self._compacted.pop((lg.topic, lg.partition), None)

    def compacted_logs(self):
        """The attached logs whose cleanup.policy includes compact: the cleaner's candidates
        (its pass went over 50,000 logs of which none was compacted)."""
        logs = self._logs
        return [lg for tp, lg in list(self._compacted.items())
                if logs.get(tp) is lg and lg.config.compact]

    def get_log(self, topic, partition):
        lg = self._logs.get((topic, partition))
        if lg is None:
            if (topic, partition) in self._unopened:
                return self._open((topic, partition))
            if self._creating:
                return self._take_created((topic, partition))
        return lg

    def has_log(self, topic, partition):
        """Whether ``topic``-``partition`` has a log here (made, being made, or not yet
        opened since the start), without making it."""
        key = (topic, partition)
        return key in self._logs or key in self._unopened or key in self._creating

    def _open(self, key):
        """Make and attach the log of ``key`` from its clean-shutdown summary (its files stay
        closed until read: see :class:`UnifiedLog`). The files are stat'ed first: changed
        since the shutdown (copied in, appended to by a tool), they decide, not the summary.
        On an offline dir, or if reading the files fails (which takes the dir offline), the
        log is made from the summary and marked offline: it answers KAFKA_STORAGE_ERROR."""
        directory, summ = self._unopened.pop(key)
        topic, partition = key
        path = _partition_dir(directory, topic, partition)
        config = self._open_configs.get(topic)
        if config is None:
            config = self._open_configs[topic] = self._config_for(topic)

        def make(from_summary):
            return UnifiedLog(path, config, topic, partition, clock=self.now_ms,
                              recovery_point=summ.recovery_point,
                              log_start_offset=summ.log_start_offset,
                              high_watermark=summ.high_watermark, needs_recovery=False,
                              dir_failure_handler=self.handle_dir_failure,
                              scheduler=self._schedule, dir_exists=True,
                              summary=summ if from_summary else None)
        offline = directory in self._offline_dirs
        if offline or _active_segment_as_summarised(path, summ):
            lg = make(True)
        else:
            log.warn("{tp}: the active segment is not as the clean-shutdown summary says; "
                     "loading it from its files", tp="%s-%d" % key)
            try:
                lg = make(False)
            except (OSError, KafkaError) as e:
                log.error("cannot load log {tp}: {e}", tp="%s-%d" % key, e=e)
                if isinstance(e, OSError):
                    self._take_dir_offline(directory, e)
                lg = make(True)
                offline = True
        if offline:
            lg.mark_offline()
        self._attach(lg)
        return lg

    def _open_all(self):
        for key in list(self._unopened):
            if key in self._unopened:
                self._open(key)

    def unopened_summaries(self):
        """[(topic, partition, LogSummary)] of the logs not opened since the start (their
        offsets as the log would report them: see :func:`~kafkatw.storage.log.summary_offsets`)."""
        return [(t, p, summ) for (t, p), (_, summ) in self._unopened.items()]

    def log_views(self):
        """Every log as what a listing reads of it (topic, partition, dir, size, offsets,
        segments, offline): the made logs themselves and, for the unopened ones, a
        :class:`UnopenedLogView` of their summary (a metrics scrape or DescribeLogDirs made
        50,000 logs the first time)."""
        views = list(self._logs.values())
        offline = self._offline_dirs
        for (topic, partition), (d, summ) in self._unopened.items():
            views.append(UnopenedLogView(topic, partition, d, summ, d in offline))
        return views

    def log_view(self, topic, partition):
        """What a listing reads of one partition's log (:meth:`log_views`), or None: the
        console's pages and a scrape's consumer lag ask per partition, and made every log."""
        lg = self._logs.get((topic, partition))
        if lg is not None:
            return lg
        entry = self._unopened.get((topic, partition))
        if entry is not None:
            d, summ = entry
            return UnopenedLogView(topic, partition, d, summ, d in self._offline_dirs)
        return self.get_log(topic, partition) if self._creating else None

    def opened_logs(self):
        """The log objects made so far (:meth:`all_logs` without the unopened ones)."""
        return list(self._logs.values())

    def partition_topic_ids(self):
        """{(topic, partition): topic id or None} of every log, opened or not."""
        out = {tp: lg.topic_id for tp, lg in self._logs.items()}
        for tp, (_, summ) in self._unopened.items():
            out[tp] = summ.topic_id
        return out

    def log_dir_of(self, topic, partition):
        """The log dir holding the log of ``topic``-``partition`` (opened or not), or None if
        there is none or it is offline."""
        key = (topic, partition)
        lg = self._logs.get(key)
        if lg is not None:
            return None if lg.is_offline else self._dir_of(lg)
        entry = self._unopened.get(key)
        if entry is None or entry[0] in self._offline_dirs:
            return None
        return entry[0]

    def _take_created(self, key):
        """The log of ``key`` if :meth:`create_logs` is making it in the thread pool: made
        here now if the thread has not started on it, else waited for (one partition's files)
        and attached. None if it is not being made or could not be."""
        with self._creating_lock:
            pending = self._creating.get(key)
            if pending is None:
                return None
            while pending.state == pending.BUSY:
                self._creating_lock.wait()
            del self._creating[key]
            made_here = pending.state == pending.WAITING
            pending.state = pending.TAKEN
        config = self._config_for(key[0])
        if made_here:
            made = self._make_log(key[0], key[1], pending.directory, pending.topic_id, config)
        else:
            made = pending.made
        if self._attach_made(key[0], key[1], pending.directory, made, config):
            return made
        return None

    def _make_log(self, topic, partition, directory, topic_id, config):
        """A new log (in any thread), or the OSError or KafkaError that stopped it (none
        is made in a dir that went offline after it was placed there)."""
        if directory in self._offline_dirs:
            return KafkaError(errors.KAFKA_STORAGE_ERROR, "log dir %s is offline" % (directory,))
        path = os.path.join(directory, "%s-%d" % (topic, partition))
        try:
            return UnifiedLog(path, config, topic, partition, topic_id=topic_id,
                              clock=self.now_ms, dir_failure_handler=self.handle_dir_failure,
                              scheduler=self._schedule)
        except (OSError, KafkaError) as e:
            return e

    def _attach_made(self, topic, p, directory, lg, config):
        """On the reactor: attach a log :meth:`_make_log` made, with the topic's ``config``
        of now (it may have changed while the log was being made); False if it failed (said
        here) or is not wanted any more (closed)."""
        if isinstance(lg, OSError):
            self.handle_dir_failure(directory, lg)
            log.error("cannot create log {topic}-{p}: {e}", topic=topic, p=p, e=lg)
            return False
        if isinstance(lg, KafkaError):
            log.error("cannot create log {topic}-{p}: {e}", topic=topic, p=p, e=lg)
            return False
        if (topic, p) in self._logs or directory in self._offline_dirs or self._shut_down:
            lg.close()  # (after shutdown: closed cleanly, as the others were)
            return False
        lg.update_config(config)  # (LogConfig has no __eq__: a "changed?" test was always true)
        self._attach(lg)
        return True

    def _stop_creating(self, keys):
        """Logs of ``keys`` being made in the thread pool are not wanted (their topic is
        deleted, the broker stops): those not started are dropped, the others waited for.
        Returns the logs made and not attached."""
        made = []
        with self._creating_lock:
            for key in keys:
                pending = self._creating.pop(key, None)
                if pending is None:
                    continue
                while pending.state == pending.BUSY:
                    self._creating_lock.wait()
                if pending.state == pending.MADE and isinstance(pending.made, UnifiedLog):
                    made.append(pending.made)
                pending.state = pending.TAKEN
        return made

    def all_logs(self):
        """Every log, made now if it was not (50,000 cost a second or two: the start and the
        periodic tasks use :meth:`opened_logs` and :meth:`unopened_summaries`)."""
        if self._unopened:
            self._open_all()
        return list(self._logs.values())

    def _logs_per_dir(self, online):
        """{dir: number of logs} over the ``online`` dirs, counting the logs being made in the
        thread pool where they will be (a topic placed while another's are still being made
        went to the dirs those were about to fill); None with one dir (nothing to balance:
        50,000 logs were counted for every topic)."""
        if len(online) < 2:
            return None
        counts = dict.fromkeys(online, 0)
        for lg in self._logs.values():
            d = self._dir_of(lg)
            if d in counts:
                counts[d] += 1
        for pending in self._creating.values():  # (only the reactor adds or removes entries)
            if pending.directory in counts:
                counts[pending.directory] += 1
        for d, _ in self._unopened.values():
            if d in counts:
                counts[d] += 1
        return counts

    @staticmethod
    def _place(online, counts):
        """The dir of ``online`` holding the fewest logs (the first in log.dirs of those),
        counted in ``counts`` (from :meth:`_logs_per_dir`) for the next placement."""
        if counts is None:
            return online[0]
        directory = min(online, key=lambda d: (counts[d], online.index(d)))
        counts[directory] += 1
        return directory

    def _next_log_dir(self):
        online = self.online_dirs
        if not online:
            raise KafkaError(errors.KAFKA_STORAGE_ERROR, "no online log dir")
        return self._place(online, self._logs_per_dir(online))

    def get_or_create_log(self, topic, partition, topic_id=None, overrides=None, is_new=True):
        """The log of ``topic``-``partition``, created if missing. ``is_new=False``: the
        partition should have a log already (a known topic); while a log dir is offline it
        may be there, so it is not created afresh elsewhere (Kafka's getOrCreateLog)."""
        lg = self.get_log(topic, partition)
        if lg is not None:
            if lg.topic_id is None and topic_id is not None:
                from .log import write_partition_metadata
                write_partition_metadata(lg._metadata_path, topic_id)
                lg.topic_id = topic_id
            return lg
        if not is_new and self._offline_dirs:
            raise KafkaError(errors.KAFKA_STORAGE_ERROR,
                             "Can not create log for %s-%d because log directories %s are offline"
                             % (topic, partition, ",".join(sorted(self._offline_dirs))))
        if overrides is not None:
            self._overrides[topic] = dict(overrides)
            self._open_configs.pop(topic, None)
        directory = self._next_log_dir()
        path = os.path.join(directory, "%s-%d" % (topic, partition))
        try:
            lg = UnifiedLog(path, self._config_for(topic), topic, partition, topic_id=topic_id,
                            clock=self.now_ms, dir_failure_handler=self.handle_dir_failure,
                            scheduler=self._schedule)
        except OSError as e:
            self.handle_dir_failure(directory, e)
            raise KafkaError(errors.KAFKA_STORAGE_ERROR, "cannot create log %s: %s" % (path, e))
        self._attach(lg)
        log.info("created log for {topic}-{partition} in {dir}", topic=topic,
                 partition=partition, dir=directory)
        return lg

    def create_logs(self, topic, partitions, topic_id=None, overrides=None, wait=True):
        """Create the missing logs of ``partitions`` of ``topic``: a Deferred firing once they
        are attached (``wait=False``: at once; they are attached when made, and
        :meth:`get_log` makes or waits for one asked for sooner). Their directories and files
        are made in the thread pool (a thousand partitions are seconds of mkdir and open);
        log dirs are chosen, and the logs attached, on the reactor."""
        if overrides is not None:
            self._overrides[topic] = dict(overrides)
            self._open_configs.pop(topic, None)
        config = self._config_for(topic)
        online = self.online_dirs
        counts = self._logs_per_dir(online)
        plan = []
        for p in partitions:
            if self.has_log(topic, p):
                lg = self.get_or_create_log(topic, p, topic_id)  # sets a missing topic id
                if overrides is not None:
                    lg.update_config(config)  # a log loaded before its topic was known
                    self._note_compaction(lg)
                continue
            if not online:
                return defer.fail(KafkaError(errors.KAFKA_STORAGE_ERROR, "no online log dir"))
            pending = _PendingLog(self._place(online, counts), topic_id)
            self._creating[(topic, p)] = pending
            plan.append((p, pending))

        def make():
            lock = self._creating_lock
            for p, pending in plan:
                with lock:
                    if pending.state != pending.WAITING:
                        continue  # taken by the reactor, or not wanted any more
                    pending.state = pending.BUSY
                made = self._make_log(topic, p, pending.directory, topic_id, config)
                with lock:
                    pending.made = made
                    pending.state = pending.MADE
                    lock.notify_all()

        def attach(_):
            failed = []
            config = self._config_for(topic)  # (a config changed meanwhile is not missed)
            for p, pending in plan:
                with self._creating_lock:
                    if pending.state != pending.MADE:
                        continue  # taken (attached or failed there) or dropped
                    pending.state = pending.TAKEN
                    if self._creating.get((topic, p)) is pending:
                        del self._creating[(topic, p)]
                if not self._attach_made(topic, p, pending.directory, pending.made, config) \
                        and not isinstance(pending.made, UnifiedLog):
                    failed.append(p)
            log.info("created {n} log(s) for {topic}", n=len(plan) - len(failed), topic=topic)
            if failed:
                raise KafkaError(errors.KAFKA_STORAGE_ERROR, "cannot create the logs of %s partitions %s"
                                 % (topic, failed))
        if not plan:
            return defer.succeed(None)
        if wait:  # (a topic of one partition waited for the large ones before it)
            return self._waited_creation_turn.run(self.run_blocking, make).addCallback(attach)
        d = self._creation_turn.run(self.run_blocking, make).addCallback(attach)
        d.addErrback(self._log_error, "creating the logs of %s" % (topic,))
        return defer.succeed(None)

    def delete_logs(self, topic, partitions):
        """Delete ``partitions`` of ``topic``: each log is forgotten and marked deleted at once,
        the directory renames to ``-delete`` run in the thread pool (a thousand renames hold
        the reactor for a quarter of a second), the file deletes are scheduled back on the
        reactor after ``file.delete.delay.ms``. A Deferred firing once renamed."""
        crash_point("topic.delete.after_metadata")  # listeners run once the deletion is durable
        moves = []
        partitions = list(partitions)
        unattached = {lg.partition: lg for lg in
                      self._stop_creating([(topic, p) for p in partitions])}
        for p in partitions:
            if (topic, p) in self._unopened:
                self._open((topic, p))
            lg = self._logs.pop((topic, p), None) or unattached.get(p)
            if lg is None:
                continue
            self._forget_log(lg)  # (an offline one too: nothing else forgets it)
            if lg.is_offline:
                continue
            lg.mark_deleted()  # before the rename: a flush in a thread may trip over the move
            moves.append((lg, os.path.join(os.path.dirname(lg.dir), log_delete_dir_name(topic, p))))

        def rename():
            out = []
            for lg, new_dir in moves:
                try:
                    os.rename(lg.dir, new_dir)  # lg.dir is read only: the reactor waits for us
                    out.append(None)
                except OSError as e:
                    out.append(e)
            crash_point("topic.delete.after_rename")
            return out

        def renamed(outcome):
            by_delay = {}  # one scheduled delete per delay, not one per partition
            for (lg, new_dir), error in zip(moves, outcome):
                if error is not None:
                    self.handle_dir_failure(self._dir_of(lg), error)
                    continue
                # Nothing reads the paths of a deleted log's files again: its directory is
                # all the delete needs (updating every segment's paths took ~30 us a log).
                lg.dir = new_dir
                by_delay.setdefault(lg.config.file_delete_delay_ms, []).append(lg)
            for delay, logs in by_delay.items():
                self._schedule(delay, lambda logs=logs: [lg.delete() for lg in logs])
        if not moves:
            return defer.succeed(None)
        return self.run_blocking(rename).addCallback(renamed)

    def delete_log(self, topic, partition):
        """Rename the partition dir to ``<tp>.<uuid>-delete`` and remove it later."""
        if (topic, partition) in self._unopened:
            self._open((topic, partition))
        lg = self._logs.pop((topic, partition), None)
        if lg is None:
            return None
        self._forget_log(lg)
        if lg.is_offline:
            return lg
        new_dir = os.path.join(os.path.dirname(lg.dir), log_delete_dir_name(topic, partition))
        lg.mark_deleted()  # before the rename: a flush in a thread may trip over the move
        try:
            lg.rename_dir(new_dir)
        except OSError as e:
            self.handle_dir_failure(self._dir_of(lg), e)
            return lg
        delay = lg.config.file_delete_delay_ms
        self._schedule(delay, lg.delete)
        return lg

    # -- moving a replica to another log dir (AlterReplicaLogDirs) ------------------------------

    def dir_of(self, lg):
        """The log dir holding ``lg``."""
        return self._dir_of(lg)

    def create_future_log(self, topic, partition, directory):
        """An empty ``<tp>.<uuid>-future`` log in ``directory`` starting at the current log's
        start, the copy a replica move fills (Kafka's future log); not attached."""
        self.get_log(topic, partition)  # (made if not opened yet)
        current = self._logs[(topic, partition)]
        name = "%s-%d.%s%s" % (topic, partition, uuid.uuid4().hex, FUTURE_DIR_SUFFIX)
        path = os.path.join(directory, name)
        try:
            future = UnifiedLog(path, self._config_for(topic), topic, partition, topic_id=current.topic_id,
                                clock=self.now_ms, dir_failure_handler=self.handle_dir_failure,
                                scheduler=self._schedule, log_start_offset=current.log_start_offset)
        except OSError as e:
            self.handle_dir_failure(directory, e)
            raise KafkaError(errors.KAFKA_STORAGE_ERROR, "cannot create log %s: %s" % (path, e))
        return future

    def replace_current_with_future(self, topic, partition, future):
        """The future log becomes the partition's log (renamed to ``<tp>``), its high watermark
        and leader epochs the current one's; the current log is deleted after
        ``file.delete.delay.ms`` (reads in flight keep their files). Call it when the future
        has caught up, in the same reactor turn as its last append."""
        self.get_log(topic, partition)  # (made if not opened yet)
        current = self._logs[(topic, partition)]
        future.update_high_watermark(current.high_watermark)
        cache = future.leader_epoch_cache
        cache.clear()
        for epoch, start in current.leader_epoch_cache.entries():
            cache.assign(epoch, start, flush=False)
        cache.flush()
        future.rename_dir(os.path.join(os.path.dirname(future.dir), "%s-%d" % (topic, partition)))
        self._forget_log(current)  # its dir's checkpoints stop listing it
        self._logs.pop((topic, partition))
        self._attach(future)
        current.mark_deleted()
        try:
            current.rename_dir(os.path.join(os.path.dirname(current.dir), log_delete_dir_name(topic, partition)))
        except OSError as e:
            self.handle_dir_failure(self._dir_of(current), e)
            return future
        self._schedule(current.config.file_delete_delay_ms, current.delete)
        return future

    def delete_future_log(self, future):
        """Drop an abandoned move's copy."""
        future.mark_deleted()
        self._schedule(0, future.delete)

    def update_log_config(self, topic, overrides):
        self._overrides[topic] = dict(overrides or {})
        config = self._open_configs[topic] = self._config_for(topic)
        for (t, _p), lg in self._logs.items():
            if t == topic:
                lg.update_config(config)
                self._note_compaction(lg)
        self._config_changed(topic)
        return config

    def _config_changed(self, changed):
        """The config of topic ``changed`` (None: of every topic) changed: its unopened logs are
        opened if now compacted (the cleaner works on log objects), and retention looks at
        them again at its next tick."""
        if not self._unopened:
            return
        if changed is None:
            self._unopened_retention = True
        elif self._unopened_retention is not True:
            self._unopened_retention = (self._unopened_retention or set()) | {changed}
        compact = {}
        for key in list(self._unopened):
            topic = key[0]
            if changed is not None and topic != changed:
                continue
            if topic not in compact:
                compact[topic] = self._config_for(topic).compact
            if compact[topic] and key in self._unopened:
                self._open(key)

    def forget_topic(self, topic):
        """``topic`` is deleted from the metadata: its config overrides go (kept until then:
        :meth:`delete_logs` of a partition leaving this broker is not the topic's end, other
        partitions of it may move here later)."""
        self._overrides.pop(topic, None)
        self._open_configs.pop(topic, None)

    def update_broker_defaults(self, broker_defaults):
        self.broker_defaults.update(broker_defaults)
        self._open_configs.clear()
        self.default_config = LogConfig.from_props(self.broker_defaults, {})
        for lg in self._logs.values():
            lg.update_config(self._config_for(lg.topic))
            self._note_compaction(lg)
        self._config_changed(None)

    # -- background work ----------------------------------------------------------------

    def start(self):
        props = self.broker_defaults
        self._loop("retention", self.cleanup_logs,
                   _int(props, "log.retention.check.interval.ms", 300000))
        flush_interval = _int(props, "log.flush.scheduler.interval.ms", _LONG_MAX)
        if flush_interval < _LONG_MAX:
            self._loop("scheduled flush", self.flush_dirty_logs, flush_interval)
        self._loop("recovery point checkpoint", self.checkpoint_recovery_offsets,
                   _int(props, "log.flush.offset.checkpoint.interval.ms", 60000))
        self._loop("log start offset checkpoint", self.checkpoint_log_start_offsets,
                   _int(props, "log.flush.start.offset.checkpoint.interval.ms", 60000))
        self._loop("high watermark checkpoint", self.checkpoint_high_watermarks,
                   _int(props, "replica.high.watermark.checkpoint.interval.ms", 5000))
        if str(props.get("log.cleaner.enable", "true")).lower() == "true":
            from .cleaner import LogCleaner
            self.cleaner = LogCleaner(self, _int(props, "log.cleaner.backoff.ms", 15000))
            self._cleaner_loop = self._loop("log cleaner", self.cleaner.run_once,
                                            self.cleaner.backoff_ms)

    def set_cleaner_backoff(self, backoff_ms):
        """The cleaner's pause between passes changed (``log.cleaner.backoff.ms``): its next
        pass is ``backoff_ms`` from now."""
        self.broker_defaults["log.cleaner.backoff.ms"] = backoff_ms
        if self.cleaner is None:
            return
        self.cleaner.backoff_ms = backoff_ms
        loop = self._cleaner_loop
        if loop is not None and loop.running:
            loop.stop()
            self._loops.remove(loop)
            self._cleaner_loop = self._loop("log cleaner", self.cleaner.run_once, backoff_ms)

    def _loop(self, name, fn, interval_ms):
        """Run ``fn`` every ``interval_ms``, never two runs at once; its failures are logged
        quietly under ``name`` (:attr:`task_failures`)."""

        def guarded():
            if name in self._busy:
                return None
            self._busy.add(name)
            d = defer.maybeDeferred(fn)
            failing = self.task_failures[name]
            d.addCallbacks(lambda _: failing.succeeded(), failing.failed)
            d.addBoth(lambda _: self._busy.discard(name))
            return None

        loop = task.LoopingCall(guarded)
        loop.clock = self._reactor
        loop.start(interval_ms / 1000.0, now=False)
        self._loops.append(loop)
        return loop

    def cleanup_logs(self):
        """Retention for the online logs that changed since the last run or whose
        retention.ms time has come; returns the number of segments deleted. (10,000 idle
        partitions cost each tick 0.3-0.7 s when every log was visited.)"""
        total = 0
        now = self.now_ms()
        todo = set(self._retention_changed)
        self._retention_changed.clear()  # (every log holds this set)
        logs, heap, due_of = self._logs, self._retention_heap, self._retention_due
        if self._unopened_retention:
            todo.update(self._unopened_retention_pass(now))
        while heap and heap[0][0] <= now:
            due, _, tp = heapq.heappop(heap)
            live = due_of.get(tp)
            if live is None or live[0] != due:
                continue  # (replaced by a sooner time, or its log went)
            del due_of[tp]
            if live[1] is None:  # (an unopened log's time: made now, if still unopened)
                if tp in self._unopened:
                    todo.add(self._open(tp))
                continue
            lg = logs.get(tp)
            if lg is not None and id(lg) == live[1]:
                todo.add(lg)
        for lg in todo:
            tp = (lg.topic, lg.partition)
            if logs.get(tp) is not lg or lg.is_offline:
                continue
            try:
                total += lg.delete_old_segments(now)
                due = lg.retention_due_ms()
            except KafkaError:
                continue
            self._retention_changed.discard(lg)  # (what this deletion moved is seen in due)
            if due is None or due <= now:
                continue  # (or held back by the high watermark: it moves with an append)
            current = due_of.get(tp)
            if current is None or current[1] != id(lg) or due < current[0]:
                # (a later time is not pushed: the entry there finds it when it comes)
                due_of[tp] = (due, id(lg))
                heapq.heappush(heap, (due, next(self._retention_seq), tp))
        if len(heap) > 2 * len(due_of) + 64:
            # mostly entries of deleted partitions (retention.ms, 7 days by default, away)
            heap[:] = [e for e in heap if due_of.get(e[2], (None,))[0] == e[0]]
            heapq.heapify(heap)
        return total

    def _unopened_retention_pass(self, now):
        """Retention's look at the unopened logs, from their summaries (all after the start or
        a broker default's change, a topic's after its config changed): those it may delete
        from are opened and returned, the others' times from which retention.ms could delete
        go on the heap (as an opened log's do)."""
        topics = None if self._unopened_retention is True else self._unopened_retention
        self._unopened_retention = False
        opened, configs = [], {}
        heap, due_of = self._retention_heap, self._retention_due
        for tp, (d, summ) in list(self._unopened.items()):
            if d in self._offline_dirs or (topics is not None and tp[0] not in topics):
                continue
            config = configs.get(tp[0])
            if config is None:
                config = configs[tp[0]] = self._config_for(tp[0])
            start = max(summ.log_start_offset, summ.first_base)
            if summary_may_delete(summ, start, config, now):
                opened.append(self._open(tp))
                continue
            due = summary_retention_due_ms(summ, config)
            if due is not None and due > now:
                current = due_of.get(tp)
                if current is None or current[1] is not None or due < current[0]:
                    due_of[tp] = (due, None)
                    heapq.heappush(heap, (due, next(self._retention_seq), tp))
        return opened

    def flush_dirty_logs(self):
        """Flush every log due by ``flush.ms`` in one piece of thread-pool work (see :meth:`flush_log`)."""
        now = self.now_ms()
        due = [lg for lg in self._logs.values()
               if not lg.is_offline and now - lg.last_flush_ms >= lg.config.flush_ms]

        def plans():
            out = []
            for lg in due:
                try:
                    out.append((lg, lg.plan_flush()))
                except KafkaError:  # offline since
                    pass
            return out
        return self._flush_plans(plans).addErrback(lambda f: f.trap(KafkaError) and None)

    def _collect_offset_changes(self):
        """Bring :attr:`_checkpointed` up to date with the logs that said their offsets
        changed (and those attached or removed): a tick looks at those only, so idle
        partitions cost it nothing until a file must be written."""
        changed = list(self._offsets_changed)
        self._offsets_changed.clear()
        for lg in changed:
            tp = (lg.topic, lg.partition)
            if self._logs.get(tp) is not lg or lg.is_offline:
                continue
            d = self._dir_of(lg)
            for name, getter in _CHECKPOINTS:
                values = self._checkpointed[name].setdefault(d, {})
                value = getter(lg)
                if values.get(tp) != value:
                    values[tp] = value
                    self._checkpoint_dirty[name].add(d)

    def _forget_log(self, lg):
        """``lg`` leaves :attr:`_logs` (deleted, or replaced by its future): what the
        checkpoints, retention and the cleaner keep about it goes (a running cleaning of it
        is not swapped in)."""
        self.attached_version += 1
        if self.cleaner is not None:
            self.cleaner.abort(lg)
        d, tp = self._dir_of(lg), (lg.topic, lg.partition)
        if self._compacted.get(tp) is lg:
            del self._compacted[tp]
        if self._retention_due.get(tp, (None, None))[1] == id(lg):
            del self._retention_due[tp]  # (its heap entry goes when its time comes)
        for name, _ in _CHECKPOINTS:
            # (always: a log opened since the start only to be deleted was never collected,
            # but the files list it from its summary; left there, a log of the same name
            # made later loaded with its log start and recovery point after a kill -9)
            self._checkpointed[name].get(d, {}).pop(tp, None)
            self._checkpoint_dirty[name].add(d)

    def _write_checkpoints(self, name):
        """Write checkpoint ``name`` in each online dir whose entries changed since it was
        last written (every dir the first time), in the thread pool."""
        self._collect_offset_changes()
        dirty = self._checkpoint_dirty[name]
        snapshot = {d: dict(self._checkpointed[name].get(d, {}))
                    for d in self.online_dirs if d in dirty}
        dirty.difference_update(snapshot)
        if not snapshot:
            return defer.succeed(None)
        # The unopened logs' offsets are their summaries' (they change only once a log is
        # opened, which then tells the checkpoints as any log does): taken in by the thread,
        # 50,000 of them held the reactor ~0.2 s.
        unopened = list(self._unopened.items()) if self._unopened else ()
        field = _CHECKPOINT_FIELDS[name]

        def work():
            failed = []
            extra = _unopened_offsets(unopened, field, snapshot)
            for d, offsets in snapshot.items():
                more = extra.get(d)
                if more:
                    more.update(offsets)
                    offsets = more
                try:
                    checkpoint.write_offsets(os.path.join(d, name), offsets)
                except OSError as e:
                    failed.append((d, e))
            return failed

        def written(failed):
            for d, e in failed:
                dirty.add(d)  # again next time (if the dir stays online)
                self.handle_dir_failure(d, e)
        return self.run_blocking(work).addCallback(written)

    def checkpoint_recovery_offsets(self):
        return self._write_checkpoints(checkpoint.RECOVERY_POINT_CHECKPOINT)

    def checkpoint_log_start_offsets(self):
        return self._write_checkpoints(checkpoint.LOG_START_OFFSET_CHECKPOINT)

    def checkpoint_high_watermarks(self):
        return self._write_checkpoints(checkpoint.REPLICATION_OFFSET_CHECKPOINT)

    def shutdown(self):
        """Flush and close every log, write checkpoints and the clean-shutdown markers."""
        self._shut_down = True
        for lg in self._stop_creating(list(self._creating)):
            lg.close()  # (its partition is made afresh at the next start if it is missing)
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self._loops = []
        if self.cleaner is not None:
            self.cleaner.shutdown()
        for call in self._pending_deletes:
            if call.active():
                call.cancel()  # .deleted files and -delete dirs are removed on the next load
        self._pending_deletes = []
        by_dir = {}
        for lg in self._logs.values():
            if not lg.is_offline:
                by_dir.setdefault(self._dir_of(lg), []).append(lg)
        unopened = {}
        for tp, (d, summ) in self._unopened.items():
            unopened.setdefault(d, []).append((tp, summ))
        for d in self.online_dirs:  # (a dir without logs gets its marker too)
            self._shutdown_dir(d, by_dir.get(d, []), unopened.get(d, ()))

    def _shutdown_dir(self, directory, logs, unopened=()):
        """Close ``logs`` (all of ``directory``'s online ones) durably, then write the dir's
        checkpoints, its clean-shutdown summary and, last, the clean-shutdown marker; the
        ``unopened`` logs ([(tp, LogSummary)]) go into them as their summaries say. An error
        takes the dir offline: no marker, so the next start recovers it."""
        summaries = {}
        for lg, (e, found) in zip(logs, self._close_all(directory, logs)):
            if e is not None:
                self._take_dir_offline(directory, e)
                return
            if found is not None:
                summaries[(lg.topic, lg.partition)] = found
        recovery, starts, hws = {}, {}, {}
        for lg in logs:
            tp = (lg.topic, lg.partition)
            recovery[tp] = rp = lg.recovery_point  # (a bulk sync moved it since summarise)
            starts[tp] = lg.log_start_offset
            hws[tp] = lg.high_watermark
            found = summaries.get(tp)
            if found is not None and found.recovery_point != rp:
                summaries[tp] = found._replace(recovery_point=rp)
        for tp, summ in unopened:
            start, rp, hw = summary_offsets(summ)
            recovery[tp], starts[tp], hws[tp] = rp, start, hw
            if (start, rp, hw) != (summ.log_start_offset, summ.recovery_point,
                                   summ.high_watermark):
                summ = summ._replace(log_start_offset=start, recovery_point=rp, high_watermark=hw)
            summaries[tp] = summ
        d = directory
        try:
            checkpoint.write_offsets(os.path.join(d, checkpoint.RECOVERY_POINT_CHECKPOINT), recovery)
            checkpoint.write_offsets(os.path.join(d, checkpoint.LOG_START_OFFSET_CHECKPOINT), starts)
            checkpoint.write_offsets(os.path.join(d, checkpoint.REPLICATION_OFFSET_CHECKPOINT), hws)
            summary.write_summaries(os.path.join(d, summary.LOG_SUMMARY_FILE), summaries)
            with open(os.path.join(d, checkpoint.CLEAN_SHUTDOWN_FILE), "w") as f:
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            self._take_dir_offline(d, e)

    def _close_all(self, directory, logs):
        """Close ``logs`` of ``directory`` and make them durable: ``(error, LogSummary or
        None)`` for each.

        Few dirty logs are fsynced in ``num.recovery.threads.per.data.dir`` threads (Kafka's
        shutdown); many are closed unsynced and the dir's filesystem synced once (``syncfs``):
        one fsync per dirty log took 20 s for 2,000. The reactor waits: it is stopping."""
        plans = []
        for lg in logs:
            try:
                plans.append(lg.plan_flush())
            except KafkaError:
                plans.append(None)  # offline since: its close says so
        dirty = sum(plan is not None for plan in plans)
        bulk = dirty >= _SYNCFS_MIN_DIRTY_LOGS

        def close(lg, flush=False):
            try:
                if flush:
                    lg.flush()
                found = lg.summarise()
                lg.close()
            except (KafkaError, OSError) as e:
                return e, None
            return None, found

        per_dir = _int(self.broker_defaults, "num.recovery.threads.per.data.dir", 2)
        if bulk or dirty == 0:
            outcomes = [close(lg) for lg in logs]  # CPU only: threads would not overlap
        elif per_dir <= 1 or dirty == 1:
            outcomes = [close(lg, plan is not None) for lg, plan in zip(logs, plans)]
        else:
            with ThreadPoolExecutor(min(per_dir, dirty), thread_name_prefix="log-shutdown") as pool:
                futures = [pool.submit(close, lg, True) if plan is not None else None
                           for lg, plan in zip(logs, plans)]
                outcomes = [close(lg) if f is None else f.result()
                            for lg, f in zip(logs, futures)]
        if bulk and not any(e is not None for e, _ in outcomes):
            try:
                sync_filesystem(directory)
            except OSError as e:
                return [(e, None)] * len(logs)
            for lg, plan in zip(logs, plans):
                if plan is not None:
                    try:
                        lg.finish_flush(plan, [])
                    except KafkaError as e:
                        return [(e, None)] * len(logs)
        return outcomes


#: the offset checkpoints the log manager writes periodically, and what each holds of a log
_CHECKPOINTS = (
    (checkpoint.RECOVERY_POINT_CHECKPOINT, lambda lg: lg.recovery_point),
    (checkpoint.LOG_START_OFFSET_CHECKPOINT, lambda lg: lg.log_start_offset),
    (checkpoint.REPLICATION_OFFSET_CHECKPOINT, lambda lg: lg.high_watermark),
)


#: which of :func:`~kafkatw.storage.log.summary_offsets`' values each checkpoint holds
_CHECKPOINT_FIELDS = {checkpoint.RECOVERY_POINT_CHECKPOINT: 1,
                      checkpoint.LOG_START_OFFSET_CHECKPOINT: 0,
                      checkpoint.REPLICATION_OFFSET_CHECKPOINT: 2}


def _unopened_offsets(unopened, field, dirs):
    """{dir: {tp: offset}} of the unopened logs (``[(tp, (dir, LogSummary))]``) in ``dirs``,
    ``field`` of :func:`~kafkatw.storage.log.summary_offsets` (any thread)."""
    out = {}
    for tp, (d, summ) in unopened:
        if d in dirs:
            values = out.get(d)
            if values is None:
                values = out[d] = {}
            values[tp] = summary_offsets(summ)[field]
    return out


def sync_filesystem(directory):
    """Write back every dirty page of the filesystem holding ``directory`` (Linux's
    ``syncfs``, which reports write-back errors since 5.8; ``sync`` where there is none)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        if _syncfs is None:
            os.sync()
        elif _syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), directory)
    finally:
        os.close(fd)


def _load_syncfs():
    try:
        return ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None


_syncfs = _load_syncfs()


def _rmtree(path):
    import shutil
    shutil.rmtree(path, ignore_errors=True)
