"""The leader's repair after crashes, and the whole rebalance step it runs afterwards."""

from __future__ import annotations

import random

from shardgrid.core.identity import MemberId, MemberInfo
from shardgrid.core.migration import MigrationKind, apply_migration
from shardgrid.core.placement import arrange
from shardgrid.core.planner import replica_count
from shardgrid.core.rebalance import plan_rebalance
from shardgrid.core.repair import remove_members
from shardgrid.core.table import PartitionTable

A, B, C, D = (MemberId(f"uuid-{n}", f"127.0.0.1:{5701 + i}") for i, n in enumerate("ABCD"))


def test_the_hottest_surviving_backup_is_promoted_and_versions_bump() -> None:
    table = PartitionTable.from_lists([[A, B, C], [B, A, C], [C, D]], [5, 5, 5])
    repair = remove_members(table, [A])
    assert repair.table.replicas[0][:3] == (B, None, C)
    assert repair.table.replicas[1][:3] == (B, None, C)
    assert repair.table.replicas[2] == table.replicas[2]
    assert repair.table.versions == (6, 6, 5)
    assert [(pid, m.kind, m.destination) for pid, m in repair.promotions] == [(0, MigrationKind.SHIFT_UP, B)]
    assert repair.lost_partitions == ()


def test_a_partition_whose_every_replica_crashed_is_reported_lost() -> None:
    table = PartitionTable.from_lists([[A, B], [C, D]])
    repair = remove_members(table, [A, B])
    assert repair.lost_partitions == (0,)
    assert repair.table.owner(0) is None


def test_rebalance_plans_replay_to_the_target_without_losing_replicas() -> None:
    rng = random.Random(11)
    members = [MemberId(f"m{i}", f"h:{i}") for i in range(6)]
    before = arrange([MemberInfo(m) for m in members], PartitionTable.empty(500), rng, backup_count=2)
    repaired = remove_members(before, [members[0]]).table
    joined = [*members[1:], MemberId("m-new", "h:new")]
    plan = plan_rebalance([MemberInfo(m) for m in joined], repaired, rng, backup_count=2)
    assert plan.migration_count > 0
    for pid in range(500):
        slots = list(repaired.replicas[pid])
        floor = min(replica_count(slots), replica_count(plan.target.replicas[pid]))
        for migration in plan.migrations.get(pid, ()):
            slots = apply_migration(slots, migration)
            assert replica_count(slots) >= floor
        assert tuple(slots) == plan.target.replicas[pid]
