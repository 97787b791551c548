"""Replica syncs: an owner bringing a backup that lags (or lost its copy) up to date, and a backup
taking such a sync; and anti-entropy, the summaries that let a backup find out it lags.

A sync sends just the maps changed since what the backup holds (per-map replica versions, seed
002's per-namespace versions), or the whole partition when that is unknown. It holds back writes
only to the maps it reads. The owner also syncs its backups when it becomes owner by promotion,
since the surviving backups may differ by the writes the old owner had in flight. Settled
partitions are summarised to their backups every ``anti_entropy_interval_ms``: a backup holding
less, or another lineage, asks for a sync.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from shardgrid.core.identity import MemberId
from shardgrid.core.member.backup_replication import BackupReplication
from shardgrid.core.member.consensus import Consensus
from shardgrid.core.member.context import Context
from shardgrid.core.member.owner_replication import OwnerReplication
from shardgrid.core.member.routes import Routes
from shardgrid.core.messages import SYNC, ReplicaSummary, ReplicaSyncRequest, TransferAck, TransferChunk
from shardgrid.core.records import page_count
from shardgrid.core.store import PartitionData
from shardgrid.core.transfer import OutgoingTransfer, SendWindow, Staging, transfer_problem, window_chunks


class Copies(Protocol):
    """What the syncs ask of the data path."""

    def held(self, pid: int) -> PartitionData | None: ...
    def store(self, pid: int) -> PartitionData: ...
    def install(self, pid: int, data: PartitionData, index: int) -> None: ...
    def replaced(self, pid: int) -> None: ...


class Involved(Protocol):
    def involved(self, pid: int) -> bool: ...


@dataclass(slots=True, kw_only=True)
class OutgoingSync:
    """The owner bringing one backup up to date, from the transfer's ``base_sequence`` (-1: whole)."""

    transfer: OutgoingTransfer  # its target is the backup
    maps: frozenset[str]  # the maps it reads: their writes wait until it ends
    refused: bool = False  # the backup does not follow it: start over at the next retry

    @property
    def sync_id(self) -> str:
        return self.transfer.transfer_id

    @property
    def partition_id(self) -> int:
        return self.transfer.partition_id

    @property
    def backup(self) -> MemberId:
        return self.transfer.target


@dataclass(slots=True)
class IncomingSync:
    sync_id: str
    base_sequence: int
    staging: Staging


