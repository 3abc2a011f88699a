"""The console on a broker with SCRAM users and the ACL authorizer: HTTP basic against the
broker's own credentials, every read and action authorized for that principal (a topic without
DESCRIBE is not listed, in the API or in a real browser), CSRF tokens, confirmation and
same-origin checks on actions, no password in the broker's log; and a broker that authorizes
but has no SASL users to check refuses to start with the console on (fail closed).
"""

import base64
import json
import os
import urllib.error
import urllib.request

from twisted.trial import unittest

from kafkatw.testing import BrokerStartError, KafkaBroker, KafkaBrokerMixin
from tests import browser as browser_support
from tests.support import poll_until
from tests.test_e2e_authz import AUTHZ, USERS, acl, conf

VISIBLE, SECRET = "console-visible", "console-secret"


def http(port, path, user=None, password=None, method="GET", body=None, headers=None):
    """(status, JSON document or text, response headers)."""
    request = urllib.request.Request("http://127.0.0.1:%d/%s" % (port, path), method=method,
                                     data=None if body is None else json.dumps(body).encode("utf-8"))
    if user is not None:
        token = base64.b64encode(("%s:%s" % (user, password if password is not None else USERS[user])).encode())
        request.add_header("Authorization", "Basic " + token.decode())
    if body is not None:
        request.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        request.add_header(k, v)
    try:
        with urllib.request.urlopen(request, timeout=20) as r:
            status, raw, got = r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        status, raw, got = e.code, e.read(), e.headers
    try:
        return status, json.loads(raw.decode("utf-8")), got
    except ValueError:
        return status, raw.decode("utf-8", "replace"), got


