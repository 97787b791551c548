"""A put's columns already packed: what a caller holding its rows as columns sends without making a
Python object per row for it.

A MapRequest carries its keys and values as packed columns (``messages.Column``: the items end to
end, and a 32-bit length each). A caller that holds its rows in Arrow buffers (``shardgrid.spark``)
cuts those columns straight from them and hands them to ``AsyncClient.put_encoded``, which puts
them in the frame as they are. Made per row instead (a bytes object per key and value, a list of
each, length checks over them, the codec's pass over the lists), the same batch cost a Spark write
task about a third more CPU.

The client still checks every column once against the members' limits (``fits``, in the storage
engine's codec, without a Python object per row): columns a member would refuse never leave, since
a member refuses the whole request, and a batch it could never take would only cost retries.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardgrid._engine import ColumnError, check_column
from shardgrid.core.limits import MAX_KEY_BYTES, MAX_VALUE_BYTES
from shardgrid.core.messages import Column


@dataclass(frozen=True, slots=True, kw_only=True)
class EncodedColumns:
    """Keys and values (serialized), as packed columns of one item per row; ``partitions``: the
    distinct partition ids of the rows, in order (empty when the caller knew no partition count),
    which tell the client the owner (a wrong one costs a redirect, not a row)."""

    keys: Column
    values: Column
    partitions: tuple[int, ...]
    # Each entry's TTL in ms (0: until removed), one unsigned 64-bit little-endian number per
    # entry; empty: the put's ``ttl_ms`` says.
    ttls_ms: bytes = b""

    @property
    def count(self) -> int:
        return len(self.keys)

    def problem(self) -> str:
        """What makes the columns unfit to send ('' when nothing): as many values as keys, each
        column whole, and a TTL per row when there are TTLs. Not a member's limits: ``fits``."""
        try:
            keys = check_column(self.keys.data, self.keys.lengths, max_items=1 << 53, max_item_bytes=MAX_VALUE_BYTES)
            values = check_column(
                self.values.data, self.values.lengths, max_items=1 << 53, max_item_bytes=MAX_VALUE_BYTES
            )
        except ColumnError as error:
            return f"the columns do not hold together: {error}"
        if keys != values:
            return f"the columns hold {keys} keys and {values} values"
        if self.ttls_ms and len(self.ttls_ms) != 8 * self.count:
            return f"the TTL column holds {len(self.ttls_ms)} bytes, not 8 for each of {self.count} entries"
        return ""

    def fits(self) -> bool:
        """Whether a member takes the columns as they are (every key and value within the members'
        limits). Raises ValueError when they do not hold together (``problem``)."""
        problem = self.problem()
        if problem:
            raise ValueError(problem)
        try:
            check_column(self.keys.data, self.keys.lengths, max_items=1 << 53, max_item_bytes=MAX_KEY_BYTES)
        except ColumnError:
            return False  # a key too long: the lists' checks say which limit (as for any put)
        return True

    def lists(self) -> tuple[list[bytes], list[bytes]]:
        """The keys and values one by one (for the rows a single request cannot carry)."""
        return self.keys.items(), self.values.items()
