"""The owner's side of replication: the runs of its writes to the partitions' backups, the writes
whose answers wait for their acknowledgements, retries and timeouts, and the owner's own removals.

An owner applies a write, gives it the partition's next replica sequences and sends it, as a run,
to the backups of its table; the answer waits until every sync backup acknowledged (seed 001's
sync backups) and the member still holds its lease. A write whose backups do not all answer
within ``backup_ack_timeout_ms`` is answered indeterminate, and the lagging backups are brought
back by a replica sync (``replica_sync``). What was sent stays, as the runs that carried it, until
every backup of the partition holds it (``replication.PendingPartition``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from shardgrid.core.identity import MemberId
from shardgrid.core.limits import MAX_BACKUP_BATCH_BYTES, MAX_RUNS_PER_BACKUP_BATCH
from shardgrid.core.member.answer import Indexes
from shardgrid.core.member.consensus import Consensus
from shardgrid.core.member.context import Context
from shardgrid.core.member.leases import Leases
from shardgrid.core.member.replication import PendingCall, PendingPartition, PendingWrite
from shardgrid.core.member.routes import Route, Routes
from shardgrid.core.messages import EMPTY_COLUMN, REMOVE, BackupAckBatch, BackupBatch, Column, ReplyCode, WriteRun
from shardgrid.core.replica_disk import ReplicaJournal
from shardgrid.core.store import PartitionData, columns_bytes

# What a run takes on the wire beyond its keys, values and map name (partition, lineage, sequences).
RUN_HEADER_BYTES = 64


class SyncStarter(Protocol):
    """What the owner's replication asks of the replica syncs."""

    def start_sync(self, pid: int, backups: Sequence[MemberId]) -> None: ...
    def syncing(self, pid: int) -> bool: ...


