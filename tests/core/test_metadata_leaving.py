"""A leave recorded in the log: the last data member's is refused when it is applied (the leader's
check before proposing cannot see the leaves proposed with it), unless its process stops anyway
(``even_if_last``, as on SIGTERM); and a leave and a state that forbids migration exclude each
other whichever comes first in the log (a leave waited out a pause until the state came back)."""

from __future__ import annotations

import pytest

from shardgrid.core.identity import MemberId
from shardgrid.core.metadata import ClusterState, MemberRecord, MetadataState, apply_commands
from shardgrid.core.metadata.commands import MarkLeaving, PromoteToDataMember, SetClusterState
from shardgrid.core.table import PartitionTable

A, B, C = (MemberId(f"{n}" * 8, f"127.0.0.1:{5701 + i}") for i, n in enumerate("abc"))


def _state(*records: MemberRecord, table: bool = True) -> MetadataState:
    return MetadataState(4, records, PartitionTable.empty(4) if table else None)


def test_leaves_proposed_together_leave_the_last_data_member_staying() -> None:
    state, changes = apply_commands(
        _state(MemberRecord(A), MemberRecord(B), MemberRecord(C)), (MarkLeaving(A), MarkLeaving(B), MarkLeaving(C))
    )
    assert [r.leaving for r in state.members] == [True, True, False]
    assert state.data_members == (C,)
    assert len(changes.refused) == 1
    assert changes.refused[0].startswith(f"{C}: the last data member cannot hand its replicas over")


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


@pytest.mark.parametrize("paused", [ClusterState.NO_MIGRATION, ClusterState.FROZEN, ClusterState.PASSIVE])
def test_a_pause_after_a_leave_is_refused_and_a_leave_after_a_pause(paused: ClusterState) -> None:
    members = (MemberRecord(A), MemberRecord(B), MemberRecord(C))
    state, changes = apply_commands(_state(*members), (MarkLeaving(A), SetClusterState(paused)))
    assert state.members[0].leaving
    assert state.cluster_state is ClusterState.ACTIVE
    assert changes.cluster_state is None
    assert len(changes.refused) == 1
    assert "is leaving" in changes.refused[0]
    assert paused.value in changes.refused[0]

    state, changes = apply_commands(_state(*members), (SetClusterState(paused), MarkLeaving(A)))
    assert state.cluster_state is paused
    assert not any(r.leaving for r in state.members)
    assert len(changes.refused) == 1
    assert "nothing migrates" in changes.refused[0]


def test_a_shutdowns_passive_and_active_are_taken_while_a_member_leaves() -> None:
    members = (MemberRecord(A, leaving=True), MemberRecord(B), MemberRecord(C, lite=True, leaving=True))
    state, changes = apply_commands(_state(*members), (SetClusterState(ClusterState.PASSIVE, for_shutdown=True),))
    assert state.cluster_state is ClusterState.PASSIVE
    assert changes.refused == []
    state, changes = apply_commands(state, (SetClusterState(ClusterState.ACTIVE),))
    assert state.cluster_state is ClusterState.ACTIVE
    assert changes.refused == []
    # Only a leaving lite member: it hands nothing over, so the pause is taken.
    lite_only = (MemberRecord(A), MemberRecord(B), MemberRecord(C, lite=True, leaving=True))
    state, changes = apply_commands(_state(*lite_only), (SetClusterState(ClusterState.FROZEN),))
    assert state.cluster_state is ClusterState.FROZEN
    assert changes.refused == []


@pytest.mark.parametrize("paused", [ClusterState.NO_MIGRATION, ClusterState.FROZEN])
def test_a_leaving_lite_member_is_not_promoted_when_applied(paused: ClusterState) -> None:
    """Found by an outside tester: its leave, then its promotion, made a leaving data member in a
    paused state (the core's invariant stopped the members)."""
    members = (MemberRecord(A), MemberRecord(B), MemberRecord(C, lite=True))
    state = MetadataState(4, members, PartitionTable.empty(4), paused)
    state, changes = apply_commands(state, (MarkLeaving(C), PromoteToDataMember(C)))
    assert state.members[2].lite
    assert state.members[2].leaving
    assert changes.refused == [f"{C}: a leaving member is not promoted"]


@pytest.mark.parametrize("order", ["leave-first", "pause-first"])
def test_before_the_first_table_a_pause_and_a_leave_are_both_taken(order: str) -> None:
    """Found by an outside tester (partitions assigned on first use): with no table yet, nothing
    is handed over, so both are taken, and the core's invariant holds (it stopped the members)."""
    leave, pause = MarkLeaving(B), SetClusterState(ClusterState.NO_MIGRATION)
    commands = (leave, pause) if order == "leave-first" else (pause, leave)
    state, changes = apply_commands(_state(MemberRecord(A), MemberRecord(B), table=False), commands)
    assert state.members[1].leaving
    assert state.cluster_state is ClusterState.NO_MIGRATION
    assert changes.refused == []
