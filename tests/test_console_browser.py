"""The web console in a real headless Chromium against a real broker, as a person uses it: create
a topic in the page, produce with confluent-kafka, see the record count and the messages (JSON,
text, hex, headers, from a timestamp), run a kafka-python consumer group and watch its lag fall
to 0 without reloading, reset its offsets in the page and see the lag come back.

One browser and one broker for the class (each test is a chapter of the story and states what
it needs); skipped where Debian's chromium and chromium-driver are missing.
"""

import atexit
import json
import re
import time

from twisted.trial import unittest

from kafkatw.testing import KafkaBrokerMixin
from tests import browser as browser_support

TOPIC = "console-orders"
GROUP = "console-readers"
# records are 1 s apart from here: an hour ago, well inside the default retention (a timestamp
# older than retention.ms would let a retention check delete the records mid-test)
BASE_TS = (int(time.time()) - 3600) * 1000
P0, P1 = 12, 8

_browser = []


def shared_browser():
    if not _browser:
        _browser.append(browser_support.Browser())
        atexit.register(_browser[0].quit)
    return _browser[0]


class ConsoleBrowserTests(KafkaBrokerMixin, unittest.TestCase):
    broker_overrides = {"kafkatw.console.listener": "127.0.0.1:0"}
    timeout = 180

    def setUp(self):
        browser_support.require()
        super().setUp()
        self.b = shared_browser()
        self.url = "http://127.0.0.1:%d/" % self.broker.console_port

    # -- helpers ------------------------------------------------------------------------------
    def go(self, fragment):
        self.b.visit(self.url + "#" + fragment)

    def cell(self, selector, attribute):
        found = self.b.css(selector)
        return found[0].get_attribute(attribute) if found else None

    def submit_dialog(self, **values):
        """Fill the open action dialog, continue, check the confirmation names what it will do,
        confirm, and return the confirmation text and the toast."""
        b = self.b
        b.wait_for(lambda: not b.css("#modal-backdrop")[0].get_attribute("hidden") is not None, what="the dialog")
        for name, value in values.items():
            (field,) = b.css("#f-" + name)
            if field.tag_name == "select":
                from selenium.webdriver.support.ui import Select

                Select(field).select_by_value(value)
            else:
                field.clear()
                field.send_keys(str(value))
        if values:
            b.css("#modal-ok")[0].click()
        confirm = b.wait_for(lambda: b.text("#confirm-text"), what="the confirmation")
        b.css("#modal-ok")[0].click()
        b.wait_for(lambda: b.css("#modal-backdrop")[0].get_attribute("hidden") is not None,
                   what="the action to finish: " + b.text("#modal-error"))
        return confirm, b.text("#toast")

    def ensure_topic(self):
        """The topic exists (made through the page by test_1) and holds the produced records."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap_servers})
        if TOPIC not in admin.list_topics(timeout=10).topics:
            for f in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
                f.result(15)
            self.produce()

    def produce(self):
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.broker.bootstrap_servers, "linger.ms": 0})
        for i in range(P0):
            p.produce(TOPIC, partition=0, key=b"order-%d" % i,
                      value=json.dumps({"order": i, "item": "book"}).encode(), headers=[("source", b"web")])
        for i in range(P1):
            value = b"\x00\x01\xfe" if i == 3 else ("plain text %d" % i).encode()
            p.produce(TOPIC, partition=1, value=value, timestamp=BASE_TS + 1000 * i)
        self.assertEqual(p.flush(30), 0)

    # -- the story ------------------------------------------------------------------------------
    def test_1_create_topic_produce_and_see_count(self):
        self.go("/topics")
        self.b.css("#create-topic")[0].click()
        confirm, toast = self.submit_dialog(topic=TOPIC, partitions=2, configs="max.message.bytes=2000000")
        self.assertEqual(confirm, "Create topic %s with 2 partition(s), replication factor 1?" % TOPIC)
        self.assertEqual(toast, "created topic %s with 2 partitions" % TOPIC)
        row = '#topics-table tr[data-topic="%s"]' % TOPIC
        self.b.wait_for(lambda: self.b.css(row), what="the new topic in the list")
        self.produce()
        # the list refreshes by itself: no reload
        self.b.wait_for(lambda: self.cell(row + " td[data-records]", "data-records") == str(P0 + P1),
                        what="the record count to reach %d" % (P0 + P1))
        self.go("/topics/" + TOPIC)
        ends = {int(tr.get_attribute("data-partition")): int(tr.find_element("css selector", "td[data-end]")
                                                               .get_attribute("data-end"))
                for tr in self.b.css("#partitions-table tbody tr")}
        self.assertEqual(ends, {0: P0, 1: P1})
        override = self.b.css('#configs-table tr[data-config="max.message.bytes"]')[0].text
        self.assertIn("2000000", override)
        self.assertIn("topic", override)  # set on the topic, not a default
        self.assertIn("default", self.b.css('#configs-table tr[data-config="cleanup.policy"]')[0].text)

    def test_2_browse_messages(self):
        self.ensure_topic()
        self.go("/messages/%s?partition=0&offset=10" % TOPIC)
        records = self.b.css("#records .record")
        self.assertEqual([r.get_attribute("data-offset") for r in records], ["10", "11"])
        first = records[0].text
        self.assertIn("order-10", first)
        self.assertIn('"order": 10', first)  # JSON pretty-printed
        self.assertIn("VALUE · JSON", first.upper())
        self.assertIn("web", first)  # the header's value
        self.go("/messages/%s?partition=1" % TOPIC)
        records = self.b.css("#records .record")
        self.assertEqual([r.get_attribute("data-offset") for r in records], [str(i) for i in range(P1)])
        self.assertIn("00 01 fe", records[3].text)  # binary: hex
        self.assertIn("plain text 4", records[4].text)
        # from a timestamp: the first record at or after it
        self.go("/messages/%s?partition=1&timestamp=%d" % (TOPIC, BASE_TS + 5000))
        offsets = [r.get_attribute("data-offset") for r in self.b.css("#records .record")]
        self.assertEqual(offsets, ["5", "6", "7"])

    def consume(self, consumer, n):
        got = 0
        while got < n:
            for records in consumer.poll(timeout_ms=1000, max_records=n - got).values():
                got += len(records)
        consumer.commit()

    def group_lag(self):
        return self.cell('#groups-table tr[data-group="%s"] td[data-lag]' % GROUP, "data-lag")

    def test_3_group_lag_falls_to_zero_then_reset(self):
        from kafka import KafkaConsumer

        self.ensure_topic()
        consumer = KafkaConsumer(TOPIC, bootstrap_servers=self.broker.bootstrap_servers, group_id=GROUP,
                                 auto_offset_reset="earliest", enable_auto_commit=False)
        try:
            self.consume(consumer, 5)
            self.go("/groups")
            self.b.wait_for(lambda: self.group_lag() == str(P0 + P1 - 5), what="a lag of %d" % (P0 + P1 - 5))
            self.assertIn("Stable", self.b.css('#groups-table tr[data-group="%s"]' % GROUP)[0].text)
            self.consume(consumer, P0 + P1 - 5)
            self.b.wait_for(lambda: self.group_lag() == "0", what="the lag to fall to 0 without a reload")
            self.go("/groups/" + GROUP)
            lags = {tr.get_attribute("data-tp"): tr.find_element("css selector", "td[data-lag]").get_attribute("data-lag")
                    for tr in self.b.css("#group-partitions tbody tr")}
            self.assertEqual(lags, {TOPIC + "-0": "0", TOPIC + "-1": "0"})
            # a group with members cannot be reset (kafka-consumer-groups' rule)
            self.b.css("#reset-offsets")[0].click()
            self.submit_dialog_expecting_error(topic=TOPIC, to="earliest")
        finally:
            consumer.close()
        self.b.wait_for(lambda: self.b.text("#group-state") == "Empty", what="the group to be empty")
        self.b.css("#reset-offsets")[0].click()
        confirm, toast = self.submit_dialog(topic=TOPIC, to="earliest")
        self.assertEqual(confirm, "Reset the offsets of %s on every partition of %s to earliest?" % (GROUP, TOPIC))
        self.assertEqual(toast, "reset %s on %s: 0->0, 1->0" % (GROUP, TOPIC))
        self.b.wait_for(lambda: self.b.text("#group-lag") == str(P0 + P1), what="the lag back at %d" % (P0 + P1))
        committed = {tr.get_attribute("data-tp"): tr.find_element("css selector", "td[data-committed]")
                     .get_attribute("data-committed") for tr in self.b.css("#group-partitions tbody tr")}
        self.assertEqual(committed, {TOPIC + "-0": "0", TOPIC + "-1": "0"})
        self.assertTrue(self.b.css("#group-lag"))
        self.assertTrue(self.b.css("svg.chart polyline"), "the lag chart has a line")

    def submit_dialog_expecting_error(self, **values):
        b = self.b
        for name, value in values.items():
            from selenium.webdriver.support.ui import Select

            (field,) = b.css("#f-" + name)
            Select(field).select_by_value(value)
        b.css("#modal-ok")[0].click()
        b.wait_for(lambda: b.text("#confirm-text"), what="the confirmation")
        b.css("#modal-ok")[0].click()
        error = b.wait_for(lambda: b.text("#modal-error"), what="the refusal")
        self.assertTrue(re.match(r"group %s is (Stable|PreparingRebalance|CompletingRebalance): its offsets can be "
                                 r"reset only while it has no members" % GROUP, error), error)
        b.css("#modal-cancel")[0].click()
