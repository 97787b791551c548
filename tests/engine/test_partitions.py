"""Keys to partitions in the engine: the same partitions as ``core.hashing`` (mmh3, a key at a
time), and a request's columns cut a partition at a time, whatever order its keys come in, with
every bad column refused whole."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid._engine import (
    MAX_KEY_BYTES,
    MAX_OPERATIONS_PER_REQUEST,
    MAX_PARTITION_COUNT,
    ColumnError,
    partition_ids,
    partitions_of,
    split_by_partition,
)
from shardgrid.core.hashing import partition_id_of_serialized
from tests.engine.packing import pack, unpack


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=60), st.integers(1, MAX_PARTITION_COUNT))
def test_the_engine_hashes_every_key_as_the_core_does(keys: list[bytes], count: int) -> None:
    ids = struct.unpack(f"<{len(keys)}I", partition_ids(*pack(keys), count))
    assert list(ids) == [partition_id_of_serialized(key, count) for key in keys]


def test_a_key_hashing_to_int32_min_folds_to_partition_zero() -> None:
    found = b"`\x0e'e"  # murmur3 inverted: this key hashes to -2**31 with Hazelcast's seed
    for count in (1, 2, 271, 1000):
        assert partition_ids(*pack([found]), count) == bytes(4)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.binary(min_size=1, max_size=6), min_size=0, max_size=40),
    st.integers(1, 7),
    st.booleans(),
    st.booleans(),
)
def test_a_request_is_cut_a_partition_at_a_time_in_a_stable_order(
    keys: list[bytes], count: int, with_values: bool, with_ttls: bool
) -> None:
    values = [b"v" + key for key in keys] if with_values else []
    ttls = [7 * i for i in range(len(keys))] if with_ttls else []
    packed_ttls = struct.pack(f"<{len(ttls)}Q", *ttls)
    slices, order = split_by_partition(count, *pack(keys), *pack(values), packed_ttls)
    pids = [partition_id_of_serialized(key, count) for key in keys]
    # The partitions in the order they first come, each with its keys in request order.
    first_seen = list(dict.fromkeys(pids))
    positions = sorted(range(len(keys)), key=lambda p: first_seen.index(pids[p]))
    side_by_side = all(
        pids[p] == pids[q] or first_seen.index(pids[p]) < first_seen.index(pids[q])
        for p, q in zip(range(len(keys)), range(1, len(keys)), strict=False)
    )
    if side_by_side:
        assert order is None
    else:
        assert list(struct.unpack(f"<{len(keys)}I", order)) == positions
    assert [pid for pid, *_ in slices] == first_seen
    at = 0
    for pid, start, end, key_data, key_lengths, value_data, value_lengths, ttl_data in slices:
        assert start == at
        assert end > start
        mine = positions[start:end]
        assert all(pids[p] == pid for p in mine)
        assert unpack(key_data, key_lengths) == [keys[p] for p in mine]
        assert unpack(value_data, value_lengths) == ([values[p] for p in mine] if with_values else [])
        assert list(struct.unpack(f"<{len(ttl_data) // 8}Q", ttl_data)) == (
            [ttls[p] for p in mine] if with_ttls else []
        )
        at = end
    assert at == len(keys)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ((0, b"a", struct.pack("<I", 1)), "partition_count is 0"),
        ((MAX_PARTITION_COUNT + 1, b"a", struct.pack("<I", 1)), "partition_count"),
        ((7, b"ab", struct.pack("<I", 1)), "add up to 1 bytes and the buffer holds 2"),
        ((7, b"a", b"\x01\x00\x00"), "not a whole number"),
        ((7, b"k" * (MAX_KEY_BYTES + 1), struct.pack("<I", MAX_KEY_BYTES + 1)), "more than the"),
        ((7, b"", bytes(4 * (MAX_OPERATIONS_PER_REQUEST + 1))), "more than the 10000"),
        ((7, *pack([b"a", b"b"]), *pack([b"1"])), "1 values for 2 keys"),
        ((7, *pack([b"a", b"b"]), *pack([b"1", b"2"]), bytes(8)), "bytes of TTLs for 2 keys"),
        ((7, *pack([b"a"]), b"1", struct.pack("<I", 2)), "values: the lengths add up"),
    ],
)
def test_a_bad_request_column_is_refused_saying_what_is_wrong(arguments: tuple, problem: str) -> None:
    with pytest.raises(ColumnError, match=problem):
        split_by_partition(*arguments)


def test_keys_of_any_length_hash_with_a_column_of_many_keys() -> None:
    keys = [b"x" * length for length in range(200)] + [b"k" * MAX_KEY_BYTES]
    ids = struct.unpack(f"<{len(keys)}I", partition_ids(*pack(keys), 271))
    assert list(ids) == [partition_id_of_serialized(key, 271) for key in keys]
    with pytest.raises(ColumnError, match="more than the"):
        partition_ids(*pack([b"k" * (MAX_KEY_BYTES + 1)]), 271)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=12), max_size=60), st.integers(1, 40))
def test_the_partitions_of_keys_are_each_named_once_in_the_order_they_first_come(keys: list[bytes], count: int) -> None:
    expected = list(dict.fromkeys(partition_id_of_serialized(key, count) for key in keys))
    packed = partitions_of(*pack(keys), count)
    assert list(struct.unpack(f"<{len(packed) // 4}I", packed)) == expected


def test_the_partitions_of_more_keys_than_a_request_carries_are_refused() -> None:
    with pytest.raises(ColumnError):
        partitions_of(*pack([b"k"] * 10_001), 271)
    with pytest.raises(ColumnError):
        partitions_of(*pack([b"k"]), 0)
