"""Reads of one request's keys across its partitions' stores in one call (``get_parts``,
``get_routed``): the same answers, hits and access times as a get served a partition at a time,
the partitions in the order they first come (one answer budget across them all, each partition's
keys past it left unread and the next partition's read with what is left), and every argument
checked before anything is read."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid._engine import UNREAD, ColumnError, RecordStore, get_parts, get_routed, partition_ids
from shardgrid.core.store import unpacked_lengths, unpacked_numbers
from tests.engine.packing import found, pack, unpack

MAP = "m"
PARTITIONS = 7


def _stores(held: dict[bytes, bytes]) -> dict[int, RecordStore]:
    """Stores per partition holding ``held``, each key in its partition's store."""
    stores: dict[int, RecordStore] = {}
    keys = list(held)
    if keys:
        for key, pid in zip(keys, unpacked_lengths(partition_ids(*pack(keys), PARTITIONS)), strict=True):
            store = stores.setdefault(pid, RecordStore(pid))
            store.put(MAP, *pack([key]), *pack([held[key]]), 1)
    return stores


def _metadata(stores: dict[int, RecordStore], keys: list[bytes]) -> list[bytes]:
    """Each key's metadata (hits and access times included) in every store: what reads change."""
    return [store.metadata(MAP, *pack(keys), 100)[0] for _, store in sorted(stores.items())]


keys_strategy = st.lists(st.binary(min_size=0, max_size=6), min_size=1, max_size=40)
held_strategy = st.dictionaries(st.binary(min_size=0, max_size=6), st.binary(max_size=30), max_size=30)
Answered = list[tuple[int, bytes]]  # per key: its presence byte (1, 0 or UNREAD) and its value


def _answered(values: bytes, lengths: bytes, present: bytes) -> Answered:
    return list(zip(present, unpack(values, lengths), strict=True))


def _read_a_partition_at_a_time(
    stores: dict[int, RecordStore], parts: list[tuple[int, list[int]]], keys: list[bytes], max_bytes: int | None
) -> dict[int, tuple[int, bytes]]:
    """What serving a get a partition at a time answers: each part's keys (positions in ``keys``)
    read one by one from its store with what is left of the budget, the rest of the part left
    unread once one does not fit."""
    answers: dict[int, tuple[int, bytes]] = {}
    used = 0
    for pid, positions in parts:
        store = stores.get(pid)
        stopped = False
        for at in positions:
            if stopped:
                answers[at] = (UNREAD, b"")
                continue
            if store is None:
                answers[at] = (0, b"")
                continue
            budget = None if max_bytes is None else max_bytes - used
            values, _, present = store.get(MAP, *pack([keys[at]]), 50, max_bytes=budget)
            if not present:
                stopped = True
                answers[at] = (UNREAD, b"")
                continue
            answers[at] = (present[0], values)
            used += len(values)
    return answers


def _parts_of(keys: list[bytes]) -> list[tuple[int, list[int]]]:
    """Each partition the keys are in, in the order they first come, with its keys' positions."""
    parts: dict[int, list[int]] = {}
    for at, pid in enumerate(unpacked_lengths(partition_ids(*pack(keys), PARTITIONS))):
        parts.setdefault(pid, []).append(at)
    return list(parts.items())


@settings(max_examples=300, deadline=None)
@given(held_strategy, keys_strategy, st.none() | st.integers(0, 400))
def test_one_routed_read_answers_as_a_get_served_a_partition_at_a_time(
    held: dict[bytes, bytes], keys: list[bytes], max_bytes: int | None
) -> None:
    routed, separate = _stores(held), _stores(held)
    parts = _parts_of(keys)
    stores = [(pid, routed.get(pid)) for pid, _ in parts]  # None where the partition holds nothing
    answer = _answered(*get_routed(MAP, PARTITIONS, *pack(keys), stores, 50, max_bytes))
    expected = _read_a_partition_at_a_time(separate, parts, keys, max_bytes)
    assert answer == [expected[at] for at in range(len(keys))]  # in request order
    assert _metadata(routed, keys) == _metadata(separate, keys)  # the same hits and access times


