"""A put's columns already encoded: what a caller holding its rows as columns sends without making
a Python object per row for it.

The codec writes a MapRequest's keys, values and partition ids as msgpack arrays (of bin, bin and
int). A caller that builds those arrays itself, from Arrow buffers (``shardgrid.spark``), hands
them to ``AsyncClient.put_encoded``, which puts them in the frame as they are. Made per row instead
(a bytes object per key and value, a list of each, length checks over them, msgspec's encoding of
the lists), the same batch cost a Spark write task about a third more CPU.

The client still reads every column once, with the members' own types and limits (``checked``):
columns a member's codec would refuse never leave, since a member closes the connection at a bad
frame, and every other call on that connection would lose its answer (found by an outside tester:
under ``fail_on_indeterminate_operation_state`` an unrelated put failed as indeterminate). That
read costs about 60 ns a row; the columns are sent as they came, not encoded again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from shardgrid.core.errors import invariant
from shardgrid.core.messages import KeyColumn, PartitionId, ValueColumn

# The members' own column types, limits included (messages.KeyColumn and the rest).
_KEYS = msgspec.msgpack.Decoder(KeyColumn)
_VALUES = msgspec.msgpack.Decoder(ValueColumn)
_PARTITION_IDS = msgspec.msgpack.Decoder(tuple[PartitionId, ...])
_ANY = msgspec.msgpack.Decoder(list[Any])


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


@dataclass(frozen=True, slots=True, kw_only=True)
class EncodedColumns:
    """``count`` keys and values (serialized), each column a msgpack array of bin, and their
    partition ids as a msgpack array of int (None when the caller knew no partition count: the
    client hashes the keys). ``partitions``: the distinct partition ids, which tell the client the
    owner (a wrong one costs a redirect, not a row)."""

    count: int
    keys: bytes
    values: bytes
    partition_ids: bytes | None
    partitions: tuple[int, ...]
    # Each entry's TTL in ms (0: until removed), one unsigned 64-bit little-endian number per
    # entry; empty: the put's ``ttl_ms`` says.
    ttls_ms: bytes = b""

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
        if self.ttls_ms and len(self.ttls_ms) != 8 * self.count:
            return f"the TTL column holds {len(self.ttls_ms)} bytes, not 8 for each of {self.count} entries"
        return ""

    def checked(self) -> tuple[list[bytes], list[bytes], list[int] | None, bool]:
        """The columns as lists (keys, values, partition ids or None), and whether a member's codec
        takes them as they are (every key, value and partition id within the members' limits).
        Raises ValueError when they are not msgpack arrays of ``count`` bins (and ints)."""
        problem = self.problem()
        if problem:
            raise ValueError(problem)
        try:
            keys, values = list(_KEYS.decode(self.keys)), list(_VALUES.decode(self.values))
            pids = list(_PARTITION_IDS.decode(self.partition_ids)) if self.partition_ids is not None else None
            fits = True
        except msgspec.ValidationError:
            # Over a limit (a key too long, a partition id out of range): the lists still go to the
            # caller, whose checks say which limit (as for any put).
            keys, values, pids = self._untyped()
            fits = False
        except msgspec.DecodeError as error:
            raise ValueError(f"encoded columns that do not decode: {error}") from None
        # Each array decoded whole, and its header (``problem``) says ``count`` items.
        return keys, values, pids, fits

    def _untyped(self) -> tuple[list[bytes], list[bytes], list[int] | None]:
        try:
            keys, values = _ANY.decode(self.keys), _ANY.decode(self.values)
            pids = _ANY.decode(self.partition_ids) if self.partition_ids is not None else None
        except msgspec.DecodeError as error:
            raise ValueError(f"encoded columns that do not decode: {error}") from None
        if not all(type(item) is bytes for item in (*keys, *values)):
            raise ValueError("encoded columns that do not decode: keys and values are bins")
        if pids is not None and not all(type(pid) is int for pid in pids):
            raise ValueError("encoded columns that do not decode: partition ids are ints")
        return keys, values, pids
