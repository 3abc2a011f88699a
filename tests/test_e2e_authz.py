"""Authorization against a real broker process with real clients (SCRAM users): the ACL authorizer
loaded by Kafka's class name, per-principal produce/consume/group/metadata checks with Kafka's
error codes, DENY for one host over ALLOW for ``*``, super users, auto-creation needing CREATE,
ACLs created, listed and deleted through confluent-kafka's and kafka-python's admin clients
(taking effect at once and surviving a restart), SECURITY_DISABLED without an authorizer, and a
wrong ``authorizer.class.name`` refused at start-up."""

import json
import logging
import time

from twisted.trial.unittest import SynchronousTestCase

from kafkatw.protocol import errors
from kafkatw.protocol import messages as m
from kafkatw.testing import BrokerStartError, KafkaBroker, KafkaBrokerMixin
from tests.support import RawClient, produce_body, unique_name

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
N = 20
QUIET = logging.getLogger("kafkatw.tests.librdkafka.authz")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False
AUTHZ = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin"}


def conf(broker, user, **extra):
    c = {"bootstrap.servers": broker.sasl_bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
         "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": USERS[user],
         "logger": QUIET}
    c.update(extra)
    return c


def kp_conf(broker, user):
    return {"bootstrap_servers": broker.sasl_bootstrap_servers, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": user,
            "sasl_plain_password": USERS[user]}


def acl(rtype, name, principal, op, perm="ALLOW", pattern="LITERAL", host="*"):
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    return AclBinding(ResourceType[rtype], name, ResourcePatternType[pattern], principal, host,
                      AclOperation[op], AclPermissionType[perm])


class AuthzBrokerMixin(KafkaBrokerMixin):
    broker_overrides = AUTHZ
    broker_options = {"listeners": ("PLAINTEXT", "SASL_PLAINTEXT"), "sasl_users": USERS,
                      "sasl_mechanisms": ("SCRAM-SHA-256",)}

    def admin(self):
        """The super user's admin client (kept: a collected client fails its futures)."""
        from confluent_kafka.admin import AdminClient

        if getattr(self, "_admin", None) is None:
            self._admin = AdminClient(conf(self.broker, "admin"))
        return self._admin

    def add_acls(self, *bindings):
        futures = self.admin().create_acls(list(bindings))
        for f in futures.values():
            self.assertIsNone(f.result(15))

    def create_topics(self, *names, partitions=1):
        from confluent_kafka.admin import NewTopic

        futures = self.admin().create_topics([NewTopic(n, partitions, 1) for n in names])
        for f in futures.values():
            self.assertIsNone(f.result(15))

    def produce(self, user, topic, n=N, **extra):
        """The delivery errors (None for delivered) of ``n`` records produced as ``user``."""
        from confluent_kafka import Producer

        p = Producer(conf(self.broker, user, **dict({"message.timeout.ms": 10000}, **extra)))
        delivered = []
        for i in range(n):
            p.produce(topic, value=b"v%d" % i, on_delivery=lambda e, msg: delivered.append(e))
        self.assertEqual(p.flush(30), 0)
        return delivered


