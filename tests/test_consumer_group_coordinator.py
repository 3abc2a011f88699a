"""KIP-848 consumer groups through the request handlers, on real logs and a task.Clock:
joining by ConsumerGroupHeartbeat, reconciliation (a partition revoked before it is assigned
elsewhere), fencing, lost responses, session and revocation timeouts, leaving, static members,
regex subscriptions re-evaluated on topic creation, offsets with member epochs, describe and
list, classic <-> consumer conversion of empty groups and online (classic members working in
a consumer group), offset delete and transactional commits, reload after restart,
authorization; the uniform and range assignors on their own; the timeout configs."""

from twisted.trial import unittest

from kafkatw.coordinator.group.consumer_classic import decode_assignment, encode_assignment
from kafkatw.coordinator.group.group import parse_subscription_topics
from kafkatw.coordinator.group.assignors import (
    AssignmentMember,
    AssignmentTopic,
    RangeAssignor,
    UniformAssignor,
    assignors_from_config,
)
from kafkatw.config import ConfigError, KafkaConfig
from kafkatw.protocol import errors
from kafkatw.protocol import messages as m
from tests.test_group_coordinator import GroupFixture
from tests.test_security_authorizer import ALICE, LaterAuthorizer
from tests.test_server_apis import ApisFixture

HB = m.ConsumerGroupHeartbeatRequest
OVERRIDES = {"group.consumer.session.timeout.ms": "10000",
             "group.consumer.min.session.timeout.ms": "1000",
             "group.consumer.heartbeat.interval.ms": "1000",
             "group.consumer.min.heartbeat.interval.ms": "1000"}


class ConsumerFixture(GroupFixture):
    overrides = OVERRIDES

    def tid(self, topic):
        return self.metadata.get_topic(topic).topic_id

    def names(self, assignment):
        """{topic: [partitions]} of a response assignment (None stays None)."""
        if assignment is None:
            return None
        return {self.metadata.topic_name(tp.topic_id): sorted(tp.partitions)
                for tp in assignment.topic_partitions}

    def owned(self, by_name):
        return [HB.TopicPartitions(topic_id=self.tid(t), partitions=ps) for t, ps in by_name.items()]

    def hb(self, member_id, epoch, group="g", topics=None, owned=None, regex=None, instance=None,
           assignor=None, rebalance=-1, version=1, rack=None):
        self.find(group)
        return self.call(HB(group_id=group, member_id=member_id, member_epoch=epoch,
                            instance_id=instance, rack_id=rack, rebalance_timeout_ms=rebalance,
                            subscribed_topic_names=topics, subscribed_topic_regex=regex,
                            server_assignor=assignor,
                            topic_partitions=None if owned is None else self.owned(owned)), version)

    def cjoin(self, member_id, topics=("t",), **kw):
        kw.setdefault("rebalance", 30000)
        return self.hb(member_id, 0, topics=list(topics), owned={}, **kw)

    def group(self, group="g"):
        return self.coordinator.consumer.groups[group]

    def assert_no_double_owner(self, group="g"):
        seen = {}
        for mem in self.group(group).members.values():
            for t, ps in mem.owned().items():
                for p in ps:
                    self.assertNotIn((t, p), seen, "partition owned twice")
                    seen[(t, p)] = mem.member_id

    def describe_consumer(self, group="g"):
        return self.call(m.ConsumerGroupDescribeRequest(group_ids=[group],
                                                        include_authorized_operations=False), 0).groups[0]