class ReplicaSyncs:
    def __init__(
        self,
        ctx: Context,
        consensus: Consensus,
        routes: Routes,
        copies: Copies,
        owner: OwnerReplication,
        backups: BackupReplication,
        member_serves: Callable[[], bool],
        room_to_size: Callable[[int], bool] | None = None,
    ) -> None:
        self.ctx = ctx
        self.consensus = consensus
        self.routes = routes
        self.room_to_size = room_to_size  # whether a sync may make that much room ahead (``DataPath``)
        self.copies = copies
        self.owner = owner
        self.backups = backups
        self.entries_sent = 0  # records this member sent in replica syncs as owner (resends not counted)
        self.member_serves = member_serves
        self.migrations: Involved | None = None  # wired by the member (they ask each other)
        self._outgoing: dict[int, dict[MemberId, OutgoingSync]] = {}  # per partition, per backup
        self._by_id: dict[str, OutgoingSync] = {}
        self._incoming: dict[int, IncomingSync] = {}
        self._counter = 0
        self._last_summary_ms = 0

    # --- what others ask ---------------------------------------------------------------------------

    def room_ahead_bytes(self) -> int:
        """The room this member's incoming syncs made ahead of records still to come."""
        return sum(incoming.staging.room_ahead_bytes() for incoming in self._incoming.values())

    def syncing(self, pid: int) -> bool:
        """Whether this member, the owner, is bringing a backup of ``pid`` up to date."""
        return pid in self._outgoing

    def blocks(self, pid: int, map_name: str) -> bool:
        """Whether a sync of the partition reads this map: its writes wait (the copy sent must not
        change)."""
        syncs = self._outgoing.get(pid)
        return syncs is not None and any(map_name in sync.maps for sync in syncs.values())

    def receiving(self, pid: int) -> bool:
        """Whether this member, a backup, is taking a sync of ``pid``."""
        return pid in self._incoming

    def busy(self) -> bool:
        return bool(self._outgoing or self._incoming)

    def in_flight(self) -> int:
        """Syncs this member sends or receives."""
        return sum(len(syncs) for syncs in self._outgoing.values()) + len(self._incoming)

    # --- owner: sending ----------------------------------------------------------------------------

    def start_sync(self, pid: int, backups: Sequence[MemberId]) -> None:
        """Bring ``backups`` up to date: from the sequence each acknowledged, or whole."""
        for backup in backups:
            self._sync_to(pid, backup, self.owner.acked_by(pid, backup))

    def _sync_to(self, pid: int, backup: MemberId, base: int) -> None:
        table = self.consensus.state.table
        if table is None or table.owner(pid) != self.ctx.identity:
            return
        slots = table.replicas[pid]
        if backup not in self.routes.backups_in(slots):
            return
        syncs = self._outgoing.setdefault(pid, {})
        if backup in syncs:
            return  # one at a time per backup: it asks again if this one does not do
        data = self.copies.store(pid)
        if not data.versions_from <= base <= data.sequence:
            base = -1  # what the backup holds is unknown, or older than the versions tell apart
        config = self.ctx.config
        index = slots.index(backup)
        kept = [name for name in data.maps if config.keeps_copy(name, index)]
        names = kept if base < 0 else [name for name in kept if data.version_of(name) > base]
        self._counter += 1
        transfer = OutgoingTransfer(
            kind=SYNC,
            transfer_id=f"{self.ctx.identity.uuid[:8]}-s{self._counter}",
            partition_id=pid,
            target=backup,
            stream=SendWindow.open(data.pieces(names), config.max_chunk_entries, config.max_chunk_bytes),
            replica_sequence=data.sequence,
            lineage=data.lineage,
            versions_from=data.versions_from,
            base_sequence=base,
            last_sent_ms=self.ctx.now_ms,
        )
        sync = OutgoingSync(transfer=transfer, maps=frozenset(names))
        syncs[backup] = sync
        self._by_id[sync.sync_id] = sync
        self._fill(sync)

    def _fill(self, sync: OutgoingSync) -> None:
        now_ms = self.ctx.now_ms
        data = self.copies.store(sync.partition_id)
        # The maps it reads take no writes: the stream never finds them changed.

        def built(chunk: TransferChunk) -> None:
            self.entries_sent += page_count(chunk.records)

        sync.transfer.fill(self.ctx.config, now_ms, lambda: data.writes.snapshot(now_ms), self.ctx.send, built=built)

    def _end(self, sync: OutgoingSync) -> None:
        self._by_id.pop(sync.sync_id, None)
        syncs = self._outgoing.get(sync.partition_id)
        if syncs is not None and syncs.get(sync.backup) is sync:
            del syncs[sync.backup]
            if not syncs:
                del self._outgoing[sync.partition_id]

    def on_sync_ack(self, sender: MemberId, message: TransferAck) -> None:
        sync = self._by_id.get(message.transfer_id)
        if sync is None or sync.backup != sender:
            return
        pid = sync.partition_id
        if not message.accepted:
            if sync.transfer.base_sequence >= 0:
                # It no longer holds what the sync was based on: send it everything instead.
                self._end(sync)
                self._sync_to(pid, sender, -1)
            else:
                # Its table may lag, or it lost track of this sync (a chunk came before the first):
                # a fresh sync follows at the next retry, for as long as it is a backup.
                sync.refused = True
            return
        progressed, finished = sync.transfer.acknowledge(message.sequence)
        if progressed:
            sync.refused = False  # it follows the sync after all (the refusal was overtaken)
        if message.complete or finished:
            self._end(sync)
            data = self.copies.held(pid)
            if data is not None and sync.transfer.lineage == data.lineage:
                # It holds the partition as of the sync.
                self.owner.backup_caught_up(pid, sender, sync.transfer.replica_sequence)
        elif progressed:
            self._fill(sync)

    def on_sync_request(self, sender: MemberId, message: ReplicaSyncRequest) -> None:
        pid = message.partition_id
        if not 0 <= pid < self.ctx.config.partition_count:
            return
        data = self.copies.held(pid)
        same_lineage = data is not None and data.lineage == message.lineage
        self._sync_to(pid, sender, message.sequence if same_lineage else -1)

    def restart_reading(self, pid: int, maps: Sequence[str], then: Callable[[], None]) -> None:
        """The owner is about to change ``maps`` of ``pid`` under its syncs (``then`` does it): the
        syncs that read them end first, and their backups get a new one after (found by an
        outside tester: a stream whose map was emptied under it sent empty pages, never its last,
        and the map's writes waited on it for good)."""
        wanted = set(maps)
        restart = [s.backup for s in self._outgoing.get(pid, {}).values() if s.maps.intersection(wanted)]
        for backup in restart:
            self._end(self._outgoing[pid][backup])
        then()
        if restart:
            self.start_sync(pid, restart)

    # --- backup: taking a sync -----------------------------------------------------------------------

    def on_sync_chunk(self, sender: MemberId, message: TransferChunk) -> None:
        pid = message.partition_id
        table = self.consensus.state.table
        if table is None or not 0 <= pid < table.partition_count:
            return
        # A backup that is also a migration's destination takes the sync all the same: the owner
        # snapshots the partition for the migration only once its syncs are done.
        index = self.routes.index_of(pid)
        if table.owner(pid) != sender or index < 1:
            self.ctx.send(sender, _ack(message, -1, False))
            return
        if transfer_problem(message):
            return  # malformed: nothing taken, nothing acknowledged
        incoming = self._incoming.get(pid)
        if incoming is None or incoming.sync_id != message.transfer_id:
            held = self.copies.held(pid)
            if held is not None and held.lineage == message.lineage and held.sequence >= message.replica_sequence:
                # It already holds the partition as of this sync (it took it and the owner missed
                # the answer, or the sync started on old news): taking it would roll back writes
                # it acknowledged.
                self.ctx.send(sender, _ack(message, -1, True, complete=True))
                return
            if message.sequence != 0:
                # Of a sync it does not follow (its first chunk was lost, or a migration's data
                # replaced what it was taking): the owner starts over.
                self.ctx.send(sender, _ack(message, -1, False))
                return
            if incoming is not None and _older_than(message, incoming.staging):
                return  # older than the sync this backup is taking
            if message.base_sequence >= 0 and not self._holds_base(pid, message):
                self.ctx.send(sender, _ack(message, -1, False))
                return
            staging = Staging(
                hash_seed=self.ctx.hash_seed, max_idle_ms=self.ctx.config.max_idle_ms, fits=self.room_to_size
            )
            incoming = IncomingSync(message.transfer_id, message.base_sequence, staging)
            self._incoming[pid] = incoming
        config = self.ctx.config
        staging = incoming.staging
        staging.receive(message, window_chunks(config.migration_window_chunks, config.migration_fragments_enabled))
        if staging.complete:
            del self._incoming[pid]
            if incoming.base_sequence < 0:
                self.copies.install(pid, staging.data(self.ctx.now_ms), index)
            elif self._holds_base(pid, message):
                data = self.copies.store(pid)
                data.replace_maps(staging.maps, staging.versions)
                data.writes.install(staging.writers, self.ctx.now_ms)
                data.sequence = staging.replica_sequence
                self.copies.replaced(pid)
                self.backups.drain_early_runs(pid, data)
            else:
                self.ctx.send(sender, _ack(message, staging.held_through, False))
                return
        ack = _ack(message, staging.held_through, True, complete=staging.complete)
        self.ctx.send(sender, ack)

    def _holds_base(self, pid: int, message: TransferChunk) -> bool:
        """A sync of just the maps changed since ``base_sequence`` is right only on a copy of the
        owner's lineage at that sequence or later (and not yet at the sync's own)."""
        held = self.copies.held(pid)
        return (
            held is not None
            and held.lineage == message.lineage
            and message.base_sequence <= held.sequence < message.replica_sequence
        )

    def forget_incoming(self, pid: int) -> None:
        """The partition's copy was replaced, dropped, or became the owner's: a sync it was taking
        goes."""
        self._incoming.pop(pid, None)

    # --- anti-entropy ------------------------------------------------------------------------------

    def ask_for_missing_data(self) -> None:
        """Backups of partitions this member holds no data of (a snapshot named it) ask the owner."""
        table = self.consensus.state.table
        if table is None:
            return
        me = self.ctx.identity
        migrations = self.migrations
        for pid, slots in enumerate(table.replicas):
            owner = slots[0]
            if owner is None or owner == me or me not in slots or pid in self._incoming:
                continue
            if self.copies.held(pid) is not None or (migrations is not None and migrations.involved(pid)):
                continue
            self.ctx.send(owner, ReplicaSyncRequest(pid))

    def _send_summaries(self) -> None:
        """Tell each backup where every settled partition this member owns stands."""
        table = self.consensus.state.table
        if table is None or not self.member_serves():
            return
        me = self.ctx.identity
        migrations = self.migrations
        per_backup: dict[MemberId, tuple[list[int], list[str], list[int]]] = {}
        for pid, slots in enumerate(table.replicas):
            if slots[0] != me or pid in self._outgoing or not self.owner.settled(pid):
                continue
            if migrations is not None and migrations.involved(pid):
                continue
            data = self.copies.held(pid)
            if data is None:
                continue
            for backup in self.routes.backups_in(slots):
                pids, lineages, sequences = per_backup.setdefault(backup, ([], [], []))
                pids.append(pid)
                lineages.append(data.lineage)
                sequences.append(data.sequence)
        for backup in sorted(per_backup):
            pids, lineages, sequences = per_backup[backup]
            self.ctx.send(backup, ReplicaSummary(tuple(pids), tuple(lineages), tuple(sequences)))

    def on_summary(self, sender: MemberId, message: ReplicaSummary) -> None:
        """Ask for a sync of each partition this backup holds behind its owner (bounded per summary),
        saying where it stands: the owner then sends just the maps changed since."""
        table = self.consensus.state.table
        columns = (message.partition_ids, message.lineages, message.sequences)
        if table is None or len({len(column) for column in columns}) != 1:
            return
        migrations = self.migrations
        asked = 0
        for pid, lineage, sequence in zip(*columns, strict=True):
            if asked >= self.ctx.config.max_parallel_replications:
                break
            if not 0 <= pid < table.partition_count or table.owner(pid) != sender or self.routes.index_of(pid) < 1:
                continue
            if pid in self._incoming or (migrations is not None and migrations.involved(pid)):
                continue
            data = self.copies.held(pid)
            # Settled on the owner means every backup acknowledged its sequence: holding less, or
            # another lineage, this backup lost something.
            if data is None or data.lineage != lineage or data.sequence < sequence:
                held = -1 if data is None else data.sequence
                self.ctx.send(sender, ReplicaSyncRequest(pid, data.lineage if data else "", held))
                asked += 1

    # --- time, links, table changes ------------------------------------------------------------------

    def tick(self) -> None:
        # A sync is never abandoned while its backup is still a backup: until it holds the owner's
        # lineage it cannot take its writes (``on_table_change`` drops former backups).
        now = self.ctx.now_ms
        config = self.ctx.config
        for pid in sorted(self._outgoing):
            syncs = self._outgoing[pid]
            for backup in sorted(syncs):
                sync = syncs[backup]
                if sync.refused:
                    if now - sync.transfer.last_sent_ms >= config.retry_interval_ms:
                        self._end(sync)
                        self.start_sync(pid, [backup])
                    continue
                if sync.transfer.resend_due(now, config):
                    sync.transfer.resend(now, self.ctx.send)
        if now - self._last_summary_ms >= config.anti_entropy_interval_ms:
            self._last_summary_ms = now
            self._send_summaries()

    def resend_to(self, peer: MemberId) -> None:
        """``peer``'s connection came back: the chunks of its open windows go again now."""
        for pid in sorted(self._outgoing):
            sync = self._outgoing[pid].get(peer)
            if sync is None or sync.refused:
                continue
            sync.transfer.resend(self.ctx.now_ms, self.ctx.send)

    def on_table_change(self, pid: int, index: int, backups: set[MemberId]) -> None:
        """This member is now at slot ``index`` of ``pid`` (whose backups are ``backups``): an
        owner takes no sync (it may have been promoted mid-one) and syncs only its backups; a
        member that is not the owner sends none."""
        if index == 0:
            self._incoming.pop(pid, None)
            for sync in list(self._outgoing.get(pid, {}).values()):
                if sync.backup not in backups:
                    self._end(sync)
        else:
            for sync in list(self._outgoing.get(pid, {}).values()):
                self._end(sync)

    def partitions_syncing(self) -> set[int]:
        """Partitions with a sync this member sends or takes."""
        return set(self._outgoing) | set(self._incoming)

    def clear(self) -> None:
        self._outgoing.clear()
        self._by_id.clear()
        self._incoming.clear()


def _older_than(message: TransferChunk, taking: Staging) -> bool:
    return taking.lineage == message.lineage and message.replica_sequence < taking.replica_sequence


def _ack(message: TransferChunk, sequence: int, accepted: bool, complete: bool = False) -> TransferAck:
    return TransferAck(
        kind=SYNC, transfer_id=message.transfer_id, sequence=sequence, accepted=accepted, complete=complete
    )
