"""A put's columns already encoded: what a caller holding its rows as columns sends without making
a Python object per row.

The codec writes a MapRequest's keys, values and partition ids as msgpack arrays (of bin, bin and
int). A caller that builds those arrays itself, from Arrow buffers (``shardgrid.spark``), hands
them to ``AsyncClient.put_encoded``, which puts them in the frame as they are. Made per row
instead (a bytes object per key and value, a list of each, length checks over them, msgspec's
encoding of the lists), the same batch cost a Spark write task about half its CPU.

The client looks at the columns only when the one request fails for some keys (a migration, a
crash): then it decodes them and goes on as for any put, with every retry.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from shardgrid.core.errors import invariant

_COLUMNS = msgspec.msgpack.Decoder(list[bytes])
_PARTITION_IDS = msgspec.msgpack.Decoder(list[int])


def array_header(count: int) -> bytes:
    """msgpack's header of an array of ``count`` items, as msgspec writes it."""
    invariant(0 <= count < 2**32, "a msgpack array holds fewer than 2**32 items")
    if count < 16:
        return bytes([0x90 | count])
    if count < 2**16:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")


def array_length(encoded: bytes) -> int | None:
    """The item count in the header of the msgpack array ``encoded``; None when it does not start
    with one."""
    if not encoded:
        return None
    head = encoded[0]
    if head & 0xF0 == 0x90:
        return head & 0x0F
    if head == 0xDC and len(encoded) >= 3:
        return int.from_bytes(encoded[1:3], "big")
    if head == 0xDD and len(encoded) >= 5:
        return int.from_bytes(encoded[1:5], "big")
    return None


@dataclass(frozen=True, slots=True)
class EncodedColumns:
    """``count`` keys and values (serialized), each column a msgpack array of bin, and their
    partition ids as a msgpack array of int (None when the caller knew no partition count: the
    client hashes the keys). ``partitions``: the distinct partition ids, which tell the client the
    owner; ``data_bytes``: the keys' and values' bytes, without msgpack's headers; the longest key
    and value, which the client checks against the members' limits."""

    count: int
    keys: bytes
    values: bytes
    partition_ids: bytes | None
    partitions: tuple[int, ...]
    data_bytes: int
    max_key_bytes: int
    max_value_bytes: int

    def problem(self) -> str:
        """What makes the columns unfit to send as they are ('' when nothing): every array must
        say it holds ``count`` items."""
        named = [("keys", self.keys), ("values", self.values)]
        if self.partition_ids is not None:
            named.append(("partition ids", self.partition_ids))
        for name, column in named:
            length = array_length(column)
            if length != self.count:
                return f"the {name} column holds {length} items, not {self.count}"
        return ""

    def decoded(self) -> tuple[list[bytes], list[bytes], list[int] | None]:
        """The columns as lists (keys, values, partition ids or None). Raises ValueError when they
        are not msgpack arrays of the right items."""
        try:
            keys, values = _COLUMNS.decode(self.keys), _COLUMNS.decode(self.values)
            pids = _PARTITION_IDS.decode(self.partition_ids) if self.partition_ids is not None else None
        except msgspec.DecodeError as error:
            raise ValueError(f"encoded columns that do not decode: {error}") from None
        if len(keys) != self.count or len(values) != self.count or (pids is not None and len(pids) != self.count):
            raise ValueError(f"encoded columns of other lengths than {self.count}")
        return keys, values, pids
