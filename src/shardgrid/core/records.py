"""One map's records in one partition replica, held by the storage engine (``shardgrid._engine``).

The core's data path talks to the engine's records through this class alone: it hands the
engine the packed columns the wire carries (``messages.Column``) as they came and takes packed
answers back, one engine call per batch, never one per entry. Times are the core's record clock
(``Context.records_ms``): the owner's, for a write; a backup applies a write at the time its owner
applied it, so two replicas at the same sequence hold the same records, metadata and expiry
included.

A map's records iterate in a deterministic order (the engine's: insertion, with a removal moving
the last record into the hole), so a transfer of the same records sends the same chunks on every
run of a simulated seed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from shardgrid._engine import (
    INDEX_BYTES,
    MAX_COUNTER,
    METADATA_FIELDS,
    RECORD_BYTES,
    ColumnError,
    RecordStore,
    check_records,
    get_parts,
    get_routed,
    pack,
    split,
)
from shardgrid.core.messages import Column, RecordColumns

# An entry view's metadata before its value: the engine's METADATA_FIELDS, 8 bytes each.
VIEW_HEADER_BYTES = 8 * len(METADATA_FIELDS)
# Separate items (what tools, tests and the conditional writes' per-key judgement hold).
Items = Sequence[bytes]
# An engine answer of values, one per key of its call, packed: the values (an absent key's item
# empty), their lengths, and a presence byte per key (1 or 0).
Found = tuple[bytes, bytes, bytes]


# A page of records: the wire's ``RecordColumns`` is the engine's dump format itself.
RecordPage = RecordColumns
EMPTY_PAGE = RecordColumns()


def page_count(page: RecordPage) -> int:
    """Records in a page (each has a 4-byte key length)."""
    return len(page.key_lengths) // 4


@dataclass(frozen=True, slots=True)
class ScanPage:
    """A page of a scan: the live entries among the positions it covers, packed, and the position
    after them (where the next page starts)."""

    keys: bytes
    key_lengths: bytes
    values: bytes
    value_lengths: bytes
    next_offset: int


EMPTY_SCAN_PAGE = ScanPage(b"", b"", b"", b"", 0)


def ttls_fit(ttls_ms: bytes, count: int, max_ttl_ms: int = MAX_COUNTER) -> bool:
    """Whether a run's packed TTLs suit its ``count`` keys: none, or one within ``max_ttl_ms``
    each (by default ``MAX_COUNTER``, what the engine takes)."""
    if not ttls_ms:
        return True
    if len(ttls_ms) != 8 * count:
        return False
    return max(memoryview(ttls_ms).cast("Q")) <= max_ttl_ms


def chunk_problem(map_name: str, page: RecordPage) -> str:
    """What makes a transfer chunk from a peer unfit to stage ('' when nothing)."""
    if page_count(page) and not map_name:
        return "a chunk's records name no map"
    return page_problem(page)


def page_problem(page: RecordPage) -> str:
    """What makes a page from a peer unfit to load ('' when nothing): the engine's own check."""
    try:
        check_records(page.keys, page.key_lengths, page.values, page.value_lengths, page.metadata)
    except ColumnError as error:
        return f"bad records: {error}"
    return ""


def read_parts(
    map_name: str, parts: Sequence[tuple[MapRecords | None, Column]], now_ms: int, max_bytes: int
) -> tuple[bytes, bytes, bytes, bytes]:
    """``MapRecords.get`` of several partitions' records of one map in one engine call
    (``_engine.get_parts``): per part, its records (None: none held) and its keys. The values of
    every part count against ``max_bytes`` together; ``ends`` gives each part's end in the values
    (packed unsigned 64-bit numbers, one per part), and a key a budget left unread has presence
    ``UNREAD``."""
    return get_parts(
        map_name,
        [(None if records is None else records._store, keys.data, keys.lengths) for records, keys in parts],
        now_ms,
        max_bytes,
    )


def read_routed(
    map_name: str,
    partition_count: int,
    keys: Column,
    stores: Sequence[tuple[int, MapRecords | None]],
    now_ms: int,
    max_bytes: int,
) -> tuple[bytes, bytes, bytes]:
    """``MapRecords.get`` of a request's keys, each from its partition's records (``stores``: per
    partition the keys are in, its records, None when none are held), in one engine call
    (``_engine.get_routed``), answered in the keys' order."""
    return get_routed(
        map_name,
        partition_count,
        keys.data,
        keys.lengths,
        [(pid, None if records is None else records._store) for pid, records in stores],
        now_ms,
        max_bytes,
    )


# The room ``MapRecords.reserve`` takes per record before it is filled: its slot in the vector and
# its share of the index (its bytes come with it).
RESERVED_RECORD_BYTES = RECORD_BYTES + INDEX_BYTES


