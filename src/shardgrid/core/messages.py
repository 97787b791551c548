"""Every message between members, and between clients and members, as a frozen msgspec Struct.

Raft's own messages live in ``core.raft.messages`` and the log's commands in
``core.metadata.commands``; this module holds the rest: finding and joining a cluster, leases,
the data transfer of migrations, replication, client requests and administration. Messages hold
only ints, strs, bytes, bools, None, tuples, enums and ``wire.Record`` values; each class names its
stable wire code (``tag=``), so that one codec (``codec.py``) carries and checks them all. Every
growing int is a ``Counter`` and every tuple has a length bound, so that the codec refuses a
message no member sends before building it: a counter a peer pushed near overflow, or a frame of
millions of tiny items that would take many times its size in memory.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Annotated

import msgspec

from shardgrid._engine import pack, split
from shardgrid.core.identity import MAX_ADDRESS_CHARS, MemberId, MemberIds
from shardgrid.core.limits import (
    MAX_COUNTER,
    MAX_FRAME_BYTES,
    MAX_KEY_BYTES,
    MAX_MAP_NAME_CHARS,
    MAX_MEMBER_COUNT,
    MAX_OPERATIONS_PER_REQUEST,
    MAX_PARTITION_COUNT,
    MAX_REPLICA_COUNT,
    MAX_RUNS_PER_BACKUP_BATCH,
    MAX_STATUS_MAPS,
    MAX_TABLE_REPLY_PARTITIONS,
    MAX_TTL_SECONDS,
    MAX_VALUE_BYTES,
)
from shardgrid.core.metadata.cluster_state import ClusterState
from shardgrid.core.metadata.commands import Members
from shardgrid.core.migration import MigrationRecord
from shardgrid.core.table import MAX_PARTITION_VERSION
from shardgrid.core.wire import Counter, Message, Record
from shardgrid.core.write_records import AnswerValues, ClientId, WriterRecords

# Bounds the codec enforces in C while it decodes, before a member sees the message: a collection
# is refused from its length alone, before any of its items is built.
Key = Annotated[bytes, msgspec.Meta(max_length=MAX_KEY_BYTES)]
Value = Annotated[bytes, msgspec.Meta(max_length=MAX_VALUE_BYTES)]
MapName = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_MAP_NAME_CHARS)]
PartitionId = Annotated[int, msgspec.Meta(ge=0, lt=MAX_PARTITION_COUNT)]
PartitionVersion = Annotated[int, msgspec.Meta(ge=0, le=MAX_PARTITION_VERSION)]
# An acknowledged chunk sequence: -1 before the first.
AckedSequence = Annotated[int, msgspec.Meta(ge=-1, le=MAX_COUNTER)]
# Columns of one request (an unpacked scan page): one item per key.
KeyColumn = Annotated[tuple[Key, ...], msgspec.Meta(max_length=MAX_OPERATIONS_PER_REQUEST)]
ValueColumn = Annotated[tuple[Value, ...], msgspec.Meta(max_length=MAX_OPERATIONS_PER_REQUEST)]
# A byte per key of a request: its reply code, or whether its answer holds a value.
KeyBytes = Annotated[bytes, msgspec.Meta(max_length=MAX_OPERATIONS_PER_REQUEST)]
# A write's TTL in ms: -1 the map's own, 0 none.
TtlMs = Annotated[int, msgspec.Meta(ge=-1, le=MAX_TTL_SECONDS * 1000)]
# A column packed end to end (a scan page), or its entries' lengths.
PackedBytes = Annotated[bytes, msgspec.Meta(max_length=MAX_FRAME_BYTES)]
# The map of one migration or sync chunk.
ChunkMapName = Annotated[str, msgspec.Meta(max_length=MAX_MAP_NAME_CHARS)]  # "" in a chunk of no records

# --- finding and joining a cluster ---------------------------------------------------------------


Digest = Annotated[str, msgspec.Meta(max_length=64)]


class JoinRequest(Message, tag=20):
    """To any known address: admit me (the leader), tell me where the leader is (a member), or
    tell me you are looking for a cluster too (a process that has not joined one)."""

    member: MemberId
    lite: bool = False
    heard_of_cluster: bool = False  # the sender knows a cluster exists: it must not found one
    settings_digest: Digest = ""  # of the settings every member must share (MemberConfig.settings_digest)
    # A persistent member back from its data directory at another address: the identity the
    # directory holds (the same uuid). The leader renames that member rather than add a new one.
    moved_from: MemberId | None = None


class JoinRedirect(Message, tag=21):
    """From a member of a cluster: the leader's address, when it knows one. A cluster exists."""

    leader_address: str | None


class JoinRejected(Message, tag=22):
    """From the leader: the cluster takes no members now (FROZEN, PASSIVE, shut down)."""

    reason: str


