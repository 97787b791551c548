"""Every message between members, and between clients and members, as a frozen msgspec Struct.

Raft's own messages live in ``core.raft.messages`` and the log's commands in
``core.metadata.commands``; this module holds the rest: finding and joining a cluster, leases,
the data transfer of migrations, replication, client requests and administration. Messages hold
only ints, strs, bytes, bools, None, tuples, enums and ``wire.Record`` values; each class names its
stable wire code (``tag=``), so that one codec (``codec.py``) carries and checks them all.
"""

from __future__ import annotations

from shardgrid.core.identity import Replica
from shardgrid.core.metadata.cluster_state import ClusterState
from shardgrid.core.metadata.commands import MemberRecord
from shardgrid.core.migration import MigrationRecord
from shardgrid.core.wire import Message, Record

# --- finding and joining a cluster ---------------------------------------------------------------


class JoinRequest(Message, tag=20):
    """To any known address: admit me (the leader), tell me where the leader is (a member), or
    tell me you are looking for a cluster too (a process that has not joined one)."""

    member: Replica
    lite: bool = False
    heard_of_cluster: bool = False  # the sender knows a cluster exists: it must not found one


class JoinRedirect(Message, tag=21):
    """From a member of a cluster: the leader's address, when it knows one. A cluster exists."""

    leader_address: str | None


class JoinRejected(Message, tag=22):
    """From the leader: the cluster takes no members now (FROZEN, PASSIVE, shut down)."""

    reason: str


class Unjoined(Message, tag=23):
    """From a process that belongs to no cluster either: a peer to form the first one with,
    unless it has heard of an existing cluster."""

    member: Replica
    lite: bool = False
    heard_of_cluster: bool = False


class Bootstrap(Message, tag=24):
    """From the first of ``initial_cluster_size`` processes that found each other: these are the
    first members (``voters`` among them); every one starts the same log from it."""

    members: tuple[MemberRecord, ...]
    voters: tuple[Replica, ...]


class NotAMember(Message, tag=25):
    """To a sender this member's cluster does not list. The receiver leaves and joins again as a
    new member only when the sender committed more of the log than it did (so the removal is in
    the committed log; a sender that merely lags behind a new member's admission is ignored)."""

    commit_index: int


# --- leases ----------------------------------------------------------------------------------------


class LeaseRequest(Message, tag=26):
    """Member to leader, every ``lease_renew_interval_ms``. ``sent_ms`` is the member's clock; it
    also reports what it applied, so the leader knows when every member holds the same table."""

    sent_ms: int
    applied_index: int
    table_stamp: int | None


class LeaseGrant(Message, tag=27):
    """The member may serve until its own ``request_sent_ms + lease_ms``."""

    request_sent_ms: int
    lease_ms: int
    term: int


# --- migrations (started and finished through the log; the data moves here) -----------------------


class Entry(Record):
    """One record of a map: what a migration or replica sync carries."""

    map_name: str
    key: bytes
    value: bytes


class MigrationChunk(Message, tag=80):
    """Data sender to destination: one bounded piece of the partition's data, in order."""

    record: MigrationRecord
    sequence: int
    entries: tuple[Entry, ...]
    last: bool
    replica_sequence: int
    lineage: str


class MigrationChunkAck(Message, tag=81):
    migration_id: str
    sequence: int
    accepted: bool
    reason: str = ""


class MigrationDataDone(Message, tag=82):
    """Data sender to leader: the destination holds all the data (or the transfer failed)."""

    migration_id: str
    success: bool
    reason: str = ""


class MigrationCommit(Message, tag=83):
    """Leader to destination, before the log records the outcome (seed 000, 2.1 step 2)."""

    record: MigrationRecord
    term: int


class MigrationCommitAck(Message, tag=84):
    migration_id: str
    success: bool
    reason: str = ""


class MigrationOutcomeQuery(Message, tag=85):
    """A new leader asks a destination whether it committed a migration the log shows unfinished
    (seed 000, 2.2). A destination that had not answers no, and refuses that commit from then on."""

    record: MigrationRecord
    term: int


class MigrationOutcomeReply(Message, tag=86):
    migration_id: str
    committed: bool


# --- data and replication ------------------------------------------------------------------------

PUT = "put"
GET = "get"
REMOVE = "remove"


class Operation(Record):
    """One map operation; ``value`` is empty for get and remove."""

    kind: str
    map_name: str
    key: bytes
    value: bytes = b""


