"""One planned change to one partition's replica slots, in Hazelcast's six-index form.

The six fields are those of Hazelcast's PartitionMigrationEvent and MigrationInfo, with -1 for
'none', so that anyone who has read seed 000 can read a plan. Applying a migration to a replica
array is defined once, here, and the planner, its tests, the leader and the simulator all use it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from shardgrid.core.errors import invariant
from shardgrid.core.identity import MemberId
from shardgrid.core.limits import MAX_REPLICA_COUNT
from shardgrid.core.wire import Record

NO_INDEX = -1


class MigrationKind(enum.Enum):
    """Seed 000, section 3.1, plus CLEAR for a slot the target leaves empty."""

    MOVE = "move"  # a replica index changes hands to a member that held no replica
    COPY = "copy"  # an empty slot is filled by a member that held no replica
    SHIFT_UP = "shift-up"  # a member moves to a hotter index (displacing the holder, if any)
    SHIFT_DOWN = "shift-down"  # the holder moves to a colder empty index, a new member takes its slot
    CLEAR = "clear"  # the slot is emptied; nobody receives it


class Migration(Record, kw_only=True):
    """A replica change of one partition; ``-1`` means 'none' for every index field."""

    source: MemberId | None
    source_current_index: int
    source_new_index: int
    destination: MemberId | None
    destination_current_index: int
    destination_new_index: int

    def __post_init__(self) -> None:
        for value in (
            self.source_current_index,
            self.source_new_index,
            self.destination_current_index,
            self.destination_new_index,
        ):
            invariant(NO_INDEX <= value < MAX_REPLICA_COUNT, lambda: f"replica index out of range in {self}")
        invariant(self.source is not None or self.destination is not None, "a migration needs a participant")
        invariant(
            (self.source is None) == (self.source_current_index == NO_INDEX),
            lambda: f"source and its current index go together: {self}",
        )
        invariant(
            (self.destination is None) == (self.destination_new_index == NO_INDEX),
            lambda: f"destination and its new index go together: {self}",
        )
        invariant(self.source != self.destination, lambda: f"source and destination must differ: {self}")

    @property
    def kind(self) -> MigrationKind:
        if self.destination is None:
            return MigrationKind.CLEAR
        if self.destination_current_index != NO_INDEX:
            return MigrationKind.SHIFT_UP
        if self.source is None:
            return MigrationKind.COPY
        if self.source_new_index != NO_INDEX:
            return MigrationKind.SHIFT_DOWN
        return MigrationKind.MOVE

    @property
    def participants(self) -> tuple[MemberId, ...]:
        """Source and destination, those that exist (the data sender may also be the owner)."""
        return tuple(r for r in (self.source, self.destination) if r is not None)

    def __str__(self) -> str:
        return (
            f"{self.kind.value}(src={self.source} {self.source_current_index}->{self.source_new_index}, "
            f"dst={self.destination} {self.destination_current_index}->{self.destination_new_index})"
        )


def apply_migration(slots: Sequence[MemberId | None], migration: Migration) -> list[MemberId | None]:
    """The replica array after ``migration``: clear both current indexes, then place both members.

    The migration must match ``slots`` (the source and destination really sit where it says);
    anything else is a planner or protocol bug and fails loudly.
    """
    result = list(slots)
    m = migration
    if m.source_current_index != NO_INDEX:
        invariant(result[m.source_current_index] == m.source, lambda: f"{m} does not match slots {slots}")
        result[m.source_current_index] = None
    if m.destination_current_index != NO_INDEX:
        invariant(result[m.destination_current_index] == m.destination, lambda: f"{m} does not match slots {slots}")
        result[m.destination_current_index] = None
    elif m.destination is not None:
        invariant(m.destination not in result, lambda: f"{m}: destination already holds a replica in {slots}")
    if m.destination_new_index != NO_INDEX:
        invariant(result[m.destination_new_index] is None, lambda: f"{m} overwrites a replica in {slots}")
        result[m.destination_new_index] = m.destination
    if m.source_new_index != NO_INDEX:
        invariant(result[m.source_new_index] is None, lambda: f"{m} overwrites a replica in {slots}")
        result[m.source_new_index] = m.source
    return result


def migration_fits(slots: Sequence[MemberId | None], migration: Migration) -> bool:
    """Whether ``migration`` applies to ``slots`` (what ``apply_migration`` would otherwise refuse)."""
    m = migration
    result = list(slots)
    if m.source_current_index != NO_INDEX:
        if result[m.source_current_index] != m.source:
            return False
        result[m.source_current_index] = None
    if m.destination_current_index != NO_INDEX:
        if result[m.destination_current_index] != m.destination:
            return False
        result[m.destination_current_index] = None
    elif m.destination is not None and m.destination in result:
        return False
    if m.destination_new_index != NO_INDEX:
        if result[m.destination_new_index] is not None:
            return False
        result[m.destination_new_index] = m.destination
    return m.source_new_index == NO_INDEX or result[m.source_new_index] is None


class MigrationOutcome(enum.Enum):
    """What became of a migration: none yet, or which way the log decided it."""

    PENDING = "pending"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled-back"


class MigrationRecord(Record, kw_only=True):
    """A migration as the leader decided it: ``version_before`` is what participants must hold.

    A committed record's partition is at ``version_before + 1`` after it, a rolled-back one's at
    ``version_before + 2`` at least (seed 000, section 2.1, step 4).
    """

    migration_id: str
    partition_id: int
    migration: Migration
    version_before: int
    outcome: MigrationOutcome = MigrationOutcome.PENDING

    def with_outcome(self, outcome: MigrationOutcome) -> MigrationRecord:
        return MigrationRecord(
            migration_id=self.migration_id,
            partition_id=self.partition_id,
            migration=self.migration,
            version_before=self.version_before,
            outcome=outcome,
        )

    @property
    def version_after(self) -> int:
        return self.version_before + (1 if self.outcome is MigrationOutcome.COMMITTED else 2)
