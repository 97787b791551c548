"""Members that stop answering while holding the last replicas of some partitions (found by an
outside tester: a network split made the majority declare those partitions lost and serve them
empty, although the members that held them were alive). The log marks them unreachable: what
has a replica elsewhere is repaired, what has none keeps its slots, unavailable, until one of
them answers again, is removed for good, or an operator revives it."""

from __future__ import annotations

import random

from shardgrid.core import messages as m
from shardgrid.core.identity import MemberId
from shardgrid.core.inputs import Receive, Start
from shardgrid.core.member import Member
from shardgrid.core.metadata import MemberRecord, MetadataState, apply_commands
from shardgrid.core.metadata.commands import (
    AddMembers,
    MarkReachable,
    MarkUnreachable,
    RemoveMembers,
    ReviveUnavailable,
)
from shardgrid.core.raft import Membership, Snapshot
from shardgrid.core.raft.messages import InstallSnapshot
from shardgrid.core.table import PartitionTable
from tests.core.test_member import CONFIG, SEEDS, grant_lease, key_in, replies
from tests.wire import codes, map_request

A, B, C, D = (MemberId(f"{n}" * 8, f"127.0.0.1:{5701 + i}") for i, n in enumerate("abcd"))
# Partition 0 on D and C (both to be cut off), 1 on C and A, 2 on A and B, 3 on D alone.
TABLE = PartitionTable.from_lists([[D, C], [C, A], [A, B], [D]], [1, 1, 1, 1])


def _state() -> MetadataState:
    return MetadataState(4, (MemberRecord(A), MemberRecord(B), MemberRecord(C), MemberRecord(D)), TABLE)


def test_marked_unreachable_keeps_what_only_they_hold_and_repairs_the_rest():
    state, changes = apply_commands(_state(), (MarkUnreachable((C, D)),))
    assert state.unreachable_members == (C, D)
    assert state.table is not None
    assert state.table.replicas[0][:2] == (D, C)  # kept whole: unavailable, not lost
    assert state.table.replicas[3][:1] == (D,)
    assert state.table.replicas[1][:2] == (A, None)  # repaired: A promoted
    assert state.unavailable_partitions() == [0, 3]
    assert (changes.unavailable, changes.lost) == ([0, 3], [])
    assert changes.promoted == [(1, A)]
    assert C not in state.data_members  # nothing new goes to them


def test_members_that_answer_again_serve_what_they_kept():
    state, _ = apply_commands(_state(), (MarkUnreachable((C, D)),))
    state, changes = apply_commands(state, (MarkReachable((D,)),))
    assert state.unavailable_partitions() == []  # both had D as owner: served again, C's copy aside
    assert changes.available == [0, 3]
    assert state.unreachable_members == (C,)
    state, changes = apply_commands(state, (MarkReachable((C,)),))
    assert changes.available == []
    assert state.unreachable_members == ()


def test_removed_for_good_the_partitions_only_they_held_are_lost():
    state, _ = apply_commands(_state(), (MarkUnreachable((C, D)),))
    state, changes = apply_commands(state, (RemoveMembers((D,)),))
    # Partition 3 had D alone: lost. Partition 0 keeps C, unreachable: still unavailable.
    assert changes.lost == [3]
    assert state.unavailable_partitions() == [0]
    state, changes = apply_commands(state, (RemoveMembers((C,)),))
    assert changes.lost == [0]
    assert state.unavailable_partitions() == []


def test_an_operator_revives_every_unavailable_partition_empty():
    state, _ = apply_commands(_state(), (MarkUnreachable((C, D)),))
    state, changes = apply_commands(state, (ReviveUnavailable(),))
    assert changes.lost == [0, 3]
    assert state.table is not None
    assert state.table.replicas[0] == (None,) * len(TABLE.replicas[0])
    assert state.unavailable_partitions() == []
    assert state.unreachable_members == (C, D)  # still members: they drop those copies if they return