class Unjoined(Message, tag=23):
    """From a process that belongs to no cluster either: a peer to form the first one with,
    unless it has heard of an existing cluster."""

    member: MemberId
    lite: bool = False
    heard_of_cluster: bool = False
    settings_digest: Digest = ""


class Bootstrap(Message, tag=24):
    """From the process that proposed the founding (``proposer``), and again from any of its
    founders to a founder that missed it: these are the first members (``voters`` among them);
    every one starts the same log from it. It lists only processes that promised the proposer's
    founding ``round`` (``FoundingProposal``), and a process takes it only for the proposer and
    round it promised."""

    members: Members
    voters: MemberIds
    round: Counter = 0
    proposer: MemberId | None = None  # None only in a message no member sends: it is refused


class FoundingProposal(Message, tag=28):
    """From a process about to found the cluster, to the peers it found: promise to found it with
    me, in my ``round``. A process promises one proposer at a time; the proposer founds only with
    processes that promised it, so two foundings would need one process to promise both (they
    each hold a majority of the seed addresses): only one cluster is ever founded."""

    round: Counter
    settings_digest: Digest = ""


class FoundingAnswer(Message, tag=29):
    """To a proposer: ``promised`` (sent again every ``join_retry_ms`` while the promise holds, so
    a proposer that gave the round up hears of it and withdraws it), or a refusal that names the
    proposer the sender is bound to (``promised_to``, itself when it proposes), or says that it
    heard of a cluster."""

    round: Counter
    promised: bool
    promised_to: MemberId | None = None
    heard_of_cluster: bool = False


class FoundingWithdrawn(Message, tag=30):
    """From a proposer: it will never found with ``round``; a process promised to it is free."""

    round: Counter


class NotAMember(Message, tag=25):
    """To a sender this member's cluster does not list. The receiver leaves and joins again as a
    new member only when the sender committed more of the log than it did (so the removal is in
    the committed log; a sender that merely lags behind a new member's admission is ignored)."""

    commit_index: Counter


# --- leases ----------------------------------------------------------------------------------------


class LeaseRequest(Message, tag=26):
    """Member to leader, every ``lease_renew_interval_ms``. ``sent_ms`` is the member's clock; it
    also reports what it applied, so the leader knows when every member holds the same table."""

    sent_ms: Counter
    applied_index: Counter
    table_stamp: int | None  # a hash: any 64-bit int


class LeaseGrant(Message, tag=27):
    """The member may serve until its own ``request_sent_ms + lease_ms``."""

    request_sent_ms: Counter
    lease_ms: Counter
    term: Counter


# --- migrations (started and finished through the log; the data moves here) -----------------------


# Codes 80 and 81 (a chunk of one object per entry, acknowledged one by one), 102 (a replica sync
# chunk of one object per entry), 88 and 126 (chunks of key and value columns without the
# records' metadata), and 136, 89, 137 and 103 (a migration's and a sync's chunks and
# acknowledgements, each of its own kind; one transfer's now) are retired.


class Column(Record):
    """A column of byte strings, packed as the storage engine takes and gives them: the items end
    to end in ``data``, and in ``lengths`` an unsigned 32-bit little-endian number per item. The
    wire carries keys and values so, never as one object per entry: a member hands a column to
    the engine as it came, once the engine checked it whole (counts, lengths, bounds), and a bad
    one is the sender's protocol error."""

    data: PackedBytes = b""
    lengths: PackedBytes = b""

    def __len__(self) -> int:
        """The items (a length each; the lengths of a column from a peer are checked before use)."""
        return len(self.lengths) >> 2

    @classmethod
    def of(cls, items: Sequence[bytes]) -> Column:
        """``items`` packed (one engine call)."""
        if not items:
            return EMPTY_COLUMN
        return cls(*pack(items if isinstance(items, list | tuple) else list(items)))

    def items(self) -> list[bytes]:
        """The items, a ``bytes`` each (for callers that need them one by one)."""
        return split(self.data, self.lengths)  # type: ignore[return-value]


EMPTY_COLUMN = Column()


class RecordColumns(Record, kw_only=True):
    """Records of one map with their metadata, packed as the storage engine dumps and loads them
    (``records.RecordPage``): checked whole by ``records.page_problem`` before anything is taken."""

    keys: PackedBytes = b""
    key_lengths: PackedBytes = b""
    values: PackedBytes = b""
    value_lengths: PackedBytes = b""
    metadata: PackedBytes = b""


class TransferKind(enum.StrEnum):
    """What a transfer of a partition's maps is for (a str enum: it travels as its value)."""

    MIGRATION = "migration"  # the partition moves (or is copied) to another member
    SYNC = "sync"  # its owner brings a backup that lags up to date


