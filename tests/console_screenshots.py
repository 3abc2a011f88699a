"""``make screenshots`` (``python -m tests.console_screenshots [DIR]``): a throwaway broker with
the console on, a few topics, records produced over some seconds (so the rate sparklines have
points), a consumer group part-way through its topic, and a 1280x800 screenshot of each console
page in headless Chromium, written to DIR (docs/console by default) for docs/console.md.
"""

import json
import os
import sys
import time

from kafkatw.testing import KafkaBroker
from tests.browser import Browser, missing

PAGES = (
    ("overview", "/"),
    ("topics", "/topics"),
    ("topic", "/topics/orders"),
    ("messages", "/messages/orders?partition=0&offset=0&limit=6"),
    ("groups", "/groups"),
    ("group", "/groups/billing"),
)


def produce(broker, seconds):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        for _ in range(40):
            p.produce("orders", key=b"customer-%d" % (i % 17), headers=[("source", b"web"), ("trace", b"%08x" % i)],
                      value=json.dumps({"order": i, "items": [{"sku": "B-%d" % (i % 5), "qty": 1 + i % 3}],
                                        "total": round(9.5 + i % 11, 2)}).encode())
            if i % 3 == 0:
                p.produce("clicks", value=("page=/item/%d" % (i % 50)).encode())
            i += 1
        p.poll(0)
        time.sleep(0.25)
    p.produce("payments", value=b"\x00\x07\xfe\xff")
    assert p.flush(30) == 0
    return i


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    out = os.path.abspath(argv[0] if argv else os.path.join(os.path.dirname(__file__), "..", "docs", "console"))
    why = missing()
    if why:
        sys.exit("cannot take screenshots: %s" % why)
    os.makedirs(out, exist_ok=True)
    from kafka import KafkaConsumer

    with KafkaBroker(overrides={"kafkatw.console.listener": "127.0.0.1:0"},
                     topics=[("orders", 3), ("clicks", 6), ("payments", 1)]) as broker:
        url = "http://127.0.0.1:%d/#" % broker.console_port
        browser = Browser()
        try:
            browser.open(url + "/topics")  # the topic list samples rates while records arrive
            produced = produce(broker, 14)
            consumer = KafkaConsumer("orders", bootstrap_servers=broker.bootstrap_servers, group_id="billing",
                                     auto_offset_reset="earliest", enable_auto_commit=False)
            browser.open(url + "/groups/billing")
            consumed = 0
            for _ in range(6):  # the lag falls in steps while the page watches
                for records in consumer.poll(timeout_ms=2000, max_records=produced // 5).values():
                    consumed += len(records)
                consumer.commit()
                time.sleep(1.5)
            for name, fragment in PAGES:
                browser.visit(url + fragment)
                time.sleep(0.3)  # fonts and layout settle
                path = os.path.join(out, name + ".png")
                browser.screenshot(path)
                print("wrote", path)
            browser.visit(url + "/topics")
            browser.css("#create-topic")[0].click()
            for field, value in (("topic", "invoices"), ("partitions", "6"), ("configs", "retention.ms=604800000")):
                element = browser.css("#f-" + field)[0]
                element.clear()
                element.send_keys(value)
            browser.css("#modal-ok")[0].click()
            browser.wait_for(lambda: browser.text("#confirm-text"), what="the confirmation")
            path = os.path.join(out, "confirm.png")
            browser.screenshot(path)
            print("wrote", path)
            consumer.close()
        finally:
            browser.quit()


if __name__ == "__main__":
    main()
