"""Leases: a member serves reads and writes only while it holds one from the current leader.

The member asks every ``lease_renew_interval_ms``, stamping the request with its own clock; a grant
lets it serve until that stamp plus ``lease_ms``. Since the stamp is older than the grant, the
member's lease always ends before the leader thinks it does. The leader grants only while its own
leadership lease holds (a majority heard from it within an election timeout, so no other leader
can exist), and it treats a member's lease as running until ``lease_ms + clock_drift_margin_ms``
after its last grant. A newly elected leader assumes every member holds a lease granted just
before its election. It reassigns an unreachable member's partitions only once that lease has
certainly ended, so a cut-off owner stops serving before anyone else starts.

The leader's own lease is its leadership lease.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardgrid.core.identity import MemberId
from shardgrid.core.limits import NEVER_MS
from shardgrid.core.member.consensus import Consensus
from shardgrid.core.member.context import Context
from shardgrid.core.messages import LeaseGrant, LeaseRequest


@dataclass(slots=True)
class MemberReport:
    """What a member last told the leader it applied."""

    applied_index: int
    table_stamp: int | None
    at_ms: int


class Leases:
    def __init__(self, ctx: Context, consensus: Consensus) -> None:
        self.ctx = ctx
        self.consensus = consensus
        self.lease_until_ms = 0  # this member's lease, on its own clock
        self._last_request_ms = NEVER_MS
        self._last_grant_ms = ctx.now_ms
        self._last_broadcast_ms = NEVER_MS
        # leader side
        self._granted_until: dict[MemberId, int] = {}
        self._leader_since_ms = 0
        self.reports: dict[MemberId, MemberReport] = {}

    # --- this member ------------------------------------------------------------------------------

    def holds(self) -> bool:
        """Whether this member may serve right now."""
        return self.holds_at(self.ctx.now_ms)

    def holds_at(self, now_ms: int) -> bool:
        if self.consensus.is_leader:
            return now_ms < self.consensus.raft.leader_lease_until()
        return now_ms < self.lease_until_ms

    def tick(self) -> None:
        config = self.ctx.config
        now = self.ctx.now_ms
        if self.consensus.is_leader or now - self._last_request_ms < config.lease_renew_interval_ms:
            return
        self._last_request_ms = now
        table = self.consensus.state.table
        request = LeaseRequest(now, self.consensus.applied_index, table.stamp if table is not None else None)
        leader = self.consensus.leader
        starved = now - self._last_grant_ms > config.failure_timeout_ms
        if starved and now - self._last_broadcast_ms > config.failure_timeout_ms:
            # No grant for a long while: the leader we know may be gone, or we were removed. Ask
            # everyone we know: the leader grants, and a member that applied our removal says so.
            self._last_broadcast_ms = now
            for member in self.consensus.state.member_ids:
                if member != self.ctx.identity:
                    self.ctx.send(member, request)
        elif leader is not None:
            self.ctx.send(leader, request)

    def on_grant(self, sender: MemberId, message: LeaseGrant) -> None:
        if sender != self.consensus.leader or message.term != self.consensus.term:
            return  # from a leader we no longer follow
        if message.request_sent_ms > self.ctx.now_ms:
            return  # not a stamp of ours
        self._last_grant_ms = self.ctx.now_ms
        self.lease_until_ms = max(self.lease_until_ms, message.request_sent_ms + message.lease_ms)

    # --- the leader -------------------------------------------------------------------------------

    def on_became_leader(self) -> None:
        self._granted_until = {}
        self._leader_since_ms = self.ctx.now_ms
        self.reports = {}

    def on_request(self, sender: MemberId, message: LeaseRequest) -> None:
        self.reports[sender] = MemberReport(message.applied_index, message.table_stamp, self.ctx.now_ms)
        if not self.consensus.is_leader or self.consensus.raft.leader_lease_until() <= self.ctx.now_ms:
            return  # not certainly the leader right now: no grant (the member asks again)
        lease_ms = self.ctx.config.lease_ms
        self._granted_until[sender] = self.ctx.now_ms + lease_ms
        self.ctx.send(sender, LeaseGrant(message.sent_ms, lease_ms, self.consensus.term))

    def certainly_expired(self, member: MemberId) -> bool:
        """Whether ``member``'s lease has ended for sure, whoever granted it (leader only)."""
        config = self.ctx.config
        granted = self._granted_until.get(member, self._leader_since_ms + config.lease_ms)
        return self.ctx.now_ms > granted + config.clock_drift_margin_ms

    def forget(self, member: MemberId) -> None:
        self._granted_until.pop(member, None)
        self.reports.pop(member, None)
