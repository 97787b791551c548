"""The state every concern of a member reads and writes, and the helpers they share."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from shardgrid.core.config import MemberConfig
from shardgrid.core.effects import Effect, Emit, ReplyToClient, Send, SendToAddress, SetTimer
from shardgrid.core.identity import Replica
from shardgrid.core.messages import MemberEntry, MigrationRecord, TableEntry
from shardgrid.core.migration import Migration
from shardgrid.core.store import PartitionData
from shardgrid.core.table import PartitionTable

SENDER = "sender"  # the owner sending a partition's data
DESTINATION = "destination"
TICK = "tick"


@dataclass(slots=True)
class ActiveMigration:
    """A migration this member takes part in and whose outcome it does not know yet."""

    record: MigrationRecord
    role: str
    master: Replica
    started_ms: int
    last_progress_ms: int
    chunks: list[tuple[Any, ...]] = field(default_factory=list)  # sender: what to send
    replica_sequence: int = 0
    lineage: str = ""
    next_chunk: int = 0  # sender: the chunk awaiting an ack; destination: the chunk expected next
    last_sent_ms: int = 0
    staged: list[Any] = field(default_factory=list)  # destination: entries received so far
    complete: bool = False  # all data sent (sender) or received (destination)
    sending: bool = False  # sender: the data snapshot was taken and chunks are going out
    destination: Replica | None = None


@dataclass(slots=True)
class InFlight:
    """A migration the master started and has not yet committed or rolled back."""

    record: MigrationRecord
    participants: tuple[Replica, ...]
    sender: Replica | None
    started_ms: int
    stage: str  # "transfer" or "commit"
    last_sent_ms: int
    commit_entry: TableEntry | None = None


@dataclass(slots=True)
class PendingPromotion:
    entries: tuple[TableEntry, ...]
    last_sent_ms: int


@dataclass(slots=True)
class Recovery:
    """A new master gathering every member's partition state before it acts (seed 000, 1.2)."""

    waiting: set[Replica]
    replies: dict[Replica, Any]
    last_sent_ms: int


@dataclass(slots=True)
class Claim:
    suspected: tuple[Replica, ...]
    accepted: set[Replica]
    started_ms: int
    last_sent_ms: int


@dataclass(slots=True)
class PendingCall:
    client_address: str
    call_id: int
    results: list[Any]
    open_writes: int
    deadline_ms: int


@dataclass(slots=True)
class PendingWrite:
    call: PendingCall
    index: int  # position of the operation in the call
    operation: Any
    waiting: set[Replica]
    last_sent_ms: int


@dataclass(slots=True)
class OutgoingSync:
    sync_id: str
    chunks: list[tuple[Any, ...]]
    replica_sequence: int
    lineage: str
    progress: dict[Replica, int]  # backup -> chunk awaiting its ack
    last_sent_ms: int
    started_ms: int


@dataclass(slots=True)
class IncomingSync:
    sync_id: str
    next_chunk: int
    staged: list[Any]
    lineage: str = ""
    replica_sequence: int = 0


