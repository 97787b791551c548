"""The commands the Raft log carries: each entry holds a tuple of them, applied in order.

Only the leader proposes them, and each takes effect on a member when the member applies its
entry, so every member goes through exactly the same sequence of metadata states.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from shardgrid.core.identity import MemberId, MemberIds
from shardgrid.core.limits import MAX_MEMBER_COUNT, MAX_PARTITION_COUNT
from shardgrid.core.metadata.cluster_state import ClusterState
from shardgrid.core.migration import MigrationRecord
from shardgrid.core.table import PartitionTable
from shardgrid.core.wire import Message, Record


class MemberRecord(Record):
    """A member of the cluster as the metadata knows it; the member list is ordered oldest first."""

    id: MemberId
    lite: bool = False
    leaving: bool = False  # shutting down gracefully: it hands its replicas over, then leaves
    # Silent past the failure timeout while holding every replica left of some partition: kept
    # (that partition unavailable, not lost) until it answers again or is removed for good.
    unreachable: bool = False
    # Not back yet from a restart of the cluster from its disks (a hot restart): waited for, not
    # removed nor repaired around, until it answers, or hot_restart_policy gives it up.
    awaited: bool = False


# Length bounds the codec checks while it decodes, before it builds any item of an over-long list.
Members = Annotated[tuple[MemberRecord, ...], msgspec.Meta(max_length=MAX_MEMBER_COUNT)]
# A record per partition at most: no more than one migration of a partition is in flight at a time.
MigrationRecords = Annotated[tuple[MigrationRecord, ...], msgspec.Meta(max_length=MAX_PARTITION_COUNT)]


class AddMembers(Message, tag=61):
    members: Members


class RemoveMembers(Message, tag=62):
    """Members that crashed, were cut off past their lease, left gracefully, or restarted."""

    members: MemberIds


class AssignPartitions(Message, tag=63):
    """The first table, balanced over the data members of the moment (versions start at 1)."""

    table: PartitionTable


class StartMigrations(Message, tag=64):
    records: MigrationRecords


class FinishMigrations(Message, tag=65):
    """Committed or rolled-back outcomes: many migrations that ended together share one entry."""

    records: MigrationRecords


class SetClusterState(Message, tag=66):
    state: ClusterState
    # A cluster shutdown's PASSIVE: taken even while a data member is leaving (every member stops,
    # the leaving one too). Any other state that forbids migration is refused while one leaves: it
    # could never hand its replicas over (found by an outside tester: a leave waited out a pause).
    for_shutdown: bool = False


class PromoteToDataMember(Message, tag=67):
    """Seed 002: a lite member becomes a data member and is given partitions."""

    member: MemberId


class MarkLeaving(Message, tag=68):
    member: MemberId
    # ShutdownMember.even_if_last. Without it the command is refused when it is applied and no other
    # data member would stay: the leader's check before proposing cannot see the leaves proposed
    # with it (found on real processes: three members given SIGTERM at once were all recorded
    # leaving, and waited for each other until graceful_shutdown_timeout_ms).
    even_if_last: bool = False


class StopAllMembers(Message, tag=69):
    """Every member stops (the cluster went PASSIVE first)."""


class ResumeAfterShutdown(Message, tag=73):
    """Persistent members came back from their disks after the cluster shut down, or after every
    data member was asked to leave (each stopped keeping what it held): the cluster runs again,
    ACTIVE, and no member is leaving (as Hazelcast's cluster after a hot restart)."""


class MarkUnreachable(Message, tag=70):
    """Members silent past the failure timeout (their leases over) that hold every replica left of
    some partition: each partition that keeps a replica elsewhere is repaired as for a removal;
    the others keep their slots and are unavailable (neither served nor reassigned empty) until a
    member of theirs answers again, is removed for good, or the operator revives them."""

    members: MemberIds


class MarkReachable(Message, tag=71):
    """Members marked unreachable that answer again: they serve what they hold once they applied it."""

    members: MemberIds


class ReviveUnavailable(Message, tag=72):
    """The operator accepts the loss of every unavailable partition: each is emptied (reported
    lost) and given new, empty replicas; the unreachable members keep nothing of it."""


class AwaitMembers(Message, tag=75):
    """A leader back from its disk (the cluster restarting from its disks) has not heard from these
    members since: they are waited for as a hot restart's (``MemberRecord.awaited``), whichever
    member leads, until they answer (``MarkReachable``) or are given up."""

    members: MemberIds


class ReaddressMember(Message, tag=74):
    """A persistent member came back from its data directory at another address (``new``: the
    same uuid as ``old``, the address it listens at now): it stays the same member with the same
    replicas, so the member list and every table slot that named ``old`` name ``new`` instead
    (only those partitions' versions rise, as seed 003's restore of a table with a changed
    replica address does), and nothing moves."""

    old: MemberId
    new: MemberId


Command = (
    AddMembers
    | RemoveMembers
    | AssignPartitions
    | StartMigrations
    | FinishMigrations
    | SetClusterState
    | PromoteToDataMember
    | MarkLeaving
    | StopAllMembers
    | ResumeAfterShutdown
    | MarkUnreachable
    | MarkReachable
    | ReviveUnavailable
    | ReaddressMember
    | AwaitMembers
)
