"""Repartitioning: the balanced target table the leader migrates towards.

``arrange`` assigns replica index 0 (the owners) first, then index 1, and so on, so that hotter
replicas are settled before colder ones. For each index it:

1. gives every data member a quota, ``partitions // members`` or one more; the members that
   already hold the most slots at this index get the larger quotas, so fewer slots move;
2. keeps every still-valid assignment (a live data member, not already holding a hotter replica
   of the partition, not sharing a group with one, within its quota), visiting partitions in a
   seeded random order so that which assignments a shrinking quota drops is not biased;
3. fills each empty slot with a colder replica of the same partition that is under its quota
   (it moves up and keeps its data: the slot it leaves is filled at its own index), and every
   other gap with the member furthest under its quota that may hold the partition. A slot still
   held by a leaving member is not refilled by a shift up: the leaver can hand it over directly
   in one MOVE, where a shift up would cost a second transfer;
4. rebalances what group constraints made uneven, by moving slots from members over their quota
   to members under it.

Everything is deterministic for a given seeded ``rng``: members are sorted before they are
shuffled, and no set of members is ever iterated.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import TypeVar

from shardgrid.core.errors import InvariantViolation, invariant, require
from shardgrid.core.identity import MemberId, MemberInfo
from shardgrid.core.limits import MAX_BACKUP_COUNT, MAX_MEMBER_COUNT, MAX_REPLICA_COUNT
from shardgrid.core.table import PartitionTable

Allowed = Callable[[MemberId, int], bool]
"""May this member take the slot being arranged in this partition (group and member distinctness)?"""
Counts = dict[MemberId, int]
HeapEntry = tuple[int, float, MemberId]
Row = list[MemberId | None] | tuple[MemberId | None, ...]
EMPTY_ROW: tuple[MemberId | None, ...] = (None,) * MAX_REPLICA_COUNT
T = TypeVar("T")
# Partitions a computation done a share at a time visits between two of its steps (``Steps``).
PLAN_SLICE_VISITS = 1_000


def replica_count_for(data_member_count: int, group_count: int, backup_count: int) -> int:
    """How many replica slots each partition gets: never more than distinct members or groups."""
    return min(backup_count + 1, data_member_count, group_count)


def arrange(
    members: Sequence[MemberInfo],
    current: PartitionTable,
    rng: random.Random,
    groups: Mapping[MemberId, str] | None = None,
    *,
    backup_count: int = 1,
) -> PartitionTable:
    """The balanced, minimal-movement target table for ``members`` starting from ``current``.

    ``groups`` maps each data member to its failure domain (rack, zone); when given, the replicas
    of one partition sit on distinct groups. The returned table keeps ``current``'s versions: it
    is a target to migrate towards, not a table to publish.
    """
    return run_through(arranging(members, current, rng, groups, backup_count=backup_count))


Steps = Generator[int, None, T]
"""A computation done a bounded share at a time: each ``next`` does at most about
``PLAN_SLICE_VISITS`` partition visits and yields how many it did (a driver stops once a budget of
them is spent, so that a small table is planned in one go); its return value is the result."""


def advance(steps: Steps[T], budget_visits: float) -> T | None:
    """Some more of a computation done a share at a time, until the partition visits its steps
    say they did spend ``budget_visits``: its result once done, else None."""
    while budget_visits > 0:
        try:
            budget_visits -= next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
    return None


def run_through(steps: Steps[T]) -> T:
    """The result of a computation done a share at a time, done at once."""
    done = advance(steps, math.inf)
    invariant(done is not None, "a computation done at once ends with its result")
    return done


def arranging(
    members: Sequence[MemberInfo],
    current: PartitionTable,
    rng: random.Random,
    groups: Mapping[MemberId, str] | None = None,
    *,
    backup_count: int = 1,
) -> Steps[PartitionTable]:
    """``arrange``, a share at a time: what the leader runs over several events, so that a table of
    tens of thousands of partitions never holds one ``handle()`` for the whole of it."""
    require(0 <= backup_count <= MAX_BACKUP_COUNT, f"backup_count must be 0..{MAX_BACKUP_COUNT}, got {backup_count}")
    require(len(members) <= MAX_MEMBER_COUNT, f"at most {MAX_MEMBER_COUNT} members, got {len(members)}")
    data = sorted({m.id for m in members if not m.lite})
    require(len(data) == sum(1 for m in members if not m.lite), "a data member is listed twice")
    if groups is not None:
        missing = [str(m) for m in data if m not in groups]
        require(not missing, f"members without a group: {', '.join(missing)}")
        group_of = {m: groups[m] for m in data}
    else:
        group_of = {m: m.uuid for m in data}
    partition_count = current.partition_count
    # A row is made for a partition when a slot of it is first set (a table's 20,000 rows made at
    # once were one allocation burst, garbage collection included, in one share of the work).
    slots: list[Row] = [EMPTY_ROW] * partition_count
    if not data:
        return PartitionTable(tuple(tuple(s) for s in slots), current.versions)

    shuffled = list(data)
    rng.shuffle(shuffled)
    rank = {member: position for position, member in enumerate(shuffled)}
    partition_order = list(range(partition_count))
    replicas = replica_count_for(len(data), len(set(group_of.values())), backup_count)
    for index in range(replicas):
        # A fresh order per index: the same order would pair each owner with the same backup.
        rng.shuffle(partition_order)
        yield partition_count
        yield from _arrange_index(index, data, rank, group_of, current, slots, partition_order, rng)
    return PartitionTable.arranged(slots, current.versions)


def _row(slots: list[Row], pid: int) -> list[MemberId | None]:
    """Partition ``pid``'s row of slots, to set one (made now when it is still the empty one)."""
    row = slots[pid]
    if isinstance(row, tuple):
        row = slots[pid] = list(row)
    return row


