"""Moving a replica between this broker's log dirs (AlterReplicaLogDirs; Kafka's future logs
and ReplicaAlterLogDirsManager): the batches of the current log are copied into a future log
in the destination dir, slice by slice on the reactor (appends keep landing meanwhile), and
once it has caught up the future log replaces the current one in the same reactor turn.

It owns the moves in progress; the logs' files are the log manager's, the partition and
producer state the replica manager's.
"""

from twisted.internet import task
from twisted.logger import Logger

from kafkatw.protocol import errors, records
from kafkatw.protocol.errors import KafkaError
from kafkatw.protocol.records import LOG_OVERHEAD, iter_batch_headers
from kafkatw.storage.offsets import FetchIsolation
from kafkatw.storage.producer_state import ProducerStateManager

log = Logger()

#: bytes copied per step (one read and one append on the reactor)
CHUNK_BYTES = 1 << 20


class _Move:
    __slots__ = ("source", "future", "task", "aborted_txns")

    def __init__(self, source, future):
        self.source = source
        self.future = future
        self.task = None
        # the future's own producer state, only to rebuild its aborted-transaction index
        self.aborted_txns = ProducerStateManager(future.dir)


class LogDirMover:
    """``replica_manager`` is the ReplicaManager (its log manager, partitions and producer
    states); ``scheduler(step)`` runs a cooperator step later (the reactor's callLater(0))."""

    def __init__(self, replica_manager, scheduler):
        self.rm = replica_manager
        self.moves = {}  # (topic, partition) -> _Move
        self._cooperator = task.Cooperator(scheduler=scheduler)

    @property
    def lm(self):
        return self.rm.log_manager

    def future_logs(self):
        """``[(current log, future log)]`` of the moves in progress (DescribeLogDirs)."""
        return [(m.source, m.future) for m in self.moves.values()]

    def alter(self, topic, partition, directory):
        """Start moving the replica to ``directory`` (or, if it is there, stop a move); an
        error code as Kafka's alterReplicaLogDirs answers."""
        lm = self.lm
        if directory not in lm.log_dirs:
            return errors.LOG_DIR_NOT_FOUND
        if directory in lm.offline_dirs:
            return errors.KAFKA_STORAGE_ERROR
        tp = (topic, partition)
        current = lm.get_log(topic, partition)
        if current is None or current.is_offline:
            return errors.REPLICA_NOT_AVAILABLE if current is None else errors.KAFKA_STORAGE_ERROR
        move = self.moves.get(tp)
        if move is not None:
            if lm.dir_of(move.future) == directory:
                return errors.NONE
            self._abandon(tp, "another destination was asked for")
        if lm.dir_of(current) == directory:
            return errors.NONE
        try:
            future = lm.create_future_log(topic, partition, directory)
        except KafkaError as e:
            return e.code
        move = self.moves[tp] = _Move(current, future)
        log.info("moving {t}-{p} from {src} to {dst}", t=topic, p=partition, src=lm.dir_of(current),
                 dst=directory)
        move.task = self._cooperator.cooperate(self._steps(tp, move))
        move.task.whenDone().addErrback(self._failed, tp, move)
        return errors.NONE

    def _abandon(self, tp, why):
        move = self.moves.pop(tp, None)
        if move is None:
            return
        log.info("move of {t}-{p} abandoned: {why}", t=tp[0], p=tp[1], why=why)
        if move.task is not None:
            try:
                move.task.stop()
            except (task.TaskDone, task.TaskStopped, task.TaskFailed):
                pass
        self.lm.delete_future_log(move.future)

    def _failed(self, failure, tp, move):
        if failure.check(task.TaskStopped):
            return None
        log.failure("moving {t}-{p} failed", failure, t=tp[0], p=tp[1])
        if self.moves.get(tp) is move:
            self._abandon(tp, failure.getErrorMessage())
        return None

    def _steps(self, tp, move):
        future = move.future
        while True:
            current = self.lm.get_log(*tp)
            if current is not move.source or current.is_offline or future.is_offline:
                self._abandon(tp, "the replica was deleted or went offline")
                return
            if current.log_start_offset > future.log_end_offset:
                future.truncate_fully_and_start_at(current.log_start_offset)
            elif current.log_start_offset > future.log_start_offset:
                future.maybe_increment_log_start_offset(current.log_start_offset)
            if future.log_end_offset >= current.log_end_offset:
                self._swap(tp, move)
                return
            self._copy_chunk(current, future, move)
            yield

    def _copy_chunk(self, current, future, move):
        info = current.read(future.log_end_offset, CHUNK_BYTES, FetchIsolation.LOG_END, True)
        found = info.records
        data = found.read() if hasattr(found, "read") else bytes(found or b"")
        headers = list(iter_batch_headers(data, allow_partial_tail=True))
        if not headers:
            raise KafkaError(errors.UNKNOWN_SERVER_ERROR, "nothing readable at offset %d of %s-%d"
                             % (future.log_end_offset, current.topic, current.partition))
        last_pos, last = headers[-1]
        data = memoryview(data)[:last_pos + last.batch_length + LOG_OVERHEAD]  # whole batches only
        future.append_as_follower(data, headers)
        ps = move.aborted_txns
        for pos, h in headers:
            if h.is_control and h.producer_id >= 0:
                _, recs = records.decode_batch(data, pos, verify=False)
                marker = records.decode_control_record(recs[0])
                completed = ps.update(h, h.base_offset, h.last_offset, h.max_timestamp, marker.is_abort,
                                      marker.coordinator_epoch)
                if completed is not None and completed.is_aborted:
                    future.append_aborted_txn(completed.producer_id, completed.first_offset, completed.last_offset,
                                              ps.last_stable_offset(completed))
            elif h.producer_id >= 0:
                ps.update(h, h.base_offset, h.last_offset, h.max_timestamp)

    def _swap(self, tp, move):
        """The future log caught up in this reactor turn: it becomes the partition's log."""
        del self.moves[tp]
        rm = self.rm
        future = self.lm.replace_current_with_future(tp[0], tp[1], move.future)
        part = rm._partitions.get(tp)
        if part is not None:
            part.log = future
        rm.log_moved(tp, move.source, future)
        log.info("moved {t}-{p} to {dst}", t=tp[0], p=tp[1], dst=self.lm.dir_of(future))

    def shutdown(self):
        for tp in list(self.moves):
            self._abandon(tp, "shutting down")

