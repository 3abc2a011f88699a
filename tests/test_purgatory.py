"""Tests for kafkatw.purgatory: exactly-once completion, expiry, wake by key, purge."""

from twisted.internet import task
from twisted.trial import unittest

from kafkatw.purgatory import (
    DelayedOperation,
    DelayedOperationPurgatory,
    TopicPartitionOperationKey,
)


class MockOp(DelayedOperation):
    def __init__(self, delay_ms, ready=False):
        super().__init__(delay_ms)
        self.ready = ready
        self.completions = 0
        self.expirations = 0
        self.tries = 0

    def try_complete(self):
        self.tries += 1
        if self.ready:
            return self.force_complete()
        return False

    def on_complete(self):
        self.completions += 1
        return "done-%d" % self.completions

    def on_expiration(self):
        self.expirations += 1


K1 = TopicPartitionOperationKey("t", 0)
K2 = TopicPartitionOperationKey("t", 1)


class PurgatoryTests(unittest.SynchronousTestCase):
    def setUp(self):
        self.clock = task.Clock()
        self.p = DelayedOperationPurgatory("Fetch", self.clock, purge_interval_requests=1000)

    def result(self, op):
        """The outcome a listener of a completed ``op`` gets, at once."""
        got = []
        op.when_complete(got.append, got.append)
        self.assertEqual(len(got), 1)
        return got[0]

    def test_completes_immediately_without_watching(self):
        op = MockOp(500, ready=True)
        self.assertTrue(self.p.try_complete_else_watch(op, [K1]))
        self.assertEqual(self.result(op), "done-1")
        self.assertEqual(self.p.watched(), 0)
        self.assertEqual(self.p.num_delayed(), 0)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_watch_then_check_and_complete(self):
        op = MockOp(500)
        self.assertFalse(self.p.watch_lists)
        self.assertFalse(self.p.try_complete_else_watch(op, [K1, K2]))
        self.assertFalse(op.is_completed)
        self.assertEqual(self.p.watched(), 2)
        self.assertTrue(self.p.watch_lists)
        self.assertEqual(self.p.num_delayed(), 1)
        self.assertEqual(self.p.check_and_complete(K1), 0)
        op.ready = True
        self.assertEqual(self.p.check_and_complete(K1), 1)
        self.assertEqual(self.result(op), "done-1")
        # the timer is cancelled and K1's list pruned; K2 keeps a stale entry
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(self.p.num_delayed(), 0)
        self.assertEqual(self.p.watched(), 1)
        self.assertTrue(self.p.watch_lists)  # a stale entry still counts until its key is checked
        self.assertEqual(self.p.check_and_complete(K2), 0)
        self.assertEqual(self.p.watched(), 0)
        self.assertFalse(self.p.watch_lists)
        self.assertEqual(op.completions, 1)
        self.assertEqual(op.expirations, 0)

    def test_check_unknown_key(self):
        self.assertEqual(self.p.check_and_complete(K1), 0)

    def test_expiry_completes_once(self):
        op = MockOp(300)
        self.p.try_complete_else_watch(op, [K1])
        self.clock.advance(0.299)
        self.assertFalse(op.is_completed)
        self.clock.advance(0.001)
        self.assertEqual(self.result(op), "done-1")
        self.assertEqual((op.completions, op.expirations), (1, 1))
        self.assertEqual(self.p.num_delayed(), 0)
        # stale watch entry until next check
        self.assertEqual(self.p.watched(), 1)
        op.ready = True
        self.assertEqual(self.p.check_and_complete(K1), 0)
        self.assertEqual(op.completions, 1)
        self.assertEqual(self.p.watched(), 0)

    def test_force_complete_exactly_once(self):
        op = MockOp(100)
        self.assertTrue(op.force_complete())
        self.assertFalse(op.force_complete())
        self.assertEqual(op.completions, 1)

    def test_zero_delay_expires_on_next_tick(self):
        op = MockOp(0)
        self.p.try_complete_else_watch(op, [K1])
        self.assertFalse(op.is_completed)
        self.clock.advance(0)
        self.assertEqual(self.result(op), "done-1")

    def test_on_complete_error_goes_to_errback(self):
        class Boom(MockOp):
            def on_complete(self):
                raise ValueError("x")

        op = Boom(100, ready=True)
        self.p.try_complete_else_watch(op, [K1])
        self.assertEqual(self.result(op).type, ValueError)
        # nobody listened when it completed: the failure was logged there
        self.assertEqual(len(self.flushLoggedErrors(ValueError)), 1)

    def test_cancel_stops_timer_and_never_completes(self):
        op = MockOp(100)
        got = []
        op.when_complete(got.append, got.append)
        self.p.try_complete_else_watch(op, [K1])
        op.cancel()
        self.assertTrue(op.is_completed)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(self.p.num_delayed(), 0)
        op.ready = True
        self.assertEqual(self.p.check_and_complete(K1), 0)
        self.assertEqual((op.completions, got), (0, []))

    def test_reentrant_watch_during_check(self):
        """Completing an op may (synchronously) park a new op on the same key."""
        new_ops = []

        class Chain(MockOp):
            def on_complete(inner):
                nxt = MockOp(100)
                new_ops.append(nxt)
                self.p.try_complete_else_watch(nxt, [K1])
                return "chained"

        op = Chain(100)
        self.p.try_complete_else_watch(op, [K1])
        op.ready = True
        self.assertEqual(self.p.check_and_complete(K1), 1)
        self.assertEqual(self.result(op), "chained")
        self.assertEqual(self.p.watched(), 1)
        new_ops[0].ready = True
        self.assertEqual(self.p.check_and_complete(K1), 1)

    def test_many_ops_one_key_all_complete(self):
        ops = [MockOp(1000) for _ in range(5)]
        for op in ops:
            self.p.try_complete_else_watch(op, [K1])
        self.assertEqual(self.p.num_delayed(), 5)
        for op in ops[:3]:
            op.ready = True
        self.assertEqual(self.p.check_and_complete(K1), 3)
        self.assertEqual(self.p.watched(), 2)
        self.assertEqual(self.p.num_delayed(), 2)
        self.clock.advance(1)
        self.assertEqual([o.expirations for o in ops], [0, 0, 0, 1, 1])

    def test_purge_after_interval(self):
        p = DelayedOperationPurgatory("Fetch", self.clock, purge_interval_requests=3)
        # expire ops watched under two keys, leaving stale entries under K2
        for _ in range(3):
            op = MockOp(10)
            p.try_complete_else_watch(op, [K1, K2])
            self.clock.advance(0.01)
        self.assertEqual(p.watched(), 6)
        # next watch: estimated (4) - delayed (1) = 3, not > 3 -> no purge yet
        live = MockOp(1000)
        p.try_complete_else_watch(live, [K1])
        self.assertEqual(p.watched(), 7)
        # one more expiry pushes it over: purge leaves only the live op
        op = MockOp(10)
        p.try_complete_else_watch(op, [K2])
        self.clock.advance(0.01)
        self.assertEqual(p.watched(), 1)
        self.assertEqual(p.watched_keys(), [K1])

    def test_purge_completed_explicit(self):
        op = MockOp(10)
        self.p.try_complete_else_watch(op, [K1, K2])
        self.clock.advance(0.01)
        self.assertEqual(self.p.purge_completed(), 2)
        self.assertEqual(self.p.watched(), 0)

    def test_shutdown_cancels_timers(self):
        op = MockOp(1000)
        self.p.try_complete_else_watch(op, [K1])
        self.p.shutdown()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(self.p.num_delayed(), 0)

    def test_one_timer_for_all_operations_each_expiring_at_its_deadline(self):
        # one DelayedCall per purgatory, for the earliest deadline (as Kafka's SystemTimer)
        late, early, mid = MockOp(300), MockOp(100), MockOp(200)
        for op in (late, early, mid):
            self.p.try_complete_else_watch(op, [K1])
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        self.assertEqual(self.p.num_delayed(), 3)
        self.clock.advance(0.0999)
        self.assertEqual(early.expirations, 0)
        self.clock.advance(0.0001)
        self.assertEqual((early.expirations, mid.expirations, late.expirations), (1, 0, 0))
        self.assertEqual(self.p.num_delayed(), 2)
        mid.ready = True  # completed before its deadline: the timer stays for the late one
        self.p.check_and_complete(K1)
        self.assertEqual(mid.expirations, 0)
        self.assertEqual(self.p.num_delayed(), 1)
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        self.clock.advance(0.2)
        self.assertEqual((mid.completions, late.expirations), (1, 1))
        self.assertEqual(self.p.num_delayed(), 0)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_the_last_waiting_operation_completing_disarms_the_timer(self):
        ops = [MockOp(500 + i) for i in range(3)]
        for op in ops:
            self.p.try_complete_else_watch(op, [K1, K2])
        ops[0].force_complete()
        ops[2].cancel()
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        ops[1].force_complete()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(self.p.num_delayed(), 0)
        self.clock.advance(1)
        self.assertEqual([op.expirations for op in ops], [0, 0, 0])

    def test_an_earlier_deadline_rearms_and_an_expiry_may_park_another(self):
        first = MockOp(500)
        self.p.try_complete_else_watch(first, [K1])
        sooner = MockOp(50)
        self.p.try_complete_else_watch(sooner, [K1])
        [call] = self.clock.getDelayedCalls()
        self.assertAlmostEqual(call.getTime(), 0.05)
        parked = []
        sooner.when_complete(lambda _: parked.append(self.p.try_complete_else_watch(MockOp(10), [K2])),
                             lambda f: f)
        self.clock.advance(0.05)
        self.assertEqual((sooner.expirations, first.expirations), (1, 0))
        self.assertEqual(self.p.num_delayed(), 2)
        [call] = self.clock.getDelayedCalls()
        self.assertAlmostEqual(call.getTime(), 0.06)
        self.clock.advance(0.45)
        self.assertEqual(first.expirations, 1)
        self.assertEqual(self.p.num_delayed(), 0)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_early_completions_do_not_grow_the_heap_without_bound(self):
        keep = MockOp(60000)
        self.p.try_complete_else_watch(keep, [K1])
        for _ in range(1000):
            op = MockOp(30000)
            self.p.try_complete_else_watch(op, [K2])
            op.force_complete()
        self.assertLess(len(self.p._deadlines), 100)
        self.assertEqual(self.p.num_delayed(), 1)

    def test_when_complete_without_a_deferred(self):
        op = MockOp(500)
        got = []
        op.when_complete(got.append, lambda f: got.append(("failed", f)))
        self.p.try_complete_else_watch(op, [K1])
        self.assertEqual(got, [])
        op.ready = True
        self.assertEqual(self.p.check_and_complete(K1), 1)
        self.assertEqual(got, ["done-1"])
        self.assertEqual(self.p.num_delayed(), 0)  # left the timed set with its timer
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(self.result(op), "done-1")  # a listener registered later has it too

    def test_when_complete_after_completion_and_on_expiry(self):
        op = MockOp(100, ready=True)
        self.p.try_complete_else_watch(op, [K1])
        got = []
        op.when_complete(got.append, got.append)
        self.assertEqual(got, ["done-1"])
        late = MockOp(100)
        self.p.try_complete_else_watch(late, [K1])
        late.when_complete(got.append, got.append)
        self.clock.advance(0.1)
        self.assertEqual(got, ["done-1", "done-1"])
        self.assertEqual((late.expirations, self.p.num_delayed()), (1, 0))

    def test_when_complete_errback_and_a_raising_listener(self):
        class Boom(MockOp):
            def on_complete(self):
                raise ValueError("x")

        op = Boom(100)
        failures = []
        op.when_complete(lambda r: self.fail("no result"), failures.append)
        self.p.try_complete_else_watch(op, [K1])
        op.ready = True
        self.assertEqual(self.p.check_and_complete(K1), 1)
        self.assertEqual([f.type for f in failures], [ValueError])
        # told to its listener, the failure is not logged as well
        self.assertEqual(self.flushLoggedErrors(ValueError), [])
        # a listener that raises is logged; the completing call goes on
        op2 = MockOp(100, ready=True)
        op2.when_complete(lambda r: 1 / 0, failures.append)
        self.assertTrue(self.p.try_complete_else_watch(op2, [K1]))
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)

    def test_a_listener_reaching_its_operation_is_freed_without_the_cyclic_gc(self):
        # A parked fetch's listener reaches its operation back (channel -> pending answer ->
        # operation); kept after completion, every fetch became cyclic garbage and the
        # collections it triggered stalled the end-to-end path (20-30 ms full collections).
        import gc
        import weakref

        gc.disable()
        self.addCleanup(gc.enable)
        op = MockOp(500)
        got = []
        op.when_complete(lambda r, op=op: got.append((r, op.delay_ms)), got.append)
        self.p.try_complete_else_watch(op, [K1])
        op.ready = True
        self.assertEqual(self.p.check_and_complete(K1), 1)
        self.assertEqual(got, [("done-1", 500)])
        ref = weakref.ref(op)
        del op
        self.assertIsNone(ref())