MIGRATION, SYNC = TransferKind.MIGRATION, TransferKind.SYNC


class TransferChunk(Message, tag=141, kw_only=True):
    """Sender to receiver: the next bounded piece of the maps a transfer moves (a migration's, from
    the partition's owner to its destination, or a replica sync's, from the owner to a backup),
    one map's records with their metadata, in order. Several are in flight at once
    (``migration_window_chunks``), acknowledged cumulatively (``TransferAck``).

    A migration's chunk carries its ``migration`` record. A sync's ``base_sequence`` is -1 when the
    backup's copy is replaced whole; otherwise the backup holds the partition at ``base_sequence``
    or later in ``lineage``, and the sync replaces just the maps changed since (each piece carries
    its map's version): what it holds of the others is already the owner's."""

    kind: TransferKind
    transfer_id: Annotated[str, msgspec.Meta(max_length=256)]  # the migration's id, or the sync's
    partition_id: PartitionId
    sequence: Counter
    map_name: ChunkMapName  # "" in the one chunk of a transfer that moves no records
    records: RecordColumns
    last: bool
    replica_sequence: Counter
    lineage: str
    map_version: Counter = 0  # the replica version of ``map_name`` (seed 002: a fragment's own)
    # The records of ``map_name`` the transfer sends in all (its maps take no writes meanwhile):
    # the receiver makes room for them at once rather than grow its table a page at a time.
    map_entries: Counter = 0
    versions_from: Counter = 0  # the partition's: maps emptied at or before it have no version
    writers: WriterRecords = ()  # in the last chunk: the writes the partition applied (write_records)
    migration: MigrationRecord | None = None  # a migration's record (None for a sync)
    base_sequence: AckedSequence = -1  # a sync's (see above); -1 for a migration


class TransferAck(Message, tag=142, kw_only=True):
    """Receiver to sender, cumulative: it holds every chunk of the transfer up to ``sequence`` (-1:
    none yet). Not accepted: it cannot take the transfer (``reason`` says why; a sync's backup may
    not be a backup there, or no longer hold what the sync was based on). ``complete``: a sync's
    backup holds the partition as of the sync (the owner is done with it)."""

    kind: TransferKind
    transfer_id: Annotated[str, msgspec.Meta(max_length=256)]
    sequence: AckedSequence
    accepted: bool
    complete: bool = False
    reason: str = ""


class MigrationDataDone(Message, tag=82):
    """Data sender to leader: the destination holds all the data (or the transfer failed)."""

    migration_id: str
    success: bool
    reason: str = ""


class MigrationProgress(Message, tag=133):
    """Data sender to leader, once a ``migration_timeout_ms`` while a long transfer moves (or waits
    for the sender's throughput cap): the leader's backstop on transfers it hears nothing about
    counts from the latest one."""

    migration_id: str


class MigrationCommit(Message, tag=83):
    """Leader to destination, before the log records the outcome (seed 000, 2.1 step 2)."""

    record: MigrationRecord
    term: Counter


class MigrationCommitAck(Message, tag=84):
    migration_id: str
    success: bool
    reason: str = ""


class MigrationOutcomeQuery(Message, tag=85):
    """A new leader asks a destination whether it committed a migration the log shows unfinished
    (seed 000, 2.2). A destination that had not answers no, and refuses that commit from then on."""

    record: MigrationRecord
    term: Counter


class MigrationOutcomeReply(Message, tag=86):
    migration_id: str
    committed: bool


# --- data and replication ------------------------------------------------------------------------


class OpKind(enum.StrEnum):
    """What a map operation does (a str enum: it travels, and compares, as its value)."""

    GET = "get"
    PUT = "put"
    REMOVE = "remove"
    # A put of the keys that have no value; a key that has one keeps it (and answers it as the
    # previous value). The owner decides, so its backups are sent a PUT of the keys it wrote.
    PUT_IF_ABSENT = "put_if_absent"
    # Conditional writes, atomic per key on the owner and replicated as the PUT or REMOVE of the
    # keys it wrote; each answers the value held before (the previous value, None for none):
    # REPLACE puts the keys that have a value; REPLACE_IF_SAME puts ``values`` where the value held
    # is the request's ``expected`` one; REMOVE_IF_SAME removes where it is ``values``' one.
    REPLACE = "replace"
    REPLACE_IF_SAME = "replace_if_same"
    REMOVE_IF_SAME = "remove_if_same"
    # A read of each key's entry view: its value after 48 bytes of metadata (the engine's
    # METADATA_FIELDS, unsigned 64-bit little-endian), None for no entry; it counts no read.
    ENTRY_VIEW = "entry_view"
    # A new TTL for the keys that have a value (the request's ``ttl_ms``, -1 the map's): the owner
    # writes each one's value again with it, replicated as a PUT, and answers b"" for a key it
    # held and None for one it did not (never the value: nothing but the TTL comes back).
    SET_TTL = "set_ttl"


