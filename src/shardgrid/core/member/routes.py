"""Where a map's writes to a partition go, and this member's place among its replicas, under the
current table: asked for every partition a request, a backup batch or a removal touches, so each
(partition, map) pair's route is worked out once per table and kept until the table changes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shardgrid.core.errors import invariant
from shardgrid.core.identity import MemberId
from shardgrid.core.member.consensus import Consensus
from shardgrid.core.member.context import Context

# (partition, map) pairs whose routes are kept (the cache empties when the table changes, or fills).
MAX_CACHED_ROUTES = 100_000


@dataclass(frozen=True, slots=True)
class Route:
    """A map's place in a partition under one table."""

    slots: Sequence[MemberId | None]  # the partition's replica slots
    index: int  # this member's slot (-1: none)
    keeps_copy: bool  # whether this member's slot keeps a copy of the map
    backups: tuple[MemberId, ...]  # every backup of the partition
    copies: tuple[MemberId, ...]  # those that keep a copy of the map (sync, then async)
    sequence_only: tuple[MemberId, ...]  # the others: they get the sequence without the data
    sync: tuple[MemberId, ...]  # those the answer waits for


class Routes:
    """The routes under the current table. It owns nothing the table does not say; it only
    remembers what it worked out, for as long as the table it read stands."""

    def __init__(self, ctx: Context, consensus: Consensus) -> None:
        self.ctx = ctx
        self.consensus = consensus
        self._routes: dict[tuple[int, str], Route] = {}
        self._table: object = None

    def of(self, pid: int, map_name: str) -> Route:
        """The map's route in ``pid`` under the current table (which the caller checked is there)."""
        table = self.consensus.state.table
        if table is not self._table:
            self._routes.clear()
            self._table = table
        route = self._routes.get((pid, map_name))
        if route is None:
            invariant(table is not None, "a route is asked for under a table")
            slots = table.replicas[pid]
            me = self.ctx.identity
            index = slots.index(me) if me in slots else -1
            config = self.ctx.config
            map_config = config.map_config(map_name)
            sync_end = 1 + map_config.backup_count
            copies_end = sync_end + map_config.async_backup_count
            width = config.table_backup_count + 1  # no map's copies reach past it
            route = Route(
                slots=slots,
                index=index,
                keeps_copy=index == 0 or 0 < index <= map_config.total_backup_count,
                backups=tuple(self.backups_in(slots)),
                copies=tuple(r for r in slots[1:copies_end] if r is not None),
                sequence_only=tuple(r for r in slots[copies_end:width] if r is not None),
                sync=tuple(r for r in slots[1:sync_end] if r is not None),
            )
            if len(self._routes) >= MAX_CACHED_ROUTES:
                self._routes.clear()
            self._routes[(pid, map_name)] = route
        return route

    def backups_in(self, slots: Sequence[MemberId | None]) -> list[MemberId]:
        """The backups a partition's replica slots name: every one follows the partition's
        sequence, whether or not it keeps a copy of a given map."""
        return [r for r in slots[1 : self.ctx.config.table_backup_count + 1] if r is not None]

    def backups_of(self, pid: int) -> list[MemberId]:
        table = self.consensus.state.table
        return self.backups_in(table.replicas[pid]) if table is not None else []

    def index_of(self, pid: int) -> int:
        """This member's slot in ``pid`` under the current table (-1: none, or no table)."""
        table = self.consensus.state.table
        if table is None:
            return -1
        slots = table.replicas[pid]
        return slots.index(self.ctx.identity) if self.ctx.identity in slots else -1