class ConsoleAuthorizationTests(KafkaBrokerMixin, unittest.TestCase):
    broker_overrides = dict(AUTHZ, **{"kafkatw.console.listener": "127.0.0.1:0"})
    broker_options = {"listeners": ("PLAINTEXT", "SASL_PLAINTEXT"), "sasl_users": USERS,
                      "sasl_mechanisms": ("SCRAM-SHA-256",)}
    timeout = 120

    def setUp(self):
        super().setUp()
        self.port = self.broker.console_port
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(conf(self.broker, "admin"))
        existing = admin.list_topics(timeout=10).topics
        new = [NewTopic(t, 1, 1) for t in (VISIBLE, SECRET) if t not in existing]
        if new:
            for f in admin.create_topics(new).values():
                self.assertIsNone(f.result(15))
            for f in admin.create_acls([acl("TOPIC", VISIBLE, "User:alice", "DESCRIBE")]).values():
                self.assertIsNone(f.result(15))
            from confluent_kafka import Producer

            producer = Producer(conf(self.broker, "admin"))
            producer.produce(VISIBLE, value=b"not for alice")
            self.assertEqual(producer.flush(30), 0)

    def csrf(self, user):
        status, doc, _ = http(self.port, "api/session", user)
        self.assertEqual(status, 200)
        self.assertEqual(doc["principal"], "User:%s" % user)
        return doc["csrfToken"]

    def test_credentials_are_required_and_checked(self):
        for path in ("", "api/topics", "static/console.js"):
            status, _, headers = http(self.port, path)
            self.assertEqual(status, 401, path)
            self.assertEqual(headers["WWW-Authenticate"], 'Basic realm="kafkatw console", charset="UTF-8"')
        self.assertEqual(http(self.port, "api/topics", "alice", "wrong-password")[0], 401)
        self.assertEqual(http(self.port, "api/topics", "nobody", "alice-secret")[0], 401)
        status, page, headers = http(self.port, "", "alice")
        self.assertEqual(status, 200)
        self.assertIn("<title>kafkatw console</title>", page)
        self.assertEqual(headers["X-Frame-Options"], "DENY")
        self.assertIn("default-src 'self'", headers["Content-Security-Policy"])
        with open(self.broker.log_path, encoding="utf-8", errors="replace") as f:
            logged = f.read()
        self.assertIn("console login failed for user alice", logged)
        for password in USERS.values():
            self.assertNotIn(password, logged)
        self.assertNotIn("wrong-password", logged)

    def test_topics_without_describe_are_not_shown(self):
        status, doc, _ = http(self.port, "api/topics", "alice")
        self.assertEqual(status, 200)
        self.assertEqual([t["name"] for t in doc["topics"]], [VISIBLE])
        status, doc, _ = http(self.port, "api/topics/" + SECRET, "alice")
        self.assertEqual(doc["error"], "TOPIC_AUTHORIZATION_FAILED")
        # no READ on the visible topic either: its messages are refused as a consumer's fetch is
        status, doc, _ = http(self.port, "api/messages/%s?partition=0" % VISIBLE, "alice")
        self.assertEqual((doc["endOffset"], doc["records"], doc["error"]), (1, [], "TOPIC_AUTHORIZATION_FAILED"))
        status, doc, _ = http(self.port, "api/topics", "admin")  # a super user sees both
        self.assertEqual({VISIBLE, SECRET} - {t["name"] for t in doc["topics"]}, set())
        # bob has no ACL at all
        self.assertEqual(http(self.port, "api/topics", "bob")[1], {"topics": []})

    def test_actions_need_csrf_confirmation_and_authorization(self):
        token = self.csrf("alice")
        action = "api/actions/create-topic"
        body = {"topic": "console-made", "partitions": 1, "confirm": True}
        status, doc, _ = http(self.port, action, "alice", method="POST", body=body)
        self.assertEqual((status, doc), (403, {"error": "missing or wrong CSRF token (reload the page)"}))
        status, doc, _ = http(self.port, action, "alice", method="POST", body=body,
                              headers={"X-CSRF-Token": self.csrf("bob")})  # another principal's token
        self.assertEqual(status, 403)
        status, doc, _ = http(self.port, action, "alice", method="POST", body=dict(body, confirm=False),
                              headers={"X-CSRF-Token": token})
        self.assertEqual((status, doc), (400, {"error": "the action was not confirmed"}))
        status, doc, _ = http(self.port, action, "alice", method="POST", body=body,
                              headers={"X-CSRF-Token": token, "Origin": "http://evil.example"})
        self.assertEqual((status, doc), (403, {"error": "cross-origin action refused"}))
        status, doc, _ = http(self.port, action, "alice", method="POST", body=body, headers={"X-CSRF-Token": token})
        self.assertEqual(status, 400)
        self.assertEqual(doc["error"], "create topic console-made: TOPIC_AUTHORIZATION_FAILED: Authorization failed.")
        admin_token = self.csrf("admin")
        status, doc, _ = http(self.port, action, "admin", method="POST", body=body,
                              headers={"X-CSRF-Token": admin_token})
        self.assertEqual((status, doc), (200, {"done": "created topic console-made with 1 partitions"}))
        status, doc, _ = http(self.port, "api/actions/delete-topic", "alice", method="POST",
                              body={"topic": VISIBLE, "confirm": True}, headers={"X-CSRF-Token": token})
        self.assertEqual(status, 400)
        self.assertIn("TOPIC_AUTHORIZATION_FAILED", doc["error"])
        self.assertEqual([t["name"] for t in http(self.port, "api/topics", "alice")[1]["topics"]], [VISIBLE])

    def test_groups_without_describe_are_not_shown(self):
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        c = Consumer(conf(self.broker, "admin", **{"group.id": "console-admins"}))
        try:
            poll_until(lambda: _committed(c, [TopicPartition(VISIBLE, 0, 1)], KafkaException), timeout=30,
                       message="the admin's commit")
        finally:
            c.close()
        admin_groups = http(self.port, "api/groups", "admin")[1]["groups"]
        self.assertIn(("console-admins", 0), [(g["groupId"], g["lag"]) for g in admin_groups])  # 1 of 1 read
        self.assertEqual(http(self.port, "api/groups", "alice")[1], {"groups": []})
        self.assertEqual(http(self.port, "api/groups/console-admins", "alice")[1],
                         {"groupId": "console-admins", "error": "GROUP_AUTHORIZATION_FAILED"})

    def test_in_a_browser_a_topic_without_describe_is_not_listed(self):
        browser_support.require()
        b = browser_support.Browser(credentials=("alice", USERS["alice"]))
        self.addCleanup(b.quit)
        b.visit("http://127.0.0.1:%d/#/topics" % self.port)
        names = [tr.get_attribute("data-topic") for tr in b.css("#topics-table tbody tr")]
        self.assertEqual(names, [VISIBLE])
        self.assertEqual(b.text("#principal"), "User:alice")


def _committed(consumer, offsets, retriable):
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    except retriable:  # the coordinator is still being found
        return False
    return True


class ConsoleFailsClosedTests(unittest.TestCase):
    def test_an_authorizer_without_sasl_users_refuses_the_console(self):
        broker = KafkaBroker(overrides=dict(AUTHZ, **{"kafkatw.console.listener": "127.0.0.1:0"}))
        self.addCleanup(broker.close)
        with self.assertRaises(BrokerStartError) as caught:
            broker.start()
        self.assertIn("Invalid value 127.0.0.1:0 for configuration kafkatw.console.listener: the broker "
                      "authenticates clients or authorizes requests, but no SASL listener has PLAIN or SCRAM "
                      "users the console could check passwords against", str(caught.exception))
        self.assertFalse(os.path.exists(os.path.join(broker.work_dir, "ready.json")))