class ConfluentAuthzTests(AuthzBrokerMixin, SynchronousTestCase):
    """librdkafka through confluent-kafka, logged in with SCRAM-SHA-256."""

    def test_write_on_a_prefix(self):
        from confluent_kafka import KafkaError

        tag = unique_name("p")
        orders, payments = "orders-" + tag, "payments-" + tag
        self.create_topics(orders, payments)
        self.add_acls(acl("TOPIC", "orders-", "User:alice", "WRITE", pattern="PREFIXED"))
        self.assertEqual(self.produce("alice", orders), [None] * N)
        codes = [e.code() for e in self.produce("alice", payments, n=3)]
        self.assertEqual(codes, [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3)

    def consume(self, user, topic, group, n=N, timeout=30):
        from confluent_kafka import Consumer

        c = Consumer(conf(self.broker, user, **{"group.id": group, "auto.offset.reset": "earliest",
                                                "enable.auto.commit": False}))
        c.subscribe([topic])
        got, errs = [], []
        deadline = time.monotonic() + timeout
        try:
            while len(got) < n and not errs and time.monotonic() < deadline:
                for msg in c.consume(n, 0.5):
                    if msg.error():
                        errs.append(msg.error().code())
                    else:
                        got.append(msg.value())
            if got:
                c.commit(asynchronous=False)
        finally:
            c.close()
        return got, errs

    def test_read_needs_the_group_too(self):
        from confluent_kafka import KafkaError

        topic, group, other = unique_name("r"), unique_name("g"), unique_name("g-no")
        self.create_topics(topic)
        self.assertEqual(self.produce("admin", topic), [None] * N)
        self.add_acls(acl("TOPIC", topic, "User:bob", "READ"), acl("GROUP", group, "User:bob", "READ"))
        got, errs = self.consume("bob", topic, group)
        self.assertEqual((sorted(got), errs), (sorted(b"v%d" % i for i in range(N)), []))
        got, errs = self.consume("bob", topic, other, timeout=15)
        self.assertEqual((got, errs), ([], [KafkaError.GROUP_AUTHORIZATION_FAILED]))

    def test_deny_for_a_host_beats_allow_for_every_host(self):
        from confluent_kafka import KafkaError

        topic = unique_name("deny")
        self.create_topics(topic)
        self.add_acls(acl("TOPIC", topic, "User:alice", "WRITE"))
        self.assertEqual(self.produce("alice", topic, n=2), [None] * 2)
        self.add_acls(acl("TOPIC", topic, "User:alice", "WRITE", perm="DENY", host="127.0.0.1"))
        codes = [e.code() for e in self.produce("alice", topic, n=2)]
        self.assertEqual(codes, [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 2)
        # the audit log (kafka.authorizer.logger) names principal, host, operation and resource
        with open(self.broker.log_path) as f:
            denied = [line for line in f if "Principal = User:alice is Denied operation = WRITE from host = "
                      "127.0.0.1 on resource = ResourcePattern(resourceType=TOPIC, name=%s, patternType=LITERAL) "
                      "for request = Produce" % topic in line]
        self.assertTrue(denied)
        self.assertIn("based on rule (pattern=ResourcePattern(resourceType=TOPIC, name=%s, patternType=LITERAL), "
                      "entry=(principal=User:alice, host=127.0.0.1, operation=WRITE, permissionType=DENY))"
                      % topic, denied[0])

    def test_super_user_may_do_everything_and_others_see_only_what_they_may_describe(self):
        a, b = unique_name("vis-a"), unique_name("vis-b")
        self.create_topics(a, b)
        self.add_acls(acl("TOPIC", a, "User:bob", "READ"))
        from confluent_kafka.admin import AdminClient

        bob_client = AdminClient(conf(self.broker, "bob"))
        bob = bob_client.list_topics(timeout=15).topics
        self.assertIn(a, bob)
        self.assertNotIn(b, bob)
        admin = self.admin().list_topics(timeout=15).topics
        self.assertTrue({a, b} <= set(admin))

    def test_auto_creation_needs_create(self):
        from confluent_kafka import KafkaError

        tag = unique_name("auto")
        self.add_acls(acl("TOPIC", tag, "User:alice", "WRITE", pattern="PREFIXED"))
        codes = [e.code() for e in self.produce("alice", tag + "-1", n=1, **{"message.timeout.ms": 5000})]
        self.assertEqual(codes, [KafkaError.TOPIC_AUTHORIZATION_FAILED])
        self.assertNotIn(tag + "-1", self.admin().list_topics(timeout=15).topics)
        self.add_acls(acl("TOPIC", tag, "User:alice", "CREATE", pattern="PREFIXED"))
        self.assertEqual(self.produce("alice", tag + "-2", n=1), [None])
        self.assertIn(tag + "-2", self.admin().list_topics(timeout=15).topics)


    def test_create_and_delete_topics_need_their_acls(self):
        from confluent_kafka import KafkaError
        from confluent_kafka.admin import AdminClient, NewTopic

        tag = unique_name("adm")
        alice = AdminClient(conf(self.broker, "alice"))
        [f] = alice.create_topics([NewTopic(tag + "-a", 1, 1)]).values()
        self.assertEqual(f.exception(15).args[0].code(), KafkaError.TOPIC_AUTHORIZATION_FAILED)
        self.add_acls(acl("TOPIC", tag, "User:alice", "CREATE", pattern="PREFIXED"))
        [f] = alice.create_topics([NewTopic(tag + "-a", 1, 1)]).values()
        self.assertIsNone(f.result(15))
        # alice may describe (CREATE does not imply it) nothing: her delete looks like an unknown topic
        [f] = alice.delete_topics([tag + "-a"]).values()
        self.assertEqual(f.exception(15).args[0].code(), KafkaError.UNKNOWN_TOPIC_OR_PART)
        self.add_acls(acl("TOPIC", tag, "User:alice", "DESCRIBE", pattern="PREFIXED"))
        [f] = alice.delete_topics([tag + "-a"]).values()
        self.assertEqual(f.exception(15).args[0].code(), KafkaError.TOPIC_AUTHORIZATION_FAILED)
        self.add_acls(acl("TOPIC", tag, "User:alice", "DELETE", pattern="PREFIXED"))
        [f] = alice.delete_topics([tag + "-a"]).values()
        self.assertIsNone(f.result(15))


class KafkaPythonAuthzTests(AuthzBrokerMixin, SynchronousTestCase):
    """kafka-python: a consumer in a group needs READ on the topic and on the group."""

    def test_consume_with_and_without_the_group(self):
        from kafka import KafkaConsumer, KafkaProducer
        from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

        topic, group = unique_name("kp"), unique_name("kp-g")
        self.create_topics(topic)
        self.add_acls(acl("TOPIC", topic, "User:alice", "WRITE"), acl("TOPIC", topic, "User:bob", "READ"),
                      acl("GROUP", group, "User:bob", "READ"))
        p = KafkaProducer(**kp_conf(self.broker, "alice"))
        for i in range(N):
            p.send(topic, b"kp%d" % i)
        p.flush(30)
        with self.assertRaises(TopicAuthorizationFailedError):
            p.send("payments-" + topic, b"x").get(timeout=30)
        p.close()
        c = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", consumer_timeout_ms=20000,
                          **kp_conf(self.broker, "bob"))
        got = []
        for msg in c:
            got.append(msg.value)
            if len(got) == N:
                break
        c.commit()
        c.close()
        self.assertEqual(sorted(got), sorted(b"kp%d" % i for i in range(N)))
        c = KafkaConsumer(topic, group_id=group + "-other", auto_offset_reset="earliest",
                          consumer_timeout_ms=10000, **kp_conf(self.broker, "bob"))
        self.addCleanup(c.close)
        with self.assertRaises(GroupAuthorizationFailedError):
            next(iter(c))


class RawAuthzTests(AuthzBrokerMixin, SynchronousTestCase):
    """Exact error codes on the wire, as ANONYMOUS on the PLAINTEXT listener."""

    def test_anonymous_is_refused_with_kafkas_codes(self):
        topic = unique_name("anon")
        AuthzBrokerMixin.create_topics(self, topic)
        c = RawClient(self.broker)
        self.addCleanup(c.close)
        resp = c.request(0, 9, produce_body(topic, 0, [b"x"]))
        self.assertEqual(resp.responses[0].partition_responses[0].error_code, errors.TOPIC_AUTHORIZATION_FAILED)
        md = c.request(3, 12, m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name=topic)],
                                                allow_auto_topic_creation=True))
        self.assertEqual([(t.name, t.error_code) for t in md.topics], [(topic, errors.TOPIC_AUTHORIZATION_FAILED)])
        md = c.request(3, 12, m.MetadataRequest(topics=None))
        self.assertEqual(md.topics, [])
        jg = c.request(11, 5, m.JoinGroupRequest(group_id="g", session_timeout_ms=10000,
                                                 rebalance_timeout_ms=10000, member_id="",
                                                 protocol_type="consumer", protocols=[]))
        self.assertEqual(jg.error_code, errors.GROUP_AUTHORIZATION_FAILED)
        ip = c.request(22, 4, m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000))
        self.assertEqual(ip.error_code, errors.CLUSTER_AUTHORIZATION_FAILED)
        da = c.request(29, 3, m.DescribeAclsRequest(resource_type_filter=1, pattern_type_filter=1,
                                                    principal_filter=None, host_filter=None,
                                                    resource_name_filter=None, operation=1, permission_type=1))
        self.assertEqual(da.error_code, errors.CLUSTER_AUTHORIZATION_FAILED)
        E = m.ElectLeadersRequest  # ALTER on the cluster, as Kafka
        el = c.request(43, 2, E(election_type=0, timeout_ms=1000,
                                topic_partitions=[E.TopicPartitions(topic=topic, partitions=[0])]))
        self.assertEqual((el.error_code, [(r.topic, p.partition_id, p.error_code) for r in el.replica_election_results
                                          for p in r.partition_result]),
                         (errors.CLUSTER_AUTHORIZATION_FAILED, [(topic, 0, errors.CLUSTER_AUTHORIZATION_FAILED)]))

    def test_configs_and_authorized_operations(self):
        topic = unique_name("cfg")
        AuthzBrokerMixin.create_topics(self, topic)
        self.add_acls(acl("TOPIC", topic, "User:ANONYMOUS", "ALTER_CONFIGS"),
                      acl("TOPIC", topic, "User:ANONYMOUS", "READ"),
                      # confluent-kafka calls the CLUSTER resource type BROKER
                      acl("BROKER", "kafka-cluster", "User:ANONYMOUS", "IDEMPOTENT_WRITE"))
        c = RawClient(self.broker)
        self.addCleanup(c.close)
        R = m.DescribeConfigsRequest.DescribeConfigsResource
        dc = c.request(32, 4, m.DescribeConfigsRequest(resources=[
            R(resource_type=2, resource_name=topic, configuration_keys=["cleanup.policy"]),
            R(resource_type=2, resource_name=topic + "-other", configuration_keys=None),
            R(resource_type=4, resource_name="", configuration_keys=None)]))
        self.assertEqual([(r.resource_name, r.error_code) for r in dc.results],
                         [(topic, errors.NONE), (topic + "-other", errors.TOPIC_AUTHORIZATION_FAILED),
                          ("", errors.CLUSTER_AUTHORIZATION_FAILED)])
        self.assertEqual([(x.name, x.value) for x in dc.results[0].configs], [("cleanup.policy", "delete")])
        md = c.request(3, 10, m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name=topic)],
                                                allow_auto_topic_creation=False,
                                                include_cluster_authorized_operations=True,
                                                include_topic_authorized_operations=True))
        # READ implies DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS
        self.assertEqual(md.topics[0].topic_authorized_operations,
                         (1 << 3) | (1 << 8) | (1 << 10) | (1 << 11))
        self.assertEqual(md.cluster_authorized_operations, 1 << 12)
        ip = c.request(22, 4, m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000))
        self.assertEqual(ip.error_code, errors.NONE)

    def test_anonymous_with_an_acl_produces(self):
        topic = unique_name("anon-ok")
        AuthzBrokerMixin.create_topics(self, topic)
        self.add_acls(acl("TOPIC", topic, "User:ANONYMOUS", "WRITE"))
        c = RawClient(self.broker)
        self.addCleanup(c.close)
        resp = c.request(0, 9, produce_body(topic, 0, [b"x"]))
        self.assertEqual(resp.responses[0].partition_responses[0].error_code, errors.NONE)


