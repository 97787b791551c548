"""Map operations on the partition owner and their replication to backups.

The owner applies a write, gives it the partition's next replica sequence and sends it to the
backups of its table; it answers the client only when every backup acknowledged (sync backups,
seed 001), so an acknowledged write is on the owner and every backup. Backups apply writes in
sequence order (holding a bounded number that arrive early) and only from the member their table
names as owner, which fences off a removed owner that still believes it owns the partition. A
write whose backups do not all answer within ``backup_ack_timeout_ms`` is reported indeterminate,
and the owner re-syncs the lagging backups with the partition's whole data. The owner also syncs
its backups when it becomes owner by promotion, since the surviving backups may differ by the
writes the old owner had in flight.
"""

from __future__ import annotations

from shardgrid.core.identity import Replica
from shardgrid.core.limits import (
    MAX_KEY_BYTES,
    MAX_MAP_NAME_CHARS,
    MAX_OPERATIONS_PER_REQUEST,
    MAX_VALUE_BYTES,
)
from shardgrid.core.member.state import SENDER, IncomingSync, MemberState, OutgoingSync, PendingCall, PendingWrite
from shardgrid.core.messages import (
    GET,
    INDETERMINATE,
    NOT_OWNER,
    OK,
    PUT,
    REJECTED,
    REMOVE,
    RETRY,
    BackupAck,
    BackupOperation,
    ClientReply,
    ClientRequest,
    Operation,
    OperationResult,
    ReplicaSyncAck,
    ReplicaSyncChunk,
    TableReply,
    TableRequest,
)
from shardgrid.core.store import PartitionData, chunk_entries