GET, PUT, REMOVE, PUT_IF_ABSENT = OpKind.GET, OpKind.PUT, OpKind.REMOVE, OpKind.PUT_IF_ABSENT
REPLACE, REPLACE_IF_SAME, REMOVE_IF_SAME, ENTRY_VIEW, SET_TTL = (
    OpKind.REPLACE,
    OpKind.REPLACE_IF_SAME,
    OpKind.REMOVE_IF_SAME,
    OpKind.ENTRY_VIEW,
    OpKind.SET_TTL,
)
# The kinds that only read, and those whose request carries one value per key.
READS: frozenset[OpKind] = frozenset({OpKind.GET, OpKind.ENTRY_VIEW})
WITH_VALUES: frozenset[OpKind] = frozenset(
    {OpKind.PUT, OpKind.PUT_IF_ABSENT, OpKind.REPLACE, OpKind.REPLACE_IF_SAME, OpKind.REMOVE_IF_SAME}
)
# The kinds that may give their entries a TTL.
WITH_TTL: frozenset[OpKind] = frozenset(
    {OpKind.PUT, OpKind.PUT_IF_ABSENT, OpKind.REPLACE, OpKind.REPLACE_IF_SAME, OpKind.SET_TTL}
)


class WriteRun(Record, kw_only=True):
    """Consecutive writes of one kind to one map of a partition, as the owner applied them: replica
    sequences ``first_sequence``, ``first_sequence + 1``, ... one per key. Columns, not one object
    per write: a put_all of a thousand keys to one partition is one run."""

    partition_id: PartitionId
    lineage: str
    first_sequence: Counter
    kind: OpKind  # PUT or REMOVE
    map_name: str
    keys: Column  # a run holds some of one request's keys
    values: Column  # one per key for PUT, none for REMOVE
    # For a backup that keeps no copy of this map (its slot is past the map's backup count): the
    # writes' sequences without their keys and values, so that every backup of the partition
    # follows one sequence.
    skipped: Annotated[int, msgspec.Meta(ge=0, le=MAX_OPERATIONS_PER_REQUEST)] = 0
    # The client's write these came from (``write_records``): a backup records it as applied, so
    # that as owner it would answer a retry of it; ``record_ttl_ms`` is how long to remember it,
    # and ``answer`` what the owner answered when that was values (the backup cannot work them out).
    client_id: ClientId = ""
    write_id: Counter = 0
    record_ttl_ms: Counter = 0
    answer: AnswerValues | None = None
    # When the owner applied the writes, on its record clock: a backup applies them at that time,
    # so that its records' times and expiry are the owner's. ``ttls_ms``: one packed 64-bit number
    # per key of a PUT, how long each entry lives (empty: every entry lives until removed).
    written_ms: Counter = 0
    ttls_ms: PackedBytes = b""

    @property
    def last_sequence(self) -> int:
        return self.first_sequence + len(self.keys) + self.skipped - 1

    @property
    def write_count(self) -> int:
        return len(self.keys) + self.skipped

    def without_data(self) -> WriteRun:
        first = self.first_sequence
        return WriteRun(
            partition_id=self.partition_id,
            lineage=self.lineage,
            first_sequence=first,
            kind=self.kind,
            map_name=self.map_name,
            keys=EMPTY_COLUMN,
            values=EMPTY_COLUMN,
            skipped=self.write_count,
            client_id=self.client_id,
            write_id=self.write_id,
            record_ttl_ms=self.record_ttl_ms,
        )


# Codes 100 and 101 (one message per write and per acknowledgement) and 120 (runs of one object
# per key) are retired.


class BackupBatch(Message, tag=140):
    """Owner to one backup: every write it has for that backup from one handled event, in runs."""

    runs: Annotated[tuple[WriteRun, ...], msgspec.Meta(max_length=MAX_RUNS_PER_BACKUP_BATCH)]


class BackupAckBatch(Message, tag=121):
    """Backup to owner: for each partition of a batch, the replica sequence it now holds (cumulative:
    every write up to it is applied)."""

    acks: Annotated[tuple[tuple[PartitionId, Counter], ...], msgspec.Meta(max_length=MAX_PARTITION_COUNT)]


class ReplicaSyncRequest(Message, tag=119):
    """Backup to owner: where this backup's copy stands (``sequence`` -1: it holds none, or one
    of another lineage). The owner sends what it lacks: the maps changed since, or everything."""

    partition_id: PartitionId
    lineage: str = ""
    sequence: AckedSequence = -1


