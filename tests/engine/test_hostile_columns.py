"""Columns and arguments as a hostile or broken peer could send them: lengths that do not add up,
a truncated length buffer, lengths near 2**32, keys and values one byte over their limit, one entry
too many, TTLs and times out of range, arguments of the wrong type. Each is refused before anything
changes (``ColumnError``, a ``ValueError``, or ``TypeError`` for a wrong type), whatever the call,
and a batch with one bad entry at its end applies none of the good ones before it."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid._engine import (
    MAX_COUNTER,
    MAX_KEY_BYTES,
    MAX_MAP_NAME_CHARS,
    MAX_OPERATIONS_PER_REQUEST,
    MAX_VALUE_BYTES,
    ColumnError,
    RecordStore,
)
from tests.engine.packing import pack, snapshot, unpack

MAP = "m"


def filled_store() -> RecordStore:
    """A store with entries in two maps, some expiring, some read: a failed call must leave all of
    it as it was (records, order, metadata, counts, bytes)."""
    store = RecordStore(42)
    keys = [b"k%d" % n for n in range(20)]
    store.put(MAP, *pack(keys), *pack([b"v" * n for n in range(20)]), 100, ttl_ms=50)
    store.put(MAP, *pack(keys[:5]), *pack([b"new"] * 5), 110)
    store.put("other", *pack([b""]), *pack([b""]), 100)
    store.get(MAP, *pack(keys[3:9]), 120)
    return store


# Each call, with its key column replaced by a bad one (values stay good where the call has any).
def _put(store: RecordStore, keys: bytes, lengths: bytes) -> object:
    count = max(len(lengths) // 4, 0)
    return store.put(MAP, keys, lengths, *pack([b"x"] * count), 200, return_previous=True)


def _put_if_absent(store: RecordStore, keys: bytes, lengths: bytes) -> object:
    count = max(len(lengths) // 4, 0)
    return store.put_if_absent(MAP, keys, lengths, *pack([b"x"] * count), 200, ttl_ms=5)


CALLS: dict[str, Callable[[RecordStore, bytes, bytes], object]] = {
    "put": _put,
    "put_if_absent": _put_if_absent,
    "get": lambda store, keys, lengths: store.get(MAP, keys, lengths, 200),
    "remove": lambda store, keys, lengths: store.remove(MAP, keys, lengths, 200, return_previous=True),
    "metadata": lambda store, keys, lengths: store.metadata(MAP, keys, lengths, 200),
}


def lengths_of(*sizes: int) -> bytes:
    return struct.pack(f"<{len(sizes)}I", *sizes)


BAD_KEY_COLUMNS = {
    "lengths add up to less than the buffer": (b"abcd", lengths_of(1, 2)),
    "lengths add up to more than the buffer": (b"abc", lengths_of(2, 2)),
    "lengths and no buffer": (b"", lengths_of(1)),
    "a buffer and no lengths": (b"abc", b""),
    "a truncated length buffer": (b"abc", lengths_of(1, 2)[:-1]),
    "one byte of lengths": (b"", b"\x00"),
    "a length of 2**32 - 1": (b"a", lengths_of(0xFFFFFFFF)),
    "lengths that wrap 32 bits": (b"a", lengths_of(0xFFFFFFFF, 2)),
    "a key one byte over the limit": (b"k" * (MAX_KEY_BYTES + 1), lengths_of(MAX_KEY_BYTES + 1)),
    "one entry too many": (b"", lengths_of(*[0] * (MAX_OPERATIONS_PER_REQUEST + 1))),
    "good keys then one over the limit": (
        b"abc" + b"k" * (MAX_KEY_BYTES + 1),
        lengths_of(1, 1, 1, MAX_KEY_BYTES + 1),
    ),
}


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("column", BAD_KEY_COLUMNS)
def test_a_bad_key_column_is_refused_by_every_call_and_changes_nothing(call: str, column: str) -> None:
    store = filled_store()
    before = snapshot(store)
    with pytest.raises(ColumnError):
        CALLS[call](store, *BAD_KEY_COLUMNS[column])
    assert snapshot(store) == before


def test_column_errors_are_value_errors_and_say_what_was_wrong() -> None:
    store = RecordStore()
    assert issubclass(ColumnError, ValueError)
    with pytest.raises(ColumnError, match="keys: the lengths add up to 3 bytes and the buffer holds 4"):
        store.get(MAP, b"abcd", lengths_of(1, 2), 0)
    with pytest.raises(ColumnError, match="keys: 7 bytes of lengths is not a whole number of 4-byte lengths"):
        store.get(MAP, b"abc", lengths_of(1, 2)[:-1], 0)
    with pytest.raises(ColumnError, match=f"values: entry 1 is {MAX_VALUE_BYTES + 1} bytes"):
        store.put(MAP, *pack([b"a", b"b"]), *pack([b"", b"v" * (MAX_VALUE_BYTES + 1)]), 0)
    with pytest.raises(ColumnError, match="2 keys and 1 values"):
        store.put(MAP, *pack([b"a", b"b"]), *pack([b"v"]), 0)


@pytest.mark.parametrize(
    ("values", "value_lengths"),
    [
        (b"xy", lengths_of(1)),  # do not add up
        (b"x", lengths_of(1)[:-1]),  # truncated
        (b"x" * (MAX_VALUE_BYTES + 1), lengths_of(1, MAX_VALUE_BYTES)),  # the last entry over the limit
        (b"xy", lengths_of(1, 1)),  # more values than keys
    ],
)
@pytest.mark.parametrize("call", ["put", "put_if_absent"])
def test_a_bad_value_column_changes_nothing(call: str, values: bytes, value_lengths: bytes) -> None:
    store = filled_store()
    before = snapshot(store)
    with pytest.raises(ColumnError):
        getattr(store, call)(MAP, *pack([b"k0"]), values, value_lengths, 200)
    assert snapshot(store) == before


@pytest.mark.parametrize("call", ["put", "put_if_absent"])
def test_a_batch_with_one_bad_entry_at_its_end_applies_none_before_it(call: str) -> None:
    store = filled_store()
    before = snapshot(store)
    keys = [b"k0", b"brand-new", b"k7", b"k" * (MAX_KEY_BYTES + 1)]
    with pytest.raises(ColumnError):
        getattr(store, call)(MAP, *pack(keys), *pack([b"v"] * 4), 200)
    with pytest.raises(ColumnError):
        getattr(store, call)(MAP, *pack(keys[:3]), *pack([b"v"] * 3), 200, ttls_ms=struct.pack("<3Q", 5, 5, 2**60))
    with pytest.raises(ColumnError):
        store.remove(MAP, *pack(keys), 200)
    with pytest.raises(ColumnError):
        store.get(MAP, *pack(keys), 200)  # not even a hit is counted
    assert snapshot(store) == before


@pytest.mark.parametrize(
    ("ttl", "message"),
    [
        ({"ttl_ms": -1}, "ttl_ms is -1"),
        ({"ttl_ms": MAX_COUNTER + 1}, "ttl_ms is 9007199254740993"),
        ({"ttl_ms": 2**64}, "ttl_ms is 18446744073709551616"),
        ({"ttl_ms": 10**40}, "ttl_ms is 10000000000000000000000000000000000000000"),
        ({"ttls_ms": struct.pack("<2Q", 1, 2)}, "ttls_ms: 2 numbers for 1 entries"),
        ({"ttls_ms": b"\x01" * 7}, "ttls_ms: 7 bytes is not a whole number of 8-byte numbers"),
        ({"ttls_ms": struct.pack("<Q", MAX_COUNTER + 1)}, "ttls_ms: entry 0 is 9007199254740993"),
        ({"ttls_ms": struct.pack("<Q", 2**64 - 1)}, "ttls_ms: entry 0 is 18446744073709551615"),
        ({"ttl_ms": 5, "ttls_ms": struct.pack("<Q", 5)}, "not both"),
    ],
)
def test_a_bad_ttl_is_refused_and_changes_nothing(ttl: dict, message: str) -> None:
    store = filled_store()
    before = snapshot(store)
    with pytest.raises(ColumnError, match=message):
        store.put(MAP, *pack([b"k1"]), *pack([b"v"]), 200, **ttl)
    assert snapshot(store) == before


@pytest.mark.parametrize("now_ms", [-1, MAX_COUNTER + 1, 2**63, 2**64, -(2**70)])
def test_a_time_out_of_range_is_refused_by_every_call(now_ms: int) -> None:
    store = filled_store()
    before = snapshot(store)
    keys = pack([b"k1"])
    calls = [
        lambda: store.put(MAP, *keys, *pack([b"v"]), now_ms),
        lambda: store.put_if_absent(MAP, *keys, *pack([b"v"]), now_ms),
        lambda: store.get(MAP, *keys, now_ms),
        lambda: store.remove(MAP, *keys, now_ms),
        lambda: store.metadata(MAP, *keys, now_ms),
        lambda: store.scan(MAP, 0, 10, now_ms),
        lambda: store.expired(MAP, now_ms, 10),
    ]
    for call in calls:
        with pytest.raises(ColumnError, match="now_ms is"):
            call()
    assert snapshot(store) == before


@pytest.mark.parametrize(
    ("offset", "max_entries"), [(-1, 1), (MAX_COUNTER + 1, 1), (0, -1), (0, MAX_OPERATIONS_PER_REQUEST + 1)]
)
def test_a_scan_or_sweep_out_of_bounds_is_refused(offset: int, max_entries: int) -> None:
    store = filled_store()
    with pytest.raises(ColumnError):
        store.scan(MAP, offset, max_entries, 0)
    if offset == 0:
        with pytest.raises(ColumnError):
            store.expired(MAP, 0, max_entries)


@pytest.mark.parametrize("name", ["", "x" * (MAX_MAP_NAME_CHARS + 1), "é" * (MAX_MAP_NAME_CHARS + 1)])
def test_a_map_name_out_of_bounds_is_refused(name: str) -> None:
    store = filled_store()
    before = snapshot(store)
    with pytest.raises(ColumnError, match="a map name has 1 to 256 characters"):
        store.put(name, *pack([b"k"]), *pack([b"v"]), 0)
    with pytest.raises(ColumnError):
        store.get(name, *pack([b"k"]), 0)
    assert snapshot(store) == before


def test_a_map_name_is_counted_in_characters() -> None:
    store = RecordStore()
    name = "é" * MAX_MAP_NAME_CHARS  # 512 bytes of UTF-8
    store.put(name, *pack([b"k"]), *pack([b"v"]), 0)
    assert store.map_names() == [name]


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.get(MAP, "k", b"\x01\x00\x00\x00", 0),  # a str for bytes
        lambda s: s.get(MAP, bytearray(b"k"), b"\x01\x00\x00\x00", 0),
        lambda s: s.get(MAP, memoryview(b"k"), b"\x01\x00\x00\x00", 0),
        lambda s: s.get(MAP, b"k", [1], 0),
        lambda s: s.get(MAP, b"k", b"\x01\x00\x00\x00", 1.0),
        lambda s: s.get(MAP, b"k", b"\x01\x00\x00\x00", True),
        lambda s: s.get(MAP, b"k", b"\x01\x00\x00\x00", None),
        lambda s: s.get(b"m", b"k", b"\x01\x00\x00\x00", 0),
        lambda s: s.put(MAP, b"k", b"\x01\x00\x00\x00", b"v", b"\x01\x00\x00\x00", 0, ttl_ms=1.5),
        lambda s: s.put(MAP, b"k", b"\x01\x00\x00\x00", b"v", b"\x01\x00\x00\x00", 0, ttls_ms=[1]),
        lambda s: s.put(MAP, b"k", b"\x01\x00\x00\x00", b"v", b"\x01\x00\x00\x00", 0, return_previous=1),
        lambda s: s.scan(MAP, "0", 1, 0),
    ],
)
def test_an_argument_of_the_wrong_type_is_a_type_error_and_changes_nothing(call: Callable) -> None:
    store = filled_store()
    before = snapshot(store)
    with pytest.raises(TypeError):
        call(store)
    assert snapshot(store) == before


@pytest.mark.parametrize("seed", [-1, 2**64, "1", 1.0])
def test_a_bad_hash_seed_is_refused(seed: object) -> None:
    with pytest.raises((ColumnError, TypeError)):
        RecordStore(seed)  # type: ignore[arg-type]


def test_the_limits_themselves_are_taken() -> None:
    store = RecordStore()
    key, value = b"k" * MAX_KEY_BYTES, b"v" * MAX_VALUE_BYTES
    store.put(MAP, *pack([key, b""]), *pack([value, b""]), MAX_COUNTER - 1, ttl_ms=MAX_COUNTER)
    values, lengths, present = store.get(MAP, *pack([key, b""]), MAX_COUNTER - 1)
    assert present == b"\x01\x01"
    assert unpack(values, lengths) == [value, b""]
    many = [b"%d" % n for n in range(MAX_OPERATIONS_PER_REQUEST)]
    _, _, present, _ = store.put(MAP, *pack(many), *pack(many), 0)
    assert len(present) == MAX_OPERATIONS_PER_REQUEST
    assert len(unpack(*store.scan(MAP, 0, MAX_OPERATIONS_PER_REQUEST, 0)[:2])) == MAX_OPERATIONS_PER_REQUEST


def valid_column(data: bytes, lengths: bytes, max_item: int) -> bool:
    """The rules, written out in Python: what the engine must take, and nothing else."""
    if len(lengths) % 4:
        return False
    sizes = struct.unpack(f"<{len(lengths) // 4}I", lengths)
    return len(sizes) <= MAX_OPERATIONS_PER_REQUEST and all(s <= max_item for s in sizes) and sum(sizes) == len(data)


small_lengths = st.lists(st.integers(0, 6), max_size=6).map(lambda sizes: lengths_of(*sizes))
any_lengths = st.binary(max_size=26)
near_limit = st.lists(
    st.sampled_from([0, 1, MAX_KEY_BYTES - 1, MAX_KEY_BYTES, MAX_KEY_BYTES + 1, 0xFFFFFFFF]), max_size=3
).map(lambda sizes: lengths_of(*sizes))


@settings(max_examples=400, deadline=None)
@given(
    call=st.sampled_from(sorted(CALLS)),
    data=st.binary(max_size=30) | st.integers(0, 3 * MAX_KEY_BYTES).map(lambda n: b"k" * n),
    lengths=small_lengths | any_lengths | near_limit,
)
def test_random_key_columns_are_taken_exactly_when_they_follow_the_rules(
    call: str, data: bytes, lengths: bytes
) -> None:
    store = filled_store()
    before = snapshot(store)
    if valid_column(data, lengths, MAX_KEY_BYTES):
        answer = CALLS[call](store, data, lengths)
        keys = unpack(data, lengths)  # the project's reading of the column
        present = answer[1] if call == "metadata" else answer[2]
        assert len(present) == len(keys)
        if call == "put":
            assert store.get(MAP, data, lengths, 200)[0] == b"x" * len(keys)
    else:
        with pytest.raises(ColumnError):
            CALLS[call](store, data, lengths)
        assert snapshot(store) == before
