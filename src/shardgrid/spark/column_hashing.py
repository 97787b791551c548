"""Partition ids of an Arrow column of serialized keys, hashed by the storage engine in one call.

A write task hashes every key it sends. ``mmh3.hash`` over a list costs about 150 ns a key here
(a Python bytes object and a call each), and MurmurHash3_x86_32 written over numpy arrays about
40 ns a key for 4-byte keys, one numpy pass per key length and block. The engine's hash
(``shardgrid._engine.partition_ids``, the one members check requests with) reads the column's
buffers as they are: its data, and each key's length from the offsets. The result is
``core.hashing.partition_ids_of_serialized``'s, which the tests check on random keys of every
length.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from shardgrid._engine import partition_ids


def partition_ids_of_column(keys: pa.Array, partition_count: int) -> np.ndarray:
    """The partition id (int64) of each key of ``keys``, a binary or large_binary array without
    nulls, among ``partition_count`` partitions. A key over ``MAX_KEY_BYTES`` raises the engine's
    ``ColumnError`` (a ValueError), naming it."""
    count = len(keys)
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    _, offsets_buffer, data_buffer = keys.buffers()
    offset_type = np.int64 if pa.types.is_large_binary(keys.type) else np.int32
    # A slice's buffers are its parent's: its offsets start at its own offset.
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type, count=keys.offset + count + 1)[keys.offset :]
    start, end = int(offsets[0]), int(offsets[-1])
    data = data_buffer.slice(start, end - start).to_pybytes() if data_buffer is not None and end > start else b""
    lengths = np.diff(offsets).astype("<u4").tobytes()
    return np.frombuffer(partition_ids(data, lengths, partition_count), dtype="<u4").astype(np.int64)
