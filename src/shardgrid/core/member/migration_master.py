"""The master's side of repartitioning: repair, planning, the parallel schedule and safe commits.

Seed 000, section 2.1: for each migration the master has the owner send the partition's data to
the destination, then commits on the destination first and waits for its acknowledgement; only
then does it apply the change to its own table, record the migration as completed and publish.
A destination that leaves during the commit makes the master bump the partition's version by two
instead (so the master's table wins over whatever the destination did) and replan. Any membership
change or failed migration throws the rest of the plan away and plans again from the table as it
is (section 3.2: the algorithm is stateless).
"""

from __future__ import annotations

from shardgrid.core import events
from shardgrid.core.identity import MemberInfo, Replica
from shardgrid.core.member.state import InFlight, MemberState, PendingPromotion
from shardgrid.core.messages import (
    COMMITTED,
    ROLLED_BACK,
    AssignPartitions,
    MigrationCommit,
    MigrationCommitAck,
    MigrationDataDone,
    MigrationRecord,
    MigrationRequest,
    PromotionCommit,
    PromotionCommitAck,
    TableEntry,
)
from shardgrid.core.migration import Migration, MigrationKind, apply_migration
from shardgrid.core.placement import arrange
from shardgrid.core.planner import plan_migrations, prioritize_copies_and_shift_ups
from shardgrid.core.rebalance import plan_rebalance
from shardgrid.core.repair import remove_members as repair_table
from shardgrid.core.schedule import ScheduledMigration, next_migrations
from shardgrid.core.table import PartitionTable, ReplicaSlots

TRANSFER = "transfer"
COMMIT = "commit"


