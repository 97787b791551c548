"""The migration planner of seed 000, section 3.2: from a partition's current replicas to its target.

The plan for one partition is a list of migrations whose replay turns the current replica array
into the (cycle-free) target, and every intermediate array keeps at least
``min(count before, count after)`` replicas: data never has fewer copies mid-plan than it has at
the start or will have at the end. Migrations run in the order planned (hottest index first), so
the owner is settled before the first backup, and so on.

Where the algorithm of seed 000 would drop a replica (a SHIFT UP that displaces a member wanted
at a hotter index, which is later copied back) at a moment when the replica count is already at
that floor, the planner first performs a COPY into an empty colder slot that the plan needs anyway.
The plan has the same migrations, reordered, and the floor holds.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from shardgrid.core.errors import InvariantViolation, invariant
from shardgrid.core.identity import MemberId
from shardgrid.core.limits import MAX_PLANNER_CHAIN_STEPS, MAX_REPLICA_COUNT
from shardgrid.core.migration import NO_INDEX, Migration, MigrationKind, apply_migration
from shardgrid.core.table import ReplicaSlots, normalize_slots, replica_index

# Every loop turn either advances the index or emits a migration, and a partition never needs
# more than a few migrations per slot; this bound turns a planner bug into an error, not a hang.
_MAX_PLANNER_TURNS = 4 * MAX_REPLICA_COUNT * MAX_REPLICA_COUNT


def replica_count(slots: Sequence[MemberId | None]) -> int:
    """How many slots hold a member: the partition's available replica count."""
    return sum(1 for r in slots if r is not None)


def eliminate_cycles(current: Sequence[MemberId | None], target: Sequence[MemberId | None]) -> ReplicaSlots:
    """The target with every cyclic movement reverted to the current owners (section 3.2.1).

    A cycle is a set of slots whose members only trade places among themselves (A takes B's slot,
    B takes C's, C takes A's). It cannot be carried out without first dropping one replica, so the
    slots of the cycle keep their current owners and produce no migration.
    """
    cur = normalize_slots(current)
    tgt = list(normalize_slots(target))
    for start in range(MAX_REPLICA_COUNT):
        if cur[start] is None or tgt[start] is None or cur[start] == tgt[start]:
            continue
        cycle = _cycle_from(cur, tgt, start)
        for index in cycle:
            tgt[index] = cur[index]
    return tuple(tgt)


def _cycle_from(cur: ReplicaSlots, tgt: Sequence[MemberId | None], start: int) -> list[int]:
    """The slots of the cycle through ``start``, or ``[]`` when the chain from it ends openly."""
    visited = [start]
    index = start
    for _ in range(MAX_REPLICA_COUNT):
        following = replica_index(tgt, cur[index])  # where the member now at `index` is wanted
        if following == NO_INDEX or following in visited[1:]:
            return []
        if following == start:
            return visited
        visited.append(following)
        index = following
    return []


def plan_migrations(
    current: Sequence[MemberId | None], target: Sequence[MemberId | None], keep: Collection[MemberId] = ()
) -> list[Migration]:
    """The ordered migrations that take one partition from ``current`` to its cycle-free target.

    A member of ``keep`` (one that is leaving, still alive) is never dropped by a SHIFT UP: it is
    parked in the slot the shifting member leaves and emptied by a CLEAR at the end of the plan,
    which the leader runs last, so that its copy stays a backup while the rest moves."""
    cur = list(normalize_slots(current))
    tgt = eliminate_cycles(cur, target)
    floor = min(replica_count(cur), replica_count(tgt))
    plan: list[Migration] = []

    def emit(migration: Migration) -> None:
        nonlocal cur
        cur = apply_migration(cur, migration)
        invariant(
            replica_count(cur) >= floor,
            lambda: f"planner dropped below {floor} replicas with {migration}; plan so far {plan}",
        )
        plan.append(migration)

    index = 0
    for _ in range(_MAX_PLANNER_TURNS):
        if index >= MAX_REPLICA_COUNT:
            break
        wanted, held = tgt[index], cur[index]
        if wanted is None:
            if held is not None:
                emit(
                    Migration(
                        source=held,
                        source_current_index=index,
                        source_new_index=NO_INDEX,
                        destination=None,
                        destination_current_index=NO_INDEX,
                        destination_new_index=NO_INDEX,
                    )
                )
            index += 1
        elif held is None:
            found_at = replica_index(cur, wanted)
            if not (found_at == NO_INDEX or found_at > index):
                raise InvariantViolation(f"{wanted} already settled hotter than {index}")
            emit(
                Migration(
                    source=None,
                    source_current_index=NO_INDEX,
                    source_new_index=NO_INDEX,
                    destination=wanted,
                    destination_current_index=found_at,
                    destination_new_index=index,
                )
            )  # COPY or SHIFT UP
            index += 1
        elif held == wanted:
            index += 1
        elif wanted not in cur:
            held_goes_to = replica_index(tgt, held)
            if not (held_goes_to == NO_INDEX or held_goes_to > index):
                raise InvariantViolation(f"{held} wanted hotter than {index}")
            if held_goes_to != NO_INDEX and cur[held_goes_to] is None:
                emit(
                    Migration(
                        source=held,
                        source_current_index=index,
                        source_new_index=held_goes_to,
                        destination=wanted,
                        destination_current_index=NO_INDEX,
                        destination_new_index=index,
                    )
                )  # SHIFT DOWN
            else:
                emit(
                    Migration(
                        source=held,
                        source_current_index=index,
                        source_new_index=NO_INDEX,
                        destination=wanted,
                        destination_current_index=NO_INDEX,
                        destination_new_index=index,
                    )
                )  # MOVE
            index += 1
        else:
            enabling = _enabling_migration(cur, tgt, index)
            if _drops_replica(enabling) and (replica_count(cur) - 1 < floor or enabling.source in keep):
                enabling = _pending_copy(cur, tgt) or _parked(enabling)
            emit(enabling)
    else:
        invariant(False, lambda: f"planner did not finish: current {current}, target {tgt}, plan {plan}")
    invariant(tuple(cur) == tgt, lambda: f"plan {plan} reaches {cur}, not {tgt}")
    return plan


