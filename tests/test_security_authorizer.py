"""The ACL authorizer's decisions (Kafka's AclAuthorizerTest cases in spirit), filter matching
(MATCH/ANY), ACL validation and durability, loading through the plug-in registry, and requests
through KafkaApis with an authorizer that answers later (a Deferred parks the request)."""

import os

from twisted.internet import defer
from twisted.trial import unittest
from zope.interface import implementer

from kafkatw.config import ConfigError, KafkaConfig
from kafkatw.protocol import errors, messages
from kafkatw.security.acl_authorizer import AclAuthorizer
from kafkatw.security.authorizer import (
    ALLOWED,
    ANY_FILTER,
    DENIED,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation as Op,
    AclPermissionType as Perm,
    AclValidationError,
    Action,
    AuthorizableRequestContext,
    IAuthorizer,
    PatternType as PT,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType as RT,
    load_authorizer,
)
from kafkatw.security.principal import KafkaPrincipal
from tests.test_server_apis import ApisFixture

ALICE = KafkaPrincipal("User", "alice")


def binding(rtype, name, principal, op, perm=Perm.ALLOW, pattern=PT.LITERAL, host="*"):
    return AclBinding(ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, host, op, perm))


def ctx(principal=ALICE, host="10.0.0.1"):
    return AuthorizableRequestContext(principal=principal, host=host)


