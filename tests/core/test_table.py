"""The immutable partition table: slots, versions, stamp, apply-if-newer."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardgrid.core.errors import ConfigError
from shardgrid.core.hashing import table_stamp
from shardgrid.core.identity import MemberId
from shardgrid.core.limits import MAX_REPLICA_COUNT
from shardgrid.core.table import PartitionTable, replica_index

A, B, C = (MemberId(f"uuid-{n}", f"127.0.0.1:{5701 + i}") for i, n in enumerate("ABC"))


def test_an_empty_table_has_no_owner_and_version_zero() -> None:
    table = PartitionTable.empty(271)
    assert table.partition_count == 271
    assert table.owner(0) is None
    assert set(table.versions) == {0}
    assert table.stamp == table_stamp([0] * 271)


def test_slots_are_padded_to_seven_and_duplicates_are_refused() -> None:
    table = PartitionTable.from_lists([[A, B], [B]])
    assert len(table.replicas[0]) == MAX_REPLICA_COUNT
    assert table.members() == [A, B]
    with pytest.raises(ConfigError, match="two replicas"):
        PartitionTable.from_lists([[A, A]])
    with pytest.raises(ConfigError, match="at most 7"):
        PartitionTable.from_lists([[A, B, C, None, None, None, None, None]])


def test_bad_sizes_and_versions_are_refused() -> None:
    with pytest.raises(ConfigError):
        PartitionTable.empty(0)
    with pytest.raises(ConfigError, match="version"):
        PartitionTable.from_lists([[A]], [-1])
    with pytest.raises(ConfigError, match="one version per partition"):
        PartitionTable.from_lists([[A], [B]], [1])


def test_with_partitions_changes_only_what_it_names_and_restamps() -> None:
    table = PartitionTable.from_lists([[A, B], [B, A], [C]])
    changed = table.with_partitions({1: ((C, A), 4)})
    assert changed.replicas[0] == table.replicas[0]
    assert changed.replicas[1][:2] == (C, A)
    assert changed.versions == (0, 4, 0)
    assert changed.stamp != table.stamp
    assert table.versions == (0, 0, 0)  # the original is untouched


def test_apply_if_newer_takes_only_newer_partitions() -> None:
    local = PartitionTable.from_lists([[A], [B], [C]], [3, 3, 3])
    received = PartitionTable.from_lists([[B], [C], [A]], [4, 3, 2])
    applied, changed = local.apply_if_newer(received)
    assert changed == (0,)
    assert applied.replicas[0][0] == B
    assert applied.replicas[1][0] == B  # equal version: kept even though the replicas differ
    assert applied.replicas[2][0] == C  # older: kept
    assert applied.versions == (4, 3, 3)
    same, nothing = applied.apply_if_newer(received)
    assert nothing == ()
    assert same is applied


def test_apply_if_newer_refuses_another_partition_count() -> None:
    with pytest.raises(ConfigError, match="partition count"):
        PartitionTable.empty(3).apply_if_newer(PartitionTable.empty(4))


@given(
    st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=40),
    st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=40),
)
def test_apply_if_newer_is_a_per_partition_maximum(ours: list[int], theirs: list[int]) -> None:
    size = min(len(ours), len(theirs))
    local = PartitionTable.from_lists([[A]] * size, ours[:size])
    received = PartitionTable.from_lists([[B]] * size, theirs[:size])
    applied, changed = local.apply_if_newer(received)
    assert applied.versions == tuple(max(a, b) for a, b in zip(ours[:size], theirs[:size], strict=True))
    assert changed == tuple(i for i in range(size) if theirs[i] > ours[i])
    assert all(applied.replicas[i][0] == (B if i in changed else A) for i in range(size))
    # applying twice changes nothing more, and the stamp tracks the versions
    again, none = applied.apply_if_newer(received)
    assert none == ()
    assert again.stamp == table_stamp(again.versions)


def test_replica_index_uses_minus_one_for_absent() -> None:
    slots = (A, None, B)
    assert replica_index(slots, B) == 2
    assert replica_index(slots, C) == -1
    assert replica_index(slots, None) == -1