class PerTopicAuthzTests(AuthzBrokerMixin, SynchronousTestCase):
    """APIs Kafka answers per topic: an allowed topic is served, a denied one gets
    TOPIC_AUTHORIZATION_FAILED in its own entry, in the same response."""

    def test_each_topic_is_answered_on_its_own(self):
        ok, no = unique_name("pt-ok"), unique_name("pt-no")
        AuthzBrokerMixin.create_topics(self, ok, no)
        self.add_acls(acl("TOPIC", ok, "User:ANONYMOUS", "ALL"))
        c = RawClient(self.broker)
        self.addCleanup(c.close)
        both = (ok, no)
        L = m.ListOffsetsRequest
        lo = c.request(2, 7, L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name=n, partitions=[
            L.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)]) for n in both]))
        self.assertEqual([(t.name, p.error_code, p.offset) for t in lo.topics for p in t.partitions],
                         [(ok, errors.NONE, 0), (no, errors.TOPIC_AUTHORIZATION_FAILED, -1)])
        E = m.OffsetForLeaderEpochRequest
        oe = c.request(23, 4, E(replica_id=-1, topics=[E.OffsetForLeaderTopic(topic=n, partitions=[
            E.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)]) for n in both]))
        self.assertEqual([(t.topic, p.error_code) for t in oe.topics for p in t.partitions],
                         [(ok, errors.NONE), (no, errors.TOPIC_AUTHORIZATION_FAILED)])
        P = m.DescribeProducersRequest
        dp = c.request(61, 0, P(topics=[P.TopicRequest(name=n, partition_indexes=[0]) for n in both]))
        self.assertEqual([(t.name, p.error_code) for t in dp.topics for p in t.partitions],
                         [(ok, errors.NONE), (no, errors.TOPIC_AUTHORIZATION_FAILED)])
        D = m.DeleteRecordsRequest
        dr = c.request(21, 2, D(timeout_ms=10000, topics=[D.DeleteRecordsTopic(name=n, partitions=[
            D.DeleteRecordsPartition(partition_index=0, offset=0)]) for n in both]))
        self.assertEqual([(t.name, p.error_code, p.low_watermark) for t in dr.topics for p in t.partitions],
                         [(ok, errors.NONE, 0), (no, errors.TOPIC_AUTHORIZATION_FAILED, -1)])
        C = m.CreatePartitionsRequest
        cp = c.request(37, 3, C(timeout_ms=10000, validate_only=False, topics=[
            C.CreatePartitionsTopic(name=n, count=2, assignments=None) for n in both]))
        self.assertEqual([(r.name, r.error_code, r.error_message) for r in cp.results],
                         [(ok, errors.NONE, None),
                          (no, errors.TOPIC_AUTHORIZATION_FAILED, "The topic authorization is failed.")])
        md = c.request(3, 12, m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name=ok)]))
        self.assertEqual(len(md.topics[0].partitions), 2)
        # OffsetDelete: DELETE on the group for the request, READ per topic
        group = unique_name("pt-group")
        self.add_acls(acl("GROUP", group, "User:ANONYMOUS", "DELETE"), acl("GROUP", group, "User:ANONYMOUS", "READ"))
        deadline = time.monotonic() + 30
        while c.request(10, 3, m.FindCoordinatorRequest(key=group, key_type=0)).error_code != errors.NONE:
            self.assertLess(time.monotonic(), deadline, "no group coordinator")
            time.sleep(0.1)
        P = m.OffsetCommitRequest
        oc = c.request(8, 8, P(group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                               topics=[P.OffsetCommitRequestTopic(name=ok, partitions=[P.OffsetCommitRequestPartition(
                                   partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                                   committed_metadata="")])]))
        self.assertEqual(oc.topics[0].partitions[0].error_code, errors.NONE)
        O = m.OffsetDeleteRequest
        od = c.request(47, 0, O(group_id=group, topics=[O.OffsetDeleteRequestTopic(name=n, partitions=[
            O.OffsetDeleteRequestPartition(partition_index=0)]) for n in both]))
        self.assertEqual((od.error_code, [(t.name, p.error_code) for t in od.topics for p in t.partitions]),
                         (errors.NONE, [(ok, errors.NONE), (no, errors.TOPIC_AUTHORIZATION_FAILED)]))
        od = c.request(47, 0, O(group_id=group + "-other", topics=[O.OffsetDeleteRequestTopic(name=ok, partitions=[
            O.OffsetDeleteRequestPartition(partition_index=0)])]))
        self.assertEqual((od.error_code, od.topics), (errors.GROUP_AUTHORIZATION_FAILED, []))


