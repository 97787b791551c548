"""Rows grouped per owner into put_all batches: every row comes out once, each batch goes to one
owner in partition order, two rows of one key keep their order, and only each owner's last batch
of a task is short."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid.client.encoded_columns import EncodedColumns
from shardgrid.client.routing import TableView
from shardgrid.core.errors import InvariantViolation
from shardgrid.core.hashing import partition_ids_of_serialized
from shardgrid.spark.owner_batches import OwnerBatches

PARTITIONS = 17


def _decoded(
    batches: list[EncodedColumns], partitions: int = PARTITIONS
) -> list[tuple[list[bytes], list[bytes], list[int] | None]]:
    """The batches' columns as lists, each checked to hold together, with its keys' partition ids
    (None for a batch that names no partitions: its table had no partition count)."""
    decoded = []
    for batch in batches:
        assert batch.problem() == ""
        assert batch.fits()
        keys, values = batch.lists()
        assert batch.count == len(keys)
        pids = partition_ids_of_serialized(keys, partitions) if batch.partitions else None
        assert batch.partitions == (tuple(sorted(set(pids))) if pids is not None else ())
        decoded.append((keys, values, pids))
    return decoded


def _table(owner_of: list[str | None]) -> TableView:
    return TableView(partition_count=PARTITIONS, owners=owner_of, versions=[1] * PARTITIONS)


@settings(max_examples=80, deadline=None)
@given(
    owner_of=st.lists(st.sampled_from(["a:1", "b:2", "c:3", None]), min_size=PARTITIONS, max_size=PARTITIONS),
    chunks=st.lists(st.integers(0, 300), max_size=8),
    batch_rows=st.integers(1, 50),
    held_rows=st.integers(1, 400),
    held_bytes=st.integers(1, 20_000),
    distinct_keys=st.integers(1, 500),
)
def test_every_row_once_each_batch_one_owner_in_partition_order(
    owner_of, chunks, batch_rows, held_rows, held_bytes, distinct_keys
):
    table = _table(owner_of)
    grouped = OwnerBatches(table, batch_rows, held_rows, held_bytes)
    sent: list[tuple[list[bytes], list[bytes]]] = []
    pid_columns: list[list[int] | None] = []
    rows: list[tuple[bytes, bytes]] = []
    for size in chunks:
        # Keys repeat (a key written twice by one task): the values tell the writes apart.
        keys = [f"k{(len(rows) + i) % distinct_keys}".encode() for i in range(size)]
        values = [b"%s=%d" % (key, len(rows) + i) for i, key in enumerate(keys)]
        rows.extend(zip(keys, values, strict=True))
        full = _decoded(grouped.add(keys, values))
        sent.extend(batch[:2] for batch in full)
        pid_columns.extend(batch[2] for batch in full)
        # Bounded: under held_rows and held_bytes (and under half of them after a let-out).
        out_rows = sum(len(keys) for keys, _ in sent)
        out_bytes = sum(sum(map(len, keys)) + sum(map(len, values)) for keys, values in sent)
        assert grouped.rows == len(rows) - out_rows
        assert grouped.bytes == sum(len(key) + len(value) for key, value in rows) - out_bytes
        assert grouped.rows < max(held_rows, batch_rows)
        assert grouped.bytes < held_bytes
        if full:
            assert grouped.rows * 2 < max(held_rows, batch_rows)
            assert grouped.bytes * 2 < held_bytes
    rest = _decoded(grouped.rest())
    sent.extend(batch[:2] for batch in rest)
    pid_columns.extend(batch[2] for batch in rest)
    assert grouped.rest() == []
    out = [(key, value) for keys, values in sent for key, value in zip(keys, values, strict=True)]
    assert Counter(out) == Counter(rows)
    # Each key's writes leave in the order they came (the last one stays in the map).
    order_in = [value for _, value in rows]
    for key in {key for key, _ in rows}:
        came = [value for k, value in rows if k == key]
        left = [value for k, value in out if k == key]
        assert left == came, (key, came, left, order_in)
    for (keys, _), given_pids in zip(sent, pid_columns, strict=True):
        pids = partition_ids_of_serialized(keys, PARTITIONS)
        assert given_pids == pids
        assert len({owner_of[pid] for pid in pids}) == 1
        assert pids == sorted(pids)
        assert 0 < len(keys) <= batch_rows


def test_without_a_table_the_rows_still_go_out_in_batches():
    grouped = OwnerBatches(TableView(), 2, held_rows=3)
    assert grouped.add([b"a", b"b"], [b"1", b"2"]) == []
    full = _decoded(grouped.add([b"c"], [b"3"]))
    assert full == [([b"a", b"b"], [b"1", b"2"], None)]
    assert _decoded(grouped.rest()) == [([b"c"], [b"3"], None)]


def test_large_values_are_let_out_by_bytes():
    grouped = OwnerBatches(TableView(), 2, held_rows=1_000, held_bytes=3_000)
    assert grouped.add([b"a"], [bytes(1_000)]) == []
    assert grouped.add([b"b"], [bytes(1_000)]) == []
    assert [keys for keys, _, _ in _decoded(grouped.add([b"c"], [bytes(1_000)]))] == [[b"a", b"b"]]
    assert grouped.bytes == 1_001


def test_a_batch_covers_few_partitions():
    """The point of holding rows: at 271 partitions and 3 owners, 1,000-row batches of 50,000
    held rows touch a handful of partitions each, not most of their owner's 90."""
    partitions = 271
    owners = [f"m{pid % 3}:1" for pid in range(partitions)]
    table = TableView(partition_count=partitions, owners=owners, versions=[1] * partitions)
    grouped = OwnerBatches(table, 1_000, 50_000)
    batches = []
    for chunk in range(10):
        keys = [b"key-%d" % (chunk * 10_000 + i) for i in range(10_000)]
        batches.extend(_decoded(grouped.add(keys, keys), partitions))
    batches.extend(_decoded(grouped.rest(), partitions))
    touched = [len(set(partition_ids_of_serialized(keys, partitions))) for keys, _, _ in batches]
    assert sum(touched) / len(touched) < 10
    assert sum(len(keys) < 1_000 for keys, _, _ in batches) <= 3  # only each owner's last is short