class ReplicaSummary(Message, tag=125):
    """Owner to one backup, every ``anti_entropy_interval_ms``: where each settled partition it
    owns and the backup backs stands (its lineage and replica sequence), as columns. A backup that
    is behind asks for a sync, naming where it stands (anti-entropy: repairs what nothing else
    noticed). One sequence per partition is enough: on a replica that applies writes in order it
    fixes every map's version, so the owner, told where the backup stands, sends just the maps
    changed since."""

    partition_ids: Annotated[tuple[PartitionId, ...], msgspec.Meta(max_length=MAX_PARTITION_COUNT)]
    lineages: Annotated[tuple[str, ...], msgspec.Meta(max_length=MAX_PARTITION_COUNT)]
    sequences: Annotated[tuple[Counter, ...], msgspec.Meta(max_length=MAX_PARTITION_COUNT)]


class AssignmentRequest(Message, tag=104):
    """A member asked for data before any partition was assigned: the leader assigns them now."""


# --- clients ---------------------------------------------------------------------------------------


class ReplyCode(enum.IntEnum):
    """What happened to one key of a request, in a form a smart client acts on without parsing text."""

    OK = 0
    WRONG_OWNER = 1  # another member owns the partition: the reply's redirects name it and the version
    MIGRATING = 2  # the partition is moving or re-syncing its backups: retry after retry_after_ms
    NOT_READY = 3  # no table, no owner or no lease here yet: retry after retry_after_ms
    OVERLOADED = 4  # too many writes wait for backups here: retry after retry_after_ms
    SHUTTING_DOWN = 5  # this member is leaving or left: ask another member for the table
    REJECTED = 6  # malformed, over a limit, or refused by the cluster state: retrying will not help
    INDETERMINATE = 7  # applied by the owner, but not confirmed by every backup under lease
    EXPIRED = 8  # the attempt came after its deadline (MapRequest.deadline_ms): it was not applied
    SETTLING = 9  # an earlier attempt of this write was applied and waits for its backups: retry after retry_after_ms
    UNAVAILABLE = 10  # every replica of the partition is on members that stopped answering: nothing was applied
    MEMORY_FULL = 11  # the owner holds max_memory_bytes of records: the write was not applied (reads and removes go on)
    DISK_FULL = 12  # the owner's disk has no room it keeps (disk_reserve_bytes): not applied (reads and removes go on)


RETRYABLE: frozenset[ReplyCode] = frozenset(
    {ReplyCode.MIGRATING, ReplyCode.NOT_READY, ReplyCode.OVERLOADED, ReplyCode.SHUTTING_DOWN, ReplyCode.SETTLING}
)


# Codes 122 and 123 (requests and replies of one object per key) are retired.


class MapRequest(Message, tag=138, kw_only=True):
    """One operation on many keys of one map, as packed columns: ``values[i]`` is ``keys[i]``'s
    value for a write of values. The keys may span partitions; the member works out each key's
    partition and answers for each. Clients send each partition's keys side by side, which lets
    a member take each partition's keys as one slice of the columns (any order is served).
    ``previous`` asks a put or remove for each key's previous value (a column the member skips
    otherwise, like a putAll).

    ``sent_ms`` is when the client sent this attempt, on its clock for the connection (ms since
    the handshake ended: clocks need not agree, only run at the same rate), and ``deadline_ms``
    how long after that it may still take effect: a member that gets it later refuses it whole
    (EXPIRED) without applying any of it, so a call that timed out was applied before its
    deadline or not at all. 0: no deadline."""

    call_id: Counter
    kind: OpKind
    map_name: MapName
    keys: Column
    values: Column = EMPTY_COLUMN
    previous: bool = False
    sent_ms: Counter = 0
    deadline_ms: Counter = 0
    # The write's name at its client, the same in every attempt (``write_records``): a partition
    # that applied it answers a retry as it answered the first, applying nothing. "": unnamed.
    client_id: ClientId = ""
    write_id: Counter = 0
    # How long the entries of a put or put-if-absent live, in ms: -1 the map's time_to_live_seconds,
    # 0 until removed.
    ttl_ms: TtlMs = -1
    # REPLACE_IF_SAME: the value each key must hold for ``values``' to replace it (one per key).
    expected: Column = EMPTY_COLUMN
    # How long each key's entry lives, in ms (0: until removed): one unsigned 64-bit little-endian
    # number per key, instead of ``ttl_ms`` (which is then -1). Empty: ``ttl_ms`` says.
    ttls_ms: PackedBytes = b""


class PartitionRedirect(Record):
    """Where a partition is, as this member's table says: its owner at that partition version."""

    partition_id: PartitionId
    version: PartitionVersion
    owner_address: str


