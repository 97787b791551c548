"""A backup's side of replication: applying its owner's runs of writes in sequence order.

Backups apply writes in the order of the partition's replica sequence, holding a bounded number
of runs that arrive early, and only from the member their table names as the partition's owner,
in the owner's lineage; each batch is acknowledged with the sequence every partition now holds
(cumulative). A run that breaks the rules is dropped unacknowledged, nothing of it applied: the
engine checks its columns whole before it changes anything.
"""

from __future__ import annotations

from typing import Protocol

from shardgrid._engine import ColumnError, check_column
from shardgrid.core.identity import MemberId
from shardgrid.core.limits import MAX_KEY_BYTES, MAX_MAP_NAME_CHARS, MAX_OPERATIONS_PER_REQUEST, MAX_VALUE_BYTES
from shardgrid.core.member.consensus import Consensus
from shardgrid.core.member.context import Context
from shardgrid.core.member.routes import Routes
from shardgrid.core.messages import PUT, REMOVE, BackupAckBatch, BackupBatch, WriteRun
from shardgrid.core.records import ttls_fit
from shardgrid.core.store import PartitionData, columns_bytes


class Replicas(Protocol):
    """What the backup asks of the data path and the syncs."""

    def held(self, pid: int) -> PartitionData | None: ...
    def receiving(self, pid: int) -> bool: ...
    def applied_run(self, run: WriteRun, start: int) -> None: ...


class BackupReplication:
    def __init__(self, ctx: Context, consensus: Consensus, routes: Routes, replicas: Replicas) -> None:
        self.ctx = ctx
        self.consensus = consensus
        self.routes = routes
        self.replicas = replicas
        self._reorder: dict[int, dict[int, WriteRun]] = {}  # per partition: runs that arrived early

    def holds_early(self, pid: int) -> bool:
        """Whether runs of ``pid`` that came before their turn are held."""
        return pid in self._reorder

    def forget(self, pid: int) -> None:
        """The partition's copy was replaced (or dropped): runs held for the old one go."""
        self._reorder.pop(pid, None)

    def partitions_holding_runs(self) -> set[int]:
        return set(self._reorder)

    def clear(self) -> None:
        self._reorder.clear()

    def on_backup_batch(self, sender: MemberId, message: BackupBatch) -> None:
        table = self.consensus.state.table
        if table is None:
            return
        acks: dict[int, int] = {}
        count = table.partition_count
        replicas = self.replicas
        for run in message.runs:
            pid = run.partition_id
            if not 0 <= pid < count:
                continue
            route = self.routes.of(pid, run.map_name)
            if route.slots[0] != sender or route.index < 1:
                continue  # not from the owner this member knows: fenced off (the sender retries)
            if not run.skipped and not route.keeps_copy:
                # The owner's table already puts this member at a hotter slot (a migration's
                # outcome reached it first): the copy of that map comes with the outcome here.
                # Taking the run now would acknowledge a write into a copy about to be replaced.
                continue
            data = replicas.held(pid)
            if data is None or replicas.receiving(pid) or data.lineage != run.lineage:
                continue  # not yet in the owner's lineage: its sync (or a timeout that starts one) fixes that
            if not _well_shaped(run):
                continue
            try:
                self._apply_in_order(pid, data, run)
            except ColumnError:
                continue  # columns the engine refused whole: nothing of the run applied, none acknowledged
            acks[pid] = data.sequence
        if acks:
            self.ctx.send(sender, BackupAckBatch(tuple(acks.items())))

    def _apply_in_order(self, pid: int, data: PartitionData, run: WriteRun) -> None:
        """Apply what ``run`` adds after the sequence held; hold a run that comes early (bounded).
        Raises the engine's ``ColumnError``, nothing applied, for a run whose columns it refuses."""
        first = run.first_sequence
        if first == data.sequence + 1 and pid not in self._reorder:
            data.apply_run(run, 0, self.ctx.now_ms)  # the usual case: the next run, nothing held
            self.replicas.applied_run(run, 0)
            return
        if first > data.sequence + 1:
            if not _well_formed(run):
                return  # checked whole before it is held: a held run is applied as it is
            held = self._reorder.setdefault(pid, {})
            config = self.ctx.config
            writes = sum(len(r.keys) or 1 for r in held.values()) + (len(run.keys) or 1)
            size = sum(columns_bytes(r.keys, r.values) + len(r.ttls_ms) for r in [*held.values(), run])
            if writes <= config.max_backup_reorder and size <= config.max_backup_reorder_bytes:
                held[run.first_sequence] = run
            return
        # Sent again, over what is held: checked whole, as a cut run's columns no longer show
        # what was wrong with it (TTLs short of its keys, say), and one held already all the same
        # (a malformed run is never acknowledged).
        if not _well_formed(run):
            raise ColumnError(f"the run from sequence {first} is malformed")
        if run.last_sequence > data.sequence:
            start = data.sequence + 1 - run.first_sequence
            data.apply_run(run, start, self.ctx.now_ms)
            self.replicas.applied_run(run, start)
        self.drain_early_runs(pid, data)

    def drain_early_runs(self, pid: int, data: PartitionData) -> None:
        """Apply the runs held early that now follow on from the sequence held."""
        held = self._reorder.get(pid)
        while held:
            first = min(held)
            if first > data.sequence + 1:
                break
            early = held.pop(first)
            # Held under another lineage (the partition changed hands since): its sequences mean
            # nothing here, and applying it would acknowledge a write this backup does not hold.
            if early.lineage == data.lineage and early.last_sequence > data.sequence:
                start = data.sequence + 1 - early.first_sequence
                data.apply_run(early, start, self.ctx.now_ms)
                self.replicas.applied_run(early, start)
        if held is not None and not held:
            del self._reorder[pid]


def _well_shaped(run: WriteRun) -> bool:
    """The checks of a run from the owner that the engine does not make when it applies the run
    (which checks its columns whole, and refuses it all, ``ColumnError``, when one is bad)."""
    if run.first_sequence < 1 or not 0 < len(run.map_name) <= MAX_MAP_NAME_CHARS:
        return False
    if run.skipped:
        return not run.keys and not run.values and not run.ttls_ms and run.kind in (PUT, REMOVE)
    if run.kind is PUT:
        return len(run.keys) > 0
    return run.kind is REMOVE and len(run.keys) > 0 and not run.values and not run.ttls_ms


def _well_formed(run: WriteRun) -> bool:
    """Whether a run from the owner is fit to apply, its columns checked whole as the engine takes
    them: what a run held for later must be, since nothing checks it when it is applied."""
    if not _well_shaped(run):
        return False
    if run.skipped:
        return True
    keys, values = run.keys, run.values
    try:
        count = check_column(
            keys.data, keys.lengths, max_items=MAX_OPERATIONS_PER_REQUEST, max_item_bytes=MAX_KEY_BYTES
        )
        if run.kind is PUT:
            held = check_column(
                values.data, values.lengths, max_items=MAX_OPERATIONS_PER_REQUEST, max_item_bytes=MAX_VALUE_BYTES
            )
            return held == count and ttls_fit(run.ttls_ms, count)
    except ColumnError:
        return False
    return True