class AclAdminTests(AuthzBrokerMixin, SynchronousTestCase):
    """ACLs through both admin clients, in force at once, durable across a restart."""

    broker_scope = "test"

    def test_created_listed_deleted_through_both_clients_and_kept_across_restart(self):
        from confluent_kafka.admin import (
            AclBindingFilter,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )
        from kafka.admin import ACL, ACLFilter, ACLOperation, ACLPermissionType, KafkaAdminClient
        from kafka.admin import ResourcePattern as KpPattern
        from kafka.admin import ResourcePatternFilter as KpPatternFilter
        from kafka.admin import ResourceType as KpType
        from kafka.admin import ACLResourcePatternType

        self.add_acls(acl("TOPIC", "t1", "User:alice", "READ"),
                      acl("GROUP", "grp-", "User:bob", "READ", pattern="PREFIXED"))
        kp = KafkaAdminClient(**kp_conf(self.broker, "admin"))
        self.addCleanup(kp.close)
        result = kp.create_acls([ACL("User:carol", "*", ACLOperation.WRITE, ACLPermissionType.DENY,
                                    KpPattern(KpType.TOPIC, "t2", ACLResourcePatternType.LITERAL))])
        self.assertEqual(len(result["succeeded"]), 1, result)
        self.assertEqual(result["failed"], [])

        any_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                      AclOperation.ANY, AclPermissionType.ANY)

        def listed():
            got = self.admin().describe_acls(any_filter).result(15)
            return sorted((b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host,
                           b.operation.name, b.permission_type.name) for b in got)

        expected = [("GROUP", "grp-", "PREFIXED", "User:bob", "*", "READ", "ALLOW"),
                    ("TOPIC", "t1", "LITERAL", "User:alice", "*", "READ", "ALLOW"),
                    ("TOPIC", "t2", "LITERAL", "User:carol", "*", "WRITE", "DENY")]
        self.assertEqual(listed(), expected)
        acls, err = kp.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                               KpPatternFilter(KpType.TOPIC, None, ACLResourcePatternType.ANY)))
        self.assertEqual(sorted((a.principal, a.resource_pattern.resource_name) for a in acls),
                         [("User:alice", "t1"), ("User:carol", "t2")])
        # MATCH: the ACLs that apply to group grp-1 (the prefix)
        match = AclBindingFilter(ResourceType.GROUP, "grp-1", ResourcePatternType.MATCH, None, None,
                                 AclOperation.ANY, AclPermissionType.ANY)
        self.assertEqual([b.name for b in self.admin().describe_acls(match).result(15)], ["grp-"])

        self.broker.restart()
        self._admin = None
        self.assertEqual(listed(), expected)

        kp2 = KafkaAdminClient(**kp_conf(self.broker, "admin"))
        self.addCleanup(kp2.close)
        deleted = kp2.delete_acls([ACLFilter("User:carol", None, ACLOperation.ANY, ACLPermissionType.ANY,
                                             KpPatternFilter(KpType.ANY, None, ACLResourcePatternType.ANY))])
        self.assertEqual(len(deleted), 1)
        self.assertEqual([(a.principal, a.resource_pattern.resource_name) for a in deleted[0][1]],
                         [("User:carol", "t2")])
        self.assertIs(deleted[0][2].errno, 0)
        futures = self.admin().delete_acls([AclBindingFilter(
            ResourceType.TOPIC, "t1", ResourcePatternType.LITERAL, None, None, AclOperation.ANY,
            AclPermissionType.ANY)])
        self.assertEqual([[b.principal for b in f.result(15)] for f in futures.values()], [["User:alice"]])
        self.assertEqual(listed(), [expected[0]])


