"""Replication throttles on the in-process three-broker replication harness (task.Clock):
with the follower's (or the leader's) quota used up, an out-of-sync replica of a throttled
partition is fed at no more than the rate, while an unthrottled partition replicates at once;
a rate lifted lets the throttled one catch up. Kafka's ReplicationQuotaManager semantics."""

from tests.test_replication import TOPIC, ReplicationTestBase

KIB = 1024


class ReplicationThrottleTests(ReplicationTestBase):
    def setUp(self):
        super().setUp()
        # partition 0: broker 3 is a new replica, told once there is data (so it cannot join
        # the ISR at once); partition 1: all in sync
        self.elect(1, [1, 2], replicas=(1, 2, 3), partition=0, to=(1, 2))
        self.elect(1, [1, 2, 3], replicas=(1, 2, 3), partition=1)
        self.pump(0.1)

    def throttle(self, broker, side, replicas, rate):
        node = self.nodes[broker]
        self.successResultOf(node.metadata.alter_topic_configs(
            TOPIC, {"%s.replication.throttled.replicas" % side: replicas}))
        getattr(node.rm, "%s_quota" % side).update_quota(rate)

    def fill(self, partition, kib):
        """``kib`` KiB in 16 KiB values, acks=1 at the leader."""
        for i in range(kib // 16):
            self.successResultOf(self.produce(1, [b"%d-" % i + b"x" * (16 * KIB - 8)], acks=1, partition=partition))

    def log_end(self, broker, partition):
        return self.nodes[broker].log(partition).log_end_offset

    def check_throttled(self):
        self.fill(0, 3 * 1024)
        self.fill(1, 3 * 1024)
        end = self.log_end(1, 0)
        self.pump(0.5)
        self.send_leader_and_isr((TOPIC, 0), to=(3,))
        self.pump(2.0)
        self.assertEqual(list(self.nodes[1].rm.get_partition(TOPIC, 0).isr), [1, 2])
        # the unthrottled partition and the in-sync follower flow
        self.assertEqual(self.log_end(3, 1), self.log_end(1, 1))
        self.assertEqual(self.log_end(2, 0), end)
        # the throttled one: one fetch (at most replica.fetch.max.bytes, 1 MiB) and then the
        # rate (100 KiB/s) for 2 s: well short of 3 MiB
        copied = self.log_end(3, 0)
        self.assertGreater(copied, 0)
        self.assertLess(copied, (1024 + 2 * 100 + 16 * 2) // 16)
        # the first fetch left the bucket 1 MiB short: ten seconds at the rate before the next
        self.pump(12.0)
        later = self.log_end(3, 0)
        self.assertGreater(later, copied)
        self.assertLessEqual(later - copied, (12 * 100 + 1024) // 16 + 1)
        return end

    def test_follower_side(self):
        self.throttle(3, "follower", "0:3", 100 * KIB)
        end = self.check_throttled()
        self.nodes[3].rm.follower_quota.update_quota(2 ** 63 - 1)
        self.pump_until(lambda: self.log_end(3, 0) == end, 10.0)

    def test_leader_side(self):
        self.throttle(1, "leader", "0:1,1:1", 100 * KIB)
        end = self.check_throttled()
        self.nodes[1].rm.leader_quota.update_quota(2 ** 63 - 1)
        self.pump_until(lambda: self.log_end(3, 0) == end, 10.0)

    def test_a_replica_in_the_isr_is_never_throttled(self):
        self.throttle(3, "follower", "*", 100 * KIB)
        self.throttle(1, "leader", "*", 100 * KIB)
        self.fill(1, 2 * 1024)
        self.pump(1.0)
        self.assertEqual(self.log_end(3, 1), self.log_end(1, 1))
