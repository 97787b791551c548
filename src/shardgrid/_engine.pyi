"""shardgrid's storage engine, compiled from the Rust crate in ``native/engine`` (PyO3, built by
maturin when the package is installed).

It holds one partition replica's records and answers the core's batch calls. It belongs to the pure
core's world: it performs no I/O, reads no clock, starts no thread and draws no random number, so
every call that needs the time takes the core's ``now_ms``, and the hash function is keyed by a seed
from the caller. The same calls in the same order give the same answers and the same iteration
order on every run, whatever the seed, so the simulator still replays a seed bit for bit.

Entries cross the boundary as packed columns, never one object per entry: a column of byte strings
is one ``bytes`` holding them end to end and one ``bytes`` of their lengths, each an unsigned 32-bit
little-endian number (``packed_lengths`` and ``unpacked_lengths`` in ``shardgrid.core.store``, and a
packed ``ScanReply`` page, use the same format). A presence mask is one byte per entry, 1 or 0.
Numbers per entry (TTLs, metadata) are unsigned 64-bit little-endian numbers end to end.

Every argument is checked whole before anything changes: a bad one raises ``ColumnError`` (a
``ValueError``), an argument of the wrong type ``TypeError``, and the call changed nothing. Within a
batch the entries apply in order, as that many single calls would.

Expiry: an entry written with a TTL of ``t`` ms at ``now_ms`` expires at ``now_ms + t``
(``MAX_COUNTER`` at the latest; 0: never) and from that time on no call returns it. The engine
only hides it: removing it is the owner's decision, replicated like any remove (``expired`` names
the keys to remove).
"""

from typing import Final

MAX_KEY_BYTES: Final[int]
"""The largest key (``shardgrid.core.limits.MAX_KEY_BYTES``)."""
MAX_VALUE_BYTES: Final[int]
"""The largest value (``shardgrid.core.limits.MAX_VALUE_BYTES``)."""
MAX_OPERATIONS_PER_REQUEST: Final[int]
"""The most entries one call takes or returns (``shardgrid.core.limits.MAX_OPERATIONS_PER_REQUEST``)."""
MAX_MAP_NAME_CHARS: Final[int]
"""The longest map name, in characters (``shardgrid.core.limits.MAX_MAP_NAME_CHARS``)."""
MAX_PARTITION_COUNT: Final[int]
# The presence byte of a key a multi-store read (get_parts, get_routed) left unread: past the
# answer's byte bound (beside 1, found, and 0, absent).
UNREAD: Final[int]
"""The most partitions a cluster may have (``shardgrid.core.limits.MAX_PARTITION_COUNT``)."""
MAX_COUNTER: Final[int]
"""The largest ``now_ms``, TTL or offset (``shardgrid.core.limits.MAX_COUNTER``, 2**53)."""
MAX_ENTRIES_PER_CHUNK: Final[int]
"""The most records one ``dump`` page or ``load`` holds (``shardgrid.core.limits.MAX_ENTRIES_PER_CHUNK``)."""
MAX_EVICTION_SAMPLES: Final[int]
"""The most records ``evictable`` draws to choose each entry."""
LENGTH_BYTES: Final[int]
"""Bytes of one packed length (4)."""
NUMBER_BYTES: Final[int]
"""Bytes of one packed 64-bit number (8)."""
METADATA_FIELDS: Final[tuple[str, ...]]
"""The numbers ``RecordStore.metadata`` packs per entry, in order: created_ms, updated_ms,
accessed_ms, expire_at_ms (0: never), hits, version."""
RECORD_BYTES: Final[int]
"""Memory counted per record for its slot: metadata and the pointer to its key and value."""
INDEX_BYTES: Final[int]
"""Memory counted per record for its share of the hash table."""
EXPIRY_BYTES: Final[int]
"""Memory counted per expiring record for its place in the expiry order."""
MAP_BYTES: Final[int]
"""Memory counted per map holding records, beyond them and its name."""

DUMP_RECORD_BYTES: Final[int]
"""What a ``dump`` page's byte bound counts per record beyond its key and value (two lengths and
its metadata numbers)."""

def pack(items: list[bytes] | tuple[bytes, ...]) -> tuple[bytes, bytes]:
    """``items`` as a packed column (the items end to end, their lengths): one call per column.
    An item that is not ``bytes`` is a ``TypeError``; one whose length does not fit the 32 bits
    of a packed length a ``ColumnError``. (No value's bound: an answer's item may be larger, as an
    entry view is a value and its metadata; what a member takes is checked where it takes it.)"""

def split(data: bytes, lengths: bytes, present: bytes | None = None) -> list[bytes | None]:
    """A packed column's items; with ``present`` (a byte per item, 1 or 0) an item marked 0 is
    None, and must be empty (the place the engine leaves for an absent entry). The lengths must
    add up to the buffer; an item may be of any length they can say."""

