"""A persistent member back from its data directory at another address is renamed by the log
(``ReaddressMember``): the same member, so its record and its table slots name the new address,
only the partitions it holds change version, and nothing is repaired or lost."""

from __future__ import annotations

from shardgrid.core.identity import MemberId
from shardgrid.core.metadata import MemberRecord, MetadataState, apply_commands
from shardgrid.core.metadata.commands import MarkUnreachable, ReaddressMember, StartMigrations
from shardgrid.core.migration import Migration, MigrationRecord
from shardgrid.core.table import PartitionTable

A, B, C = (MemberId(f"{n}" * 8, f"127.0.0.1:{5701 + i}") for i, n in enumerate("abc"))
C_ELSEWHERE = MemberId(C.uuid, "127.0.0.1:6000")
# Partition 0 on A and C, 1 on C alone, 2 on A and B.
TABLE = PartitionTable.from_lists([[A, C], [C], [A, B]], [3, 5, 7])


def _state() -> MetadataState:
    return MetadataState(3, (MemberRecord(A), MemberRecord(B), MemberRecord(C, lite=False)), TABLE)


def test_the_member_and_its_slots_are_renamed_and_only_their_versions_rise():
    state, changes = apply_commands(_state(), (ReaddressMember(C, C_ELSEWHERE),))
    assert state.member_ids == (A, B, C_ELSEWHERE)  # its place in the list (oldest first) kept
    assert state.table is not None
    assert state.table.replicas[0][:2] == (A, C_ELSEWHERE)
    assert state.table.replicas[1][:1] == (C_ELSEWHERE,)
    assert list(state.table.versions) == [4, 6, 7]
    assert changes.members_readdressed == [(C, C_ELSEWHERE)]
    assert changes.partitions == {0, 1}
    assert (changes.lost, changes.promoted, changes.members_removed) == ([], [], [])


def test_a_rename_that_does_not_fit_is_refused_and_changes_nothing():
    before = _state()
    refusals = [
        ReaddressMember(C, MemberId("z" * 8, "127.0.0.1:6000")),  # another uuid
        ReaddressMember(C, C),  # the same address
        ReaddressMember(MemberId("z" * 8, "127.0.0.1:1"), MemberId("z" * 8, "127.0.0.1:2")),  # no such member
        ReaddressMember(C, MemberId(C.uuid, A.address)),  # A listens there
    ]
    for command in refusals:
        state, changes = apply_commands(before, (command,))
        assert state is before, command
        assert changes.refused, command
    taken, _ = apply_commands(before, (ReaddressMember(C, C_ELSEWHERE),))
    again, changes = apply_commands(taken, (ReaddressMember(C, C_ELSEWHERE),))  # applied twice
    assert again is taken
    assert changes.refused


def test_an_unreachable_member_renamed_serves_again_and_its_migrations_are_rolled_back():
    state, _ = apply_commands(_state(), (MarkUnreachable((C,)),))
    assert state.unavailable_partitions() == [1]
    record = MigrationRecord(
        migration_id="m-1",
        partition_id=2,
        migration=Migration(
            source=None,
            source_current_index=-1,
            source_new_index=-1,
            destination=C,
            destination_current_index=-1,
            destination_new_index=2,
        ),
        version_before=7,
    )
    state, changes = apply_commands(state, (StartMigrations((record,)),))
    assert changes.started == [record]
    state, changes = apply_commands(state, (ReaddressMember(C, C_ELSEWHERE),))
    assert state.unreachable_members == ()
    assert state.unavailable_partitions() == []
    assert changes.available == [1]
    assert changes.members_reachable == [C_ELSEWHERE]
    assert [r.migration_id for r in changes.finished] == ["m-1"]  # its messages went to the old address
    assert not state.migrations