class MapRecords:
    """One map's records in one partition replica. Only the partition's owner of the data (the
    data path, a transfer's staging) changes them; checkers and tests read them through
    ``snapshot`` and ``entries``."""

    __slots__ = ("_store", "max_idle_ms", "name")

    def __init__(self, name: str, hash_seed: int, max_idle_ms: int = 0) -> None:
        self.name = name
        self.max_idle_ms = max_idle_ms  # an entry not read or written this long is expired (0: never)
        self._store = RecordStore(hash_seed, max_idle_ms=max_idle_ms)

    # --- what it holds ---------------------------------------------------------------------------

    def __len__(self) -> int:
        """Records held, expired ones not yet removed included (they take memory)."""
        return self._store.entry_count(self.name)

    def __bool__(self) -> bool:
        return self._store.entry_count(self.name) > 0

    def memory_bytes(self) -> int:
        return self._store.memory_bytes(self.name)

    def __repr__(self) -> str:
        return f"MapRecords({self.name!r}, {len(self)} records, {self.memory_bytes()} bytes)"

    # --- the batch calls of the data path ---------------------------------------------------------

    def put(
        self,
        keys: Column,
        values: Column,
        now_ms: int,
        *,
        ttl_ms: int = 0,
        ttls_ms: bytes | None = None,
        previous: bool = False,
    ) -> tuple[Found | None, int]:
        """Set each key to its value, living ``ttl_ms`` (each) or its own of ``ttls_ms`` (0: until
        removed). Returns the live values replaced (when ``previous``) and how much the map's
        memory count grew."""
        if ttls_ms:
            found, lengths, present, grown = self._store.put(
                self.name,
                keys.data,
                keys.lengths,
                values.data,
                values.lengths,
                now_ms,
                ttls_ms=ttls_ms,
                return_previous=previous,
            )
        else:
            found, lengths, present, grown = self._store.put(
                self.name,
                keys.data,
                keys.lengths,
                values.data,
                values.lengths,
                now_ms,
                ttl_ms=ttl_ms,
                return_previous=previous,
            )
        return ((found, lengths, present) if previous else None), grown

    def put_items(self, keys: Items, values: Items, now_ms: int, *, ttl_ms: int = 0) -> None:
        """``put`` of separate items (for tools and tests)."""
        self.put(Column.of(keys), Column.of(values), now_ms, ttl_ms=ttl_ms)

    def get(self, keys: Column, now_ms: int, max_bytes: int | None = None) -> Found:
        """The live values (absent or expired: none); each one found counts a read. With
        ``max_bytes``, only the first keys whose values fit in it are read (a shorter answer)."""
        return self._store.get(self.name, keys.data, keys.lengths, now_ms, max_bytes=max_bytes)

    def packed_views(self, keys: Items, now_ms: int, max_bytes: int) -> list[bytes | None]:
        """Each key's live entry as an entry view travels (``OpKind.ENTRY_VIEW``): its metadata
        (``METADATA_FIELDS``, 48 bytes) then its value; None for no entry. Counts no read, and
        copies each distinct key out of the engine once. Only the first keys whose views fit in
        ``max_bytes`` are answered (a shorter list)."""
        distinct = list(dict.fromkeys(keys))
        packed = pack(distinct)
        values = split(*self._store.peek(self.name, *packed, now_ms))
        numbers, _ = self._store.metadata(self.name, *packed, now_ms)
        by_key: dict[bytes, bytes | None] = {}
        for index, (key, value) in enumerate(zip(distinct, values, strict=True)):
            header = numbers[index * VIEW_HEADER_BYTES : (index + 1) * VIEW_HEADER_BYTES]
            by_key[key] = None if value is None else header + value
        views: list[bytes | None] = []
        used = 0
        for key in keys:
            view = by_key[key]
            used += len(view) if view is not None else 0
            if used > max_bytes:
                break
            views.append(view)
        return views

    def peek(self, keys: Items, now_ms: int) -> list[bytes | None]:
        """The live values of separate keys, as ``get`` finds them, without counting a read."""
        return split(*self._store.peek(self.name, *pack(keys), now_ms))

    def remove(self, keys: Column, now_ms: int, *, previous: bool = False) -> tuple[Found | None, int]:
        """Remove the keys' records (expired ones too). Returns the live values removed (when
        ``previous``) and how much the map's memory count grew (negative: it shrank)."""
        found, lengths, present, grown = self._store.remove(
            self.name, keys.data, keys.lengths, now_ms, return_previous=previous
        )
        return ((found, lengths, present) if previous else None), grown

    def scan(self, offset: int, max_entries: int, now_ms: int, keys_only: bool, max_bytes: int) -> ScanPage:
        """The live entries among the records from position ``offset``, at most ``max_entries``
        positions and ``max_bytes`` of keys and values (a first entry alone may pass it)."""
        keys, key_lengths, values, value_lengths, next_offset = self._store.scan(
            self.name, offset, max_entries, now_ms, keys_only=keys_only, max_bytes=max_bytes
        )
        return ScanPage(keys, key_lengths, values, value_lengths, next_offset)

    def expired(self, now_ms: int, max_entries: int) -> Column:
        """Keys of up to ``max_entries`` records expired at ``now_ms``, earliest first."""
        return Column(*self._store.expired(self.name, now_ms, max_entries))

    def touch(self, now_ms: int) -> None:
        """Count every record as accessed at ``now_ms`` (never earlier than it was)."""
        self._store.touch(self.name, now_ms)

    def idle(self, now_ms: int, offset: int, max_scanned: int, max_entries: int) -> tuple[Column, int]:
        """Keys of records from position ``offset`` on, among ``max_scanned``, that went idle (or
        expired) at ``now_ms``, at most ``max_entries``; and the position to go on from."""
        keys, lengths, next_offset = self._store.idle(self.name, now_ms, offset, max_scanned, max_entries)
        return Column(keys, lengths), next_offset

    def evictable(self, policy: str, seed: int, samples: int, min_entries: int, min_bytes: int, now_ms: int) -> Column:
        """Keys to evict by ``policy``: at least ``min_entries`` of them, freeing at least
        ``min_bytes`` of the memory count (every key, when the map holds less), each the best of
        ``samples`` records drawn from ``seed``."""
        return Column(*self._store.evictable(self.name, policy, seed, samples, min_entries, min_bytes, now_ms))

    # --- transfers --------------------------------------------------------------------------------

    def pages(self, max_entries: int, max_bytes: int) -> Iterator[RecordPage]:
        """The records with their metadata, in bounded pages (expired ones too: they are the
        owner's to remove, by a replicated write). The map must take no write while it is read."""
        offset = 0
        # The live length each time: should the map shrink under a reader anyway, the pages end
        # (an outside tester found an endless stream of empty pages when it did).
        while offset < len(self):
            keys, key_lengths, values, value_lengths, metadata, offset = self._store.dump(
                self.name, offset, max_entries, max_bytes
            )
            if not key_lengths:
                return
            yield RecordColumns(
                keys=keys, key_lengths=key_lengths, values=values, value_lengths=value_lengths, metadata=metadata
            )

    def dump_page(self, offset: int, max_entries: int, max_bytes: int) -> tuple[RecordPage, int]:
        """The records from position ``offset`` on with their metadata (expired ones too), at most
        ``max_entries`` and ``max_bytes``, and the position after them: a backup's page."""
        keys, key_lengths, values, value_lengths, metadata, next_offset = self._store.dump(
            self.name, offset, max_entries, max_bytes
        )
        page = RecordColumns(
            keys=keys, key_lengths=key_lengths, values=values, value_lengths=value_lengths, metadata=metadata
        )
        return page, next_offset

    def load(self, page: RecordPage) -> None:
        """Take a page of another replica's records as they are (raises ``ColumnError``, having
        changed nothing, when the page breaks the engine's rules)."""
        self._store.load(self.name, page.keys, page.key_lengths, page.values, page.value_lengths, page.metadata)

    def reserve(self, entries: int) -> None:
        """Make room for ``entries`` more records, about to be loaded (see ``RecordStore.reserve``:
        the caller bounds them, ``RESERVED_RECORD_BYTES`` each, by the memory it may take). A map
        that holds nothing yet is left as it is: load the first page first."""
        self._store.reserve(self.name, entries)

    def fit(self) -> None:
        """Give back room made ahead and not filled (``reserve``): the table as large as its
        records need."""
        self._store.fit(self.name)

    def copy(self) -> MapRecords:
        """An independent copy holding the same records, metadata and order."""
        other = MapRecords(self.name, 0, self.max_idle_ms)
        total = len(self)
        for page in self.pages(100_000, 1 << 40):
            other.load(page)
            if total:
                other.reserve(total - len(other))  # after the first page, once
                total = 0
        return other

    def __deepcopy__(self, memo: dict[int, object]) -> MapRecords:
        return self.copy()

    # --- read-only views (checkers, status, tests) --------------------------------------------------

    def snapshot(self) -> dict[bytes, bytes]:
        """Every record's key and value, expired ones included, in iteration order."""
        return {key: value for key, (value, _) in self.entries().items()}

    def entries(self) -> dict[bytes, tuple[bytes, int]]:
        """Every record's value and expiry time (0: never): what two replicas at the same
        sequence must agree on."""
        out: dict[bytes, tuple[bytes, int]] = {}
        for page in self.pages(100_000, 1 << 40):
            keys = split(page.keys, page.key_lengths)
            values = split(page.values, page.value_lengths)
            for index, (key, value) in enumerate(zip(keys, values, strict=True)):
                at = index * 48 + 24
                out[key] = (value, int.from_bytes(page.metadata[at : at + 8], "little"))  # type: ignore[index,assignment]
        return out


def page_of(keys: Items, values: Items, now_ms: int = 0) -> RecordPage:
    """``keys`` and ``values`` as one page of records written at ``now_ms`` with no expiry, as a
    transfer would carry them (for tools and tests that build a chunk by hand)."""
    records = MapRecords("page", 0)
    records.put_items(keys, values, now_ms)
    pages = list(records.pages(len(keys) or 1, 1 << 53))
    return pages[0] if pages else EMPTY_PAGE


def page_items(page: RecordPage) -> dict[bytes, bytes]:
    """A page's keys and values (for tools and tests that read a chunk)."""
    keys, values = split(page.keys, page.key_lengths), split(page.values, page.value_lengths)
    return dict(zip(keys, values, strict=True))  # type: ignore[arg-type]