class MemberState:
    """Fields shared by every concern; see each mixin for what it does with them."""

    def __init__(
        self,
        identity: Replica,
        config: MemberConfig,
        seed_addresses: tuple[str, ...],
        rng: random.Random,
        lite: bool = False,
    ) -> None:
        config.validate()
        self.identity = identity
        self.config = config
        self.seed_addresses = seed_addresses
        self.rng = rng
        self.lite = lite
        self.now_ms = 0
        self.out: list[Effect] = []
        # membership
        self.joined = False
        self.heard_from_cluster = False
        self.started_ms = 0
        self.last_join_sent_ms = -(10**9)
        self.master: Replica | None = None
        self.member_list_version = 0
        self.term = 0  # which master's era this member is in: each election starts a higher one
        self.members: tuple[MemberEntry, ...] = ()
        self.last_heard: dict[Replica, int] = {}
        self.last_heartbeat_ms = -(10**9)
        self.last_tick_ms = 0
        self.distrust_until_ms = 0
        self.claim: Claim | None = None
        self.accepted_claimant: Replica | None = None
        self.accepted_claim_ms = 0
        self.quorum_lost_ms = -(10**9)
        # partition table
        self.table: PartitionTable | None = None
        self.completed: dict[str, MigrationRecord] = {}
        # participant side
        self.active: dict[int, ActiveMigration] = {}
        self.stores: dict[int, PartitionData] = {}
        # master side
        self.target: PartitionTable | None = None
        self.pending: dict[int, list[Migration]] = {}
        self.in_flight: dict[int, InFlight] = {}
        self.needs_rebalance = False
        self.drive_requested = False
        self.assignment_requested = False
        self.acked_versions: dict[Replica, list[int]] = {}
        self.promotions: dict[Replica, PendingPromotion] = {}
        self.recovery: Recovery | None = None
        self.migration_counter = 0
        self.last_full_publish_ms = -(10**9)
        self.table_changed_ms = 0
        # data
        self.pending_writes: dict[tuple[int, int], PendingWrite] = {}
        self.reorder: dict[int, dict[int, Any]] = {}
        self.outgoing_syncs: dict[int, OutgoingSync] = {}
        self.incoming_syncs: dict[int, IncomingSync] = {}
        self.sync_counter = 0
        self._departed_at_claim: list[Replica] = []

    # --- small helpers used everywhere ---------------------------------------------------------

    @property
    def is_master(self) -> bool:
        return self.joined and self.master == self.identity

    def member_replicas(self) -> list[Replica]:
        return [entry.replica for entry in self.members]

    def others(self) -> list[Replica]:
        return [entry.replica for entry in self.members if entry.replica != self.identity]

    def is_member(self, replica: Replica | None) -> bool:
        return replica is not None and any(entry.replica == replica for entry in self.members)

    def send(self, target: Replica, message: Any) -> None:
        self.out.append(Send(target, message))

    def send_to_address(self, address: str, message: Any) -> None:
        self.out.append(SendToAddress(address, message))

    def reply(self, client_address: str, message: Any) -> None:
        self.out.append(ReplyToClient(client_address, message))

    def emit(self, event: Any) -> None:
        self.out.append(Emit(event))

    def set_timer(self, name: str, at_ms: int) -> None:
        self.out.append(SetTimer(name, at_ms))

    def entry(self, partition_id: int) -> TableEntry:
        assert self.table is not None
        return TableEntry(partition_id, self.table.replicas[partition_id], self.table.versions[partition_id])

    def replica_index_of(self, partition_id: int, member: Replica) -> int:
        if self.table is None:
            return -1
        slots = self.table.replicas[partition_id]
        for index, held in enumerate(slots):
            if held == member:
                return index
        return -1

    def backups_of(self, partition_id: int) -> list[Replica]:
        """The backups the owner replicates writes to: slots 1..backup_count that are filled."""
        assert self.table is not None
        slots = self.table.replicas[partition_id][1 : self.config.backup_count + 1]
        return [r for r in slots if r is not None]

    # --- what one concern asks of another (implemented by the mixins in node.Member) ------------

    def on_became_master(self, recover: bool, departed: list[Replica] | None = None) -> None:
        raise NotImplementedError

    def on_member_joined(self, joiner: Replica, lite: bool) -> None:
        raise NotImplementedError

    def on_members_departed(self, departed: list[Replica]) -> None:
        raise NotImplementedError

    def start_recovery(self, departed: list[Replica]) -> None:
        raise NotImplementedError

    def publish(self, partition_ids: list[int], records: list[MigrationRecord]) -> None:
        raise NotImplementedError

    def publish_full(self, to: list[Replica] | None = None) -> None:
        raise NotImplementedError

    def record_completed(self, record: MigrationRecord) -> None:
        raise NotImplementedError

    def apply_entries(self, entries: tuple[TableEntry, ...]) -> list[int]:
        raise NotImplementedError

    def resolve_active(self, record: MigrationRecord) -> None:
        raise NotImplementedError

    def after_table_change(self, partition_ids: list[int]) -> None:
        raise NotImplementedError

    def on_migration_request(self, sender: Replica, message: Any) -> None:
        raise NotImplementedError

    def on_migration_commit(self, sender: Replica, message: Any) -> None:
        raise NotImplementedError

    def remove_members(self, departed: list[Replica]) -> None:
        raise NotImplementedError

    def repair(self, departed: list[Replica]) -> None:
        raise NotImplementedError

    def rejoin_as_new_member(self) -> None:
        raise NotImplementedError

    def deliver_to_self(self, message: Any) -> None:
        raise NotImplementedError

    def sync_after_promotion(self, partition_ids: list[int]) -> None:
        raise NotImplementedError

    def resolve_overtaken(self, partition_ids: list[int]) -> None:
        raise NotImplementedError

    def request_assignment(self) -> None:
        raise NotImplementedError

    def drive_migrations(self) -> None:
        raise NotImplementedError
