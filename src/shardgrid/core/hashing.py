"""Key to partition id, and the partition table stamp, both compatible with Hazelcast.

A key is serialized, the serialized bytes are hashed with MurmurHash3_x86_32 (seed 0x01000193),
and the hash is folded into ``0..partition_count-1`` the way Hazelcast folds it (seed 001). Using
Hazelcast's exact serialization for ``str`` keys means a key lands in the same partition id in
shardgrid as in a Hazelcast cluster with the same partition count, so users can reason about both
with one mental model and compare placements.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence

import mmh3

from shardgrid._engine import pack, partition_ids
from shardgrid.core.errors import require
from shardgrid.core.limits import DEFAULT_PARTITION_COUNT, MAX_PARTITION_COUNT

MURMUR_SEED = 0x01000193
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

Key = str | bytes | bytearray | memoryview | int


def serialize_key(key: Key) -> bytes:
    """The bytes shardgrid hashes for ``key``; the wire and the stores carry keys in this form.

    - ``str``: Hazelcast's String serialization, a 4-byte big-endian length of the UTF-8 bytes
      followed by those bytes.
    - ``bytes`` (and ``bytearray``/``memoryview``): taken as an already serialized key, as is.
    - ``int``: as Hazelcast's Python client does by default, a value that fits in 32 bits is an
      Integer (4 bytes big-endian two's complement); a larger one is a Java Long (8 bytes), which
      the client refuses by default and a Java member uses for ``long`` keys. The width follows
      from the value alone, so one key always hashes one way. Beyond 64 bits is refused.

    ``bool`` is refused: it is an ``int`` in Python but almost never meant as a numeric key.
    """
    if isinstance(key, str):
        encoded = key.encode("utf-8")
        return struct.pack(">i", len(encoded)) + encoded
    if isinstance(key, bytes):
        return key
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    if isinstance(key, bool):
        raise TypeError("bool keys are not supported; use an int or a str")
    if isinstance(key, int):
        if INT32_MIN <= key <= INT32_MAX:
            return struct.pack(">i", key)
        require(INT64_MIN <= key <= INT64_MAX, f"int keys must fit in a signed 64-bit integer, got {key}")
        return struct.pack(">q", key)
    raise TypeError(f"unsupported key type {type(key).__name__}; use str, bytes or int")


def hash_to_index(hash32: int, partition_count: int) -> int:
    """Hazelcast's fold of a signed 32-bit hash into a partition id (-2**31 maps to 0)."""
    if hash32 == INT32_MIN:
        return 0
    return abs(hash32) % partition_count


def partition_id_of_serialized(serialized_key: bytes, partition_count: int = DEFAULT_PARTITION_COUNT) -> int:
    """The partition id of an already serialized key; the hot path for the client and stores."""
    return hash_to_index(mmh3.hash(serialized_key, MURMUR_SEED, signed=True), partition_count)


def partition_ids_of_serialized(serialized_keys: Sequence[bytes], partition_count: int) -> list[int]:
    """The partition ids of many serialized keys: the columnar form for a batch (the storage
    engine's hash and fold, one call for the batch; ``tests/engine/test_partitions.py`` checks it
    against ``partition_id_of_serialized`` key by key)."""
    if not serialized_keys:
        return []
    keys = serialized_keys if isinstance(serialized_keys, list | tuple) else list(serialized_keys)
    ids = array("I")
    ids.frombytes(partition_ids(*pack(keys), partition_count))
    if sys.byteorder == "big":
        ids.byteswap()
    return ids.tolist()


def partition_id(key: Key, partition_count: int = DEFAULT_PARTITION_COUNT) -> int:
    """The partition id of ``key`` among ``partition_count`` partitions (see ``serialize_key``)."""
    require(
        0 < partition_count <= MAX_PARTITION_COUNT,
        f"partition_count must be 1..{MAX_PARTITION_COUNT}, got {partition_count}",
    )
    return partition_id_of_serialized(serialize_key(key), partition_count)


def table_stamp(versions: Sequence[int]) -> int:
    """A 64-bit stamp of a partition table's per-partition versions (seed 003, section 1.3).

    The versions are written as consecutive big-endian 32-bit ints, partition 0 first (as
    Hazelcast lays them out), and hashed with the first 64-bit half of the standard
    MurmurHash3_x64_128, seed 0x01000193. Hazelcast's own MurmurHash3_x64_64 is an early draft
    of the algorithm with other constants, so the values differ from Hazelcast's; a stamp never
    leaves a shardgrid cluster, and the standard hash runs in C. The stamp only tells whether two
    tables are equal; it says nothing of their order.
    """
    packed = struct.pack(f">{len(versions)}i", *versions)
    return mmh3.hash64(packed, MURMUR_SEED, x64arch=True, signed=True)[0]
