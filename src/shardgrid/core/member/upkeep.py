"""What an owner does to its records on its own: it counts their memory against
``max_memory_bytes`` and each map's sizes, evicts to make room (a map's ``eviction_policy``), and
removes entries that expired or went idle.

No client asks for any of it, and every removal it decides is the owner's write all the same:
applied and replicated to the partition's backups in the partition's write sequence, through the
data path (``OwnerWrites.remove_owned``), so two replicas at the same sequence hold the same
entries. This concern owns the memory figures, the eviction count and the sweeps' cursors; it asks
the data path which partitions it may write to now.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from typing import Protocol

from shardgrid._engine import EXPIRY_BYTES, INDEX_BYTES, MAP_BYTES, RECORD_BYTES
from shardgrid.core.effects import DiskFile
from shardgrid.core.identity import MemberId
from shardgrid.core.limits import MAX_COUNTER, MAX_ENTRIES_PER_CHUNK, MAX_OPERATIONS_PER_REQUEST
from shardgrid.core.member.consensus import Consensus
from shardgrid.core.member.context import Context
from shardgrid.core.messages import Column, ReplyCode
from shardgrid.core.store import PartitionData

# What a new record costs the engine beyond its key's and value's bytes (its slot, its share of the
# index, the heap block's header and rounding): how much a write is taken to add to the memory
# count until the next tick counts it exactly.
RECORD_GROWTH_BYTES = RECORD_BYTES + INDEX_BYTES + 16
# And what a map opened in a partition costs beyond its name's bytes: its table, and its name's
# heap block header and rounding (a block is at least 32 bytes).
MAP_GROWTH_BYTES = MAP_BYTES + 32


def put_growth_bytes(keys: int, size: int, *, expires: bool, new_maps: int, map_name: str) -> int:
    """At most what a put of ``keys`` keys (``size`` bytes of them and their values, counted as
    ``counted_bytes`` does) adds to the engine's count: every key a new record, with its place in
    the expiry order when it ``expires``, and ``new_maps`` maps opened (found by an outside
    tester: a put_all into a new map with a long name, its keys each in a partition of its own,
    took a member to 4.6 times its max_memory_bytes, as neither the maps nor the expiry counted)."""
    per_key = RECORD_GROWTH_BYTES + (EXPIRY_BYTES if expires else 0)
    return keys * per_key + size + new_maps * (MAP_GROWTH_BYTES + len(map_name.encode()))


# The owner's active expiry: entries it removes a tick at most, and in one run of writes (a run of
# expired keys stays far below a backup batch: keys are at most 64 KiB).
MAX_EXPIRED_PER_TICK = 2_000
MAX_EXPIRED_PER_RUN = 200
# Records the owner looks at a tick for entries gone idle (max_idle_seconds): idle entries are in
# no order, so they are found by a pass over each map, resumed where the last tick stopped.
MAX_IDLE_SCANNED_PER_TICK = 20_000
# And for one write to a full map that evicts nothing: idle entries in its way go first.
MAX_IDLE_SCANNED_PER_WRITE = 2_000
# Records drawn to choose each entry to evict (Redis's maxmemory-samples is 5; more samples come
# closer to true LRU and LFU at a cost the engine bounds).
EVICTION_SAMPLES = 16

# Slots of a partition's replicas; None: a stand-in's copy, which has no backups.
Slots = Sequence[MemberId | None] | None
# Where an eviction may take entries: (partition, its copy, map, its slots).
Place = tuple[int, PartitionData, str, Slots]


class OwnerWrites(Protocol):
    """What the upkeep asks of the data path."""

    def owned_partitions(self) -> list[int]:
        """The partitions this member owns and serves now (a lease, a table), sorted; none
        without them."""
        ...

    def blocked(self, pid: int) -> bool:
        """Whether the partition takes no write now (unavailable, or a migration's)."""
        ...

    def map_blocked(self, pid: int, map_name: str) -> bool:
        """Whether the map takes no write in the partition now (a sync reads it, or a stand-in
        may serve it)."""
        ...

    def replica(self, pid: int) -> PartitionData:
        """This member's copy of a partition it owns."""
        ...

    def slots_of(self, pid: int) -> Sequence[MemberId | None]:
        """The partition's replica slots under the current table."""
        ...

    def copies_held(self) -> Iterable[PartitionData]:
        """Every copy this member holds: its replicas and what it holds as a stand-in."""
        ...

    def remove_owned(self, pid: int, data: PartitionData, map_name: str, slots: Slots, keys: Column) -> None:
        """Remove ``keys`` of the map as the owner's write (replicated unless ``slots`` is None)."""
        ...

    def replicas_file_live_bytes(self) -> int:
        """At least what a rewrite of a persistent member's replicas file would write (0: not
        persistent)."""
        ...


class Upkeep:
    def __init__(self, ctx: Context, consensus: Consensus, writes: OwnerWrites) -> None:
        self.ctx = ctx
        self.consensus = consensus
        self.writes = writes
        # What the engine counts for every copy held, as of the last tick, and what this member's
        # own writes and evictions changed since (exact: the engine's count before and after
        # each): the memory limit is checked against the two on every write, without a pass over
        # the stores.
        self.memory_bytes = 0
        self.entry_count = 0
        self.map_usage: dict[str, tuple[int, int]] = {}  # per map: (entries, bytes), as of the last count
        self.entries_evicted = 0  # by every map's eviction policy, since the member started
        self._changed_since_count_bytes = 0
        self._owners: tuple[object, int] = (None, 0)  # (table, members owning a partition in it)
        self._eviction_cursor = -1  # the partition the eviction for memory last took entries from
        self._nothing_to_evict = False  # no evicting map had entries to free, as of this tick
        self._expiry_cursor = -1  # the partition the active expiry last looked at
        self._idle_offsets: dict[tuple[int, str], int] = {}  # per (partition, map): where its idle pass is
        self._idle_cursor = -1  # the last partition whose maps' idle passes were over

    # --- memory -------------------------------------------------------------------------------

    def held_bytes(self) -> int:
        """The engine's count as of the last tick, and what changed since."""
        return self.memory_bytes + self._changed_since_count_bytes

    def changed(self, delta_bytes: int) -> None:
        """A write changed the engine's count by ``delta_bytes`` (negative: freed)."""
        self._changed_since_count_bytes += delta_bytes

    def count(self) -> None:
        """Count what the engine holds for every copy of this member, per map and in all (a pass
        over its maps, once a tick: the engine keeps each map's count exact)."""
        memory = entries = 0
        usage: dict[str, list[int]] = {}
        for data in self.writes.copies_held():
            for name, records in data.maps.items():
                map_bytes, map_entries = records.memory_bytes(), len(records)
                memory += map_bytes
                entries += map_entries
                counted = usage.setdefault(name, [0, 0])
                counted[0] += map_entries
                counted[1] += map_bytes
        self.map_usage = {name: (counted[0], counted[1]) for name, counted in usage.items()}
        self.memory_bytes, self.entry_count, self._changed_since_count_bytes = memory, entries, 0
        self._nothing_to_evict = False

    def fits(self, growth_bytes: int) -> bool:
        """Whether ``growth_bytes`` more fit under ``max_memory_bytes`` (none: always): a request
        whose every key would be new and that fits so needs no check of room for each partition."""
        limit = self.ctx.config.max_memory_bytes
        return not limit or self.held_bytes() + growth_bytes <= limit

    def memory_full_reason(self) -> str:
        limit = self.ctx.config.max_memory_bytes
        return (
            f"member {self.ctx.identity.address} holds {self.held_bytes()} bytes "
            f"of records, at its max_memory_bytes of {limit}: writes are refused (not applied), reads and "
            "removes go on; remove data, let it expire, add members, or raise the limit"
        )

    def disk_short(self) -> bool:
        """Whether a persistent member has less free disk than it keeps (``disk_full_reason``)."""
        config = self.ctx.config
        return config.persistent and self.ctx.disk.short_of_bytes(config.disk_reserve_bytes, self.rewrite_bytes()) > 0

    def rewrite_bytes(self) -> int:
        """About what rewrites of the member's files would write now: its replicas file's live
        bytes, and its Raft file whole (a rewrite of it writes no more; found by an outside
        tester: the Raft log's dead bytes ate the reserve, and a member stopped at a full disk)."""
        return self.writes.replicas_file_live_bytes() + self.ctx.disk.file_bytes(DiskFile.RAFT)

    def disk_full_reason(self) -> str:
        """Why a persistent member refuses writes for want of disk ('' when it has room): its
        file system's free space is under its ``disk_reserve_bytes`` plus room for a rewrite of
        its files (``rewrite_bytes``)."""
        if not self.disk_short():
            return ""
        reserve = self.ctx.config.disk_reserve_bytes
        rewrite = self.rewrite_bytes()
        return (
            f"member {self.ctx.identity.address} has {self.ctx.disk.free_bytes} bytes free on its data "
            f"directory's disk, under the {reserve + rewrite} it keeps (disk_reserve_bytes {reserve}, and room to "
            f"rewrite its files, {rewrite} bytes): writes are refused (not applied), reads and removes go on; "
            "free disk space, remove data, or add members"
        )

    def full_reason(self, code: int) -> str:
        """What a write refused again with ``code`` (MEMORY_FULL or DISK_FULL) is told."""
        if code == ReplyCode.DISK_FULL:
            return self.disk_full_reason() or "the owner's disk was short of the room it keeps when this write came"
        return self.memory_full_reason()

    def room_for(
        self,
        pid: int,
        data: PartitionData,
        map_name: str,
        slots: Slots,
        run_keys: Column,
        run_values: Column,
        size: int,
        renewal: bool,
        expires: bool,
    ) -> str:
        """Why a put of ``run_keys`` (``size`` bytes of keys and values, counted; ``renewal``: a
        set_ttl writing the values held again; ``expires``: its entries have a time to live) may
        not go ahead ('' when it may): past its map's
        sizes or its member's max_memory_bytes, after evicting what the maps' policies let go
        (applied, and replicated, before the put, in the partition's sequence). A map that evicts
        is brought back within its own sizes after the put instead (``evict_over_size``), so
        that an overwrite evicts nothing."""
        config = self.ctx.config
        map_config = config.map_config(map_name)
        if map_config.bounded and not map_config.evicts:
            reason = self._over_map_size(pid, data, map_name, run_keys, run_values, slots)
            if reason:
                return reason
        limit = config.max_memory_bytes
        if not limit:
            return ""
        # At most: every key new; a set_ttl writes the values held again, adding their expiry's place.
        if renewal:
            growth = len(run_keys) * EXPIRY_BYTES
        else:
            opens = 0 if data.maps.get(map_name) is not None else 1
            growth = put_growth_bytes(len(run_keys), size, expires=expires, new_maps=opens, map_name=map_name)
        if self.held_bytes() + growth > limit:
            self._evict_for_memory(pid, data, map_name, slots, self.held_bytes() + growth - limit)
        if self.held_bytes() + growth > limit:
            return self.memory_full_reason()
        return ""

    # --- eviction -----------------------------------------------------------------------------

    def _evict_for_memory(self, pid: int, data: PartitionData, map_name: str, slots: Slots, need_bytes: int) -> None:
        """Free ``need_bytes`` of the member's count for a write, by evicting entries of the maps
        that evict: the written map in its partition first, then the partition's other evicting
        maps, then those of the other partitions this member owns and may write now (from where
        the last search stopped), so that a cache yields its memory to a map that evicts nothing.
        At most MAX_OPERATIONS_PER_REQUEST entries for one write. A search that finds nothing
        to evict is not repeated before the next count (the next tick)."""
        evicting = self.ctx.config.evicting_maps
        if not evicting or self._nothing_to_evict:
            return
        budget = MAX_OPERATIONS_PER_REQUEST
        order = [map_name] if map_name in evicting else []
        order += [name for name in evicting if name != map_name]
        places: list[Place] = [(pid, data, name, slots) for name in order if data.maps.get(name)]
        if slots is not None:
            places += self._evictable_elsewhere(pid, evicting)
        # What evicting within the write's budget could free, at each map's mean entry size: short
        # of the need, nothing is evicted (found by an outside tester: a refused 2 MB write first
        # evicted 10,000 small entries, all the budget allowed, and freed too little anyway).
        evictable_bytes, left = 0, budget
        for _, place_data, name, _ in places:
            records = place_data.maps[name]
            taken = min(left, len(records))
            evictable_bytes += records.memory_bytes() * taken // max(1, len(records))
            left -= taken
        if evictable_bytes < need_bytes:
            # Evicting all of it would not make room: the write is refused, and nothing is
            # evicted for it (found by an outside tester: refused writes emptied partitions).
            self._nothing_to_evict = self._nothing_to_evict or not evictable_bytes
            return
        for place_pid, place_data, name, place_slots in places:
            if need_bytes <= 0 or budget <= 0:
                return
            if not place_data.maps.get(name):
                continue
            count, freed = self._evict(place_pid, place_data, name, place_slots, 0, need_bytes, budget)
            need_bytes -= freed
            budget -= count
        if need_bytes > 0 and budget > 0:
            self._nothing_to_evict = True

    def _evictable_elsewhere(self, pid: int, evicting: tuple[str, ...]) -> list[Place]:
        """The evicting maps of the partitions other than ``pid`` this member owns and may
        write to now, as the active expiry chooses them (no migration, no sync reading the map,
        no stand-in that may serve it), from the partition after the last one evicted from."""
        writes = self.writes
        owned = [p for p in writes.owned_partitions() if p != pid]
        start = bisect_right(owned, self._eviction_cursor)
        places: list[Place] = []
        for other in owned[start:] + owned[:start]:
            if writes.blocked(other):
                continue
            other_data = writes.replica(other)
            for name in evicting:
                if other_data.maps.get(name) and not writes.map_blocked(other, name):
                    places.append((other, other_data, name, writes.slots_of(other)))
        return places

    def size_caps(self, map_name: str) -> tuple[int, int]:
        """A map's entries and bytes in one partition, at most (0: no bound): its per-partition
        size, and its partition's share of its per-member sizes (as Hazelcast's PER_NODE: the
        size times the members that own partitions, over the partitions, rounded up)."""
        config = self.ctx.config
        map_config = config.map_config(map_name)
        table = self.consensus.state.table
        if self._owners[0] is not table:
            owners = len({slots[0] for slots in table.replicas if slots[0] is not None}) if table else 0
            self._owners = (table, owners)
        owners = max(1, self._owners[1])
        partitions = config.partition_count

        def share(per_member: int) -> int:
            return -(-per_member * owners // partitions) if per_member else 0

        entries = [n for n in (map_config.max_entries_per_partition, share(map_config.max_entries_per_member)) if n]
        return min(entries, default=0), share(map_config.max_bytes_per_member)

    def _over_map_size(
        self,
        pid: int,
        data: PartitionData,
        map_name: str,
        run_keys: Column,
        run_values: Column,
        slots: Slots,
    ) -> str:
        """Why a put of ``run_keys`` (to ``run_values``) would take a map that evicts nothing past
        one of its sizes in partition ``pid`` ('' when it would not). Only what the put adds
        counts: keys it does not hold yet, and a value's growth over the one it replaces, so that
        a rewrite of held keys is taken even at the size (found by an outside tester: every
        overwrite was refused once a crash had shrunk the partition's share). Entries that
        expired but are not removed yet are removed first when they are in the way."""
        max_entries, max_bytes = self.size_caps(map_name)
        records = data.maps.get(map_name)
        # A key named twice ends at its last value (a map with sizes and no eviction: its writes
        # are judged key by key).
        final = dict(zip(run_keys.items(), run_values.items(), strict=True))
        held_values: dict[bytes, bytes | None] = {}
        if records is not None:
            held_values = dict(zip(final, records.peek(list(final), self.ctx.records_ms), strict=True))
        new_keys = [key for key in final if held_values.get(key) is None]
        growth = sum(len(key) + len(final[key]) + RECORD_GROWTH_BYTES for key in new_keys)
        growth += sum(len(final[key]) - len(old) for key, old in held_values.items() if old is not None)

        def over() -> tuple[bool, bool]:
            held = len(records) if records else 0
            held_bytes = records.memory_bytes() if records else 0
            too_many = bool(max_entries and new_keys and held + len(new_keys) > max_entries)
            too_large = bool(max_bytes and growth > 0 and held_bytes + growth > max_bytes)
            return too_many, too_large

        too_many, too_large = over()
        if (too_many or too_large) and records:
            self._remove_expired(pid, data, map_name, slots)
            records = data.maps.get(map_name)
            too_many, too_large = over()
        if too_many:
            return (
                f"map {map_name!r} holds {len(records or ())} entries in partition {pid}, and this write's "
                f"{len(new_keys)} new keys would take it past its size there ({max_entries}, from its "
                "max_entries_per_partition or its share of max_entries_per_member); its eviction_policy is NONE: the "
                "write is refused (not applied); remove entries, write fewer keys at once, or set an eviction policy"
            )
        if too_large:
            return (
                f"map {map_name!r} takes {records.memory_bytes() if records else 0} bytes in partition {pid}, at its "
                f"share ({max_bytes}) of its max_bytes_per_member and its eviction_policy is NONE: the write is "
                "refused (not applied); remove entries, or set an eviction policy"
            )
        return ""

    def _remove_expired(self, pid: int, data: PartitionData, map_name: str, slots: Slots) -> None:
        """Remove entries of the map that expired or went idle, before the sweeps get to them (at
        most ``MAX_EXPIRED_PER_RUN``, looking at ``MAX_IDLE_SCANNED_PER_WRITE`` records for idle
        ones)."""
        records = data.maps.get(map_name)
        if not records:
            return
        keys = records.expired(self.ctx.records_ms, MAX_EXPIRED_PER_RUN)
        if keys:
            self.writes.remove_owned(pid, data, map_name, slots, keys)
        if map_name in self.ctx.config.max_idle_ms and data.maps.get(map_name):
            self._remove_idle(pid, data, map_name, slots, MAX_IDLE_SCANNED_PER_WRITE, MAX_EXPIRED_PER_RUN)

    def evict_over_size(self, pid: int, data: PartitionData, map_name: str, slots: Slots) -> None:
        """After a put: bring a map that evicts back within its sizes in partition ``pid``."""
        map_config = self.ctx.config.map_config(map_name)
        records = data.maps.get(map_name)
        if not (map_config.evicts and map_config.bounded and records):
            return
        max_entries, max_bytes = self.size_caps(map_name)
        extra_entries = len(records) - max_entries if max_entries else 0
        extra_bytes = records.memory_bytes() - max_bytes if max_bytes else 0
        if extra_entries > 0 or extra_bytes > 0:
            self._evict(pid, data, map_name, slots, max(0, extra_entries), max(0, extra_bytes))

    def _evict(
        self,
        pid: int,
        data: PartitionData,
        map_name: str,
        slots: Slots,
        min_entries: int,
        min_bytes: int,
        max_entries: int = MAX_OPERATIONS_PER_REQUEST,
    ) -> tuple[int, int]:
        """Evict at least ``min_entries`` entries of the map in ``pid``, freeing ``min_bytes`` of
        the engine's count (as much as its copy holds, at most ``max_entries``), chosen by its
        policy from the member's seeded generator. Returns the entries evicted and the bytes
        freed."""
        records = data.maps.get(map_name)
        if not records:
            return 0, 0
        policy = self.ctx.config.map_config(map_name).eviction_policy
        before = records.memory_bytes()
        keys = records.evictable(
            policy,
            self.ctx.rng.getrandbits(64),
            EVICTION_SAMPLES,
            min(min_entries, MAX_OPERATIONS_PER_REQUEST),
            min(min_bytes, MAX_COUNTER),
            self.ctx.records_ms,
        ).items()[:max_entries]
        for start in range(0, len(keys), MAX_EXPIRED_PER_RUN):
            self.writes.remove_owned(pid, data, map_name, slots, Column.of(keys[start : start + MAX_EXPIRED_PER_RUN]))
        after = records.memory_bytes() if data.maps.get(map_name) is records else 0
        self._changed_since_count_bytes -= before - after
        self.entries_evicted += len(keys)
        if pid != self._eviction_cursor and slots is not None:
            self._eviction_cursor = pid
        return len(keys), before - after

    # --- expiry -------------------------------------------------------------------------------

    def expire_some(self) -> None:
        """The owner's active expiry: remove entries that expired or went idle, at most
        ``MAX_EXPIRED_PER_TICK`` a tick, partition after partition from where the last tick
        stopped (so every partition gets its turn), skipping what may take no write now (a
        migration, a sync reading the map, no lease). Reads never see an expired entry meanwhile:
        the engine hides it."""
        writes = self.writes
        owned = writes.owned_partitions()
        if not owned:
            return
        start = bisect_right(owned, self._expiry_cursor)
        budget = MAX_EXPIRED_PER_TICK
        now_ms = self.ctx.records_ms
        for pid in owned[start:] + owned[:start]:
            self._expiry_cursor = pid
            if budget <= 0:
                break
            data = writes.replica(pid)
            # The engine's look (read only) first: most partitions have nothing expired, and the
            # checks of what may be written are the dearer part of a tick over thousands of them.
            blocked: bool | None = None
            for map_name in list(data.maps):
                if budget <= 0:
                    break
                while budget > 0 and map_name in data.maps:
                    keys = data.maps[map_name].expired(now_ms, min(budget, MAX_EXPIRED_PER_RUN))
                    if not keys:
                        break
                    if blocked is None:
                        blocked = writes.blocked(pid)
                    if blocked or writes.map_blocked(pid, map_name):
                        break
                    budget -= len(keys)
                    writes.remove_owned(pid, data, map_name, writes.slots_of(pid), keys)
        if budget > 0 and self.ctx.config.max_idle_ms:
            self._sweep_idle(owned, budget)

    def _sweep_idle(self, owned: list[int], max_removed: int) -> None:
        """The idle entries' sweep: a pass over each map with a max idle, partition after
        partition, at most MAX_IDLE_SCANNED_PER_TICK records a tick, resumed where the last tick
        stopped, a partition left only once its maps' passes are over (found by an outside
        tester: with the expiry's rotation, a tick's scan ended in the first partitions every
        time, and idle entries further on were never removed)."""
        writes = self.writes
        idle_maps = sorted(self.ctx.config.max_idle_ms)
        start = bisect_right(owned, self._idle_cursor)
        scan_budget = MAX_IDLE_SCANNED_PER_TICK
        for pid in owned[start:] + owned[:start]:
            if scan_budget <= 0 or max_removed <= 0:
                return
            if not writes.blocked(pid):
                data = writes.replica(pid)
                slots = writes.slots_of(pid)
                for map_name in idle_maps:
                    while data.maps.get(map_name) and not writes.map_blocked(pid, map_name):
                        if scan_budget <= 0 or max_removed <= 0:
                            return  # this partition again at the next tick, from where it stopped
                        scanned, removed = self._remove_idle(pid, data, map_name, slots, scan_budget, max_removed)
                        scan_budget -= scanned
                        max_removed -= removed
                        if (pid, map_name) not in self._idle_offsets:
                            break  # the pass over this map is over
            self._idle_cursor = pid

    def _remove_idle(
        self, pid: int, data: PartitionData, map_name: str, slots: Slots, max_scanned: int, max_removed: int
    ) -> tuple[int, int]:
        """Remove entries of the map gone idle, looking on from where the last look at it stopped
        (at most ``max_scanned`` records, ``max_removed`` removed); records looked at and removed.
        A removal moves the map's last record into its place, behind the pass: the next pass
        finds it."""
        records = data.maps.get(map_name)
        if not records:
            self._idle_offsets.pop((pid, map_name), None)
            return 0, 0
        offset = self._idle_offsets.get((pid, map_name), 0)
        keys, next_offset = records.idle(
            self.ctx.records_ms,
            offset,
            min(max_scanned, MAX_ENTRIES_PER_CHUNK),
            min(max_removed, MAX_EXPIRED_PER_RUN),
        )
        scanned = max(1, next_offset - offset)
        if keys:
            self.writes.remove_owned(pid, data, map_name, slots, keys)
        held = len(records) if data.maps.get(map_name) is records else 0
        if next_offset >= held:
            self._idle_offsets.pop((pid, map_name), None)  # the pass is over: the next starts again
        else:
            self._idle_offsets[(pid, map_name)] = next_offset
        return scanned, len(keys)