def _arrange_index(
    index: int,
    data: list[MemberId],
    rank: Counts,
    group_of: dict[MemberId, str],
    current: PartitionTable,
    slots: list[Row],
    partition_order: list[int],
    rng: random.Random,
) -> Steps[None]:
    quota = _quotas(index, data, rank, current)
    count = dict.fromkeys(data, 0)
    yield len(data)

    def allowed(member: MemberId, pid: int) -> bool:
        taken = slots[pid]
        return all(taken[j] is None or group_of[taken[j]] != group_of[member] for j in range(index))

    gaps: list[int] = []
    order = yield from _keep_order(index, data, quota, current, group_of, slots, partition_order)
    for visited, pid in enumerate(order, 1):
        if visited % PLAN_SLICE_VISITS == 0:
            yield PLAN_SLICE_VISITS
        held = current.replicas[pid][index]
        if held is not None and held in count and count[held] < quota[held] and allowed(held, pid):
            _row(slots, pid)[index] = held
            count[held] += 1
        else:
            gaps.append(pid)

    # Lazy heap of (count - quota, random tie-break, member): entries go stale as counts change.
    # A fixed tie-break would deal slots round-robin in one order at every index, pairing each
    # owner with the same few backups; a drawn one spreads them.
    heap = [(count[m] - quota[m], rng.random(), m) for m in data]
    heapq.heapify(heap)
    for visited, pid in enumerate(gaps, 1):
        if visited % PLAN_SLICE_VISITS == 0:
            yield PLAN_SLICE_VISITS
        chosen = None
        if current.replicas[pid][index] is None:
            chosen = _colder_replica_under_quota(pid, index, current, count, quota, allowed)
        if chosen is None:
            colder = current.replicas[pid][index + 1 :]
            chosen = _pop_most_under_quota(heap, pid, count, quota, allowed, colder)
        if chosen is None:
            continue  # no member may hold this slot (every group already holds a hotter replica)
        _row(slots, pid)[index] = chosen
        count[chosen] += 1
        heapq.heappush(heap, (count[chosen] - quota[chosen], rng.random(), chosen))

    yield from _rebalance(index, data, rank, count, quota, slots, partition_order, allowed)


