"""Rows grouped per owner into put_all batches: every row comes out once, each batch goes to one
owner, and only the last batches of a task are short."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid.client.routing import TableView
from shardgrid.core.hashing import partition_ids_of_serialized
from shardgrid.spark.owner_batches import OwnerBatches

PARTITIONS = 17


def _table(owner_of: list[str | None]) -> TableView:
    return TableView(partition_count=PARTITIONS, owners=owner_of, versions=[1] * PARTITIONS)


@settings(max_examples=60, deadline=None)
@given(
    owner_of=st.lists(st.sampled_from(["a:1", "b:2", "c:3", None]), min_size=PARTITIONS, max_size=PARTITIONS),
    chunks=st.lists(st.integers(0, 300), max_size=8),
    batch_rows=st.integers(1, 50),
)
def test_every_row_once_each_batch_one_owner_and_full_until_the_end(owner_of, chunks, batch_rows):
    table = _table(owner_of)
    grouped = OwnerBatches(table, batch_rows)
    sent: list[tuple[list[bytes], list[bytes]]] = []
    rows: list[bytes] = []
    for size in chunks:
        keys = [f"k{len(rows) + i}".encode() for i in range(size)]
        rows.extend(keys)
        full = grouped.add(keys, [key + b"=v" for key in keys])
        assert all(len(batch[0]) == batch_rows for batch in full)
        sent.extend(full)
    rest = grouped.rest()
    assert all(0 < len(batch[0]) < batch_rows for batch in rest)
    sent.extend(rest)
    assert grouped.rest() == []
    out = [key for keys, _ in sent for key in keys]
    assert sorted(out) == sorted(rows)
    for keys, values in sent:
        assert values == [key + b"=v" for key in keys]
        owners = {owner_of[pid] for pid in partition_ids_of_serialized(keys, PARTITIONS)}
        assert len(owners) == 1
    assert len(rest) <= len(set(owner_of))  # at most one short batch per owner


def test_without_a_table_the_rows_still_go_out_in_batches():
    grouped = OwnerBatches(TableView(), 2)
    full = grouped.add([b"a", b"b", b"c"], [b"1", b"2", b"3"])
    assert full == [([b"a", b"b"], [b"1", b"2"])]
    assert grouped.rest() == [([b"c"], [b"3"])]