class Data(MemberState):
    # --- client requests -------------------------------------------------------------------------

    def on_client_request(self, client: str, message: ClientRequest) -> None:
        if len(message.operations) > MAX_OPERATIONS_PER_REQUEST:
            self.reply(client, ClientReply(message.call_id, (OperationResult(REJECTED),)))
            return
        call = PendingCall(
            client,
            message.call_id,
            [None] * len(message.operations),
            0,
            self.now_ms + self.config.backup_ack_timeout_ms,
        )
        for index, (pid, operation) in enumerate(message.operations):
            call.results[index] = self._execute(call, index, pid, operation)
        if call.open_writes == 0:
            self.reply(client, ClientReply(call.call_id, tuple(call.results)))

    def _execute(self, call: PendingCall, index: int, pid: int, operation: Operation) -> OperationResult | None:
        if not self._valid(pid, operation):
            return OperationResult(REJECTED)
        if not self.joined or self.table is None:
            if self.joined:
                self.request_assignment()
            return OperationResult(RETRY)
        owner = self.table.owner(pid)
        if owner != self.identity:
            if owner is None:
                return OperationResult(RETRY)
            return OperationResult(NOT_OWNER, owner_address=owner.address)
        data = self.stores.setdefault(pid, PartitionData())
        if operation.kind == GET:
            return OperationResult(OK, data.apply(operation))
        if self._writes_blocked(pid) or len(self.pending_writes) >= self.config.max_pending_writes:
            return OperationResult(RETRY)
        previous = data.apply(operation)
        data.sequence += 1
        backups = self.backups_of(pid)
        if not backups:
            return OperationResult(OK, previous)
        backup_op = BackupOperation(pid, data.sequence, operation, data.lineage)
        for backup in backups:
            self.send(backup, backup_op)
        self.pending_writes[(pid, data.sequence)] = PendingWrite(call, index, backup_op, set(backups), self.now_ms)
        call.open_writes += 1
        call.results[index] = OperationResult(OK, previous)
        return call.results[index]

    def _valid(self, pid: int, operation: Operation) -> bool:
        return (
            0 <= pid < self.config.partition_count
            and operation.kind in (GET, PUT, REMOVE)
            and len(operation.key) <= MAX_KEY_BYTES
            and len(operation.value) <= MAX_VALUE_BYTES
            and 0 < len(operation.map_name) <= MAX_MAP_NAME_CHARS
        )

    def _writes_blocked(self, pid: int) -> bool:
        active = self.active.get(pid)
        return (active is not None and active.role == SENDER) or pid in self.outgoing_syncs

    def on_table_request(self, client: str, message: TableRequest) -> None:
        if self.table is None:
            if self.joined:
                self.request_assignment()
            self.reply(client, TableReply(self.config.partition_count, (None,) * self.config.partition_count))
            return
        owners = tuple(slots[0].address if slots[0] is not None else None for slots in self.table.replicas)
        self.reply(client, TableReply(self.table.partition_count, owners))

    # --- owner: acknowledgements, retries, timeouts ------------------------------------------------

    def on_backup_ack(self, sender: Replica, message: BackupAck) -> None:
        for key in sorted(k for k in self.pending_writes if k[0] == message.partition_id and k[1] <= message.sequence):
            self._acknowledged(key, sender)

    def _acknowledged(self, key: tuple[int, int], backup: Replica) -> None:
        write = self.pending_writes.get(key)
        if write is None:
            return
        write.waiting.discard(backup)
        if not write.waiting:
            del self.pending_writes[key]
            self._finish_write(write.call)

    def _finish_write(self, call: PendingCall) -> None:
        call.open_writes -= 1
        if call.open_writes == 0:
            self.reply(call.client_address, ClientReply(call.call_id, tuple(call.results)))

    def data_tick(self) -> None:
        for key in sorted(self.pending_writes):
            write = self.pending_writes.get(key)
            if write is None:
                continue
            if self.now_ms >= write.call.deadline_ms:
                del self.pending_writes[key]
                write.call.results[write.index] = OperationResult(INDETERMINATE)
                self._finish_write(write.call)
                self.start_sync(key[0], sorted(write.waiting))
            elif self.now_ms - write.last_sent_ms >= self.config.retry_interval_ms:
                write.last_sent_ms = self.now_ms
                for backup in sorted(write.waiting):
                    self.send(backup, write.operation)
        self._sync_tick()

    # --- backup: applying in order ---------------------------------------------------------------

    def on_backup_operation(self, sender: Replica, message: BackupOperation) -> None:
        pid = message.partition_id
        if self.table is None or not 0 <= pid < self.table.partition_count:
            return
        if self.table.owner(pid) != sender or self.replica_index_of(pid, self.identity) < 1:
            return  # not from the owner this member knows: fenced off (the sender retries)
        data = self.stores.get(pid)
        if data is None or pid in self.incoming_syncs or data.lineage != message.lineage:
            return  # not yet in the owner's lineage: its sync (or a timeout that starts one) fixes that
        if message.sequence > data.sequence + 1:
            held = self.reorder.setdefault(pid, {})
            if len(held) < self.config.max_backup_reorder:
                held[message.sequence] = message.operation
            return
        if message.sequence == data.sequence + 1:
            data.apply(message.operation)
            data.sequence += 1
            held = self.reorder.get(pid, {})
            while data.sequence + 1 in held:
                data.apply(held.pop(data.sequence + 1))
                data.sequence += 1
            for stale in [s for s in held if s <= data.sequence]:
                del held[stale]
        self.send(sender, BackupAck(pid, data.sequence))

    # --- replica sync: the owner's whole partition to its backups ----------------------------------

    def start_sync(self, pid: int, backups: list[Replica]) -> None:
        if self.table is None or self.table.owner(pid) != self.identity:
            return
        current = set(self.backups_of(pid))
        targets = [b for b in backups if b in current]
        if not targets:
            return
        sync = self.outgoing_syncs.get(pid)
        if sync is not None:
            for backup in targets:
                sync.progress.setdefault(backup, 0)
            return
        data = self.stores.setdefault(pid, PartitionData())
        self.sync_counter += 1
        chunks = chunk_entries(list(data.entries()), self.config.max_chunk_entries, self.config.max_chunk_bytes)
        sync = OutgoingSync(
            f"{self.identity.uuid[:8]}-s{self.sync_counter}",
            chunks,
            data.sequence,
            data.lineage,
            dict.fromkeys(targets, 0),
            self.now_ms,
            self.now_ms,
        )
        self.outgoing_syncs[pid] = sync
        for backup in sorted(targets):
            self._send_sync_chunk(pid, sync, backup)

    def _send_sync_chunk(self, pid: int, sync: OutgoingSync, backup: Replica) -> None:
        index = sync.progress[backup]
        last = index == len(sync.chunks) - 1
        chunk = ReplicaSyncChunk(
            sync.sync_id, pid, index, sync.chunks[index], last, sync.replica_sequence, sync.lineage
        )
        self.send(backup, chunk)

    def on_sync_ack(self, sender: Replica, message: ReplicaSyncAck) -> None:
        for pid, sync in sorted(self.outgoing_syncs.items()):
            if sync.sync_id != message.sync_id or sender not in sync.progress:
                continue
            if not message.accepted:
                pass  # busy with a migration of the partition: the chunk is resent until it takes it
            elif message.sequence == sync.progress[sender]:
                if message.sequence == len(sync.chunks) - 1:
                    del sync.progress[sender]
                else:
                    sync.progress[sender] += 1
                    self._send_sync_chunk(pid, sync, sender)
            if not sync.progress:
                del self.outgoing_syncs[pid]
            return

    def on_sync_chunk(self, sender: Replica, message: ReplicaSyncChunk) -> None:
        pid = message.partition_id
        if self.table is None or not 0 <= pid < self.table.partition_count:
            return
        if self.table.owner(pid) != sender or self.replica_index_of(pid, self.identity) < 1 or pid in self.active:
            self.send(sender, ReplicaSyncAck(message.sync_id, message.sequence, False))
            return
        incoming = self.incoming_syncs.get(pid)
        if incoming is None or incoming.sync_id != message.sync_id:
            if message.sequence != 0:
                return
            if self._stale_sync(pid, message):
                self.send(sender, ReplicaSyncAck(message.sync_id, message.sequence, True))
                return
            incoming = IncomingSync(message.sync_id, 0, [], message.lineage, message.replica_sequence)
            self.incoming_syncs[pid] = incoming
        if message.sequence == incoming.next_chunk:
            incoming.staged.extend(message.entries)
            incoming.next_chunk += 1
            if message.last:
                self.stores[pid] = PartitionData.from_entries(
                    incoming.staged, message.replica_sequence, message.lineage
                )
                self.reorder.pop(pid, None)
                del self.incoming_syncs[pid]
        if message.sequence < incoming.next_chunk or pid not in self.incoming_syncs:
            self.send(sender, ReplicaSyncAck(message.sync_id, message.sequence, True))

    def _stale_sync(self, pid: int, message: ReplicaSyncChunk) -> bool:
        """A late copy of a sync older than what this backup holds or is receiving.

        Installing it would roll the backup back past writes it has already acknowledged.
        """
        data = self.stores.get(pid)
        if data is not None and data.lineage == message.lineage and message.replica_sequence < data.sequence:
            return True
        incoming = self.incoming_syncs.get(pid)
        return (
            incoming is not None
            and incoming.lineage == message.lineage
            and message.replica_sequence < incoming.replica_sequence
        )

    def _sync_tick(self) -> None:
        # A sync is never abandoned while its backups are still backups: until they hold the
        # owner's lineage they cannot take its writes (after_table_change drops former backups).
        for pid, sync in sorted(self.outgoing_syncs.items()):
            if self.now_ms - sync.last_sent_ms >= self.config.retry_interval_ms:
                sync.last_sent_ms = self.now_ms
                for backup in sorted(sync.progress):
                    self._send_sync_chunk(pid, sync, backup)

    # --- reacting to table changes ---------------------------------------------------------------

    def after_table_change(self, partition_ids: list[int]) -> None:
        """Drop data this member no longer replicates, stop waiting on former backups, sync new ones."""
        if self.table is None:
            return
        for pid in sorted(set(partition_ids)):
            index = self.replica_index_of(pid, self.identity)
            if index == -1 and pid not in self.active:
                self.stores.pop(pid, None)
                self.reorder.pop(pid, None)
                self.incoming_syncs.pop(pid, None)
            if index == 0:
                backups = set(self.backups_of(pid))
                for key in sorted(k for k in self.pending_writes if k[0] == pid):
                    for former in sorted(self.pending_writes[key].waiting - backups):
                        self._acknowledged(key, former)
                sync = self.outgoing_syncs.get(pid)
                if sync is not None:
                    for former in [b for b in sync.progress if b not in backups]:
                        del sync.progress[former]
                    if not sync.progress:
                        del self.outgoing_syncs[pid]
            else:
                self._fail_pending_writes(pid)
                self.outgoing_syncs.pop(pid, None)

    def _fail_pending_writes(self, pid: int) -> None:
        """No longer the owner: writes still waiting for backups cannot be confirmed here."""
        for key in sorted(k for k in self.pending_writes if k[0] == pid):
            write = self.pending_writes.pop(key)
            write.call.results[write.index] = OperationResult(INDETERMINATE)
            self._finish_write(write.call)

    def sync_after_promotion(self, partition_ids: list[int]) -> None:
        """A promoted owner starts a new lineage and brings its backups into it."""
        for pid in partition_ids:
            if self.table is not None and self.table.owner(pid) == self.identity:
                data = self.stores.setdefault(pid, PartitionData())
                data.lineage = f"{self.identity.uuid[:8]}@{self.table.versions[pid]}"
                self.start_sync(pid, self.backups_of(pid))
