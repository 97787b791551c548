"""A member's configuration: every timing and bound, with its unit in its name."""

from __future__ import annotations

from dataclasses import dataclass

from shardgrid.core.errors import require
from shardgrid.core.limits import (
    DEFAULT_BACKUP_COUNT,
    DEFAULT_MAX_PARALLEL_MIGRATIONS,
    DEFAULT_PARTITION_COUNT,
    MAX_BACKUP_COUNT,
    MAX_PARALLEL_MIGRATIONS_LIMIT,
    MAX_PARTITION_COUNT,
)


@dataclass(frozen=True, slots=True)
class MemberConfig:
    partition_count: int = DEFAULT_PARTITION_COUNT
    backup_count: int = DEFAULT_BACKUP_COUNT
    max_parallel_migrations: int = DEFAULT_MAX_PARALLEL_MIGRATIONS
    tick_ms: int = 100  # the member's clock granularity: every retry and timeout is checked this often
    heartbeat_interval_ms: int = 1_000
    failure_timeout_ms: int = 5_000  # silence after which a member is suspected dead
    join_retry_ms: int = 500
    bootstrap_after_ms: int = 2_000  # the first seed starts a cluster alone after this much silence
    table_publish_interval_ms: int = 15_000  # the whole table, to every member (seed 001)
    retry_interval_ms: int = 300  # resend of an unacknowledged commit, chunk, backup or query
    migration_timeout_ms: int = 30_000  # a migration making no progress this long is rolled back
    backup_ack_timeout_ms: int = 5_000  # a write whose backups did not all ack is indeterminate
    max_chunk_entries: int = 1_000
    max_chunk_bytes: int = 1024 * 1024
    max_pending_writes: int = 10_000  # writes waiting for backup acks; beyond it, RETRY
    max_backup_reorder: int = 1_024  # out-of-order backup operations held per partition
    # With split-brain protection a master removes members, and a member claims mastership, only
    # while hearing from a majority of the member list: a side cut off from the rest stands still
    # instead of acknowledging writes the other side never sees. The price: a cluster of n members
    # then tolerates ceil(n/2) - 1 simultaneous losses (all of them when n <= 2). Without it (as
    # Hazelcast without a split-brain protection quorum), up to backup_count simultaneous crashes
    # are survived at any size, and a network split can lose acknowledged writes when it heals.
    split_brain_protection: bool = True
    # The master assigns the partitions when the first data member starts (the default), or, as
    # Hazelcast does, when data is first asked for: a cluster formed before first use then starts
    # balanced over all its members with no migration at all.
    assign_partitions_on_first_use: bool = False

    def validate(self) -> None:
        require(1 <= self.partition_count <= MAX_PARTITION_COUNT, "partition_count out of range")
        require(0 <= self.backup_count <= MAX_BACKUP_COUNT, "backup_count out of range")
        require(
            1 <= self.max_parallel_migrations <= MAX_PARALLEL_MIGRATIONS_LIMIT, "max_parallel_migrations out of range"
        )
        require(self.tick_ms > 0, "tick_ms must be positive")
        require(
            self.failure_timeout_ms > 2 * self.heartbeat_interval_ms, "failure_timeout_ms must exceed two heartbeats"
        )
        require(self.max_chunk_entries > 0 and self.max_chunk_bytes > 0, "chunk bounds must be positive")
