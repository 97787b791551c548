"""What transfers and snapshots rely on: a dump loaded into another store gives the same records
(metadata, order and memory count), whatever the page bounds; the column codec (``pack`` and
``split``) reads back exactly what it wrote, and refuses what does not follow its rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid._engine import MAX_COUNTER, ColumnError, RecordStore, check_records, pack, split
from shardgrid.core.store import packed_lengths

MAP = "m"

items = st.lists(st.binary(max_size=40), max_size=60)


@given(items)
def test_pack_and_split_read_back_what_was_packed(values: list[bytes]) -> None:
    data, lengths = pack(values)
    assert data == b"".join(values)
    assert lengths == packed_lengths([len(v) for v in values])
    assert split(data, lengths) == values
    assert split(*pack(tuple(values))) == values


def test_split_with_a_mask_gives_none_for_absent_places_and_refuses_a_bad_mask() -> None:
    data, lengths = pack([b"a", b"", b"c"])
    assert split(data, lengths, b"\x01\x00\x01") == [b"a", None, b"c"]
    assert split(data, lengths, b"\x01\x01\x01") == [b"a", b"", b"c"]
    for bad in (b"\x01\x00", b"\x01\x00\x02", b"\x00\x00\x01"):
        with pytest.raises(ColumnError):
            split(data, lengths, bad)
    with pytest.raises(ColumnError):
        split(b"abc", packed_lengths([1, 1]))
    with pytest.raises(TypeError):
        pack([b"a", "b"])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        pack(b"ab")  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    writes=st.lists(
        st.tuples(st.binary(min_size=0, max_size=6), st.binary(max_size=30), st.integers(0, 50)), max_size=80
    ),
    removes=st.lists(st.binary(max_size=6), max_size=20),
    max_entries=st.integers(1, 30),
    max_bytes=st.integers(0, 2_000),
)
def test_a_dump_in_pages_loads_into_an_equal_store(
    writes: list[tuple[bytes, bytes, int]], removes: list[bytes], max_entries: int, max_bytes: int
) -> None:
    source = RecordStore(7)
    for now_ms, (key, value, ttl_ms) in enumerate(writes):
        source.put(MAP, *pack([key]), *pack([value]), now_ms, ttl_ms=ttl_ms)
    if removes:
        source.remove(MAP, *pack(removes), len(writes))
    copy = RecordStore(8)
    offset, pages = 0, 0
    while offset < source.entry_count(MAP):
        keys, key_lengths, values, value_lengths, metadata, offset = source.dump(MAP, offset, max_entries, max_bytes)
        assert 1 <= len(key_lengths) // 4 <= max_entries
        copy.load(MAP, keys, key_lengths, values, value_lengths, metadata)
        pages += 1
    assert pages <= source.entry_count(MAP)
    whole = source.dump(MAP, 0, 100_000, 1 << 40)
    assert copy.dump(MAP, 0, 100_000, 1 << 40) == whole
    assert copy.memory_bytes(MAP) == source.memory_bytes(MAP)
    assert copy.entry_count(MAP) == source.entry_count(MAP)


def test_a_load_with_bad_metadata_changes_nothing() -> None:
    store = RecordStore()
    store.put(MAP, *pack([b"k"]), *pack([b"v"]), 5)
    before = store.dump(MAP, 0, 10, 1 << 20)
    row = (1).to_bytes(8, "little") * 5 + (0).to_bytes(8, "little")  # version 0
    with pytest.raises(ColumnError, match="version"):
        store.load(MAP, *pack([b"k"]), *pack([b"new"]), row)
    with pytest.raises(ColumnError, match="metadata"):
        store.load(MAP, *pack([b"k"]), *pack([b"new"]), row[:-1])
    assert store.dump(MAP, 0, 10, 1 << 20) == before


@settings(max_examples=150, deadline=None)
@given(
    calls=st.lists(
        st.tuples(
            st.sampled_from(["put", "put_if_absent", "get", "remove", "load"]),
            st.sampled_from([b"a", b"b", b"c"]),
            st.integers(0, MAX_COUNTER),  # clocks of different members: any order
            st.sampled_from([0, 1, 1_000, MAX_COUNTER]),
            st.sampled_from([1, 2, 2**53, 2**64 - 1]),
        ),
        max_size=40,
    )
)
def test_whatever_the_calls_and_clocks_a_dump_is_what_a_transfer_takes(
    calls: list[tuple[str, bytes, int, int, int]],
) -> None:
    """The class of defect an outside tester found: a write by an owner whose clock was behind the
    creator's left a record 'updated before created', which every transfer then refused, so the
    partition could never migrate. Every record the engine holds must dump into what ``load``
    takes, whatever the times, TTLs and versions it was given."""
    store = RecordStore(3)
    for kind, key, now_ms, ttl_ms, version in calls:
        if kind == "put":
            store.put(MAP, *pack([key]), *pack([b"v"]), now_ms, ttl_ms=ttl_ms)
        elif kind == "put_if_absent":
            store.put_if_absent(MAP, *pack([key]), *pack([b"w"]), now_ms, ttl_ms=ttl_ms)
        elif kind == "get":
            store.get(MAP, *pack([key]), now_ms)
        elif kind == "remove":
            store.remove(MAP, *pack([key]), now_ms)
        else:
            row = b"".join(n.to_bytes(8, "little") for n in (now_ms, now_ms, now_ms, 0, 0, version))
            store.load(MAP, *pack([key]), *pack([b"l"]), row)
    page = store.dump(MAP, 0, 100, 1 << 40)
    check_records(*page[:5])
    copy = RecordStore(4)
    copy.load(MAP, *page[:5])
    assert copy.dump(MAP, 0, 100, 1 << 40) == page
