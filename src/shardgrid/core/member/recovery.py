"""A new master finds the most recent table and finishes what the old one left half done.

Seed 000, sections 1.2 and 2.2: before it publishes or plans anything, the new master fetches
every member's partition table, active migrations and completed migrations. It takes the newest
version of each partition. A migration some member recorded as committed (the destination commits
first) is committed everywhere; any other unresolved migration is rolled back on both sides, with
the partition's version bumped by two so that the master's table wins over a destination that
acted on a commit the old master never confirmed. Then it repairs the table for the members that
left and repartitions.
"""

from __future__ import annotations

from shardgrid.core.identity import Replica
from shardgrid.core.member.state import MemberState, Recovery
from shardgrid.core.messages import (
    COMMITTED,
    ROLLED_BACK,
    FetchPartitionState,
    MigrationRecord,
    PartitionStateReply,
    TableEntry,
)
from shardgrid.core.table import PartitionTable


class RecoveryConcern(MemberState):
    def start_recovery(self, departed: list[Replica]) -> None:
        self.recovery = Recovery(set(self.others()), {}, self.now_ms)
        self._departed_at_claim = list(departed)
        for member in sorted(self.recovery.waiting):
            self.send(member, FetchPartitionState(self.member_list_version))
        self._maybe_finish_recovery()

    def on_fetch_partition_state(self, sender: Replica, message: FetchPartitionState) -> None:
        if sender != self.master or message.member_list_version != self.member_list_version:
            return
        self.send(sender, self.partition_state_reply())

    def partition_state_reply(self) -> PartitionStateReply:
        entries: tuple[TableEntry, ...] = ()
        if self.table is not None:
            entries = tuple(self.entry(pid) for pid in range(self.table.partition_count))
        active = tuple(self.active[pid].record for pid in sorted(self.active))
        completed = tuple(self.completed[key] for key in sorted(self.completed))
        return PartitionStateReply(self.member_list_version, entries, active, completed)

    def on_partition_state_reply(self, sender: Replica, message: PartitionStateReply) -> None:
        if self.recovery is None or sender not in self.recovery.waiting:
            return
        if message.member_list_version != self.member_list_version:
            return
        self.recovery.waiting.discard(sender)
        self.recovery.replies[sender] = message
        self._maybe_finish_recovery()

    def recovery_tick(self) -> None:
        recovery = self.recovery
        if recovery is None:
            return
        if self.now_ms - recovery.last_sent_ms >= self.config.retry_interval_ms:
            recovery.last_sent_ms = self.now_ms
            for member in sorted(recovery.waiting):
                self.send(member, FetchPartitionState(self.member_list_version))
        self._maybe_finish_recovery()

    def _maybe_finish_recovery(self) -> None:
        recovery = self.recovery
        if recovery is None or recovery.waiting:
            return
        replies = [self.partition_state_reply(), *(recovery.replies[m] for m in sorted(recovery.replies))]
        self.recovery = None
        newest: dict[int, TableEntry] = {}
        for reply in replies:
            for entry in reply.entries:
                known = newest.get(entry.partition_id)
                if known is None or entry.version > known.version:
                    newest[entry.partition_id] = entry
        decided: dict[str, MigrationRecord] = {}
        for reply in replies:
            for record in reply.completed:
                if record.migration_id not in decided or record.status == COMMITTED:
                    decided[record.migration_id] = record
        rolled_back: list[MigrationRecord] = []
        for reply in replies:
            for record in reply.active:
                if record.migration_id not in decided:
                    decided[record.migration_id] = record.with_status(ROLLED_BACK)
                    rolled_back.append(decided[record.migration_id])
        if newest:
            count = self.config.partition_count
            table = PartitionTable.empty(count)
            entries = {pid: (e.replicas, e.version) for pid, e in newest.items()}
            for record in rolled_back:
                pid = record.partition_id
                replicas, version = entries.get(pid, ((None,) * 7, 0))
                entries[pid] = (replicas, max(version + 1, record.version_after))
            self.table = table.with_partitions(entries)
        self.completed = decided
        for record in decided.values():
            self.resolve_active(record)
        self.publish_full()
        self.after_table_change(list(range(self.table.partition_count)) if self.table else [])
        departed = [m for m in self._departed_at_claim]
        self._departed_at_claim = []
        # Members the old master had in its table but that are gone now: repair for them too.
        if self.table is not None:
            listed = set(self.member_replicas())
            gone = [m for m in self.table.members() if m not in listed]
            departed = sorted(set(departed) | set(gone))
            if departed:
                self.repair(departed)
        self.needs_rebalance = True