class AclAuthorizerTests(unittest.TestCase):

    def authorizer(self, *bindings, **configs):
        a = AclAuthorizer()
        a.configure(configs)
        self.assertEqual(self.successResultOf(a.create_acls(None, list(bindings))), [None] * len(bindings))
        return a

    def check(self, a, op, rtype, name, **kw):
        return a.authorize(ctx(**kw), [Action(op, ResourcePattern(rtype, name))])[0]

    def test_no_acl_denies_unless_allow_everyone(self):
        self.assertEqual(self.check(self.authorizer(), Op.READ, RT.TOPIC, "t"), DENIED)
        a = self.authorizer(**{"allow.everyone.if.no.acl.found": True})
        self.assertEqual(self.check(a, Op.READ, RT.TOPIC, "t"), ALLOWED)
        # an ACL on the resource for someone else: no longer "no ACL found"
        a = self.authorizer(binding(RT.TOPIC, "t", "User:bob", Op.READ), **{"allow.everyone.if.no.acl.found": True})
        self.assertEqual(self.check(a, Op.READ, RT.TOPIC, "t"), DENIED)

    def test_literal_wildcard_and_prefixed_patterns(self):
        a = self.authorizer(binding(RT.TOPIC, "orders-", "User:alice", Op.WRITE, pattern=PT.PREFIXED),
                            binding(RT.GROUP, "*", "User:alice", Op.READ),
                            binding(RT.TOPIC, "exact", "User:alice", Op.READ))
        self.assertEqual(self.check(a, Op.WRITE, RT.TOPIC, "orders-1"), ALLOWED)
        self.assertEqual(self.check(a, Op.WRITE, RT.TOPIC, "orders"), DENIED)
        self.assertEqual(self.check(a, Op.WRITE, RT.TOPIC, "payments"), DENIED)
        self.assertEqual(self.check(a, Op.READ, RT.GROUP, "any-group"), ALLOWED)
        self.assertEqual(self.check(a, Op.READ, RT.TOPIC, "exact"), ALLOWED)
        self.assertEqual(self.check(a, Op.READ, RT.TOPIC, "exact2"), DENIED)
        # the resource type matters
        self.assertEqual(self.check(a, Op.READ, RT.TRANSACTIONAL_ID, "exact"), DENIED)

    def test_deny_wins_and_hosts_and_wildcard_principal(self):
        a = self.authorizer(binding(RT.TOPIC, "t", "User:*", Op.WRITE),
                            binding(RT.TOPIC, "t", "User:alice", Op.WRITE, Perm.DENY, host="10.0.0.1"))
        self.assertEqual(self.check(a, Op.WRITE, RT.TOPIC, "t", host="10.0.0.1"), DENIED)
        self.assertEqual(self.check(a, Op.WRITE, RT.TOPIC, "t", host="10.0.0.2"), ALLOWED)
        self.assertEqual(self.check(a, Op.WRITE, RT.TOPIC, "t", principal=KafkaPrincipal("User", "bob"),
                                    host="10.0.0.1"), ALLOWED)
        # DENY ALL denies every operation; a DENY of READ does not deny DESCRIBE
        a = self.authorizer(binding(RT.TOPIC, "t", "User:alice", Op.ALL),
                            binding(RT.TOPIC, "t", "User:alice", Op.READ, Perm.DENY))
        self.assertEqual(self.check(a, Op.READ, RT.TOPIC, "t"), DENIED)
        self.assertEqual(self.check(a, Op.DESCRIBE, RT.TOPIC, "t"), ALLOWED)
        a = self.authorizer(binding(RT.TOPIC, "t", "User:alice", Op.ALL),
                            binding(RT.TOPIC, "t", "User:*", Op.ALL, Perm.DENY, pattern=PT.PREFIXED))
        self.assertEqual(self.check(a, Op.DESCRIBE, RT.TOPIC, "t"), DENIED)

    def test_implied_operations(self):
        for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
            a = self.authorizer(binding(RT.TOPIC, "t", "User:alice", op))
            self.assertEqual(self.check(a, Op.DESCRIBE, RT.TOPIC, "t"), ALLOWED, op)
            self.assertEqual(self.check(a, Op.DESCRIBE_CONFIGS, RT.TOPIC, "t"), DENIED, op)
        a = self.authorizer(binding(RT.TOPIC, "t", "User:alice", Op.ALTER_CONFIGS))
        self.assertEqual(self.check(a, Op.DESCRIBE_CONFIGS, RT.TOPIC, "t"), ALLOWED)
        self.assertEqual(self.check(a, Op.DESCRIBE, RT.TOPIC, "t"), DENIED)
        a = self.authorizer(binding(RT.TOPIC, "t", "User:alice", Op.DESCRIBE))
        self.assertEqual(self.check(a, Op.READ, RT.TOPIC, "t"), DENIED)
        a = self.authorizer(binding(RT.CLUSTER, "kafka-cluster", "User:alice", Op.ALL))
        self.assertEqual(self.check(a, Op.IDEMPOTENT_WRITE, RT.CLUSTER, "kafka-cluster"), ALLOWED)

    def test_super_users(self):
        a = self.authorizer(binding(RT.TOPIC, "t", "User:alice", Op.ALL, Perm.DENY),
                            **{"super.users": "User:alice; User:admin"})
        self.assertEqual(self.check(a, Op.ALTER, RT.CLUSTER, "kafka-cluster"), ALLOWED)
        self.assertEqual(self.check(a, Op.READ, RT.TOPIC, "t"), ALLOWED)
        self.assertRaises(ConfigError, AclAuthorizer().configure, {"super.users": "alice"})

    def test_filters_match_as_kafkas(self):
        lit = binding(RT.TOPIC, "orders-1", "User:a", Op.READ)
        star = binding(RT.TOPIC, "*", "User:a", Op.READ)
        pre = binding(RT.TOPIC, "orders-", "User:b", Op.WRITE, Perm.DENY, pattern=PT.PREFIXED)
        grp = binding(RT.GROUP, "orders-1", "User:a", Op.READ)
        a = self.authorizer(lit, star, pre, grp)

        def f(rtype, name, pattern, principal=None, op=Op.ANY, perm=Perm.ANY, host=None):
            return set(a.acls(AclBindingFilter(ResourcePatternFilter(rtype, name, pattern),
                                               AccessControlEntryFilter(principal, host, op, perm))))

        self.assertEqual(set(a.acls(ANY_FILTER)), {lit, star, pre, grp})
        self.assertEqual(f(RT.TOPIC, "orders-1", PT.MATCH), {lit, star, pre})
        self.assertEqual(f(RT.TOPIC, "orders-1", PT.ANY), {lit})
        self.assertEqual(f(RT.TOPIC, "orders-1", PT.LITERAL), {lit})
        self.assertEqual(f(RT.TOPIC, None, PT.PREFIXED), {pre})
        self.assertEqual(f(RT.ANY, "orders-1", PT.ANY), {lit, grp})
        self.assertEqual(f(RT.ANY, None, PT.ANY, principal="User:b"), {pre})
        self.assertEqual(f(RT.ANY, None, PT.ANY, perm=Perm.DENY, op=Op.WRITE), {pre})
        self.assertEqual(f(RT.ANY, None, PT.ANY, op=Op.READ, host="*"), {lit, star, grp})

    def test_invalid_acls_are_refused_one_by_one(self):
        a = AclAuthorizer()
        good = binding(RT.TOPIC, "t", "User:a", Op.READ)
        bad = [binding(RT.ANY, "t", "User:a", Op.READ), binding(RT.TOPIC, "t", "User:a", Op.READ, pattern=PT.MATCH),
               binding(RT.TOPIC, "t", "User:a", Op.ANY), binding(RT.TOPIC, "", "User:a", Op.READ),
               binding(RT.CLUSTER, "other", "User:a", Op.ALTER), binding(RT.TOPIC, "t", "alice", Op.READ)]
        results = self.successResultOf(a.create_acls(None, bad + [good]))
        self.assertEqual([type(r) for r in results], [AclValidationError] * len(bad) + [type(None)])
        self.assertEqual(str(results[4]), "The only valid name for the CLUSTER resource is kafka-cluster")
        self.assertEqual(a.acls(ANY_FILTER), [good])

    def test_audit_log_names_principal_host_operation_and_resource(self):
        path = os.path.abspath(self.mktemp())
        a = self.authorizer(binding(RT.TOPIC, "t", "User:alice", Op.READ),
                            **{"kafkatw.authorizer.log.file": path})
        a.start(None)
        self.addCleanup(a.stop)
        context = AuthorizableRequestContext(principal=ALICE, host="10.0.0.1", request_type=1)
        a.authorize(context, [Action(Op.READ, ResourcePattern(RT.TOPIC, "t")),
                              Action(Op.WRITE, ResourcePattern(RT.TOPIC, "t")),
                              Action(Op.WRITE, ResourcePattern(RT.TOPIC, "quiet"), 1, True, False)])
        with open(path) as f:
            lines = f.read().splitlines()
        self.assertEqual(lines, [
            "Principal = User:alice is Denied operation = WRITE from host = 10.0.0.1 on resource = "
            "ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL) for request = Fetch with "
            "resourceRefCount = 1 based on no matching ACL"])
        a.log_allowed = True
        a.authorize(context, [Action(Op.READ, ResourcePattern(RT.TOPIC, "t"))])
        with open(path) as f:
            self.assertIn("Principal = User:alice is Allowed operation = READ from host = 10.0.0.1 on resource = "
                          "ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL) for request = Fetch "
                          "with resourceRefCount = 1 based on rule (pattern=ResourcePattern(resourceType=TOPIC, "
                          "name=t, patternType=LITERAL), entry=(principal=User:alice, host=*, operation=READ, "
                          "permissionType=ALLOW))", f.read().splitlines()[-1])

    def test_cached_decisions_follow_every_acl_change(self):
        """The same context and Action objects asked again (as the broker does): each answer
        follows the ACLs as they are now, after creates, deletes and a reconfiguration."""
        path = os.path.abspath(self.mktemp())
        a = self.authorizer(**{"kafkatw.authorizer.log.file": path})
        a.start(None)
        self.addCleanup(a.stop)
        write = [Action(Op.WRITE, ResourcePattern(RT.TOPIC, "t"))]
        here, there = ctx(host="10.0.0.1"), ctx(host="10.0.0.2")
        self.assertEqual(a.authorize(here, write), [DENIED])
        self.assertEqual(a.authorize(here, write), [DENIED])
        allow = binding(RT.TOPIC, "t", "User:alice", Op.WRITE)
        self.successResultOf(a.create_acls(None, [allow]))
        self.assertEqual(a.authorize(here, write) + a.authorize(there, write), [ALLOWED, ALLOWED])
        deny = binding(RT.TOPIC, "t", "User:alice", Op.WRITE, perm=Perm.DENY, host="10.0.0.2")
        self.successResultOf(a.create_acls(None, [deny]))
        self.assertEqual(a.authorize(here, write) + a.authorize(there, write), [ALLOWED, DENIED])
        self.successResultOf(a.delete_acls(None, [AclBindingFilter(
            ResourcePatternFilter(RT.TOPIC, "t", PT.LITERAL),
            AccessControlEntryFilter(None, None, Op.ANY, Perm.DENY))]))
        self.assertEqual(a.authorize(there, write), [ALLOWED])
        self.successResultOf(a.delete_acls(None, [ANY_FILTER]))
        self.assertEqual(a.authorize(here, write), [DENIED])
        a.configure({"super.users": "User:alice"})
        self.assertEqual(a.authorize(here, write), [ALLOWED])
        # a cached denial is still audited every time it is asked
        with open(path) as f:
            denials = [line for line in f if " is Denied " in line]
        self.assertEqual(len(denials), 4)

    def test_the_decision_cache_is_bounded(self):
        from kafkatw.security import acl_authorizer

        self.patch(acl_authorizer, "DECISION_CACHE_LIMIT", 10)
        a = self.authorizer(binding(RT.TOPIC, "t-", "User:alice", Op.READ, pattern=PT.PREFIXED))
        context = ctx()
        for i in range(25):
            action = Action(Op.READ, ResourcePattern(RT.TOPIC, "t-%d" % i))
            self.assertEqual(a.authorize(context, [action]), [ALLOWED])
            self.assertLessEqual(len(a._decisions), 10)

    def test_durable_and_reloaded(self):
        path = os.path.join(self.mktemp())
        os.makedirs(path)
        a = AclAuthorizer(os.path.join(path, "acls.json"))
        b1, b2 = binding(RT.TOPIC, "t", "User:a", Op.READ), binding(RT.GROUP, "g", "User:a", Op.READ)
        self.successResultOf(a.create_acls(None, [b1, b2, b1]))
        deleted = self.successResultOf(a.delete_acls(None, [AclBindingFilter(
            ResourcePatternFilter(RT.GROUP, None, PT.ANY), AccessControlEntryFilter(None, None, Op.ANY, Perm.ANY))]))
        self.assertEqual(deleted, [[b2]])
        again = AclAuthorizer(os.path.join(path, "acls.json"))
        again.start(None)
        self.assertEqual(again.acls(ANY_FILTER), [b1])


