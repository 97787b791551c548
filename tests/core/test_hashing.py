"""Key to partition id compatible with Hazelcast, and the table stamp."""

from __future__ import annotations

import struct

import mmh3
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardgrid.core.errors import ConfigError
from shardgrid.core.hashing import (
    MURMUR_SEED,
    hash_to_index,
    partition_id,
    partition_id_of_serialized,
    partition_ids_of_serialized,
    serialize_key,
    table_stamp,
)


@pytest.mark.parametrize(("key", "expected"), [("a", 73), ("key-1", 94), ("hello", 270)])
def test_string_keys_land_where_hazelcast_puts_them(key: str, expected: int) -> None:
    assert partition_id(key, 271) == expected


def test_string_serialization_is_hazelcasts_length_prefixed_utf8() -> None:
    assert serialize_key("é") == b"\x00\x00\x00\x02\xc3\xa9"
    assert serialize_key("") == b"\x00\x00\x00\x00"


def test_bytes_keys_are_hashed_as_given() -> None:
    raw = b"\x00\x00\x00\x01a"
    assert serialize_key(raw) == raw
    assert partition_id(raw) == partition_id("a")
    assert partition_id(bytearray(raw)) == partition_id(memoryview(raw)) == partition_id(raw)


def test_int_keys_are_hazelcast_integers_or_longs_by_magnitude() -> None:
    assert serialize_key(7) == struct.pack(">i", 7)
    assert serialize_key(-(2**31)) == struct.pack(">i", -(2**31))
    assert serialize_key(2**31) == struct.pack(">q", 2**31)
    assert serialize_key(-(2**63)) == struct.pack(">q", -(2**63))
    with pytest.raises(ConfigError, match="64-bit"):
        serialize_key(2**63)


def test_unsupported_keys_are_refused_clearly() -> None:
    with pytest.raises(TypeError, match="bool"):
        serialize_key(True)
    with pytest.raises(TypeError, match="float"):
        serialize_key(1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="partition_count"):
        partition_id("a", 0)


def test_the_most_negative_hash_folds_to_partition_zero() -> None:
    assert hash_to_index(-(2**31), 271) == 0
    assert hash_to_index(-5, 271) == 5
    assert hash_to_index(2**31 - 1, 271) == (2**31 - 1) % 271


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=20_000))
def test_partition_ids_are_in_range_and_follow_murmur3(key: bytes, partitions: int) -> None:
    pid = partition_id_of_serialized(key, partitions)
    assert 0 <= pid < partitions
    assert pid == hash_to_index(mmh3.hash(key, MURMUR_SEED, signed=True), partitions)


@given(st.lists(st.integers(min_value=0, max_value=2**31 - 1), min_size=1, max_size=300))
def test_stamp_is_a_function_of_the_versions(versions: list[int]) -> None:
    stamp = table_stamp(versions)
    assert -(2**63) <= stamp < 2**63
    assert stamp == table_stamp(list(versions))
    bumped = list(versions)
    bumped[0] = versions[0] - 1 if versions[0] > 0 else 1
    assert table_stamp(bumped) != stamp  # a collision here would be a 2**-64 event


def test_stamp_depends_on_position_not_only_on_the_multiset() -> None:
    assert table_stamp([1, 2]) != table_stamp([2, 1])


@given(st.lists(st.binary(max_size=40), max_size=50), st.integers(1, 100_000))
def test_the_columnar_partition_ids_match_one_key_at_a_time(keys: list[bytes], partitions: int) -> None:
    assert partition_ids_of_serialized(keys, partitions) == [partition_id_of_serialized(k, partitions) for k in keys]
