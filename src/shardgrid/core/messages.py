"""Every message between members, and between clients and members, as a frozen dataclass.

Messages hold only ints, strs, bytes, bools, None, tuples and other message dataclasses (and the
core's ``Replica`` and ``Migration``), so that one generic codec (``codec.py``) carries them all.
Fields that name a partition table entry use ``TableEntry``; a migration travels as a
``MigrationRecord`` that names it, its partition, the version it expects and its outcome.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardgrid.core.identity import Replica
from shardgrid.core.migration import Migration

# --- shared records ------------------------------------------------------------------------------

ACTIVE = "active"
COMMITTED = "committed"
ROLLED_BACK = "rolled-back"


@dataclass(frozen=True, slots=True)
class MemberEntry:
    """A member of the published member list; the list is ordered oldest first."""

    replica: Replica
    lite: bool = False


@dataclass(frozen=True, slots=True)
class TableEntry:
    """One partition of a published table: its replica slots and its version."""

    partition_id: int
    replicas: tuple[Replica | None, ...]
    version: int


@dataclass(frozen=True, slots=True)
class MigrationRecord:
    """A migration as the master decided it: ``version_before`` is what participants must hold.

    ``status`` is ``active`` while it runs, then ``committed`` or ``rolled-back``; a committed
    record's partition is at ``version_before + 1`` after it, a rolled-back one's at
    ``version_before + 2`` (seed 000, section 2.1, step 4).
    """

    migration_id: str
    partition_id: int
    migration: Migration
    version_before: int
    status: str = ACTIVE

    def with_status(self, status: str) -> MigrationRecord:
        return MigrationRecord(self.migration_id, self.partition_id, self.migration, self.version_before, status)

    @property
    def version_after(self) -> int:
        return self.version_before + (1 if self.status == COMMITTED else 2)


@dataclass(frozen=True, slots=True)
class Entry:
    """One record of a map: what a migration or replica sync carries."""

    map_name: str
    key: bytes
    value: bytes


# --- membership ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinRequest:
    member: Replica
    lite: bool = False


@dataclass(frozen=True, slots=True)
class JoinRedirect:
    """From a member that is not the master: where the master is, if it knows."""

    master_address: str | None


@dataclass(frozen=True, slots=True)
class MemberListUpdate:
    """``(term, version)`` orders lists: a master elected later (a higher term) always wins."""

    version: int
    master: Replica
    members: tuple[MemberEntry, ...]
    term: int = 1


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Also tells the master which member list and table the sender holds, so it can resend."""

    member_list_version: int
    table_stamp: int | None = None
    term: int = 1


@dataclass(frozen=True, slots=True)
class NotAMember:
    """To a sender this member's cluster has removed: it must drop its data and join anew."""

    member_list_version: int
    term: int = 1


@dataclass(frozen=True, slots=True)
class MastershipClaim:
    member_list_version: int
    suspected: tuple[Replica, ...]
    term: int = 1  # the term the claimant will lead: one more than any it has seen


@dataclass(frozen=True, slots=True)
class MastershipClaimReply:
    """A refusal from a member holding a newer list of the same master carries that list, so a
    claimant that missed an update catches up and claims again (else nobody could win)."""

    member_list_version: int
    accepted: bool
    term: int = 1
    newer_members: tuple[MemberEntry, ...] = ()


# --- partition table -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionUpdate:
    """Changed partitions (or all, when ``full``) and the completed migrations for them."""

    member_list_version: int
    entries: tuple[TableEntry, ...]
    completed: tuple[MigrationRecord, ...]
    full: bool = False


@dataclass(frozen=True, slots=True)
class PartitionUpdateAck:
    """The versions the member now holds for the partitions of the update it acknowledges."""

    versions: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class AssignPartitions:
    """A member asked for data before any partition was assigned: the master assigns them now."""


@dataclass(frozen=True, slots=True)
class PromotionCommit:
    """Master to a surviving backup: you own these partitions now (seed 000, section 1.1)."""

    member_list_version: int
    entries: tuple[TableEntry, ...]


