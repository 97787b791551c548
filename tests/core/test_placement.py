"""Repartitioning: balance, minimal movement, distinct members and groups, determinism."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from shardgrid.core.errors import ConfigError
from shardgrid.core.identity import MemberId, MemberInfo
from shardgrid.core.placement import arrange, replica_count_for
from shardgrid.core.repair import remove_members
from shardgrid.core.table import PartitionTable

# Each example arranges up to 20,000 partitions; SHARDGRID_PLACEMENT_EXAMPLES raises the count
# for a thorough run (the CI default keeps the suite fast).
SLOW = settings(
    max_examples=int(os.environ.get("SHARDGRID_PLACEMENT_EXAMPLES", "20")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
# The corners of the required ranges (271..20,000 partitions, 1..200 members) run every time.
CORNERS = [(20_000, 200, 1, 7), (20_000, 10, 2, 3), (271, 1, 0, 0), (271, 200, 6, 1), (20_000, 2, 1, 5)]


def at_corners(min_members: int = 1, min_backups: int = 0):  # type: ignore[no-untyped-def]
    def decorate(test):  # type: ignore[no-untyped-def]
        for corner in CORNERS:
            if corner[1] >= min_members and corner[2] >= min_backups:
                test = example(corner)(test)
        return test

    return decorate


def members_named(count: int, start: int = 0) -> list[MemberId]:
    return [MemberId(f"m{i:04d}", f"127.0.0.1:{5701 + i}") for i in range(start, start + count)]


def infos(members: list[MemberId]) -> list[MemberInfo]:
    return [MemberInfo(m) for m in members]


def settled(members: list[MemberId], partitions: int, backups: int, seed: int) -> PartitionTable:
    return arrange(infos(members), PartitionTable.empty(partitions), random.Random(seed), backup_count=backups)


def assert_well_formed(table: PartitionTable, members: list[MemberId], replicas: int) -> None:
    allowed = set(members)
    for slots in table.replicas:
        present = [r for r in slots if r is not None]
        assert slots[:replicas] == tuple(present), f"slots not filled hottest first: {slots}"
        assert len(present) == replicas
        assert len(set(present)) == len(present)
        assert set(present) <= allowed


def assert_balanced(table: PartitionTable, members: list[MemberId], replicas: int) -> None:
    average = table.partition_count / len(members)
    tolerance = max(3.0, 0.1 * average)
    for index in range(replicas):
        counts = Counter(slots[index] for slots in table.replicas)
        for member in members:
            assert abs(counts[member] - average) <= tolerance, (
                f"index {index}: {member} holds {counts[member]}, average {average:.1f}"
            )


def changed_slots(before: PartitionTable, after: PartitionTable) -> int:
    return sum(
        1 for a, b in zip(before.replicas, after.replicas, strict=True) for x, y in zip(a, b, strict=False) if x != y
    )


def new_holdings(before: PartitionTable, after: PartitionTable) -> int:
    """MemberIds a member must receive data for: it holds the partition after but not before."""
    return sum(
        1 for a, b in zip(before.replicas, after.replicas, strict=True) for m in b if m is not None and m not in a
    )


scales = st.tuples(
    st.integers(min_value=271, max_value=20_000),  # partitions
    st.integers(min_value=1, max_value=200),  # members
    st.integers(min_value=0, max_value=3),  # backups
    st.integers(min_value=0, max_value=2**32),  # seed
)


@SLOW
@given(scales)
@at_corners()
def test_a_fresh_table_is_balanced_on_every_replica_index(scale: tuple[int, int, int, int]) -> None:
    partitions, count, backups, seed = scale
    members = members_named(count)
    table = settled(members, partitions, backups, seed)
    replicas = replica_count_for(count, count, backups)
    assert_well_formed(table, members, replicas)
    assert_balanced(table, members, replicas)


@SLOW
@given(scales)
@at_corners()
def test_adding_a_member_moves_about_its_fair_share_and_stays_balanced(scale: tuple[int, int, int, int]) -> None:
    partitions, count, backups, seed = scale
    members = members_named(count)
    before = settled(members, partitions, backups, seed)
    grown = [*members, *members_named(1, start=count)]
    after = arrange(infos(grown), before, random.Random(seed + 1), backup_count=backups)
    replicas = replica_count_for(count + 1, count + 1, backups)
    assert_well_formed(after, grown, replicas)
    assert_balanced(after, grown, replicas)
    old_replicas = replica_count_for(count, count, backups)
    # The joiner takes its share of every index; when it lets the replica count grow (fewer
    # members than replicas before), the new index is filled too, which is not movement.
    fair_share = math.ceil(replicas * partitions / (count + 1))
    grown_slots = (replicas - old_replicas) * partitions
    slack = 2 * replicas
    assert changed_slots(before, after) <= fair_share + grown_slots + slack


@SLOW
@given(scales.filter(lambda s: s[1] >= 2))
@at_corners(min_members=2)
def test_a_graceful_leave_reassigns_only_what_the_leaver_held(scale: tuple[int, int, int, int]) -> None:
    partitions, count, backups, seed = scale
    members = members_named(count)
    before = settled(members, partitions, backups, seed)
    leaver = members[seed % count]
    remaining = [m for m in members if m != leaver]
    after = arrange(infos(remaining), before, random.Random(seed + 1), backup_count=backups)
    replicas = replica_count_for(count - 1, count - 1, backups)
    assert_well_formed(after, remaining, replicas)
    assert_balanced(after, remaining, replicas)
    held = sum(1 for slots in before.replicas if leaver in slots)
    # Only the leaver's replicas need a new home; with fewer members than replicas, slots vanish instead.
    assert new_holdings(before, after) <= held + 2 * replicas
    # Survivors keep their replicas (they may move up), but for a few that exact quotas rebalance.
    survivors_dropped = sum(
        1
        for a, b in zip(before.replicas, after.replicas, strict=True)
        for m in a
        if m is not None and m != leaver and m not in b
    )
    assert survivors_dropped <= 2 * replicas


@SLOW
@given(scales.filter(lambda s: s[1] >= 2 and s[2] >= 1))
@at_corners(min_members=2, min_backups=1)
def test_after_a_crash_the_repaired_table_is_refilled_by_copies(scale: tuple[int, int, int, int]) -> None:
    partitions, count, backups, seed = scale
    members = members_named(count)
    before = settled(members, partitions, backups, seed)
    crashed = members[seed % count]
    repair = remove_members(before, [crashed])
    assert repair.lost_partitions == ()
    remaining = [m for m in members if m != crashed]
    after = arrange(infos(remaining), repair.table, random.Random(seed + 1), backup_count=backups)
    replicas = replica_count_for(count - 1, count - 1, backups)
    assert_well_formed(after, remaining, replicas)
    assert_balanced(after, remaining, replicas)
    empty_slots = sum(1 for slots in repair.table.replicas for r in slots[:replicas] if r is None)
    # Promotions leave some survivors owning more than their share; moving that excess is the
    # balancing slack, and nothing beyond it and the empty slots may move.
    share = partitions // (count - 1)
    excess = sum(
        max(0, held - share)
        for index in range(replicas)
        for held in Counter(s[index] for s in repair.table.replicas if s[index] is not None).values()
    )
    assert new_holdings(repair.table, after) <= empty_slots + excess + 2 * replicas


def test_a_settled_table_is_kept_as_it_is() -> None:
    members = members_named(7)
    table = settled(members, 2000, 2, seed=3)
    again = arrange(infos(members), table, random.Random(99), backup_count=2)
    assert again.replicas == table.replicas


def test_lite_members_own_nothing() -> None:
    members = members_named(4)
    lite = members_named(2, start=10)
    table = arrange(
        [*infos(members), *(MemberInfo(m, lite=True) for m in lite)],
        PartitionTable.empty(271),
        random.Random(1),
        backup_count=2,
    )
    assert set(table.members()) == set(members)


def test_no_data_member_leaves_every_slot_empty() -> None:
    table = arrange([MemberInfo(members_named(1)[0], lite=True)], PartitionTable.empty(5), random.Random(0))
    assert all(slots == (None,) * 7 for slots in table.replicas)


def test_fewer_members_than_replicas_gives_each_partition_every_member() -> None:
    members = members_named(2)
    table = settled(members, 271, 3, seed=0)
    assert_well_formed(table, members, 2)


@SLOW
@given(
    st.integers(min_value=271, max_value=5000),
    st.integers(min_value=2, max_value=5),  # groups
    st.integers(min_value=1, max_value=8),  # members per group
    st.integers(min_value=1, max_value=3),  # backups
    st.integers(min_value=0, max_value=2**32),
)
def test_replicas_sit_on_distinct_groups(
    partitions: int, group_count: int, per_group: int, backups: int, seed: int
) -> None:
    members = members_named(group_count * per_group)
    groups = {m: f"zone-{i % group_count}" for i, m in enumerate(members)}
    table = arrange(infos(members), PartitionTable.empty(partitions), random.Random(seed), groups, backup_count=backups)
    replicas = replica_count_for(len(members), group_count, backups)
    assert_well_formed(table, members, replicas)
    for slots in table.replicas:
        zones = [groups[m] for m in slots if m is not None]
        assert len(zones) == len(set(zones)), f"two replicas in one group: {slots}"
    assert_balanced(table, members, replicas)  # equal groups: balance is reachable


def test_uneven_groups_still_keep_replicas_apart() -> None:
    members = members_named(5)
    groups = {members[0]: "a", members[1]: "b", members[2]: "b", members[3]: "b", members[4]: "b"}
    table = arrange(infos(members), PartitionTable.empty(271), random.Random(0), groups, backup_count=1)
    for slots in table.replicas:
        assert members[0] in slots[:2]
        assert groups[slots[0]] != groups[slots[1]]


def test_every_data_member_needs_a_group_when_groups_are_given() -> None:
    members = members_named(2)
    with pytest.raises(ConfigError, match="without a group"):
        arrange(infos(members), PartitionTable.empty(10), random.Random(0), {members[0]: "a"})


def test_bad_backup_counts_are_refused() -> None:
    with pytest.raises(ConfigError, match="backup_count"):
        arrange(infos(members_named(2)), PartitionTable.empty(10), random.Random(0), backup_count=7)


_DETERMINISM_SCRIPT = """
import json, random
from shardgrid.core.identity import MemberInfo, MemberId
from shardgrid.core.placement import arrange
from shardgrid.core.table import PartitionTable
members = [MemberInfo(MemberId(f"m{i}", f"h:{i}")) for i in range(9)]
groups = {m.id: "g" + str(i % 3) for i, m in enumerate(members)}
t = arrange(members, PartitionTable.empty(997), random.Random(42), groups, backup_count=2)
print(json.dumps([[r.uuid if r else None for r in s] for s in t.replicas]))
"""


def test_same_seed_same_table_whatever_the_hash_seed() -> None:
    outputs = set()
    for hash_seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        result = subprocess.run(
            [sys.executable, "-c", _DETERMINISM_SCRIPT], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(result.stdout)
    assert len(outputs) == 1
    assert len(json.loads(outputs.pop())) == 997