class MigrationMaster(MemberState):
    # --- membership hooks ------------------------------------------------------------------------

    def on_became_master(self, recover: bool, departed: list[Replica] | None = None) -> None:
        self.pending.clear()
        self.in_flight.clear()
        self.promotions.clear()
        self.acked_versions.clear()
        if recover:
            self.start_recovery(departed or [])
        else:
            self.needs_rebalance = True

    def on_member_joined(self, joiner: Replica, lite: bool) -> None:
        self.publish_full(to=[joiner])
        if not lite:
            self.needs_rebalance = True

    def on_members_departed(self, departed: list[Replica]) -> None:
        if not self.is_master or self.recovery is not None:
            if self.recovery is not None:
                for member in departed:
                    self.recovery.waiting.discard(member)
            return
        gone = set(departed)
        for pid in sorted(self.in_flight):
            flight = self.in_flight[pid]
            destination = flight.record.migration.destination
            if flight.stage == COMMIT and destination not in gone:
                continue  # the destination may have committed: wait for its answer, repair after
            slots = self.table.replicas[pid] if self.table is not None else ()
            if gone & set(flight.participants) or gone & set(slots):
                self.rollback(pid, "a member of the partition left the cluster")
        for member in list(self.promotions):
            if member in gone:
                del self.promotions[member]
        for member in gone:
            self.acked_versions.pop(member, None)
        self.repair(departed)

    # --- repair ----------------------------------------------------------------------------------

    def repair(self, departed: list[Replica]) -> None:
        """Empty the departed members' slots; promote survivors where an owner left (seed 000, 1.1)."""
        if self.table is None:
            return
        result = repair_table(self.table, departed)
        # A partition whose commit is out to its destination is repaired once the commit ends.
        deferred = set(self.in_flight)
        promotions = [(pid, m) for pid, m in result.promotions if pid not in deferred]
        promoted_pids = {pid for pid, _ in promotions}
        direct = {
            pid: (result.table.replicas[pid], result.table.versions[pid])
            for pid in range(self.table.partition_count)
            if result.table.versions[pid] != self.table.versions[pid]
            and pid not in promoted_pids
            and pid not in deferred
        }
        for pid in result.lost_partitions:
            if pid not in deferred:
                self.emit(events.PartitionLost(pid))
        if direct:
            self.table = self.table.with_partitions(direct)
            self.publish(sorted(direct), [])
            self.after_table_change(sorted(direct))
        by_member: dict[Replica, list[TableEntry]] = {}
        for pid, promotion in promotions:
            assert promotion.destination is not None
            entry = TableEntry(pid, result.table.replicas[pid], result.table.versions[pid])
            by_member.setdefault(promotion.destination, []).append(entry)
        for member, entries in sorted(by_member.items()):
            merged = {e.partition_id: e for e in self.promotions.get(member, PendingPromotion((), 0)).entries}
            merged.update({e.partition_id: e for e in entries})
            pending = PendingPromotion(tuple(merged[pid] for pid in sorted(merged)), self.now_ms)
            self.promotions[member] = pending
            if member == self.identity:
                self._apply_promotions(member, pending.entries)
            else:
                self.send(member, PromotionCommit(self.member_list_version, pending.entries))
        self.needs_rebalance = True

    def on_assign_partitions(self, sender: Replica, message: object) -> None:
        del sender, message
        self.request_assignment()

    def request_assignment(self) -> None:
        """First use of the data: assign the initial table (seed 001: the master owns it)."""
        if self.table is not None or self.assignment_requested:
            return
        self.assignment_requested = True
        if self.is_master:
            self.needs_rebalance = True
        elif self.master is not None:
            self.send(self.master, AssignPartitions())

    def on_promotion_commit_ack(self, sender: Replica, message: PromotionCommitAck) -> None:
        pending = self.promotions.get(sender)
        if not self.is_master or pending is None:
            return
        acked = set(message.partition_ids)
        self._apply_promotions(sender, tuple(e for e in pending.entries if e.partition_id in acked))

    def _apply_promotions(self, member: Replica, entries: tuple[TableEntry, ...]) -> None:
        assert self.table is not None
        pending = self.promotions.get(member)
        updates = {
            e.partition_id: (e.replicas, e.version) for e in entries if e.version > self.table.versions[e.partition_id]
        }
        if updates:
            self.table = self.table.with_partitions(updates)
            self.publish(sorted(updates), [])
            self.after_table_change(sorted(updates))
            if member == self.identity:
                self.sync_after_promotion(sorted(updates))
        if pending is not None:
            done = {e.partition_id for e in entries}
            remaining = tuple(e for e in pending.entries if e.partition_id not in done)
            if remaining:
                self.promotions[member] = PendingPromotion(remaining, pending.last_sent_ms)
            else:
                del self.promotions[member]

    # --- planning --------------------------------------------------------------------------------

    def data_member_infos(self) -> list[MemberInfo]:
        return [MemberInfo(e.replica, e.lite) for e in self.members]

    def rebalance(self) -> None:
        """Plan from scratch: repartition, then a cycle-free, prioritized plan per partition."""
        self.needs_rebalance = False
        infos = self.data_member_infos()
        if not any(not i.lite for i in infos):
            return
        if self.table is None:
            if self.config.assign_partitions_on_first_use and not self.assignment_requested:
                return  # assigned when a client first asks, over every member joined by then
            initial = arrange(
                infos,
                PartitionTable.empty(self.config.partition_count),
                self.rng,
                backup_count=self.config.backup_count,
            )
            self.table = PartitionTable(initial.replicas, (1,) * initial.partition_count)
            self.publish_full()
            self.after_table_change(list(range(self.table.partition_count)))
            self.target = self.table
            self.pending = {}
            return
        plan = plan_rebalance(infos, self.table, self.rng, backup_count=self.config.backup_count)
        self.target = plan.target
        self.pending = {pid: list(queue) for pid, queue in plan.migrations.items() if pid not in self.in_flight}

    def _replan_partition(self, pid: int) -> None:
        """A partition whose migration ran while the plan was made gets its plan now."""
        assert self.table is not None
        if self.target is None or self.pending.get(pid):
            return
        held, wanted = self.table.replicas[pid], self.target.replicas[pid]
        if held != wanted and all(r is None or self.is_member(r) for r in wanted):
            queue = prioritize_copies_and_shift_ups(plan_migrations(held, wanted))
            if queue:
                self.pending[pid] = queue

    def migration_master_tick(self) -> None:
        if not self.is_master or self.recovery is not None:
            return
        self._retry_promotions()
        if self.promotions:
            self._retry_in_flight()  # commits out to destinations are still resent meanwhile
            return  # plan only on a repaired table
        if self.needs_rebalance:
            stale = [m for m in self.table.members() if not self.is_member(m)] if self.table is not None else []
            if stale:
                self.repair(stale)  # members that left while their partitions were mid-commit
                if self.promotions:
                    return
            self.rebalance()
        self._retry_in_flight()
        self.drive_migrations()

    def drive_migrations(self) -> None:
        if self.table is None or self.promotions or self.recovery is not None or self.needs_rebalance:
            return  # the plan is stale (or the table mid-repair): the next tick replans first
        self.pending = {pid: queue for pid, queue in self.pending.items() if queue}
        table = self.table
        running = [
            ScheduledMigration(pid, flight.record.migration, flight.participants)
            for pid, flight in sorted(self.in_flight.items())
        ]
        started = next_migrations(self.pending, running, self.config.max_parallel_migrations, owner_of=table.owner)
        for scheduled in started:
            self.pending[scheduled.partition_id].pop(0)
            self._start(scheduled.partition_id, scheduled.migration, scheduled.participants)

    def _start(self, pid: int, migration: Migration, participants: tuple[Replica, ...]) -> None:
        assert self.table is not None
        if any(not self.is_member(p) for p in participants):
            self.needs_rebalance = True
            return
        self.migration_counter += 1
        record = MigrationRecord(
            f"{self.identity.uuid[:8]}-{self.migration_counter}", pid, migration, self.table.versions[pid]
        )
        self._emit_migration("started", record)
        if migration.kind is MigrationKind.CLEAR:
            self._commit_on_master(record)
            return
        sender = self.table.owner(pid)
        flight = InFlight(record, participants, sender, self.now_ms, TRANSFER, self.now_ms)
        self.in_flight[pid] = flight
        if sender is None:
            self._begin_commit(flight)  # a lost partition restarts empty: there is no data to send
        else:
            self._send_request(flight)

    def _send_request(self, flight: InFlight) -> None:
        assert flight.sender is not None
        pid = flight.record.partition_id
        completed = tuple(r for _, r in sorted(self.completed.items()) if r.partition_id == pid)
        request = MigrationRequest(self.member_list_version, flight.record, self.entry(pid), completed)
        if flight.sender == self.identity:
            self.on_migration_request(self.identity, request)
        else:
            self.send(flight.sender, request)

    def on_data_done(self, sender: Replica, message: MigrationDataDone) -> None:
        flight = self._flight_by_id(message.migration_id)
        if not self.is_master or flight is None or flight.sender != sender or flight.stage != TRANSFER:
            return
        if message.success:
            self._begin_commit(flight)
        else:
            self.rollback(flight.record.partition_id, message.reason or "the transfer failed")

    def _begin_commit(self, flight: InFlight) -> None:
        assert self.table is not None
        record = flight.record
        slots = tuple(apply_migration(self.table.replicas[record.partition_id], record.migration))
        flight.stage = COMMIT
        flight.commit_entry = TableEntry(record.partition_id, slots, record.version_before + 1)
        flight.last_sent_ms = self.now_ms
        self._send_commit(flight)

    def _send_commit(self, flight: InFlight) -> None:
        destination = flight.record.migration.destination
        assert destination is not None
        assert flight.commit_entry is not None
        commit = MigrationCommit(self.member_list_version, flight.record.with_status(COMMITTED), flight.commit_entry)
        if destination == self.identity:
            self.on_migration_commit(self.identity, commit)
        else:
            self.send(destination, commit)

    def on_commit_ack(self, sender: Replica, message: MigrationCommitAck) -> None:
        flight = self._flight_by_id(message.migration_id)
        if not self.is_master or flight is None or flight.stage != COMMIT:
            return
        if sender != flight.record.migration.destination:
            return
        pid = flight.record.partition_id
        if not message.success:
            self.rollback(pid, message.reason or "the destination refused the commit")
            return
        assert flight.commit_entry is not None
        assert self.table is not None
        entry = flight.commit_entry
        del self.in_flight[pid]
        self._conclude(flight.record.with_status(COMMITTED), entry.replicas, entry.version)
        self._repair_leftovers(pid)
        self._replan_partition(pid)
        self.drive_requested = True

    def _commit_on_master(self, record: MigrationRecord) -> None:
        """A CLEAR changes no data holder: the master commits it and the source drops on publish."""
        assert self.table is not None
        slots = tuple(apply_migration(self.table.replicas[record.partition_id], record.migration))
        self._conclude(record.with_status(COMMITTED), slots, record.version_before + 1)

    def _conclude(self, record: MigrationRecord, slots: ReplicaSlots, version: int) -> None:
        """The master's side of an outcome: its table, the completed list, everyone else told."""
        assert self.table is not None
        pid = record.partition_id
        self.table = self.table.with_partitions({pid: (slots, version)})
        self.record_completed(record)
        self.publish([pid], [record])
        self.resolve_active(record)
        self.after_table_change([pid])
        self._emit_migration("finished" if record.status == COMMITTED else "failed", record)

    def rollback(self, pid: int, reason: str) -> None:
        flight = self.in_flight.pop(pid, None)
        if flight is None or self.table is None:
            return
        record = flight.record.with_status(ROLLED_BACK)
        version = max(self.table.versions[pid] + 1, record.version_after)
        self._conclude(record, self.table.replicas[pid], version)
        self._repair_leftovers(pid)
        self.needs_rebalance = True

    def _repair_leftovers(self, pid: int) -> None:
        """Members that left while this partition's commit was out are repaired out of it now."""
        assert self.table is not None
        gone = [r for r in self.table.replicas[pid] if r is not None and not self.is_member(r)]
        if gone:
            self.repair(gone)

    def _retry_in_flight(self) -> None:
        for pid in sorted(self.in_flight):
            flight = self.in_flight.get(pid)
            if flight is None:
                continue
            if flight.stage == TRANSFER and self.now_ms - flight.started_ms > self.config.migration_timeout_ms:
                self.rollback(pid, "the transfer made no progress in time")
            elif self.now_ms - flight.last_sent_ms >= self.config.retry_interval_ms:
                flight.last_sent_ms = self.now_ms
                if flight.stage == COMMIT:
                    self._send_commit(flight)
                elif flight.sender is not None:
                    self._send_request(flight)

    def _retry_promotions(self) -> None:
        for member, pending in sorted(self.promotions.items()):
            if member != self.identity and self.now_ms - pending.last_sent_ms >= self.config.retry_interval_ms:
                pending.last_sent_ms = self.now_ms
                self.send(member, PromotionCommit(self.member_list_version, pending.entries))

    def _flight_by_id(self, migration_id: str) -> InFlight | None:
        for flight in self.in_flight.values():
            if flight.record.migration_id == migration_id:
                return flight
        return None

    def _emit_migration(self, status: str, record: MigrationRecord) -> None:
        m = record.migration
        self.emit(
            events.MigrationEvent(
                status,
                record.migration_id,
                record.partition_id,
                m.kind.value,
                m.source,
                m.destination,
                m.source_current_index,
                m.source_new_index,
                m.destination_current_index,
                m.destination_new_index,
            )
        )

    def in_flight_load(self) -> dict[Replica, int]:
        load: dict[Replica, int] = {}
        for flight in self.in_flight.values():
            for member in flight.participants:
                load[member] = load.get(member, 0) + 1
        return load
