"""The partition table: who holds each replica of each partition, and at which version.

The table is an immutable value. The leader derives a new table for every change and publishes
it; members replace theirs only partition by partition, where the received per-partition version
is newer (seed 003, section 1.2). Immutability is what lets the leader prepare a committed copy
for a migration destination without touching its own state (seed 000, section 2.1, step 1).

The stamp (seed 003, section 1.3) is computed once per table, when first asked for, and cached with
it, so comparing two tables for equality costs one integer comparison after that; a member that
applies thousands of migrations pays for a stamp only when someone compares.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from shardgrid.core.chunked import ChunkedTuple
from shardgrid.core.errors import invariant, require
from shardgrid.core.hashing import table_stamp
from shardgrid.core.identity import MemberId
from shardgrid.core.limits import MAX_PARTITION_COUNT, MAX_REPLICA_COUNT

ReplicaSlots = tuple[MemberId | None, ...]
"""Exactly ``MAX_REPLICA_COUNT`` slots; slot 0 is the owner, ``None`` an empty slot."""

EMPTY_SLOTS: ReplicaSlots = (None,) * MAX_REPLICA_COUNT
MAX_PARTITION_VERSION = 2**31 - 1  # versions travel and are stamped as 32-bit signed ints


def normalize_slots(replicas: Sequence[MemberId | None]) -> ReplicaSlots:
    """Pad a replica list to ``MAX_REPLICA_COUNT`` slots and check no member appears twice."""
    require(len(replicas) <= MAX_REPLICA_COUNT, f"at most {MAX_REPLICA_COUNT} replicas, got {len(replicas)}")
    slots = tuple(replicas) + (None,) * (MAX_REPLICA_COUNT - len(replicas))
    present = [r for r in slots if r is not None]
    require(len(set(present)) == len(present), f"a member holds two replicas of one partition: {slots}")
    return slots


def replica_index(slots: Sequence[MemberId | None], replica: MemberId | None) -> int:
    """The index of ``replica`` in ``slots``, or -1 (Hazelcast's convention for 'none')."""
    if replica is None:
        return -1
    for index, held in enumerate(slots):
        if held == replica:
            return index
    return -1


class PartitionTable:
    """MemberId slots and a version for every partition; immutable, stamp cached.

    A plain class rather than a dataclass or a Struct: it travels in seed 003's compact shape
    (the replicas once, then indexes per partition), which the codec writes by hand.
    """

    __slots__ = ("_stamp", "replicas", "versions")
    replicas: Sequence[ReplicaSlots]
    versions: Sequence[int]
    _stamp: int | None

    def __init__(self, replicas: Sequence[ReplicaSlots], versions: Sequence[int]) -> None:
        rows = ChunkedTuple.of(replicas)
        numbers = ChunkedTuple.of(versions)
        count = len(rows)
        require(0 < count <= MAX_PARTITION_COUNT, f"partition count must be 1..{MAX_PARTITION_COUNT}, got {count}")
        require(len(numbers) == count, "one version per partition is required")
        for slots in rows:
            invariant(len(slots) == MAX_REPLICA_COUNT, lambda: f"replica slots must have length {MAX_REPLICA_COUNT}")
        for version in numbers:
            require(0 <= version <= MAX_PARTITION_VERSION, f"partition version out of range: {version}")
        object.__setattr__(self, "replicas", rows)
        object.__setattr__(self, "versions", numbers)
        object.__setattr__(self, "_stamp", None)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a PartitionTable is immutable: cannot set {name}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PartitionTable):
            return NotImplemented
        return self.replicas == other.replicas and self.versions == other.versions

    def __hash__(self) -> int:
        return self.stamp  # equal tables have equal versions, hence equal stamps

    def __repr__(self) -> str:
        return f"PartitionTable(partitions={self.partition_count}, stamp={self.stamp})"

    @property
    def stamp(self) -> int:
        """The table's stamp, computed on first use and cached (a new table is a new object)."""
        if self._stamp is None:
            object.__setattr__(self, "_stamp", table_stamp(ChunkedTuple.of(self.versions).as_tuple()))
        return self._stamp  # type: ignore[return-value]

    @classmethod
    def empty(cls, partition_count: int) -> PartitionTable:
        """A table with no replica assigned anywhere, every version 0."""
        require(
            0 < partition_count <= MAX_PARTITION_COUNT,
            f"partition count must be 1..{MAX_PARTITION_COUNT}, got {partition_count}",
        )
        return cls((EMPTY_SLOTS,) * partition_count, (0,) * partition_count)

    @classmethod
    def from_lists(
        cls, replicas: Iterable[Sequence[MemberId | None]], versions: Iterable[int] | None = None
    ) -> PartitionTable:
        """Build a table from plain replica lists (shorter lists are padded with empty slots)."""
        slots = tuple(normalize_slots(r) for r in replicas)
        return cls(slots, tuple(versions) if versions is not None else (0,) * len(slots))

    @property
    def partition_count(self) -> int:
        return len(self.replicas)

    def owner(self, partition_id: int) -> MemberId | None:
        return self.replicas[partition_id][0]

    def members(self) -> list[MemberId]:
        """Every replica named anywhere in the table, sorted (deterministic)."""
        return sorted({r for slots in self.replicas for r in slots if r is not None})

    def with_partitions(self, updates: Mapping[int, tuple[ReplicaSlots, int]]) -> PartitionTable:
        """A copy with some partitions' slots and versions replaced (one copy for many changes)."""
        new_slots: dict[int, ReplicaSlots] = {}
        new_versions: dict[int, int] = {}
        for partition_id, (slots, version) in updates.items():
            require(0 <= partition_id < self.partition_count, f"no partition {partition_id}")
            require(0 <= version <= MAX_PARTITION_VERSION, f"partition version out of range: {version}")
            new_slots[partition_id] = normalize_slots(slots)
            new_versions[partition_id] = version
        replicas = ChunkedTuple.of(self.replicas).replaced(new_slots)
        versions = ChunkedTuple.of(self.versions).replaced(new_versions)
        return PartitionTable._trusted(replicas, versions)

    def with_emptied_slots(self, updates: Mapping[int, tuple[ReplicaSlots, int]]) -> PartitionTable:
        """``with_partitions`` for slots taken from this table's with members emptied or moved up
        (a repair's): they are whole slots already, so they are not checked again one by one
        (4,000 of 20,000 partitions repaired after a crash spent most of a repair there)."""
        invariant(all(len(slots) == MAX_REPLICA_COUNT for slots, _ in updates.values()), "repaired slots are whole")
        replicas = ChunkedTuple.of(self.replicas).replaced({pid: slots for pid, (slots, _) in updates.items()})
        versions = ChunkedTuple.of(self.versions).replaced({pid: version for pid, (_, version) in updates.items()})
        return PartitionTable._trusted(replicas, versions)

    @classmethod
    def arranged(cls, rows: Iterable[Sequence[MemberId | None]], versions: Sequence[int]) -> PartitionTable:
        """A table from rows a placement made (each ``MAX_REPLICA_COUNT`` slots, no member twice):
        not checked row by row again (20,000 rows checked twice were a third of a first
        assignment's ``handle()``)."""
        replicas = ChunkedTuple(tuple(row) for row in rows)
        require(len(replicas) == len(versions), "one version per partition is required")
        return cls._trusted(replicas, ChunkedTuple.of(versions))

    def with_versions(self, version: int) -> PartitionTable:
        """This table's slots, every partition at ``version`` (a first assignment's)."""
        require(0 <= version <= MAX_PARTITION_VERSION, f"partition version out of range: {version}")
        return PartitionTable._trusted(ChunkedTuple.of(self.replicas), ChunkedTuple((version,) * self.partition_count))

    @classmethod
    def _trusted(cls, replicas: ChunkedTuple[ReplicaSlots], versions: ChunkedTuple[int]) -> PartitionTable:
        """A table from parts already checked: skips the O(partitions) validation of a new table.

        Members derive a table per committed migration; validating (or copying) 20,000 untouched
        partitions each time would dominate the simulator's run time.
        """
        table = object.__new__(cls)
        object.__setattr__(table, "replicas", replicas)
        object.__setattr__(table, "versions", versions)
        object.__setattr__(table, "_stamp", None)
        return table

    def apply_if_newer(self, received: PartitionTable) -> tuple[PartitionTable, tuple[int, ...]]:
        """Take every partition of ``received`` whose version is greater than ours.

        Returns the resulting table and the ids of the partitions taken, in ascending order. A
        partition whose version is equal or older is kept as it is, even if its replicas differ:
        only the leader changes the table, and it always bumps the version when it does.
        """
        require(
            received.partition_count == self.partition_count,
            f"partition count differs: ours {self.partition_count}, received {received.partition_count}",
        )
        changed = tuple(
            pid
            for pid, (ours, theirs) in enumerate(zip(self.versions, received.versions, strict=True))
            if theirs > ours
        )
        if not changed:
            return self, ()
        return self.with_partitions({pid: (received.replicas[pid], received.versions[pid]) for pid in changed}), changed
