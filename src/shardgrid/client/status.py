"""The cluster as its members describe it, and whether it is safe: pure functions over their
``MemberStatus``s, so that ``shardgrid status``, ``is_cluster_safe`` and ``wait_until_safe`` agree.

Safe means what Hazelcast's ``isClusterSafe`` promises and a script can wait on before the next
step of a rolling restart: every member of the list answered and has applied the same log (member
list and partition table), the leader has nothing planned, running, joining or leaving, the table
has every replica the backup count asks for, and no member is migrating, syncing a replica or
waiting for a backup's acknowledgement. Losing any one member then loses no data of a map with a
backup.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shardgrid.core.messages import MemberStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionInfo:
    """One partition as the table a member sent holds it: its version, the addresses of its
    replicas (the owner first, then the backups) and whether every one of them stopped answering."""

    partition_id: int
    version: int
    replicas: tuple[str, ...]
    unavailable: bool

    @property
    def owner(self) -> str | None:
        return self.replicas[0] if self.replicas else None


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    members: tuple[str, ...]  # the member list, as the member asked first applied it
    replies: dict[str, MemberStatus] = field(default_factory=dict)  # by address
    unreachable: dict[str, str] = field(default_factory=dict)  # address -> why it did not answer

    @property
    def leader(self) -> str:
        leaders = {reply.leader_address for reply in self.replies.values()}
        return leaders.pop() if len(leaders) == 1 else ""

    @property
    def unsafe_reason(self) -> str:
        """Why the cluster is not safe now, or '' when it is."""
        if not self.members:
            return "no member list yet (the cluster has not formed)"
        awaited = sorted({a for reply in self.replies.values() for a in reply.awaited_members})
        if awaited:
            return (
                f"the cluster came back from its disks and waits for {', '.join(awaited)} (hot restart: their "
                "partitions wait for them until hot_restart_timeout_ms; or: shardgrid remove)"
            )
        unavailable = max((reply.unavailable_partitions for reply in self.replies.values()), default=0)
        if unavailable:
            away = sorted({a for reply in self.replies.values() for a in reply.unreachable_members})
            return (
                f"{unavailable} partitions are unavailable: every replica of theirs is on members that stopped "
                f"answering ({', '.join(away)}); they come back when one answers (or: shardgrid remove / "
                "partitions revive)"
            )
        for address in self.members:
            if address not in self.replies:
                return f"{address} did not answer ({self.unreachable.get(address, 'not asked')})"
        replies = [self.replies[address] for address in self.members]
        inactive = next((reply for reply in replies if reply.lifecycle != "active"), None)
        if inactive is not None:
            return f"{inactive.address} is {inactive.lifecycle}"
        if not self.leader:
            return "the members do not agree on a leader"
        if len({reply.members for reply in replies}) != 1:
            return "the members do not agree on the member list yet"
        if len({reply.applied_index for reply in replies}) != 1:
            return "a member has not applied the whole log yet"
        if len({reply.table_stamp for reply in replies}) != 1:
            return "the members do not hold the same partition table yet"
        leader = self.replies.get(self.leader)
        if leader is None:
            return f"the leader {self.leader} is not in the member list"
        if not leader.leader_idle:
            planned = leader.migrations_planned + leader.migrations_in_log
            if planned:
                return f"the leader is rebalancing ({planned} migrations planned or running)"
            if not leader.cluster_state.migration_allowed:
                # Said as it is: the wait ends with `rebalance resume`, not by itself.
                return f"the cluster state is {leader.cluster_state.value}: rebalancing waits until it is active"
            return "the leader is admitting, removing or adjusting members"
        if leader.missing_replicas:
            return f"{leader.missing_replicas} backup replicas are missing from the table"
        for reply in replies:
            if not reply.quiet:
                return (
                    f"{reply.address} is busy: {reply.migrations_here} migrations, {reply.syncs_in_flight} replica "
                    f"syncs, {reply.writes_awaiting_backups} writes awaiting backups"
                )
        return ""

    def too_few_reason(self, members: int) -> str:
        """Why the cluster is short of ``members`` members, or '' when it is not."""
        if len(self.members) < members:
            return f"{len(self.members)} members, not {members} yet"
        return ""

    @property
    def safe(self) -> bool:
        return self.unsafe_reason == ""
