"""Group coordinator through the request handlers, on real logs and a task.Clock: find
coordinator, join (member id required, initial delay, protocol vote), sync, heartbeats and
session expiry, static members, leave, offset commit validation, load after restart, delete,
offset delete and expiry."""

import os
import struct

from twisted.internet import task
from twisted.trial import unittest

from kafkatw.cluster.metadata import ClusterMetadata
from kafkatw.config import KafkaConfig
from kafkatw.coordinator.group import offsets_log
from kafkatw.coordinator.group.coordinator import GroupCoordinator
from kafkatw.network.request import Request, RequestContext
from kafkatw.protocol import errors
from kafkatw.protocol import messages as m
from kafkatw.server.apis import KafkaApis
from kafkatw.server.replica_manager import ReplicaManager
from kafkatw.storage.manager import LogManager

T0 = 1700000000


def subscription(*topics):
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


class GroupFixture:
    overrides = {}

    def setUp(self):
        self.base = os.path.abspath(self.mktemp())
        self.clock = task.Clock()
        self.clock.advance(T0)
        self.boot()
        self.create_topic("t", 6)
        self.create_topic("u", 2)

    def boot(self):
        props = {"node.id": "1", "log.dirs": os.path.join(self.base, "logs"),
                 "listeners": "PLAINTEXT://localhost:9092", "offsets.topic.num.partitions": "3",
                 "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}
        props.update(self.overrides)
        self.config = KafkaConfig.from_properties(props)
        self.config.advertised_listeners = self.config.listeners
        self.metadata = ClusterMetadata.load(self.config.log_dirs, 1)
        self.log_manager = LogManager(self.config.log_dirs, reactor=self.clock)
        self.log_manager.load_logs()
        self.replica_manager = ReplicaManager(self.log_manager, self.metadata, self.clock, self.config)
        self.coordinator = GroupCoordinator(self.config, self.metadata, self.replica_manager,
                                            self.log_manager, self.clock)
        self.apis = KafkaApis(self.config, self.metadata, self.replica_manager, clock=self.clock,
                              log_manager=self.log_manager, group_coordinator=self.coordinator)
        self.apis.create_missing_logs()
        self.coordinator.startup()
        self.addCleanup(self.coordinator.shutdown)

    def restart(self):
        self.coordinator.shutdown()
        self.log_manager.shutdown()
        self.boot()

    def create_topic(self, name, n):
        if not self.metadata.contains_topic(name):
            self.metadata.create_topic(name, n)

    def handle(self, body, version):
        wire = type(body).decode(memoryview(bytearray(body.encode_bytes(version))), version)
        req = Request(header=None, api_key=body.API_KEY, api_version=version, correlation_id=1,
                      client_id="client", body=wire, size=0,
                      context=RequestContext("c", "PLAINTEXT", "PLAINTEXT", client_address=("10.0.0.1", 5)))
        return self.apis.handle(req)

    def call(self, body, version):
        return self.successResultOf(self.handle(body, version)).body

    def find(self, group="g"):
        return self.call(m.FindCoordinatorRequest(key=group, key_type=0), 3)

    def join(self, group="g", member_id="", instance=None, protocols=(("range", None),),
             session=6000, rebalance=10000, version=7):
        self.find(group)
        protos = [m.JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=meta or subscription("t"))
                  for n, meta in protocols]
        return self.handle(m.JoinGroupRequest(
            group_id=group, session_timeout_ms=session, rebalance_timeout_ms=rebalance,
            member_id=member_id, group_instance_id=instance, protocol_type="consumer",
            protocols=protos), version)

    def join_new(self, group="g", **kw):
        """The v4+ two-step join of a dynamic member; returns the Deferred of the second join."""
        first = self.successResultOf(self.join(group, **kw)).body
        self.assertEqual(first.error_code, errors.MEMBER_ID_REQUIRED)
        self.assertTrue(first.member_id.startswith("client-"))
        return self.join(group, member_id=first.member_id, **kw)

    def sync(self, member_id, generation, assignments=(), group="g", instance=None, version=3):
        return self.handle(m.SyncGroupRequest(
            group_id=group, generation_id=generation, member_id=member_id, group_instance_id=instance,
            assignments=[m.SyncGroupRequest.SyncGroupRequestAssignment(member_id=k, assignment=v)
                         for k, v in assignments]), version)

    def heartbeat(self, member_id, generation, group="g", instance=None):
        return self.call(m.HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id,
                                            group_instance_id=instance), 4).error_code

    def describe(self, group="g"):
        return self.call(m.DescribeGroupsRequest(groups=[group], include_authorized_operations=True),
                         5).groups[0]

    def commit(self, offsets, group="g", member_id="", generation=-1, instance=None, version=8):
        topics = {}
        for (t, p), (off, meta) in offsets.items():
            topics.setdefault(t, []).append(m.OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=off, committed_leader_epoch=3, committed_metadata=meta))
        body = self.call(m.OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
            group_instance_id=instance, topics=[m.OffsetCommitRequest.OffsetCommitRequestTopic(
                name=t, partitions=ps) for t, ps in topics.items()]), version)
        return {(t.name, p.partition_index): p.error_code for t in body.topics for p in t.partitions}

    def fetch_offsets(self, group="g", topics=None, version=7):
        req_topics = None if topics is None else [
            m.OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in topics]
        body = self.call(m.OffsetFetchRequest(group_id=group, topics=req_topics), version)
        return body.error_code, {(t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
                                 for t in body.topics for p in t.partitions}

    def stable_pair(self):
        """Two dynamic members in a stable generation: (leader id, follower id, generation)."""
        d1 = self.join_new()
        self.clock.advance(0)
        j1 = self.successResultOf(d1).body
        self.assertEqual((j1.error_code, j1.generation_id), (0, 1))
        s1 = self.sync(j1.member_id, 1, [(j1.member_id, b"a1")])
        self.assertEqual(self.successResultOf(s1).body.assignment, b"a1")
        # second member joins: rebalance; the leader must rejoin
        d2 = self.join_new()
        self.assertNoResult(d2)
        self.assertEqual(self.heartbeat(j1.member_id, 1), errors.REBALANCE_IN_PROGRESS)
        d1 = self.join(member_id=j1.member_id)
        r1, r2 = self.successResultOf(d1).body, self.successResultOf(d2).body
        self.assertEqual((r1.generation_id, r2.generation_id), (2, 2))
        self.assertEqual(r1.leader, r1.member_id)
        self.assertEqual(sorted(x.member_id for x in r1.members), sorted([r1.member_id, r2.member_id]))
        self.assertEqual(r2.members, [])
        s2 = self.sync(r2.member_id, 2)
        self.assertNoResult(s2)
        s1 = self.sync(r1.member_id, 2, [(r1.member_id, b"L"), (r2.member_id, b"F")])
        self.assertEqual(self.successResultOf(s1).body.assignment, b"L")
        self.assertEqual(self.successResultOf(s2).body.assignment, b"F")
        return r1.member_id, r2.member_id, 2


class FindCoordinatorTests(GroupFixture, unittest.TestCase):
    def test_versions_and_lazy_topic(self):
        self.assertFalse(self.metadata.contains_topic("__consumer_offsets"))
        for v in range(4):
            body = self.call(m.FindCoordinatorRequest(key="g", key_type=0), v)
            self.assertEqual((body.error_code, body.node_id, body.host, body.port), (0, 1, "localhost", 9092))
        info = self.metadata.get_topic("__consumer_offsets")
        self.assertEqual((info.num_partitions, info.is_internal), (3, True))
        self.assertEqual(info.configs["cleanup.policy"], "compact")

    def test_batched_and_key_types(self):
        body = self.call(m.FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b"]), 4)
        self.assertEqual([(c.key, c.error_code, c.node_id, c.port) for c in body.coordinators],
                         [("a", 0, 1, 9092), ("b", 0, 1, 9092)])
        body = self.call(m.FindCoordinatorRequest(key_type=1, coordinator_keys=["txn"]), 6)
        self.assertEqual([(c.error_code, c.node_id) for c in body.coordinators],
                         [(errors.COORDINATOR_NOT_AVAILABLE, -1)])
        body = self.call(m.FindCoordinatorRequest(key="x", key_type=7), 3)
        self.assertEqual(body.error_code, errors.INVALID_REQUEST)

    def test_partition_is_java_hash(self):
        self.assertEqual(offsets_log.java_string_hashcode("hello"), 99162322)
        self.assertEqual(offsets_log.java_string_hashcode("polygenelubricants"), -(1 << 31))
        self.assertEqual(offsets_log.partition_for("polygenelubricants", 50), 0)
        self.assertEqual(offsets_log.partition_for("my-group", 50), 12)

    def test_advertised(self):
        versions = self.apis.api_versions()
        self.assertEqual({k: versions[k] for k in (8, 9, 10, 11, 12, 13, 14, 15, 16, 42, 47)},
                         {8: (2, 9), 9: (1, 9), 10: (0, 6), 11: (2, 9), 12: (0, 4), 13: (0, 5),
                          14: (0, 5), 15: (0, 5), 16: (0, 5), 42: (0, 2), 47: (0, 0)})

    def test_not_coordinator_before_topic(self):
        body = self.call(m.HeartbeatRequest(group_id="g", generation_id=1, member_id="x"), 4)
        self.assertEqual(body.error_code, errors.NOT_COORDINATOR)


class MembershipTests(GroupFixture, unittest.TestCase):
    overrides = {"group.max.size": "2"}

    def test_single_member(self):
        d = self.join_new()
        self.clock.advance(0)
        j = self.successResultOf(d).body
        self.assertEqual((j.error_code, j.generation_id, j.protocol_type, j.protocol_name, j.leader),
                         (0, 1, "consumer", "range", j.member_id))
        self.assertEqual([(x.member_id, bytes(x.metadata)) for x in j.members], [(j.member_id, subscription("t"))])
        self.assertEqual(self.describe().group_state, "CompletingRebalance")
        self.assertEqual(self.heartbeat(j.member_id, 1), 0)
        s = self.successResultOf(self.sync(j.member_id, 1, [(j.member_id, b"x")], version=5)).body
        self.assertEqual((s.error_code, s.protocol_type, s.protocol_name, s.assignment), (0, "consumer", "range", b"x"))
        g = self.describe()
        self.assertEqual((g.group_state, g.protocol_type, g.protocol_data, g.authorized_operations),
                         ("Stable", "consumer", "range", 328))
        self.assertEqual([(x.member_id, x.client_id, x.client_host, bytes(x.member_assignment)) for x in g.members],
                         [(j.member_id, "client", "/10.0.0.1", b"x")])

    def test_initial_rebalance_delay(self):
        self.coordinator.initial_rebalance_delay_ms = 3000
        d1 = self.join_new()
        self.clock.advance(2.0)
        d2 = self.join_new()
        self.clock.advance(1.0)  # t=3: a member arrived meanwhile, so the delay runs once more
        self.assertNoResult(d1)
        self.clock.advance(2.95)
        self.assertNoResult(d1)
        self.clock.advance(0.1)
        self.assertEqual(self.successResultOf(d1).body.generation_id, 1)
        self.assertEqual(self.successResultOf(d2).body.generation_id, 1)


    def test_errors(self):
        self.assertEqual(self.successResultOf(self.join(session=500)).body.error_code, errors.INVALID_SESSION_TIMEOUT)
        self.assertEqual(self.successResultOf(self.join(member_id="nobody")).body.error_code, errors.UNKNOWN_MEMBER_ID)
        self.assertEqual(self.successResultOf(self.join(group="")).body.error_code, errors.INVALID_GROUP_ID)
        leader, follower, gen = self.stable_pair()
        self.assertEqual(self.heartbeat(leader, gen + 1), errors.ILLEGAL_GENERATION)
        self.assertEqual(self.heartbeat("nobody", gen), errors.UNKNOWN_MEMBER_ID)
        self.assertEqual(self.successResultOf(self.sync(leader, gen - 1)).body.error_code, errors.ILLEGAL_GENERATION)
        # group.max.size=2: a third member is refused
        third = self.successResultOf(self.join()).body
        self.assertEqual((third.error_code, third.member_id), (errors.GROUP_MAX_SIZE_REACHED, ""))

    def test_session_timeout_rebalances(self):
        leader, follower, gen = self.stable_pair()
        for _ in range(3):
            self.clock.advance(2.0)
            self.assertEqual((self.heartbeat(leader, gen), self.heartbeat(follower, gen)), (0, 0))
        for _ in range(2):
            self.clock.advance(2.0)
            self.assertEqual(self.heartbeat(leader, gen), 0)
        self.clock.advance(2.0)  # follower silent for 6 s: its session timed out
        self.assertEqual(self.heartbeat(leader, gen), errors.REBALANCE_IN_PROGRESS)
        d = self.join(member_id=leader)
        j = self.successResultOf(d).body
        self.assertEqual((j.generation_id, [x.member_id for x in j.members]), (gen + 1, [leader]))
        self.assertEqual(self.heartbeat(follower, gen), errors.UNKNOWN_MEMBER_ID)

    def test_rebalance_timeout_drops_members_that_do_not_rejoin(self):
        leader, follower, gen = self.stable_pair()
        d = self.join(member_id=leader)  # leader rejoin forces a rebalance
        self.assertNoResult(d)
        for _ in range(4):  # the follower heartbeats but never rejoins; rebalance timeout 10 s
            self.clock.advance(2.4)
            self.assertEqual(self.heartbeat(follower, gen), errors.REBALANCE_IN_PROGRESS)
        self.assertNoResult(d)
        self.clock.advance(1.0)
        j = self.successResultOf(d).body
        self.assertEqual((j.generation_id, [x.member_id for x in j.members]), (gen + 1, [leader]))

    def test_pending_member_expires(self):
        first = self.successResultOf(self.join()).body
        self.assertEqual(first.error_code, errors.MEMBER_ID_REQUIRED)
        self.clock.advance(6.1)
        self.assertEqual(self.successResultOf(self.join(member_id=first.member_id)).body.error_code,
                         errors.UNKNOWN_MEMBER_ID)

    def test_leave(self):
        leader, follower, gen = self.stable_pair()
        body = self.call(m.LeaveGroupRequest(group_id="g", members=[
            m.LeaveGroupRequest.MemberIdentity(member_id=follower),
            m.LeaveGroupRequest.MemberIdentity(member_id="ghost")]), 4)
        self.assertEqual((body.error_code, [(x.member_id, x.error_code) for x in body.members]),
                         (0, [(follower, 0), ("ghost", errors.UNKNOWN_MEMBER_ID)]))
        self.assertEqual(self.describe().group_state, "PreparingRebalance")
        self.assertEqual(self.call(m.LeaveGroupRequest(group_id="g", member_id="ghost"), 1).error_code,
                         errors.UNKNOWN_MEMBER_ID)
        self.assertEqual(self.call(m.LeaveGroupRequest(group_id="g", member_id=leader), 2).error_code, 0)
        g = self.describe()
        self.assertEqual((g.group_state, g.members), ("Empty", []))

    def test_list_groups(self):
        self.stable_pair()
        self.commit({("t", 0): (1, "")}, group="simple")
        body = self.call(m.ListGroupsRequest(), 5)
        self.assertEqual(sorted((g.group_id, g.protocol_type, g.group_state, g.group_type) for g in body.groups),
                         [("g", "consumer", "Stable", "classic"), ("simple", "", "Empty", "classic")])
        body = self.call(m.ListGroupsRequest(states_filter=["empty"]), 4)
        self.assertEqual([g.group_id for g in body.groups], ["simple"])
        body = self.call(m.ListGroupsRequest(types_filter=["consumer"]), 5)
        self.assertEqual(body.groups, [])


class ProtocolTests(GroupFixture, unittest.TestCase):
    def test_protocol_vote_and_inconsistent(self):
        d1 = self.join_new(protocols=(("range", None), ("roundrobin", None)))
        d2 = self.join_new(protocols=(("roundrobin", None),))
        self.clock.advance(0)
        self.assertEqual(self.successResultOf(d1).body.protocol_name, "roundrobin")
        self.assertEqual(self.successResultOf(d2).body.protocol_name, "roundrobin")
        d3 = self.join(protocols=(("sticky", None),))
        self.assertEqual(self.successResultOf(d3).body.error_code, errors.INCONSISTENT_GROUP_PROTOCOL)


class StaticMemberTests(GroupFixture, unittest.TestCase):
    def test_restart_within_session_timeout_keeps_generation(self):
        d = self.join(instance="i1")  # static members get their id at once
        self.clock.advance(0)
        j = self.successResultOf(d).body
        self.assertEqual((j.error_code, j.generation_id), (0, 1))
        self.assertTrue(j.member_id.startswith("i1-"))
        self.successResultOf(self.sync(j.member_id, 1, [(j.member_id, b"A")], instance="i1"))
        # restart: unknown member id, same instance id -> new member id, same generation, no rebalance
        j2 = self.successResultOf(self.join(instance="i1")).body
        self.assertEqual((j2.error_code, j2.generation_id), (0, 1))
        self.assertNotEqual(j2.member_id, j.member_id)
        self.assertEqual(j2.leader, j.member_id)  # pre-v9: the old leader id, so no reassignment
        self.assertEqual(self.describe().group_state, "Stable")
        s = self.successResultOf(self.sync(j2.member_id, 1, instance="i1")).body
        self.assertEqual((s.error_code, s.assignment), (0, b"A"))
        self.assertEqual(self.heartbeat(j.member_id, 1, instance="i1"), errors.FENCED_INSTANCE_ID)
        self.assertEqual(self.heartbeat(j2.member_id, 1, instance="i1"), 0)
        self.assertEqual(self.commit({("t", 0): (5, "")}, member_id=j.member_id, generation=1, instance="i1"),
                         {("t", 0): errors.FENCED_INSTANCE_ID})
        # v9: the leader is told it leads but skips the assignment
        j3 = self.successResultOf(self.join(instance="i1", version=9)).body
        self.assertEqual((j3.generation_id, j3.leader, j3.skip_assignment), (1, j3.member_id, True))

    def test_leave_by_instance_id(self):
        d = self.join(instance="i1")
        self.clock.advance(0)
        self.successResultOf(d)
        body = self.call(m.LeaveGroupRequest(group_id="g", members=[
            m.LeaveGroupRequest.MemberIdentity(member_id="", group_instance_id="i1"),
            m.LeaveGroupRequest.MemberIdentity(member_id="", group_instance_id="i2")]), 3)
        self.assertEqual([x.error_code for x in body.members], [0, errors.UNKNOWN_MEMBER_ID])


class OffsetTests(GroupFixture, unittest.TestCase):
    def test_simple_commit_and_fetch(self):
        self.find()
        self.assertEqual(self.commit({("t", 0): (5, "meta"), ("t", 1): (7, None), ("nope", 0): (1, "")}),
                         {("t", 0): 0, ("t", 1): 0, ("nope", 0): errors.UNKNOWN_TOPIC_OR_PARTITION})
        code, got = self.fetch_offsets(topics=[("t", [0, 1, 2])])
        self.assertEqual((code, got), (0, {("t", 0): (5, "meta", 0), ("t", 1): (7, "", 0), ("t", 2): (-1, "", 0)}))
        code, got = self.fetch_offsets(topics=None)
        self.assertEqual(sorted(got), [("t", 0), ("t", 1)])
        self.assertEqual(self.commit({("t", 0): (5, "x" * 4097)}), {("t", 0): errors.OFFSET_METADATA_TOO_LARGE})
        # v8 several groups at once
        body = self.call(m.OffsetFetchRequest(groups=[
            m.OffsetFetchRequest.OffsetFetchRequestGroup(group_id="g", topics=None),
            m.OffsetFetchRequest.OffsetFetchRequestGroup(group_id="other", topics=[
                m.OffsetFetchRequest.OffsetFetchRequestTopics(name="t", partition_indexes=[0])])]), 8)
        self.assertEqual([(g.group_id, g.error_code, [(t.name, [(p.partition_index, p.committed_offset)
                                                              for p in t.partitions]) for t in g.topics])
                          for g in body.groups],
                         [("g", 0, [("t", [(0, 5), (1, 7)])]), ("other", 0, [("t", [(0, -1)])])])
        # a generation on a group that does not exist
        self.assertEqual(self.commit({("t", 0): (1, "")}, group="h", member_id="m", generation=3),
                         {("t", 0): errors.ILLEGAL_GENERATION})

    def test_member_commit_validation(self):
        leader, follower, gen = self.stable_pair()
        self.assertEqual(self.commit({("t", 0): (9, "")}, member_id=leader, generation=gen), {("t", 0): 0})
        self.assertEqual(self.commit({("t", 0): (9, "")}, member_id=leader, generation=gen - 1),
                         {("t", 0): errors.ILLEGAL_GENERATION})
        self.assertEqual(self.commit({("t", 0): (9, "")}, member_id="ghost", generation=gen),
                         {("t", 0): errors.UNKNOWN_MEMBER_ID})
        self.assertEqual(self.commit({("t", 0): (9, "")}), {("t", 0): errors.UNKNOWN_MEMBER_ID})
        self.join(member_id=leader)  # rebalance: commits of the old generation still pass in PreparingRebalance
        self.assertEqual(self.commit({("t", 1): (4, "")}, member_id=follower, generation=gen), {("t", 1): 0})

    def test_survives_restart(self):
        leader, follower, gen = self.stable_pair()
        self.commit({("t", 0): (11, "m0"), ("u", 1): (3, "")}, member_id=leader, generation=gen)
        self.commit({("t", 2): (2, "")}, group="simple")
        self.commit({("t", 2): (6, "")}, group="simple")
        self.restart()
        part = self.coordinator.partition_for("g")
        self.assertIn(part, self.coordinator.loading_partitions)
        self.assertEqual(self.heartbeat(leader, gen), 0)  # blind while loading
        self.assertEqual(self.fetch_offsets()[0], errors.COORDINATOR_LOAD_IN_PROGRESS)
        for _ in range(3):
            self.clock.advance(0)
        self.assertEqual(self.coordinator.loading_partitions, set())
        self.assertEqual(self.fetch_offsets()[1], {("t", 0): (11, "m0", 0), ("u", 1): (3, "", 0)})
        self.assertEqual(self.fetch_offsets("simple")[1], {("t", 2): (6, "", 0)})
        g = self.describe()
        self.assertEqual((g.group_state, sorted(x.member_id for x in g.members)),
                         ("Stable", sorted([leader, follower])))
        self.assertEqual(self.heartbeat(follower, gen), 0)
        # loaded members expire by session timeout like any other
        self.clock.advance(7)
        self.assertEqual(self.heartbeat(leader, gen), errors.UNKNOWN_MEMBER_ID)

    def test_a_partition_loads_in_slices(self):
        self.find("simple")  # creates __consumer_offsets
        for i in range(20):
            self.commit({("t", 0): (i, "")}, group="simple")
        self.restart()
        # one record per slice, each slice a reactor turn (1 ms here) after the previous
        self.coordinator._cooperator = task.Cooperator(
            terminationPredicateFactory=lambda: (lambda: True),
            scheduler=lambda step: self.clock.callLater(0.001, step))
        turns = 0
        while self.coordinator.loading_partitions and turns < 1000:
            self.clock.advance(0.001)
            turns += 1
            if self.coordinator.partition_for("simple") in self.coordinator.loading_partitions:
                self.assertEqual(self.fetch_offsets("simple")[0], errors.COORDINATOR_LOAD_IN_PROGRESS)
        self.assertGreater(turns, 20)  # 20 records, one or more groups: one slice each at least
        self.assertEqual(self.fetch_offsets("simple")[1], {("t", 0): (19, "", 0)})

    def test_delete_groups(self):
        leader, follower, gen = self.stable_pair()
        self.commit({("t", 0): (1, "")}, group="simple")
        body = self.call(m.DeleteGroupsRequest(groups_names=["g", "simple", "nothing"]), 2)
        self.assertEqual([(r.group_id, r.error_code) for r in body.results],
                         [("g", errors.NON_EMPTY_GROUP), ("simple", 0), ("nothing", errors.GROUP_ID_NOT_FOUND)])
        self.assertEqual(self.fetch_offsets("simple", topics=[("t", [0])])[1], {("t", 0): (-1, "", 0)})
        self.assertEqual(self.describe("simple").group_state, "Dead")
        self.restart()
        for _ in range(3):
            self.clock.advance(0)
        self.assertEqual(self.fetch_offsets("simple")[1], {})
        self.assertNotIn("simple", self.coordinator.groups)
        self.assertIn("g", self.coordinator.groups)

    def test_offset_delete(self):
        leader, follower, gen = self.stable_pair()  # subscribed to "t"
        self.commit({("t", 0): (1, ""), ("u", 0): (2, "")}, member_id=leader, generation=gen)
        body = self.call(m.OffsetDeleteRequest(group_id="g", topics=[
            m.OffsetDeleteRequest.OffsetDeleteRequestTopic(name=n, partitions=[
                m.OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)]) for n in ("t", "u", "x")]), 0)
        self.assertEqual((body.error_code, [(t.name, t.partitions[0].error_code) for t in body.topics]),
                         (0, [("t", errors.GROUP_SUBSCRIBED_TO_TOPIC), ("u", 0), ("x", errors.UNKNOWN_TOPIC_OR_PARTITION)]))
        self.assertEqual(sorted(self.fetch_offsets()[1]), [("t", 0)])
        body = self.call(m.OffsetDeleteRequest(group_id="none", topics=[]), 0)
        self.assertEqual(body.error_code, errors.GROUP_ID_NOT_FOUND)

    def test_deleted_topic_drops_offsets(self):
        self.find()
        self.commit({("t", 0): (1, ""), ("u", 0): (2, "")})
        self.metadata.delete_topic("u")
        self.assertEqual(sorted(self.fetch_offsets()[1]), [("t", 0)])
        self.restart()
        for _ in range(3):
            self.clock.advance(0)
        self.assertEqual(sorted(self.fetch_offsets()[1]), [("t", 0)])


class ExpiryTests(GroupFixture, unittest.TestCase):
    overrides = {"offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "10000"}

    def test_standalone_offsets_expire_then_group(self):
        self.find()
        self.commit({("t", 0): (1, "")})
        self.clock.advance(30)
        self.commit({("t", 1): (2, "")})
        self.clock.advance(40)  # t-0 is 70 s old, t-1 40 s
        self.assertEqual(sorted(self.fetch_offsets()[1]), [("t", 1)])
        self.clock.advance(30)
        self.assertEqual(self.fetch_offsets()[1], {})
        self.assertNotIn("g", self.coordinator.groups)
        self.restart()
        for _ in range(3):
            self.clock.advance(0)
        self.assertNotIn("g", self.coordinator.groups)

    def test_active_consumer_group_keeps_subscribed_offsets(self):
        d = self.join_new(session=100000, rebalance=100000)
        self.clock.advance(0)
        j = self.successResultOf(d).body
        self.successResultOf(self.sync(j.member_id, 1, [(j.member_id, b"")]))
        self.commit({("t", 0): (1, ""), ("u", 0): (1, "")}, member_id=j.member_id, generation=1)
        self.clock.advance(70)
        self.assertEqual(sorted(self.fetch_offsets()[1]), [("t", 0)])
