"""ChunkedTuple: behaves as an immutable tuple, shares untouched chunks when items are replaced."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardgrid.core.chunked import CHUNK_ITEMS, ChunkedTuple


@given(st.lists(st.integers(), max_size=3 * CHUNK_ITEMS), st.data())
def test_it_reads_like_the_tuple_it_holds(items: list[int], data: st.DataObject) -> None:
    chunked = ChunkedTuple(items)
    assert len(chunked) == len(items)
    assert list(chunked) == items
    assert chunked == tuple(items)
    assert chunked == ChunkedTuple(items)
    assert hash(chunked) == hash(tuple(items))
    if items:
        index = data.draw(st.integers(-len(items), len(items) - 1))
        assert chunked[index] == items[index]
        assert chunked[1:3] == tuple(items[1:3])


@given(st.lists(st.integers(), min_size=1, max_size=3 * CHUNK_ITEMS), st.data())
def test_replacing_items_leaves_the_original_unchanged(items: list[int], data: st.DataObject) -> None:
    chunked = ChunkedTuple(items)
    updates = data.draw(st.dictionaries(st.integers(0, len(items) - 1), st.integers(), max_size=5))
    replaced = chunked.replaced(updates)
    expected = list(items)
    for index, value in updates.items():
        expected[index] = value
    assert list(replaced) == expected
    assert list(chunked) == items


def test_untouched_chunks_are_shared_and_bad_indexes_refused() -> None:
    chunked = ChunkedTuple(range(3 * CHUNK_ITEMS))
    replaced = chunked.replaced({0: -1})
    assert replaced._chunks[1] is chunked._chunks[1]
    assert replaced._chunks[0] is not chunked._chunks[0]
    with pytest.raises(IndexError):
        chunked.replaced({3 * CHUNK_ITEMS: 0})
    with pytest.raises(IndexError):
        chunked[3 * CHUNK_ITEMS]
