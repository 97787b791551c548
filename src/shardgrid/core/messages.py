"""Every message between members, and between clients and members, as a frozen dataclass.

Raft's own messages live in ``core.raft.messages`` and the log's commands in
``core.metadata.commands``; this module holds the rest: finding and joining a cluster, leases,
the data transfer of migrations, replication, client requests and administration. Messages hold
only ints, strs, bytes, bools, None, tuples, enums and other registered dataclasses, so that one
codec (``codec.py``) carries them all.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardgrid.core.identity import Replica
from shardgrid.core.metadata.cluster_state import ClusterState
from shardgrid.core.metadata.commands import MemberRecord
from shardgrid.core.migration import MigrationRecord

# --- finding and joining a cluster ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """To any known address: admit me (the leader), tell me where the leader is (a member), or
    tell me you are looking for a cluster too (a process that has not joined one)."""

    member: Replica
    lite: bool = False
    heard_of_cluster: bool = False  # the sender knows a cluster exists: it must not found one


@dataclass(frozen=True, slots=True)
class JoinRedirect:
    """From a member of a cluster: the leader's address, when it knows one. A cluster exists."""

    leader_address: str | None


@dataclass(frozen=True, slots=True)
class JoinRejected:
    """From the leader: the cluster takes no members now (FROZEN, PASSIVE, shut down)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Unjoined:
    """From a process that belongs to no cluster either: a peer to form the first one with,
    unless it has heard of an existing cluster."""

    member: Replica
    lite: bool = False
    heard_of_cluster: bool = False


@dataclass(frozen=True, slots=True)
class Bootstrap:
    """From the first of ``initial_cluster_size`` processes that found each other: these are the
    first members (``voters`` among them); every one starts the same log from it."""

    members: tuple[MemberRecord, ...]
    voters: tuple[Replica, ...]


@dataclass(frozen=True, slots=True)
class NotAMember:
    """To a sender this member's cluster does not list. The receiver leaves and joins again as a
    new member only when the sender committed more of the log than it did (so the removal is in
    the committed log; a sender that merely lags behind a new member's admission is ignored)."""

    commit_index: int


# --- leases ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaseRequest:
    """Member to leader, every ``lease_renew_interval_ms``. ``sent_ms`` is the member's clock; it
    also reports what it applied, so the leader knows when every member holds the same table."""

    sent_ms: int
    applied_index: int
    table_stamp: int | None


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    """The member may serve until its own ``request_sent_ms + lease_ms``."""

    request_sent_ms: int
    lease_ms: int
    term: int


# --- migrations (started and finished through the log; the data moves here) -----------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """One record of a map: what a migration or replica sync carries."""

    map_name: str
    key: bytes
    value: bytes


@dataclass(frozen=True, slots=True)
class MigrationChunk:
    """Data sender to destination: one bounded piece of the partition's data, in order."""

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
    """Data sender to leader: the destination holds all the data (or the transfer failed)."""

    migration_id: str
    success: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class MigrationCommit:
    """Leader to destination, before the log records the outcome (seed 000, 2.1 step 2)."""

    record: MigrationRecord
    term: int


@dataclass(frozen=True, slots=True)
class MigrationCommitAck:
    migration_id: str
    success: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class MigrationOutcomeQuery:
    """A new leader asks a destination whether it committed a migration the log shows unfinished
    (seed 000, 2.2). A destination that had not answers no, and refuses that commit from then on."""

    record: MigrationRecord
    term: int


@dataclass(frozen=True, slots=True)
class MigrationOutcomeReply:
    migration_id: str
    committed: bool


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


@dataclass(frozen=True, slots=True)
class ReplicaSyncRequest:
    """Backup to owner: this member is a backup of the partition but holds none of its data (it
    learned of it from a snapshot): send it the whole partition."""

    partition_id: int


@dataclass(frozen=True, slots=True)
class AssignPartitions:
    """A member asked for data before any partition was assigned: the leader assigns them now."""


# --- clients ---------------------------------------------------------------------------------------

OK = "ok"
NOT_OWNER = "not-owner"
RETRY = "retry"  # migrating, no owner yet, no lease: try again shortly
INDETERMINATE = "indeterminate"  # applied on the owner, but not confirmed by every backup under lease
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


# --- administration ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChangeClusterState:
    state: ClusterState


@dataclass(frozen=True, slots=True)
class PromoteMember:
    """Seed 002's promoteLocalMember: sent to the lite member that is to become a data member."""


@dataclass(frozen=True, slots=True)
class ShutdownMember:
    """Sent to the member that is to leave: it hands every replica over, then stops."""


@dataclass(frozen=True, slots=True)
class ShutdownCluster:
    """PASSIVE first, then every member stops."""


@dataclass(frozen=True, slots=True)
class RecoverLostMajority:
    """To the surviving member with the most complete log, when a majority of voters is gone for
    good: it becomes the only voter and leads (see ``RaftNode.force_new_configuration``)."""


@dataclass(frozen=True, slots=True)
class AdminRequest:
    call_id: int
    command: ChangeClusterState | PromoteMember | ShutdownMember | ShutdownCluster | RecoverLostMajority


ADMIN_OK = "ok"
ADMIN_FAILED = "failed"  # refused: the reason says why; nothing changed, and asking again will not help
ADMIN_UNAVAILABLE = "unavailable"  # no leader now, an election, the leader changed: ask again


@dataclass(frozen=True, slots=True)
class AdminReply:
    call_id: int
    status: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class LeaderRequest:
    """Member to leader: carry out a change only the leader can propose (for an admin request,
    or a member's own graceful shutdown)."""

    request_id: int
    command: ChangeClusterState | PromoteMember | ShutdownMember | ShutdownCluster


@dataclass(frozen=True, slots=True)
class LeaderReply:
    request_id: int
    status: str
    reason: str = ""