def test_owners_take_turns():
    """Each owner's batches one after the other sent a task's window of batches in flight to one
    member at a time: it worked alone while the others waited, and two tasks' windows on one
    member passed its bound on writes awaiting backups (OVERLOADED, then retried key by key)."""
    partitions = 271
    owners = [f"m{pid % 3}:1" for pid in range(partitions)]
    table = TableView(partition_count=partitions, owners=owners, versions=[1] * partitions)
    grouped = OwnerBatches(table, 1_000, 50_000)
    keys = [b"key-%d" % i for i in range(50_000)]
    batches = _decoded(grouped.add(keys, keys), partitions)
    order = [owners[pids[0]] for _, _, pids in batches]
    assert len(order) >= 45
    # Every window of three batches goes to three owners, while each owner still has batches.
    for first in range(0, len(order) - 2, 3):
        window = order[first : first + 3]
        if len(window) == 3 and all(order[first:].count(owner) for owner in set(owners)):
            assert sorted(window) == ["m0:1", "m1:1", "m2:1"], (first, order)


def test_large_batches_over_many_owners_are_not_sorted_again_on_every_add():
    """Found by an outside tester: 10 owners of 10,000-row batches kept short tails of up to
    99,990 rows, over the 50,000 held, and every add sorted them all again."""
    partitions = 271
    table = TableView(partition_count=partitions, owners=[f"m{pid % 10}:1" for pid in range(partitions)])
    grouped = OwnerBatches(table, 10_000, 50_000)
    sorts = 0
    by_owner = grouped._by_owner

    def counted(keys, values, ttls):
        nonlocal sorts
        sorts += 1
        return by_owner(keys, values, ttls)

    grouped._by_owner = counted
    for chunk in range(200):
        keys = [b"key-%d" % (chunk * 1_000 + i) for i in range(1_000)]
        grouped.add(keys, keys)
        assert grouped.rows < 50_000
    assert sorts <= 200_000 // 25_000


@pytest.mark.parametrize("partitions", [65_536, 100_000])
def test_partitions_past_16_bits_are_named(partitions):
    """Found by an outside tester: partition ids were encoded up to 65,535 only, and a cluster of
    more partitions (up to 100,000 are allowed) failed every write task. The batches name the
    partitions they hold (which tell the client the owner), in partition order."""
    keys = [b"\0\0\0\6key%03d" % i for i in range(3_000)]
    table = TableView(partition_count=partitions, owners=["a:1"] * partitions, versions=[1] * partitions)
    grouped = OwnerBatches(table, 1_000)
    batches = _decoded(grouped.add(keys, [b"v"] * len(keys)) + grouped.rest(), partitions)
    assert sorted(key for batch_keys, _, _ in batches for key in batch_keys) == sorted(keys)
    for _, _, pids in batches:
        assert pids == sorted(pids)  # each partition's keys side by side, as a member takes them
    assert max(pid for _, _, pids in batches for pid in pids) >= partitions * 9 // 10


def test_a_single_held_tail_is_a_copy():
    """Found by an outside tester: one owner's short tail stayed a slice of the sorted let-out,
    which kept all of it alive (5,300,000 bytes held for a count of 301,500)."""
    table = TableView(partition_count=PARTITIONS, owners=["a:1"] * PARTITIONS, versions=[1] * PARTITIONS)
    grouped = OwnerBatches(table, 1_000, held_rows=5_000)
    keys = [b"key-%d" % i for i in range(5_300)]
    assert len(grouped.add(keys, [bytes(1_000)] * len(keys))) == 5
    (held,) = grouped._values
    assert held.offset == 0
    assert len(held.buffers()[2]) == grouped.rows * 1_000 == 300_000


@settings(max_examples=60, deadline=None)
@given(
    owner_of=st.lists(st.sampled_from(["a:1", "b:2", None]), min_size=PARTITIONS, max_size=PARTITIONS),
    chunks=st.lists(st.integers(0, 200), max_size=6),
    batch_rows=st.integers(1, 40),
    held_rows=st.integers(1, 300),
)
def test_each_rows_ttl_travels_with_it(owner_of, chunks, batch_rows, held_rows) -> None:
    grouped = OwnerBatches(_table(owner_of), batch_rows, held_rows)
    batches: list[EncodedColumns] = []
    written = 0
    for size in chunks:
        keys = [b"k%d" % (written + i) for i in range(size)]
        values = [b"%d" % (written + i) for i in range(size)]
        ttls = np.array([7 * (written + i) for i in range(size)], dtype="<u8")
        batches += grouped.add(keys, values, ttls)
        written += size
    batches += grouped.rest()
    seen = 0
    for batch in batches:
        _, values = batch.lists()
        ttls = np.frombuffer(batch.ttls_ms, dtype="<u8").tolist()
        assert ttls == [7 * int(value) for value in values]
        seen += len(values)
    assert seen == written


def test_a_task_gives_ttls_with_every_add_or_none() -> None:
    grouped = OwnerBatches(TableView(), 2, held_rows=10)
    grouped.add([b"a"], [b"1"], np.array([5], dtype="<u8"))
    with pytest.raises(InvariantViolation, match="TTLs"):
        grouped.add([b"b"], [b"2"])