@dataclass(frozen=True, slots=True)
class PromotionCommitAck:
    partition_ids: tuple[int, ...]


# --- migrations ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MigrationRequest:
    """Master to the data sender (the owner): send this partition's data to the destination.

    It carries the partition's current table entry and completed migrations, so a sender that
    missed a publication catches up before it checks the version (seed 003, section 1.2).
    """

    member_list_version: int
    record: MigrationRecord
    entry: TableEntry
    completed: tuple[MigrationRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class MigrationChunk:
    """Sender to destination: one bounded piece of the partition's data, in order."""

    record: MigrationRecord
    sequence: int
    entries: tuple[Entry, ...]
    last: bool
    replica_sequence: int
    lineage: str


@dataclass(frozen=True, slots=True)
class MigrationChunkAck:
    migration_id: str
    sequence: int
    accepted: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class MigrationDataDone:
    """Sender to master: the destination holds all the data (or the transfer failed)."""

    migration_id: str
    success: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class MigrationCommit:
    """Master to destination, before the master applies anything itself (seed 000, 2.1 step 2)."""

    member_list_version: int
    record: MigrationRecord
    entry: TableEntry


@dataclass(frozen=True, slots=True)
class MigrationCommitAck:
    migration_id: str
    success: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class MigrationOutcomeQuery:
    """A participant still holding an active migration asks the master how it ended."""

    migration_id: str
    partition_id: int


@dataclass(frozen=True, slots=True)
class FetchPartitionState:
    """A new master asks every member for its table, active and completed migrations."""

    member_list_version: int


@dataclass(frozen=True, slots=True)
class PartitionStateReply:
    member_list_version: int
    entries: tuple[TableEntry, ...]
    active: tuple[MigrationRecord, ...]
    completed: tuple[MigrationRecord, ...]


# --- data and replication ------------------------------------------------------------------------

PUT = "put"
GET = "get"
REMOVE = "remove"


@dataclass(frozen=True, slots=True)
class Operation:
    """One map operation; ``value`` is empty for get and remove."""

    kind: str
    map_name: str
    key: bytes
    value: bytes = b""


@dataclass(frozen=True, slots=True)
class BackupOperation:
    """Owner to backup: apply this write as replica sequence ``sequence`` of the partition."""

    partition_id: int
    sequence: int
    operation: Operation
    lineage: str


@dataclass(frozen=True, slots=True)
class BackupAck:
    partition_id: int
    sequence: int


@dataclass(frozen=True, slots=True)
class ReplicaSyncChunk:
    """Owner to backup: the partition's whole data, in order; replaces what the backup holds."""

    sync_id: str
    partition_id: int
    sequence: int
    entries: tuple[Entry, ...]
    last: bool
    replica_sequence: int
    lineage: str


@dataclass(frozen=True, slots=True)
class ReplicaSyncAck:
    sync_id: str
    sequence: int
    accepted: bool


# --- clients ---------------------------------------------------------------------------------------

OK = "ok"
NOT_OWNER = "not-owner"
RETRY = "retry"  # the partition is migrating or has no owner yet: try again shortly
INDETERMINATE = "indeterminate"  # applied on the owner, but a backup did not acknowledge in time
REJECTED = "rejected"  # malformed or over a limit: will not succeed if retried


@dataclass(frozen=True, slots=True)
class ClientRequest:
    """A batch of operations for partitions this member is believed to own."""

    call_id: int
    operations: tuple[tuple[int, Operation], ...]  # (partition id, operation)


@dataclass(frozen=True, slots=True)
class OperationResult:
    status: str
    value: bytes | None = None
    owner_address: str | None = None  # where to go instead, with NOT_OWNER


@dataclass(frozen=True, slots=True)
class ClientReply:
    call_id: int
    results: tuple[OperationResult, ...]


@dataclass(frozen=True, slots=True)
class TableRequest:
    pass


@dataclass(frozen=True, slots=True)
class TableReply:
    """The partition owners' addresses as this member knows them (None where unknown)."""

    partition_count: int
    owner_addresses: tuple[str | None, ...]