class LoadingTests(unittest.TestCase):

    def test_kafka_class_names_select_the_acl_authorizer(self):
        for name in ("kafka.security.authorizer.AclAuthorizer",
                     "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "acl",
                     "kafkatw.security.acl_authorizer.AclAuthorizer"):
            a = load_authorizer(KafkaConfig.from_properties({"authorizer.class.name": name,
                                                             "super.users": "User:root"}))
            self.assertIsInstance(a, AclAuthorizer)
            self.assertEqual(a.super_users, {"User:root"})
        self.assertIsNone(load_authorizer(KafkaConfig.from_properties({})))

    def test_something_else_is_one_line(self):
        e = self.assertRaises(ConfigError, load_authorizer,
                              KafkaConfig.from_properties({"authorizer.class.name": "kafkatw.config.KafkaConfig"}))
        self.assertIn("authorizer.class.name", str(e))
        self.assertNotIn("\n", str(e))


@implementer(IAuthorizer)
class LaterAuthorizer:
    """Answers every authorize() with a Deferred the test fires: alice may WRITE topic t only."""

    def __init__(self):
        self.pending = []

    def start(self, info):
        pass

    def stop(self):
        pass

    def authorize(self, context, actions):
        d = defer.Deferred()
        answer = [ALLOWED if (context.principal.name == "alice" and a.operation in (Op.WRITE, Op.DESCRIBE)
                              and a.resource.name == "t") else DENIED for a in actions]
        self.pending.append((d, answer))
        return d

    def create_acls(self, context, bindings):
        return [None for _ in bindings]

    def delete_acls(self, context, filters):
        return [[] for _ in filters]

    def acls(self, filter):
        return []

    def release(self):
        pending, self.pending = self.pending, []
        for d, answer in pending:
            d.callback(answer)


class SlowStart(LaterAuthorizer):
    """An authorizer whose start() answers with a Deferred the test fires."""

    pending = None

    def configure(self, configs):
        pass

    def start(self, info):
        return SlowStart.pending