class HeartbeatTests(ConsumerFixture, unittest.TestCase):
    def test_first_member_gets_everything(self):
        r = self.cjoin("a")
        self.assertEqual((r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms),
                         (errors.NONE, "a", 1, 1000))
        self.assertEqual(self.names(r.assignment), {"t": [0, 1, 2, 3, 4, 5]})
        # an ordinary heartbeat: nothing changed, no assignment sent
        r = self.hb("a", 1)
        self.assertEqual((r.error_code, r.member_epoch, r.assignment), (errors.NONE, 1, None))
        self.assertEqual(self.group().state, "Stable")
        # a full request (every optional field, as after an error) gets it again
        r = self.hb("a", 1, topics=["t"], owned={"t": [0, 1, 2, 3, 4, 5]}, rebalance=30000)
        self.assertEqual((r.member_epoch, self.names(r.assignment)), (1, {"t": [0, 1, 2, 3, 4, 5]}))

    def test_v0_names_the_member(self):
        r = self.hb("", 0, topics=["t"], owned={}, rebalance=30000, version=0)
        self.assertEqual(r.error_code, errors.NONE)
        self.assertEqual(len(r.member_id), 36)

    def test_revoke_before_assign(self):
        self.cjoin("a")
        r = self.cjoin("b")
        # b joins at epoch 2 but every partition is still a's
        self.assertEqual((r.member_epoch, self.names(r.assignment)), (2, {}))
        self.assertEqual(self.group().state, "Reconciling")
        r = self.hb("a", 1)
        # a keeps half and must revoke the rest; it stays at epoch 1 until it does
        self.assertEqual((r.member_epoch, self.names(r.assignment)), (1, {"t": [0, 1, 2]}))
        self.assert_no_double_owner()
        r = self.hb("b", 2)
        self.assertEqual((r.member_epoch, r.assignment), (2, None))  # nothing released yet
        r = self.hb("a", 1, owned={"t": [0, 1, 2, 3]})  # still owns 3: not revoked yet
        self.assertEqual(r.member_epoch, 1)
        r = self.hb("a", 1, owned={"t": [0, 1, 2]})  # revoked
        self.assertEqual((r.member_epoch, r.assignment), (2, None))
        self.assert_no_double_owner()
        r = self.hb("b", 2)
        self.assertEqual((r.member_epoch, self.names(r.assignment)), (2, {"t": [3, 4, 5]}))
        self.assertEqual(self.group().state, "Stable")
        d = self.describe_consumer()
        self.assertEqual((d.error_code, d.group_state, d.group_epoch, d.assignment_epoch,
                          d.assignor_name), (errors.NONE, "Stable", 2, 2, "uniform"))
        self.assertEqual(sorted((x.member_id, x.member_epoch, sorted(x.assignment.topic_partitions[0].partitions))
                                for x in d.members), [("a", 2, [0, 1, 2]), ("b", 2, [3, 4, 5])])

    def test_fencing_and_lost_response(self):
        self.cjoin("a")
        self.assertEqual(self.hb("a", 5).error_code, errors.FENCED_MEMBER_EPOCH)
        self.assertEqual(self.hb("zz", 1).error_code, errors.UNKNOWN_MEMBER_ID)
        self.cjoin("b")
        self.hb("a", 1, owned={"t": [0, 1, 2]})  # a reaches epoch 2 (it had revoked at once)
        self.assertEqual(self.group().members["a"].member_epoch, 2)
        # the answer was lost: a retries with epoch 1 owning a subset of its assignment
        r = self.hb("a", 1, owned={"t": [0, 1, 2]})
        self.assertEqual((r.error_code, r.member_epoch), (errors.NONE, 2))
        # but epoch 1 owning more than it has is a zombie
        self.assertEqual(self.hb("a", 1, owned={"t": [0, 1, 2, 3]}).error_code,
                         errors.FENCED_MEMBER_EPOCH)

    def test_session_timeout_moves_partitions(self):
        self.cjoin("a")
        self.cjoin("b")
        self.hb("a", 1, owned={"t": [0, 1, 2]})
        self.hb("b", 2)
        self.clock.advance(9)
        self.hb("a", 2)  # a stays alive; b says nothing
        self.clock.advance(1.5)
        self.assertEqual(sorted(self.group().members), ["a"])
        self.assertEqual(self.group().group_epoch, 3)
        r = self.hb("a", 2)
        self.assertEqual((r.member_epoch, self.names(r.assignment)), (3, {"t": [0, 1, 2, 3, 4, 5]}))
        self.assertEqual(self.hb("b", 2).error_code, errors.UNKNOWN_MEMBER_ID)

    def test_revocation_timeout_fences(self):
        self.cjoin("a", rebalance=5000)
        self.cjoin("b")
        self.hb("a", 1)  # asked to revoke 3, 4, 5; never acknowledges
        self.clock.advance(5.1)
        self.assertEqual(sorted(self.group().members), ["b"])
        r = self.hb("b", 2)
        self.assertEqual((r.member_epoch, self.names(r.assignment)), (3, {"t": [0, 1, 2, 3, 4, 5]}))

    def test_leave(self):
        self.cjoin("a")
        self.cjoin("b")
        r = self.hb("a", -1)
        self.assertEqual((r.error_code, r.member_epoch), (errors.NONE, -1))
        r = self.hb("b", 2)
        self.assertEqual((r.member_epoch, self.names(r.assignment)), (3, {"t": [0, 1, 2, 3, 4, 5]}))
        self.assertEqual(self.hb("a", -1).error_code, errors.UNKNOWN_MEMBER_ID)

    def test_static_member_restart(self):
        self.cjoin("a", instance="i1")
        self.cjoin("b")
        self.hb("a", 1, instance="i1", owned={"t": [0, 1, 2]})
        self.hb("b", 2)
        # i1 is still active: another member cannot take the instance id
        self.assertEqual(self.cjoin("a2", instance="i1").error_code, errors.UNRELEASED_INSTANCE_ID)
        r = self.hb("a", -2, instance="i1")
        self.assertEqual((r.error_code, r.member_epoch), (errors.NONE, -2))
        # back under a new member id: same partitions, no new group epoch
        r = self.cjoin("a2", instance="i1")
        self.assertEqual((r.error_code, r.member_epoch, self.names(r.assignment)),
                         (errors.NONE, 2, {"t": [0, 1, 2]}))
        self.assertEqual(self.group().group_epoch, 2)
        self.assertEqual(sorted(self.group().members), ["a2", "b"])
        self.assertEqual(self.hb("a", 2, instance="i1").error_code, errors.FENCED_INSTANCE_ID)

    def test_invalid_requests(self):
        self.assertEqual(self.cjoin("", version=1).error_code, errors.INVALID_REQUEST)
        r = self.hb("a", 0, topics=["t"], owned={}, rebalance=-1)
        self.assertEqual((r.error_code, r.error_message),
                         (errors.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request."))
        self.assertEqual(self.cjoin("a", assignor="sticky").error_code, errors.UNSUPPORTED_ASSIGNOR)
        r = self.hb("a", 0, regex="(", owned={}, rebalance=1000)
        self.assertEqual(r.error_code, errors.INVALID_REGULAR_EXPRESSION)
        self.assertEqual(self.hb("a", 3, group="nope").error_code, errors.GROUP_ID_NOT_FOUND)

    def test_regex_sees_new_topics(self):
        r = self.hb("a", 0, regex="(^t.*)", owned={}, rebalance=1000)
        self.assertEqual((r.member_epoch, self.names(r.assignment)), (1, {"t": [0, 1, 2, 3, 4, 5]}))
        self.create_topic("tx", 2)
        self.create_topic("other", 1)
        r = self.hb("a", 1)
        self.assertEqual((r.member_epoch, self.names(r.assignment)),
                         (2, {"t": [0, 1, 2, 3, 4, 5], "tx": [0, 1]}))

    def test_regex_brings_only_describable_topics(self):
        from kafkatw.security.authorizer import ALLOWED, DENIED, AclOperation, ResourceType

        class Authorizer:
            def authorize(self, context, actions):
                return [ALLOWED if a.resource.resource_type == ResourceType.GROUP
                        or (a.operation == AclOperation.DESCRIBE and a.resource.name != "ty")
                        else DENIED for a in actions]

        self.apis.authorizer = Authorizer()
        self.create_topic("tx", 1)
        self.create_topic("ty", 1)
        r = self.hb("a", 0, regex="(^t.*)", owned={}, rebalance=1000)
        self.assertEqual((r.error_code, self.names(r.assignment)),
                         (errors.NONE, {"t": [0, 1, 2, 3, 4, 5], "tx": [0]}))
        self.create_topic("tz", 1)
        r = self.hb("a", 1)
        self.assertEqual((r.member_epoch, self.names(r.assignment)),
                         (2, {"t": [0, 1, 2, 3, 4, 5], "tx": [0], "tz": [0]}))
        # named topics need DESCRIBE too
        self.assertEqual(self.cjoin("b", topics=("ty",)).error_code, errors.TOPIC_AUTHORIZATION_FAILED)

    def test_regex_topics_are_decided_with_an_authorizer_answering_later(self):
        """The topics a regex matches are planned with the request's other actions, so an
        authorizer answering with a Deferred decides them (unplanned, they would be DENIED)."""
        from twisted.internet import defer

        from kafkatw.security.authorizer import ALLOWED, DENIED, AclOperation, ResourceType

        class Authorizer:
            def authorize(self, context, actions):
                return defer.succeed([ALLOWED if a.resource.resource_type == ResourceType.GROUP
                                      or (a.operation == AclOperation.DESCRIBE and a.resource.name != "ty")
                                      else DENIED for a in actions])

        self.apis.authorizer = Authorizer()
        self.create_topic("tx", 1)
        self.create_topic("ty", 1)
        r = self.hb("a", 0, regex="(^t.*)", owned={}, rebalance=1000)
        self.assertEqual((r.error_code, self.names(r.assignment)),
                         (errors.NONE, {"t": [0, 1, 2, 3, 4, 5], "tx": [0]}))

    def test_range_assignor_per_member(self):
        self.cjoin("a", topics=("t", "u"), assignor="range")
        self.cjoin("b", topics=("t", "u"), assignor="range")
        r = self.hb("a", 1, owned={})
        self.assertEqual(self.names(r.assignment), {"t": [0, 1, 2], "u": [0]})
        self.assertEqual(self.group().assignor_name, "range")

    def test_assignors_see_the_racks_of_each_partitions_replicas(self):
        """In a cluster a partition's replicas are on other brokers: the assignor gets their
        racks, not this broker's. Here t's even partitions live on r1, the odd ones on r2."""
        from kafkatw.cluster.state import BrokerInfo, PartitionState

        self.patch(self.metadata, "live_brokers",
                   lambda: [BrokerInfo(node_id=1, rack="r1"), BrokerInfo(node_id=2, rack="r2")])
        self.patch(self.metadata, "partition_state", lambda topic, p: PartitionState(
            leader=p % 2 + 1, leader_epoch=0, isr=(p % 2 + 1,), replicas=(p % 2 + 1,)))
        self.cjoin("a", assignor="range", rack="r1")
        self.cjoin("b", assignor="range", rack="r2")
        target = self.group().target
        self.assertEqual(({t: sorted(ps) for t, ps in target["a"].items()},
                          {t: sorted(ps) for t, ps in target["b"].items()}),
                         ({self.tid("t"): [0, 2, 4]}, {self.tid("t"): [1, 3, 5]}))

    def test_offsets_with_member_epochs(self):
        self.cjoin("a")
        ok = self.commit({("t", 0): (5, "m")}, member_id="a", generation=1, version=9)
        self.assertEqual(ok, {("t", 0): errors.NONE})
        stale = self.commit({("t", 0): (6, "m")}, member_id="a", generation=0, version=9)
        self.assertEqual(stale, {("t", 0): errors.STALE_MEMBER_EPOCH})
        old = self.commit({("t", 0): (6, "m")}, member_id="a", generation=1, version=8)
        self.assertEqual(old, {("t", 0): errors.UNSUPPORTED_VERSION})
        unknown = self.commit({("t", 0): (6, "m")}, member_id="x", generation=1, version=9)
        self.assertEqual(unknown, {("t", 0): errors.UNKNOWN_MEMBER_ID})
        admin = self.commit({("t", 0): (6, "m")}, version=9)  # not empty: members only
        self.assertEqual(admin, {("t", 0): errors.UNKNOWN_MEMBER_ID})
        G = m.OffsetFetchRequest.OffsetFetchRequestGroup
        body = self.call(m.OffsetFetchRequest(groups=[G(group_id="g", member_id="a", member_epoch=1,
                                                        topics=None)]), 9)
        self.assertEqual([(p.partition_index, p.committed_offset) for t in body.groups[0].topics
                          for p in t.partitions], [(0, 5)])
        body = self.call(m.OffsetFetchRequest(groups=[G(group_id="g", member_id="a", member_epoch=7,
                                                        topics=None)]), 9)
        self.assertEqual(body.groups[0].error_code, errors.STALE_MEMBER_EPOCH)

    def test_offset_delete_spares_subscribed_topics(self):
        self.cjoin("a")
        self.commit({("t", 0): (1, ""), ("u", 0): (2, "")}, member_id="a", generation=1, version=9)
        body = self.call(m.OffsetDeleteRequest(group_id="g", topics=[
            m.OffsetDeleteRequest.OffsetDeleteRequestTopic(name=t, partitions=[
                m.OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)])
            for t in ("t", "u")]), 0)
        self.assertEqual(body.error_code, errors.NONE)
        self.assertEqual({(t.name, p.error_code) for t in body.topics for p in t.partitions},
                         {("t", errors.GROUP_SUBSCRIBED_TO_TOPIC), ("u", errors.NONE)})
        self.assertEqual(self.fetch_offsets("g")[1], {("t", 0): (1, "", errors.NONE)})

    def test_txn_offset_commit_checks_the_member(self):
        self.cjoin("a")
        commit = self.coordinator.handle_txn_commit_offsets
        offsets = {("t", 0): (7, -1, "")}
        self.assertEqual(self.successResultOf(commit("g", 5, 0, "a", None, 3, offsets)),
                         {("t", 0): errors.ILLEGAL_GENERATION})
        self.assertEqual(self.successResultOf(commit("g", 5, 0, "x", None, 1, offsets)),
                         {("t", 0): errors.UNKNOWN_MEMBER_ID})

    def test_list_and_describe_groups(self):
        self.cjoin("a")
        listed = self.call(m.ListGroupsRequest(states_filter=[], types_filter=[]), 5).groups
        self.assertEqual([(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed],
                         [("g", "consumer", "Stable", "consumer")])
        listed = self.call(m.ListGroupsRequest(states_filter=[], types_filter=["classic"]), 5).groups
        self.assertEqual(listed, [])
        d = self.describe()
        self.assertEqual((d.group_state, d.protocol_type, d.protocol_data, [x.member_id for x in d.members]),
                         ("Stable", "consumer", "uniform", ["a"]))
        self.assertEqual(parse_subscription_topics(d.members[0].member_metadata), ["t"])
        self.assertEqual(decode_assignment(d.members[0].member_assignment), {"t": set(range(6))})

    def test_classic_group_converts_once_empty(self):
        self.find("c")
        self.assertEqual(self.commit({("t", 1): (3, "")}, group="c", version=8),
                         {("t", 1): errors.NONE})  # a simple (empty) classic group
        r = self.cjoin("a", group="c")
        self.assertEqual((r.error_code, r.member_epoch), (errors.NONE, 1))
        self.assertEqual(self.fetch_offsets("c")[1], {("t", 1): (3, "", errors.NONE)})
        self.hb("a", -1, group="c")
        # and back, once empty: a classic join makes it a classic group
        d = self.join_new("c")
        self.clock.advance(0)
        body = self.successResultOf(d).body
        self.assertEqual(body.error_code, errors.NONE)
        self.assertNotIn("c", self.coordinator.consumer.groups)
        self.assertEqual(self.fetch_offsets("c")[1], {("t", 1): (3, "", errors.NONE)})

    def classic_member(self, group="c"):
        """A classic member owning all of t (generation 1): its member id."""
        self.find(group)
        d = self.join_new(group)
        self.clock.advance(0)
        body = self.successResultOf(d).body
        self.assertEqual((body.error_code, body.generation_id), (errors.NONE, 1))
        everything = encode_assignment({"t": range(6)}, 0)
        s = self.successResultOf(self.sync(body.member_id, 1, [(body.member_id, everything)],
                                           group=group)).body
        self.assertEqual(s.error_code, errors.NONE)
        return body.member_id

    def test_online_upgrade_and_downgrade(self):
        a = self.classic_member()
        self.assertEqual(self.commit({("t", 0): (4, "")}, group="c", member_id=a, generation=1),
                         {("t", 0): errors.NONE})
        # a KIP-848 member joins the classic group: it becomes a consumer group at epoch 1 + 1
        r = self.cjoin("b", group="c")
        self.assertEqual((r.error_code, r.member_epoch, self.names(r.assignment)),
                         (errors.NONE, 2, {}))  # a still owns everything
        group = self.group("c")
        self.assertEqual((group.group_epoch, group.members[a].member_epoch,
                          sorted(group.members[a].assigned[self.tid("t")])), (2, 1, list(range(6))))
        self.assertEqual(self.heartbeat(a, 1, group="c"), errors.REBALANCE_IN_PROGRESS)
        # a rejoins (eager: it owns nothing now), is answered at once, and syncs its half
        body = self.successResultOf(self.join("c", member_id=a)).body
        self.assertEqual((body.error_code, body.generation_id, body.leader, body.members,
                          body.protocol_name), (errors.NONE, 2, "", [], "range"))
        s = self.successResultOf(self.sync(a, 2, group="c")).body
        self.assertEqual((s.error_code, decode_assignment(s.assignment)), (errors.NONE, {"t": {0, 1, 2}}))
        self.assert_no_double_owner("c")
        r = self.hb("b", 2, group="c")
        self.assertEqual(self.names(r.assignment), {"t": [3, 4, 5]})
        self.assertEqual(self.heartbeat(a, 2, group="c"), errors.NONE)
        self.assertEqual(self.commit({("t", 0): (5, "")}, group="c", member_id=a, generation=2),
                         {("t", 0): errors.NONE})
        self.assertEqual(self.commit({("t", 0): (6, "")}, group="c", member_id=a, generation=1),
                         {("t", 0): errors.ILLEGAL_GENERATION})
        d = self.describe_consumer("c")
        self.assertEqual(sorted((x.member_id, x.member_epoch) for x in d.members), sorted([(a, 2), ("b", 2)]))
        # the last KIP-848 member leaves: a classic group again, which rebalances
        self.hb("b", -1, group="c")
        self.assertNotIn("c", self.coordinator.consumer.groups)
        classic = self.coordinator.groups["c"]
        self.assertEqual((classic.state, sorted(classic.members), classic.protocol_name),
                         ("PreparingRebalance", [a], "range"))
        self.assertEqual(self.heartbeat(a, 2, group="c"), errors.REBALANCE_IN_PROGRESS)
        d = self.join("c", member_id=a)
        self.clock.advance(0)
        body = self.successResultOf(d).body
        self.assertEqual((body.error_code, body.generation_id, body.leader), (errors.NONE, 3, a))
        self.assertEqual(self.fetch_offsets("c")[1], {("t", 0): (5, "", errors.NONE)})
        # and it reloads as a classic group
        self.restart()
        while self.coordinator.is_loading():
            self.clock.advance(0.01)
        self.assertNotIn("c", self.coordinator.consumer.groups)
        self.assertEqual(sorted(self.coordinator.groups["c"].members), [a])

    def test_upgrade_reloads(self):
        a = self.classic_member()
        self.cjoin("b", group="c")
        self.restart()
        while self.coordinator.is_loading():
            self.clock.advance(0.01)
        group = self.group("c")
        self.assertEqual(sorted(group.members), sorted([a, "b"]))
        self.assertEqual(group.members[a].classic[0], 6000)
        self.assertNotIn("c", self.coordinator.groups)

    def test_reload_after_restart(self):
        self.cjoin("a", instance="i1")
        self.cjoin("b", regex=None)
        self.hb("a", 1, instance="i1", owned={"t": [0, 1, 2]})
        self.hb("b", 2)
        self.commit({("t", 0): (9, "")}, member_id="a", generation=2, version=9)
        before = self.group()
        snapshot = (before.group_epoch, before.assignment_epoch, dict(before.target),
                    {k: (v.member_epoch, v.state, v.assigned, v.instance_id,
                         v.subscribed_topic_names) for k, v in before.members.items()})
        self.restart()
        self.clock.advance(0)
        while self.coordinator.is_loading():
            self.clock.advance(0.01)
        after = self.group()
        self.assertEqual((after.group_epoch, after.assignment_epoch, dict(after.target),
                          {k: (v.member_epoch, v.state, v.assigned, v.instance_id,
                               v.subscribed_topic_names) for k, v in after.members.items()}),
                         snapshot)
        self.assertEqual(after.static_members, {"i1": "a"})
        r = self.hb("a", 2, instance="i1")
        self.assertEqual((r.error_code, r.member_epoch), (errors.NONE, 2))
        self.assertEqual(self.fetch_offsets("g")[1], {("t", 0): (9, "", errors.NONE)})
        # the loaded members' sessions run: b, silent, leaves
        self.clock.advance(5)
        self.hb("a", 2, instance="i1")
        self.clock.advance(6)
        self.assertEqual(sorted(self.group().members), ["a"])

    def test_empty_group_without_offsets_expires(self):
        self.cjoin("a")
        self.cjoin("b", group="h")
        self.commit({("t", 0): (1, "")}, group="h", member_id="b", generation=1, version=9)
        self.hb("a", -1)
        self.hb("b", -1, group="h")
        self.coordinator.cleanup_group_metadata()
        self.assertEqual(sorted(self.coordinator.consumer.groups), ["h"])  # h still has offsets
        self.restart()
        while self.coordinator.is_loading():
            self.clock.advance(0.01)
        self.assertEqual(sorted(self.coordinator.consumer.groups), ["h"])

    def test_delete_empty_group(self):
        self.cjoin("a")
        body = self.call(m.DeleteGroupsRequest(groups_names=["g"]), 2)
        self.assertEqual(body.results[0].error_code, errors.NON_EMPTY_GROUP)
        self.hb("a", -1)
        body = self.call(m.DeleteGroupsRequest(groups_names=["g"]), 2)
        self.assertEqual(body.results[0].error_code, errors.NONE)
        self.assertEqual(self.describe_consumer().error_code, errors.GROUP_ID_NOT_FOUND)
        self.restart()
        while self.coordinator.is_loading():
            self.clock.advance(0.01)
        self.assertNotIn("g", self.coordinator.consumer.groups)


def _topics(*specs):
    return {bytes([i]) * 16: AssignmentTopic(bytes([i]) * 16, name, n, racks or {})
            for i, (name, n, racks) in enumerate(specs, 1)}


def _by_name(topics, result):
    return {mid: {topics[t].name: sorted(ps) for t, ps in a.items()} for mid, a in result.items()}


class AssignorTests(unittest.SynchronousTestCase):
    def test_uniform_balanced_and_sticky(self):
        topics = _topics(("t", 12, None))
        tid = next(iter(topics))
        members = [AssignmentMember(x, frozenset([tid])) for x in "abc"]
        first = UniformAssignor().assign(members, topics)
        self.assertEqual([len(first[x][tid]) for x in "abc"], [4, 4, 4])
        # a fourth joins: each keeps 3 of its 4, only 3 partitions move
        members = [AssignmentMember(x, frozenset([tid]), current=first.get(x, {})) for x in "abcd"]
        second = UniformAssignor().assign(members, topics)
        self.assertEqual([len(second[x][tid]) for x in "abcd"], [3, 3, 3, 3])
        for x in "abc":
            self.assertTrue(second[x][tid] <= first[x][tid])
        self.assertEqual(set().union(*(second[x][tid] for x in "abcd")), set(range(12)))

    def test_uniform_random_groups(self):
        """Random joins and leaves: always complete, no partition twice, counts within one of
        each other (everyone subscribes alike), and a member keeps its partitions when the
        quota allows."""
        import random

        rnd = random.Random(848)
        topics = _topics(("t", 37, None), ("u", 11, None))
        tids = frozenset(topics)
        current = {}
        for step in range(60):
            ids = sorted(current)
            if ids and rnd.random() < 0.4:
                current.pop(rnd.choice(ids))
            else:
                current["m%03d" % rnd.randrange(1000)] = {}
            members = [AssignmentMember(mid, tids, current=a) for mid, a in current.items()]
            out = UniformAssignor().assign(members, topics)
            pairs = [(t, p) for a in out.values() for t, ps in a.items() for p in ps]
            self.assertEqual(len(pairs), 48)
            self.assertEqual(len(set(pairs)), 48)
            counts = [sum(len(ps) for ps in a.values()) for a in out.values()]
            self.assertLessEqual(max(counts) - min(counts), 1)
            quota = -(-48 // len(current))
            for mid, before in current.items():
                kept = sum(len(ps & out[mid].get(t, frozenset())) for t, ps in before.items())
                self.assertGreaterEqual(kept, min(sum(len(ps) for ps in before.values()), quota - 1))
            current = {mid: dict(a) for mid, a in out.items()}

    def test_uniform_heterogeneous(self):
        topics = _topics(("t", 4, None), ("u", 2, None))
        t, u = sorted(topics)
        members = [AssignmentMember("a", frozenset([t, u])), AssignmentMember("b", frozenset([t]))]
        out = _by_name(topics, UniformAssignor().assign(members, topics))
        self.assertEqual(sum(len(ps) for ps in out["a"].values()), 3)
        self.assertEqual(sum(len(ps) for ps in out["b"].values()), 3)
        self.assertEqual(out["a"]["u"], [0, 1])
        self.assertNotIn("u", out["b"])

    def test_uniform_rack_aware(self):
        racks = {p: frozenset(["r1" if p % 2 == 0 else "r2"]) for p in range(4)}
        topics = _topics(("t", 4, racks))
        tid = next(iter(topics))
        members = [AssignmentMember("a", frozenset([tid]), rack="r1"),
                   AssignmentMember("b", frozenset([tid]), rack="r2")]
        out = UniformAssignor().assign(members, topics)
        self.assertEqual((sorted(out["a"][tid]), sorted(out["b"][tid])), ([0, 2], [1, 3]))

    def test_range(self):
        topics = _topics(("t", 7, None))
        tid = next(iter(topics))
        members = [AssignmentMember(x, frozenset([tid])) for x in "cab"]
        out = RangeAssignor().assign(members, topics)
        self.assertEqual([sorted(out[x][tid]) for x in "abc"], [[0, 1, 2], [3, 4], [5, 6]])

    def test_range_rack_aware(self):
        racks = {p: frozenset(["r1" if p >= 2 else "r2"]) for p in range(4)}
        topics = _topics(("t", 4, racks))
        tid = next(iter(topics))
        members = [AssignmentMember("a", frozenset([tid]), rack="r1"),
                   AssignmentMember("b", frozenset([tid]), rack="r2")]
        out = RangeAssignor().assign(members, topics)
        self.assertEqual((sorted(out["a"][tid]), sorted(out["b"][tid])), ([2, 3], [0, 1]))

    def test_config(self):
        self.assertEqual([a.name for a in assignors_from_config(["range", "uniform"])],
                         ["range", "uniform"])
        with self.assertRaises(ValueError) as e:
            assignors_from_config(["sticky"])
        self.assertIn("unknown assignor 'sticky'", str(e.exception))


class ConfigTests(unittest.SynchronousTestCase):
    BASE = {"node.id": "1", "log.dirs": "/nonexistent", "listeners": "PLAINTEXT://:9092"}

    def refused(self, **props):
        with self.assertRaises(ConfigError) as e:
            KafkaConfig.from_properties(dict(self.BASE, **{k.replace("_", "."): v
                                                           for k, v in props.items()}))
        message = str(e.exception)
        self.assertNotIn("\n", message)
        return message

    def test_timeouts_within_bounds(self):
        self.assertIn("group.consumer.session.timeout.ms: must be between "
                      "group.consumer.min.session.timeout.ms (45000)",
                      self.refused(group_consumer_session_timeout_ms="1000"))
        self.assertIn("group.consumer.heartbeat.interval.ms: must be less than "
                      "group.consumer.session.timeout.ms (45000)",
                      self.refused(group_consumer_heartbeat_interval_ms="50000",
                                   group_consumer_max_heartbeat_interval_ms="60000"))

    def test_rebalance_protocols(self):
        """Classic cannot be turned off (Kafka refuses it too) and kafkatw serves no share or
        streams groups: both are refused rather than accepted and ignored."""
        self.assertIn("disabling the 'classic' protocol is not supported",
                      self.refused(group_coordinator_rebalance_protocols="consumer"))
        for other in ("share", "streams"):
            self.assertIn("group.coordinator.rebalance.protocols", self.refused(
                group_coordinator_rebalance_protocols="classic,consumer," + other))
        config = KafkaConfig.from_properties(
            dict(self.BASE, **{"group.coordinator.rebalance.protocols": "classic"}))
        self.assertEqual(config["group.coordinator.rebalance.protocols"], ["classic"])

    def test_assignors(self):
        self.assertIn("group.consumer.assignors", self.refused(group_consumer_assignors="sticky"))
        config = KafkaConfig.from_properties(dict(self.BASE, **{"group.consumer.assignors": "range"}))
        self.assertEqual(config["group.consumer.assignors"], ["range"])


class AuthorizationTests(ApisFixture, unittest.TestCase):
    def test_heartbeat_needs_read_on_the_group(self):
        authorizer = LaterAuthorizer()
        self.apis = self.make_apis(authorizer=authorizer)
        body = HB(group_id="g", member_id="a", member_epoch=0, rebalance_timeout_ms=1000,
                  subscribed_topic_names=["t"], topic_partitions=[])
        d = self.apis.handle(self.request(body, 1, principal=ALICE))
        self.assertNoResult(d)
        authorizer.release()
        self.assertEqual(self.successResultOf(d).body.error_code, errors.GROUP_AUTHORIZATION_FAILED)

    def test_heartbeat_needs_describe_on_subscribed_topics(self):
        authorizer = GroupReader()
        self.apis = self.make_apis(authorizer=authorizer)
        body = HB(group_id="g", member_id="a", member_epoch=0, rebalance_timeout_ms=1000,
                  subscribed_topic_names=["t", "secret"], topic_partitions=[])
        d = self.apis.handle(self.request(body, 1, principal=ALICE))
        authorizer.release()
        self.assertEqual(self.successResultOf(d).body.error_code, errors.TOPIC_AUTHORIZATION_FAILED)


class GroupReader(LaterAuthorizer):
    """Alice may READ groups and DESCRIBE topic t, nothing else."""

    def authorize(self, context, actions):
        from twisted.internet import defer

        from kafkatw.security.authorizer import ALLOWED, DENIED, AclOperation, ResourceType

        d = defer.Deferred()
        self.pending.append((d, [
            ALLOWED if (a.operation == AclOperation.READ and a.resource.resource_type == ResourceType.GROUP)
            or (a.operation == AclOperation.DESCRIBE and a.resource.name == "t") else DENIED
            for a in actions]))
        return d


class MaxSizeTests(ConsumerFixture, unittest.TestCase):
    overrides = dict(OVERRIDES, **{"group.consumer.max.size": "1"})

    def test_group_consumer_max_size(self):
        self.assertEqual(self.cjoin("a").error_code, errors.NONE)
        r = self.cjoin("b")
        self.assertEqual((r.error_code, r.error_message),
                         (errors.GROUP_MAX_SIZE_REACHED,
                          "The consumer group has reached its maximum capacity of 1 members."))
        self.assertEqual(sorted(self.group().members), ["a"])
        self.assertEqual(self.hb("a", 1).error_code, errors.NONE)  # members already in stay

    def test_static_members_count_too(self):
        self.assertEqual(self.cjoin("a", instance="i-a").error_code, errors.NONE)
        self.assertEqual(self.cjoin("b", instance="i-b").error_code, errors.GROUP_MAX_SIZE_REACHED)
        self.assertEqual(sorted(self.group().members), ["a"])
        # the same instance back under a new member id takes its own place, not a new one
        self.assertEqual(self.hb("a", -2, instance="i-a").error_code, errors.NONE)
        r = self.cjoin("a2", instance="i-a")
        self.assertEqual((r.error_code, sorted(self.group().members)), (errors.NONE, ["a2"]))


class MigrationDisabledTests(ConsumerFixture, unittest.TestCase):
    overrides = dict(OVERRIDES, **{"group.consumer.migration.policy": "disabled"})

    def test_no_online_upgrade(self):
        a = HeartbeatTests.classic_member(self)
        r = self.cjoin("b", group="c")
        self.assertEqual((r.error_code, r.error_message),
                         (errors.GROUP_ID_NOT_FOUND, "Group c is not a consumer group"))
        self.assertEqual(sorted(self.coordinator.groups["c"].members), [a])
