"""kafkatw.server.partition on its own, on task.Clock with a real log: the followers' caught-up
times, the HW over the (maximal) ISR and under min.insync.replicas, ISR shrink and expand
proposals and what the controller's answers do to them, the acks=all check."""

from twisted.internet import defer, task
from twisted.trial import unittest

from kafkatw.protocol import errors, messages
from kafkatw.protocol.errors import KafkaError
from kafkatw.protocol.records import Record, build_batch
from kafkatw.server.alter_partition import LeaderAndIsr
from kafkatw.server.partition import Partition, Replica
from kafkatw.storage.config import LogConfig
from kafkatw.storage.log import UnifiedLog

State = messages.LeaderAndIsrRequest.LeaderAndIsrPartitionState


class Proposals:
    """An IAlterPartitionManager that keeps each proposal for the test to answer."""

    def __init__(self):
        self.sent = []  # (new_isr, partition_epoch, Deferred)

    def submit(self, topic, partition, topic_id, leader_epoch, new_isr, partition_epoch,
               leader_recovery_state=0):
        d = defer.Deferred()
        self.sent.append((list(new_isr), partition_epoch, d))
        return d


class PartitionTests(unittest.TestCase):

    def setUp(self):
        self.clock = task.Clock()
        self.log = UnifiedLog(self.mktemp(), LogConfig.from_props({}, {"min.insync.replicas": "2"}),
                              "t", 0, clock=lambda: int(self.clock.seconds() * 1000))
        self.addCleanup(self.log.close)
        self.proposals = Proposals()
        self.moved = []
        self.p = Partition("t", 0, 1, lambda: int(self.clock.seconds() * 1000), self.proposals,
                           on_high_watermark=self.moved.append)

    def lead(self, isr=(1, 2, 3), epoch=0, partition_epoch=0):
        return self.p.make_leader(State(topic_name="t", partition_index=0, controller_epoch=1,
                                        leader=1, leader_epoch=epoch, isr=list(isr),
                                        partition_epoch=partition_epoch, replicas=[1, 2, 3]),
                                  self.log)

    def append(self, n):
        buf = bytearray(build_batch([Record(value=b"v") for _ in range(n)],
                                    base_timestamp=int(self.clock.seconds() * 1000)))
        self.log.append_as_leader(buf, self.p.leader_epoch)
        self.p.maybe_increment_leader_hw()

    def test_replica_caught_up_times(self):
        r = Replica(2)
        r.update_fetch_state(5, 0, 10, 1000)  # behind: not caught up by this fetch
        self.assertEqual(r.last_caught_up_time_ms, 0)
        r.update_fetch_state(10, 0, 12, 2000)  # reached what the leader had at 1000
        self.assertEqual(r.last_caught_up_time_ms, 1000)
        r.update_fetch_state(12, 0, 12, 3000)  # at the leader's end now
        self.assertEqual(r.last_caught_up_time_ms, 3000)
        self.assertTrue(r.is_caught_up(12, 99999, 10))  # same end: in sync however old
        self.assertFalse(r.is_caught_up(13, 3011, 10))
        self.assertTrue(r.is_caught_up(13, 3010, 10))

    def test_new_epoch_starts_at_the_log_end_in_the_epoch_cache(self):
        self.lead(epoch=0)
        self.append(3)
        self.assertTrue(self.lead(epoch=4, partition_epoch=1))
        self.assertEqual(self.log.leader_epoch_cache.entries(), [(0, 0), (4, 3)])
        self.assertEqual(self.p.leader_epoch_start_offset, 3)

    def test_hw_is_the_least_log_end_over_the_isr(self):
        self.lead()
        self.append(5)
        self.assertEqual(self.log.high_watermark, 0)
        self.p.update_follower_fetch_state(2, 5, 0)
        self.assertEqual(self.log.high_watermark, 0)  # 3 has not fetched
        self.p.update_follower_fetch_state(3, 3, 0)
        self.assertEqual(self.log.high_watermark, 3)
        self.p.update_follower_fetch_state(3, 5, 0)
        self.assertEqual(self.log.high_watermark, 5)
        self.assertEqual(len(self.moved), 2)
        self.assertFalse(self.p.update_follower_fetch_state(9, 5, 0))  # no replica of ours

    def test_hw_does_not_pass_a_caught_up_replica_about_to_join(self):
        self.lead(isr=(1, 2))
        self.append(4)
        self.p.update_follower_fetch_state(3, 4, 0)  # at the end: caught up, proposed to join
        self.assertEqual(self.proposals.sent[0][0], [1, 2, 3])
        self.proposals.sent[0][2].errback(KafkaError(errors.OPERATION_NOT_ATTEMPTED))
        self.append(2)
        self.p.update_follower_fetch_state(2, 6, 0)
        self.assertEqual(self.log.high_watermark, 4)  # 3, caught up within the lag, is at 4
        self.clock.advance(31)  # 3 no longer caught up: it stops holding the HW
        self.append(1)  # (the next append or ISR member's fetch looks again)
        self.p.update_follower_fetch_state(2, 7, 0)
        self.assertEqual(self.log.high_watermark, 7)

    def test_hw_stays_while_the_isr_is_under_min_isr(self):
        self.lead(isr=(1,))
        self.append(2)
        self.assertEqual(self.log.high_watermark, 0)
        self.assertEqual(self.p.check_enough_replicas_reach_offset(2), (False, errors.NONE))

    def test_expansion_counts_the_joining_replica_at_once(self):
        self.lead(isr=(1, 2))
        self.append(4)
        self.p.update_follower_fetch_state(2, 4, 0)
        self.assertEqual(self.log.high_watermark, 4)
        self.append(2)
        self.p.update_follower_fetch_state(3, 4, 0)  # reached the HW: proposed into the ISR
        self.assertEqual(self.proposals.sent[0][:2], ([1, 2, 3], 0))
        self.assertEqual(self.p.maximal_isr, (1, 2, 3))
        self.p.update_follower_fetch_state(2, 6, 0)
        self.assertEqual(self.log.high_watermark, 4)  # 3 counts already: it is at 4
        self.proposals.sent[0][2].callback(LeaderAndIsr(1, 0, [1, 2, 3], 1))
        self.assertEqual((self.p.isr, self.p.partition_epoch, self.p.pending), ((1, 2, 3), 1, None))

    def test_shrink_then_the_controller_refuses(self):
        self.lead()
        self.append(1)
        self.clock.advance(31)
        self.assertTrue(self.p.maybe_shrink_isr())
        self.assertEqual(self.proposals.sent[0][:2], ([1], 0))
        self.assertFalse(self.p.maybe_shrink_isr())  # one change at a time
        self.proposals.sent[0][2].errback(KafkaError(errors.INVALID_UPDATE_VERSION))
        self.assertEqual(self.p.isr, (1, 2, 3))
        self.assertIsNotNone(self.p.pending)  # stale: wait for LeaderAndIsr
        self.lead(isr=(1, 2, 3), epoch=1, partition_epoch=3)
        self.assertIsNone(self.p.pending)

    def test_shrink_not_attempted_is_proposed_again(self):
        self.lead()
        self.append(1)
        self.clock.advance(31)
        self.p.maybe_shrink_isr()
        self.proposals.sent[0][2].errback(KafkaError(errors.OPERATION_NOT_ATTEMPTED))
        self.assertIsNone(self.p.pending)
        self.assertTrue(self.p.maybe_shrink_isr())

    def test_acks_all_after_append_with_a_shrunk_isr(self):
        self.lead(isr=(1, 2))
        self.append(1)
        self.p.update_follower_fetch_state(2, 1, 0)
        self.assertEqual(self.p.check_enough_replicas_reach_offset(1), (True, errors.NONE))
        self.p.isr = (1,)
        self.assertEqual(self.p.check_enough_replicas_reach_offset(1),
                         (True, errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND))
        self.p.make_follower(State(topic_name="t", partition_index=0, controller_epoch=1, leader=2,
                                   leader_epoch=1, isr=[2], partition_epoch=2, replicas=[1, 2, 3]),
                             self.log)
        self.assertEqual(self.p.check_enough_replicas_reach_offset(1),
                         (True, errors.NOT_LEADER_OR_FOLLOWER))
