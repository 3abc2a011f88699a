"""The fetch path against a real broker process: seed 000's example 1 and incremental fetch sessions.

Long polling (fetch.min.bytes / fetch.max.wait.ms) timed with raw sockets and a real
consumer, a waiting consumer woken by a produce, the request log's session id/epoch moving
(0,0) -> (id,1) -> ... -> (id,-1), and a 1,000-partition session whose incremental requests
and responses shrink to the changed partitions (bytes measured on the wire).
"""

import threading
import time

from twisted.trial import unittest

from kafkatw.testing import KafkaBrokerMixin
from tests.support import (
    FETCH,
    FETCH_V,
    RawClient,
    create_topic,
    fetch_body,
    fetched_records,
    poll_until,
    produce,
    request_log,
    tmp_path,
    unique_name,
)

REQUEST_LOG = tmp_path("fetch-request.log")


def timed_request(client, api_key, version, body):
    t0 = time.monotonic()
    resp = client.request(api_key, version, body)
    return resp, time.monotonic() - t0


class LongPollTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    broker_overrides = {"kafkatw.request.log.enable": "true", "kafkatw.request.log.file": REQUEST_LOG}

    def ten_records(self):
        topic = create_topic(self.broker, unique_name("u08"))
        c = RawClient(self.broker, "u08-producer")
        for i in range(10):
            produce(c, topic, 0, [b"record-%d" % i])
        c.close()
        return topic

    def test_a_data_present_answers_at_once(self):
        topic = self.ten_records()
        c = RawClient(self.broker, "u08-a")
        self.addCleanup(c.close)
        resp, took = timed_request(c, FETCH, FETCH_V, fetch_body([(topic, 0, 0)], max_wait_ms=500, min_bytes=1))
        got = fetched_records(resp.responses[0].partitions[0])
        print("\n  a) 10 records after %.1f ms" % (took * 1000))
        self.assertEqual([v for _, _, v in got], [b"record-%d" % i for i in range(10)])
        self.assertLess(took, 0.4)

    def test_b_min_bytes_not_reached_answers_after_max_wait_with_what_is_there(self):
        from confluent_kafka import Consumer, TopicPartition

        topic = self.ten_records()
        # a raw fetch: exactly one request, timed on the wire
        c = RawClient(self.broker, "u08-b-raw")
        self.addCleanup(c.close)
        resp, took = timed_request(c, FETCH, FETCH_V, fetch_body(
            [(topic, 0, 0)], max_wait_ms=3000, min_bytes=1024 * 1024))
        got = fetched_records(resp.responses[0].partitions[0])
        print("\n  b) raw fetch: %d records after %.0f ms" % (len(got), took * 1000))
        self.assertEqual(len(got), 10)
        self.assertTrue(2.5 < took < 4.5, took)
        # the same with a real consumer (kafka-python: assign + seek, no group, as the seed's)
        consumer = self.consumer("u08-b", fetch_min_bytes=1024 * 1024, fetch_max_wait_ms=3000)
        tp = self.assign(consumer, topic, 0)
        t0 = time.monotonic()
        msgs = []
        while not msgs and time.monotonic() - t0 < 20:
            msgs = consumer.poll(timeout_ms=100).get(tp, [])
        took = time.monotonic() - t0
        print("  b) kafka-python consumer: %d records after %.0f ms" % (len(msgs), took * 1000))
        self.assertEqual([m.value for m in msgs], [b"record-%d" % i for i in range(10)])
        self.assertTrue(2.5 < took < 4.5, took)

    def consumer(self, client_id, **kw):
        from kafka import KafkaConsumer

        c = KafkaConsumer(bootstrap_servers=self.broker.bootstrap_servers, client_id=client_id,
                          group_id=None, enable_auto_commit=False, **kw)
        self.addCleanup(c.close)
        return c

    def assign(self, consumer, topic, offset):
        from kafka import TopicPartition

        consumer.partitions_for_topic(topic)  # metadata outside the timing, as the seed does
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, offset)
        return tp

    def test_c_waiting_consumer_is_woken_by_a_produce(self):
        topic = self.ten_records()
        consumer = self.consumer("u08-c", fetch_min_bytes=1, fetch_max_wait_ms=10000)
        tp = self.assign(consumer, topic, 10)  # at the log end
        sent = {}

        def produce_later():
            p = RawClient(self.broker, "u08-c-producer")
            sent["at"] = time.monotonic()
            produce(p, topic, 0, [b"late"])
            sent["acked"] = time.monotonic()
            p.close()

        timer = threading.Timer(1.5, produce_later)
        timer.start()
        self.addCleanup(timer.cancel)
        t0 = time.monotonic()
        msgs = []
        while not msgs and time.monotonic() - t0 < 20:
            msgs = consumer.poll(timeout_ms=20).get(tp, [])
        got_at = time.monotonic()
        poll_until(lambda: "acked" in sent, 10, message="the produce answer")
        self.assertEqual([(m.offset, m.value) for m in msgs], [(10, b"late")])
        lag = got_at - sent["at"]
        print("\n  c) record produced %.2f s into the wait: produce acked after %.1f ms, "
              "the consumer had it %.1f ms after the produce was sent"
              % (sent["at"] - t0, (sent["acked"] - sent["at"]) * 1000, lag * 1000))
        self.assertGreater(sent["at"] - t0, 1.4)
        self.assertLess(lag, 0.3)

    def test_session_id_and_epoch_in_the_request_log(self):
        """(0,0) creates a session, (id,1), (id,2) continue, (id,-1) closes it (seed 000 §5)."""
        topic = self.ten_records()
        c = RawClient(self.broker, "u08-session")
        self.addCleanup(c.close)
        full = c.request(FETCH, FETCH_V, fetch_body([(topic, 0, 0)], epoch=0, session_id=0))
        sid = full.session_id
        self.assertGreater(sid, 0)
        self.assertEqual(len(fetched_records(full.responses[0].partitions[0])), 10)
        r1 = c.request(FETCH, FETCH_V, fetch_body([(topic, 0, 10)], session_id=sid, epoch=1, max_wait_ms=200))
        self.assertEqual((r1.error_code, r1.session_id, r1.responses), (0, sid, []))
        r2 = c.request(FETCH, FETCH_V, fetch_body([], session_id=sid, epoch=2, max_wait_ms=100))
        self.assertEqual((r2.error_code, r2.session_id, r2.responses), (0, sid, []))
        r3 = c.request(FETCH, FETCH_V, fetch_body([], session_id=sid, epoch=-1))
        self.assertEqual((r3.error_code, r3.session_id), (0, 0))
        # the closed session is gone
        r4 = c.request(FETCH, FETCH_V, fetch_body([], session_id=sid, epoch=3))
        self.assertEqual(r4.error_code, 70)  # FETCH_SESSION_ID_NOT_FOUND

        def lines():
            found = [e for e in request_log(REQUEST_LOG)
                     if e["requestHeader"]["clientId"] == "u08-session"]
            return found if len(found) == 5 else None

        entries = poll_until(lines, 5, message="5 request log lines")
        table = [((e["request"]["sessionId"], e["request"]["sessionEpoch"]),
                  e["response"]["sessionId"], e["response"]["partitions"]) for e in entries]
        for row in table:
            print("  ", row)
        self.assertEqual(table, [
            ((0, 0), sid, 1),
            ((sid, 1), sid, 0),
            ((sid, 2), sid, 0),
            ((sid, -1), 0, 0),
            ((sid, 3), 0, 0),  # FETCH_SESSION_ID_NOT_FOUND answers with session id 0
        ])
        self.assertEqual(entries[-1]["response"]["errorCode"], 70)
        self.assertTrue(150 <= entries[1]["remoteTimeMs"] <= 1000, entries[1])


