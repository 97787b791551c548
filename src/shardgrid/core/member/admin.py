"""Administrative requests: cluster state changes, lite-member promotion, shutdowns.

A client sends an ``AdminRequest`` to any member. What only the leader may propose is forwarded
to it as a ``LeaderRequest``, and the answer comes back once the change is applied from the log,
or as a clear failure (nothing changed) when it cannot be done:

- a cluster state change only when every member reports the same partition table stamp as the
  leader (seed 003, 3.1); the leader keeps checking until ``admin_timeout_ms``;
- a promotion (seed 002): fails when the member is already a data member, when there is no leader
  or an election is in progress, when the leader does not know the member, or when the leader
  changed before the promotion was committed;
- a member's graceful shutdown, answered when it has handed everything over and left;
- the cluster's shutdown: PASSIVE first, then every member stops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from shardgrid.core.identity import Replica
from shardgrid.core.member.consensus import Consensus
from shardgrid.core.member.context import Context
from shardgrid.core.member.leases import Leases
from shardgrid.core.messages import (
    ADMIN_FAILED,
    ADMIN_OK,
    AdminReply,
    AdminRequest,
    ChangeClusterState,
    LeaderReply,
    LeaderRequest,
    PromoteMember,
    RecoverLostMajority,
    ShutdownCluster,
    ShutdownMember,
)
from shardgrid.core.metadata import ClusterState
from shardgrid.core.metadata.commands import MarkLeaving, PromoteToDataMember, SetClusterState
from shardgrid.core.metadata.commands import ShutdownCluster as ShutdownClusterCommand

Respond = Callable[[bool, str], None]
AdminCommand = ChangeClusterState | PromoteMember | ShutdownMember | ShutdownCluster
NO_LEADER = "there is no leader: an election is in progress or a majority of voters is unreachable"


@dataclass(slots=True)
class Forwarded:
    """An admin request this member passed to the leader, to answer its client."""

    client_address: str
    call_id: int
    deadline_ms: int


@dataclass(slots=True)
class StateChange:
    """A state change the leader carries out once every member holds its table."""

    state: ClusterState
    respond: Respond
    deadline_ms: int
    then_shutdown: bool = False


class Admin:
    def __init__(
        self,
        ctx: Context,
        consensus: Consensus,
        leases: Leases,
        begin_leaving: Callable[[str, int], None],
    ) -> None:
        self.ctx = ctx
        self.consensus = consensus
        self.leases = leases
        self.begin_leaving = begin_leaving
        self._forwarded: dict[int, Forwarded] = {}
        self._state_changes: list[StateChange] = []
        self._counter = 0

    # --- any member: requests from clients -----------------------------------------------------------

    def on_admin_request(self, client: str, message: AdminRequest) -> None:
        command = message.command
        if isinstance(command, ShutdownMember):
            self.begin_leaving(client, message.call_id)
            return
        if isinstance(command, RecoverLostMajority):
            self._recover(client, message.call_id)
            return
        if isinstance(command, PromoteMember):
            record = self.consensus.state.record_of(self.ctx.identity)
            if record is not None and not record.lite:
                self._answer(client, message.call_id, False, "this member is already a data member")
                return
        if not isinstance(command, ChangeClusterState | PromoteMember | ShutdownCluster):
            self._answer(client, message.call_id, False, f"unknown command {type(command).__name__}")
            return
        self.forward(command, client, message.call_id)

    def _recover(self, client: str, call_id: int) -> None:
        """The operator's explicit recovery: refused while this member follows a leader."""
        raft = self.consensus.raft
        if self.consensus.leader is not None:
            self._answer(client, call_id, False, f"{self.consensus.leader} leads: there is no lost majority to recover")
            return
        others = tuple(r for r in self.consensus.state.replicas if r != self.ctx.identity)
        raft.force_new_configuration(others)
        self._answer(
            client,
            call_id,
            True,
            f"this member now leads alone from log entry {raft.log.last_index} (term {raft.term}); "
            "members that do not answer will be removed and their partitions repaired",
        )

    def forward(self, command: AdminCommand, client: str, call_id: int) -> None:
        leader = self.consensus.leader
        if leader is None:
            self._answer(client, call_id, False, NO_LEADER)
            return
        if leader == self.ctx.identity:
            self.execute(command, self.ctx.identity, lambda ok, why: self._answer(client, call_id, ok, why))
            return
        self._counter += 1
        self._forwarded[self._counter] = Forwarded(client, call_id, self.ctx.now_ms + self.ctx.config.admin_timeout_ms)
        self.ctx.send(leader, LeaderRequest(self._counter, command))

    def on_leader_reply(self, sender: Replica, message: LeaderReply) -> None:
        del sender
        forwarded = self._forwarded.pop(message.request_id, None)
        if forwarded is not None:
            self._answer(forwarded.client_address, forwarded.call_id, message.status == ADMIN_OK, message.reason)

    def _answer(self, client: str, call_id: int, ok: bool, reason: str) -> None:
        self.ctx.reply(client, AdminReply(call_id, ADMIN_OK if ok else ADMIN_FAILED, reason))

    # --- the leader ----------------------------------------------------------------------------------

    def on_leader_request(self, sender: Replica, message: LeaderRequest) -> None:
        def respond(ok: bool, reason: str) -> None:
            self.ctx.send(sender, LeaderReply(message.request_id, ADMIN_OK if ok else ADMIN_FAILED, reason))

        self.execute(message.command, sender, respond)

    def execute(self, command: AdminCommand, origin: Replica, respond: Respond) -> None:
        if not self.consensus.leader_ready:
            respond(False, "not the leader, or an election is in progress")
            return
        state = self.consensus.state
        if isinstance(command, PromoteMember):
            record = state.record_of(origin)
            if record is None:
                respond(False, f"{origin} is not a known member")
            elif not record.lite:
                respond(False, f"{origin} is already a data member")
            else:
                self._propose(PromoteToDataMember(origin), respond, "the leader changed during the promotion")
        elif isinstance(command, ShutdownMember):
            record = state.record_of(origin)
            if record is None:
                respond(False, f"{origin} is not a known member")
            elif record.leaving:
                respond(True, "")
            else:
                self._propose(MarkLeaving(origin), respond, "the leader changed before the shutdown was recorded")
        elif isinstance(command, ChangeClusterState):
            deadline = self.ctx.now_ms + self.ctx.config.admin_timeout_ms
            self._state_changes.append(StateChange(command.state, respond, deadline))
            self._try_state_changes()
        elif isinstance(command, ShutdownCluster):
            deadline = self.ctx.now_ms + self.ctx.config.admin_timeout_ms
            self._state_changes.append(StateChange(ClusterState.PASSIVE, respond, deadline, then_shutdown=True))
            self._try_state_changes()
        else:
            respond(False, f"unknown command {type(command).__name__}")

    def _propose(self, command: object, respond: Respond, lost: str) -> None:
        def done(applied: bool) -> None:
            respond(applied, "" if applied else lost)

        if not self.consensus.propose(command, done):
            respond(False, "not the leader, or an election is in progress")

    def _try_state_changes(self) -> None:
        if not self._state_changes:
            return
        if not self.consensus.leader_ready:
            self._fail_state_changes("the leader changed before the state change")
            return
        waiting: list[StateChange] = []
        for change in self._state_changes:
            why = self._tables_differ()
            if not why:
                self._commit_state_change(change)
            elif self.ctx.now_ms >= change.deadline_ms:
                change.respond(False, f"the members' partition tables did not agree in time: {why}")
            else:
                waiting.append(change)
        self._state_changes = waiting

    def _commit_state_change(self, change: StateChange) -> None:
        def after_state(applied: bool) -> None:
            if not applied:
                change.respond(False, "the leader changed before the state change was committed")
            elif change.then_shutdown:
                self._propose(ShutdownClusterCommand(), change.respond, "the leader changed during the shutdown")
            else:
                change.respond(True, "")

        if not self.consensus.propose(SetClusterState(change.state), after_state):
            change.respond(False, "not the leader, or an election is in progress")

    def _tables_differ(self) -> str:
        """'' when every member reported, since the table last changed, the leader's stamp."""
        state = self.consensus.state
        if state.table is None:
            return ""
        stamp = state.table.stamp
        fresh_ms = 2 * self.ctx.config.lease_renew_interval_ms
        for member in state.replicas:
            if member == self.ctx.identity:
                continue
            report = self.leases.reports.get(member)
            if report is None or self.ctx.now_ms - report.at_ms > fresh_ms:
                return f"{member} has not reported its table recently"
            if report.table_stamp != stamp:
                return f"{member} holds another partition table"
        return ""

    def _fail_state_changes(self, reason: str) -> None:
        changes, self._state_changes = self._state_changes, []
        for change in changes:
            change.respond(False, reason)

    def on_leadership_lost(self) -> None:
        self._fail_state_changes("the leader changed before the state change")

    def on_leader_changed(self) -> None:
        """Requests passed to the previous leader will not be answered by it: say so now."""
        forwarded, self._forwarded = self._forwarded, {}
        for request_id in sorted(forwarded):
            entry = forwarded[request_id]
            self._answer(entry.client_address, entry.call_id, False, "the leader changed before it answered; retry")

    # --- time --------------------------------------------------------------------------------------

    def tick(self) -> None:
        self._try_state_changes()
        for request_id in sorted(self._forwarded):
            forwarded = self._forwarded[request_id]
            if self.ctx.now_ms >= forwarded.deadline_ms:
                del self._forwarded[request_id]
                self._answer(forwarded.client_address, forwarded.call_id, False, "the leader did not answer in time")