class MapReply(Message, tag=139, kw_only=True):
    """One reply code per key (a ``ReplyCode`` byte each); for an answer of values (a get's, or a
    put's or remove's previous values when asked), ``values`` and ``present`` (a byte per key: 1
    for a value, 0 for none, whose item is then empty), else both empty; one redirect per
    partition answered WRONG_OWNER.

    An answer whose values pass ``MAX_REPLY_VALUE_BYTES`` comes in several replies to the same
    call: each covers the keys from ``first_index`` on, and ``more`` says another follows (the
    redirects, the retry hint and the reason come with the first)."""

    call_id: Counter
    codes: KeyBytes
    values: Column = EMPTY_COLUMN
    present: KeyBytes = b""
    redirects: Annotated[tuple[PartitionRedirect, ...], msgspec.Meta(max_length=MAX_OPERATIONS_PER_REQUEST)] = ()
    retry_after_ms: Counter = 0
    reason: str = ""  # why, when a key is REJECTED
    first_index: Annotated[int, msgspec.Meta(ge=0, lt=MAX_OPERATIONS_PER_REQUEST)] = 0
    more: bool = False

    def value_list(self) -> list[bytes | None]:
        """The answer's values, one per key (None: no value), or none when it carries no values.
        Raises ``shardgrid._engine.ColumnError`` when the columns do not fit together."""
        if not self.present:
            return []
        return split(self.values.data, self.values.lengths, self.present)


class ScanRequest(Message, tag=127, kw_only=True):
    """A page of one partition's entries of one map, from its owner: the entries after the first
    ``offset``, at most ``max_entries`` of them (0: none, just the count). Pages of one partition
    fit together only while the reply's ``lineage`` and ``map_version`` stay the same; when they
    change, the map changed between pages and the partition is read again from the start."""

    call_id: Counter
    map_name: MapName
    partition_id: PartitionId
    offset: Counter = 0
    max_entries: Annotated[int, msgspec.Meta(ge=0, le=MAX_OPERATIONS_PER_REQUEST)] = MAX_OPERATIONS_PER_REQUEST
    keys_only: bool = False
    # The page as packed columns (``ScanReply.packed_keys`` and the rest) instead of one item per
    # entry: a reader building Arrow arrays then makes no object per entry.
    packed: bool = False
    # With ``packed``: the records as the owner holds them, each with its metadata (the engine's
    # METADATA_FIELDS: times, expiry, hits, version) in ``ScanReply.metadata``, expired ones not yet
    # removed included: what a backup copies.
    with_metadata: bool = False


class ScanReply(Message, tag=128, kw_only=True):
    """One page: ``code`` OK with the entries, or why not (WRONG_OWNER with the ``redirect``,
    MIGRATING or NOT_READY with ``retry_after_ms``, REJECTED with the ``reason``). ``total`` is the
    partition's entry count of the map; ``more`` says entries follow this page."""

    call_id: Counter
    code: ReplyCode
    keys: KeyColumn = ()
    values: ValueColumn = ()
    total: Counter = 0
    more: bool = False
    lineage: str = ""
    map_version: Counter = 0
    redirect: PartitionRedirect | None = None
    retry_after_ms: Counter = 0
    reason: str = ""
    # A packed page (``ScanRequest.packed``; ``keys`` and ``values`` are then empty): each column's
    # bytes end to end, and each entry's length in it as an unsigned 32-bit little-endian number.
    packed_keys: PackedBytes = b""
    key_lengths: PackedBytes = b""
    packed_values: PackedBytes = b""
    value_lengths: PackedBytes = b""
    # Where the next page starts: past the positions this page covered, expired entries left out
    # among them included (0 from a member that counts positions by entries returned).
    next_offset: Counter = 0
    # ``ScanRequest.with_metadata``: six unsigned 64-bit little-endian numbers per record.
    metadata: PackedBytes = b""


class MemberStatusRequest(Message, tag=129):
    """A client asks one member how it stands (``shardgrid status``, ``is_cluster_safe``)."""

    call_id: Counter


class MapUsage(Record, kw_only=True):
    """One map's records on one member, of every replica it holds, as the engine counts them."""

    map_name: MapName
    entries: Counter
    memory_bytes: Counter


