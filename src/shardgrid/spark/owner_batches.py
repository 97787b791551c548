"""A write task's rows grouped by the member that owns them, let out as put_all batches of
``write.batch.size`` rows for one owner, each batch's rows in partition order.

A member's work on a put_all is per entry (decode, store) and per partition the request touches:
the owner applies, sequences and replicates one run per partition, the backup checks and applies
each run, and acknowledgements come per partition. Rows cut into batches as they arrive spread
each batch over most of its owner's partitions (1,000 rows over about 90 of them at 271
partitions and 3 members: about 11 rows a run). So the task holds up to ``held_rows`` rows, and
when they are that many sorts them by owner and partition and lets out each owner's full batches:
a batch then covers a few whole partitions (about 5 at 50,000 rows held) instead of 90.

Measured on this machine (a 1,000,000-row load in local Spark, 3 members, backup count 1): cut in
arrival order, a load ran at 36,000-39,000 rows/s with 1,000-row batches; grouped per owner, at
106,000-112,000, the members spending 8.2-8.4 s of CPU; in partition order as here, 131,000-153,000
with 4 batches in flight per task and 173,000-210,000 with 8, the members spending 2.9-3.8 s.

The grouping follows the client's table as it is when the rows are let out; a table that changed
since costs the client a re-route (it groups every call by owner again), never a row. The sort is
stable, so two rows of one key keep their order.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from operator import itemgetter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardgrid.client.routing import TableView
from shardgrid.core.errors import invariant
from shardgrid.spark.column_encoding import BYTES
from shardgrid.spark.column_hashing import partition_ids_of_column

# Keys, values, and the keys' partitions (None when the table was unknown: the client hashes them).
Batch = tuple[Sequence[bytes], Sequence[bytes], list[int] | None]
# Keys and values a task takes in: large_binary arrays, or lists of bytes.
Rows = tuple[pa.Array | Sequence[bytes], pa.Array | Sequence[bytes]]

# Rows a task holds before it sorts and lets out full batches: about 6 MB of Arrow buffers at
# 100-byte values (twice that while they are sorted). At 271 partitions a batch of 1,000 rows
# then covers about 5 partitions.
HELD_ROWS = 50_000
# And the keys' and values' bytes it holds before it does (large values reach it first).
HELD_BYTES = 32 * 1024 * 1024


class OwnerBatches:
    """Holds rows (as Arrow columns) until ``held_rows`` (at least one batch) or ``held_bytes``;
    then lets out every full batch per owner and keeps the short rest, when that is under half of
    either bound (or lets out everything). Between calls a task so holds fewer than ``held_rows``
    rows and ``held_bytes`` bytes, besides the batches it has let out."""

    def __init__(
        self, table: TableView, batch_rows: int, held_rows: int = HELD_ROWS, held_bytes: int = HELD_BYTES
    ) -> None:
        invariant(batch_rows >= 1, "a batch holds at least one row")
        self.table = table
        self.batch_rows = batch_rows
        self.held_rows = max(held_rows, batch_rows)
        self.held_bytes = held_bytes
        self._keys: list[pa.Array] = []
        self._values: list[pa.Array] = []
        self.rows = 0  # held
        self.bytes = 0  # of the keys and values held
        # What it took in, all told: the task's write report.
        self.rows_taken = self.key_bytes_taken = self.value_bytes_taken = 0

    def add(self, keys: pa.Array | Sequence[bytes], values: pa.Array | Sequence[bytes]) -> list[Batch]:
        """Takes rows in (large_binary arrays, or lists of bytes); returns the batches let out
        (none until ``held_rows`` are held)."""
        keys, values = _as_column(keys), _as_column(values)
        invariant(len(keys) == len(values), "a key for every value")
        invariant(keys.null_count == 0 and values.null_count == 0, "no null key or value")
        key_bytes, value_bytes = _bytes_of(keys), _bytes_of(values)
        self._keys.append(keys)
        self._values.append(values)
        self.rows += len(keys)
        self.rows_taken += len(keys)
        self.key_bytes_taken += key_bytes
        self.value_bytes_taken += value_bytes
        self.bytes += key_bytes + value_bytes
        if self.rows < self.held_rows and self.bytes < self.held_bytes:
            return []
        return self._let_out(whole=False)

    def rest(self) -> list[Batch]:
        """Every row still held, as batches (the last of each owner short), at the end of a task."""
        return self._let_out(whole=True)

    def _let_out(self, whole: bool) -> list[Batch]:
        if not self.rows:
            return []
        keys, values = _concat(self._keys), _concat(self._values)
        order, pids, ranges = self._by_owner(keys)
        # Bytes of rows [0, i) in sorted order: a range's bytes by one subtraction.
        sizes = pc.add(pc.binary_length(keys), pc.binary_length(values)).to_numpy()[order]
        before = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum(sizes, out=before[1:])
        size = self.batch_rows
        # Full batches out; each owner's short tail stays held, unless the task is ending or the
        # tails would fill half of what may be held (large batches over many owners would
        # otherwise keep the task sorting them again on every add).
        cuts = [end if whole else end - (end - start) % size for start, end in ranges]
        tails = [(cut, end) for cut, (_, end) in zip(cuts, ranges, strict=True) if cut < end]
        tail_rows = sum(end - cut for cut, end in tails)
        tail_bytes = sum(int(before[end] - before[cut]) for cut, end in tails)
        if tail_rows * 2 >= self.held_rows or tail_bytes * 2 >= self.held_bytes:
            cuts, tails, tail_rows, tail_bytes = [end for _, end in ranges], [], 0, 0
        # The tails copied out (not slices of the held columns, which would keep them alive).
        kept = np.concatenate([order[cut:end] for cut, end in tails]) if tails else None
        self._keys = [keys.take(kept)] if kept is not None else []
        self._values = [values.take(kept)] if kept is not None else []
        self.rows, self.bytes = tail_rows, tail_bytes
        # The rows let out become Python bytes once, in the held order; each batch picks its rows
        # from those lists by the sorted positions in one C-level call (``itemgetter``), which
        # costs less than Arrow sorting the columns' bytes and then slicing them into lists.
        key_list, value_list = keys.to_pylist(), values.to_pylist()
        batches: list[Batch] = []
        for (start, _), cut in zip(ranges, cuts, strict=True):
            for first in range(start, cut, size):
                picked = order[first : min(first + size, cut)].tolist()
                batches.append(
                    (
                        _pick(key_list, picked),
                        _pick(value_list, picked),
                        pids[first : first + len(picked)].tolist() if pids is not None else None,
                    )
                )
        return batches

    def _by_owner(self, keys: pa.Array) -> tuple[np.ndarray, np.ndarray | None, list[tuple[int, int]]]:
        """The order that sorts the rows by owner, then partition; the sorted rows' partitions;
        and each owner's rows as a (start, end) range of that order. Rows of partitions without
        a known owner form one range of their own (the client finds their owner)."""
        table = self.table
        count = table.partition_count
        if not count:
            return np.arange(len(keys)), None, [(0, len(keys))]
        groups: dict[str | None, int] = {}
        owners = table.owners
        # A rank per partition: its owner's group, then the partition; one stable sort by rank.
        rank_of_partition = np.array(
            [
                groups.setdefault(owners[pid] if pid < len(owners) else None, len(groups)) * count + pid
                for pid in range(count)
            ],
            dtype=np.int64,
        )
        pids = partition_ids_of_column(keys, count)
        ranks = rank_of_partition[pids]
        order = np.argsort(ranks, kind="stable")
        ranks = ranks[order]
        bounds = np.searchsorted(ranks, np.arange(len(groups) + 1, dtype=np.int64) * count).tolist()
        ranges = [(start, end) for start, end in pairwise(bounds) if start < end]
        return order, pids[order], ranges


def _pick(column: list[bytes], positions: list[int]) -> tuple[bytes, ...]:
    if len(positions) == 1:
        return (column[positions[0]],)  # itemgetter of one position gives the item, not a tuple
    return itemgetter(*positions)(column)


def _as_column(column: pa.Array | Sequence[bytes]) -> pa.Array:
    if isinstance(column, pa.Array):
        return column if column.type == BYTES else column.cast(BYTES)
    return pa.array(column, BYTES)


def _bytes_of(column: pa.Array) -> int:
    return int(pc.sum(pc.binary_length(column)).as_py() or 0)


def _concat(columns: list[pa.Array]) -> pa.Array:
    if not columns:
        return pa.array([], BYTES)
    return columns[0] if len(columns) == 1 else pa.concat_arrays(columns)
