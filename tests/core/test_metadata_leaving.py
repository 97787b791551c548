"""A leave recorded in the log: the last data member's is refused when it is applied (the leader's
check before proposing cannot see the leaves proposed with it), unless its process stops anyway
(``even_if_last``, as on SIGTERM)."""

from __future__ import annotations

from shardgrid.core.identity import Replica
from shardgrid.core.metadata import MemberRecord, MetadataState, apply_commands
from shardgrid.core.metadata.commands import MarkLeaving
from shardgrid.core.table import PartitionTable

A, B, C = (Replica(f"{n}" * 8, f"127.0.0.1:{5701 + i}") for i, n in enumerate("abc"))


def _state(*records: MemberRecord, table: bool = True) -> MetadataState:
    return MetadataState(4, records, PartitionTable.empty(4) if table else None)


def test_leaves_proposed_together_leave_the_last_data_member_staying() -> None:
    state, changes = apply_commands(
        _state(MemberRecord(A), MemberRecord(B), MemberRecord(C)), (MarkLeaving(A), MarkLeaving(B), MarkLeaving(C))
    )
    assert [r.leaving for r in state.members] == [True, True, False]
    assert state.data_members == (C,)
    assert changes.refused == [f"{C} is the last data member: nobody would take its replicas"]


def test_a_leave_even_if_last_is_recorded_and_no_data_member_stays() -> None:
    state, changes = apply_commands(
        _state(MemberRecord(A, leaving=True), MemberRecord(B)), (MarkLeaving(B, even_if_last=True),)
    )
    assert all(r.leaving for r in state.members)
    assert state.data_members == ()
    assert changes.refused == []


def test_a_lite_member_or_a_cluster_without_a_table_leaves_as_before() -> None:
    state, changes = apply_commands(_state(MemberRecord(A), MemberRecord(B, lite=True)), (MarkLeaving(B),))
    assert state.members[1].leaving
    assert changes.refused == []
    state, changes = apply_commands(_state(MemberRecord(A), table=False), (MarkLeaving(A),))
    assert state.members[0].leaving
    assert changes.refused == []
