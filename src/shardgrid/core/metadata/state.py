"""The metadata as one immutable value, and the pure function that applies commands to it.

Immutability is what makes snapshots free (the snapshot is a reference to the state at an index)
and lets the leader plan against exactly what every member will have applied. ``apply_commands``
also reports what changed, so that each member reacts (installs data, drops data, syncs backups)
only where something did.

A command that no longer fits the state (a migration whose partition moved on, a member already
gone) changes nothing and is reported in ``Changes.refused``: every member skips it alike.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import msgspec

from shardgrid.core.errors import InvariantViolation, invariant
from shardgrid.core.identity import MemberId
from shardgrid.core.limits import MAX_COMPLETED_IN_METADATA
from shardgrid.core.metadata.cluster_state import ClusterState
from shardgrid.core.metadata.commands import (
    AddMembers,
    AssignPartitions,
    AwaitMembers,
    FinishMigrations,
    MarkLeaving,
    MarkReachable,
    MarkUnreachable,
    MemberRecord,
    PromoteToDataMember,
    ReaddressMember,
    RemoveMembers,
    ResumeAfterShutdown,
    ReviveUnavailable,
    SetClusterState,
    StartMigrations,
    StopAllMembers,
)
from shardgrid.core.migration import MigrationOutcome, MigrationRecord, apply_migration, migration_fits
from shardgrid.core.repair import Repair
from shardgrid.core.repair import remove_members as repair_table
from shardgrid.core.schedule import participants_of
from shardgrid.core.table import PartitionTable, ReplicaSlots

_STATE_FIELDS = (
    "partition_count",
    "members",
    "table",
    "cluster_state",
    "migrations",
    "completed",
    "shut_down",
    "parting",
    "shutting_down",
)


class MetadataState:
    """The cluster's metadata after some prefix of the log. Compared by identity: two states are
    the same only if they are the same object (a snapshot is a reference to one). A plain class,
    so that its derived views can be cached on it and the codec writes only what defines it."""

    __slots__ = (*_STATE_FIELDS, "_by_replica", "_load", "_committed_ids", "_stand_ins", "_any_unreachable")

    def __init__(
        self,
        partition_count: int,
        members: tuple[MemberRecord, ...] = (),
        table: PartitionTable | None = None,
        cluster_state: ClusterState = ClusterState.ACTIVE,
        migrations: Mapping[int, MigrationRecord] | None = None,  # in flight, by partition
        completed: tuple[MigrationRecord, ...] = (),  # the newest outcomes, oldest first
        shut_down: bool = False,
        # Every data member asked to leave (the last by a signal): nobody is left to take their
        # replicas, so every member stops, as after a cluster shutdown. Only a leave sets it: when
        # the members that stayed crashed instead, the leaving ones keep what they hold and wait
        # (for a member to join and take it, or graceful_shutdown_timeout_ms), found by an outside
        # tester: three of four members signalled and the fourth killed dropped every entry.
        parting: bool = False,
        # PASSIVE for a cluster shutdown (``SetClusterState.for_shutdown``) that has not stopped
        # the members yet: a cluster restarted from its disks after a crash in between resumes,
        # as after the shutdown itself (found by an outside tester: it came back PASSIVE for good).
        shutting_down: bool = False,
    ) -> None:
        self.partition_count = partition_count
        self.members = members
        self.table = table
        self.cluster_state = cluster_state
        self.migrations: Mapping[int, MigrationRecord] = migrations if migrations is not None else {}
        self.completed = completed
        self.shut_down = shut_down
        self.parting = parting
        self.shutting_down = shutting_down
        # Derived views, computed on first use: the state never changes, so neither do they.
        self._by_replica: dict[MemberId, MemberRecord] | None = None
        self._load: dict[MemberId, int] | None = None
        self._committed_ids: frozenset[str] | None = None
        self._stand_ins: dict[int, MemberId | None] | None = None
        self._any_unreachable: bool | None = None

    @property
    def stopping(self) -> bool:
        """Whether the log says the cluster was stopping when it was last written: shut down,
        every data member leaving, or PASSIVE for a shutdown not done yet. A member back from its
        disk in such a state stays, and as leader resumes the cluster (``ResumeAfterShutdown``)."""
        return self.shut_down or self.parting or self.shutting_down

    def evolve(self, **changes: object) -> MetadataState:
        """A new state with some fields replaced (the derived views are computed afresh)."""
        fields = {name: getattr(self, name) for name in _STATE_FIELDS}
        unknown = set(changes) - set(fields)
        if unknown:
            raise InvariantViolation(f"not fields of the metadata state: {sorted(unknown)}")
        fields.update(changes)
        return MetadataState(**fields)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        table = self.table.stamp if self.table is not None else None
        return (
            f"MetadataState(partitions={self.partition_count}, members={len(self.members)}, "
            f"table_stamp={table}, state={self.cluster_state.name}, migrations={len(self.migrations)})"
        )

    def record_of(self, replica: MemberId) -> MemberRecord | None:
        index = self._by_replica
        if index is None:
            index = {r.id: r for r in self.members}
            self._by_replica = index
        return index.get(replica)

    def is_member(self, replica: MemberId | None) -> bool:
        return replica is not None and self.record_of(replica) is not None

    def migration_load(self) -> dict[MemberId, int]:
        """How many running migrations each member takes part in (as a participant)."""
        load = self._load
        if load is None:
            load = {}
            for record in self.migrations.values():
                for member in self.participants(record):
                    load[member] = load.get(member, 0) + 1
            self._load = load
        return load

    def committed(self, migration_id: str) -> bool:
        """Whether the newest outcomes the state keeps include this migration, committed."""
        ids = self._committed_ids
        if ids is None:
            ids = frozenset(r.migration_id for r in self.completed if r.outcome is MigrationOutcome.COMMITTED)
            self._committed_ids = ids
        return migration_id in ids

    @property
    def member_ids(self) -> tuple[MemberId, ...]:
        return tuple(r.id for r in self.members)

    @property
    def awaited_members(self) -> tuple[MemberId, ...]:
        """Members a hot restart waits for (not back from the cluster's restart yet)."""
        return tuple(r.id for r in self.members if r.awaited)

    @property
    def unreachable_members(self) -> tuple[MemberId, ...]:
        """Members kept, though silent, because they hold every replica left of a partition."""
        return tuple(r.id for r in self.members if r.unreachable)

    def any_unavailable(self) -> bool:
        """Whether any partition may be unavailable: a member is marked unreachable."""
        any_unreachable = self._any_unreachable
        if any_unreachable is None:
            any_unreachable = self._any_unreachable = any(r.unreachable for r in self.members)
        return any_unreachable

    def unavailable(self, pid: int) -> bool:
        """Whether every replica of ``pid`` is on unreachable members: neither served nor reassigned
        (its owner is unreachable only then: a partition with a replica elsewhere was repaired)."""
        if not self.any_unavailable():
            return False  # the usual answer, asked for every partition a request touches
        table = self.table
        owner = table.owner(pid) if table is not None else None
        record = self.record_of(owner) if owner is not None else None
        return record is not None and record.unreachable

    def stand_in(self, pid: int) -> MemberId | None:
        """Who serves an unavailable partition's maps that choose availability
        (``serve_when_unavailable``): None while ``pid`` is available. A member that answers and
        keeps data (a leaving one too: it still serves until it is removed), picked by rendezvous
        hashing on the partition and the member's identity, so that every member names the same
        one and a member joining or going takes over, or hands over, few partitions."""
        if not self.unavailable(pid):
            return None
        cache = self._stand_ins
        if cache is None:
            cache = self._stand_ins = {}
        if pid not in cache:
            candidates = [r.id for r in self.members if not r.lite and not r.unreachable]
            cache[pid] = max(candidates, key=lambda m: _rendezvous(pid, m), default=None)
        return cache[pid]

    def unavailable_partitions(self) -> list[int]:
        if self.table is None or not any(r.unreachable for r in self.members):
            return []
        return [pid for pid in range(self.table.partition_count) if self.unavailable(pid)]

    @property
    def data_members(self) -> tuple[MemberId, ...]:
        """Members that may hold replicas in the target table: not lite, not leaving, answering."""
        return tuple(r.id for r in self.members if not r.lite and not r.leaving and not r.unreachable)

    @property
    def leaving_data_members(self) -> tuple[MemberId, ...]:
        """Data members recorded leaving: each hands its replicas over by migration."""
        return tuple(r.id for r in self.members if not r.lite and r.leaving)

    def state_change_problem(self, cluster_state: ClusterState) -> str:
        """Why ``cluster_state`` cannot be taken now ('' when it can): a state that forbids
        migration would keep a leaving data member from ever handing its replicas over. Asked by
        the leader before it proposes and again when the entry is applied (a leave proposed in
        between is not in the leader's state yet)."""
        leaving = self.leaving_data_members
        if cluster_state.migration_allowed or not leaving or self.table is None:
            return ""
        return (
            f"{leaving[0]} is leaving and hands its replicas over by migration, which the state "
            f"{cluster_state.value} forbids: wait until it has left"
        )

    def leave_problem(self, member: MemberId, even_if_last: bool = False) -> str:
        """Why data member ``member`` cannot begin to leave now ('' when it can): nobody else stays
        to take its replicas (unless its process stops anyway, ``even_if_last``: then nothing is
        handed over, whatever the state), or the cluster state forbids the migrations that would
        move them. Asked before the leader proposes the leave and when it is applied."""
        if self.table is None:
            return ""
        if not self.others_stay(member):
            return (
                ""
                if even_if_last
                else "the last data member cannot hand its replicas over to anyone: shut the cluster down"
            )
        if not self.cluster_state.migration_allowed:
            return (
                f"the cluster state is {self.cluster_state.value}: nothing migrates, so this member cannot hand "
                "its replicas over; set the state to active (rebalance resume) first"
            )
        return ""

    def others_stay(self, member: MemberId) -> bool:
        """Whether a data member other than ``member`` stays (not lite, not leaving) to take its
        replicas: what a leave of ``member`` is checked against, both before the leader proposes it
        and when it is applied."""
        return any(r != member for r in self.data_members)

    def participants(self, record: MigrationRecord) -> tuple[MemberId, ...]:
        """Who a migration keeps busy: source, destination and the owner that sends the data (a
        CLEAR sends none: it keeps only its source busy), as the schedule counts them."""
        owner = self.table.owner(record.partition_id) if self.table is not None else None
        return participants_of(record.migration, owner)


def _rendezvous(pid: int, member: MemberId) -> int:
    return zlib.crc32(f"{pid}/{member.uuid}".encode())


@dataclass(slots=True, kw_only=True)
class Changes:
    """What one applied entry changed, for the member to react to."""

    members_added: list[MemberRecord] = field(default_factory=list)
    members_removed: list[MemberId] = field(default_factory=list)
    members_readdressed: list[tuple[MemberId, MemberId]] = field(default_factory=list)  # (old, new)
    members_changed: list[MemberId] = field(default_factory=list)  # promoted to data, or leaving
    members_unreachable: list[MemberId] = field(default_factory=list)
    members_reachable: list[MemberId] = field(default_factory=list)
    members_awaited: list[MemberId] = field(default_factory=list)  # a hot restart waits for them
    unavailable: list[int] = field(default_factory=list)  # partitions kept for unreachable members
    available: list[int] = field(default_factory=list)  # partitions whose members answer again
    partitions: set[int] = field(default_factory=set)  # slots or version changed
    promoted: list[tuple[int, MemberId]] = field(default_factory=list)  # (partition, new owner) by repair
    lost: list[int] = field(default_factory=list)
    promoted_from: list[tuple[int, int]] = field(default_factory=list)  # (partition, the new owner's old index)
    started: list[MigrationRecord] = field(default_factory=list)
    finished: list[MigrationRecord] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    refused_migrations: list[str] = field(default_factory=list)  # ids of starts that did not apply
    cluster_state: ClusterState | None = None
    table_assigned: bool = False
    shut_down: bool = False
    resumed: bool = False  # the cluster runs again after a shutdown (nobody leaving any more)

    @property
    def table_changed(self) -> bool:
        return bool(self.partitions) or self.table_assigned


def apply_commands(state: MetadataState, commands: tuple[object, ...]) -> tuple[MetadataState, Changes]:
    changes = Changes()
    for command in commands:
        state = _apply(state, command, changes)
    invariant(
        not _stuck_leaving(state),
        lambda: f"{_stuck_leaving(state)} leaving in the state {state.cluster_state.value}: nothing frees them",
    )
    return state, changes


def _stuck_leaving(state: MetadataState) -> tuple[MemberId, ...]:
    """Leaving data members that hold replicas while the state forbids the migrations that would
    hand them over. PASSIVE only comes with the cluster's shutdown, which stops the leaving members
    too; when no data member stays (parting), nothing is handed over whatever the state; and one
    that holds nothing (no table yet, or a table assigned without it) is simply removed."""
    table = state.table
    if state.cluster_state in (ClusterState.ACTIVE, ClusterState.PASSIVE) or state.parting or table is None:
        return ()
    return tuple(m for m in state.leaving_data_members if any(m in slots for slots in table.replicas))


def _apply(state: MetadataState, command: object, changes: Changes) -> MetadataState:
    if isinstance(command, AddMembers):
        fresh = tuple(m for m in command.members if not state.is_member(m.id))
        changes.members_added.extend(fresh)
        return state.evolve(members=state.members + fresh)
    if isinstance(command, RemoveMembers):
        return _remove(state, command, changes)
    if isinstance(command, StartMigrations):
        return _start(state, command, changes)
    if isinstance(command, FinishMigrations):
        return _finish(state, command, changes)
    if isinstance(command, AssignPartitions):
        if state.table is not None or command.table.partition_count != state.partition_count:
            changes.refused.append("the partitions are assigned already")
            return state
        changes.table_assigned = True
        changes.partitions.update(range(state.partition_count))
        return state.evolve(table=command.table)
    if isinstance(command, SetClusterState):
        if not isinstance(command.state, ClusterState):
            changes.refused.append(f"not a cluster state: {command.state!r}")
            return state
        problem = "" if command.for_shutdown else state.state_change_problem(command.state)
        if problem:
            changes.refused.append(problem)
            return state
        changes.cluster_state = command.state
        return state.evolve(cluster_state=command.state, shutting_down=command.for_shutdown)
    if isinstance(command, PromoteToDataMember | MarkLeaving):
        record = state.record_of(command.member)
        if record is None:
            changes.refused.append(f"{command.member} is not a member")
            return state
        problem = ""
        if isinstance(command, MarkLeaving) and not record.lite:
            problem = state.leave_problem(command.member, command.even_if_last)
        elif isinstance(command, PromoteToDataMember) and record.leaving:
            # Found by an outside tester: a lite member asked to leave and to be promoted at once
            # became a leaving data member in a paused state (and took replicas it would hand back).
            problem = "a leaving member is not promoted"
        if problem:
            changes.refused.append(f"{command.member}: {problem}")
            return state
        if isinstance(command, PromoteToDataMember):
            updated = msgspec.structs.replace(record, lite=False)
        else:
            updated = msgspec.structs.replace(record, leaving=True)
        changes.members_changed.append(command.member)
        after = state.evolve(members=tuple(updated if r is record else r for r in state.members))
        if isinstance(command, MarkLeaving) and not record.lite and not after.data_members:
            after = after.evolve(parting=True)
        return after
    if isinstance(command, StopAllMembers):
        changes.shut_down = True
        return state.evolve(shut_down=True)
    if isinstance(command, ResumeAfterShutdown):
        if not state.stopping:
            return state
        if state.cluster_state is not ClusterState.ACTIVE:
            changes.cluster_state = ClusterState.ACTIVE
        changes.resumed = True
        members = tuple(msgspec.structs.replace(r, leaving=False) if r.leaving else r for r in state.members)
        return state.evolve(
            shut_down=False, parting=False, shutting_down=False, cluster_state=ClusterState.ACTIVE, members=members
        )
    if isinstance(command, MarkUnreachable):
        return _mark_unreachable(state, command, changes)
    if isinstance(command, MarkReachable):
        return _mark_reachable(state, command, changes)
    if isinstance(command, ReviveUnavailable):
        return _revive(state, changes)
    if isinstance(command, ReaddressMember):
        return _readdress(state, command, changes)
    if isinstance(command, AwaitMembers):
        waited = {m for m in command.members if (r := state.record_of(m)) is not None and not r.unreachable}
        if not waited:
            return state
        changes.members_awaited.extend(sorted(waited))
        members = tuple(msgspec.structs.replace(r, awaited=True) if r.id in waited else r for r in state.members)
        return state.evolve(members=members)
    changes.refused.append(f"unknown command {type(command).__name__}")
    return state


def _mark_unreachable(state: MetadataState, command: MarkUnreachable, changes: Changes) -> MetadataState:
    marked = sorted({m for m in command.members if (r := state.record_of(m)) is not None and not r.unreachable})
    if not marked:
        return state
    changes.members_unreachable.extend(marked)
    members = tuple(
        msgspec.structs.replace(r, unreachable=True, awaited=False) if r.id in marked else r for r in state.members
    )
    state = _roll_back_migrations_of(state.evolve(members=members), set(marked), changes)
    table = state.table
    if table is None:
        return state
    repair = repair_table(table, [*state.unreachable_members], keep_unsurvived=True)
    _record_repair(table, repair, changes)
    changes.unavailable.extend(pid for pid in repair.lost_partitions if not _was_unavailable(table, pid, marked))
    return state.evolve(table=repair.table)


def _was_unavailable(table: PartitionTable, pid: int, marked: list[MemberId]) -> bool:
    """Whether ``pid`` was unavailable before ``marked`` were (its replicas on other unreachable members only)."""
    return not any(r in marked for r in table.replicas[pid] if r is not None)


def _mark_reachable(state: MetadataState, command: MarkReachable, changes: Changes) -> MetadataState:
    back = sorted(
        {m for m in command.members if (r := state.record_of(m)) is not None and (r.unreachable or r.awaited)}
    )
    if not back:
        return state
    before = set(state.unavailable_partitions())
    changes.members_reachable.extend(back)
    members = tuple(
        msgspec.structs.replace(r, unreachable=False, awaited=False) if r.id in back else r for r in state.members
    )
    after = state.evolve(members=members)
    changes.available.extend(sorted(before - set(after.unavailable_partitions())))
    return after


def _readdress(state: MetadataState, command: ReaddressMember, changes: Changes) -> MetadataState:
    """The member ``old`` listens at ``new``'s address now: the same member, so its record and its
    table slots are renamed, not repaired. A migration it took part in is rolled back first (its
    messages went to the old address); one marked unreachable answers again."""
    old, new = command.old, command.new
    record = state.record_of(old)
    taken = any(m.address == new.address for m in state.member_ids)  # (itself included, or another)
    if record is None or taken or old.uuid != new.uuid:
        changes.refused.append(f"{old} cannot take the address of {new}")
        return state
    before = set(state.unavailable_partitions())
    state = _roll_back_migrations_of(state, {old}, changes)
    renamed = msgspec.structs.replace(record, id=new, unreachable=False, awaited=False)
    members = tuple(renamed if r.id == old else r for r in state.members)
    changes.members_readdressed.append((old, new))
    if record.unreachable or record.awaited:
        changes.members_reachable.append(new)
    table = state.table
    if table is None:
        return state.evolve(members=members)
    updates = {
        pid: (tuple(new if r == old else r for r in slots), table.versions[pid] + 1)
        for pid, slots in enumerate(table.replicas)
        if old in slots
    }
    changes.partitions.update(updates)
    after = state.evolve(members=members, table=table.with_partitions(updates) if updates else table)
    changes.available.extend(sorted(before - set(after.unavailable_partitions())))
    return after


def _revive(state: MetadataState, changes: Changes) -> MetadataState:
    """Empty every unavailable partition: lost, and given new replicas by the rebalance."""
    table = state.table
    pids = state.unavailable_partitions()
    if table is None or not pids:
        return state
    empty: tuple[MemberId | None, ...] = (None,) * len(table.replicas[0])
    updates = {pid: (empty, table.versions[pid] + 1) for pid in pids}
    changes.lost.extend(pids)
    changes.partitions.update(pids)
    return state.evolve(table=table.with_partitions(updates))


def _roll_back_migrations_of(state: MetadataState, gone: set[MemberId], changes: Changes) -> MetadataState:
    """A migration one of ``gone`` took part in cannot finish: roll it back."""
    rolled_back = [
        record for pid, record in sorted(state.migrations.items()) if gone.intersection(state.participants(record))
    ]
    if not rolled_back:
        return state
    state = _finish(
        state,
        FinishMigrations(tuple(r.with_outcome(MigrationOutcome.ROLLED_BACK) for r in rolled_back)),
        changes,
    )
    if state.table is None:
        raise InvariantViolation("a rollback removed the partition table")
    return state


def _record_repair(table: PartitionTable, repair: Repair, changes: Changes) -> None:
    for pid, promotion in repair.promotions:
        if promotion.destination is not None:
            changes.promoted.append((pid, promotion.destination))
            changes.promoted_from.append((pid, promotion.destination_current_index))
    changes.partitions.update(repair.changed)


def _remove(state: MetadataState, command: RemoveMembers, changes: Changes) -> MetadataState:
    departed = sorted({r for r in command.members if state.is_member(r)})
    if not departed:
        return state
    gone = set(departed)
    changes.members_removed.extend(departed)
    members = tuple(r for r in state.members if r.id not in gone)
    if state.table is None:
        return state.evolve(members=members)
    # A migration one of them took part in cannot finish: roll it back before repairing the table.
    state = _roll_back_migrations_of(state, gone, changes)
    table = state.table
    invariant(table is not None, "a rollback keeps the partition table")
    # A partition with a replica left on an unreachable member promotes it and stays unavailable
    # (its owner unreachable), not lost.
    repair = repair_table(table, departed)
    _record_repair(table, repair, changes)
    changes.lost.extend(repair.lost_partitions)
    return state.evolve(members=members, table=repair.table)


def _start(state: MetadataState, command: StartMigrations, changes: Changes) -> MetadataState:
    table = state.table
    migrations = dict(state.migrations)
    for record in command.records:
        pid = record.partition_id
        refused_before = len(changes.refused)
        if table is None or not 0 <= pid < table.partition_count:
            changes.refused.append(f"migration {record.migration_id}: no such partition")
        elif pid in migrations:
            changes.refused.append(f"migration {record.migration_id}: partition {pid} is migrating already")
        elif table.versions[pid] != record.version_before:
            changes.refused.append(f"migration {record.migration_id}: partition {pid} moved on")
        elif not migration_fits(table.replicas[pid], record.migration):
            changes.refused.append(f"migration {record.migration_id}: does not fit partition {pid}")
        elif any(not state.is_member(m) for m in (record.migration.source, record.migration.destination) if m):
            changes.refused.append(f"migration {record.migration_id}: a participant is not a member")
        else:
            migrations[pid] = record
            changes.started.append(record)
        if len(changes.refused) > refused_before:
            changes.refused_migrations.append(record.migration_id)
    return state.evolve(migrations=migrations)


def _finish(state: MetadataState, command: FinishMigrations, changes: Changes) -> MetadataState:
    table = state.table
    if table is None:
        return state
    migrations = dict(state.migrations)
    updates: dict[int, tuple[ReplicaSlots, int]] = {}
    completed = list(state.completed)
    for outcome in command.records:
        pid = outcome.partition_id
        running = migrations.get(pid)
        if running is None or running.migration_id != outcome.migration_id:
            changes.refused.append(f"migration {outcome.migration_id} is not in flight")
            continue
        slots, version = updates.get(pid, (table.replicas[pid], table.versions[pid]))
        if outcome.outcome is MigrationOutcome.COMMITTED:
            updates[pid] = (tuple(apply_migration(slots, running.migration)), running.version_before + 1)
        else:
            updates[pid] = (slots, max(version + 1, running.version_before + 2))
        del migrations[pid]
        record = running.with_outcome(outcome.outcome)
        completed.append(record)
        changes.finished.append(record)
    if not updates:
        return state.evolve(migrations=migrations)
    changes.partitions.update(updates)
    return state.evolve(
        table=table.with_partitions(updates),
        migrations=migrations,
        completed=tuple(completed[-MAX_COMPLETED_IN_METADATA:]),
    )
