"""Which planned migrations may run now (seed 003, section 2.2).

Migrations of one partition run one at a time, in plan order: a later one may depend on an
earlier one, and a missing backup is refilled before a rebalancing move. Migrations of different
partitions run in parallel, but no member takes part in more than ``max_parallel_migrations`` at
once, which bounds the memory and network a rebalance can take from any member.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from shardgrid.core.errors import InvariantViolation, invariant, require
from shardgrid.core.identity import MemberId
from shardgrid.core.limits import DEFAULT_MAX_PARALLEL_MIGRATIONS, MAX_PARALLEL_MIGRATIONS_LIMIT
from shardgrid.core.migration import Migration, MigrationKind, apply_migration
from shardgrid.core.table import PartitionTable


@dataclass(frozen=True, slots=True)
class ScheduledMigration:
    """A migration started for a partition, with every member it keeps busy."""

    partition_id: int
    migration: Migration
    participants: tuple[MemberId, ...]


def participants_of(migration: Migration, owner: MemberId | None) -> tuple[MemberId, ...]:
    """Source, destination and, for a transfer, the owner that sends the partition's data.

    A backup migration copies its data from the partition owner, not from the old backup, so the
    owner is busy too. A CLEAR only drops data on its source.
    """
    members = list(migration.participants)
    if owner is not None and migration.kind is not MigrationKind.CLEAR and owner not in members:
        members.append(owner)
    return tuple(sorted(members))


def next_migrations(
    pending_by_partition: Mapping[int, Sequence[Migration]],
    in_flight: Sequence[ScheduledMigration],
    max_parallel_migrations: int = DEFAULT_MAX_PARALLEL_MIGRATIONS,
    *,
    owner_of: Callable[[int], MemberId | None],
) -> list[ScheduledMigration]:
    """The migrations to start now, given what is already running.

    Only the head of each partition's queue may start, only when no migration of that partition
    is in flight, and only when every participant is in fewer than ``max_parallel_migrations``
    migrations. Partitions are considered in the mapping's order, so the result is deterministic.
    """
    require(
        1 <= max_parallel_migrations <= MAX_PARALLEL_MIGRATIONS_LIMIT,
        f"max_parallel_migrations must be 1..{MAX_PARALLEL_MIGRATIONS_LIMIT}, got {max_parallel_migrations}",
    )
    load: Counter[MemberId] = Counter()
    busy_partitions = set()
    for running in in_flight:
        if not (running.partition_id not in busy_partitions):
            raise InvariantViolation(f"two migrations of {running.partition_id} in flight")
        busy_partitions.add(running.partition_id)
        load.update(running.participants)
    saturated = {member for member, count in load.items() if count >= max_parallel_migrations}
    started: list[ScheduledMigration] = []
    for partition_id, queue in pending_by_partition.items():
        if not queue or partition_id in busy_partitions:
            continue
        migration = queue[0]
        if migration.source in saturated or migration.destination in saturated:
            continue  # the cheap check first: most heads wait for a busy source or destination
        participants = participants_of(migration, owner_of(partition_id))
        if any(member in saturated for member in participants):
            continue
        load.update(participants)
        saturated.update(m for m in participants if load[m] >= max_parallel_migrations)
        started.append(ScheduledMigration(partition_id, migration, participants))
    return started


def schedule_rounds(
    current: PartitionTable,
    plan: Mapping[int, Sequence[Migration]],
    max_parallel_migrations: int = DEFAULT_MAX_PARALLEL_MIGRATIONS,
) -> list[list[ScheduledMigration]]:
    """The plan run as rounds in which every started migration finishes before the next round.

    Real migrations finish at different times, so this is the schedule's critical path in
    migration steps, not a timing: it tells how much parallelism a plan allows.
    """
    slots = {pid: list(current.replicas[pid]) for pid in plan}
    pending = {pid: list(queue) for pid, queue in plan.items() if queue}
    rounds: list[list[ScheduledMigration]] = []
    while pending:
        started = next_migrations(pending, (), max_parallel_migrations, owner_of=lambda pid: slots[pid][0])
        invariant(bool(started), "pending migrations but none can start")
        for scheduled in started:
            pid = scheduled.partition_id
            slots[pid] = apply_migration(slots[pid], scheduled.migration)
            queue = pending[pid]
            queue.pop(0)
            if not queue:
                del pending[pid]
        rounds.append(started)
    return rounds
