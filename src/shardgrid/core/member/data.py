"""A member's data path: the partitions' copies it holds, and the concerns that work on them.

Each job has its concern, which owns its own state and asks the others through their methods:

- ``client_requests.ClientRequests``: map requests, scans and table requests, and their answers;
- ``owner_replication.OwnerReplication``: an owner's runs of writes to its backups, the writes
  waiting for their acknowledgements, retries and timeouts, and the owner's own removals;
- ``backup_replication.BackupReplication``: a backup applying its owner's runs in sequence order;
- ``replica_sync.ReplicaSyncs``: bringing a lagging backup up to date, and anti-entropy;
- ``upkeep.Upkeep``: the records' memory, the maps' sizes, eviction and expiry;
- ``stand_in.StandIns``: the maps served by a stand-in while their partition is unavailable.

This one owns the copies themselves (``stores``: one ``PartitionData`` per partition this member
replicates) and reacts to the table: it drops the copies this member no longer replicates and
tells the concerns what changed. Checkers, status and tests read a copy through ``view``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from shardgrid.core.effects import DiskFile, WriteMode
from shardgrid.core.errors import invariant
from shardgrid.core.identity import MemberId
from shardgrid.core.limits import MAX_OPERATIONS_PER_REQUEST
from shardgrid.core.member.backup_replication import BackupReplication
from shardgrid.core.member.client_requests import MAX_REQUEST_DATA_BYTES, ClientRequests, MigrationView
from shardgrid.core.member.consensus import Consensus
from shardgrid.core.member.context import Context
from shardgrid.core.member.leases import Leases
from shardgrid.core.member.owner_replication import OwnerReplication
from shardgrid.core.member.replica_sync import ReplicaSyncs
from shardgrid.core.member.routes import Routes
from shardgrid.core.member.stand_in import StandIns
from shardgrid.core.member.upkeep import Upkeep
from shardgrid.core.messages import Column, ReplyCode, WriteRun
from shardgrid.core.migration import MigrationRecord
from shardgrid.core.records import MapRecords
from shardgrid.core.replica_disk import ReplicaJournal
from shardgrid.core.store import PartitionData, ReplicaView
from shardgrid.core.table import ReplicaSlots
from shardgrid.core.transfer import MAX_ROOM_AHEAD_BYTES


class DataPath:
    def __init__(
        self,
        ctx: Context,
        consensus: Consensus,
        leases: Leases,
        member_serves: Callable[[], bool],
        unavailable: Callable[[], ReplyCode | None],
        request_assignment: Callable[[], None],
    ) -> None:
        self.ctx = ctx
        self.consensus = consensus
        self.leases = leases
        self.migrations: MigrationView | None = None  # wired by the member (they ask each other)
        self._stores: dict[int, PartitionData] = {}
        # The copies a moved member keeps apart until its cluster renames it (None: not moved).
        self._held_apart: dict[int, PartitionData] | None = None
        # A persistent member's record of what each step changed in its copies, written after it.
        self.journal: ReplicaJournal | None = self._journal(fresh=True) if ctx.config.persistent else None
        # owned_partitions' answer and the table it was worked out under (None: to work out
        # again): asked every tick, it walked every store (5% of a simulated run).
        self._owned: tuple[object, list[int]] | None = None
        self.stand_ins = StandIns(ctx, consensus)
        self.routes = Routes(ctx, consensus)
        # The records' memory, sizes, evictions and expiry: the owner's own removals.
        self.upkeep = Upkeep(ctx, consensus, self)
        self.owner = OwnerReplication(ctx, consensus, leases, self.routes, self._answer, self.journal)
        self.backups = BackupReplication(ctx, consensus, self.routes, self)
        self.syncs = ReplicaSyncs(
            ctx, consensus, self.routes, self, self.owner, self.backups, member_serves, self.room_to_size
        )
        self.owner.syncs = self.syncs
        self.requests = ClientRequests(
            ctx,
            consensus,
            leases,
            self,
            self.routes,
            self.owner,
            self.syncs,
            member_serves,
            unavailable,
            request_assignment,
        )

    def wire(self, migrations: MigrationView) -> None:
        """The migration participant, which the data path and the migrations ask of each other."""
        self.migrations = migrations
        self.requests.migrations = migrations
        self.syncs.migrations = migrations

    def _answer(self, call: object) -> None:
        self.requests.reply(call)  # type: ignore[arg-type]

    # --- the disk ----------------------------------------------------------------------------------

    def restore(self, copies: dict[int, PartitionData], file_bytes: int) -> None:
        """Hold the copies a restarted member read back from its disk (before it applies its log),
        and go on writing its file from there."""
        invariant(not self._stores, "copies are restored into a member that holds none")
        self._stores = dict(copies)
        self._owned = None
        if self.journal is not None:
            self.journal = self._journal(fresh=False, file_bytes=file_bytes)
            self.journal.restored(copies, self.ctx.now_ms)
            self.owner.journal = self.journal

    def _journal(self, *, fresh: bool, file_bytes: int = 0) -> ReplicaJournal:
        config = self.ctx.config
        return ReplicaJournal(
            fresh=fresh,
            file_bytes=file_bytes,
            min_bytes=config.compaction_min_bytes,
            share_bytes=config.compaction_bytes_per_step,
        )

    def hold_apart(self, copies: Mapping[int, PartitionData], file_bytes: int) -> None:
        """A member moved to another address keeps the copies its disk holds apart until the
        cluster renames it (``take_back``), and writes nothing to its file meanwhile: it holds no
        copy, so a compaction would write a file without those (found by a random run: a moved
        member compacted its file while it waited, then crashed, and came back owning an empty
        copy behind its backups)."""
        invariant(not self._stores, "a moved member holds no copy while it waits")
        self._held_apart = dict(copies)
        if self.journal is not None:
            self.journal = self._journal(fresh=False, file_bytes=file_bytes)
            self.owner.journal = self.journal

    def held_apart(self) -> dict[int, ReplicaView]:
        """Read-only copies of what a moved member keeps apart until it is renamed (none otherwise)."""
        held = self._held_apart or {}
        return {pid: data.view() for pid, data in sorted(held.items())}

    def take_back(self) -> None:
        """Hold the copies kept apart since the member moved (``hold_apart``): its file holds them
        already, and is written from here on."""
        invariant(not self._stores, "copies are taken back into a member that holds none")
        copies, self._held_apart = self._held_apart, None
        invariant(copies is not None, "only a moved member takes copies back")
        self._stores = copies
        self._owned = None
        if self.journal is not None:
            self.journal.restored(copies, self.ctx.now_ms)

    def persist(self) -> None:
        """Write what this step changed in the copies (its sends wait for it)."""
        journal = self.journal
        if journal is None or self._held_apart is not None:
            return
        free_bytes = self.ctx.disk.free_bytes
        room_bytes = free_bytes if free_bytes >= 0 else None
        for write in journal.take(self._stores, self.ctx.now_ms, room_bytes, short=self.upkeep.disk_short()):
            # Runs alone may go ahead of their sync when the member syncs on a timer; a copy
            # taken whole (a sync, a migration's data) is synced before it is acknowledged. A
            # compaction's next file is never read until it replaces the file: nothing waits for it.
            hold = write.mode in (WriteMode.APPEND, WriteMode.REPLACE)
            if hold and self.ctx.config.fsync != "always" and journal.took_runs_only:
                hold = False
            self.ctx.persist(DiskFile.REPLICAS, write.data, mode=write.mode, hold_sends=hold)

    def stop_journaling(self) -> None:
        """The member stops and keeps its disk as it is: what this step changed is written now,
        and nothing after (the copies it drops from memory stay on the disk)."""
        self.persist()
        self.journal = None
        self.owner.journal = None

    def replicas_file_live_bytes(self) -> int:
        return self.journal.live_bytes if self.journal is not None else 0

    def applied_run(self, run: WriteRun, start: int) -> None:
        """A backup applied ``run`` from ``start`` on."""
        if self.journal is not None:
            self.journal.run(run, start)

    def stage(self, pid: int, migration: MigrationRecord, data: PartitionData) -> None:
        """A migration's destination committed to ``data``: kept on disk apart from the copies."""
        if self.journal is not None:
            self.journal.stage(pid, migration, data)

    def restage(self, pid: int, migration: MigrationRecord, data: PartitionData) -> None:
        """Staged data read back at a restart: the file holds it already."""
        if self.journal is not None:
            self.journal.restaged(pid, migration, data)

    def unstage(self, pid: int) -> None:
        if self.journal is not None:
            self.journal.unstage(pid)

    def replaced(self, pid: int) -> None:
        """The copy of ``pid`` changed other than by runs (taken from a sync, dropped)."""
        if self.journal is not None:
            self.journal.image(pid)

    def _reheaded(self, pid: int) -> None:
        """The copy of ``pid`` changed its lineage, slot or maps held, not its records."""
        if self.journal is not None:
            self.journal.header(pid)

    # --- the copies --------------------------------------------------------------------------------

    def store(self, pid: int) -> PartitionData:
        """This member's copy of ``pid``, an empty one made when it holds none."""
        data = self._stores.get(pid)
        if data is None:
            data = self._stores[pid] = PartitionData(
                hash_seed=self.ctx.hash_seed, max_idle_ms=self.ctx.config.max_idle_ms
            )
            self._owned = None
            self._reheaded(pid)
        return data

    def held(self, pid: int) -> PartitionData | None:
        """This member's copy of ``pid`` (None: it holds none)."""
        return self._stores.get(pid)

    def records_of(self, pids: Iterable[int], map_name: str) -> list[tuple[int, MapRecords | None]]:
        """Each partition's records of ``map_name`` in this member's copy (None: none held), a
        copy made for a partition it holds none of, as ``store`` does."""
        stores = self._stores
        held = [(pid, stores.get(pid)) for pid in pids]
        return [(pid, (data if data is not None else self.store(pid)).maps.get(map_name)) for pid, data in held]

    def receiving(self, pid: int) -> bool:
        """Whether a sync is bringing this member's copy of ``pid`` up to date."""
        return self.syncs.receiving(pid)

    def view(self, pid: int) -> ReplicaView | None:
        """A read-only copy of this member's replica of ``pid`` (None: it holds none)."""
        data = self._stores.get(pid)
        return data.view() if data is not None else None

    def sequence_of(self, pid: int) -> int:
        """The replica sequence this member's copy of ``pid`` is at (0: it holds none)."""
        data = self._stores.get(pid)
        return data.sequence if data is not None else 0

    def memory_bytes_of(self, pid: int) -> int:
        """What the engine counts for this member's copy of ``pid`` (0: it holds none)."""
        data = self._stores.get(pid)
        return data.memory_bytes() if data is not None else 0

    @property
    def memory_bytes(self) -> int:
        """What the engine counts for every copy this member holds, as of the last tick."""
        return self.upkeep.memory_bytes

    @property
    def entries_evicted(self) -> int:
        return self.upkeep.entries_evicted

    def held_partitions(self) -> list[int]:
        """The partitions this member holds a copy of."""
        return sorted(self._stores)

    def install(self, pid: int, data: PartitionData, index: int) -> None:
        """Take ``data`` as this member's copy of the partition, at replica ``index``, unless what
        it holds is newer in the same lineage (a replica sync may have overtaken a migration's
        staged data): a replica never goes back past writes it has applied, some acknowledged."""
        held = self._stores.get(pid)
        if held is not None and held.lineage == data.lineage and held.sequence >= data.sequence:
            if held.copy_index <= max(index, 0):
                return
            if held.sequence > data.sequence:
                # Newer, but kept for a colder slot: it lacks maps this slot keeps. Those maps
                # have had no write since the staged copy (this member takes no run of a map its
                # slot does not keep), so the staged copy of them is exact: take them from it.
                config = self.ctx.config
                for name, records in data.maps.items():
                    if name not in held.maps and not config.keeps_copy(name, held.copy_index):
                        held.maps[name] = records
                        held.versions[name] = data.version_of(name)
                held.versions_from = max(held.versions_from, data.versions_from)
                held.copy_index = max(index, 0)
                self._trim(held, index)
                self.replaced(pid)
                return
        self._trim(data, index)
        self._stores[pid] = data
        self.replaced(pid)
        self._owned = None
        self.backups.forget(pid)
        self.syncs.forget_incoming(pid)

    def settled(self, pid: int) -> bool:
        """No write of the partition is still on its way to a backup, and no sync is running."""
        return self.owner.settled(pid) and not self.syncs.syncing(pid)

    def busy(self) -> bool:
        return self.owner.busy() or self.syncs.busy()

    def _trim(self, data: PartitionData, index: int) -> bool:
        """Drop the maps a replica at ``index`` keeps no copy of: it gets none of their writes, so
        a copy would only go stale (and could be promoted). Whether the copy changed."""
        if index < 1:
            return False
        config = self.ctx.config
        dropped = [name for name in data.maps if not config.keeps_copy(name, index)]
        for map_name in dropped:
            del data.maps[map_name]
        changed = bool(dropped) or data.copy_index < index
        data.copy_index = max(data.copy_index, index)
        return changed

    # --- what the upkeep asks (``upkeep.OwnerWrites``) ---------------------------------------------

    def owned_partitions(self) -> list[int]:
        table = self.consensus.state.table
        if table is None or self.migrations is None or not self.leases.holds():
            return []
        if self._owned is None or self._owned[0] is not table:
            me = self.ctx.identity
            self._owned = (table, [pid for pid in sorted(self._stores) if table.replicas[pid][0] == me])
        return list(self._owned[1])

    def blocked(self, pid: int) -> bool:
        migrations = self.migrations
        return migrations is None or self.consensus.state.unavailable(pid) or migrations.writes_blocked(pid)

    def map_blocked(self, pid: int, map_name: str) -> bool:
        if self.syncs.blocks(pid, map_name):
            return True
        return self.stand_ins.owner_waits(pid, map_name, self.ctx.now_ms)  # a stand-in may serve it

    def replica(self, pid: int) -> PartitionData:
        return self._stores[pid]

    def slots_of(self, pid: int) -> Sequence[MemberId | None]:
        table = self.consensus.state.table
        invariant(table is not None, "a partition's slots are asked for under a table")
        return table.replicas[pid]

    def room_to_size(self, growth_bytes: int) -> bool:
        """Whether a transfer's receiver may make ``growth_bytes`` more room ahead of the records
        its sender says come (``transfer.Staging._size``): with the room every transfer here made
        and has not filled yet, it fits the member's memory and ``MAX_ROOM_AHEAD_BYTES`` (found by
        an outside tester: each map of each transfer asked alone, so senders overstating their
        counts could set aside gigabytes no count showed)."""
        ahead = growth_bytes + self.room_ahead_bytes()
        return ahead <= MAX_ROOM_AHEAD_BYTES and self.upkeep.fits(ahead)

    def room_ahead_bytes(self) -> int:
        """The room this member's incoming transfers made ahead of records still to come."""
        migrations = self.migrations
        return self.syncs.room_ahead_bytes() + (migrations.room_ahead_bytes() if migrations is not None else 0)

    def copies_held(self) -> list[PartitionData]:
        return [*self._stores.values(), *self.stand_ins.held()]

    def remove_owned(
        self, pid: int, data: PartitionData, map_name: str, slots: Sequence[MemberId | None] | None, keys: Column
    ) -> None:
        self.owner.remove_owned(pid, data, map_name, slots, keys)

    # --- time and links ----------------------------------------------------------------------------

    def tick(self) -> None:
        self.upkeep.count()
        self.upkeep.expire_some()
        self.owner.tick()
        self.syncs.tick()

    def resend_to(self, peer: MemberId) -> None:
        """``peer``'s connection came back: the runs it has not acknowledged and the sync chunks
        of its open windows go again now (it acknowledges what it holds already)."""
        self.owner.resend_to(peer)
        self.syncs.resend_to(peer)

    # --- reacting to table changes ---------------------------------------------------------------

    def after_table_change(self, partition_ids: list[int]) -> None:
        """Drop data this member no longer replicates, stop waiting on former backups."""
        table = self.consensus.state.table
        if table is None:
            return
        migrations = self.migrations
        me = self.ctx.identity
        changed = set(partition_ids)
        # A few rows are looked up; many, in one pass over the table's rows (a first assignment
        # changes every partition: 20,000 rows looked up one by one made most of the slowest
        # handle(), and a pass over every row for each migration's commit, 4% of a simulated run).
        replicas = table.replicas
        if len(changed) * 8 < table.partition_count:
            rows: Iterable[tuple[int, ReplicaSlots]] = [(pid, replicas[pid]) for pid in sorted(changed)]
        elif len(changed) == table.partition_count:
            rows = enumerate(replicas)
        else:
            rows = [(pid, slots) for pid, slots in enumerate(replicas) if pid in changed]
        # A partition this member is no replica of and keeps nothing of (no copy, no migration, no
        # write or sync waiting, no run held) needs nothing: most of a large table's, skipped in
        # one test (a first assignment of 20,000 partitions spent 80 ms here on such rows).
        kept = self._partitions_with_state()
        if migrations is not None:
            kept |= migrations.partitions_involved()
        for pid, slots in rows:
            if pid not in kept and me not in slots:
                continue
            index = slots.index(me) if me in slots else -1
            if index == -1 and not (migrations is not None and migrations.involved(pid)):
                if self._stores.pop(pid, None) is not None:
                    self.replaced(pid)
                self._owned = None
                self.backups.forget(pid)
                self.syncs.forget_incoming(pid)
            data = self._stores.get(pid)
            if data is not None:
                if index == 0 and data.copy_index >= 1:
                    self._refresh_idle(data)
                if self._trim(data, index):
                    self._reheaded(pid)
            if index == 0:
                backups = set(self.routes.backups_in(slots))
                self.owner.backups_changed(pid, backups)  # former backups are waited on no longer
                self.syncs.on_table_change(pid, index, backups)
            else:
                self.owner.fail_pending_writes(pid)
                self.syncs.on_table_change(pid, index, set())

    def _partitions_with_state(self) -> set[int]:
        """The partitions of which this member keeps anything: a copy, a write waiting for its
        backups, a sync sent or taken, runs held for a gap."""
        return (
            set(self._stores)
            | self.owner.partitions_waiting()
            | self.syncs.partitions_syncing()
            | self.backups.partitions_holding_runs()
        )

    def _refresh_idle(self, data: PartitionData) -> None:
        """A backup's copy becomes the owner's: its maps with a max idle know each entry's last
        write only, not the reads the old owner served, so every entry gets a whole max idle
        from now (found by an outside tester: a failover dropped every entry reads kept alive)."""
        for name in self.ctx.config.max_idle_ms:
            records = data.maps.get(name)
            if records:
                records.touch(self.ctx.records_ms)

    def on_table_assigned(self) -> None:
        """The first table: every partition is empty, so each replica starts with an empty store
        (a backup without one would drop its owner's writes until a resync)."""
        table = self.consensus.state.table
        if table is None:
            return
        for pid, slots in enumerate(table.replicas):
            if self.ctx.identity in slots:
                self.store(pid)

    def ask_for_missing_data(self) -> None:
        """Backups of partitions this member holds no data of (a snapshot named it) ask the owner."""
        self.syncs.ask_for_missing_data()

    def sync_after_promotion(self, partition_ids: list[int], *, restarted: bool = False) -> None:
        """A promoted owner starts a new lineage and brings its backups into it. So does an owner
        ``restarted`` from a disk that may lack writes it acknowledged (``fsync`` other than
        ``always``): its backups may be ahead of it in its lineage, and the writes it takes next
        would reuse their sequence numbers for other writes; in a new lineage they take its copy
        whole, and what only they held of the lost writes is lost with them (as a restarted Redis
        primary's replicas resync from its AOF). Its lineage names the restart apart from the
        promotion, which the partition's version alone would not."""
        table = self.consensus.state.table
        for pid in partition_ids:
            if table is not None and table.owner(pid) == self.ctx.identity:
                data = self.store(pid)
                data.lineage = f"{self.ctx.identity.uuid[:8]}@{table.versions[pid]}"
                if restarted:
                    data.lineage += f"~{self.ctx.rng.getrandbits(32):08x}"
                if data.copy_index >= 1:
                    self._refresh_idle(data)
                data.copy_index = 0  # the owner's copy now, whatever slot it was kept for
                self._reheaded(pid)
                self.backups.forget(pid)  # runs held from the old owner belong to its lineage
                self.syncs.forget_incoming(pid)
                self.syncs.start_sync(pid, self.routes.backups_of(pid))

    def promoted_unseen(self, skip: set[int]) -> list[int]:
        """Partitions this member owns but holds as a backup's copy (other than ``skip``): a
        snapshot made it owner by promotion (the log entry that did is inside it), so
        ``sync_after_promotion`` never ran for them."""
        table = self.consensus.state.table
        if table is None:
            return []
        me = self.ctx.identity
        return [
            pid
            for pid, data in sorted(self._stores.items())
            if data.copy_index >= 1 and pid not in skip and table.owner(pid) == me
        ]

    def clear_serving_maps(self, partition_ids: Sequence[int]) -> None:
        """The partitions came back from unavailable (or this owner took a snapshot that may hide
        that they did): the maps served by a stand-in meanwhile (``serve_when_unavailable``) are
        emptied in those this member owns, through its backups as any remove is, so that no
        replica serves the entries from before while a stand-in took newer writes (dropped with
        it). Nothing to do for a map that chose to wait."""
        serving_maps = self.ctx.config.serving_maps
        table = self.consensus.state.table
        if not serving_maps or table is None:
            return
        for pid in partition_ids:
            data = self._stores.get(pid)
            if data is None or table.owner(pid) != self.ctx.identity:
                continue
            emptied = sorted(serving_maps.intersection(data.maps))
            slots = table.replicas[pid]

            def empty(
                pid: int = pid,
                data: PartitionData = data,
                slots: Sequence[MemberId | None] = slots,
                emptied: list[str] = emptied,
            ) -> None:
                for map_name in emptied:
                    self._remove_all(pid, data, map_name, slots)

            self.syncs.restart_reading(pid, emptied, empty)
        self.owner.send_outbox()

    def _remove_all(self, pid: int, data: PartitionData, map_name: str, slots: Sequence[MemberId | None]) -> None:
        """Every entry of the map in the partition, removed as runs of writes, each no larger than
        a request (so that each fits a backup batch)."""
        # Cut as a transfer cuts its pages, all of them before any is removed (the pages read the
        # live records).
        records = data.maps.get(map_name)
        if records is None:
            return
        pages = list(records.pages(MAX_OPERATIONS_PER_REQUEST, MAX_REQUEST_DATA_BYTES))
        for page in pages:
            self.owner.remove_owned(pid, data, map_name, slots, Column(page.keys, page.key_lengths))

    def lose(self, pid: int) -> None:
        """Forget what this member holds of ``pid``, keeping only its lineage, as a member that
        silently lost its copy would: a fault the simulator injects (nothing tells the owner)."""
        held = self._stores.get(pid)
        if held is not None:
            self._stores[pid] = PartitionData(
                lineage=held.lineage, hash_seed=self.ctx.hash_seed, max_idle_ms=self.ctx.config.max_idle_ms
            )
            self.replaced(pid)

    def drop_everything(self) -> None:
        """This member left (or was removed): its data is no longer any replica's."""
        self.owner.drop_everything()
        for pid in self._stores:
            self.replaced(pid)
        if self.journal is not None:
            for pid in list(self.journal.staged):
                self.unstage(pid)
        self._stores.clear()
        self._owned = None
        self.backups.clear()
        self.syncs.clear()
        self.stand_ins.drop_everything()