def check_column(data: bytes, lengths: bytes, *, max_items: int, max_item_bytes: int, what: str = "column") -> int:
    """Check a packed column whole (its lengths a whole number of 4-byte lengths adding up to the
    buffer, at most ``max_items`` of them, each at most ``max_item_bytes``): its item count, or a
    ``ColumnError`` that names the column ``what`` (its first 40 characters)."""

def partition_ids(keys: bytes, key_lengths: bytes, partition_count: int) -> bytes:
    """The partition of each key of a packed column among ``partition_count`` (1 to
    ``MAX_PARTITION_COUNT``), as ``shardgrid.core.hashing`` computes it (Hazelcast's
    MurmurHash3_x86_32 and fold), as packed unsigned 32-bit little-endian numbers. Each key is
    at most ``MAX_KEY_BYTES``."""

def partitions_of(keys: bytes, key_lengths: bytes, partition_count: int) -> bytes:
    """The partitions the keys of a packed column are in (1 to ``MAX_PARTITION_COUNT`` of them),
    each once, in the order they first come, as packed unsigned 32-bit little-endian numbers. The
    column is checked as a request carries it: at most ``MAX_OPERATIONS_PER_REQUEST`` keys of at
    most ``MAX_KEY_BYTES`` each."""

def split_by_partition(
    partition_count: int,
    keys: bytes,
    key_lengths: bytes,
    values: bytes | None = None,
    value_lengths: bytes | None = None,
    ttls_ms: bytes | None = None,
) -> tuple[list[tuple[int, int, int, bytes, bytes, bytes, bytes, bytes]], bytes | None]:
    """A request's columns cut by partition, checked whole first: at most
    ``MAX_OPERATIONS_PER_REQUEST`` keys of at most ``MAX_KEY_BYTES`` each, no values or one per
    key of at most ``MAX_VALUE_BYTES`` each, no TTLs or one 64-bit number per key. Returns, per
    partition in the order the partitions first come, ``(partition_id, start, end, keys,
    key_lengths, values, value_lengths, ttls_ms)``: the positions of its keys and their own packed
    columns (values and TTLs empty when the request has none). The second item is None when every
    partition's keys come side by side (positions are the request's), else the packed positions
    (unsigned 32-bit numbers) of the stable order that brings them together, which the positions
    refer to."""

def get_parts(
    map_name: str,
    parts: list[tuple[RecordStore | None, bytes, bytes]],
    now_ms: int,
    max_bytes: int | None = None,
) -> tuple[bytes, bytes, bytes, bytes]:
    """``RecordStore.get`` over several stores in one call (one request's partitions): per part,
    its store (None: the partition holds nothing here, every key absent) and its keys' packed
    column. Answers ``(values, value_lengths, present, ends)`` in the order of the parts, one
    presence byte per key: 1 found, 0 absent, ``UNREAD`` past ``max_bytes``. Every store's values
    count against ``max_bytes`` together: a part's reads stop at the first value that does not
    fit, and the next part's go on with what is left (as a get served a partition at a time).
    ``ends``: each part's end in ``values``, an unsigned 64-bit little-endian number per part.
    Every part is checked first (at most ``MAX_PARTITION_COUNT`` parts and
    ``MAX_OPERATIONS_PER_REQUEST`` keys in all): a bad one raises ``ColumnError`` having read
    nothing (a read counts a hit and marks the entry accessed)."""

def get_routed(
    map_name: str,
    partition_count: int,
    keys: bytes,
    key_lengths: bytes,
    stores: list[tuple[int, RecordStore | None]],
    now_ms: int,
    max_bytes: int | None = None,
) -> tuple[bytes, bytes, bytes]:
    """``RecordStore.get`` of a request's keys, each read from the store of its partition (among
    ``partition_count``, as ``partition_ids`` finds it), in one call: ``stores`` names each
    partition the keys are in with its store (None: it holds nothing, its keys absent). Answers
    ``(values, value_lengths, present)`` in the keys' order, presence bytes as ``get_parts``
    gives them. The partitions are read in the order they first come, each one's keys in request
    order, against one ``max_bytes`` as ``get_parts`` reads its parts (exactly what serving the
    request a partition at a time reads). The keys and stores are checked first (at most
    ``MAX_OPERATIONS_PER_REQUEST`` keys, no partition named twice or out of range, a store for
    every key's partition): a bad call raises ``ColumnError`` (``TypeError`` for a wrong type)
    having read nothing."""

def check_records(keys: bytes, key_lengths: bytes, values: bytes, value_lengths: bytes, metadata: bytes) -> None:
    """Check records as ``RecordStore.load`` takes them, whole, without taking them: raises
    ``ColumnError`` saying what is wrong (what a transfer's receiver checks before staging a chunk)."""