class CliAclTests(AuthzBrokerMixin, SynchronousTestCase):
    """``kafkatw acls add|list|remove`` logged in as the super user; the ACL takes effect at once."""

    def cli(self, *args):
        import subprocess
        import sys

        props = self.mktemp()
        with open(props, "w") as f:
            f.write("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                    "sasl.username=admin\nsasl.password=%s\n" % USERS["admin"])
        r = subprocess.run([sys.executable, "-m", "kafkatw.cli", "--bootstrap-server",
                            self.broker.sasl_bootstrap_servers, "--command-config", props] + list(args),
                           capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout, r.stderr

    def test_add_list_remove(self):
        from confluent_kafka import KafkaError

        tag = unique_name("cli")
        self.create_topics(tag + "-x")
        rc, out, err = self.cli("acls", "add", "--allow-principal", "User:alice", "--operation", "Write",
                                "--operation", "Describe", "--topic", tag, "--resource-pattern-type", "prefixed")
        self.assertEqual((rc, out), (0, "Added 2 ACL(s).\n"), err)
        self.assertEqual(self.produce("alice", tag + "-x", n=2), [None] * 2)
        rc, out, err = self.cli("acls", "list", "--topic", tag + "-x", "--resource-pattern-type", "match")
        self.assertEqual(rc, 0, err)
        self.assertEqual([line.split() for line in out.splitlines()],
                         [["RESOURCE_TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"],
                          ["TOPIC", tag, "PREFIXED", "User:alice", "*", "DESCRIBE", "ALLOW"],
                          ["TOPIC", tag, "PREFIXED", "User:alice", "*", "WRITE", "ALLOW"]])
        rc, out, err = self.cli("acls", "list", "--topic", tag + "-x", "--resource-pattern-type", "match",
                                "--output", "json")
        self.assertEqual(rc, 0, err)
        self.assertEqual(json.loads(out), [
            {"resourceType": "TOPIC", "name": tag, "patternType": "PREFIXED", "principal": "User:alice",
             "host": "*", "operation": op, "permissionType": "ALLOW"} for op in ("DESCRIBE", "WRITE")])
        rc, out, err = self.cli("acls", "remove", "--allow-principal", "User:alice", "--operation", "Write",
                                "--topic", tag, "--resource-pattern-type", "PREFIXED")
        self.assertEqual((rc, out), (0, "Removed 1 ACL(s).\n"), err)
        codes = [e.code() for e in self.produce("alice", tag + "-x", n=1)]
        self.assertEqual(codes, [KafkaError.TOPIC_AUTHORIZATION_FAILED])
        rc, out, err = self.cli("acls", "add", "--allow-principal", "User:alice", "--cluster", "--operation",
                                "Read")
        self.assertEqual((rc, err), (1, "Error: ResourceType CLUSTER only supports operations CREATE,CLUSTER_ACTION,"
                                        "DESCRIBE_CONFIGS,ALTER_CONFIGS,IDEMPOTENT_WRITE,ALTER,DESCRIBE\n"))


class WithoutAuthorizerTests(SynchronousTestCase):

    def test_acl_apis_answer_security_disabled(self):
        broker = KafkaBroker().start()
        self.addCleanup(broker.close)
        c = RawClient(broker)
        self.addCleanup(c.close)
        da = c.request(29, 3, m.DescribeAclsRequest(resource_type_filter=1, pattern_type_filter=1,
                                                    principal_filter=None, host_filter=None,
                                                    resource_name_filter=None, operation=1, permission_type=1))
        self.assertEqual(da.error_code, errors.SECURITY_DISABLED)

    def test_a_wrong_authorizer_stops_start_up(self):
        broker = KafkaBroker(overrides={"authorizer.class.name": "com.example.NoSuchAuthorizer"})
        self.addCleanup(broker.close)
        with self.assertRaises(BrokerStartError) as cm:
            broker.start()
        self.assertIn("Invalid value com.example.NoSuchAuthorizer for configuration authorizer.class.name: "
                      "cannot be loaded", cm.exception.reason)
        self.assertNotIn("\n", cm.exception.reason)
