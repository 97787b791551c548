"""What a member tells the outside world happened, as Hazelcast's listeners would hear it.

Membership, state and migration events carry the log index at which the member applied the change,
so events from different members about the same change can be matched up.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from shardgrid.core.identity import MemberId
from shardgrid.core.limits import MAX_REPLICA_COUNT
from shardgrid.core.metadata.cluster_state import ClusterState


@dataclass(frozen=True, slots=True)
class MemberAdded:
    member: MemberId
    log_index: int


@dataclass(frozen=True, slots=True)
class MemberRemoved:
    member: MemberId
    log_index: int


@dataclass(frozen=True, slots=True)
class LeaderChanged:
    """The Raft leader (Hazelcast's master) changed (seen by this member)."""

    leader: MemberId
    term: int


@dataclass(frozen=True, slots=True)
class ClusterStateChanged:
    state: ClusterState
    log_index: int


@dataclass(frozen=True, slots=True)
class MemberPromoted:
    """A lite member became a data member (seed 002)."""

    member: MemberId
    log_index: int


class MigrationPhase(enum.StrEnum):
    STARTED = "started"
    FINISHED = "finished"
    FAILED = "failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class MigrationEvent:
    """Seed 000's PartitionMigrationEvent."""

    phase: MigrationPhase
    migration_id: str
    partition_id: int
    kind: str
    source: MemberId | None
    destination: MemberId | None
    source_current_index: int
    source_new_index: int
    destination_current_index: int
    destination_new_index: int


@dataclass(frozen=True, slots=True)
class PartitionLost:
    """The partition's ``lost_replica_count`` hottest replicas were lost at once (every replica
    when none survived): the maps whose backup count (sync and async) is below that count lost
    their data in it (Hazelcast's lost backup count). A partition with no survivor restarts empty;
    otherwise the hottest survivor became its owner."""

    partition_id: int
    lost_replica_count: int = MAX_REPLICA_COUNT


@dataclass(frozen=True, slots=True)
class PartitionsUnavailable:
    """Every replica left of these partitions is on members that stopped answering (``members``),
    not known to be dead: the partitions are neither served nor reassigned empty until a member of
    theirs answers again (``PartitionsAvailable``), is removed for good after
    ``partition_lost_timeout_ms`` or by an operator, or the operator revives them (lost)."""

    partition_ids: tuple[int, ...]
    members: tuple[MemberId, ...]
    log_index: int


@dataclass(frozen=True, slots=True)
class PartitionsAvailable:
    """Partitions that were unavailable are served again: a member holding them answers."""

    partition_ids: tuple[int, ...]
    log_index: int


@dataclass(frozen=True, slots=True)
class RemovedFromCluster:
    """This member learned it was removed; it dropped its data and joins again as a new member."""

    old_identity: MemberId
    new_identity: MemberId


@dataclass(frozen=True, slots=True)
class MemberRestored:
    """This member came back from its disk as itself: its log through ``applied_index``, its
    ``partitions`` copies holding ``entries`` entries, and ``torn_bytes`` its files lost at their
    torn tails (written, never synced). With ``fsync`` other than ``always`` (``fsync``), what it
    acknowledged within its last sync interval may not be on its disk: the ``new_lineages``
    partitions it owns start new lineages, their backups taking its copies whole."""

    member: MemberId
    applied_index: int
    partitions: int
    entries: int
    torn_bytes: int
    fsync: str = "always"
    new_lineages: int = 0


@dataclass(frozen=True, slots=True)
class MemberMoving:
    """This member came back from ``old``'s data directory at another address (``new``): it asks
    the cluster to rename it there, holding its ``partitions`` copies (``entries`` entries) apart
    until then; ``torn_bytes`` as for ``MemberRestored``."""

    old: MemberId
    new: MemberId
    partitions: int
    entries: int
    torn_bytes: int


@dataclass(frozen=True, slots=True)
class MemberMoved:
    """The cluster renamed this member at its new address (log entry ``applied_index``): it took
    its copies back and serves them."""

    old: MemberId
    new: MemberId
    applied_index: int


@dataclass(frozen=True, slots=True)
class MemberReaddressed:
    """The log renamed member ``old`` at ``new``'s address (the same member, back from its data
    directory elsewhere): every partition it held names it there (entry ``log_index``)."""

    old: MemberId
    new: MemberId
    log_index: int


@dataclass(frozen=True, slots=True)
class HotRestartIncomplete:
    """The leader, back from its disk, waited ``hot_restart_timeout_ms`` for ``members`` and they
    are still away; ``policy`` (``hot_restart_policy``) says what follows: waited for on
    (``full_recovery_only``), removed at once with the partitions only they held reported lost
    (``partial_recovery_most_recent``), or handled as crashed members
    (``partial_recovery_most_complete``)."""

    members: tuple[MemberId, ...]
    policy: str


@dataclass(frozen=True, slots=True)
class MemberStopped:
    """This member stopped: its graceful shutdown completed, or the cluster shut down."""

    member: MemberId
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveRefused:
    """A leave this member's process asked for (a signal) will not happen now, and others stay to
    serve: the member goes on serving (stopping would be a crash to the cluster); a second signal
    stops it at once."""

    member: MemberId
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterNotFormed:
    """This process has neither formed nor joined a cluster yet, and why (at a bounded rate):
    ``found`` processes that could found a cluster with it (itself included) of the
    ``initial_cluster_size`` it needs (``missing``); the seed addresses an answer came from lately
    (as a peer, as a member of a cluster, or with other settings: ``reason`` names those) and those
    none came from (down, cut off, or refusing its connections), a founding needing
    ``seeds_needed`` of them answering as peers; and the addresses it waits for (comma-separated)."""

    reason: str
    stance: str
    found: int
    initial_cluster_size: int
    missing: int
    seeds_answered: tuple[str, ...]
    seeds_silent: tuple[str, ...]
    seeds_needed: int
    waiting_for: str
