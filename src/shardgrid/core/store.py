"""Per-partition record stores: maps of byte keys to byte values, with a replica sequence.

The sequence counts the writes the owner applied to the partition; backups apply writes in that
order and a migration or replica sync carries it, so any two replicas at the same sequence hold
the same data. Keys and values are bytes: they were serialized once, at the client.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from shardgrid.core.messages import PUT, Entry, WriteRun


@dataclass(slots=True)
class PartitionData:
    """A partition's maps; ``sequence`` counts writes within ``lineage``.

    A lineage starts when a backup is promoted to owner: its sequence numbers mean nothing to
    replicas that followed the previous owner, so backups take writes only from their own lineage
    until the new owner's sync brings them into it.
    """

    maps: dict[str, dict[bytes, bytes]] = field(default_factory=dict)
    sequence: int = 0
    lineage: str = ""
    # The replica slot whose maps this copy holds: 0 holds every map; a copy kept at a colder
    # slot lacks the maps whose backup count does not reach it.
    copy_index: int = 0

    def apply_run(self, run: WriteRun, start: int) -> None:
        """Apply the writes of ``run`` from position ``start`` on, and advance the sequence to the
        run's last. The backup checked the run whole (kind, lengths) before calling this."""
        if run.skipped:
            self.sequence = run.last_sequence  # a map this replica keeps no copy of
            return
        keys = run.keys[start:] if start else run.keys
        if run.kind == PUT:
            values = run.values[start:] if start else run.values
            self.maps.setdefault(run.map_name, {}).update(zip(keys, values, strict=True))
        else:
            records = self.maps.get(run.map_name)
            if records is not None:
                for key in keys:
                    records.pop(key, None)
                if not records:
                    del self.maps[run.map_name]
        self.sequence = run.last_sequence

    def entries(self) -> Iterator[Entry]:
        """Every record, maps and keys in sorted order (deterministic chunks)."""
        for map_name in sorted(self.maps):
            records = self.maps[map_name]
            for key in sorted(records):
                yield Entry(map_name, key, records[key])

    @classmethod
    def from_entries(cls, entries: list[Entry], sequence: int, lineage: str) -> PartitionData:
        data = cls(sequence=sequence, lineage=lineage)
        for entry in entries:
            data.maps.setdefault(entry.map_name, {})[entry.key] = entry.value
        return data

    def size(self) -> int:
        return sum(len(records) for records in self.maps.values())


def chunk_entries(entries: list[Entry], max_entries: int, max_bytes: int) -> list[tuple[Entry, ...]]:
    """Split entries into chunks bounded by count and bytes (a single larger record stands alone)."""
    chunks: list[tuple[Entry, ...]] = []
    current: list[Entry] = []
    size = 0
    for entry in entries:
        entry_bytes = len(entry.key) + len(entry.value) + len(entry.map_name) + 16
        if current and (len(current) >= max_entries or size + entry_bytes > max_bytes):
            chunks.append(tuple(current))
            current, size = [], 0
        current.append(entry)
        size += entry_bytes
    chunks.append(tuple(current))  # an empty partition still sends one (empty, last) chunk
    return chunks


def stream_columns(
    maps: dict[str, dict[bytes, bytes]], max_entries: int, max_bytes: int
) -> Iterator[tuple[str, tuple[bytes, ...], tuple[bytes, ...]]]:
    """The maps as bounded chunks of key and value columns, map by map, read straight from the
    dicts (their order is deterministic, and the partition takes no writes while it is read).

    Bounded by count and by bytes (a single larger record stands alone). An empty partition yields
    one empty chunk, so that a transfer always has a last chunk.
    """
    produced = False
    for map_name, records in maps.items():
        items = iter(records.items())
        while True:
            batch = list(itertools.islice(items, max_entries))
            if not batch:
                break
            keys, values = zip(*batch, strict=True)
            while keys:
                take = _within_bytes(keys, values, max_bytes)
                produced = True
                yield map_name, keys[:take], values[:take]
                keys, values = keys[take:], values[take:]
    if not produced:
        yield "", (), ()


# What one key or value costs beyond its bytes, in memory (its reference) and on the wire (its
# header): counted so that a bound in bytes also bounds a column of empty keys.
ITEM_OVERHEAD_BYTES = 8


def columns_bytes(keys: Sequence[bytes], values: Sequence[bytes]) -> int:
    """The bytes of a key column and a value column (what bounds on runs and chunks count)."""
    return sum(map(len, keys)) + sum(map(len, values)) + ITEM_OVERHEAD_BYTES * (len(keys) + len(values))


def _within_bytes(keys: tuple[bytes, ...], values: tuple[bytes, ...], max_bytes: int) -> int:
    """How many of the first records fit in ``max_bytes`` (at least one)."""
    if columns_bytes(keys, values) <= max_bytes:
        return len(keys)
    size = 0
    for count, (key, value) in enumerate(zip(keys, values, strict=True)):
        size += len(key) + len(value) + 16
        if size > max_bytes:
            return max(count, 1)
    return len(keys)
