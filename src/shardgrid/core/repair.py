"""The leader's repair of the table when members leave without handing their replicas over.

Seed 000, section 1.1: only the leader changes the table. When members crash it empties their
slots and, for every partition whose owner is gone, promotes the hottest surviving backup to
owner (it already holds the data). A partition with no surviving replica is lost: it keeps no
owner here, and repartitioning assigns it a new, empty one. Every changed partition's version
goes up by one so that members apply the repair over what they hold.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from shardgrid.core.identity import MemberId
from shardgrid.core.migration import NO_INDEX, Migration
from shardgrid.core.table import PartitionTable, ReplicaSlots


@dataclass(frozen=True, slots=True)
class Repair:
    """The repaired table, the promotions it made, and the partitions that lost every replica."""

    table: PartitionTable
    promotions: tuple[tuple[int, Migration], ...]
    lost_partitions: tuple[int, ...]
    changed: tuple[int, ...] = ()  # the partitions whose slots (and version) it changed


def remove_members(table: PartitionTable, departed: Collection[MemberId], keep_unsurvived: bool = False) -> Repair:
    """Empty the departed members' slots and promote the hottest surviving backup of each lost
    owner. ``keep_unsurvived``: a partition with no surviving replica keeps its slots as they are
    (unavailable, reported in ``lost_partitions``, not emptied)."""
    gone = frozenset(departed)
    updates: dict[int, tuple[ReplicaSlots, int]] = {}
    promotions: list[tuple[int, Migration]] = []
    lost: list[int] = []
    for pid, slots in enumerate(table.replicas):
        if gone.isdisjoint(slots):  # (most partitions: one test in C, not a loop)
            continue
        if keep_unsurvived and all(r is None or r in gone for r in slots):
            lost.append(pid)
            continue
        repaired = [None if r in gone else r for r in slots]
        if slots[0] is not None and repaired[0] is None:
            survivor = next((i for i, r in enumerate(repaired) if r is not None), NO_INDEX)
            if survivor == NO_INDEX:
                lost.append(pid)
            else:
                promoted = repaired[survivor]
                promotions.append(
                    (
                        pid,
                        Migration(
                            source=None,
                            source_current_index=NO_INDEX,
                            source_new_index=NO_INDEX,
                            destination=promoted,
                            destination_current_index=survivor,
                            destination_new_index=0,
                        ),
                    )
                )
                repaired[0], repaired[survivor] = promoted, None
        updates[pid] = (tuple(repaired), table.versions[pid] + 1)
    return Repair(table.with_emptied_slots(updates), tuple(promotions), tuple(lost), tuple(updates))
