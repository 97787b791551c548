"""The leader's side of repartitioning: planning, the parallel schedule, and safe commits.

The leader (Hazelcast's master) does what the seeds give the master to do. It plans from the
metadata it applied (which every member will have applied too), proposes the migrations to start,
and drives each one: the owner streams the data, the destination commits first (seed 000, 2.1),
then the log records the outcome, then the source drops. A migration that fails is rolled back in
the log, with the partition's version bumped by two. The outcomes that arrive during one event
go into one entry.

Any change of membership, table or state throws the rest of the plan away, and the next drive
plans again from the table as it is (seed 000, 3.2: the algorithm is stateless). A new leader
finds the migrations still in flight in the log and asks each destination whether it committed:
it commits those that did and rolls back the rest (seed 000, 1.2 and 2.2).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardgrid.core import events
from shardgrid.core.identity import MemberId, MemberInfo
from shardgrid.core.member.consensus import Consensus
from shardgrid.core.member.context import Context
from shardgrid.core.messages import (
    MigrationCommit,
    MigrationCommitAck,
    MigrationDataDone,
    MigrationOutcomeQuery,
    MigrationOutcomeReply,
    MigrationProgress,
)
from shardgrid.core.metadata import Changes, MetadataState
from shardgrid.core.metadata.commands import AssignPartitions, FinishMigrations, StartMigrations
from shardgrid.core.migration import Migration, MigrationKind, MigrationOutcome, MigrationRecord, migration_fits
from shardgrid.core.placement import PLAN_SLICE_VISITS, Steps, advance, arranging
from shardgrid.core.planner import plan_migrations, prioritize_copies_and_shift_ups
from shardgrid.core.rebalance import RebalancePlan, planning_rebalance
from shardgrid.core.schedule import ScheduledMigration, next_migrations
from shardgrid.core.table import PartitionTable

# The leader's own bound on a transfer it hears nothing about (the sender has a tighter one).
TRANSFER_BACKSTOP_TIMEOUTS = 3
# Shares (``placement.PLAN_SLICE_VISITS`` partition visits each) of a table's arrangement or of a
# rebalance's plan one drive does: a table of 20,000 partitions is planned over several events,
# none of them long.
PLAN_SLICES_PER_DRIVE = 2
# A plan of a small table is made in one drive (counted in steps, each a few visits, it took
# several: members waited a tick for each).
PLAN_VISITS_PER_DRIVE = PLAN_SLICES_PER_DRIVE * PLAN_SLICE_VISITS


class Stage(enum.Enum):
    TRANSFER = "transfer"  # the owner streams the data to the destination
    COMMIT = "commit"  # the destination was asked to commit
    RECOVERING = "recovering"  # started under an earlier leader: the destination is asked how it ended
    DECIDED = "decided"  # the outcome is proposed; the log will apply it


@dataclass(slots=True, kw_only=True)
class Flight:
    record: MigrationRecord
    stage: Stage
    started_ms: int  # or when its sender last said the transfer goes on (MigrationProgress)
    last_sent_ms: int
    stage_since_ms: int


class MigrationLeader:
    def __init__(self, ctx: Context, consensus: Consensus, deliver_to_self: Callable[[Any], None]) -> None:
        self.ctx = ctx
        self.consensus = consensus
        self.deliver_to_self = deliver_to_self
        self.flights: dict[int, Flight] = {}
        self.pending: dict[int, list[Migration]] = {}
        self.target: PartitionTable | None = None
        self.needs_rebalance = False
        self.assignment_requested = False
        self._proposed_starts: dict[int, MigrationRecord] = {}
        self._outcomes: list[MigrationRecord] = []
        self._counter = 0
        # A first table being arranged, or a rebalance being planned, a share a drive.
        self._assigning: Steps[PartitionTable] | None = None
        self._planning: Steps[RebalancePlan] | None = None

    # --- leadership ------------------------------------------------------------------------------

    def reset(self, leading: bool) -> None:
        self.flights = {}
        self.pending = {}
        self.target = None
        self._proposed_starts = {}
        self._outcomes = []
        self._assigning = self._planning = None
        self.needs_rebalance = leading

    def in_flight_load(self) -> dict[MemberId, int]:
        """How many running migrations each member takes part in, as this leader counts them."""
        state = self.consensus.state
        if not self._proposed_starts:
            return state.migration_load()
        load = dict(state.migration_load())
        table = state.table
        for record in self._proposed_starts.values():
            if table is not None and table.versions[record.partition_id] != record.version_before:
                # Its partition moved on since it was proposed (a repair promoted a backup): its
                # start will be refused when applied, and it would count against members it never
                # takes (found by the simulator: seed 30 of the beyond-the-backups search counted
                # 16 such starts, 12 on one member with a limit of 10).
                continue
            for member in state.participants(record):
                load[member] = load.get(member, 0) + 1
        return load

    @property
    def idle(self) -> bool:
        """Nothing planned, proposed or running."""
        return (
            not self.needs_rebalance
            and self._planning is None
            and not any(self.pending.values())
            and not self._proposed_starts
            and not self.consensus.state.migrations
        )

    # --- the log ---------------------------------------------------------------------------------

    def on_applied(self, term: int, changes: Changes) -> None:
        own_entry = self.consensus.is_leader and term == self.consensus.term
        for record in changes.started:
            if own_entry:
                self._emit(events.MigrationPhase.STARTED, record)
            if not self.consensus.leader_ready:
                continue
            self._proposed_starts.pop(record.partition_id, None)
            self._begin(record)
        for migration_id in changes.refused_migrations:
            self._proposed_starts = {
                pid: r for pid, r in self._proposed_starts.items() if r.migration_id != migration_id
            }
            self.needs_rebalance = True
        for record in changes.finished:
            if own_entry:
                outcome = events.MigrationPhase.FINISHED
                if record.outcome is not MigrationOutcome.COMMITTED:
                    outcome = events.MigrationPhase.FAILED
                self._emit(outcome, record)
            flight = self.flights.get(record.partition_id)
            if flight is not None and flight.record.migration_id == record.migration_id:
                del self.flights[record.partition_id]
            if record.outcome is MigrationOutcome.COMMITTED:
                self._replan_partition(record.partition_id)
            else:
                self.needs_rebalance = True
        if own_entry:
            for pid in changes.lost:
                self.ctx.emit(events.PartitionLost(pid))
            # A backup promoted from slot k survived k lost replicas: maps with fewer backups than
            # that had no copy left (seed 001: a map's backup count is what it may lose).
            fewest = self.ctx.config.fewest_backups
            for pid, index in changes.promoted_from:
                if index > fewest:
                    self.ctx.emit(events.PartitionLost(pid, index))
        if (
            changes.members_added
            or changes.members_removed
            or changes.members_readdressed
            or changes.members_changed
            or changes.members_unreachable
            or changes.members_reachable
            or changes.promoted
            or changes.lost
            or changes.cluster_state is not None
            or changes.table_assigned
            or changes.resumed
        ):
            self.needs_rebalance = True

    def _begin(self, record: MigrationRecord) -> None:
        pid = record.partition_id
        now = self.ctx.now_ms
        flight = Flight(record=record, stage=Stage.TRANSFER, started_ms=now, last_sent_ms=now, stage_since_ms=now)
        self.flights[pid] = flight
        table = self.consensus.state.table
        if record.migration.destination is None:
            flight.stage = Stage.DECIDED  # a CLEAR: nothing to copy, its outcome is in the same entry
        elif table is not None and table.owner(pid) is None:
            self._ask_commit(flight)  # a lost partition restarts empty: there is no data to send

    # --- driving ---------------------------------------------------------------------------------

    def tick(self) -> None:
        if not self.consensus.leader_ready:
            return
        self._adopt_inherited()
        self._retry()
        self.drive()

    def drive(self) -> None:
        if not self.consensus.leader_ready:
            return
        state = self.consensus.state
        if state.shut_down:
            return
        if state.table is None:
            self.needs_rebalance = False  # nothing to move before the first table
            self._maybe_assign(state)
            return
        if not state.cluster_state.migration_allowed:
            return
        if self.needs_rebalance or self._planning is not None:
            self._rebalance(state)
        self._schedule(state)

    def propose_outcomes(self) -> None:
        """The outcomes decided during this event, as one command (called before the log flush)."""
        if self._outcomes and self.consensus.leader_ready:
            self.consensus.propose(FinishMigrations(tuple(self._outcomes)))
        self._outcomes = []

    def request_assignment(self) -> None:
        self.assignment_requested = True

    def _maybe_assign(self, state: MetadataState) -> None:
        config = self.ctx.config
        if config.assign_partitions_on_first_use and not self.assignment_requested:
            return
        if self._assigning is None:
            infos = self._member_infos(state)
            if not any(not i.lite for i in infos):
                return
            empty = PartitionTable.empty(config.partition_count)
            self._assigning = arranging(infos, empty, self._plan_rng(), backup_count=config.table_backup_count)
        arranged = advance(self._assigning, PLAN_VISITS_PER_DRIVE)
        if arranged is None:
            return
        self._assigning = None
        self.consensus.propose(AssignPartitions(arranged.with_versions(1)))

    def _plan_rng(self) -> random.Random:
        """A plan's own generator, drawn once from the member's: what else draws while a plan is
        made a share a drive changes nothing of it."""
        return random.Random(self.ctx.rng.getrandbits(64))

    @staticmethod
    def _member_infos(state: MetadataState) -> list[MemberInfo]:
        # A leaving member owns nothing in the target (it only hands over), nor does one that
        # stopped answering (it keeps only what is unavailable without it): to arrange, both are lite.
        return [MemberInfo(r.id, r.lite or r.leaving or r.unreachable) for r in state.members]

    def _rebalance(self, state: MetadataState) -> None:
        """Plan a rebalance, a share a drive; one the members changed under is begun again. Until
        it is made, nothing of the last plan is started (it was made for other members)."""
        table = state.table
        if table is None:
            return
        if self.needs_rebalance:
            self.needs_rebalance = False
            self.pending = {}
            infos = self._member_infos(state)
            self._planning = None
            if any(not i.lite for i in infos):
                self._planning = planning_rebalance(
                    infos,
                    table,
                    self._plan_rng(),
                    backup_count=self.ctx.config.table_backup_count,
                    keep=state.leaving_data_members,
                    frozen=frozenset(state.unavailable_partitions()),
                )
        if self._planning is None:
            return
        plan = advance(self._planning, PLAN_VISITS_PER_DRIVE)
        if plan is None:
            return
        self._planning = None
        self.target = plan.target
        busy = set(state.migrations) | set(self._proposed_starts)
        self.pending = {pid: list(queue) for pid, queue in plan.migrations.items() if pid not in busy}

    def _replan_partition(self, pid: int) -> None:
        """A partition whose migration ran while the plan was made gets its plan now."""
        state = self.consensus.state
        if self._planning is not None:
            return  # the plan being made covers it
        if state.table is None or self.target is None or self.pending.get(pid) or state.unavailable(pid):
            return
        held, wanted = state.table.replicas[pid], self.target.replicas[pid]
        if held != wanted and all(r is None or state.is_member(r) for r in wanted):
            queue = prioritize_copies_and_shift_ups(plan_migrations(held, wanted, state.leaving_data_members))
            if queue:
                self.pending[pid] = queue

    def _schedule(self, state: MetadataState) -> None:
        table = state.table
        if table is None:
            return
        self.pending = {pid: queue for pid, queue in self.pending.items() if queue}
        records = {**state.migrations, **self._proposed_starts}
        running = [ScheduledMigration(pid, r.migration, state.participants(r)) for pid, r in sorted(records.items())]
        startable = self._without_early_clears(state, records)
        started = next_migrations(startable, running, self.ctx.config.max_parallel_migrations, owner_of=table.owner)
        starts: list[MigrationRecord] = []
        clears: list[MigrationRecord] = []
        for scheduled in started:
            pid = scheduled.partition_id
            migration = self.pending[pid].pop(0)
            if not migration_fits(table.replicas[pid], migration) or any(
                not state.is_member(p) for p in migration.participants
            ):
                self.needs_rebalance = True  # the plan is stale: plan again on the next drive
                continue
            self._counter += 1
            record = MigrationRecord(
                migration_id=f"{self.ctx.identity.uuid[:8]}-{self.consensus.term}-{self._counter}",
                partition_id=pid,
                migration=migration,
                version_before=table.versions[pid],
            )
            self._proposed_starts[pid] = record
            starts.append(record)
            if migration.kind is MigrationKind.CLEAR:
                clears.append(record.with_outcome(MigrationOutcome.COMMITTED))
        if starts:
            self.consensus.propose(StartMigrations(tuple(starts)))
        if clears:
            self.consensus.propose(FinishMigrations(tuple(clears)))

    def _without_early_clears(
        self, state: MetadataState, records: dict[int, MigrationRecord]
    ) -> dict[int, list[Migration]]:
        """The pending queues, less those whose next step empties a slot of a leaving member while
        any replica still has to move, or while a member holding the partition's other copies has
        not answered lately: the leaving member's copy stays a backup until then (as a leaving
        member stays in Hazelcast's table until it goes). Emptied at once, a partition already
        moved to the one member that stays had no other copy, and a crash of that member (not yet
        detected, or a moment later) lost it although the leaving members still ran (found by a
        search of leaves with one crash: 29 of 150 runs lost partitions)."""
        table = state.table
        leaving = state.leaving_data_members
        if table is None or not leaving:
            return self.pending
        moving = any(r.migration.kind is not MigrationKind.CLEAR for r in records.values()) or any(
            queue[0].kind is not MigrationKind.CLEAR for queue in self.pending.values()
        )

        def waits(pid: int, migration: Migration) -> bool:
            if migration.kind is not MigrationKind.CLEAR or migration.source not in leaving:
                return False
            others = [r for r in table.replicas[pid] if r is not None and r != migration.source]
            return moving or not all(self.consensus.answered_lately(r) for r in others)

        return {pid: queue for pid, queue in self.pending.items() if not waits(pid, queue[0])}

    # --- the commit handshake -----------------------------------------------------------------------

    def on_data_done(self, sender: MemberId, message: MigrationDataDone) -> None:
        flight = self._flight_by_id(message.migration_id)
        table = self.consensus.state.table
        if flight is None or flight.stage is not Stage.TRANSFER or table is None:
            return
        if sender != table.owner(flight.record.partition_id):
            return
        if message.success:
            self._ask_commit(flight)
        else:
            self._decide(flight, MigrationOutcome.ROLLED_BACK)

    def on_progress(self, sender: MemberId, message: MigrationProgress) -> None:
        flight = self._flight_by_id(message.migration_id)
        table = self.consensus.state.table
        if flight is None or flight.stage is not Stage.TRANSFER or table is None:
            return
        if sender == table.owner(flight.record.partition_id):
            flight.started_ms = self.ctx.now_ms

    def _ask_commit(self, flight: Flight) -> None:
        flight.stage = Stage.COMMIT
        flight.stage_since_ms = self.ctx.now_ms
        self._send_to_destination(flight, MigrationCommit(flight.record, self.consensus.term))

    def on_commit_ack(self, sender: MemberId, message: MigrationCommitAck) -> None:
        flight = self._flight_by_id(message.migration_id)
        if flight is None or flight.stage is not Stage.COMMIT or sender != flight.record.migration.destination:
            return
        self._decide(flight, MigrationOutcome.COMMITTED if message.success else MigrationOutcome.ROLLED_BACK)

    def on_outcome_reply(self, sender: MemberId, message: MigrationOutcomeReply) -> None:
        flight = self._flight_by_id(message.migration_id)
        if flight is None or flight.stage is not Stage.RECOVERING or sender != flight.record.migration.destination:
            return
        self._decide(flight, MigrationOutcome.COMMITTED if message.committed else MigrationOutcome.ROLLED_BACK)

    def _decide(self, flight: Flight, outcome: MigrationOutcome) -> None:
        flight.stage = Stage.DECIDED
        flight.stage_since_ms = self.ctx.now_ms
        self._outcomes.append(flight.record.with_outcome(outcome))

    def _adopt_inherited(self) -> None:
        """Migrations the log shows in flight that this leader did not start: ask how they ended."""
        for pid, record in sorted(self.consensus.state.migrations.items()):
            if pid in self.flights:
                continue
            now = self.ctx.now_ms
            flight = Flight(record=record, stage=Stage.RECOVERING, started_ms=now, last_sent_ms=now, stage_since_ms=now)
            self.flights[pid] = flight
            if record.migration.destination is None:
                self._decide(flight, MigrationOutcome.COMMITTED)
            else:
                self._send_to_destination(flight, MigrationOutcomeQuery(record, self.consensus.term))

    def _retry(self) -> None:
        config = self.ctx.config
        for pid in sorted(self.flights):
            flight = self.flights[pid]
            if flight.stage is Stage.DECIDED:
                continue
            if flight.stage is Stage.TRANSFER:
                if self.ctx.now_ms - flight.started_ms > TRANSFER_BACKSTOP_TIMEOUTS * config.migration_timeout_ms:
                    self._decide(flight, MigrationOutcome.ROLLED_BACK)
                continue
            if self.ctx.now_ms - flight.last_sent_ms < config.retry_interval_ms:
                continue
            if flight.stage is Stage.COMMIT:
                self._send_to_destination(flight, MigrationCommit(flight.record, self.consensus.term))
            else:
                self._send_to_destination(flight, MigrationOutcomeQuery(flight.record, self.consensus.term))

    def resend_to(self, peer: MemberId) -> None:
        """``peer``'s connection came back: the commit or outcome query it may have missed, now."""
        for pid in sorted(self.flights):
            flight = self.flights[pid]
            if flight.record.migration.destination != peer:
                continue
            if flight.stage is Stage.COMMIT:
                self._send_to_destination(flight, MigrationCommit(flight.record, self.consensus.term))
            elif flight.stage is Stage.RECOVERING:
                self._send_to_destination(flight, MigrationOutcomeQuery(flight.record, self.consensus.term))

    def _send_to_destination(self, flight: Flight, message: Any) -> None:
        destination = flight.record.migration.destination
        flight.last_sent_ms = self.ctx.now_ms
        if destination is None:
            return
        if destination == self.ctx.identity:
            self.deliver_to_self(message)
        else:
            self.ctx.send(destination, message)

    def removal_blocked(self, member: MemberId) -> bool:
        """A migration ``member`` takes part in awaits its destination's commit answer: the answer
        decides whether the destination or the survivors of ``member`` hold the partition."""
        state = self.consensus.state
        for flight in self.flights.values():
            if flight.stage is not Stage.COMMIT or flight.record.migration.destination == member:
                continue
            waited = self.ctx.now_ms - flight.stage_since_ms
            if member in state.participants(flight.record) and waited < self.ctx.config.migration_timeout_ms:
                return True
        return False

    def _flight_by_id(self, migration_id: str) -> Flight | None:
        for flight in self.flights.values():
            if flight.record.migration_id == migration_id:
                return flight
        return None

    def _emit(self, status: events.MigrationPhase, record: MigrationRecord) -> None:
        m = record.migration
        self.ctx.emit(
            events.MigrationEvent(
                phase=status,
                migration_id=record.migration_id,
                partition_id=record.partition_id,
                kind=m.kind.value,
                source=m.source,
                destination=m.destination,
                source_current_index=m.source_current_index,
                source_new_index=m.source_new_index,
                destination_current_index=m.destination_current_index,
                destination_new_index=m.destination_new_index,
            )
        )
