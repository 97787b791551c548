"""Columns for the engine's calls, built and read with the project's own packed format
(``packed_lengths`` and ``unpacked_lengths`` of ``shardgrid.core.store``), so the tests also check
that the engine and the core agree on it."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from shardgrid._engine import METADATA_FIELDS, RecordStore
from shardgrid.core.store import packed_lengths, unpacked_lengths

NEVER_EXPIRED_MS = 0  # an entry expires at now_ms + ttl_ms >= 1: at time 0 every record is live


def pack(items: Sequence[bytes]) -> tuple[bytes, bytes]:
    """A column: the items end to end, and their lengths."""
    return b"".join(items), packed_lengths([len(item) for item in items])


def unpack(data: bytes, lengths: bytes) -> list[bytes]:
    items, position = [], 0
    for length in unpacked_lengths(lengths):
        items.append(data[position : position + length])
        position += length
    assert position == len(data), "the engine's lengths do not add up to its buffer"
    return items


def found(
    answer: tuple[bytes, bytes, bytes] | tuple[bytes, bytes, bytes, int], with_values: bool = True
) -> list[bytes | None]:
    """An answer of put, put_if_absent, get or remove as one value (or None: absent) per key; when
    the values were not asked for, each present key is b"" (only the mask is checked). A write's
    answer ends with its change to the memory count, which this leaves out."""
    values, lengths, present = answer[:3]
    assert set(present) <= {0, 1}, f"a presence mask of 0s and 1s, not {present!r}"
    if not with_values:
        assert values == lengths == b"", "values returned though not asked for"
        return [b"" if p else None for p in present]
    items = unpack(values, lengths)
    assert len(items) == len(present)
    for item, p in zip(items, present, strict=True):
        assert p or item == b"", "an absent key's place holds a value"
    return [item if p else None for item, p in zip(items, present, strict=True)]


def numbers(packed: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(packed) // 8}Q", packed))


@dataclass(frozen=True, slots=True)
class Held:
    """A record as the engine shows it: key, value and metadata (in METADATA_FIELDS order)."""

    key: bytes
    value: bytes
    metadata: tuple[int, ...]


def held(store: RecordStore, map_name: str) -> list[Held]:
    """Every record of the map, in iteration order, expired ones included: read at time 0, when
    none has expired (this reads no hit: scan and metadata count none)."""
    count = store.entry_count(map_name)
    keys, key_lengths, values, value_lengths, next_offset = store.scan(map_name, 0, max(count, 1), NEVER_EXPIRED_MS)
    assert next_offset == count
    key_items, value_items = unpack(keys, key_lengths), unpack(values, value_lengths)
    meta, present = store.metadata(map_name, keys, key_lengths, NEVER_EXPIRED_MS)
    assert present == b"\x01" * count
    fields = len(METADATA_FIELDS)
    per_key = numbers(meta)
    return [
        Held(key, value, tuple(per_key[i * fields : (i + 1) * fields]))
        for i, (key, value) in enumerate(zip(key_items, value_items, strict=True))
    ]


def snapshot(store: RecordStore) -> tuple[object, ...]:
    """Everything observable of the store: its maps, their records in order with metadata, and the
    counts (what a call that failed must leave as it was)."""
    maps = store.map_names()
    return (
        maps,
        [(name, held(store, name), store.entry_count(name), store.memory_bytes(name)) for name in maps],
        store.total_entry_count(),
        store.total_memory_bytes(),
    )