def _enabling_migration(cur: list[MemberId | None], tgt: ReplicaSlots, index: int) -> Migration:
    """A SHIFT UP or MOVE at a colder index that lets the member wanted at ``index`` move there.

    The member wanted at ``index`` already holds a colder slot ``k``. If nobody is wanted at
    ``k``, it shifts up from ``k`` (the member it displaces shifts down to its own target slot
    when that slot is free, and is dropped otherwise). If a member not yet in the partition is
    wanted at ``k``, a MOVE at ``k`` comes first. If a member already in the partition is wanted
    at ``k``, the same question is asked one link further down the chain.
    """
    settled = index  # slots hotter than this already hold their target members
    visited = [index]
    for _ in range(MAX_PLANNER_CHAIN_STEPS):
        found_at = replica_index(cur, tgt[index])
        if not (found_at > settled and found_at not in visited):
            raise InvariantViolation(f"chain loops at {index}: {cur} -> {tgt}")
        visited.append(found_at)
        wanted_there = tgt[found_at]
        if wanted_there is None:
            displaced = cur[index]
            goes_to = replica_index(tgt, displaced)
            if goes_to <= index or cur[goes_to] is not None:
                goes_to = NO_INDEX
            source_index = NO_INDEX if displaced is None else index
            return Migration(
                source=displaced,
                source_current_index=source_index,
                source_new_index=goes_to,
                destination=tgt[index],
                destination_current_index=found_at,
                destination_new_index=index,
            )
        if wanted_there not in cur:
            return Migration(
                source=cur[found_at],
                source_current_index=found_at,
                source_new_index=NO_INDEX,
                destination=wanted_there,
                destination_current_index=NO_INDEX,
                destination_new_index=found_at,
            )
        index = found_at
    invariant(False, lambda: f"no enabling migration found: {cur} -> {tgt}")
    raise AssertionError("unreachable")


def _drops_replica(migration: Migration) -> bool:
    return (
        migration.source is not None
        and migration.source_new_index == NO_INDEX
        and migration.kind is MigrationKind.SHIFT_UP
    )


def _pending_copy(cur: list[MemberId | None], tgt: ReplicaSlots) -> Migration | None:
    """A COPY the plan needs anyway: an empty slot whose target member holds no replica yet.

    Nothing else can fill that slot (only a member already in the partition can be shifted, and
    the slot's target member is not), so doing the COPY earlier adds no migration.
    """
    for index, (held, wanted) in enumerate(zip(cur, tgt, strict=True)):
        if held is None and wanted is not None and wanted not in cur:
            return Migration(
                source=None,
                source_current_index=NO_INDEX,
                source_new_index=NO_INDEX,
                destination=wanted,
                destination_current_index=NO_INDEX,
                destination_new_index=index,
            )
    return None


def _parked(shift_up: Migration) -> Migration:
    """The SHIFT UP with the displaced member kept in the slot the shifting member leaves.

    The two members swap slots and both keep their data. A displaced member wanted elsewhere is
    shifted on from there later instead of being dropped now and copied back later.
    """
    return Migration(
        source=shift_up.source,
        source_current_index=shift_up.source_current_index,
        source_new_index=shift_up.destination_current_index,
        destination=shift_up.destination,
        destination_current_index=shift_up.destination_current_index,
        destination_new_index=shift_up.destination_new_index,
    )


def prioritize_copies_and_shift_ups(migrations: Sequence[Migration]) -> list[Migration]:
    """Move each COPY and SHIFT UP into an empty slot ahead of what it may pass (section 3.2.3).

    They raise the available replica count while a MOVE keeps it, so they should not wait behind
    one, whatever index the MOVE is on. As in Hazelcast's planner, such a migration walks back past
    every earlier migration except another COPY or SHIFT UP from an empty slot (their order is
    kept) and a migration that shifts its source down to an index no colder than the one this
    migration fills; it also never passes a migration it shares a participant with.
    """
    result = list(migrations)
    for position in range(len(result)):
        migration = result[position]
        if migration.source is not None or migration.kind not in (MigrationKind.COPY, MigrationKind.SHIFT_UP):
            continue
        slot = position
        while slot > 0 and _may_pass(migration, result[slot - 1]):
            slot -= 1
        if slot != position:
            del result[position]
            result.insert(slot, migration)
    return result


def _may_pass(migration: Migration, earlier: Migration) -> bool:
    if earlier.source_current_index == NO_INDEX:
        return False  # another COPY or SHIFT UP from an empty slot
    if migration.destination in earlier.participants:
        return False
    return earlier.source_new_index == NO_INDEX or earlier.source_new_index > migration.destination_new_index
