"""Per-partition record stores: maps of byte keys to byte values, with replica versions.

The sequence counts the writes the owner applied to the partition; backups apply writes in that
order and a migration or replica sync carries it, so any two replicas at the same sequence hold
the same data. Each map also has its own replica version (seed 002's per-namespace versions): the
sequence of the last write that changed it. A replica that lags at sequence ``s`` then differs
from its owner only in the maps whose version is past ``s``, and a sync sends just those. Keys and
values are bytes: they were serialized once, at the client.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shardgrid._engine import check_column
from shardgrid.core.errors import invariant
from shardgrid.core.limits import MAX_KEY_BYTES, MAX_OPERATIONS_PER_REQUEST
from shardgrid.core.messages import PUT, Column, WriteRun
from shardgrid.core.records import EMPTY_PAGE, MapRecords, RecordPage
from shardgrid.core.write_records import WriteRecords

# One piece of a transfer: a map's name and replica version, a page of its records, and how many
# records the map holds in all.
Piece = tuple[str, int, RecordPage, int]


@dataclass(slots=True, kw_only=True)
class PartitionData:
    """A partition's maps; ``sequence`` counts writes within ``lineage``.

    A lineage starts when a backup is promoted to owner: its sequence numbers mean nothing to
    replicas that followed the previous owner, so backups take writes only from their own lineage
    until the new owner's sync brings them into it.
    """

    maps: dict[str, MapRecords] = field(default_factory=dict)
    sequence: int = 0
    lineage: str = ""
    # The replica slot whose maps this copy holds: 0 holds every map; a copy kept at a colder
    # slot lacks the maps whose backup count does not reach it.
    copy_index: int = 0
    # Per map held, the sequence of the last write that changed it. A map emptied has no entry:
    # ``versions_from`` rises to that write instead, so every map changed after ``versions_from``
    # is listed (what a sync of just the maps changed since some sequence relies on).
    versions: dict[str, int] = field(default_factory=dict)
    versions_from: int = 0
    # The clients' writes this copy applied, so that as owner it answers a retry instead of
    # applying it again (``write_records``); not part of what makes two copies equal.
    writes: WriteRecords = field(default_factory=WriteRecords)
    # Keys the engine's hash tables: the member's, from the core (a client cannot know it).
    hash_seed: int = 0
    # Per map, how long an entry may go unread and unwritten (MapConfig.max_idle_seconds; none: 0).
    max_idle_ms: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def holding(cls, maps: dict[str, dict[bytes, bytes]], *, now_ms: int = 0, **fields: Any) -> PartitionData:
        """A copy holding ``maps`` (keys and values written at ``now_ms``, no expiry): for tools and
        tests that build a replica by hand."""
        data = cls(**fields)
        for name, items in maps.items():
            if items:
                data.records_for_writing(name).put_items(tuple(items), tuple(items.values()), now_ms)
        return data

    def records_for_writing(self, map_name: str) -> MapRecords:
        records = self.maps.get(map_name)
        if records is None:
            records = self.maps[map_name] = MapRecords(map_name, self.hash_seed, self.max_idle_ms.get(map_name, 0))
        return records

    def changed(self, map_name: str, sequence: int) -> None:
        """Record that the write at ``sequence`` changed ``map_name`` (or tried to)."""
        records = self.maps.get(map_name)
        if records:
            self.versions[map_name] = sequence
            return
        self.maps.pop(map_name, None)
        # Emptied now (a map held nothing before only when it is absent: a no-op changes nothing).
        if self.versions.pop(map_name, None) is not None or records is not None:
            self.versions_from = max(self.versions_from, sequence)

    def version_of(self, map_name: str) -> int:
        """A map held without a recorded version counts as changed at the latest write."""
        return self.versions.get(map_name, self.sequence)

    def maps_changed_after(self, sequence: int) -> list[str]:
        """The maps a replica at ``sequence`` of this lineage lacks changes of; only meaningful
        from ``versions_from`` on (before it, an emptied map may be missing from the list)."""
        return [name for name in self.maps if self.version_of(name) > sequence]

    def apply_run(self, run: WriteRun, start: int, now_ms: int) -> None:
        """Apply the writes of ``run`` from position ``start`` on, at the time its owner applied
        them, and advance the sequence to the run's last. The backup checked the run's shape, and a
        run cut at ``start`` whole; the engine checks the columns it takes, and raises
        ``ColumnError`` (nothing changed) for bad ones."""
        keys = run.keys
        last = run.first_sequence + len(keys) + run.skipped - 1  # run.last_sequence, on the hot path
        if run.skipped:
            self._record_writer(run, last, now_ms)
            self.sequence = last  # a map this replica keeps no copy of
            return
        # A run this replica holds the start of already (sent again, overlapping what it took) is
        # applied from ``start``: its columns are cut there, item by item (rare, and bounded by
        # the run).
        if start:
            keys = Column.of(keys.items()[start:])
        map_name = run.map_name
        if run.kind is PUT:
            values = Column.of(run.values.items()[start:]) if start else run.values
            ttls_ms = run.ttls_ms[start * 8 :] if start and run.ttls_ms else run.ttls_ms
            records = self.maps.get(map_name)
            if records is None:
                # Held only once the put is taken: columns the engine refuses leave no empty map.
                fresh = MapRecords(map_name, self.hash_seed, self.max_idle_ms.get(map_name, 0))
                fresh.put(keys, values, run.written_ms, ttls_ms=ttls_ms or None)
                self.maps[map_name] = fresh
            else:
                records.put(keys, values, run.written_ms, ttls_ms=ttls_ms or None)  # (checks the columns first)
            self._record_writer(run, last, now_ms)
            self.sequence = last
            self.versions[map_name] = last  # it holds what it was just given: not empty
            return
        records = self.maps.get(map_name)
        if records is not None:
            records.remove(keys, run.written_ms)
        else:  # nothing to remove, but a run the engine would refuse is refused all the same
            check_column(keys.data, keys.lengths, max_items=MAX_OPERATIONS_PER_REQUEST, max_item_bytes=MAX_KEY_BYTES)
        self._record_writer(run, last, now_ms)
        self.sequence = last
        self.changed(map_name, last)

    def _record_writer(self, run: WriteRun, last: int, now_ms: int) -> None:
        """Remember the client's write the run came from, applied through ``last``."""
        if run.client_id and run.write_id and self.writes.room_for(run.client_id, now_ms):
            expires_ms = now_ms + run.record_ttl_ms
            self.writes.record(run.client_id, run.write_id, last, run.answer, expires_ms)

    def replace_maps(self, staged: dict[str, MapRecords], versions: dict[str, int]) -> None:
        """Take a sync's copy of some maps whole (each with its version). A sync of some maps
        never carries an emptied one: emptying a map raises ``versions_from`` past any base."""
        for name, records in staged.items():
            invariant(bool(records), "a sync of some maps carried an empty map")
            self.maps[name] = records
            self.versions[name] = versions.get(name, self.sequence)

    def pieces(self, names: Iterable[str]) -> list[tuple[str, int, MapRecords]]:
        """What a transfer of the maps ``names`` reads: each held map with its version and its
        records (live: the map takes no writes until the transfer ends)."""
        return [(name, self.version_of(name), self.maps[name]) for name in names if self.maps.get(name)]

    def size(self) -> int:
        return sum(len(records) for records in self.maps.values())

    def memory_bytes(self) -> int:
        """What the engine counts for this replica's records (its own exact count)."""
        return sum(records.memory_bytes() for records in self.maps.values())

    def view(self) -> ReplicaView:
        """A read-only copy of what this replica holds, for checkers, status and tests."""
        return ReplicaView(
            entries={name: records.entries() for name, records in self.maps.items()},
            sequence=self.sequence,
            lineage=self.lineage,
            versions={name: self.version_of(name) for name in self.maps},
            versions_from=self.versions_from,
            copy_index=self.copy_index,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaView:
    """A copy of one partition replica as it was when taken: per map, each record's value and
    expiry time (0: never; expired records not yet removed included), with the replica's sequence,
    lineage and map versions. Changing it changes nothing held."""

    entries: dict[str, dict[bytes, tuple[bytes, int]]]
    sequence: int
    lineage: str
    versions: dict[str, int]
    versions_from: int = 0  # maps emptied at or before it have no version (``PartitionData``)
    copy_index: int = 0  # the replica slot whose maps the copy holds

    @property
    def maps(self) -> dict[str, dict[bytes, bytes]]:
        """Per map, each record's value."""
        return {name: {key: value for key, (value, _) in held.items()} for name, held in self.entries.items()}

    def get(self, map_name: str, key: bytes) -> bytes | None:
        held = self.entries.get(map_name, {}).get(key)
        return held[0] if held is not None else None


def stream_pieces(maps: Sequence[tuple[str, int, MapRecords]], max_entries: int, max_bytes: int) -> Iterator[Piece]:
    """The maps as bounded pages of records, map by map, read straight from the engine (its order
    is deterministic, and the maps take no writes while they are read).

    Bounded by count and by bytes (a single larger record stands alone). Nothing to send yields
    one empty piece, so that a transfer always has a last chunk.
    """
    produced = False
    for map_name, version, records in maps:
        entries = len(records)
        for page in records.pages(max_entries, max_bytes):
            produced = True
            yield map_name, version, page, entries
    if not produced:
        yield "", 0, EMPTY_PAGE, 0


def page_bytes(page: RecordPage) -> int:
    """What a page takes on the wire: its columns and their lengths, and its metadata."""
    return len(page.keys) + len(page.values) + len(page.key_lengths) + len(page.value_lengths) + len(page.metadata)


# What one key or value costs beyond its bytes, in memory (its reference) and on the wire (its
# header): counted so that a bound in bytes also bounds a column of empty keys.
ITEM_OVERHEAD_BYTES = 8


def columns_bytes(keys: Column, values: Column) -> int:
    """The bytes of a key column and a value column (what bounds on runs and chunks count)."""
    return counted_bytes(len(keys.data) + len(values.data), len(keys) + len(values))


def counted_bytes(data_bytes: int, items: int) -> int:
    """``columns_bytes`` of columns of ``items`` keys and values whose lengths sum to ``data_bytes``."""
    return data_bytes + ITEM_OVERHEAD_BYTES * items


invariant(array("I").itemsize == 4, "a packed length is an unsigned 32-bit number")


def packed_lengths(sizes: list[int]) -> bytes:
    """Each item's length (``sizes``) as an unsigned 32-bit little-endian number, end to end: the
    lengths of a packed column (``ScanReply``), built from a list in one C-level pass."""
    lengths = array("I", sizes)
    if sys.byteorder == "big":
        lengths.byteswap()
    return lengths.tobytes()


invariant(array("Q").itemsize == 8, "a packed number is an unsigned 64-bit number")


def unpacked_numbers(packed: bytes) -> array:
    """Unsigned 64-bit little-endian numbers back, as the engine packs them (raises ValueError
    when the bytes are not a whole number of them)."""
    return _unpacked(packed, "Q", "numbers")


def unpacked_lengths(packed: bytes) -> array:
    """``packed_lengths``'s numbers back (raises ValueError when the bytes are not a whole number
    of them)."""
    return _unpacked(packed, "I", "lengths")


def _unpacked(packed: bytes, typecode: str, what: str) -> array:
    numbers = array(typecode)
    if len(packed) % numbers.itemsize:
        raise ValueError(f"{len(packed)} bytes of {what} is not a whole number of {numbers.itemsize}-byte {what}")
    numbers.frombytes(packed)
    if sys.byteorder == "big":
        numbers.byteswap()
    return numbers
