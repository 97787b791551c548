"""The commands the Raft log carries: each entry holds a tuple of them, applied in order.

Only the leader proposes them, and each takes effect on a member when the member applies its
entry, so every member goes through exactly the same sequence of metadata states.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardgrid.core.identity import Replica
from shardgrid.core.metadata.cluster_state import ClusterState
from shardgrid.core.migration import MigrationRecord
from shardgrid.core.table import PartitionTable


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """A member of the cluster as the metadata knows it; the member list is ordered oldest first."""

    replica: Replica
    lite: bool = False
    leaving: bool = False  # shutting down gracefully: it hands its replicas over, then leaves


@dataclass(frozen=True, slots=True)
class AddMembers:
    members: tuple[MemberRecord, ...]


@dataclass(frozen=True, slots=True)
class RemoveMembers:
    """Members that crashed, were cut off past their lease, left gracefully, or restarted."""

    members: tuple[Replica, ...]


@dataclass(frozen=True, slots=True)
class AssignPartitions:
    """The first table, balanced over the data members of the moment (versions start at 1)."""

    table: PartitionTable


@dataclass(frozen=True, slots=True)
class StartMigrations:
    records: tuple[MigrationRecord, ...]


@dataclass(frozen=True, slots=True)
class FinishMigrations:
    """Committed or rolled-back outcomes: many migrations that ended together share one entry."""

    records: tuple[MigrationRecord, ...]


@dataclass(frozen=True, slots=True)
class SetClusterState:
    state: ClusterState


@dataclass(frozen=True, slots=True)
class PromoteToDataMember:
    """Seed 002: a lite member becomes a data member and is given partitions."""

    member: Replica


@dataclass(frozen=True, slots=True)
class MarkLeaving:
    member: Replica


@dataclass(frozen=True, slots=True)
class ShutdownCluster:
    """Every member stops (the cluster went PASSIVE first)."""


Command = (
    AddMembers
    | RemoveMembers
    | AssignPartitions
    | StartMigrations
    | FinishMigrations
    | SetClusterState
    | PromoteToDataMember
    | MarkLeaving
    | ShutdownCluster
)
