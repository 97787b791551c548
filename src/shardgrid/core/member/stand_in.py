"""The maps a stand-in serves for unavailable partitions: a cache's choice of availability.

A partition whose every replica is on members that stopped answering is unavailable: it waits for
them, so that nothing they hold is lost (``MetadataState.unavailable``). A map configured
``serve_when_unavailable`` prefers to be served meanwhile: a member that answers stands in for the
partition (``MetadataState.stand_in``, the same one on every member) and serves that map there
from empty, with no backups. Its entries live here, apart from the replicas' stores, so that they
can never be taken for the partition's data; they are dropped as soon as this member no longer
stands in for the partition (it is available again, lost, or another member stands in), and the
returning owner clears its own copy of such a map (``DataPath.clear_serving_maps``): whatever
either side wrote is gone, never a value older than one acknowledged.

A member that becomes stand-in serves only ``lease_ms + clock_drift_margin_ms`` after it learned
so, and the owner of a partition available again serves such a map only that long after it
learned so: a stand-in replaced stops when it applies the same log entry, and one cut off stops
when its lease ends, as an owner does. (Found by the seeded search below: a stand-in cut off with
its lease still running took writes while the owner, back, took them too.) So two rarely serve at
once: one whose log lags behind while its lease holds still can (a cache's promise, not the
grid's).
"""

from __future__ import annotations

from shardgrid.core.member.consensus import Consensus
from shardgrid.core.member.context import Context
from shardgrid.core.messages import PartitionRedirect, ReplyCode
from shardgrid.core.store import PartitionData


class StandIns:
    def __init__(self, ctx: Context, consensus: Consensus) -> None:
        self.ctx = ctx
        self.consensus = consensus
        # Partitions this member stands in for, since when (ms); their maps' entries. At most
        # one each per partition.
        self._since_ms: dict[int, int] = {}
        self._stores: dict[int, PartitionData] = {}
        # Partitions available again, since when: their owner waits before it serves such a map.
        self._returned_ms: dict[int, int] = {}

    def _settle_ms(self) -> int:
        """How long a member that may have stood in can go on serving after the log moved on: its
        lease, and the drift of its clock."""
        config = self.ctx.config
        return config.lease_ms + config.clock_drift_margin_ms

    def serves(self, pid: int, map_name: str) -> bool:
        """Whether a request of ``map_name`` in ``pid`` is a stand-in's to answer (the map chose
        availability and the partition is unavailable), not the owner's."""
        serving_maps = self.ctx.config.serving_maps
        return bool(serving_maps) and map_name in serving_maps and self.consensus.state.unavailable(pid)

    def refusal(self, pid: int, holds_lease: bool) -> tuple[ReplyCode, PartitionRedirect | None] | None:
        """Why this member does not serve such a request now (with where the stand-in is, for
        WRONG_OWNER); None when it does."""
        state = self.consensus.state
        stand_in = state.stand_in(pid)
        if stand_in is None:
            return ReplyCode.UNAVAILABLE, None  # no member that answers keeps data
        if stand_in != self.ctx.identity:
            table = state.table
            version = table.versions[pid] if table is not None else 0
            return ReplyCode.WRONG_OWNER, PartitionRedirect(pid, version, stand_in.address)
        if not holds_lease or not self.standing_in(pid, self.ctx.now_ms):
            return ReplyCode.NOT_READY, None
        return None

    def standing_in(self, pid: int, now_ms: int) -> bool:
        """Whether this member has stood in for ``pid`` long enough to serve it (lease aside)."""
        since_ms = self._since_ms.get(pid)
        return since_ms is not None and now_ms - since_ms >= self._settle_ms()

    def owner_waits(self, pid: int, map_name: str, now_ms: int) -> bool:
        """Whether the owner of ``pid``, available again, still leaves ``map_name`` alone: a
        stand-in may still serve it for a lease's length."""
        returned_ms = self._returned_ms.get(pid)
        return (
            returned_ms is not None
            and map_name in self.ctx.config.serving_maps
            and now_ms - returned_ms < self._settle_ms()
        )

    def on_available(self, partition_ids: list[int]) -> None:
        """The partitions are available again (this member applied the entry that says so)."""
        if self.ctx.config.serving_maps:
            for pid in partition_ids:
                self._returned_ms[pid] = self.ctx.now_ms

    def held(self) -> list[PartitionData]:
        """What this member holds as a stand-in (the memory count reads it)."""
        return list(self._stores.values())

    def store(self, pid: int) -> PartitionData:
        """The entries this member serves as ``pid``'s stand-in (asked only once ``refusal`` is None)."""
        data = self._stores.get(pid)
        if data is None:
            data = self._stores[pid] = PartitionData(
                hash_seed=self.ctx.hash_seed, max_idle_ms=self.ctx.config.max_idle_ms
            )
        return data

    def after_applied(self) -> None:
        """After each log entry (or snapshot) is applied: stand in for the partitions that name this
        member from now on, and drop what it served for those that no longer do."""
        if not self.ctx.config.serving_maps:
            return
        state = self.consensus.state
        me = self.ctx.identity
        now = self.ctx.now_ms
        for pid in [pid for pid, at_ms in self._returned_ms.items() if now - at_ms >= self._settle_ms()]:
            del self._returned_ms[pid]
        for pid in [pid for pid in self._since_ms if state.stand_in(pid) != me]:
            del self._since_ms[pid]
            self._stores.pop(pid, None)
        for pid in state.unavailable_partitions():
            if pid not in self._since_ms and state.stand_in(pid) == me:
                self._since_ms[pid] = self.ctx.now_ms

    def standing_in_for(self) -> list[int]:
        """The partitions this member stands in for (a read-only view, for status and tests)."""
        return sorted(self._since_ms)

    def drop_everything(self) -> None:
        self._since_ms.clear()
        self._stores.clear()
        self._returned_ms.clear()
