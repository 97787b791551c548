"""The values a map request answers, gathered as packed pieces.

A get's values come from the engine as packed pieces (values, lengths, a presence byte per key):
one for the whole request when this member serves every partition of its keys; otherwise one for
the partitions read here when their keys are side by side and all answered, else one per
partition. The reply carries one packed column in the request's order; this puts the pieces
together there, without a Python object per value: the pieces of keys that came side by side are
joined end to end, and a gap (keys not answered with a value: refused, or past the answer budget)
is filled with empty items marked absent. Only answers given a key at a time (conditional writes,
a retry's remembered answer, keys of a partition that did not come side by side) are held as
separate values.
"""

from __future__ import annotations

from collections.abc import Sequence

from shardgrid._engine import pack, split
from shardgrid.core.messages import Column

# A request's keys of one partition, by position: a range when they came side by side (their
# columns are then one slice of the request's), else a list.
Indexes = range | list[int]
_EMPTY_LENGTH = bytes(4)  # the length of an empty item


class Answer:
    """One value or none per key of a request, in request order. Each key is answered once (a
    later answer for a key replaces the earlier)."""

    __slots__ = ("_end", "_items", "_pieces", "count")

    def __init__(self, count: int) -> None:
        self.count = count
        self._pieces: list[tuple[int, int, bytes, bytes, bytes]] = []  # (start, stop, values, lengths, present)
        self._items: dict[int, bytes | None] = {}  # answers given a key at a time, by position
        self._end = 0  # where the pieces end (the furthest)

    def put_packed(self, indexes: Indexes, values: bytes, lengths: bytes, present: bytes) -> None:
        """The engine's answer for the keys at ``indexes`` (as many presence bytes as keys: the
        first ones, when a budget cut the answer short)."""
        answered = len(present)
        if not answered:
            return
        if isinstance(indexes, range) and not self._items:
            start, stop = indexes.start, indexes.start + answered
            pieces = self._pieces
            # Pieces come in request order (a partition's keys after the one before): any other
            # order is checked for an overlap, which only separate answers can settle.
            if start >= self._end or all(stop <= p[0] or start >= p[1] for p in pieces):
                pieces.append((start, stop, values, lengths, present))
                self._end = max(self._end, stop)
                return
        self.put_items(list(indexes)[:answered], split(values, lengths, present))

    def put_items(self, indexes: Sequence[int], items: Sequence[bytes | None]) -> None:
        """Answers given a key at a time."""
        if self._pieces:
            self._unpack_pieces()
        self._items.update(zip(indexes, items, strict=True))

    def clear(self, indexes: Indexes) -> None:
        """No value for the keys at ``indexes`` after all (their write was refused whole)."""
        self.put_items(list(indexes), [None] * len(indexes))

    def items_at(self, indexes: Indexes) -> tuple[bytes | None, ...]:
        """The answers of the keys at ``indexes``, one by one (a named write's, remembered so a
        retry gets the same)."""
        if self._pieces:
            self._unpack_pieces()
        return tuple(self._items.get(index) for index in indexes)

    def bytes_at(self, indexes: Indexes) -> int:
        """The answered values' bytes at ``indexes``."""
        return sum(len(value) for value in self.items_at(indexes) if value is not None)

    def columns(self) -> tuple[Column, bytes]:
        """The whole answer in request order: the values as one packed column (an empty item where
        there is none) and a presence byte per key."""
        if self._items:
            if self._pieces:
                self._unpack_pieces()
            items = [self._items.get(index) for index in range(self.count)]
            values, lengths = pack([b"" if item is None else item for item in items])
            return Column(values, lengths), bytes(item is not None for item in items)
        pieces = sorted(self._pieces)
        values: list[bytes] = []
        lengths: list[bytes] = []
        present: list[bytes] = []
        at = 0
        for start, stop, piece_values, piece_lengths, piece_present in pieces:
            if start > at:
                lengths.append(_EMPTY_LENGTH * (start - at))
                present.append(bytes(start - at))
            values.append(piece_values)
            lengths.append(piece_lengths)
            present.append(piece_present)
            at = stop
        if at < self.count:
            lengths.append(_EMPTY_LENGTH * (self.count - at))
            present.append(bytes(self.count - at))
        return Column(b"".join(values), b"".join(lengths)), b"".join(present)

    def _unpack_pieces(self) -> None:
        for start, stop, values, lengths, present in self._pieces:
            self._items.update(zip(range(start, stop), split(values, lengths, present), strict=True))
        self._pieces.clear()
        self._end = 0
