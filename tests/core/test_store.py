"""Partition stores: write runs apply like the writes they carry; streamed chunks hold every record."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid.core.messages import PUT, REMOVE, WriteRun
from shardgrid.core.store import PartitionData, stream_columns

maps_strategy = st.dictionaries(
    st.text(min_size=1, max_size=5),
    st.dictionaries(st.binary(max_size=12), st.binary(max_size=40), max_size=30),
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(maps_strategy, st.integers(1, 8), st.integers(1, 200))
def test_streamed_chunks_hold_every_record_once_in_order_and_within_bounds(
    maps: dict[str, dict[bytes, bytes]], max_entries: int, max_bytes: int
) -> None:
    chunks = list(stream_columns(maps, max_entries, max_bytes))
    rebuilt: dict[str, dict[bytes, bytes]] = {}
    order: list[tuple[str, bytes]] = []
    for map_name, keys, values in chunks:
        assert len(keys) == len(values) <= max_entries
        size = sum(len(k) + len(v) + 16 for k, v in zip(keys, values, strict=True))
        assert size <= max_bytes or len(keys) == 1  # a record larger than the bound stands alone
        rebuilt.setdefault(map_name, {}).update(zip(keys, values, strict=True))
        order += [(map_name, k) for k in keys]
    expected = {name: records for name, records in maps.items() if records}
    assert {name: records for name, records in rebuilt.items() if name} == expected
    assert order == [(name, k) for name, records in maps.items() for k in records]
    assert len(chunks) >= 1  # an empty partition still has a (last) chunk


def test_a_run_applies_from_where_the_replica_stands() -> None:
    data = PartitionData(sequence=1)
    run = WriteRun(0, "", 1, PUT, "m", (b"a", b"b", b"c"), (b"1", b"2", b"3"))
    data.apply_run(run, 1)  # write 1 is already applied
    assert data.maps == {"m": {b"b": b"2", b"c": b"3"}}
    assert data.sequence == 3
    data.apply_run(WriteRun(0, "", 4, REMOVE, "m", (b"b", b"c", b"zz"), ()), 0)
    assert data.maps == {}
    assert data.sequence == 6
