"""A member's side of a migration: the owner sending the data, the destination receiving it.

Both check the partition version the master expects against their own (after applying the table
entry and completed migrations the request carries, as seed 003 has migration operations do), and
refuse a second migration of a partition while one whose outcome they do not know is active. The
owner blocks writes to the partition while it sends (seed 002: reads stay allowed), so the data
it sends is the partition's whole state. The destination stages what it receives and installs it
only on the master's commit; on a rollback it throws the staged data away. A source drops its data
only once it learns the master committed (``after_table_change`` removes data this member no
longer holds a replica of, and only when no migration of the partition is active here).
"""

from __future__ import annotations

from shardgrid.core.identity import Replica
from shardgrid.core.member.state import DESTINATION, SENDER, ActiveMigration, MemberState
from shardgrid.core.messages import (
    COMMITTED,
    MigrationChunk,
    MigrationChunkAck,
    MigrationCommit,
    MigrationCommitAck,
    MigrationDataDone,
    MigrationOutcomeQuery,
    MigrationRecord,
    MigrationRequest,
    TableEntry,
)
from shardgrid.core.store import PartitionData, chunk_entries


class MigrationReplica(MemberState):
    # --- sender (the partition owner) ------------------------------------------------------------

    def on_migration_request(self, sender: Replica, message: MigrationRequest) -> None:
        record = message.record
        pid = record.partition_id
        if sender != self.master or self.table is None or not 0 <= pid < self.table.partition_count:
            return
        active = self.active.get(pid)
        if active is not None and active.record.migration_id == record.migration_id:
            if active.role == SENDER and active.complete and not active.chunks:
                self._to_master(MigrationDataDone(record.migration_id, True))  # our answer was lost
            return  # otherwise a resend while we are still at it
        changed = self.apply_entries((message.entry,))
        for done in message.completed:
            self.record_completed(done)
            self.resolve_active(done)
        self.resolve_overtaken(changed)
        self.after_table_change(changed)
        reason = self._refusal(record, expect_owner=True)
        if reason:
            self._to_master(MigrationDataDone(record.migration_id, False, reason))
            return
        destination = record.migration.destination
        assert destination is not None
        if destination == self.identity:
            self._to_master(MigrationDataDone(record.migration_id, True))  # nothing to copy to itself
            return
        # Writes to the partition stop now; the data goes out once the writes already sent to the
        # backups are settled, so that no backup misses one the new replica set will not resend.
        self.active[pid] = ActiveMigration(record, SENDER, sender, self.now_ms, self.now_ms, destination=destination)
        self._start_sending(pid, self.active[pid])

    def _start_sending(self, pid: int, active: ActiveMigration) -> None:
        if active.sending or any(key[0] == pid for key in self.pending_writes) or pid in self.outgoing_syncs:
            return
        data = self.stores.setdefault(pid, PartitionData())
        active.chunks = chunk_entries(list(data.entries()), self.config.max_chunk_entries, self.config.max_chunk_bytes)
        active.replica_sequence = data.sequence
        active.lineage = data.lineage
        active.sending = True
        self._send_chunk(active)

    def _send_chunk(self, active: ActiveMigration) -> None:
        assert active.destination is not None
        index = active.next_chunk
        active.last_sent_ms = self.now_ms
        last = index == len(active.chunks) - 1
        chunk = MigrationChunk(
            active.record, index, active.chunks[index], last, active.replica_sequence, active.lineage
        )
        self.send(active.destination, chunk)

    def on_chunk_ack(self, sender: Replica, message: MigrationChunkAck) -> None:
        active = self._active_by_id(message.migration_id)
        if active is None or active.role != SENDER or sender != active.destination or active.complete:
            return
        if not message.accepted:
            self._to_master(MigrationDataDone(message.migration_id, False, message.reason))
            active.complete = True  # the outcome (a rollback) now comes from the master
            return
        if message.sequence != active.next_chunk:
            return
        active.last_progress_ms = self.now_ms
        if active.next_chunk == len(active.chunks) - 1:
            active.complete = True
            active.chunks = []
            self._to_master(MigrationDataDone(message.migration_id, True))
        else:
            active.next_chunk += 1
            self._send_chunk(active)

    # --- destination ---------------------------------------------------------------------------

    def on_migration_chunk(self, sender: Replica, message: MigrationChunk) -> None:
        record = message.record
        pid = record.partition_id
        if self.table is None or not 0 <= pid < self.table.partition_count:
            return
        active = self.active.get(pid)
        if active is not None and active.record.migration_id == record.migration_id:
            if active.role != DESTINATION:
                return
            if message.sequence == active.next_chunk and not active.complete:
                active.staged.extend(message.entries)
                active.next_chunk += 1
                active.complete = message.last
                active.replica_sequence = message.replica_sequence
                active.lineage = message.lineage
                active.last_progress_ms = self.now_ms
            if message.sequence < active.next_chunk:
                self.send(sender, MigrationChunkAck(record.migration_id, message.sequence, True))
            return
        if message.sequence != 0 or record.migration_id in self.completed:
            return
        if self.table.versions[pid] < record.version_before:
            return  # the publication that brings us to that version is on its way: the sender resends
        reason = self._refusal(record, expect_owner=False, sender=sender)
        if reason:
            self.send(sender, MigrationChunkAck(record.migration_id, 0, False, reason))
            return
        assert self.master is not None
        self.active[pid] = ActiveMigration(
            record,
            DESTINATION,
            self.master,
            self.now_ms,
            self.now_ms,
            staged=list(message.entries),
            next_chunk=1,
            complete=message.last,
            replica_sequence=message.replica_sequence,
            lineage=message.lineage,
        )
        self.send(sender, MigrationChunkAck(record.migration_id, 0, True))

    def on_migration_commit(self, sender: Replica, message: MigrationCommit) -> None:
        if sender != self.master:
            return
        record = message.record
        pid = record.partition_id
        ack_ok = MigrationCommitAck(record.migration_id, True)
        if self.committed_here(record, message.entry):
            self._to_master(ack_ok)
            return
        active = self.active.get(pid)
        if active is not None and active.record.migration_id == record.migration_id and active.role == DESTINATION:
            if not active.complete:
                self._to_master(MigrationCommitAck(record.migration_id, False, "data incomplete"))
                return
            self.stores[pid] = PartitionData.from_entries(active.staged, active.replica_sequence, active.lineage)
            del self.active[pid]
        elif record.migration.destination == self.identity and self._is_ownerless(pid, record):
            self.stores[pid] = PartitionData()  # every replica of it was lost: it restarts empty
        else:
            self._to_master(MigrationCommitAck(record.migration_id, False, "no such migration here"))
            return
        self.reorder.pop(pid, None)
        self.apply_entries((message.entry,))
        self.record_completed(record)
        self.after_table_change([pid])
        self._to_master(ack_ok)

    def committed_here(self, record: MigrationRecord, entry: TableEntry | None = None) -> bool:
        """Whether this destination already applied the commit (a resend must be acknowledged)."""
        stored = self.completed.get(record.migration_id)
        if stored is not None and stored.status == COMMITTED:
            return True
        if entry is None or self.table is None or record.partition_id in self.active:
            return False
        pid = record.partition_id
        return self.table.versions[pid] == entry.version and self.table.replicas[pid] == entry.replicas

    def _is_ownerless(self, pid: int, record: MigrationRecord) -> bool:
        assert self.table is not None
        return self.table.owner(pid) is None and self.table.versions[pid] <= record.version_before

    # --- both ----------------------------------------------------------------------------------

    def _refusal(self, record: MigrationRecord, expect_owner: bool, sender: Replica | None = None) -> str:
        """Why this member must refuse the migration, or '' to take part."""
        assert self.table is not None
        pid = record.partition_id
        if pid in self.active:
            return "an earlier migration of the partition is still unresolved here"
        if pid in self.incoming_syncs or pid in self.outgoing_syncs:
            return "a replica sync of the partition is in progress"
        if self.table.versions[pid] != record.version_before:
            return f"partition version {self.table.versions[pid]} is not {record.version_before}"
        owner = self.table.owner(pid)
        if expect_owner and owner != self.identity:
            return "not the partition owner"
        if not expect_owner and owner != sender:
            return "the sender is not the partition owner"
        return ""

    def resolve_active(self, record: MigrationRecord) -> None:
        """The master decided: finish (commit) or undo (roll back) the local side."""
        active = self.active.get(record.partition_id)
        if active is None or active.record.migration_id != record.migration_id or record.status == "active":
            return
        del self.active[record.partition_id]
        # A committed sender keeps or drops its data by the new table (after_table_change); a
        # rolled-back destination drops the staged data with its ActiveMigration.

    def replica_migration_tick(self) -> None:
        for pid in sorted(self.active):
            active = self.active[pid]
            idle_ms = self.now_ms - active.last_progress_ms
            if active.role == SENDER and not active.sending:
                self._start_sending(pid, active)
            if active.role == SENDER and not active.complete:
                if idle_ms > self.config.migration_timeout_ms:
                    active.complete = True
                    self._to_master(MigrationDataDone(active.record.migration_id, False, "destination silent"))
                elif active.sending and self.now_ms - active.last_sent_ms >= self.config.retry_interval_ms:
                    self._send_chunk(active)
            elif self.now_ms - active.last_sent_ms >= self.config.retry_interval_ms and idle_ms > 0:
                active.last_sent_ms = self.now_ms
                if self.master is not None and self.master != self.identity:
                    self.send(self.master, MigrationOutcomeQuery(active.record.migration_id, pid))

    def _active_by_id(self, migration_id: str) -> ActiveMigration | None:
        for active in self.active.values():
            if active.record.migration_id == migration_id:
                return active
        return None

    def _to_master(self, message: object) -> None:
        if self.master is None:
            return
        if self.master == self.identity:
            self.deliver_to_self(message)
        else:
            self.send(self.master, message)