def _keep_order(
    index: int,
    data: list[MemberId],
    quota: Counts,
    current: PartitionTable,
    group_of: dict[MemberId, str],
    slots: list[Row],
    partition_order: list[int],
) -> Steps[list[int]]:
    """Partitions that members needing slots may not take come first in the keep pass.

    A member over its quota keeps the slots it meets first, so it sheds its slots in partitions
    visited last; visiting first the partitions where a member under its quota already holds a
    hotter replica (or its group does) makes the shed slots ones that member can take, instead
    of slots another member must take and then rebalance away.
    """
    if index == 0:
        return partition_order
    held = dict.fromkeys(data, 0)
    for replicas in current.replicas:
        member = replicas[index]
        if member is not None and member in held:
            held[member] += 1
    needy_groups = {group_of[m] for m in data if held[m] < quota[m]}
    if not needy_groups:
        return partition_order
    hostile: list[int] = []
    friendly: list[int] = []
    yield current.partition_count
    for visited, pid in enumerate(partition_order, 1):
        if visited % PLAN_SLICE_VISITS == 0:
            yield PLAN_SLICE_VISITS
        taken = slots[pid]
        if any(taken[j] is not None and group_of[taken[j]] in needy_groups for j in range(index)):
            hostile.append(pid)
        else:
            friendly.append(pid)
    return hostile + friendly


def _quotas(index: int, data: list[MemberId], rank: Counts, current: PartitionTable) -> Counts:
    """``partitions // members`` each, one more for the members already holding the most slots."""
    held = dict.fromkeys(data, 0)
    for slots in current.replicas:
        member = slots[index]
        if member is not None and member in held:
            held[member] += 1
    base, extra = divmod(current.partition_count, len(data))
    by_holdings = sorted(data, key=lambda m: (-held[m], rank[m]))
    quota = dict.fromkeys(data, base)
    for member in by_holdings[:extra]:
        quota[member] = base + 1
    return quota


def _colder_replica_under_quota(
    pid: int, index: int, current: PartitionTable, count: Counts, quota: Counts, allowed: Allowed
) -> MemberId | None:
    for member in current.replicas[pid][index + 1 :]:
        if member is not None and member in count and count[member] < quota[member] and allowed(member, pid):
            return member
    return None


def _pop_most_under_quota(
    heap: list[HeapEntry],
    pid: int,
    count: Counts,
    quota: Counts,
    allowed: Allowed,
    avoid: Sequence[MemberId | None],
) -> MemberId | None:
    """The allowed member furthest under its quota (at or over it if nobody else may).

    Members in ``avoid`` (colder replicas of the partition) are taken only when no other member
    may: moving one of them up here would empty its slot and cost a second migration there.
    """
    skipped: list[HeapEntry] = []
    fallback: MemberId | None = None
    chosen: MemberId | None = None
    while heap:
        entry = heapq.heappop(heap)
        deficit, _, member = entry
        if deficit != count[member] - quota[member]:
            continue  # stale: a fresher entry for this member is in the heap
        skipped.append(entry)
        if not allowed(member, pid):
            continue
        if member in avoid:
            fallback = fallback or member
            continue
        chosen = member
        skipped.pop()
        break
    for entry in skipped:
        heapq.heappush(heap, entry)
    if chosen is None and fallback is not None:
        chosen = fallback
        # its entry went back to the heap above and is now stale; the caller pushes a fresh one
    return chosen


def _rebalance(
    index: int,
    data: list[MemberId],
    rank: Counts,
    count: Counts,
    quota: Counts,
    slots: list[Row],
    partition_order: list[int],
    allowed: Allowed,
) -> Steps[None]:
    """Move slots from members over quota to members under it, where constraints allow."""
    under = sorted((m for m in data if count[m] < quota[m]), key=lambda m: rank[m])
    if not under or all(count[m] <= quota[m] for m in data):
        return
    for member in under:
        for visited, pid in enumerate(partition_order, 1):
            if visited % PLAN_SLICE_VISITS == 0:
                yield PLAN_SLICE_VISITS
            if count[member] >= quota[member]:
                break
            holder = slots[pid][index]
            if holder is None or count[holder] <= quota[holder] or not allowed(member, pid):
                continue
            if not (member not in slots[pid]):
                raise InvariantViolation(f"{member} already holds partition {pid}")
            _row(slots, pid)[index] = member
            count[holder] -= 1
            count[member] += 1