class AuthorizerStartTests(unittest.TestCase):
    """Kafka's listeners wait for the authorizer's start futures: so do kafkatw's."""

    @defer.inlineCallbacks
    def test_listeners_accept_once_the_authorizer_has_started(self):
        import socket

        from twisted.internet import reactor
        from twisted.internet.task import deferLater

        from kafkatw.service import BrokerService

        SlowStart.pending = defer.Deferred()
        config = KafkaConfig.from_properties({
            "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": os.path.abspath(self.mktemp()),
            "authorizer.class.name": "tests.test_security_authorizer.SlowStart",
            "kafkatw.request.log.enable": "false"})
        broker = BrokerService(config, reactor=reactor)
        broker.startService()
        self.addCleanup(broker.stopService)
        server = broker.socket_server
        sock = socket.create_connection(("127.0.0.1", server.bound_port("PLAINTEXT")))
        self.addCleanup(sock.close)
        for _ in range(10):  # the kernel took the connection; the broker must not
            yield deferLater(reactor, 0.05, lambda: None)
        self.assertEqual(len(server.connections), 0)
        SlowStart.pending.callback(None)
        for _ in range(200):
            if server.connections:
                break
            yield deferLater(reactor, 0.05, lambda: None)
        self.assertEqual(len(server.connections), 1)


    @defer.inlineCallbacks
    def test_listeners_stay_closed_when_the_start_already_failed(self):
        """A start() Deferred that has already failed keeps the listeners closed too (fail
        closed); it was only logged, and the broker accepted connections without an authorizer
        ready."""
        import socket

        from twisted.internet import reactor
        from twisted.internet.task import deferLater

        from kafkatw.service import BrokerService

        SlowStart.pending = defer.fail(RuntimeError("the ACL store is unreachable"))
        config = KafkaConfig.from_properties({
            "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": os.path.abspath(self.mktemp()),
            "authorizer.class.name": "tests.test_security_authorizer.SlowStart",
            "kafkatw.request.log.enable": "false"})
        broker = BrokerService(config, reactor=reactor)
        broker.startService()
        self.addCleanup(broker.stopService)
        server = broker.socket_server
        sock = socket.create_connection(("127.0.0.1", server.bound_port("PLAINTEXT")))
        self.addCleanup(sock.close)
        for _ in range(10):
            yield deferLater(reactor, 0.05, lambda: None)
        self.assertEqual(len(server.connections), 0)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)


class RulesTests(unittest.TestCase):

    def test_every_served_api_has_authorization_rules(self):
        """An API without rules is refused with an authorizer (fail closed); none should be."""
        from kafkatw.server import authz
        from kafkatw.server.apis import DEFAULT_HANDLERS

        missing = sorted(messages.API_NAMES[h.API_KEY] for h in DEFAULT_HANDLERS
                         if h.API_KEY not in authz.ACTIONS and h.API_KEY not in authz.UNCHECKED)
        self.assertEqual(missing, [])