class MemberStatus(Message, tag=130, kw_only=True):
    """One member's own view: what it is, what its applied log says of the cluster, and whether
    its own part is quiet. The cluster is safe when every member of the list answers ``quiet``,
    all at the same ``applied_index`` and ``table_stamp``, and the leader says ``leader_idle``
    with no ``missing_replicas``."""

    call_id: Counter
    address: str
    uuid: str
    lifecycle: str  # Lifecycle's value
    lite: bool
    leader_address: str  # "" when it knows of none
    term: Counter
    cluster_state: ClusterState
    applied_index: Counter
    members: Annotated[tuple[str, ...], msgspec.Meta(max_length=MAX_MEMBER_COUNT)]  # addresses, in the list's order
    lite_members: Annotated[tuple[str, ...], msgspec.Meta(max_length=MAX_MEMBER_COUNT)]
    leaving_members: Annotated[tuple[str, ...], msgspec.Meta(max_length=MAX_MEMBER_COUNT)]
    partition_count: Counter
    table_stamp: int | None  # None: no partition assigned yet
    owned_partitions: Counter  # partitions this member owns (replica 0)
    backup_replicas: Counter  # backup slots this member holds
    missing_replicas: Counter  # backup slots the table leaves empty though data members could fill them
    migrations_in_log: Counter  # started and not finished, cluster-wide, as the log says
    migrations_here: Counter  # partitions this member sends or receives right now
    migrations_planned: Counter  # leader only: planned, not started yet
    migrations_finished: Counter  # finished as this member applied them since it started
    writes_awaiting_backups: Counter  # this member's writes not yet acknowledged by every backup
    syncs_in_flight: Counter  # replica syncs this member sends or receives
    leader_idle: bool  # leader only: nothing planned, proposed or running, nobody joining or leaving
    quiet: bool  # nothing of this member's is moving, syncing or waiting for a backup
    # Members kept, though silent, for partitions only they hold, and those partitions (unavailable).
    unreachable_members: Annotated[tuple[str, ...], msgspec.Meta(max_length=MAX_MEMBER_COUNT)] = ()
    unavailable_partitions: Counter = 0
    entries_migrated: Counter = 0  # records this member sent as a migration source since it started
    bytes_migrated: Counter = 0  # their keys' and values' bytes
    chunks_resent: Counter = 0  # migration chunks it sent again for want of a timely acknowledgement
    # The records of every replica this member holds, as the storage engine counts them (as of its
    # last tick), and its limit (0: none): at the limit, writes are refused with MEMORY_FULL.
    memory_bytes: Counter = 0
    max_memory_bytes: Counter = 0
    entries: Counter = 0  # records held, of every replica
    entries_evicted: Counter = 0  # entries it evicted as owner (a map's eviction_policy) since it started
    # Per map, by name: the MAX_STATUS_MAPS that take the most memory, when it holds more.
    maps: Annotated[tuple[MapUsage, ...], msgspec.Meta(max_length=MAX_STATUS_MAPS)] = ()
    # A persistent member's data directory (``data_dir``): its files' bytes as it wrote them, the
    # file system's free bytes as its runtime last saw them (-1: not known), its writes not yet
    # synced and how long the oldest has waited, and whether it refuses writes for want of room
    # (DISK_FULL: free space under disk_reserve_bytes plus room to rewrite what it holds).
    persistent: bool = False
    disk_bytes: Counter = 0
    disk_free_bytes: Annotated[int, msgspec.Meta(ge=-1, le=MAX_COUNTER)] = -1
    unsynced_writes: Counter = 0
    sync_lag_ms: Counter = 0
    disk_full: bool = False
    # The leader's, back from its disk: the members it waits for as a hot restart's (neither removed
    # nor repaired around until hot_restart_timeout_ms, or for good with full_recovery_only).
    awaited_members: Annotated[tuple[str, ...], msgspec.Meta(max_length=MAX_MEMBER_COUNT)] = ()
    entries_synced: Counter = 0  # records this member sent in replica syncs, as owner, since it started


class ListenRequest(Message, tag=131):
    """A client asks the member it is connected to for its events, pushed as ``EventNotice``s
    tagged with this ``call_id`` until the connection closes. The member process answers it (the
    member's own events are its ``Emit`` effects); a member keeps no subscription of its own."""

    call_id: Counter


class EventNotice(Message, tag=132, kw_only=True):
    """One event a member emitted, for a listening client: ``kind`` names it (``migration``,
    ``member-added``, ``member-removed``, ``leader-changed``, ``cluster-state-changed``,
    ``partition-lost``, ``member-promoted``, ``member-readdressed``, or ``listening`` first, to say
    the subscription holds); the other fields carry what that kind has, addresses for members."""

    call_id: Counter
    kind: Annotated[str, msgspec.Meta(max_length=64)]
    phase: Annotated[str, msgspec.Meta(max_length=64)] = ""  # a migration's: started, finished, failed
    partition_id: Annotated[int, msgspec.Meta(ge=-1, lt=MAX_PARTITION_COUNT)] = -1
    migration_id: Annotated[str, msgspec.Meta(max_length=256)] = ""
    migration_kind: Annotated[str, msgspec.Meta(max_length=64)] = ""
    source: Annotated[str, msgspec.Meta(max_length=MAX_ADDRESS_CHARS)] = ""
    destination: Annotated[str, msgspec.Meta(max_length=MAX_ADDRESS_CHARS)] = ""
    member: Annotated[str, msgspec.Meta(max_length=MAX_ADDRESS_CHARS)] = ""
    detail: Annotated[str, msgspec.Meta(max_length=512)] = ""


