"""Partition stores: write runs apply like the writes they carry; streamed pieces hold every record;
per-map versions name exactly the maps a lagging replica lacks."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid._engine import DUMP_RECORD_BYTES
from shardgrid.core.messages import PUT, REMOVE
from shardgrid.core.records import page_count, page_items
from shardgrid.core.store import PartitionData, stream_pieces
from tests.wire import write_run

maps_strategy = st.dictionaries(
    st.text(min_size=1, max_size=5),
    st.dictionaries(st.binary(max_size=12), st.binary(max_size=40), max_size=30),
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(maps_strategy, st.integers(1, 8), st.integers(1, 200))
def test_streamed_pieces_hold_every_record_once_in_order_and_within_bounds(
    maps: dict[str, dict[bytes, bytes]], max_entries: int, max_bytes: int
) -> None:
    versions = {name: 7 + i for i, name in enumerate(maps)}
    held = PartitionData.holding(maps)
    pieces = list(stream_pieces([(n, versions[n], held.maps[n]) for n in held.maps], max_entries, max_bytes))
    rebuilt: dict[str, dict[bytes, bytes]] = {}
    order: list[tuple[str, bytes]] = []
    for map_name, version, page, entries in pieces:
        items = page_items(page)
        assert len(items) == page_count(page) <= max_entries
        assert version == versions.get(map_name, 0)
        assert entries == len(maps.get(map_name, {}))  # what the receiver makes room for
        size = sum(len(k) + len(v) + DUMP_RECORD_BYTES for k, v in items.items())
        assert size <= max_bytes or len(items) == 1  # a record larger than the bound stands alone
        rebuilt.setdefault(map_name, {}).update(items)
        order += [(map_name, k) for k in items]
    expected = {name: records for name, records in maps.items() if records}
    assert {name: records for name, records in rebuilt.items() if name} == expected
    assert order == [(name, k) for name, records in maps.items() for k in records]
    assert len(pieces) >= 1  # nothing to send still has a (last) piece


writes_strategy = st.lists(
    st.tuples(
        st.sampled_from([PUT, REMOVE]),
        st.sampled_from(["a", "b", "c"]),
        st.lists(st.sampled_from([b"k1", b"k2", b"k3"]), min_size=1, max_size=3),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(writes_strategy)
def test_a_replica_at_any_sequence_from_versions_from_on_becomes_the_owner_by_taking_the_maps_changed_since(
    writes: list[tuple[int, str, list[bytes]]],
) -> None:
    """The promise a sync of just some maps rests on: a replica that applied the owner's writes in
    order up to sequence s differs from the owner only in the maps whose version is past s."""
    owner = PartitionData()
    states = [copy.deepcopy(owner)]
    for kind, name, keys in writes:
        values = tuple(b"v%d" % (owner.sequence + i) for i in range(len(keys))) if kind == PUT else ()
        owner.apply_run(
            write_run(
                partition_id=0,
                lineage="",
                first_sequence=owner.sequence + 1,
                kind=kind,
                map_name=name,
                keys=tuple(keys),
                values=values,
            ),
            0,
            0,
        )
        assert all(owner.maps.values())  # an emptied map is dropped
        assert set(owner.versions) == set(owner.maps)  # every map held has a version, and only those
        states.append(copy.deepcopy(owner))
    for replica in states:
        if replica.sequence < owner.versions_from:
            continue  # too far behind for the versions to tell: it gets everything
        changed = owner.maps_changed_after(replica.sequence)
        replica.replace_maps({n: owner.maps[n].copy() for n in changed}, owner.versions)
        assert replica.view().maps == owner.view().maps
        assert replica.versions == owner.versions


def test_emptying_a_map_raises_versions_from_and_a_no_op_does_not() -> None:
    data = PartitionData()
    data.apply_run(
        write_run(partition_id=0, lineage="", first_sequence=1, kind=PUT, map_name="m", keys=(b"a",), values=(b"1",)),
        0,
        0,
    )
    data.apply_run(
        write_run(partition_id=0, lineage="", first_sequence=2, kind=REMOVE, map_name="other", keys=(b"a",), values=()),
        0,
        0,
    )  # nothing held: no change
    assert (data.versions, data.versions_from) == ({"m": 1}, 0)
    data.apply_run(
        write_run(partition_id=0, lineage="", first_sequence=3, kind=REMOVE, map_name="m", keys=(b"a",), values=()),
        0,
        0,
    )
    assert (data.view().maps, data.versions, data.versions_from) == ({}, {}, 3)


def test_a_run_applies_from_where_the_replica_stands() -> None:
    data = PartitionData(sequence=1)
    run = write_run(
        partition_id=0,
        lineage="",
        first_sequence=1,
        kind=PUT,
        map_name="m",
        keys=(b"a", b"b", b"c"),
        values=(b"1", b"2", b"3"),
    )
    data.apply_run(run, 1, 0)  # write 1 is already applied
    assert data.view().maps == {"m": {b"b": b"2", b"c": b"3"}}
    assert data.sequence == 3
    data.apply_run(
        write_run(
            partition_id=0, lineage="", first_sequence=4, kind=REMOVE, map_name="m", keys=(b"b", b"c", b"zz"), values=()
        ),
        0,
        0,
    )
    assert data.view().maps == {}
    assert data.sequence == 6
