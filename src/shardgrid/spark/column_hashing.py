"""Partition ids of an Arrow column of serialized keys, hashed in numpy rather than key by key.

A write task hashes every key it sends. ``mmh3.hash`` over a list costs about 150 ns a key here
(a Python bytes object and a call each); MurmurHash3_x86_32 written over numpy arrays costs about
40 ns a key for 4-byte keys. Keys are hashed a group of equal length at a time (a long key column is
one or two groups, a string column a few dozen), so a column of keys of many lengths falls back to
``mmh3``. The result is the same as ``core.hashing.partition_ids_of_serialized``'s, which the
tests check on random keys of every length.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from shardgrid.core.hashing import MURMUR_SEED, partition_ids_of_serialized

# Past this many distinct key lengths a column is hashed key by key (each length is a numpy pass).
MAX_LENGTH_GROUPS = 64
# Past this key length a group is hashed key by key too (each 4-byte block is a numpy pass).
MAX_VECTOR_KEY_BYTES = 256

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)


def _rotl(value: np.ndarray, bits: int) -> np.ndarray:
    return (value << np.uint32(bits)) | (value >> np.uint32(32 - bits))


def _mix_block(block: np.ndarray) -> np.ndarray:
    block = block * _C1
    return _rotl(block, 15) * _C2


def _murmur_of_rows(rows: np.ndarray, seed: int) -> np.ndarray:
    """MurmurHash3_x86_32 of each row of ``rows`` (a 2-D uint8 array: one key per row, all of
    ``rows.shape[1]`` bytes), as signed 32-bit hashes."""
    count, length = rows.shape
    hashes = np.full(count, seed, dtype=np.uint32)
    blocks = length // 4
    if blocks:
        # Little-endian 32-bit blocks, as the reference reads them.
        words = np.ascontiguousarray(rows[:, : blocks * 4]).view("<u4").astype(np.uint32)
        for index in range(blocks):
            hashes ^= _mix_block(words[:, index])
            hashes = _rotl(hashes, 13) * np.uint32(5) + np.uint32(0xE6546B64)
    tail = length & 3
    if tail:
        last = np.zeros(count, dtype=np.uint32)
        for offset in range(tail - 1, -1, -1):
            last = (last << np.uint32(8)) | rows[:, blocks * 4 + offset].astype(np.uint32)
        hashes ^= _mix_block(last)
    hashes ^= np.uint32(length)
    hashes ^= hashes >> np.uint32(16)
    hashes *= np.uint32(0x85EBCA6B)
    hashes ^= hashes >> np.uint32(13)
    hashes *= np.uint32(0xC2B2AE35)
    hashes ^= hashes >> np.uint32(16)
    return hashes.view(np.int32)


def _fold(hashes: np.ndarray, partition_count: int) -> np.ndarray:
    """``core.hashing.hash_to_index`` on each hash: -2**31 folds to 0, the rest |h| mod count."""
    wide = hashes.astype(np.int64)
    return np.abs(wide) % partition_count * (wide != np.iinfo(np.int32).min)


def partition_ids_of_column(keys: pa.Array, partition_count: int) -> np.ndarray:
    """The partition id (int64) of each key of ``keys``, a binary or large_binary array without
    nulls, among ``partition_count`` partitions."""
    count = len(keys)
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    _, offsets_buffer, data_buffer = keys.buffers()
    offset_type = np.int64 if pa.types.is_large_binary(keys.type) else np.int32
    # A slice's buffers are its parent's: its offsets start at its own offset.
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type, count=keys.offset + count + 1)[keys.offset :]
    offsets = offsets.astype(np.int64)
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    shortest, longest = int(lengths.min()), int(lengths.max())
    if shortest == longest:  # keys of one length, end to end: the data is already one row per key
        start = int(offsets[0])
        rows = data[start : start + count * longest].reshape(count, longest)
        return _fold(_murmur_of_rows(rows, MURMUR_SEED), partition_count)
    distinct = np.unique(lengths)
    if len(distinct) > MAX_LENGTH_GROUPS or longest > MAX_VECTOR_KEY_BYTES:
        return np.array(partition_ids_of_serialized(keys.to_pylist(), partition_count), dtype=np.int64)
    hashes = np.empty(count, dtype=np.int32)
    for length in distinct.tolist():
        where = np.flatnonzero(lengths == length)
        rows = data[offsets[:-1][where][:, None] + np.arange(length)]
        hashes[where] = _murmur_of_rows(rows, MURMUR_SEED)
    return _fold(hashes, partition_count)