# Codes 105-107 (one object per operation and per result) are retired.


class TableRequest(Message, tag=108):
    """A client asks for the partition table, from ``first_partition`` on."""

    first_partition: Counter = 0


# Code 109 (the owners' addresses only) is retired.


# Per partition of a table reply: an index into its addresses (-1: an empty slot) per replica slot.
TableRow = Annotated[
    tuple[Annotated[int, msgspec.Meta(ge=-1, lt=MAX_MEMBER_COUNT)], ...], msgspec.Meta(max_length=MAX_REPLICA_COUNT)
]


class TableReply(Message, tag=124, kw_only=True):
    """The table as this member applied it, in seed 003's shape: the members it names once, then
    per partition (from ``first_partition`` on) its version and replicas as indexes into
    ``addresses`` (the owner first, then the backups; -1 for an empty slot). At most
    ``MAX_TABLE_REPLY_PARTITIONS`` partitions a reply: ``more`` says to ask again from where it
    ends. No rows: this member has no table yet."""

    partition_count: Annotated[int, msgspec.Meta(ge=1, le=MAX_PARTITION_COUNT)]
    first_partition: Counter
    addresses: Annotated[tuple[str, ...], msgspec.Meta(max_length=MAX_MEMBER_COUNT)]
    versions: Annotated[tuple[PartitionVersion, ...], msgspec.Meta(max_length=MAX_TABLE_REPLY_PARTITIONS)]
    replicas: Annotated[tuple[TableRow, ...], msgspec.Meta(max_length=MAX_TABLE_REPLY_PARTITIONS)]
    more: bool = False
    # Partitions of this page whose every replica is on members that stopped answering: a client
    # sends their keys to any member, which answers UNAVAILABLE, instead of waiting on the owner.
    unavailable: Annotated[tuple[PartitionId, ...], msgspec.Meta(max_length=MAX_TABLE_REPLY_PARTITIONS)] = ()


# --- administration ----------------------------------------------------------------------------------


class ChangeClusterState(Message, tag=110):
    state: ClusterState


class PromoteMember(Message, tag=111):
    """Seed 002's promoteLocalMember: sent to the lite member that is to become a data member."""


class ShutdownMember(Message, tag=112):
    """Sent to the member that is to leave: it hands every replica over, then stops."""

    # The process stops whether or not anyone takes its replicas (a signal asked it to): when no
    # other data member stays, it is recorded as leaving all the same, so that the others leaving
    # with it learn that nobody is left to take theirs and stop too (as Hazelcast lets every member
    # go once all of them asked to), instead of waiting graceful_shutdown_timeout_ms for it. Set
    # only by a member forwarding its own StopSignalled to the leader; a client's is refused.
    even_if_last: bool = False


class ShutdownCluster(Message, tag=113):
    """PASSIVE first, then every member stops."""


class RecoverLostMajority(Message, tag=118):
    """To the surviving member with the most complete log, when a majority of voters is gone for
    good: it becomes the only voter and leads (see ``RaftNode.force_new_configuration``)."""


class RemoveMember(Message, tag=134):
    """The operator's word that the member at ``address``, silent past the failure timeout, is gone
    for good: it is removed now (its partitions repaired, those it alone held reported lost)
    rather than after ``partition_lost_timeout_ms``."""

    address: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ADDRESS_CHARS)]


class RevivePartitions(Message, tag=135):
    """The operator accepts the loss of every unavailable partition: each is reported lost and
    given new, empty replicas (the unreachable members holding it drop it when they return)."""


AdminCommand = ChangeClusterState | PromoteMember | ShutdownMember | ShutdownCluster | RemoveMember | RevivePartitions


class AdminRequest(Message, tag=114):
    call_id: Counter
    command: AdminCommand | RecoverLostMajority


class AdminResult(enum.StrEnum):
    OK = "ok"
    FAILED = "failed"  # refused: the reason says why; nothing changed, and asking again will not help
    UNAVAILABLE = "unavailable"  # no leader now, an election, the leader changed: ask again


ADMIN_OK, ADMIN_FAILED, ADMIN_UNAVAILABLE = AdminResult.OK, AdminResult.FAILED, AdminResult.UNAVAILABLE


class AdminReply(Message, tag=115):
    call_id: Counter
    result: AdminResult
    reason: str = ""


class LeaderRequest(Message, tag=116):
    """Member to leader: carry out a change only the leader can propose (for an admin request,
    or a member's own graceful shutdown)."""

    request_id: Counter
    command: AdminCommand


class LeaderReply(Message, tag=117):
    request_id: Counter
    result: AdminResult
    reason: str = ""