def test_marking_again_or_marking_strangers_changes_nothing():
    state, _ = apply_commands(_state(), (MarkUnreachable((C,)),))
    again, changes = apply_commands(state, (MarkUnreachable((C, MemberId("zzzzzzzz", "x:1"))),))
    assert again is state
    assert changes.unavailable == []


def test_a_request_for_an_unavailable_partition_is_refused_naming_it_and_its_members():
    a, b, c = (
        MemberId(f"{n}" * 8 + "-0000-4000-8000-000000000001", f"127.0.0.1:{5701 + i}") for i, n in enumerate("abc")
    )
    table = PartitionTable.from_lists([[c]] + [[b, a]] * (CONFIG.partition_count - 1), [1] * CONFIG.partition_count)
    records = (MemberRecord(a), MemberRecord(b), MemberRecord(c, unreachable=True))
    member = Member(b, CONFIG, SEEDS, random.Random(2))
    member.handle(0, Start())
    snapshot = Snapshot(7, 1, Membership.of([a], [b, c]), MetadataState(CONFIG.partition_count, records, table))
    member.handle(10, Receive(a.address, a, b.uuid, InstallSnapshot(1, snapshot, 10)))
    now = grant_lease(member, 10)
    get = map_request(call_id=1, kind=m.GET, map_name="m", keys=(key_in(0),))
    (reply,) = replies(member.handle(now, Receive("client", None, None, get)))
    assert codes(reply) == (m.ReplyCode.UNAVAILABLE,)
    assert "partition 0 is unavailable" in reply.reason
    assert c.address in reply.reason
    (table_reply,) = replies(member.handle(now + 1, Receive("client", None, None, m.TableRequest())))
    assert table_reply.unavailable == (0,)


def test_a_stand_in_is_named_only_for_an_unavailable_partition_by_every_member_alike():
    """The member that serves the maps choosing availability (``serve_when_unavailable``) of an
    unavailable partition: one that answers and keeps data, the same for every state that
    applied the same log, and none once the partition is available again."""
    state, _ = apply_commands(_state(), (MarkUnreachable((C, D)),))
    again, _ = apply_commands(_state(), (MarkUnreachable((C, D)),))
    assert [state.stand_in(pid) for pid in range(4)] == [again.stand_in(pid) for pid in range(4)]
    assert state.stand_in(1) is None  # repaired: served by its owner
    assert state.stand_in(0) in (A, B)
    assert state.stand_in(3) in (A, B)
    state, _ = apply_commands(state, (MarkReachable((D,)),))
    assert state.stand_in(0) is None


def test_a_lite_member_never_stands_in_and_none_is_named_without_a_data_member_answering():
    lite_b = (MemberRecord(A, lite=True), MemberRecord(B, lite=True), MemberRecord(C), MemberRecord(D))
    state, _ = apply_commands(MetadataState(4, lite_b, TABLE), (MarkUnreachable((C, D)),))
    assert state.unavailable(0)
    assert state.stand_in(0) is None


def test_a_joiner_takes_over_only_the_partitions_it_wins():
    """Rendezvous hashing: a member joining moves a stand-in only to itself, never between others."""
    members = tuple(MemberRecord(MemberId(f"{i:08d}", f"127.0.0.1:{6000 + i}")) for i in range(6))
    cut = members[:2]
    rows = [[cut[0].id, cut[1].id] for _ in range(64)]
    state = MetadataState(64, members, PartitionTable.from_lists(rows, [1] * 64))
    state, _ = apply_commands(state, (MarkUnreachable(tuple(r.id for r in cut)),))
    before = [state.stand_in(pid) for pid in range(64)]
    joiner = MemberRecord(MemberId("joiner00", "127.0.0.1:7000"))
    grown, _ = apply_commands(state, (AddMembers((joiner,)),))
    after = [grown.stand_in(pid) for pid in range(64)]
    assert all(b == a or a == joiner.id for b, a in zip(before, after, strict=True))
    assert len(set(before)) == 4  # spread over the members that answer
    assert joiner.id in after
