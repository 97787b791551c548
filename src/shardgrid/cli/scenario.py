"""A membership change played out on a settled cluster, for ``shardgrid plan`` and the benchmark.

It builds a balanced table for the starting members, applies the change the way the leader
would (a crash first repairs the table by promotion, a graceful removal keeps the leaving member
as a migration source), repartitions, plans and schedules. Member identities come from the seed,
so the same arguments always print the same plan.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass

from shardgrid.core.errors import require
from shardgrid.core.identity import MemberId, MemberInfo
from shardgrid.core.limits import MAX_BACKUP_COUNT, MAX_MEMBER_COUNT, MAX_PARTITION_COUNT
from shardgrid.core.placement import arrange
from shardgrid.core.rebalance import RebalancePlan, plan_rebalance
from shardgrid.core.repair import Repair, remove_members
from shardgrid.core.schedule import ScheduledMigration, schedule_rounds
from shardgrid.core.table import PartitionTable

FIRST_PORT = 5701


@dataclass(frozen=True, slots=True, kw_only=True)
class ScenarioSpec:
    """What to play: how many members, what happens to them, and the cluster's configuration."""

    members: int
    add: int = 0
    remove: int = 0
    crash: int = 0
    partitions: int = 271
    backups: int = 1
    seed: int = 0
    max_parallel_migrations: int = 10

    def validate(self) -> None:
        require(1 <= self.members <= MAX_MEMBER_COUNT, f"--members must be 1..{MAX_MEMBER_COUNT}")
        require(min(self.add, self.remove, self.crash) >= 0, "--add, --remove and --crash take counts >= 0")
        require(self.members + self.add <= MAX_MEMBER_COUNT, f"at most {MAX_MEMBER_COUNT} members in all")
        require(self.remove + self.crash <= self.members, "cannot remove or crash more members than there are")
        require(1 <= self.partitions <= MAX_PARTITION_COUNT, f"--partitions must be 1..{MAX_PARTITION_COUNT}")
        require(0 <= self.backups <= MAX_BACKUP_COUNT, f"--backups must be 0..{MAX_BACKUP_COUNT}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScenarioResult:
    spec: ScenarioSpec
    before: PartitionTable
    members_after: tuple[MemberId, ...]
    added: tuple[MemberId, ...]
    removed: tuple[MemberId, ...]
    crashed: tuple[MemberId, ...]
    repair: Repair | None
    plan: RebalancePlan
    rounds: list[list[ScheduledMigration]]
    plan_ms: float
    schedule_ms: float


def make_members(rng: random.Random, count: int, first_index: int = 0) -> list[MemberId]:
    """Members with uuids drawn from ``rng`` (reproducible) and consecutive loopback ports."""
    return [
        MemberId(str(uuid.UUID(int=rng.getrandbits(128), version=4)), f"127.0.0.1:{FIRST_PORT + first_index + i}")
        for i in range(count)
    ]


def settled_table(members: list[MemberId], partitions: int, backups: int, rng: random.Random) -> PartitionTable:
    """The table of a cluster that finished all its migrations for ``members``."""
    return arrange([MemberInfo(m) for m in members], PartitionTable.empty(partitions), rng, backup_count=backups)


def run_scenario(spec: ScenarioSpec) -> ScenarioResult:
    spec.validate()
    rng = random.Random(spec.seed)
    starting = make_members(rng, spec.members)
    before = settled_table(starting, spec.partitions, spec.backups, rng)
    added = make_members(rng, spec.add, first_index=spec.members)
    leaving = list(starting)
    rng.shuffle(leaving)
    removed = tuple(sorted(leaving[: spec.remove]))
    crashed = tuple(sorted(leaving[spec.remove : spec.remove + spec.crash]))
    members_after = tuple(m for m in starting if m not in removed and m not in crashed) + tuple(added)

    started_at = time.perf_counter()
    current = before
    repair = None
    if crashed:
        repair = remove_members(before, crashed)
        current = repair.table
    plan = plan_rebalance([MemberInfo(m) for m in members_after], current, rng, backup_count=spec.backups)
    planned_at = time.perf_counter()
    rounds = schedule_rounds(current, plan.migrations, spec.max_parallel_migrations)
    scheduled_at = time.perf_counter()
    return ScenarioResult(
        spec=spec,
        before=before,
        members_after=members_after,
        added=tuple(added),
        removed=removed,
        crashed=crashed,
        repair=repair,
        plan=plan,
        rounds=rounds,
        plan_ms=(planned_at - started_at) * 1000,
        schedule_ms=(scheduled_at - planned_at) * 1000,
    )
