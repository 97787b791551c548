"""A read task's entries between the scans that bring them and the Arrow batches it yields.

A packed scan (``AsyncClient.scan_partition_packed``) brings a partition's keys and values as two
byte strings and their lengths; here they become large_binary Arrow arrays over those very bytes
(offsets from the lengths, no copy and no object per entry), held until a batch's worth is there.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from shardgrid.client.aio import PackedEntries
from shardgrid.spark.column_encoding import BYTES


def binary_column(data: bytes, lengths: bytes) -> pa.Array:
    """A large_binary array of the items packed in ``data``, with ``lengths`` as the client
    checked them (unsigned 32-bit little-endian numbers that add up to ``len(data)``)."""
    sizes = np.frombuffer(lengths, dtype="<u4")
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(BYTES, len(sizes), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


class HeldEntries:
    """Keys and values held as Arrow arrays, in the order they came; ``take`` hands out the first."""

    def __init__(self) -> None:
        self._keys: list[pa.Array] = []
        self._values: list[pa.Array] = []
        self.rows = 0

    def add(self, entries: PackedEntries) -> None:
        keys = binary_column(entries.keys, entries.key_lengths)
        if len(keys):
            self._keys.append(keys)
            self._values.append(binary_column(entries.values, entries.value_lengths))
            self.rows += len(keys)

    def take(self, count: int) -> tuple[pa.Array, pa.Array]:
        """The first ``count`` entries held (at most ``rows``), as one keys and one values array."""
        keys = pa.concat_arrays(self._keys) if len(self._keys) != 1 else self._keys[0]
        values = pa.concat_arrays(self._values) if len(self._values) != 1 else self._values[0]
        rest = len(keys) - count
        self._keys = [keys.slice(count)] if rest else []
        self._values = [values.slice(count)] if rest else []
        self.rows = rest
        return keys.slice(0, count), values.slice(0, count)
