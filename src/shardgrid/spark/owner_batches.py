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

A batch leaves already packed (``client.encoded_columns``): its keys and values as the packed
columns a put_all request carries, cut from the sorted Arrow buffers (the bytes a slice of the data
buffer, the lengths the differences of its offsets). Handed to the client as lists of bytes
instead, a batch cost a bytes object per key and value, the client's length checks over them and
the codec's pass over the lists: outside Spark (2 tasks of 500,000 rows, 3 members) a write task's
CPU fell from 0.56-0.64 s to 0.41-0.52 s with batches encoded as msgpack arrays, the form the
wire carried before its columns were packed.

The grouping follows the client's table as it is when the rows are let out; a table that changed
since costs the client a re-route (the keys an owner no longer holds come back WRONG_OWNER and go
on key by key), never a row. The sort is stable, so two rows of one key keep their order.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise, zip_longest

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardgrid.client.encoded_columns import EncodedColumns
from shardgrid.client.routing import TableView
from shardgrid.core.errors import invariant
from shardgrid.core.messages import Column
from shardgrid.spark.column_encoding import BYTES, as_binary, binary_lengths, spans
from shardgrid.spark.column_hashing import partition_ids_of_column

# Keys and values a task takes in (large_binary arrays, or lists of bytes), and each row's TTL in
# ms (unsigned 64-bit; None: the write's own TTL for every row).
Rows = tuple[pa.Array | Sequence[bytes], pa.Array | Sequence[bytes], np.ndarray | None]

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
        self._ttls: list[np.ndarray] = []  # with the rows, when they come with their TTLs
        self._with_ttls = False
        self.rows = 0  # held
        self.bytes = 0  # of the keys and values held
        # What it took in, all told: the task's write report.
        self.rows_taken = self.key_bytes_taken = self.value_bytes_taken = 0

    def add(
        self,
        keys: pa.Array | Sequence[bytes],
        values: pa.Array | Sequence[bytes],
        ttls_ms: np.ndarray | None = None,
    ) -> list[EncodedColumns]:
        """Takes rows in (large_binary arrays, or lists of bytes, and each row's TTL in ms, in all
        rows of a task or none); returns the batches let out (none until ``held_rows`` are held)."""
        keys, values = as_binary(keys), as_binary(values)
        invariant(len(keys) == len(values), "a key for every value")
        invariant(keys.null_count == 0 and values.null_count == 0, "no null key or value")
        if self.rows_taken == 0:
            self._with_ttls = ttls_ms is not None
        invariant((ttls_ms is not None) == self._with_ttls, "rows come with their TTLs in every add of a task, or none")
        if ttls_ms is not None:
            invariant(len(ttls_ms) == len(keys), "a TTL for every row")
            self._ttls.append(ttls_ms.astype("<u8", copy=False))
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

    def rest(self) -> list[EncodedColumns]:
        """Every row still held, as batches (the last of each owner short), at the end of a task."""
        return self._let_out(whole=True)

    def _let_out(self, whole: bool) -> list[EncodedColumns]:
        if not self.rows:
            return []
        held_ttls = np.concatenate(self._ttls) if self._with_ttls else None
        keys, values, ttls, pids, ranges = self._by_owner(_concat(self._keys), _concat(self._values), held_ttls)
        # Bytes of rows [0, i) of the sorted columns: a range's bytes by one subtraction.
        before = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum(binary_lengths(keys) + binary_lengths(values), out=before[1:])
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
        # The tails copied out (not slices of the sorted columns, which would keep them alive: a
        # single tail was, found by an outside tester, and its owner's whole let-out stayed held).
        self._keys = [pa.concat_arrays([keys.slice(cut, end - cut) for cut, end in tails])] if tails else []
        self._values = [pa.concat_arrays([values.slice(cut, end - cut) for cut, end in tails])] if tails else []
        self._ttls = [np.concatenate([ttls[cut:end] for cut, end in tails])] if tails and ttls is not None else []
        self.rows, self.bytes = tail_rows, tail_bytes
        return self._encoded(keys, values, ttls, pids, ranges, cuts)

    def _encoded(
        self,
        keys: pa.Array,
        values: pa.Array,
        ttls: np.ndarray | None,
        pids: np.ndarray | None,
        ranges: list[tuple[int, int]],
        cuts: list[int],
    ) -> list[EncodedColumns]:
        """Each owner's rows up to its cut as batches of ``batch_rows``, every column packed
        straight from the sorted Arrow buffers (no Python object per row)."""
        key_offsets, key_data = spans(keys)
        value_offsets, value_data = spans(values)
        key_lengths = np.diff(key_offsets).astype("<u4")
        value_lengths = np.diff(value_offsets).astype("<u4")
        size = self.batch_rows
        # Owners taken in turn (one batch of each, then the next of each): the batches in flight
        # spread over the members. Each owner's batches after one another, a task's window went
        # to one member at a time, which worked alone while the others waited, and two tasks'
        # windows on one member passed its bound on writes awaiting backups (OVERLOADED, retried).
        owner_spans = [
            [(first, min(first + size, cut)) for first in range(start, cut, size)]
            for (start, _), cut in zip(ranges, cuts, strict=True)
        ]
        batches: list[EncodedColumns] = []
        for turn in zip_longest(*owner_spans):
            for first, end in (span for span in turn if span is not None):
                partitions: tuple[int, ...] = ()
                if pids is not None:
                    # An owner's rows are in partition order: its distinct ids are where they change.
                    batch_pids = pids[first:end]
                    partitions = tuple(batch_pids[np.flatnonzero(np.diff(batch_pids, prepend=-1))].tolist())
                batches.append(
                    EncodedColumns(
                        keys=Column(
                            _bytes_between(key_data, key_offsets[first], key_offsets[end]),
                            key_lengths[first:end].tobytes(),
                        ),
                        values=Column(
                            _bytes_between(value_data, value_offsets[first], value_offsets[end]),
                            value_lengths[first:end].tobytes(),
                        ),
                        partitions=partitions,
                        ttls_ms=ttls[first:end].tobytes() if ttls is not None else b"",
                    )
                )
        return batches

    def _by_owner(
        self, keys: pa.Array, values: pa.Array, ttls: np.ndarray | None
    ) -> tuple[pa.Array, pa.Array, np.ndarray | None, np.ndarray | None, list[tuple[int, int]]]:
        """The rows (and their TTLs) sorted by owner, then partition, their partition ids, and
        each owner's rows as a (start, end) range. Rows of partitions without a known owner form
        one range of their own (the client finds their owner)."""
        table = self.table
        count = table.partition_count
        if not count:
            return keys, values, ttls, None, [(0, len(keys))]
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
        if len(groups) * count <= 2**16:
            # Ranks that fit 16 bits sort by radix (numpy's stable sort of small ints): 0.5 ms a
            # 50,000 rows where the int64 merge sort took 3.
            ranks = ranks.astype(np.uint16)
        order = np.argsort(ranks, kind="stable")
        ranks = ranks[order]
        bounds = np.searchsorted(ranks, np.arange(len(groups) + 1, dtype=np.int64) * count).tolist()
        ranges = [(start, end) for start, end in pairwise(bounds) if start < end]
        return keys.take(order), values.take(order), ttls[order] if ttls is not None else None, pids[order], ranges


def _bytes_between(buffer: pa.Buffer | None, start: int, end: int) -> bytes:
    """``buffer[start:end]`` as bytes (the one copy a batch's column makes)."""
    if buffer is None or end <= start:
        return b""
    return buffer.slice(int(start), int(end - start)).to_pybytes()


def _bytes_of(column: pa.Array) -> int:
    return int(pc.sum(pc.binary_length(column)).as_py() or 0)


def _concat(columns: list[pa.Array]) -> pa.Array:
    if not columns:
        return pa.array([], BYTES)
    return columns[0] if len(columns) == 1 else pa.concat_arrays(columns)
