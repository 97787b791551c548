"""What ``get_entry_view`` returns: an entry's value with the metadata its owner keeps (Hazelcast's
``EntryView``). Times are on the owner's record clock: milliseconds since the Unix epoch, as the
owner's wall clock read when it started, advanced by its monotonic clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The metadata before the value in an ENTRY_VIEW answer: six unsigned 64-bit little-endian numbers.
VIEW_FIELDS = ("created_ms", "updated_ms", "accessed_ms", "expire_at_ms", "hits", "version")
VIEW_HEADER_BYTES = 8 * len(VIEW_FIELDS)


@dataclass(frozen=True, slots=True, kw_only=True)
class EntryView:
    """One live entry as its owner holds it."""

    value: Any
    created_ms: int  # when the key last got a value while it had none
    updated_ms: int  # the last write
    accessed_ms: int  # the last read or write
    expire_at_ms: int  # when it expires (0: never)
    hits: int  # reads that found it since it was created
    version: int  # rises with every write of the key (1 for its first)

    @property
    def ttl_ms(self) -> int:
        """How long the last write gave it to live (0: until removed)."""
        return self.expire_at_ms - self.updated_ms if self.expire_at_ms else 0


def entry_view_of(data: bytes, load: Any) -> EntryView:
    """An ENTRY_VIEW answer's item as an ``EntryView``, its value read with ``load``. Raises
    ValueError for an item too short to hold the metadata."""
    if len(data) < VIEW_HEADER_BYTES:
        raise ValueError(f"an entry view is at least {VIEW_HEADER_BYTES} bytes, not {len(data)}")
    numbers = [int.from_bytes(data[at : at + 8], "little") for at in range(0, VIEW_HEADER_BYTES, 8)]
    fields = dict(zip(VIEW_FIELDS, numbers, strict=True))
    return EntryView(value=load(data[VIEW_HEADER_BYTES:]), **fields)
