"""A map request's keys a partition at a time, each partition's as packed columns of its own.

The owner serves a request partition by partition (each has its own sequence, backups and
migrations), and each partition's keys go to the engine and to the backups as one run. The
engine checks the request's columns whole and cuts them by partition in one call
(``split_by_partition``), so nothing here is done a key at a time. Clients send each partition's
keys side by side; a request in another order is served all the same, its keys brought together
in a stable order, and each part then names the request positions its keys answer.
"""

from __future__ import annotations

import sys
from array import array
from typing import NamedTuple

from shardgrid._engine import split_by_partition
from shardgrid.core.errors import invariant
from shardgrid.core.member.answer import Indexes
from shardgrid.core.messages import EMPTY_COLUMN, Column, MapRequest
from shardgrid.core.store import ITEM_OVERHEAD_BYTES

invariant(array("I").itemsize == 4, "a packed position is an unsigned 32-bit number")


class Part(NamedTuple):
    """One partition's keys of a request, in request order, with their values and TTLs. A named
    tuple: immutable, and made for each partition of each request at a third of a frozen
    dataclass's cost (1.07 against 0.33 us: 70 us of a get_all of 1,000 keys over 94 partitions)."""

    partition_id: int
    indexes: Indexes  # the request positions they answer
    keys: Column
    values: Column  # one per key for a write of values, else empty
    ttls_ms: bytes  # one 64-bit number per key when the request gave TTLs per key, else empty
    size_bytes: int  # keys and values, counted as ``store.counted_bytes`` counts them


def request_parts(message: MapRequest, partition_count: int) -> list[Part]:
    """The request's keys cut by partition, in the order the partitions first come. Raises the
    engine's ``ColumnError`` (nothing is cut) when a column breaks its rules."""
    keys, values = message.keys, message.values
    slices, order = split_by_partition(
        partition_count, keys.data, keys.lengths, values.data, values.lengths, message.ttls_ms
    )
    positions: list[int] | None = None
    if order is not None:
        unpacked = array("I")
        unpacked.frombytes(order)
        if sys.byteorder == "big":
            unpacked.byteswap()
        positions = unpacked.tolist()
    parts = []
    for pid, start, end, key_data, key_lengths, value_data, value_lengths, ttls_ms in slices:
        count = end - start
        parts.append(
            Part(
                pid,
                range(start, end) if positions is None else positions[start:end],
                Column(key_data, key_lengths),
                Column(value_data, value_lengths) if value_lengths else EMPTY_COLUMN,
                ttls_ms,
                len(key_data) + len(value_data) + ITEM_OVERHEAD_BYTES * (count + (count if value_lengths else 0)),
            )
        )
    return parts
