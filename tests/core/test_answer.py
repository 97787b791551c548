"""A reply's values put together a partition's piece at a time: whatever mix of packed pieces,
separate answers and clearings a request's partitions give, the columns hold each key's last
answer at its own place, an empty item marked absent where there is none."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid._engine import pack, split
from shardgrid.core.member.answer import Answer


def _packed(items: list[bytes | None]) -> tuple[bytes, bytes, bytes]:
    data, lengths = pack([item or b"" for item in items])
    return data, lengths, bytes(item is not None for item in items)


value = st.none() | st.binary(max_size=5)


@settings(max_examples=400, deadline=None)
@given(
    count=st.integers(0, 30),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["range", "cut", "list", "items", "clear"]),
            st.integers(0, 30),
            st.integers(0, 30),
            st.lists(value, max_size=30),
        ),
        max_size=8,
    ),
)
def test_the_columns_hold_each_keys_last_answer_in_request_order(count: int, steps: list) -> None:
    answer = Answer(count)
    expected: list[bytes | None] = [None] * count
    for kind, a, b, items in steps:
        start, stop = sorted((min(a, count), min(b, count)))
        indexes = range(start, stop)
        given_items = (items + [None] * count)[: len(indexes)]
        if kind == "range":
            answer.put_packed(indexes, *_packed(given_items))
        elif kind == "cut":  # a budget cut the answer short: only the first keys answered
            cut = given_items[: len(given_items) // 2]
            answer.put_packed(indexes, *_packed(cut))
            given_items = cut
        elif kind == "list":
            answer.put_packed(list(reversed(indexes)), *_packed(given_items))
            indexes = range(stop - 1, start - 1, -1)
        elif kind == "items":
            answer.put_items(list(indexes), given_items)
        else:
            answer.clear(indexes)
            given_items = [None] * len(indexes)
        for index, item in zip(indexes, given_items, strict=False):
            expected[index] = item
    values, present = answer.columns()
    assert len(present) == count
    assert split(values.data, values.lengths, present) == expected
    assert answer.items_at(range(count)) == tuple(expected)
    assert answer.bytes_at(range(count)) == sum(len(item) for item in expected if item is not None)