class ThousandPartitionSessionTests(KafkaBrokerMixin, unittest.SynchronousTestCase):
    def test_incremental_fetch_carries_only_changed_partitions(self):
        n = 1000
        topic = create_topic(self.broker, unique_name("wide"), partitions=n)
        producer = RawClient(self.broker, "wide-producer")
        self.addCleanup(producer.close)
        seeded = [3, 141, 592, 653, 999]
        for p in seeded:
            produce(producer, topic, p, [b"p%d-%d" % (p, i) for i in range(3)])
        c = RawClient(self.broker, "wide-consumer")
        self.addCleanup(c.close)
        offsets = {p: 0 for p in range(n)}

        def exchange(partitions, epoch, session_id, **kw):
            sent, received = c.bytes_sent, c.bytes_received
            resp = c.request(FETCH, FETCH_V, fetch_body(partitions, session_id=session_id, epoch=epoch, **kw))
            return resp, c.bytes_sent - sent, c.bytes_received - received

        full, full_req, full_resp = exchange([(topic, p, 0) for p in range(n)], 0, 0)
        sid = full.session_id
        self.assertGreater(sid, 0)
        parts = {p.partition_index: p for t in full.responses for p in t.partitions}
        self.assertEqual(len(parts), n)
        for p in seeded:
            got = fetched_records(parts[p])
            self.assertEqual([v for _, _, v in got], [b"p%d-%d" % (p, i) for i in range(3)])
            offsets[p] = 3
        self.assertTrue(all(parts[p].high_watermark == 0 for p in range(n) if p not in seeded))

        # epoch 1: only the five partitions whose fetch offset moved are in the request;
        # nothing new, so the response lists no partition at all
        inc1, inc1_req, inc1_resp = exchange([(topic, p, 3) for p in seeded], 1, sid)
        self.assertEqual((inc1.error_code, inc1.session_id, inc1.responses), (0, sid, []))
        # epoch 2: nothing changed: empty request, empty response
        inc2, inc2_req, inc2_resp = exchange([], 2, sid)
        self.assertEqual((inc2.error_code, inc2.responses), (0, []))

        changed = [7, 141, 888]
        for p in changed:
            produce(producer, topic, p, [b"new-%d" % p])
        inc3, inc3_req, inc3_resp = exchange([], 3, sid)
        got = {p.partition_index: fetched_records(p) for t in inc3.responses for p in t.partitions}
        self.assertEqual(sorted(got), changed)
        self.assertEqual(got[7], [(0, None, b"new-7")])
        self.assertEqual(got[141], [(3, None, b"new-141")])
        self.assertEqual(got[888], [(0, None, b"new-888")])
        print("\n  1,000 partitions: full fetch request %d B, response %d B; incremental (5 moved) "
              "%d B / %d B; incremental (no change) %d B / %d B; incremental (3 new records) %d B / %d B"
              % (full_req, full_resp, inc1_req, inc1_resp, inc2_req, inc2_resp, inc3_req, inc3_resp))
        self.assertGreater(full_req, 20 * n)
        self.assertGreater(full_resp, 30 * n)
        self.assertLess(inc2_req, 100)
        self.assertLess(inc2_resp, 60)
        self.assertLess(inc1_resp, 60)
        self.assertLess(inc3_resp, 600)