class ColumnError(ValueError):
    """A column or argument that breaks the engine's rules (lengths that do not add up to the
    buffer, a key or value too long, too many entries, a time or TTL out of range). The call
    changed nothing: from the wire, it is the peer's protocol error."""

class RecordStore:
    """One partition replica's maps: per map name, key bytes to a record (the value bytes, the
    times it was created, updated and last read, its expiry time, its hits and its version).

    Records iterate in insertion order, except that removing one moves the last into its place; the
    order depends on the calls alone. The memory count is a function of the records held alone
    (the same on every replica holding them): per record, ``RECORD_BYTES`` + ``INDEX_BYTES`` + the
    heap block of its key and value as glibc's malloc sizes it (bytes + 8 rounded up to 16, at
    least 32, none for no bytes) + ``EXPIRY_BYTES`` when it expires; per map, ``MAP_BYTES`` and its
    name's heap block. Spare capacity left after a table grew is not counted.
    """

    def __init__(self, hash_seed: int | None = None, *, max_idle_ms: int | None = None) -> None:
        """An empty store whose hash tables are keyed by ``hash_seed`` (0 to 2**64 - 1; None: 0),
        from the core's seeded generator: a client that does not know it cannot choose colliding
        keys, and nothing observable depends on it. ``max_idle_ms``: an entry not read
        or written for this long is expired too (0 or None: never), judged on this replica's
        access times."""

    def put(
        self,
        map_name: str,
        keys: bytes,
        key_lengths: bytes,
        values: bytes,
        value_lengths: bytes,
        now_ms: int,
        *,
        ttl_ms: int | None = None,
        ttls_ms: bytes | None = None,
        return_previous: bool = False,
    ) -> tuple[bytes, bytes, bytes, int]:
        """Set each key to its value at ``now_ms``. Each entry lives ``ttl_ms`` (every entry) or its
        own number of ``ttls_ms`` (a packed number per entry), not both; 0 or neither: forever.
        Returns the previous values (packed; empty unless ``return_previous``), the presence mask
        of live entries before the write, and how much the map's memory count grew. A write
        replacing a live entry keeps its creation time and hits; replacing an expired one starts a
        new entry. The version always changes (it wraps past 2**64 - 1 to 1). An entry is never
        updated before it was created: a write at a ``now_ms`` behind its creation time (another
        member's clock) counts as made at that time."""

    def put_if_absent(
        self,
        map_name: str,
        keys: bytes,
        key_lengths: bytes,
        values: bytes,
        value_lengths: bytes,
        now_ms: int,
        *,
        ttl_ms: int | None = None,
        ttls_ms: bytes | None = None,
        return_previous: bool = False,
    ) -> tuple[bytes, bytes, bytes, int]:
        """Set only the keys that hold no live entry at ``now_ms``; the others stay as they are
        (this counts no hit). Returns the values left in place (packed; empty unless
        ``return_previous``), the mask of the keys left (1: present, not written), and how much the
        map's memory count grew."""

    def get(
        self, map_name: str, keys: bytes, key_lengths: bytes, now_ms: int, *, max_bytes: int | None = None
    ) -> tuple[bytes, bytes, bytes]:
        """The values of the keys' live entries at ``now_ms`` (packed; an absent key's place is
        empty) and the presence mask. Each entry found counts a hit and is marked read at
        ``now_ms``. An expired entry is never returned. With ``max_bytes``, the answer stops before
        the first value that would take its values past it: it covers only the first keys (the
        mask is shorter than the keys), and the others are not read."""

    def peek(self, map_name: str, keys: bytes, key_lengths: bytes, now_ms: int) -> tuple[bytes, bytes, bytes]:
        """``get`` without counting a read: no hit, no access time (what a conditional write
        compares is not a read)."""

    def remove(
        self, map_name: str, keys: bytes, key_lengths: bytes, now_ms: int, *, return_previous: bool = False
    ) -> tuple[bytes, bytes, bytes, int]:
        """Remove the keys' entries, expired or not. Returns the removed live values (packed; empty
        unless ``return_previous``), the mask of the keys that held a live entry (an expired one
        is removed and reported absent: no reader could see it), and how much the map's memory
        count grew (negative: it shrank)."""

    def metadata(self, map_name: str, keys: bytes, key_lengths: bytes, now_ms: int) -> tuple[bytes, bytes]:
        """Per key, its live entry's ``METADATA_FIELDS`` as packed numbers (zeros when absent),
        and the presence mask. Counts no hit: it is what an entry view reads."""

    def scan(
        self,
        map_name: str,
        offset: int,
        max_entries: int,
        now_ms: int,
        *,
        keys_only: bool = False,
        max_bytes: int | None = None,
    ) -> tuple[bytes, bytes, bytes, bytes, int]:
        """A page: the live entries among the records at positions ``offset`` to ``offset +
        max_entries`` (keys packed, lengths, values packed, lengths; values empty when
        ``keys_only``) and the position after them. An expired record is left out, so a page may
        hold fewer than ``max_entries`` with more to come: the scan is done when the position
        reaches ``entry_count``. Pages fit together while the map takes no write between them. The live
        entries' bytes (keys, and values unless ``keys_only``) stay within ``max_bytes`` (None: no
        bound but ``MAX_COUNTER``), except a first entry alone."""

    def touch(self, map_name: str, now_ms: int) -> None:
        """Count every record of the map as accessed at ``now_ms`` (never earlier than it was):
        what a copy that becomes its partition's owner's does for a map with a max idle, as it
        knows only each entry's last write, not the reads its old owner served."""

    def idle(
        self, map_name: str, now_ms: int, offset: int, max_scanned: int, max_entries: int
    ) -> tuple[bytes, bytes, int]:
        """The keys (packed, lengths) of records from position ``offset`` on that are no longer
        live at ``now_ms`` (idle past ``max_idle_ms``, or expired), looking at ``max_scanned``
        records (up to ``MAX_ENTRIES_PER_CHUNK``) and listing ``max_entries`` at most, and the
        position to go on from (at or past the end: the pass is over). Nothing for a store
        without a max idle. Removes nothing: the owner replicates the removal."""

    def expired(self, map_name: str, now_ms: int, max_entries: int) -> tuple[bytes, bytes]:
        """The keys (packed, lengths) of up to ``max_entries`` records expired at ``now_ms``,
        earliest expiry first; the work is bounded by ``max_entries``. Removes nothing: the owner
        decides and replicates the removal (a ``remove`` of these keys)."""

    def evictable(
        self, map_name: str, policy: str, seed: int, samples: int, min_entries: int, min_bytes: int, now_ms: int
    ) -> tuple[bytes, bytes]:
        """The keys (packed, lengths) of entries the map should lose to get under its size, by
        ``policy`` ("LRU", "LFU" or "RANDOM"): at least ``min_entries`` and ``min_bytes`` of its
        memory count (every entry, when it holds less), at most ``MAX_OPERATIONS_PER_REQUEST``.
        Each is the best of ``samples`` records drawn from ``seed`` (up to
        ``MAX_EVICTION_SAMPLES``); an expired entry beats any live one. Removes nothing: the
        owner replicates the removal."""

    def dump(
        self, map_name: str, offset: int, max_entries: int, max_bytes: int
    ) -> tuple[bytes, bytes, bytes, bytes, bytes, int]:
        """The records at positions ``offset`` on, expired ones included, as another replica or a
        snapshot takes them: keys packed, lengths, values packed, lengths, their metadata
        (``METADATA_FIELDS`` numbers each), and the position after them. At most ``max_entries``
        (up to ``MAX_ENTRIES_PER_CHUNK``) and ``max_bytes`` counted as ``DUMP_RECORD_BYTES`` per
        record plus its key and value, at least one record. Pages fit together while the map
        takes no write between them."""

    def load(
        self, map_name: str, keys: bytes, key_lengths: bytes, values: bytes, value_lengths: bytes, metadata: bytes
    ) -> None:
        """Take records as ``dump`` gave them: each key set to its value and exactly its metadata
        (a held record of the key replaced in place). Checked whole first: one metadata row per
        record, times and versions within ``MAX_COUNTER``, a version from 1, updated no earlier
        than created, hits within 32 bits."""

    def reserve(self, map_name: str, entries: int) -> None:
        """Make room in the map for ``entries`` more records at once (a transfer's destination,
        told how many its source sends, after its first page): the vector and the index then grow
        no more while they come, rather than double their way up, rehashing every key each time.
        Room not yet filled is not counted in ``memory_bytes``: the caller bounds ``entries`` by
        the memory it may take. A map holding nothing is left as it is. Raises ``ColumnError``
        past what a map can hold (2**32 - 1 records) or when the allocator cannot give it."""

    def fit(self, map_name: str) -> None:
        """Give back the room the map's table holds beyond what its records need (room made by
        ``reserve`` and not filled); nothing for a map holding nothing."""

    def entry_count(self, map_name: str) -> int:
        """Records the map holds, expired ones not yet removed included (they hold memory)."""

    def memory_bytes(self, map_name: str) -> int:
        """Bytes the map takes, counted as the class says; 0 for a map holding nothing."""

    def total_entry_count(self) -> int:
        """Records of every map."""

    def total_memory_bytes(self) -> int:
        """Bytes of every map."""

    def map_names(self) -> list[str]:
        """The maps holding records, in the order they were first written (an emptied map is
        dropped)."""
