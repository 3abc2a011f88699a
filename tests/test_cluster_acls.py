"""ACLs on a three-broker cluster (ZooKeeper mode): the ACL authorizer keeps them in ZooKeeper
as Kafka's (``/kafka-acl/<Type>/<name>``, ``/kafka-acl-extended/prefixed/...``, with change
notifications), so an ACL created or deleted through one broker is in force on every broker and
loaded by a broker that starts later. Skips without ZooKeeper unless KAFKATW_REQUIRE_ZOOKEEPER=1."""

import json

from twisted.trial import unittest

from kafkatw import testing
from kafkatw.protocol import errors
from kafkatw.protocol import messages as m
from tests.support import RawClient, poll_until, unique_name
from tests.test_cluster_e2e import require_zookeeper, zk_read

OVERRIDES = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
             # brokers talk to each other over PLAINTEXT as User:ANONYMOUS
             "super.users": "User:ANONYMOUS"}
TOPIC, GROUP = 2, 3
LITERAL, PREFIXED = 3, 4
READ, WRITE = 3, 4
ALLOW, DENY = 3, 2


def call(broker, api_key, version, body):
    client = RawClient(broker)
    try:
        return client.request(api_key, version, body)
    finally:
        client.close()


def described(broker):
    """{(resource type, name, pattern type, principal, operation, permission)} at ``broker``."""
    answer = call(broker, 29, 1, m.DescribeAclsRequest(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
        host_filter=None, operation=1, permission_type=1))
    assert answer.error_code == errors.NONE, answer
    return {(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.operation, a.permission_type)
            for r in answer.resources for a in r.acls}


class ClusterAclTests(unittest.SynchronousTestCase):
    def setUp(self):
        require_zookeeper()
        self.cluster = testing.KafkaCluster(brokers=3, overrides=OVERRIDES).start()
        self.addCleanup(self.cluster.close)

    def wait_everywhere(self, expected, what):
        for broker_id, broker in self.cluster.brokers.items():
            poll_until(lambda: described(broker) == expected, timeout=30,
                       message="%s at broker %d" % (what, broker_id))

    def test_acls_are_the_clusters(self):
        topic, group = unique_name("orders"), unique_name("g")
        C = m.CreateAclsRequest.AclCreation
        created = call(self.cluster.brokers[1], 30, 1, m.CreateAclsRequest(creations=[
            C(resource_type=TOPIC, resource_name=topic, resource_pattern_type=PREFIXED, principal="User:alice",
              host="*", operation=WRITE, permission_type=DENY),
            C(resource_type=GROUP, resource_name=group, resource_pattern_type=LITERAL, principal="User:bob",
              host="*", operation=READ, permission_type=ALLOW)]))
        self.assertEqual([r.error_code for r in created.results], [errors.NONE, errors.NONE])
        both = {(TOPIC, topic, PREFIXED, "User:alice", WRITE, DENY), (GROUP, group, LITERAL, "User:bob", READ, ALLOW)}
        self.wait_everywhere(both, "both ACLs")

        # Kafka's znodes and JSON
        data, _ = zk_read(self.cluster, "/kafka-acl-extended/prefixed/Topic/" + topic)
        self.assertEqual(json.loads(data), {"version": 1, "acls": [
            {"principal": "User:alice", "permissionType": "Deny", "operation": "Write", "host": "*"}]})
        data, _ = zk_read(self.cluster, "/kafka-acl/Group/" + group)
        self.assertEqual(json.loads(data)["acls"], [
            {"principal": "User:bob", "permissionType": "Allow", "operation": "Read", "host": "*"}])

        # deleted through another broker: gone on all
        deleted = call(self.cluster.brokers[3], 31, 1, m.DeleteAclsRequest(filters=[
            m.DeleteAclsRequest.DeleteAclsFilter(resource_type_filter=TOPIC, resource_name_filter=None,
                                                 pattern_type_filter=1, principal_filter=None, host_filter=None,
                                                 operation=1, permission_type=1)]))
        self.assertEqual([(f.error_code, len(f.matching_acls)) for f in deleted.filter_results], [(errors.NONE, 1)])
        only_group = {(GROUP, group, LITERAL, "User:bob", READ, ALLOW)}
        self.wait_everywhere(only_group, "the group's ACL alone")

        # a broker that was down meanwhile loads the cluster's ACLs when it starts
        self.cluster.brokers[2].stop()
        call(self.cluster.brokers[1], 30, 1, m.CreateAclsRequest(creations=[
            C(resource_type=TOPIC, resource_name="*", resource_pattern_type=LITERAL, principal="User:carol",
              host="*", operation=READ, permission_type=ALLOW)]))
        self.cluster.brokers[2].start()
        self.cluster.wait_for_brokers([1, 2, 3])
        self.wait_everywhere(only_group | {(TOPIC, "*", LITERAL, "User:carol", READ, ALLOW)}, "carol's ACL")
