"""What a member tells the outside world it did, as Hazelcast's listeners would hear it."""

from __future__ import annotations

from dataclasses import dataclass

from shardgrid.core.identity import Replica


@dataclass(frozen=True, slots=True)
class MemberAdded:
    member: Replica
    member_list_version: int


@dataclass(frozen=True, slots=True)
class MemberRemoved:
    member: Replica
    member_list_version: int


@dataclass(frozen=True, slots=True)
class MasterChanged:
    master: Replica
    member_list_version: int


@dataclass(frozen=True, slots=True)
class MigrationEvent:
    """Seed 000's PartitionMigrationEvent: ``status`` is started, finished or failed."""

    status: str
    migration_id: str
    partition_id: int
    kind: str
    source: Replica | None
    destination: Replica | None
    source_current_index: int
    source_new_index: int
    destination_current_index: int
    destination_new_index: int


@dataclass(frozen=True, slots=True)
class PartitionLost:
    """Every replica of the partition is gone: its data is lost and it restarts empty."""

    partition_id: int


@dataclass(frozen=True, slots=True)
class RemovedFromCluster:
    """This member learned it was removed; it dropped its data and joins again as a new member."""

    old_identity: Replica
    new_identity: Replica
