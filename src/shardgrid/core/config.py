"""A member's configuration: every timing and bound, with its unit in its name."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, get_args

from shardgrid.core.errors import require
from shardgrid.core.limits import (
    DEFAULT_BACKUP_COUNT,
    DEFAULT_MAX_PARALLEL_MIGRATIONS,
    DEFAULT_PARTITION_COUNT,
    MAX_BACKUP_COUNT,
    MAX_COUNTER,
    MAX_ENTRIES_PER_CHUNK,
    MAX_MAP_NAME_CHARS,
    MAX_MEMBER_COUNT,
    MAX_PARALLEL_MIGRATIONS_LIMIT,
    MAX_PARTITION_COUNT,
    MAX_TTL_SECONDS,
)
from shardgrid.core.raft import RaftSettings

# When a persistent member syncs what it wrote (MemberConfig.fsync), as Redis's appendfsync.
FsyncPolicy = Literal["always", "every_ms", "never"]
FSYNC_POLICIES: tuple[str, ...] = get_args(FsyncPolicy)
DEFAULT_COMPACTION_MIN_BYTES = 64 * 1024 * 1024
DEFAULT_COMPACTION_BYTES_PER_STEP = 4 * 1024 * 1024
HotRestartPolicy = Literal["full_recovery_only", "partial_recovery_most_recent", "partial_recovery_most_complete"]
HOT_RESTART_POLICIES: tuple[str, ...] = get_args(HotRestartPolicy)
# What a map does at its size (MapConfig.eviction_policy).
EvictionPolicy = Literal["NONE", "LRU", "LFU", "RANDOM"]
EVICTION_POLICIES: tuple[str, ...] = get_args(EvictionPolicy)


@dataclass(frozen=True, slots=True)
class MapConfig:
    """How one map is replicated (seed 001). Its sync backups hold every write before the owner
    answers; its async backups get the writes without being waited on. Together they use the
    partition's replica slots 1..(backup_count + async_backup_count), sync first."""

    backup_count: int = DEFAULT_BACKUP_COUNT
    """Sync backups: each holds every write before the owner answers it."""
    async_backup_count: int = 0
    """Async backups: they get every write in order, but nobody waits for them."""
    read_backup_data: bool = False
    """A backup holding a copy of the map answers reads of it itself: monotonic for a client that
    keeps reading one replica, not strong (it may miss the newest writes)."""
    serve_when_unavailable: bool = False
    """A cache's choice of availability over keeping its data: where every replica of a partition
    is on members that stopped answering, the map is served there anyway, by a stand-in member,
    starting empty and with no backups. What either side wrote to it in that partition meanwhile
    is dropped when the partition is available again or lost (and by an owner that catches up
    from a snapshot of the log): the map restarts empty there, as a cache refills, and never
    shows a value older than one acknowledged. Off (the default), the partition waits for its
    replicas."""
    time_to_live_seconds: int = 0
    """How long an entry written without its own TTL lives, in seconds (0: until removed). A write's
    own TTL (the clients' ``ttl``) takes precedence. The owner removes expired entries, through
    its backups as any remove; no read returns one meanwhile."""

    max_idle_seconds: int = 0
    """How long an entry may go unread and unwritten before it expires, in seconds (0: no limit).
    Its owner judges it by the reads it served: a read or a write keeps the entry another
    max_idle_seconds, and a backup that becomes owner gives every entry a whole max idle from
    then. The owner removes idle entries as it removes expired ones; the map is always read
    from its owner, even with read_backup_data."""
    eviction_policy: EvictionPolicy = "NONE"
    """What the owner does with a write that would take the map past one of its sizes below, or
    its member past max_memory_bytes. NONE refuses it (MEMORY_FULL, nothing applied); LRU, LFU and
    RANDOM make room by evicting entries of the map in the partition written: the least recently
    used, the least often read, or any, each the best of a few sampled (as Redis approximates
    LRU). An eviction is the owner's remove, replicated through its backups as any other."""
    max_entries_per_member: int = 0
    """The map's entries each member owns, at most (0: no bound), enforced per partition as its
    share (this times the owning members, over the partitions), as Hazelcast's PER_NODE is."""
    max_entries_per_partition: int = 0
    """The map's entries in one partition, at most (0: no bound)."""
    max_bytes_per_member: int = 0
    """The memory the map's owned entries take on each member, at most (0: no bound; the
    engine's count, metadata included), enforced per partition as its share, as above."""

    @property
    def time_to_live_ms(self) -> int:
        return self.time_to_live_seconds * 1000

    @property
    def evicts(self) -> bool:
        return self.eviction_policy != "NONE"

    @property
    def bounded(self) -> bool:
        """Whether the map has a size of its own (besides the member's memory)."""
        return bool(self.max_entries_per_member or self.max_entries_per_partition or self.max_bytes_per_member)

    @property
    def total_backup_count(self) -> int:
        return self.backup_count + self.async_backup_count

    def validate(self, name: str) -> None:
        require(0 <= self.backup_count <= MAX_BACKUP_COUNT, f"map {name!r}: backup_count out of range")
        require(0 <= self.async_backup_count <= MAX_BACKUP_COUNT, f"map {name!r}: async_backup_count out of range")
        require(
            0 <= self.time_to_live_seconds <= MAX_TTL_SECONDS,
            f"map {name!r}: time_to_live_seconds is 0 (no expiry) to {MAX_TTL_SECONDS}",
        )
        require(
            0 <= self.max_idle_seconds <= MAX_TTL_SECONDS,
            f"map {name!r}: max_idle_seconds is 0 (no limit) to {MAX_TTL_SECONDS}",
        )
        require(
            self.eviction_policy in EVICTION_POLICIES,
            f"map {name!r}: eviction_policy is one of {', '.join(EVICTION_POLICIES)}",
        )
        for size in ("max_entries_per_member", "max_entries_per_partition", "max_bytes_per_member"):
            require(0 <= getattr(self, size) <= MAX_COUNTER, f"map {name!r}: {size} is 0 (no bound) to {MAX_COUNTER}")
        require(
            self.total_backup_count <= MAX_BACKUP_COUNT,
            f"map {name!r}: backup_count + async_backup_count is at most {MAX_BACKUP_COUNT}",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberConfig:
    """Every timing and bound of a member, the pure core's configuration. The simulator runs with
    these defaults; a member process takes them from its settings (``[cluster]``)."""

    partition_count: int = DEFAULT_PARTITION_COUNT
    """How many partitions the keys are spread over. Every member of a cluster must agree."""
    backup_count: int = DEFAULT_BACKUP_COUNT
    """Sync backups of every map not listed in `[maps.NAME]`: each holds every write before the
    owner answers it, so losing this many members at once loses no acknowledged write."""
    async_backup_count: int = 0
    """Async backups of every map not listed: they get every write in order, but nobody waits for
    them. Sync and async together at most 6."""
    read_backup_data: bool = False
    """Backups answer reads of the maps they keep a copy of (monotonic, not strong)."""
    maps: tuple[tuple[str, MapConfig], ...] = ()
    """Per-map replication, by map name (the `[maps.NAME]` tables)."""
    max_parallel_migrations: int = DEFAULT_MAX_PARALLEL_MIGRATIONS
    """Migrations one member takes part in at once, as source or destination."""
    tick_ms: int = 100
    """The member's clock granularity: every retry and timeout is checked this often."""
    initial_cluster_size: int = 3
    """A brand-new cluster forms only once this many processes found each other and none has heard
    of a cluster (Consul's bootstrap_expect), so one process cut off never starts a cluster of its
    own. Set 1 only for a one-member cluster."""
    bootstrap_after_ms: int = 2_000
    """How long a new process looks for an existing cluster before it helps to found one."""
    join_retry_ms: int = 500
    """How often a process looking for its cluster asks the addresses it knows again."""
    max_voters: int = 5
    """Data members that vote in the metadata log (kept odd); the others follow as learners."""
    election_timeout_ms: int = 1_000
    """Silence from the leader after which a voter campaigns (randomized between one and two
    times this); a leader that has not heard from a majority for this long steps down."""
    raft_heartbeat_interval_ms: int = 200
    """How often the leader sends each member the log (or an empty append)."""
    snapshot_every_entries: int = 1_000
    """The log is compacted into a snapshot this many applied entries after the last one."""
    lease_ms: int = 2_000
    """How long a grant lets a member serve its partitions, counted from when it sent its request:
    a member cut off from the leader stops serving within this."""
    lease_renew_interval_ms: int = 500
    """How often a member asks the leader to renew its lease (under half of `lease_ms`)."""
    clock_drift_margin_ms: int = 200
    """How much the leader allows members' clocks to run slow: it reassigns an unreachable member's
    partitions only `lease_ms` plus this after that member's last grant."""
    failure_timeout_ms: int = 5_000
    """Silence after which the leader removes a member (once its lease has certainly ended)."""
    partition_lost_timeout_ms: int = 600_000
    """How long a silent member that holds every replica left of some partition is kept,
    unreachable, before it is removed for good and that partition reported lost: a network split
    is not a crash, and until then the partition is unavailable (neither served nor reassigned
    empty), and comes back whole if the member answers. 0: removed at the failure timeout, as a
    crash (the partition restarts empty at once)."""
    retry_interval_ms: int = 300
    """How often an unacknowledged migration commit, backup run or query is sent again."""
    transfer_resend_ms: int = 300
    """How long a window of migration or sync chunks waits for an acknowledgement before it is
    sent again. A member process resends when a lost connection comes back, so it keeps this only
    as a backstop."""
    migration_timeout_ms: int = 30_000
    """A migration that makes no progress this long is rolled back."""
    backup_ack_timeout_ms: int = 5_000
    """A write whose backups did not all acknowledge it within this is answered INDETERMINATE, and
    the lagging backup is re-synced."""
    graceful_shutdown_timeout_ms: int = 600_000
    """A leave still handing replicas over after this is answered as failed (nothing is lost: the
    member goes on serving). A member a signal asked to leave stops once this has passed and no
    leader has answered it for failure_timeout_ms (exit 1: nobody is left to take its leave)."""
    admin_timeout_ms: int = 30_000
    """An administrative request (a state change, a cluster shutdown) not done by then fails."""
    max_chunk_entries: int = 1_000
    """Entries in one migration or sync chunk, at most."""
    max_chunk_bytes: int = 1024 * 1024
    """Keys' and values' bytes in one migration or sync chunk, at most (below `max_frame_bytes`)."""
    migration_window_chunks: int = 4
    """Chunks of one migration or sync in flight before the first is acknowledged."""
    max_migration_bytes_per_s: int = 0
    """What this member sends in migration chunks, at most, on average over a second (keys and
    values); 0: no cap."""
    migration_fragments_enabled: bool = True
    """A partition moves map by map in bounded chunks, a window at a time, between other work.
    Off, a migration or sync sends everything at once: fewer round trips, more memory."""
    max_pending_writes: int = 10_000
    """Writes waiting for their backups' acknowledgements; beyond it, new writes get OVERLOADED."""
    max_pending_write_bytes: int = 256 * 1024 * 1024
    """The keys' and values' bytes of those writes; beyond it, OVERLOADED."""
    max_memory_bytes: int = 0
    """The records this member may hold, in bytes as the storage engine counts them (keys, values,
    metadata and table overhead, of every replica it holds): at the limit, a write is refused with
    MEMORY_FULL while reads and removes go on. 0: no limit. The process's default is half the
    memory it may use (the cgroup's limit or the machine's); each member has its own."""
    persistent: bool = False
    """Keep on disk what the member must not forget across a crash (a member process's
    ``data_dir``): its Raft hard state, log and snapshots, and every replica it holds. A step's
    sends and replies then go out only once what they depend on is synced."""
    fsync: FsyncPolicy = "always"
    """When a persistent member syncs its replicas' writes. ``always``: before anything that
    depends on them leaves the member (a write is acknowledged only once it is on the disk of its
    owner and of every sync backup; nothing acknowledged is lost when every member is killed at
    once). ``every_ms``: every `fsync_interval_ms`, acknowledging before (a crash loses what that
    member applied since its last sync). ``never``: when the metadata log is synced, or the system
    writes it back. The metadata log, migrations and replica syncs are synced before what depends
    on them whatever the policy; an owner restarted from a disk that may have lost writes starts a
    new lineage, and its backups take its copy whole."""
    fsync_interval_ms: int = 1_000
    """With ``fsync = "every_ms"``: how long a write may wait for its sync."""
    compaction_min_bytes: int = DEFAULT_COMPACTION_MIN_BYTES
    """A persistent member compacts its replicas file (writes it anew: an image of every copy)
    once it holds four times what that would, and at least this much (as Redis's
    auto-aof-rewrite-min-size); sooner when short of disk."""
    compaction_bytes_per_step: int = DEFAULT_COMPACTION_BYTES_PER_STEP
    """While compacting, the images a member writes per step, at most (one copy's alone may pass
    it): a compaction never stalls the member for a rewrite of everything it holds."""
    hot_restart_timeout_ms: int = 120_000
    """How long a leader back from its disk waits for the members it has not heard from since,
    instead of `failure_timeout_ms`: a restarted cluster neither removes them nor repairs their
    partitions meanwhile, so that members slow to come back move nothing. 0: no wait."""
    hot_restart_policy: HotRestartPolicy = "full_recovery_only"
    """What the leader does with members still away after `hot_restart_timeout_ms` (seed 003's
    partial restart). ``full_recovery_only``: it waits on for them (their partitions unavailable)
    until they come back or an operator removes them. ``partial_recovery_most_recent``: it removes
    them at once, and the partitions only they held are reported lost: the cluster serves every
    partition again, from what came back. ``partial_recovery_most_complete``: it treats them as
    crashed: the partitions with a replica that came back are repaired, and those only they held
    stay unavailable, in case they come back, until `partition_lost_timeout_ms`."""
    disk_reserve_bytes: int = 256 * 1024 * 1024
    """Free space a persistent member keeps on its data directory's file system, beyond room for
    a whole rewrite of the records it holds (its files are compacted by rewriting them): with
    less free, a write is refused with DISK_FULL while reads and removes go on, and writes are
    taken again once there is room. 0: only the room for a rewrite is kept."""
    client_retry_after_ms: int = 50
    """What a reply asking a client to retry tells it to wait."""
    max_backup_reorder: int = 1_024
    """Writes a backup holds per partition that arrived ahead of a gap; past it, it asks for a sync."""
    max_backup_reorder_bytes: int = 16 * 1024 * 1024
    """Their keys' and values' bytes, per partition."""
    anti_entropy_interval_ms: int = 30_000
    """How often an owner tells each backup where each settled partition stands, so that a backup
    that lost something asks for a sync."""
    max_parallel_replications: int = 5
    """Replica syncs a backup asks for after one anti-entropy summary."""
    max_pending_joins: int = 100
    """Joiners the leader keeps waiting for its next configuration change."""
    stale_read_disabled: bool = False
    """Reads of a migrating partition are answered MIGRATING too, instead of by its owner until the
    data is handed over."""
    assign_partitions_on_first_use: bool = False
    """The leader assigns the partitions when data is first asked for (as Hazelcast does), not as
    soon as the cluster has a data member."""
    _map_configs: dict[str, MapConfig] = field(init=False, repr=False, compare=False, hash=False)
    _default_map: MapConfig = field(init=False, repr=False, compare=False, hash=False)

    _settings_digest: str = field(init=False, repr=False, compare=False, hash=False)
    _serving_maps: frozenset[str] = field(init=False, repr=False, compare=False, hash=False)
    _evicting_maps: tuple[str, ...] = field(init=False, repr=False, compare=False, hash=False)
    _max_idle_ms: Mapping[str, int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        # Looked up on every write: built once, here.
        object.__setattr__(self, "_map_configs", dict(self.maps))
        default = MapConfig(self.backup_count, self.async_backup_count, self.read_backup_data)
        object.__setattr__(self, "_default_map", default)
        # What decides which copies each replica keeps: the partition count and every map's
        # effective backup counts (a map listed with the default's counts is the default; whether
        # a backup answers reads is each member's own business).
        counts = (int(self.backup_count), int(self.async_backup_count))
        maps = sorted(
            (name, int(m.backup_count), int(m.async_backup_count))
            for name, m in self.maps
            if (int(m.backup_count), int(m.async_backup_count)) != counts
        )
        shared: tuple[object, ...] = (int(self.partition_count), counts, maps)
        # Which maps a stand-in serves: a member that disagreed would serve or clear them alone.
        serving = sorted(name for name, m in self.maps if m.serve_when_unavailable)
        object.__setattr__(self, "_serving_maps", frozenset(serving))
        object.__setattr__(self, "_evicting_maps", tuple(sorted(name for name, m in self.maps if m.evicts)))
        idle = {name: m.max_idle_seconds * 1000 for name, m in self.maps if m.max_idle_seconds}
        object.__setattr__(self, "_max_idle_ms", MappingProxyType(idle))
        if serving:
            shared = (*shared, serving)
        digest = hashlib.sha256(json.dumps(shared).encode()).hexdigest()[:32]
        object.__setattr__(self, "_settings_digest", digest)

    @property
    def settings_digest(self) -> str:
        """What every member of one cluster must agree on (the partition count and how many copies
        of each map are kept: a member that disagrees would keep or drop copies the others do
        not): a joiner with other settings is turned away."""
        return self._settings_digest

    def map_config(self, map_name: str) -> MapConfig:
        return self._map_configs.get(map_name, self._default_map)

    @property
    def max_idle_ms(self) -> Mapping[str, int]:
        """Per map with a max_idle_seconds, that many ms."""
        return self._max_idle_ms

    @property
    def evicting_maps(self) -> tuple[str, ...]:
        """The maps with an eviction policy, by name."""
        return self._evicting_maps

    @property
    def serving_maps(self) -> frozenset[str]:
        """The maps served by a stand-in while their partition is unavailable (``serve_when_unavailable``)."""
        return self._serving_maps

    def keeps_copy(self, map_name: str, index: int) -> bool:
        """Whether the replica at slot ``index`` of a partition holds a copy of the map."""
        return index == 0 or self.map_config(map_name).total_backup_count >= index

    @property
    def fewest_backups(self) -> int:
        """The smallest backup count (sync and async) of any configured map, the default included."""
        return min(config.total_backup_count for config in (self._default_map, *self._map_configs.values()))

    @property
    def table_backup_count(self) -> int:
        """Backup slots every partition has: as many as the map that keeps the most needs."""
        return max(config.total_backup_count for config in (self._default_map, *self._map_configs.values()))

    def validate(self) -> None:
        require(1 <= self.partition_count <= MAX_PARTITION_COUNT, "partition_count out of range")
        self._default_map.validate("(default)")
        require(len(self._map_configs) == len(self.maps), "a map is configured twice")
        for name, map_config in self.maps:
            require(
                isinstance(name, str) and 0 < len(name) <= MAX_MAP_NAME_CHARS,
                f"a map name is 1 to {MAX_MAP_NAME_CHARS} characters: {name!r}",
            )
            map_config.validate(name)
        require(
            1 <= self.max_parallel_migrations <= MAX_PARALLEL_MIGRATIONS_LIMIT, "max_parallel_migrations out of range"
        )
        require(self.tick_ms > 0, "tick_ms must be positive")
        require(1 <= self.initial_cluster_size <= MAX_MEMBER_COUNT, "initial_cluster_size out of range")
        require(1 <= self.max_voters <= 9, "max_voters must be 1..9")
        require(
            self.lease_renew_interval_ms * 2 < self.lease_ms,
            "lease_renew_interval_ms must be under half of lease_ms (a lost renewal must not end the lease)",
        )
        require(
            self.lease_ms + self.clock_drift_margin_ms < self.failure_timeout_ms,
            "failure_timeout_ms must exceed lease_ms plus clock_drift_margin_ms",
        )
        require(
            self.partition_lost_timeout_ms == 0 or self.partition_lost_timeout_ms >= self.failure_timeout_ms,
            "partition_lost_timeout_ms must be 0 or at least failure_timeout_ms",
        )
        require(self.max_chunk_bytes > 0, "max_chunk_bytes must be positive")
        require(0 <= self.max_memory_bytes <= MAX_COUNTER, "max_memory_bytes must be 0 (no limit) or positive")
        require(0 <= self.disk_reserve_bytes <= MAX_COUNTER, f"disk_reserve_bytes is 0 to {MAX_COUNTER}")
        require(self.fsync in FSYNC_POLICIES, f"fsync is one of {', '.join(FSYNC_POLICIES)}")
        require(0 < self.fsync_interval_ms <= 60_000, "fsync_interval_ms is 1 to 60000")
        require(
            self.hot_restart_policy in HOT_RESTART_POLICIES,
            f"hot_restart_policy is one of {', '.join(HOT_RESTART_POLICIES)}",
        )
        require(0 <= self.hot_restart_timeout_ms <= MAX_COUNTER, "hot_restart_timeout_ms must be 0 or positive")
        require(0 <= self.compaction_min_bytes <= MAX_COUNTER, "compaction_min_bytes must be 0 or positive")
        require(0 < self.compaction_bytes_per_step <= MAX_COUNTER, "compaction_bytes_per_step must be positive")
        require(
            0 < self.max_chunk_entries <= MAX_ENTRIES_PER_CHUNK, f"max_chunk_entries must be 1..{MAX_ENTRIES_PER_CHUNK}"
        )
        require(1 <= self.migration_window_chunks <= 64, "migration_window_chunks must be 1..64")
        require(
            self.max_migration_bytes_per_s == 0
            or self.max_migration_bytes_per_s * self.migration_timeout_ms >= 2_000 * self.max_chunk_bytes,
            "max_migration_bytes_per_s must be 0 (no cap) or let two chunks of max_chunk_bytes through within "
            "migration_timeout_ms",
        )
        require(
            0 < self.transfer_resend_ms < self.migration_timeout_ms,
            "transfer_resend_ms must be positive and under migration_timeout_ms (a window waiting for "
            "its resend would be rolled back first)",
        )
        require(self.anti_entropy_interval_ms > 0, "anti_entropy_interval_ms must be positive")
        require(1 <= self.max_parallel_replications <= 1_000, "max_parallel_replications must be 1..1000")
        require(self.snapshot_every_entries >= 10, "snapshot_every_entries must be at least 10")
        # Raft's own checks, said first in this config's names (RaftSettings calls the heartbeat
        # heartbeat_interval_ms, which is not a setting: found by an outside tester).
        require(self.raft_heartbeat_interval_ms > 0, "raft_heartbeat_interval_ms must be positive")
        require(
            self.election_timeout_ms >= 3 * self.raft_heartbeat_interval_ms,
            "election_timeout_ms must be at least three times raft_heartbeat_interval_ms",
        )
        self.raft_settings().validate()

    def raft_settings(self) -> RaftSettings:
        return RaftSettings(
            election_timeout_ms=self.election_timeout_ms,
            heartbeat_interval_ms=self.raft_heartbeat_interval_ms,
            clock_drift_margin_ms=min(self.clock_drift_margin_ms, self.election_timeout_ms // 2),
        )

    def voter_target(self, data_members: int) -> int:
        """How many voters for this many data members: odd (an even count tolerates no more
        failures than one fewer), at most ``max_voters``, at least one when any data member exists."""
        wanted = min(self.max_voters, data_members)
        return wanted if wanted % 2 == 1 or wanted == 0 else wanted - 1