class OwnerReplication:
    def __init__(
        self,
        ctx: Context,
        consensus: Consensus,
        leases: Leases,
        routes: Routes,
        answer: Callable[[PendingCall], None],
        journal: ReplicaJournal | None = None,
    ) -> None:
        self.ctx = ctx
        self.consensus = consensus
        self.leases = leases
        self.routes = routes
        self.answer = answer  # sends a call's reply, once none of its writes waits any more
        self.syncs: SyncStarter | None = None  # wired by the data path (they ask each other)
        self.journal = journal  # a persistent member's: the owner's writes go to its disk
        self.pending: dict[int, PendingPartition] = {}  # per partition: writes waiting for backups
        self.pending_count = 0  # keys of writes waiting for backups
        self.pending_bytes = 0
        # This event's runs, sent at its end: to the backups that keep the map, and (without the
        # keys and values) to the partition's other backups.
        self.outbox: list[tuple[WriteRun, int, tuple[MemberId, ...], tuple[MemberId, ...]]] = []

    # --- what others ask ---------------------------------------------------------------------------

    def settled(self, pid: int) -> bool:
        """No write of the partition is still on its way to a backup."""
        return pid not in self.pending

    def busy(self) -> bool:
        return bool(self.pending)

    def backlog(self) -> tuple[int, int]:
        """The writes waiting for backups: their keys, and their keys' and values' bytes."""
        return self.pending_count, self.pending_bytes

    def backlog_allows(self, writes: int, size_bytes: int) -> bool:
        """Whether ``writes`` more writes of ``size_bytes`` may wait for backups now."""
        config = self.ctx.config
        return (
            self.pending_count + writes <= config.max_pending_writes
            and self.pending_bytes + size_bytes <= config.max_pending_write_bytes
        )

    def acknowledged_through(self, pid: int, sequence: int) -> bool:
        """Whether every write of the partition up to ``sequence`` is on every sync backup: none
        of them waits for an acknowledgement, and no sync is bringing a backup back."""
        syncs = self.syncs
        if syncs is not None and syncs.syncing(pid):
            return False
        pending = self.pending.get(pid)
        return pending is None or not pending.writes or pending.writes[0].first_sequence > sequence

    def acked_by(self, pid: int, backup: MemberId) -> int:
        """The sequence ``backup`` said it holds of ``pid`` (-1: none known)."""
        pending = self.pending.get(pid)
        return pending.acked.get(backup, -1) if pending is not None else -1

    # --- sending runs ------------------------------------------------------------------------------

    def queue(self, run: WriteRun, size_bytes: int, route: Route) -> PendingPartition:
        """Send ``run`` to the partition's backups at the end of this event; its partition's
        waiting writes (the run is resent until every backup holds it)."""
        self.outbox.append((run, size_bytes, route.copies, route.sequence_only))
        pending = self.pending.get(run.partition_id)
        if pending is None:
            pending = self.pending[run.partition_id] = PendingPartition(
                required=set(route.backups), last_sent_ms=self.ctx.now_ms
            )
        return pending

    def wait_for_backups(
        self,
        pending: PendingPartition,
        call: PendingCall,
        first: int,
        last: int,
        indexes: Indexes,
        backups: tuple[MemberId, ...],
        size: int,
    ) -> None:
        """The call's answer waits until ``backups`` acknowledge the writes ``first..last``."""
        pending.writes.append(
            PendingWrite(
                first_sequence=first,
                last_sequence=last,
                call=call,
                indexes=indexes,
                backups=backups,
                size_bytes=size,
            )
        )
        self.pending_count += len(indexes)
        self.pending_bytes += size
        call.open_writes += 1

    def send_outbox(self) -> None:
        """One batch per backup for everything this event wrote."""
        batches: dict[MemberId, list[tuple[WriteRun, int]]] = {}
        runs, self.outbox = self.outbox, []
        now_ms = self.ctx.now_ms
        max_held_bytes = self.ctx.config.max_backup_reorder_bytes
        for run, size, copies, skips in runs:
            pending = self.pending.get(run.partition_id)
            if pending is not None:
                pending.add_run(run, size, now_ms)
                lagging = pending.drop_unwaited_runs(max_held_bytes)
                if lagging and self.syncs is not None:
                    self.syncs.start_sync(run.partition_id, sorted(lagging))
            item = (run, size)
            for backup in copies:
                batches.setdefault(backup, []).append(item)
            if skips:
                bare = (run.without_data(), 0)
                for backup in skips:
                    batches.setdefault(backup, []).append(bare)
        for backup in sorted(batches):
            self.send_runs(backup, batches[backup])

    def send_runs(self, backup: MemberId, runs: Sequence[tuple[WriteRun, int]]) -> None:
        """As few batches as fit in ``MAX_BACKUP_BATCH_BYTES`` each (a run fits alone: it is no
        larger than the client request that carried it), runs given with their sizes."""
        batch: list[WriteRun] = []
        size = 0
        for run, data_bytes in runs:
            run_bytes = data_bytes + len(run.map_name) + RUN_HEADER_BYTES  # what it takes on the wire
            if batch and (size + run_bytes > MAX_BACKUP_BATCH_BYTES or len(batch) >= MAX_RUNS_PER_BACKUP_BATCH):
                self.ctx.send(backup, BackupBatch(tuple(batch)))
                batch, size = [], 0
            batch.append(run)
            size += run_bytes
        if batch:
            self.ctx.send(backup, BackupBatch(tuple(batch)))

    def runs_held_at(self, index: int, runs: Sequence[tuple[WriteRun, int]]) -> list[tuple[WriteRun, int]]:
        """``runs`` as the backup at replica ``index`` takes them: without the data of maps it keeps
        no copy of."""
        config = self.ctx.config
        return [item if config.keeps_copy(item[0].map_name, index) else (item[0].without_data(), 0) for item in runs]

    def remove_owned(
        self,
        pid: int,
        data: PartitionData,
        map_name: str,
        slots: Sequence[MemberId | None] | None,
        chunk: Column,
    ) -> None:
        """A remove the owner decided itself (no client asked: the entries expired or went idle,
        were evicted, or a cache map is emptied), applied and replicated as one run of writes (no
        larger than a request). Nobody waits for its acknowledgement, but it is resent until
        every backup has it. ``slots`` None: a stand-in's copy, which has no backups."""
        records = data.maps.get(map_name)
        if records is None or not chunk:
            return
        now_ms = self.ctx.records_ms
        first = data.sequence + 1
        records.remove(chunk, now_ms)
        data.sequence += len(chunk)
        data.changed(map_name, data.sequence)
        if slots is None:
            return
        route = self.routes.of(pid, map_name)
        if not route.backups and self.journal is None:
            return
        run = WriteRun(
            partition_id=pid,
            lineage=data.lineage,
            first_sequence=first,
            kind=REMOVE,
            map_name=map_name,
            keys=chunk,
            values=EMPTY_COLUMN,
            written_ms=now_ms,
        )
        if self.journal is not None:
            self.journal.run(run, 0)
        if route.backups:
            self.queue(run, columns_bytes(chunk, EMPTY_COLUMN), route)

    # --- acknowledgements, timeouts, retries -------------------------------------------------------

    def on_backup_acks(self, sender: MemberId, message: BackupAckBatch) -> None:
        holds = self.leases.holds()  # asked once for the batch: the clock stands still meanwhile
        pending_of = self.pending
        for pid, sequence in message.acks:
            pending = pending_of.get(pid)
            if pending is not None:
                if sequence > pending.acked.get(sender, -1):
                    pending.acked[sender] = sequence  # ``PendingPartition.acknowledge``, inline
                self.complete(pid, pending, holds)

    def backup_caught_up(self, pid: int, backup: MemberId, sequence: int) -> None:
        """A sync brought ``backup`` to ``sequence`` of the partition's lineage: runs up to there
        are not owed to it, and those after it go now rather than at the next retry."""
        pending = self.pending.get(pid)
        if pending is None:
            return
        pending.acknowledge(backup, sequence)
        table = self.consensus.state.table
        if table is not None and backup in table.replicas[pid]:
            index = table.replicas[pid].index(backup)
            self.send_runs(backup, self.runs_held_at(index, pending.runs_for(backup)))
        self.complete(pid, pending)

    def complete(self, pid: int, pending: PendingPartition, holds: bool | None = None) -> None:
        """Answer the writes every backup of theirs now holds; ``holds``: whether this member
        holds its lease (asked when not given)."""
        done = pending.complete()
        if done and holds is None:
            holds = self.leases.holds()
        for write in done:
            if not holds:
                # Every backup has it, but an owner without a lease may already have been replaced.
                write.call.mark(write.indexes, ReplyCode.INDETERMINATE)
            self._finish_write(write)
        if pending.idle:
            del self.pending[pid]

    def _finish_write(self, write: PendingWrite) -> None:
        self.pending_count -= len(write.indexes)
        self.pending_bytes -= write.size_bytes
        call = write.call
        call.open_writes -= 1
        if call.open_writes == 0:
            self.answer(call)

    def _fail(self, writes: list[PendingWrite]) -> None:
        for write in writes:
            write.call.mark(write.indexes, ReplyCode.INDETERMINATE)
            self._finish_write(write)

    def tick(self) -> None:
        """Send what the upkeep wrote, answer writes that ran out of time (indeterminate), bring
        lagging backups back by a sync, and send again what a backup has not acknowledged."""
        self.send_outbox()
        now = self.ctx.now_ms
        config = self.ctx.config
        for pid in sorted(self.pending):
            pending = self.pending[pid]
            backups = self.routes.backups_of(pid)
            pending.required = set(backups)
            expired = pending.expire(now)
            if expired:
                last = expired[-1].last_sequence
                lagging = {b for w in expired for b in w.backups if b in backups and not pending.holds(b, last)}
                self._fail(expired)
                self._start_sync(pid, sorted(lagging))
                if pending.idle:
                    del self.pending[pid]
                    continue
            if pending.idle:
                del self.pending[pid]
                continue
            overdue = pending.overdue(now, config.backup_ack_timeout_ms)
            if overdue:
                self._start_sync(pid, sorted(overdue))
            retry_ms = config.retry_interval_ms
            if now - pending.last_sent_ms >= retry_ms:
                slots = self.consensus.state.table.replicas[pid] if self.consensus.state.table else ()
                for backup in sorted(backups):
                    late = pending.runs_due_for(backup, now, retry_ms)
                    if late:
                        pending.last_sent_ms = now
                        self.send_runs(backup, self.runs_held_at(slots.index(backup), late))

    def _start_sync(self, pid: int, backups: Sequence[MemberId]) -> None:
        if self.syncs is not None:
            self.syncs.start_sync(pid, backups)

    def resend_to(self, peer: MemberId) -> None:
        """``peer``'s connection came back: the runs it has not acknowledged go again now (it
        acknowledges what it holds already)."""
        table = self.consensus.state.table
        if table is None:
            return
        for pid in sorted(self.pending):
            pending = self.pending[pid]
            if pending.idle or peer not in self.routes.backups_of(pid):
                continue
            slots = table.replicas[pid]
            self.send_runs(peer, self.runs_held_at(slots.index(peer), pending.runs_for(peer)))

    # --- reacting to table changes -----------------------------------------------------------------

    def readdressed(self, old: MemberId, new: MemberId) -> None:
        """A backup was renamed at a new address (the same member, back from its directory): the
        writes it was to acknowledge wait for it under its new name, from what it says it holds
        then (found by a random run: renamed with a copy older than a write it had not taken,
        the write was answered OK without it, and its copy was promoted when the owner was cut
        off, the write lost)."""
        for pending in self.pending.values():
            if old in pending.required:
                pending.required = (pending.required - {old}) | {new}
            pending.acked.pop(old, None)
            for write in pending.writes:
                if old in write.backups:
                    write.backups = tuple(new if b == old else b for b in write.backups)

    def backups_changed(self, pid: int, backups: set[MemberId]) -> None:
        """This member still owns ``pid``, whose backups are now ``backups``: former backups are
        waited on no longer."""
        pending = self.pending.get(pid)
        if pending is not None:
            pending.required = backups
            self.complete(pid, pending)

    def partitions_waiting(self) -> set[int]:
        """Partitions with writes waiting for their backups' acknowledgements."""
        return set(self.pending)

    def fail_pending_writes(self, pid: int) -> None:
        """No longer the owner: writes still waiting for backups cannot be confirmed here."""
        pending = self.pending.pop(pid, None)
        if pending is not None:
            self._fail(pending.take_all())

    def drop_everything(self) -> None:
        for pid in sorted(self.pending):
            self._fail(self.pending.pop(pid).take_all())
