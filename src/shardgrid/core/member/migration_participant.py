"""A member's side of a migration: the owner sending the data, the destination receiving it.

A migration starts when its ``StartMigrations`` entry is applied: the partition's owner stops
taking writes to it (reads go on), waits until the writes already sent to its backups are settled
and streams the partition to the destination, which stages it. When the leader has the data
reported done it asks the destination to commit (seed 000, 2.1: the destination first); the
destination then holds the staged data as ready to serve and acknowledges; only when the log
records the outcome does the destination serve it, and the source drop what it no longer holds.
A rolled-back destination throws the staged data away.

From the moment the data is reported done the sender stops serving reads too: the destination may
start taking writes as soon as it applies the commit, and the two must never serve at once.

A new leader asks each destination of a migration the log shows unfinished whether it committed;
a destination that had not says so and refuses that commit from then on (seed 000, 2.2).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from shardgrid.core.identity import MemberId
from shardgrid.core.limits import NEVER_MS
from shardgrid.core.member.consensus import Consensus
from shardgrid.core.member.context import Context
from shardgrid.core.member.data import DataPath
from shardgrid.core.messages import (
    MIGRATION,
    MigrationCommit,
    MigrationCommitAck,
    MigrationDataDone,
    MigrationOutcomeQuery,
    MigrationOutcomeReply,
    MigrationProgress,
    TransferAck,
    TransferChunk,
)
from shardgrid.core.migration import MigrationOutcome, MigrationRecord
from shardgrid.core.records import page_count
from shardgrid.core.store import PartitionData, ReplicaView, page_bytes
from shardgrid.core.transfer import OutgoingTransfer, SendWindow, Staging, Throttle, transfer_problem, window_chunks

# Migration ids a destination refused to commit before it even applied their start; bounded.
MAX_FENCED_IDS = 10_000
# First windows of chunks that arrive before their migration's start is applied here (the sender
# and the destination learn of the start independently); kept per migration the member may be in.
EARLY_CHUNKS_PER_SLOT = 2


@dataclass(slots=True, kw_only=True)
class Outgoing:
    """This member owns the partition and streams its data to the destination."""

    record: MigrationRecord
    destination: MemberId
    transfer: OutgoingTransfer | None = None  # opened once the partition's writes settled
    complete: bool = False  # every chunk acknowledged, or the transfer failed
    success: bool = False
    reason: str = ""
    last_progress_ms: int = 0
    last_report_ms: int = NEVER_MS
    last_progress_told_ms: int = 0  # when the leader last heard that this transfer goes on


@dataclass(frozen=True, slots=True)
class Sending:
    """A read-only view of a migration this member streams (for status, tools and tests)."""

    partition_id: int
    destination: MemberId
    heard: bool  # the destination acknowledged a chunk
    complete: bool  # every chunk acknowledged, or the transfer failed
    chunks_in_flight: int


@dataclass(slots=True)
class Incoming:
    """This member is the destination: it stages the data until the outcome is in the log."""

    record: MigrationRecord
    staging: Staging = field(default_factory=Staging)
    installed: bool = False  # committed here, awaiting the log's outcome
    fenced: bool = False  # told a newer leader it had not committed: never commits now


class MigrationParticipant:
    def __init__(self, ctx: Context, consensus: Consensus, data: DataPath, to_leader: Callable[[Any], None]) -> None:
        self.ctx = ctx
        self.consensus = consensus
        self.data = data
        self.to_leader = to_leader
        self.outgoing: dict[int, Outgoing] = {}
        self.incoming: dict[int, Incoming] = {}
        self._fenced_ids: dict[str, int] = {}
        self._fence_term = 0
        self._early: dict[str, tuple[MemberId, dict[int, TransferChunk]]] = {}
        self._early_bytes = 0
        self.throttle = Throttle(ctx.config.max_migration_bytes_per_s, at_ms=ctx.now_ms)
        self._throttle_turn = 0
        self.entries_sent = 0  # records this member sent as a migration source (resends not counted)
        self.bytes_sent = 0  # their keys' and values' bytes
        self.chunks_resent = 0  # chunks sent again: unacknowledged in time, or their connection came back

    # --- what the data path asks -------------------------------------------------------------------

    def writes_blocked(self, pid: int) -> bool:
        return pid in self.outgoing

    def any_writes_blocked(self, pids: Iterable[int]) -> bool:
        return not self.outgoing.keys().isdisjoint(pids)

    def reads_blocked(self, pid: int) -> bool:
        outgoing = self.outgoing.get(pid)
        return outgoing is not None and outgoing.complete and outgoing.success

    def involved(self, pid: int) -> bool:
        return pid in self.outgoing or pid in self.incoming

    def room_ahead_bytes(self) -> int:
        """The room this member's incoming migrations made ahead of records still to come."""
        return sum(incoming.staging.room_ahead_bytes() for incoming in self.incoming.values())

    def partitions_involved(self) -> set[int]:
        return set(self.outgoing) | set(self.incoming)

    def sending(self) -> list[Sending]:
        """The migrations this member has begun to stream, by partition."""
        return [
            Sending(
                partition_id=pid,
                destination=outgoing.destination,
                heard=outgoing.transfer.heard,
                complete=outgoing.complete,
                chunks_in_flight=len(outgoing.transfer.stream.window),
            )
            for pid, outgoing in sorted(self.outgoing.items())
            if outgoing.transfer is not None
        ]

    def restore_staged(self, staged: dict[int, tuple[MigrationRecord, PartitionData]]) -> None:
        """A restarted destination's data it had committed to, as it committed to it: the log it
        restores next says each migration's outcome (``on_state_loaded``)."""
        for pid, (record, data) in staged.items():
            staging = Staging(
                maps=data.maps,
                versions=data.versions,
                complete=True,
                replica_sequence=data.sequence,
                lineage=data.lineage,
                versions_from=data.versions_from,
                writers=data.writes.snapshot(self.ctx.now_ms),
                hash_seed=self.ctx.hash_seed,
                max_idle_ms=self.ctx.config.max_idle_ms,
            )
            self.incoming[pid] = Incoming(record, staging, installed=True)
            self.data.restage(pid, record, data)

    def staged(self, pid: int) -> ReplicaView | None:
        """What this member, a migration's destination, has staged of ``pid`` so far (None: it
        receives no migration of it)."""
        incoming = self.incoming.get(pid)
        return incoming.staging.data(self.ctx.now_ms).view() if incoming is not None else None

    def received_whole(self, pid: int) -> bool:
        """Whether this member, a migration's destination, has every chunk of ``pid``'s."""
        incoming = self.incoming.get(pid)
        return incoming is not None and incoming.staging.complete

    # --- the log ---------------------------------------------------------------------------------

    def on_started(self, record: MigrationRecord) -> None:
        table = self.consensus.state.table
        if table is None:
            return
        pid = record.partition_id
        owner = table.owner(pid)
        destination = record.migration.destination
        if destination is None:
            return  # a CLEAR: the source drops its data when the outcome is applied
        if destination == self.ctx.identity:
            # A lost partition restarts empty.
            staging = Staging(
                complete=owner is None,
                hash_seed=self.ctx.hash_seed,
                max_idle_ms=self.ctx.config.max_idle_ms,
                fits=self.data.room_to_size,
            )
            if pid in self.incoming:
                self.data.unstage(pid)
            self.incoming[pid] = Incoming(record, staging)
            early = self._take_early(record.migration_id)
            if early is not None:
                sender, chunks = early
                for sequence in sorted(chunks):
                    self.on_chunk(sender, chunks[sequence])
        elif owner == self.ctx.identity:
            now = self.ctx.now_ms
            self.outgoing[pid] = Outgoing(
                record=record,
                destination=destination,
                last_progress_ms=now,
                last_progress_told_ms=now,
            )
            self._start_sending(pid)

    def on_finished(self, record: MigrationRecord) -> None:
        pid = record.partition_id
        incoming = self.incoming.get(pid)
        if incoming is not None and incoming.record.migration_id == record.migration_id:
            del self.incoming[pid]
            self.data.unstage(pid)
            if record.outcome is MigrationOutcome.COMMITTED and incoming.staging.complete:
                self.data.install(
                    pid, incoming.staging.data(self.ctx.now_ms), incoming.record.migration.destination_new_index
                )
        outgoing = self.outgoing.get(pid)
        if outgoing is not None and outgoing.record.migration_id == record.migration_id:
            del self.outgoing[pid]

    def on_state_loaded(self) -> None:
        """A snapshot replaced the state: keep the migrations it shows in flight, and settle those
        whose outcome it already holds."""
        state = self.consensus.state
        for pid in list(self.outgoing):
            running = state.migrations.get(pid)
            if running is None or running.migration_id != self.outgoing[pid].record.migration_id:
                del self.outgoing[pid]
        for pid in list(self.incoming):
            incoming = self.incoming[pid]
            running = state.migrations.get(pid)
            if running is not None and running.migration_id == incoming.record.migration_id:
                continue
            del self.incoming[pid]
            self.data.unstage(pid)
            # Its outcome is inside the snapshot. Committed, this member committed first (installed)
            # and the table names it a replica: the staged data is then its copy of the partition.
            named = state.table is not None and self.ctx.identity in state.table.replicas[pid]
            if incoming.installed and incoming.staging.complete and named:
                self.data.install(
                    pid, incoming.staging.data(self.ctx.now_ms), incoming.record.migration.destination_new_index
                )
        # A promotion inside the snapshot: its new lineage starts now, as from the log, once the
        # copies committed to this member are installed and before the snapshot's migrations
        # start (a source streams the new lineage, not the old). A partition this member is
        # still receiving by migration is not its own yet.
        self.data.sync_after_promotion(self.data.promoted_unseen(skip=set(self.incoming)))
        for pid, record in sorted(state.migrations.items()):
            if pid not in self.outgoing and pid not in self.incoming:
                self.on_started(record)

    # --- sender ----------------------------------------------------------------------------------

    def _start_sending(self, pid: int) -> None:
        outgoing = self.outgoing[pid]
        if outgoing.transfer is not None or not self.data.settled(pid):
            return  # the writes already sent to backups settle first: no backup may miss one
        data = self.data.store(pid)
        config = self.ctx.config
        # Streamed straight from the maps: the partition takes no writes until the migration ends.
        # A destination at a backup index gets only the maps that keep a copy there.
        index = outgoing.record.migration.destination_new_index
        names = [name for name in data.maps if index <= 0 or config.keeps_copy(name, index)]
        outgoing.transfer = OutgoingTransfer(
            kind=MIGRATION,
            transfer_id=outgoing.record.migration_id,
            partition_id=pid,
            target=outgoing.destination,
            stream=SendWindow.open(data.pieces(names), config.max_chunk_entries, config.max_chunk_bytes),
            replica_sequence=data.sequence,
            lineage=data.lineage,
            versions_from=data.versions_from,
            migration=outgoing.record,
            last_sent_ms=self.ctx.now_ms,
        )
        outgoing.last_progress_ms = self.ctx.now_ms
        self._fill_window(outgoing)

    def _fill_window(self, outgoing: Outgoing) -> None:
        transfer = outgoing.transfer
        if transfer is None:
            return
        throttle = self.throttle
        now_ms = self.ctx.now_ms
        data = self.data.store(transfer.partition_id)

        def built(chunk: TransferChunk) -> None:
            size = page_bytes(chunk.records)
            self.entries_sent += page_count(chunk.records)
            self.bytes_sent += size
            throttle.spend(size)

        def allow() -> bool:
            return throttle.allows(now_ms)

        try:
            transfer.fill(
                self.ctx.config,
                now_ms,
                lambda: data.writes.snapshot(now_ms),
                self.ctx.send,
                allow if throttle.bytes_per_s else None,
                built,
            )
        except RuntimeError as error:  # the maps changed under the stream: never expected
            self._finish_sending(outgoing, False, f"the partition changed while it was sent: {error}")

    def _resend_window(self, outgoing: Outgoing) -> None:
        if outgoing.transfer is not None:
            self.chunks_resent += outgoing.transfer.resend(self.ctx.now_ms, self.ctx.send)

    def resend_to(self, peer: MemberId) -> None:
        """``peer``'s connection came back: the open windows of chunks to it go again now, and a
        finished transfer's report, when ``peer`` leads."""
        for pid in sorted(self.outgoing):
            outgoing = self.outgoing[pid]
            if outgoing.transfer is None:
                continue
            if outgoing.complete:
                if self.consensus.leader == peer:
                    self._report(outgoing)
            elif outgoing.destination == peer:
                self._resend_window(outgoing)

    def on_chunk_ack(self, sender: MemberId, message: TransferAck) -> None:
        outgoing = self._outgoing_by_id(message.transfer_id)
        if outgoing is None or sender != outgoing.destination or outgoing.complete:
            return
        if not message.accepted:
            self._finish_sending(outgoing, False, message.reason or "the destination refused the data")
            return
        if outgoing.transfer is None:
            return
        progressed, finished = outgoing.transfer.acknowledge(message.sequence)
        if not progressed:
            return
        outgoing.last_progress_ms = self.ctx.now_ms
        if finished:
            self._finish_sending(outgoing, True, "")
        else:
            self._fill_window(outgoing)

    def _finish_sending(self, outgoing: Outgoing, success: bool, reason: str) -> None:
        outgoing.complete = True
        outgoing.success = success
        outgoing.reason = reason
        if outgoing.transfer is not None:
            outgoing.transfer.stream.close()
        self._report(outgoing)

    def _report(self, outgoing: Outgoing) -> None:
        outgoing.last_report_ms = self.ctx.now_ms
        self.to_leader(MigrationDataDone(outgoing.record.migration_id, outgoing.success, outgoing.reason))

    def _outgoing_by_id(self, migration_id: str) -> Outgoing | None:
        for outgoing in self.outgoing.values():
            if outgoing.record.migration_id == migration_id:
                return outgoing
        return None

    # --- destination -------------------------------------------------------------------------------

    def on_chunk(self, sender: MemberId, message: TransferChunk) -> None:
        migration = message.migration
        if migration is None or migration.migration_id != message.transfer_id:
            return  # no member sends such: not taken
        if migration.partition_id != message.partition_id:
            return
        pid = message.partition_id
        config = self.ctx.config
        window = window_chunks(config.migration_window_chunks, config.migration_fragments_enabled)
        incoming = self.incoming.get(pid)
        if incoming is None or incoming.record.migration_id != migration.migration_id:
            self._hold_early(sender, message, migration)
            return
        table = self.consensus.state.table
        if table is None or table.owner(pid) != sender:
            self.ctx.send(sender, self._ack(message, False, "not owner"))
            return
        if reason := transfer_problem(message):
            self.ctx.send(sender, self._ack(message, False, reason))
            return
        incoming.staging.receive(message, window)
        self.ctx.send(
            sender,
            TransferAck(
                kind=MIGRATION, transfer_id=message.transfer_id, sequence=incoming.staging.held_through, accepted=True
            ),
        )

    @staticmethod
    def _ack(message: TransferChunk, accepted: bool, reason: str) -> TransferAck:
        return TransferAck(
            kind=MIGRATION, transfer_id=message.transfer_id, sequence=message.sequence, accepted=accepted, reason=reason
        )

    def _hold_early(self, sender: MemberId, message: TransferChunk, migration: MigrationRecord) -> None:
        """A chunk of a migration whose start is not applied here yet: keep the first window of
        chunks for when it is (the sender would send them again, but only a retry interval
        later). Only from the partition's owner, only the first window, bounded in bytes."""
        pid = message.partition_id
        table = self.consensus.state.table
        window = self.ctx.config.migration_window_chunks
        if migration.migration.destination != self.ctx.identity or not 0 <= message.sequence < window:
            return
        if table is None or not 0 <= pid < table.partition_count or table.owner(pid) != sender:
            return
        config = self.ctx.config
        if page_count(message.records) > config.max_chunk_entries:
            return  # no member builds such a chunk
        size = self._chunk_bytes(message)
        slots = EARLY_CHUNKS_PER_SLOT * config.max_parallel_migrations
        budget = slots * window * config.max_chunk_bytes
        if size > budget:
            return
        while self._early and (self._early_bytes + size > budget or len(self._early) > slots):
            self._drop_newest_early()  # older ones are nearer their start
        held = self._early.get(migration.migration_id)
        if held is None:
            if len(self._early) >= slots:
                self._drop_newest_early()
            held = self._early[migration.migration_id] = (sender, {})
        previous = held[1].get(message.sequence)
        if previous is not None:
            self._early_bytes -= self._chunk_bytes(previous)
        held[1][message.sequence] = message
        self._early_bytes += size

    def _drop_newest_early(self) -> None:
        _, (_, dropped) = self._early.popitem()
        self._early_bytes -= sum(self._chunk_bytes(chunk) for chunk in dropped.values())

    @staticmethod
    def _chunk_bytes(chunk: TransferChunk) -> int:
        return page_bytes(chunk.records)

    def _take_early(self, migration_id: str) -> tuple[MemberId, dict[int, TransferChunk]] | None:
        held = self._early.pop(migration_id, None)
        if held is not None:
            self._early_bytes -= sum(self._chunk_bytes(chunk) for chunk in held[1].values())
        return held

    def on_commit(self, sender: MemberId, message: MigrationCommit) -> None:
        record = message.record
        if sender != self.consensus.leader or message.term != self.consensus.term or message.term < self._fence_term:
            return  # not from the leader we follow: a current leader asks again
        incoming = self.incoming.get(record.partition_id)
        if incoming is None or incoming.record.migration_id != record.migration_id:
            if self._committed_in_log(record):
                self.ctx.send(sender, MigrationCommitAck(record.migration_id, True))  # a resend
            elif record.migration_id in self._fenced_ids:
                self.ctx.send(sender, MigrationCommitAck(record.migration_id, False, "refused to a newer leader"))
            return  # its start is not applied here yet
        if incoming.fenced:
            self.ctx.send(sender, MigrationCommitAck(record.migration_id, False, "refused to a newer leader"))
        elif not incoming.staging.complete:
            self.ctx.send(sender, MigrationCommitAck(record.migration_id, False, "data incomplete"))
        else:
            incoming.installed = True
            # On disk before the acknowledgement leaves: the leader may commit the outcome on it,
            # and the source then drops its copy.
            self.data.stage(record.partition_id, incoming.record, incoming.staging.data(self.ctx.now_ms))
            self.ctx.send(sender, MigrationCommitAck(record.migration_id, True))

    def on_outcome_query(self, sender: MemberId, message: MigrationOutcomeQuery) -> None:
        record = message.record
        if message.term < self.consensus.term or not self.consensus.raft.membership.is_voter(sender):
            return  # only a voter can have become leader: nobody else fences this member
        self._fence_term = max(self._fence_term, message.term)
        incoming = self.incoming.get(record.partition_id)
        if incoming is not None and incoming.record.migration_id == record.migration_id:
            if not incoming.installed:
                incoming.fenced = True
            self.ctx.send(sender, MigrationOutcomeReply(record.migration_id, incoming.installed))
            return
        committed = self._committed_in_log(record)
        if not committed:
            if len(self._fenced_ids) >= MAX_FENCED_IDS:
                del self._fenced_ids[next(iter(self._fenced_ids))]
            self._fenced_ids[record.migration_id] = message.term
        self.ctx.send(sender, MigrationOutcomeReply(record.migration_id, committed))

    def _committed_in_log(self, record: MigrationRecord) -> bool:
        return self.consensus.state.committed(record.migration_id)

    # --- time ------------------------------------------------------------------------------------

    def tick(self) -> None:
        config = self.ctx.config
        for pid in sorted(self.outgoing):
            outgoing = self.outgoing[pid]
            transfer = outgoing.transfer
            if transfer is None:
                self._start_sending(pid)
                continue
            if outgoing.complete:
                if self.ctx.now_ms - outgoing.last_report_ms >= config.retry_interval_ms:
                    self._report(outgoing)  # until the outcome is in the log (the leader may change)
            elif self.ctx.now_ms - outgoing.last_progress_ms > config.migration_timeout_ms:
                self._finish_sending(outgoing, False, "the destination made no progress in time")
            elif transfer.resend_due(self.ctx.now_ms, config):
                self._resend_window(outgoing)
            if (
                not outgoing.complete
                and self.ctx.now_ms - outgoing.last_progress_told_ms >= config.migration_timeout_ms
                and outgoing.last_progress_ms > outgoing.last_progress_told_ms
            ):
                # A long transfer (a big partition, a throughput cap) that still moves: the leader
                # must not roll it back for its length.
                outgoing.last_progress_told_ms = self.ctx.now_ms
                self.to_leader(MigrationProgress(outgoing.record.migration_id))
        if self.throttle.bytes_per_s:
            # What the cap held back, as the bucket refills: each tick another migration goes
            # first, so that none starves past migration_timeout_ms behind the others.
            waiting = [pid for pid in sorted(self.outgoing) if self.outgoing[pid].transfer is not None]
            self._throttle_turn += 1
            for position in range(len(waiting)):
                outgoing = self.outgoing.get(waiting[(self._throttle_turn + position) % len(waiting)])
                if outgoing is not None and outgoing.transfer is not None and not outgoing.complete:
                    self._fill_window(outgoing)
                    if not outgoing.transfer.stream.window:
                        # Nothing in flight: it waits for this member's cap, not for its destination.
                        outgoing.last_progress_ms = self.ctx.now_ms
