"""Publishing the partition table (master) and applying it (everyone).

Seed 003: every partition has its own version; the master publishes only the partitions that
changed, at once, to every member, and the whole table every ``table_publish_interval_ms``. A
member takes a partition only when the received version is newer than its own. Completed
migrations travel with the partitions they changed; the master forgets one only after every
member acknowledged holding its partition at a version that includes it (seed 000, section 2.1).
"""

from __future__ import annotations

from shardgrid.core.errors import invariant
from shardgrid.core.identity import Replica
from shardgrid.core.limits import MAX_COMPLETED_MIGRATIONS
from shardgrid.core.member.state import MemberState
from shardgrid.core.messages import (
    COMMITTED,
    MigrationOutcomeQuery,
    MigrationRecord,
    PartitionUpdate,
    PartitionUpdateAck,
    PromotionCommit,
    PromotionCommitAck,
    TableEntry,
)
from shardgrid.core.table import PartitionTable


class Publication(MemberState):
    # --- master side ---------------------------------------------------------------------------

    def publish(self, partition_ids: list[int], records: list[MigrationRecord]) -> None:
        """Send the changed partitions and their completed migrations to every other member."""
        if not partition_ids or self.table is None:
            return
        self.table_changed_ms = self.now_ms
        entries = tuple(self.entry(pid) for pid in sorted(set(partition_ids)))
        update = PartitionUpdate(self.member_list_version, entries, tuple(records))
        for member in self.others():
            self.send(member, update)

    def publish_full(self, to: list[Replica] | None = None) -> None:
        if self.table is None:
            return
        if to is None:
            self.last_full_publish_ms = self.now_ms
        entries = tuple(self.entry(pid) for pid in range(self.table.partition_count))
        completed = tuple(self.completed[key] for key in sorted(self.completed))
        update = PartitionUpdate(self.member_list_version, entries, completed, full=True)
        for member in to if to is not None else self.others():
            self.send(member, update)

    def publication_tick(self) -> None:
        due = self.now_ms - self.last_full_publish_ms >= self.config.table_publish_interval_ms
        if self.is_master and self.recovery is None and due:
            self.publish_full()

    def record_completed(self, record: MigrationRecord) -> None:
        self.completed[record.migration_id] = record
        if len(self.completed) > MAX_COMPLETED_MIGRATIONS:
            # A member that never acknowledges must not grow this without bound. Forgetting the
            # oldest record is safe: a participant that missed it resolves its migration when it
            # sees the partition at a newer version (resolve_overtaken).
            del self.completed[min(self.completed, key=lambda k: (self.completed[k].version_after, k))]

    def on_update_ack(self, sender: Replica, message: PartitionUpdateAck) -> None:
        if not self.is_master or not self.is_member(sender) or self.table is None:
            return
        acked = self.acked_versions.setdefault(sender, [0] * self.table.partition_count)
        for pid, version in message.versions:
            if 0 <= pid < len(acked) and version > acked[pid]:
                acked[pid] = version
        self.evict_completed()

    def evict_completed(self) -> None:
        """Forget completed migrations every current member has acknowledged."""
        members = self.others()
        if not members:
            self.completed.clear()
            return
        for key in sorted(self.completed):
            record = self.completed[key]
            pid = record.partition_id
            if all(
                self.acked_versions.get(m) is not None and self.acked_versions[m][pid] >= record.version_after
                for m in members
            ):
                del self.completed[key]

    def on_outcome_query(self, sender: Replica, message: MigrationOutcomeQuery) -> None:
        if not self.is_master or self.table is None or self.recovery is not None:
            return
        if not 0 <= message.partition_id < self.table.partition_count:
            return
        record = self.completed.get(message.migration_id)
        in_flight = self.in_flight.get(message.partition_id)
        if record is None and in_flight is not None and in_flight.record.migration_id == message.migration_id:
            return  # still running: the participant asks again later
        records = (record,) if record is not None else ()
        self.send(sender, PartitionUpdate(self.member_list_version, (self.entry(message.partition_id),), records))

    # --- every member ----------------------------------------------------------------------------

    def on_partition_update(self, sender: Replica, message: PartitionUpdate) -> None:
        if sender != self.master or self.is_master or self.accepted_claimant not in (None, sender):
            return
        changed = self.apply_entries(message.entries)
        if message.full:
            # Keep what this member committed as a destination that the master's table does not
            # show yet (its acknowledgement may still be on the way): the master will ask again.
            master_versions = {e.partition_id: e.version for e in message.entries}
            pending = {
                key: r
                for key, r in self.completed.items()
                if r.status == COMMITTED and master_versions.get(r.partition_id, 0) < r.version_after
            }
            self.completed = {r.migration_id: r for r in message.completed} | pending
        else:
            for record in message.completed:
                self.completed[record.migration_id] = record
        for record in message.completed:
            self.resolve_active(record)
        self.resolve_overtaken([e.partition_id for e in message.entries])
        self.after_table_change(changed + [r.partition_id for r in message.completed])
        table = self.table
        versions = tuple((e.partition_id, table.versions[e.partition_id]) for e in message.entries) if table else ()
        self.send(sender, PartitionUpdateAck(versions))

    def apply_entries(self, entries: tuple[TableEntry, ...]) -> list[int]:
        """Take every entry whose version is newer than ours; returns the partitions taken."""
        if self.table is None:
            self.table = PartitionTable.empty(self.config.partition_count)
        newer = {
            e.partition_id: (e.replicas, e.version)
            for e in entries
            if 0 <= e.partition_id < self.table.partition_count and e.version > self.table.versions[e.partition_id]
        }
        if newer:
            before = self.table
            self.table = self.table.with_partitions(newer)
            for pid in newer:
                invariant(self.table.versions[pid] > before.versions[pid], "partition versions only grow")
        return sorted(newer)

    def resolve_overtaken(self, partition_ids: list[int]) -> None:
        """A migration whose partition the master has moved past is over, whether we saw how or not.

        The master changes a partition's version only after the migration of it ended. A
        destination still holding its migration never installed the data (the commit would have
        ended it), so dropping the staged data is the rollback; a sender keeps or drops its data
        by the table, as after any outcome.
        """
        assert self.table is not None
        for pid in partition_ids:
            active = self.active.get(pid)
            if (
                active is not None
                and 0 <= pid < self.table.partition_count
                and self.table.versions[pid] > active.record.version_before
            ):
                del self.active[pid]

    def on_promotion_commit(self, sender: Replica, message: PromotionCommit) -> None:
        if sender != self.master:
            return
        changed = self.apply_entries(message.entries)
        self.resolve_overtaken([e.partition_id for e in message.entries])
        self.after_table_change(changed)
        self.sync_after_promotion(changed)
        self.send(sender, PromotionCommitAck(tuple(e.partition_id for e in message.entries)))