@settings(max_examples=200, deadline=None)
@given(held_strategy, keys_strategy, st.none() | st.integers(0, 400))
def test_reads_of_parts_answer_as_a_get_per_part_and_say_where_each_part_ends(
    held: dict[bytes, bytes], keys: list[bytes], max_bytes: int | None
) -> None:
    stores, separate = _stores(held), _stores(held)
    parts = _parts_of(keys)
    values, lengths, present, ends = get_parts(
        MAP, [(stores.get(pid), *pack([keys[at] for at in positions])) for pid, positions in parts], 50, max_bytes
    )
    expected = _read_a_partition_at_a_time(separate, parts, keys, max_bytes)
    in_part_order = [expected[at] for _, positions in parts for at in positions]
    assert _answered(values, lengths, present) == in_part_order
    value_ends, used = [], 0
    for _, positions in parts:
        used += sum(len(expected[at][1]) for at in positions)
        value_ends.append(used)
    assert list(unpacked_numbers(ends)) == value_ends
    assert _metadata(stores, keys) == _metadata(separate, keys)


def test_a_routed_read_with_a_store_missing_or_named_twice_or_out_of_range_reads_nothing() -> None:
    stores = _stores({b"a": b"1", b"b": b"2", b"c": b"3"})
    keys = [b"a", b"b", b"c"]
    pids = list(dict.fromkeys(unpacked_lengths(partition_ids(*pack(keys), PARTITIONS))))
    before = _metadata(stores, keys)
    named = [(pid, stores.get(pid)) for pid in pids]
    for bad, message in (
        (named[1:], "whose store is not given"),
        ([*named, named[0]], "two stores of partition"),
        ([*named, (PARTITIONS, None)], "not one of the 7 partitions"),
    ):
        with pytest.raises(ColumnError, match=message):
            get_routed(MAP, PARTITIONS, *pack(keys), bad, 50)
    with pytest.raises(ColumnError):
        get_routed(MAP, PARTITIONS, *pack([b"k"] * 10_001), named, 50)  # more keys than a request carries
    with pytest.raises(ColumnError):
        get_routed(MAP, PARTITIONS, b"abc", b"\x05\x00\x00\x00", named, 50)  # lengths past the buffer
    with pytest.raises(TypeError):
        get_routed(MAP, PARTITIONS, *pack(keys), [(pids[0], "not a store")], 50)
    with pytest.raises(ColumnError):
        get_routed("", PARTITIONS, *pack(keys), named, 50)
    with pytest.raises(ColumnError):
        get_routed(MAP, 0, *pack(keys), named, 50)
    for pid in (-1, 2**32, 2**70):  # a partition as the engine's other ints: from 0 (an outside tester)
        with pytest.raises(ColumnError):
            get_routed(MAP, PARTITIONS, *pack(keys), [*named, (pid, None)], 50)
    with pytest.raises(TypeError):
        get_routed(MAP, PARTITIONS, *pack(keys), [*named, (True, None)], 50)
    assert _metadata(stores, keys) == before  # nothing was read: no hit, no access


def test_reads_of_parts_with_one_bad_part_read_nothing() -> None:
    stores = _stores({b"a": b"1", b"b": b"2"})
    store_a, store_b = stores[min(stores)], stores[max(stores)]
    before = _metadata(stores, [b"a", b"b"])
    good = (store_a, *pack([b"a", b"b"]))
    for bad in ((store_b, b"ab", b"\x01\x00\x00"), (store_b, *pack([b"x" * (64 * 1024 + 1)]))):
        with pytest.raises(ColumnError):
            get_parts(MAP, [good, bad], 50)
    with pytest.raises(ColumnError):
        get_parts(MAP, [(store_a, *pack([b"a"] * 5_001)), (store_b, *pack([b"b"] * 5_000))], 50)  # 10,001 in all
    with pytest.raises(TypeError):
        get_parts(MAP, [good, ("not a store", *pack([b"a"]))], 50)
    assert _metadata(stores, [b"a", b"b"]) == before
    # One store named twice is read twice, in order (each part borrows it in turn).
    once = found(store_a.peek(MAP, *pack([b"a", b"b"]), 50))
    values, lengths, present, _ = get_parts(MAP, [good, good], 50)
    assert found((values, lengths, present)) == once * 2
