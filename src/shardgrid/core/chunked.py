"""An immutable sequence stored in fixed-size chunks, so that a copy with a few items replaced
shares every untouched chunk.

A member derives a new partition table for every committed migration; with 20,000 partitions a
plain tuple would be copied whole each time (two 20,000-item copies per commit per member), which
dominated the simulator's run time. Replacing k items here copies k chunks and the short tuple of
chunks, and the result still behaves as an immutable value: equal to a tuple with the same items.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")
CHUNK_ITEMS = 256


class ChunkedTuple(Sequence[T], Generic[T]):
    __slots__ = ("_chunks", "_length")

    def __init__(self, items: Iterable[T] = ()) -> None:
        data = tuple(items)
        self._chunks: tuple[tuple[T, ...], ...] = tuple(
            data[start : start + CHUNK_ITEMS] for start in range(0, len(data), CHUNK_ITEMS)
        )
        self._length = len(data)

    @classmethod
    def of(cls, items: Iterable[T]) -> ChunkedTuple[T]:
        """``items`` as a ChunkedTuple, without a copy when it already is one."""
        return items if isinstance(items, ChunkedTuple) else cls(items)

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...

    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        if isinstance(index, slice):
            return self.as_tuple()[index]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("ChunkedTuple index out of range")
        return self._chunks[index // CHUNK_ITEMS][index % CHUNK_ITEMS]

    def __iter__(self) -> Iterator[T]:
        return itertools.chain.from_iterable(self._chunks)

    def as_tuple(self) -> tuple[T, ...]:
        return tuple(itertools.chain.from_iterable(self._chunks))

    def replaced(self, updates: Mapping[int, T]) -> ChunkedTuple[T]:
        """A copy with the items at the given indexes replaced; untouched chunks are shared."""
        chunks = list(self._chunks)
        touched: dict[int, list[T]] = {}
        for index, value in updates.items():
            if not 0 <= index < self._length:
                raise IndexError(f"no item {index} in a ChunkedTuple of {self._length}")
            number = index // CHUNK_ITEMS
            if number not in touched:
                touched[number] = list(chunks[number])
            touched[number][index % CHUNK_ITEMS] = value
        for number, items in touched.items():
            chunks[number] = tuple(items)
        result: ChunkedTuple[T] = ChunkedTuple.__new__(ChunkedTuple)
        result._chunks = tuple(chunks)
        result._length = self._length
        return result

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ChunkedTuple):
            return self._length == other._length and self._chunks == other._chunks
        if isinstance(other, tuple):
            return self.as_tuple() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.as_tuple())

    def __repr__(self) -> str:
        return f"ChunkedTuple(<{self._length} items>)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (ChunkedTuple, (self.as_tuple(),))