class WriteRun(Record):
    """Consecutive writes of one kind to one map of a partition, as the owner applied them: replica
    sequences ``first_sequence``, ``first_sequence + 1``, ... one per key. Columns, not one object
    per write: a put_all of a thousand keys to one partition is one run."""

    partition_id: int
    lineage: str
    first_sequence: int
    kind: str  # PUT or REMOVE
    map_name: str
    keys: tuple[bytes, ...]
    values: tuple[bytes, ...]  # one per key for PUT, none for REMOVE

    @property
    def last_sequence(self) -> int:
        return self.first_sequence + len(self.keys) - 1


# Codes 100 and 101 (one message per write and per acknowledgement) are retired.


class BackupBatch(Message, tag=120):
    """Owner to one backup: every write it has for that backup from one handled event, in runs."""

    runs: tuple[WriteRun, ...]


class BackupAckBatch(Message, tag=121):
    """Backup to owner: for each partition of a batch, the replica sequence it now holds (cumulative:
    every write up to it is applied)."""

    acks: tuple[tuple[int, int], ...]


class ReplicaSyncChunk(Message, tag=102):
    """Owner to backup: the partition's whole data, in order; replaces what the backup holds."""

    sync_id: str
    partition_id: int
    sequence: int
    entries: tuple[Entry, ...]
    last: bool
    replica_sequence: int
    lineage: str


class ReplicaSyncAck(Message, tag=103):
    sync_id: str
    sequence: int
    accepted: bool


class ReplicaSyncRequest(Message, tag=119):
    """Backup to owner: this member is a backup of the partition but holds none of its data (it
    learned of it from a snapshot): send it the whole partition."""

    partition_id: int


class AssignPartitions(Message, tag=104):
    """A member asked for data before any partition was assigned: the leader assigns them now."""


# --- clients ---------------------------------------------------------------------------------------

OK = "ok"
NOT_OWNER = "not-owner"
RETRY = "retry"  # migrating, no owner yet, no lease: try again shortly
INDETERMINATE = "indeterminate"  # applied on the owner, but not confirmed by every backup under lease
REJECTED = "rejected"  # malformed or over a limit: will not succeed if retried


class ClientRequest(Message, tag=105):
    """A batch of operations for partitions this member is believed to own."""

    call_id: int
    operations: tuple[tuple[int, Operation], ...]  # (partition id, operation)


class OperationResult(Record):
    status: str
    value: bytes | None = None
    owner_address: str | None = None  # where to go instead, with NOT_OWNER


class ClientReply(Message, tag=107):
    call_id: int
    results: tuple[OperationResult, ...]


class TableRequest(Message, tag=108):
    pass


class TableReply(Message, tag=109):
    """The partition owners' addresses as this member knows them (None where unknown)."""

    partition_count: int
    owner_addresses: tuple[str | None, ...]


# --- administration ----------------------------------------------------------------------------------


class ChangeClusterState(Message, tag=110):
    state: ClusterState


class PromoteMember(Message, tag=111):
    """Seed 002's promoteLocalMember: sent to the lite member that is to become a data member."""


class ShutdownMember(Message, tag=112):
    """Sent to the member that is to leave: it hands every replica over, then stops."""


class ShutdownCluster(Message, tag=113):
    """PASSIVE first, then every member stops."""


class RecoverLostMajority(Message, tag=118):
    """To the surviving member with the most complete log, when a majority of voters is gone for
    good: it becomes the only voter and leads (see ``RaftNode.force_new_configuration``)."""


class AdminRequest(Message, tag=114):
    call_id: int
    command: ChangeClusterState | PromoteMember | ShutdownMember | ShutdownCluster | RecoverLostMajority


ADMIN_OK = "ok"
ADMIN_FAILED = "failed"  # refused: the reason says why; nothing changed, and asking again will not help
ADMIN_UNAVAILABLE = "unavailable"  # no leader now, an election, the leader changed: ask again


class AdminReply(Message, tag=115):
    call_id: int
    status: str
    reason: str = ""


class LeaderRequest(Message, tag=116):
    """Member to leader: carry out a change only the leader can propose (for an admin request,
    or a member's own graceful shutdown)."""

    request_id: int
    command: ChangeClusterState | PromoteMember | ShutdownMember | ShutdownCluster


class LeaderReply(Message, tag=117):
    request_id: int
    status: str
    reason: str = ""
