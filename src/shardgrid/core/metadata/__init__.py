"""The state machine the Raft log drives: the member list, the partition table, the migrations in
flight and those completed, and the cluster state. Every change to any of them is a command in the
log and takes effect, on every member, when the member applies it."""

from shardgrid.core.metadata.cluster_state import ClusterState
from shardgrid.core.metadata.state import Changes, MemberRecord, MetadataState, apply_commands

__all__ = ["Changes", "ClusterState", "MemberRecord", "MetadataState", "apply_commands"]
