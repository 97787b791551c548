"""From a membership to a plan: repartition, eliminate cycles, plan and prioritize every partition.

This is the stateless step of seed 000, section 3.2 that the leader runs after every membership
change (and reruns from scratch when anything changes while it executes). ``shardgrid plan``
runs the very same function, so what it prints is what a cluster would do.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from shardgrid.core.identity import MemberId, MemberInfo
from shardgrid.core.migration import Migration
from shardgrid.core.placement import PLAN_SLICE_VISITS, Steps, arranging, run_through
from shardgrid.core.planner import eliminate_cycles, plan_migrations, prioritize_copies_and_shift_ups
from shardgrid.core.table import PartitionTable

# What planning one partition's migrations costs, in partition visits (``PLAN_SLICE_VISITS``).
PLANNED_PARTITION_VISITS = 20


@dataclass(frozen=True, slots=True)
class RebalancePlan:
    """The cycle-free target and, per partition that changes, its migrations in run order."""

    current: PartitionTable
    target: PartitionTable
    migrations: Mapping[int, tuple[Migration, ...]]

    @property
    def migration_count(self) -> int:
        return sum(len(queue) for queue in self.migrations.values())


def plan_rebalance(
    members: Sequence[MemberInfo],
    current: PartitionTable,
    rng: random.Random,
    groups: Mapping[MemberId, str] | None = None,
    *,
    backup_count: int,
    keep: Collection[MemberId] = (),
    frozen: Collection[int] = (),
) -> RebalancePlan:
    """Repartition ``current`` over ``members`` and plan the migrations, ascending partition id
    (``keep``: leaving members whose copies a SHIFT UP parks instead of dropping; ``frozen``:
    partitions that keep their slots, unavailable while every replica of theirs is unreachable)."""
    return run_through(
        planning_rebalance(members, current, rng, groups, backup_count=backup_count, keep=keep, frozen=frozen)
    )


def planning_rebalance(
    members: Sequence[MemberInfo],
    current: PartitionTable,
    rng: random.Random,
    groups: Mapping[MemberId, str] | None = None,
    *,
    backup_count: int,
    keep: Collection[MemberId] = (),
    frozen: Collection[int] = (),
) -> Steps[RebalancePlan]:
    """``plan_rebalance``, a share at a time (see ``placement.Steps``): what the leader runs."""
    arranged = yield from arranging(members, current, rng, groups, backup_count=backup_count)
    targets = list(arranged.replicas)
    migrations: dict[int, tuple[Migration, ...]] = {}
    work = 0
    for pid, (held, wanted) in enumerate(zip(current.replicas, arranged.replicas, strict=True)):
        work += 1
        if work >= PLAN_SLICE_VISITS:
            yield work
            work = 0
        if pid in frozen:
            targets[pid] = held
            continue
        if held == wanted:
            continue
        work += PLANNED_PARTITION_VISITS
        targets[pid] = eliminate_cycles(held, wanted)
        planned = prioritize_copies_and_shift_ups(plan_migrations(held, targets[pid], keep))
        if planned:
            migrations[pid] = tuple(planned)
    target = PartitionTable(tuple(targets), current.versions)
    return RebalancePlan(current, target, migrations)