class DeferredAuthorizerApisTests(ApisFixture, unittest.TestCase):
    """A request waits for the authorizer's Deferred, then is answered with its decisions."""

    def test_metadata_waits_then_hides_what_is_denied(self):
        self.create_topic("t")
        self.create_topic("u")
        authorizer = LaterAuthorizer()
        self.apis = self.make_apis(authorizer=authorizer)
        d = self.apis.handle(self.request(messages.MetadataRequest(topics=None), 12, principal=ALICE))
        self.assertNoResult(d)
        authorizer.release()
        resp = self.successResultOf(d)
        self.assertEqual([t.name for t in resp.body.topics], ["t"])

    def test_join_group_denied_after_the_wait(self):
        authorizer = LaterAuthorizer()
        self.apis = self.make_apis(authorizer=authorizer)
        body = messages.JoinGroupRequest(group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                         member_id="", protocol_type="consumer", protocols=[])
        d = self.apis.handle(self.request(body, 5, principal=ALICE))
        self.assertNoResult(d)
        authorizer.release()
        self.assertEqual(self.successResultOf(d).body.error_code, errors.GROUP_AUTHORIZATION_FAILED)

    def test_an_authorizer_failure_is_an_error_answer_not_a_hang(self):
        authorizer = LaterAuthorizer()
        self.apis = self.make_apis(authorizer=authorizer)
        body = messages.JoinGroupRequest(group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                         member_id="", protocol_type="consumer", protocols=[])
        d = self.apis.handle(self.request(body, 5, principal=ALICE))
        authorizer.pending[0][0].errback(RuntimeError("service down"))
        authorizer.pending = []
        self.assertEqual(self.successResultOf(d).body.error_code, errors.UNKNOWN_SERVER_ERROR)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_produce_with_a_transactional_id_it_may_not_write_is_refused_whole(self):
        from tests.test_server_handlers_produce import ProduceTests, batch, produce

        self.create_topic("t", partitions=2)
        authorizer = LaterAuthorizer()  # alice may WRITE topic t, not transactional id "tx"
        self.apis = self.make_apis(authorizer=authorizer)
        self.apis.txn_coordinator = object()  # past the "no coordinator" refusal
        body = produce([("t", 0, batch()), ("t", 1, batch())], transactional_id="tx")
        d = self.apis.handle(self.request(body, 9, principal=ALICE))
        authorizer.release()
        resp = self.successResultOf(d).body
        self.assertEqual([p[:3] for p in ProduceTests.partitions(self, resp)],
                         [("t", 0, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                          ("t", 1, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)])

    def test_an_incremental_fetch_has_its_session_partitions_decided(self):
        """Partitions of the fetch session not named in an incremental Fetch are authorized
        with the rest (planned), not DENIED as unplanned by an asynchronous authorizer."""
        from kafkatw.server.fetch_session import FetchManager, FetchSessionCache
        from tests.test_server_handlers_fetch import fetch_request

        class ReadLater(LaterAuthorizer):
            def authorize(self, context, actions):
                d = defer.Deferred()
                self.pending.append((d, [ALLOWED if a.resource.name == "t" and a.operation == Op.READ
                                         else DENIED for a in actions]))
                return d

        self.create_topic("t", 2)
        authorizer = ReadLater()
        self.apis = self.make_apis(authorizer=authorizer,
                                   fetch_manager=FetchManager(self.clock, FetchSessionCache()))

        def fetch(body):
            d = self.apis.handle(self.request(body, 12, principal=ALICE))
            authorizer.release()
            self.clock.advance(1)
            return self.successResultOf(d).body.to_message()

        full = fetch(fetch_request([("t", [(0, 0), (1, 0)])], 12, session_id=0, epoch=0))
        self.assertEqual([(p.partition_index, p.error_code) for t in full.responses for p in t.partitions],
                         [(0, errors.NONE), (1, errors.NONE)])
        incremental = fetch(fetch_request([], 12, session_id=full.session_id, epoch=1))
        self.assertEqual((incremental.error_code, incremental.responses), (errors.NONE, []))
        self.assertEqual([tp for tp, _ in self.replica_manager.fetches[-1][1]], [("t", 0), ("t", 1)])

    def test_a_follower_fetch_needs_cluster_action_only(self):
        """A Fetch from a replica (replica_id before v15, replica_state from v15) asks for
        CLUSTER_ACTION on the cluster and nothing else; denied, it is refused whole."""
        from tests.test_server_handlers_fetch import fetch_request

        class Recording(LaterAuthorizer):
            def authorize(self, context, actions):
                self.pending.extend(actions)
                return [DENIED for _ in actions]

        info = self.create_topic("t")
        for version, replica in ((12, "replica_id"), (15, "replica_state")):
            authorizer = Recording()
            self.apis = self.make_apis(authorizer=authorizer)
            body = fetch_request([("t" if version < 13 else info.topic_id, [(0, 0)])], version)
            if replica == "replica_id":
                body.replica_id = 1
            else:
                body.replica_state = messages.FetchRequest.ReplicaState(replica_id=1, replica_epoch=1)
            resp = self.successResultOf(self.apis.handle(self.request(body, version, principal=ALICE)))
            self.assertEqual(resp.body.to_message().error_code, errors.TOPIC_AUTHORIZATION_FAILED, version)
            self.assertEqual([(a.operation, a.resource.resource_type) for a in authorizer.pending],
                             [(Op.CLUSTER_ACTION, RT.CLUSTER)], version)

    def test_offset_fetch_plans_every_topic_only_for_a_group_asking_for_all(self):
        """DESCRIBE on every topic is planned only when a group asks for all its offsets (the
        answer is filtered by it); named topics are planned alone."""
        from kafkatw.protocol.messages import OffsetFetchRequest as R

        class Recording(LaterAuthorizer):
            def authorize(self, context, actions):
                self.pending.extend(actions)
                return [ALLOWED for _ in actions]

        class Coordinator:
            def handle_fetch_offsets(self, group_id, wanted, require_stable, member_id=None, member_epoch=None):
                return errors.NONE, {}

        self.create_topic("t")
        self.create_topic("u")
        for version, topics, described in ((8, [R.OffsetFetchRequestTopics(name="t", partition_indexes=[0])], ["t"]),
                                           (8, None, ["t", "u"]),
                                           (7, [R.OffsetFetchRequestTopic(name="t", partition_indexes=[0])], ["t"]),
                                           (7, None, ["t", "u"])):
            authorizer = Recording()
            self.apis = self.make_apis(authorizer=authorizer, group_coordinator=Coordinator())
            if version >= 8:
                body = R(groups=[R.OffsetFetchRequestGroup(group_id="g", topics=topics)], require_stable=False)
            else:
                body = R(group_id="g", topics=topics, require_stable=False)
            self.successResultOf(self.apis.handle(self.request(body, version, principal=ALICE)))
            self.assertEqual(sorted(a.resource.name for a in authorizer.pending
                                    if a.resource.resource_type == RT.TOPIC), described, (version, topics))

    def test_list_groups_waits_then_lists_the_groups_it_may_describe(self):
        """Without DESCRIBE on the cluster, ListGroups lists the classic and KIP-848 groups the
        principal may describe: each group's decision is planned, not DENIED as unplanned."""
        from types import SimpleNamespace

        class GroupsLater(LaterAuthorizer):
            def authorize(self, context, actions):
                d = defer.Deferred()
                self.pending.append((d, [ALLOWED if a.resource.resource_type == RT.GROUP
                                         and a.resource.name in ("classic-yes", "consumer-yes") else DENIED
                                         for a in actions]))
                return d

        class Coordinator:
            groups = {"classic-yes": None, "classic-no": None, "both": None}
            consumer = SimpleNamespace(groups={"consumer-yes": None, "both": None})

            def handle_list_groups(self, states_filter=(), types_filter=()):
                return errors.NONE, [("classic-yes", "consumer", "Empty", "classic"),
                                     ("classic-no", "consumer", "Empty", "classic"),
                                     ("consumer-yes", "consumer", "Stable", "consumer"),
                                     ("both", "consumer", "Stable", "consumer")]

        authorizer = GroupsLater()
        self.apis = self.make_apis(authorizer=authorizer, group_coordinator=Coordinator())
        d = self.apis.handle(self.request(messages.ListGroupsRequest(), 4, principal=ALICE))
        self.assertNoResult(d)
        authorizer.release()
        body = self.successResultOf(d).body
        self.assertEqual((body.error_code, [g.group_id for g in body.groups]),
                         (errors.NONE, ["classic-yes", "consumer-yes"]))

    def txn_apis(self):
        class TxnLater(LaterAuthorizer):
            """Allows transactional id tx, group g and topic t (every operation)."""

            def authorize(self, context, actions):
                d = defer.Deferred()
                granted = {(RT.TRANSACTIONAL_ID, "tx"), (RT.GROUP, "g"), (RT.TOPIC, "t")}
                self.pending.append((d, [ALLOWED if (a.resource.resource_type, a.resource.name) in granted
                                         else DENIED for a in actions]))
                return d

        self.create_topic("t")
        self.create_topic("u")
        authorizer = TxnLater()
        self.apis = self.make_apis(authorizer=authorizer)
        self.apis.txn_coordinator = object()  # never reached: refused or unknown partitions first

        def call(body, version):
            d = self.apis.handle(self.request(body, version, principal=ALICE))
            authorizer.release()
            body = self.successResultOf(d).body
            return body.to_message() if hasattr(body, "to_message") else body
        return call

    def test_add_partitions_to_txn_answers_per_partition(self):
        call = self.txn_apis()
        R = messages.AddPartitionsToTxnRequest

        def add(tid):
            body = R(v3_and_below_transactional_id=tid, v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
                     v3_and_below_topics=[R.AddPartitionsToTxnTopic(name=n, partitions=[0]) for n in ("t", "u")])
            resp = call(body, 3)
            return [(t.name, p.partition_index, p.partition_error_code)
                    for t in resp.results_by_topic_v3_and_below for p in t.results_by_partition]

        # Kafka: the refused topic's partitions say why, the others were not attempted
        self.assertEqual(add("tx"), [("t", 0, errors.OPERATION_NOT_ATTEMPTED),
                                     ("u", 0, errors.TOPIC_AUTHORIZATION_FAILED)])
        self.assertEqual(add("other"), [("t", 0, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                                        ("u", 0, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)])

    def test_add_partitions_to_txn_refuses_kafkas_internal_topics_only(self):
        """Kafka's Topic.isInternal (__consumer_offsets, __transaction_state) is refused even
        with WRITE on it; a user topic whose name starts with "__" is decided by its ACLs."""
        class AllowAll(LaterAuthorizer):
            def authorize(self, context, actions):
                return [ALLOWED for _ in actions]

        self.create_topic("__consumer_offsets")
        self.create_topic("__mine")
        self.apis = self.make_apis(authorizer=AllowAll())
        self.apis.txn_coordinator = object()  # never reached: a refused partition stops the request
        R = messages.AddPartitionsToTxnRequest
        body = R(v3_and_below_transactional_id="tx", v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
                 v3_and_below_topics=[R.AddPartitionsToTxnTopic(name=n, partitions=[0])
                                      for n in ("__consumer_offsets", "__mine")])
        resp = self.successResultOf(self.apis.handle(self.request(body, 3, principal=ALICE))).body
        self.assertEqual([(t.name, p.partition_error_code) for t in resp.results_by_topic_v3_and_below
                          for p in t.results_by_partition],
                         [("__consumer_offsets", errors.TOPIC_AUTHORIZATION_FAILED),
                          ("__mine", errors.OPERATION_NOT_ATTEMPTED)])

    def test_txn_offset_commit_answers_per_topic(self):
        call = self.txn_apis()
        R = messages.TxnOffsetCommitRequest

        def commit(tid, group):
            body = R(transactional_id=tid, group_id=group, producer_id=1, producer_epoch=0, generation_id=-1,
                     member_id="", group_instance_id=None, topics=[
                         R.TxnOffsetCommitRequestTopic(name=n, partitions=[R.TxnOffsetCommitRequestPartition(
                             partition_index=i, committed_offset=5, committed_leader_epoch=-1,
                             committed_metadata="")]) for n, i in (("t", 7), ("u", 0))])
            return [(t.name, p.partition_index, p.error_code) for t in call(body, 3).topics for p in t.partitions]

        self.assertEqual(commit("tx", "g"), [("t", 7, errors.UNKNOWN_TOPIC_OR_PARTITION),
                                             ("u", 0, errors.TOPIC_AUTHORIZATION_FAILED)])
        self.assertEqual(commit("tx", "h"), [("t", 7, errors.GROUP_AUTHORIZATION_FAILED),
                                             ("u", 0, errors.GROUP_AUTHORIZATION_FAILED)])
        self.assertEqual(commit("other", "g"), [("t", 7, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                                                ("u", 0, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)])

    def test_describe_transactions_answers_per_id_and_hides_topics(self):
        import types

        call = self.txn_apis()
        txn = types.SimpleNamespace(state="Ongoing", txn_timeout_ms=60000, txn_start_timestamp=5, producer_id=1,
                                    producer_epoch=0, partitions={("t", 0), ("u", 0)})
        self.apis.txn_coordinator = types.SimpleNamespace(
            handle_describe_transactions=lambda tid: (errors.NONE, txn))
        resp = call(messages.DescribeTransactionsRequest(transactional_ids=["tx", "other"]), 0)
        self.assertEqual([(s.transactional_id, s.error_code, [(t.topic, list(t.partitions)) for t in s.topics])
                          for s in resp.transaction_states],
                         [("tx", errors.NONE, [("t", [0])]),
                          ("other", errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, [])])

    def test_list_transactions_lists_what_the_principal_may_describe(self):
        import types

        call = self.txn_apis()
        txns = [types.SimpleNamespace(transactional_id=t, producer_id=i, state="Ongoing")
                for i, t in enumerate(["other", "tx"])]
        self.apis.txn_coordinator = types.SimpleNamespace(
            handle_list_transactions=lambda states, pids, duration: (errors.NONE, [], txns))
        resp = call(messages.ListTransactionsRequest(state_filters=[], producer_id_filters=[], duration_filter=-1), 1)
        self.assertEqual((resp.error_code, [t.transactional_id for t in resp.transaction_states]),
                         (errors.NONE, ["tx"]))


class FakeAclZooKeeper:
    """The ACL part of the cluster coordinator over dicts: nodes with versions, sequential
    change notifications, and a child watch per store fired when one is added."""

    def __init__(self):
        self.nodes = {}  # (pattern type, resource type, name) -> (data, version)
        self.changes = {"LITERAL": [], "PREFIXED": []}
        self.watches = {"LITERAL": [], "PREFIXED": []}
        self.conflicts = 0  # the next writes that find the node changed under them

    def acl_resources(self, pattern_type):
        return defer.succeed(sorted((t, n, d) for (p, t, n), (d, _) in self.nodes.items() if p == pattern_type))

    def resource_acls(self, pattern_type, resource_type, name):
        return defer.succeed(self.nodes.get((pattern_type, resource_type, name), (None, -1)))

    def write_resource_acls(self, pattern_type, resource_type, name, data, expected_version):
        key = (pattern_type, resource_type, name)
        if self.conflicts:
            self.conflicts -= 1
            return defer.succeed(False)
        if self.nodes.get(key, (None, -1))[1] != expected_version:
            return defer.succeed(False)
        if data is None:
            self.nodes.pop(key, None)
        else:
            self.nodes[key] = (data, expected_version + 1)
        seq = "acl_changes_%010d" % len(self.changes[pattern_type])
        self.changes[pattern_type].append((seq, resource_type, name))
        watches, self.watches[pattern_type] = self.watches[pattern_type], []
        for w in watches:
            w()
        return defer.succeed(True)

    def acl_changes(self, pattern_type, watch=None, after=""):
        if watch is not None:
            self.watches[pattern_type].append(watch)
        return defer.succeed([c for c in self.changes[pattern_type] if c[0] > after])

    state_listeners = ()
    purges = ()

    def purge_acl_changes(self, pattern_type, max_age_ms, now_ms):
        self.purges = tuple(self.purges) + ((pattern_type, max_age_ms, now_ms),)
        return defer.succeed(0)

    def add_state_listener(self, listener):
        self.state_listeners = tuple(self.state_listeners) + (listener,)

    def expire_session(self):
        """Session lost: the watches set in it never fire."""
        self.watches = {"LITERAL": [], "PREFIXED": []}
        for listener in self.state_listeners:
            listener("LOST")


class ZkAclStoreTests(unittest.TestCase):
    """In cluster mode the ACL authorizer keeps the ACLs in ZooKeeper in Kafka's layout and
    JSON; each broker follows the change notifications, so an ACL created through one broker is
    enforced by all."""

    def broker(self, zk, **configs):
        from types import SimpleNamespace

        a = AclAuthorizer()
        a.configure(dict({"zookeeper.connect": "zk:2181"}, **configs))
        self.successResultOf(a.start(SimpleNamespace(coordination_store=zk, log_dirs=["/nonexistent"])))
        return a

    def test_an_acl_created_through_one_broker_holds_on_the_others(self):
        zk = FakeAclZooKeeper()
        one, two = self.broker(zk), self.broker(zk)
        deny = binding(RT.TOPIC, "orders-", "User:alice", Op.WRITE, Perm.DENY, pattern=PT.PREFIXED)
        allow = binding(RT.TOPIC, "*", "User:alice", Op.ALL)
        self.assertEqual(self.successResultOf(one.create_acls(None, [deny, allow])), [None, None])
        for a in (one, two):
            self.assertEqual(self.check(a, Op.WRITE, RT.TOPIC, "orders-1"), DENIED)
            self.assertEqual(self.check(a, Op.WRITE, RT.TOPIC, "payments"), ALLOWED)
        # Kafka's nodes and JSON
        self.assertEqual(sorted(zk.nodes), [("LITERAL", "Topic", "*"), ("PREFIXED", "Topic", "orders-")])
        self.assertEqual(zk.nodes[("PREFIXED", "Topic", "orders-")][0],
                         b'{"acls":[{"host":"*","operation":"Write","permissionType":"Deny",'
                         b'"principal":"User:alice"}],"version":1}')
        # deleted through the other broker: gone everywhere, the emptied node removed
        flt = AclBindingFilter(ResourcePatternFilter(RT.ANY, None, PT.PREFIXED),
                               AccessControlEntryFilter(None, None, Op.ANY, Perm.ANY))
        self.assertEqual(self.successResultOf(two.delete_acls(None, [flt])), [[deny]])
        for a in (one, two):
            self.assertEqual(self.check(a, Op.WRITE, RT.TOPIC, "orders-1"), ALLOWED)
            self.assertEqual(a.acls(ANY_FILTER), [allow])
        self.assertEqual(sorted(zk.nodes), [("LITERAL", "Topic", "*")])
        # a broker starting later loads them
        self.assertEqual(self.broker(zk).acls(ANY_FILTER), [allow])

    def test_a_write_that_lost_a_race_reads_again(self):
        zk = FakeAclZooKeeper()
        a = self.broker(zk)
        zk.conflicts = 3
        b = binding(RT.GROUP, "g", "User:bob", Op.READ)
        self.assertEqual(self.successResultOf(a.create_acls(None, [b])), [None])
        self.assertEqual(a.acls(ANY_FILTER), [b])
        zk.conflicts = 1000  # never wins: an error for that binding, nothing in force
        c = binding(RT.GROUP, "h", "User:bob", Op.READ)
        result = self.successResultOf(a.create_acls(None, [c]))
        self.assertIsInstance(result[0], OSError)
        self.assertIn("kept changing", str(result[0]))
        self.assertEqual(a.acls(ANY_FILTER), [b])
        self.flushLoggedErrors()

    def test_changes_missed_while_the_session_was_lost_are_read_after(self):
        zk = FakeAclZooKeeper()
        one, two = self.broker(zk), self.broker(zk)
        zk.state_listeners = (two._zk._session_state,)  # only broker two loses its session
        zk.expire_session()
        b = binding(RT.TOPIC, "t", "User:bob", Op.READ)
        self.assertEqual(self.successResultOf(one.create_acls(None, [b])), [None])
        self.assertEqual(two.acls(ANY_FILTER), [])  # its watch went with the session
        two._zk._session_state("CONNECTED")
        self.assertEqual(two.acls(ANY_FILTER), [b])

    def test_old_change_notifications_are_purged_at_most_once_a_minute(self):
        from types import SimpleNamespace

        from twisted.internet import task

        clock = task.Clock()
        clock.advance(1000)
        zk = FakeAclZooKeeper()
        a = AclAuthorizer()
        a.configure({"zookeeper.connect": "zk:2181"})
        self.successResultOf(a.start(SimpleNamespace(coordination_store=zk, log_dirs=[], reactor=clock)))
        for i in range(3):
            self.successResultOf(a.create_acls(None, [binding(RT.TOPIC, "t%d" % i, "User:bob", Op.READ)]))
        self.assertEqual(zk.purges, (("LITERAL", 15 * 60 * 1000, 1000000),))
        clock.advance(61)
        self.successResultOf(a.create_acls(None, [binding(RT.TOPIC, "u", "User:bob", Op.READ)]))
        self.assertEqual(zk.purges[1:], (("LITERAL", 15 * 60 * 1000, 1061000),))

    def test_a_change_updates_only_its_pattern_and_the_echo_of_a_write_nothing(self):
        """Each change notification used to rebuild the whole ACL index (and forget every cached
        decision), also for the notification of this broker's own write."""
        import random

        from kafkatw.security import acl_authorizer

        zk = FakeAclZooKeeper()
        one, two = self.broker(zk), self.broker(zk)
        builds = []
        real = acl_authorizer._Index
        self.patch(acl_authorizer, "_Index", lambda bindings: builds.append(1) or real(bindings))
        rnd = random.Random(7)
        names = ["t", "t-1", "t-12", "u", "*"]
        for _ in range(60):  # random creates and deletes through either broker
            pattern = rnd.choice([PT.LITERAL, PT.PREFIXED])
            b = binding(rnd.choice([RT.TOPIC, RT.GROUP]), rnd.choice(names), rnd.choice(["User:a", "User:*"]),
                        rnd.choice([Op.READ, Op.WRITE, Op.ALL]), rnd.choice([Perm.ALLOW, Perm.DENY]),
                        pattern=pattern)
            broker = rnd.choice([one, two])
            if rnd.random() < 0.7:
                self.successResultOf(broker.create_acls(None, [b]))
            else:
                flt = AclBindingFilter(ResourcePatternFilter(b.pattern.resource_type, b.pattern.name, pattern),
                                       AccessControlEntryFilter(None, None, Op.ANY, Perm.ANY))
                self.successResultOf(broker.delete_acls(None, [flt]))
        self.assertEqual(builds, [])
        # the index kept in step is the one the bindings give (every name, type and principal)
        for a in (one, two):
            fresh = real(a.acls(ANY_FILTER))
            for rtype in (RT.TOPIC, RT.GROUP):
                for name in names + ["t-123", "v"]:
                    for principal in ("User:a", "User:b"):
                        got, want = a._index.matching(rtype, name, principal), fresh.matching(rtype, name, principal)
                        self.assertEqual((got[0], sorted(map(str, got[1]))), (want[0], sorted(map(str, want[1]))))
        self.assertEqual(sorted(map(str, one.acls(ANY_FILTER))), sorted(map(str, two.acls(ANY_FILTER))))
        # the notification of a write that changed nothing here keeps the cached decisions
        decisions = one._decisions
        pattern = one.acls(ANY_FILTER)[0].pattern
        one._replace(pattern, one._index.entries(pattern))
        self.assertIs(one._decisions, decisions)

    def test_cluster_mode_needs_a_store_that_keeps_acls(self):
        from types import SimpleNamespace

        a = AclAuthorizer()
        a.configure({"zookeeper.connect": "zk:2181"})
        with self.assertRaises(ValueError) as cm:
            a.start(SimpleNamespace(coordination_store=object(), log_dirs=["/nonexistent"]))
        self.assertIn("in cluster mode the ACLs are kept in ZooKeeper", str(cm.exception))

    check = AclAuthorizerTests.check
