"""Administrative requests: cluster state changes, lite-member promotion, shutdowns, recovery.

A client sends an ``AdminRequest`` to any member. What only the leader may propose is forwarded
to it as a ``LeaderRequest``, and the answer comes back once the change is applied from the log.
Every answer is ``ok``; ``failed`` (refused, nothing changed, asking again will not help); or
``unavailable`` (no leader right now, an election, the leader changed before the change was
committed: ask again):

- a cluster state change only when every member reports the same partition table stamp as the
  leader (seed 003, 3.1); the leader keeps checking until ``admin_timeout_ms``;
- a promotion (seed 002): fails when the member is already a data member or the leader does not
  know it, and is unavailable when there is no leader, an election is in progress, or the leader
  changed before the promotion was committed;
- a member's graceful shutdown, answered when it has handed everything over and left; the last data
  member is refused (nothing could take its replicas: shut the cluster down instead);
- the cluster's shutdown: PASSIVE first; once every member confirmed it applied PASSIVE, every
  member stops (a member that cannot be reached keeps the cluster PASSIVE and the request fails);
- the operator's recovery from a lost majority of voters (see ``RaftNode.force_new_configuration``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from shardgrid.core.identity import MemberId
from shardgrid.core.member.consensus import Consensus
from shardgrid.core.member.context import Context
from shardgrid.core.member.leases import Leases
from shardgrid.core.messages import (
    ADMIN_FAILED,
    ADMIN_OK,
    ADMIN_UNAVAILABLE,
    AdminCommand,
    AdminReply,
    AdminRequest,
    AdminResult,
    ChangeClusterState,
    LeaderReply,
    LeaderRequest,
    PromoteMember,
    RecoverLostMajority,
    RemoveMember,
    RevivePartitions,
    ShutdownCluster,
    ShutdownMember,
)
from shardgrid.core.metadata import ClusterState
from shardgrid.core.metadata.commands import PromoteToDataMember, ReviveUnavailable, SetClusterState, StopAllMembers

Respond = Callable[[str, str], None]  # (result, reason)
NO_LEADER = "there is no leader: an election is in progress or a majority of voters is unreachable"
LEAVE_LOST = "the leader changed before the shutdown was recorded"
# A leave asked while the cluster shuts down: the state is PASSIVE, but not for a pause to end.
CLUSTER_SHUTTING_DOWN = "the cluster is shutting down: this member stops with the others, nothing to do"
NOT_LEADER = "not the leader, or an election is in progress"
CLIENT_EVEN_IF_LAST = (
    "even_if_last is the member process's own stop signal (SIGTERM), not a client's: ask without it, "
    "or stop the whole cluster with shutdown --cluster"
)


def command_problem(command: object) -> str:
    """Why an administrative command cannot be taken ('' when it can): checked whole at the
    boundary, so that nothing malformed ever reaches the log."""
    if not isinstance(
        command,
        ChangeClusterState
        | PromoteMember
        | ShutdownMember
        | ShutdownCluster
        | RemoveMember
        | RevivePartitions
        | RecoverLostMajority,
    ):
        return f"unknown command {type(command).__name__}"
    if isinstance(command, ChangeClusterState) and not isinstance(command.state, ClusterState):
        choices = ", ".join(s.value for s in ClusterState)
        return f"unknown cluster state {command.state!r}; choose from {choices}"
    return ""


@dataclass(slots=True)
class Forwarded:
    """A request this member passed to the leader, and whom to tell its answer."""

    respond: Respond
    deadline_ms: int
    shutdown: bool = False  # a cluster shutdown: answered by this member if it learns it is done first


@dataclass(slots=True, kw_only=True)
class StateChange:
    """A state change the leader carries out once every member holds its table."""

    state: ClusterState
    respond: Respond
    deadline_ms: int
    then_shutdown: bool = False
    confirm_index: int = 0  # a shutdown waits until every member applied the PASSIVE entry


class Admin:
    def __init__(
        self,
        ctx: Context,
        consensus: Consensus,
        leases: Leases,
        begin_leaving: Callable[[str, int], None],
        execute_leave: Callable[[MemberId, ShutdownMember, Respond], None],
        remove_member: Callable[[str, Respond], None],
        give_up: Callable[[tuple[MemberId, ...]], None],
    ) -> None:
        """A member's leave is ``Leaving``'s: ``begin_leaving`` starts this member's,
        ``execute_leave`` decides, as leader, whether to record another's."""
        self.ctx = ctx
        self.consensus = consensus
        self.leases = leases
        self.begin_leaving = begin_leaving
        self.execute_leave = execute_leave
        self.remove_member = remove_member
        self.give_up = give_up
        self._forwarded: dict[int, Forwarded] = {}
        self._state_changes: list[StateChange] = []
        self._counter = 0

    # --- any member: requests from clients -----------------------------------------------------------

    def on_admin_request(self, client: str, message: AdminRequest) -> None:
        command = message.command

        def respond(result: AdminResult, reason: str) -> None:
            self.ctx.reply(client, AdminReply(message.call_id, result, reason))

        problem = command_problem(command)
        if problem:
            respond(ADMIN_FAILED, problem)
        elif isinstance(command, ShutdownMember) and command.even_if_last:
            # Found by review: any client could get past the last data member's refusal with it.
            respond(ADMIN_FAILED, CLIENT_EVEN_IF_LAST)
        elif isinstance(command, ShutdownMember):
            self.begin_leaving(client, message.call_id)
        elif isinstance(command, RecoverLostMajority):
            self._recover(respond)
        elif isinstance(command, PromoteMember) and self._already_data():
            respond(ADMIN_FAILED, "this member is already a data member")
        else:
            self.forward(command, respond)

    def _already_data(self) -> bool:
        record = self.consensus.state.record_of(self.ctx.identity)
        return record is not None and not record.lite

    def forward(self, command: AdminCommand | RecoverLostMajority, respond: Respond) -> None:
        """Have the leader carry ``command`` out for this member."""
        leader = self.consensus.leader
        if leader is None:
            respond(ADMIN_UNAVAILABLE, NO_LEADER)
        elif leader == self.ctx.identity:
            self.execute(command, self.ctx.identity, respond)
        else:
            self._counter += 1
            deadline_ms = self.ctx.now_ms + self.ctx.config.admin_timeout_ms
            shutdown = isinstance(command, ShutdownCluster)
            self._forwarded[self._counter] = Forwarded(respond, deadline_ms, shutdown)
            self.ctx.send(leader, LeaderRequest(self._counter, command))

    def on_cluster_shut_down(self) -> None:
        """The cluster shut down (this member applied its last entry and is about to stop): the
        shutdowns it passed to the leader are answered now, by it, before it stops; the leader's
        answer would come back to a member already gone (found by an outside tester: a client
        that lost its member could not tell a shutdown done from every member killed)."""
        for request_id in sorted(self._forwarded):
            forwarded = self._forwarded[request_id]
            if forwarded.shutdown:
                del self._forwarded[request_id]
                forwarded.respond(ADMIN_OK, "the cluster shut down")

    def on_leader_reply(self, sender: MemberId, message: LeaderReply) -> None:
        del sender
        forwarded = self._forwarded.pop(message.request_id, None)
        if forwarded is not None:
            result = message.result if message.result in (ADMIN_OK, ADMIN_FAILED) else ADMIN_UNAVAILABLE
            forwarded.respond(result, message.reason)

    def _recover(self, respond: Respond) -> None:
        """The operator's explicit recovery: refused while this member has heard from a leader
        lately (it may only be cut off for a moment, and the majority alive)."""
        raft = self.consensus.raft
        if self.consensus.leader is not None:
            respond(ADMIN_FAILED, f"{self.consensus.leader} leads: there is no lost majority to recover")
            return
        quiet_ms = 2 * self.ctx.config.failure_timeout_ms
        if raft.leader_silent_ms() < quiet_ms:
            respond(
                ADMIN_FAILED,
                f"a leader was heard {raft.leader_silent_ms()} ms ago: recover only when no leader has been heard "
                f"for {quiet_ms} ms and the lost voters will never come back",
            )
            return
        others = tuple(r for r in self.consensus.state.member_ids if r != self.ctx.identity)
        raft.force_new_configuration(others)
        self.give_up(others)
        respond(
            ADMIN_OK,
            f"this member now leads alone from log entry {raft.log.last_index} (term {raft.term}); "
            "members that do not answer will be removed and their partitions repaired",
        )

    # --- the leader ----------------------------------------------------------------------------------

    def on_leader_request(self, sender: MemberId, message: LeaderRequest) -> None:
        def respond(result: AdminResult, reason: str) -> None:
            self.ctx.send(sender, LeaderReply(message.request_id, result, reason))

        self.execute(message.command, sender, respond)

    def execute(self, command: AdminCommand | RecoverLostMajority, origin: MemberId, respond: Respond) -> None:
        problem = command_problem(command)
        if problem:
            respond(ADMIN_FAILED, problem)
            return
        if not self.consensus.leader_ready:
            respond(ADMIN_UNAVAILABLE, NOT_LEADER)
            return
        state = self.consensus.state
        deadline = self.ctx.now_ms + self.ctx.config.admin_timeout_ms
        if isinstance(command, ChangeClusterState):
            problem = state.state_change_problem(command.state)
            if problem:
                respond(ADMIN_FAILED, problem)
                return
            self._state_changes.append(StateChange(state=command.state, respond=respond, deadline_ms=deadline))
            self._try_state_changes()
            return
        if isinstance(command, ShutdownCluster):
            self._state_changes.append(
                StateChange(state=ClusterState.PASSIVE, respond=respond, deadline_ms=deadline, then_shutdown=True)
            )
            self._try_state_changes()
            return
        if isinstance(command, RecoverLostMajority):
            respond(ADMIN_FAILED, "a recovery is asked of a surviving member directly, not of a leader")
            return
        if isinstance(command, ShutdownMember):
            if state.shut_down or any(change.then_shutdown for change in self._state_changes):
                # Not "set the state to active (rebalance resume) first", the refusal PASSIVE gets
                # otherwise, which would undo the shutdown (found by an outside tester: a member
                # given SIGTERM during shutdown --cluster was told so).
                respond(ADMIN_FAILED, CLUSTER_SHUTTING_DOWN)
                return
            self.execute_leave(origin, command, respond)
            return
        if isinstance(command, RemoveMember):
            self.remove_member(command.address, respond)
            return
        if isinstance(command, RevivePartitions):
            self._revive(respond)
            return
        record = state.record_of(origin)
        if record is None:
            respond(ADMIN_FAILED, f"{origin} is not a known member")
        elif not isinstance(command, PromoteMember):
            respond(ADMIN_FAILED, f"unknown command {type(command).__name__}")
        elif not record.lite:
            respond(ADMIN_FAILED, f"{origin} is already a data member")
        elif record.leaving:
            respond(ADMIN_FAILED, f"{origin} is leaving: a leaving member is not promoted")
        else:
            self._propose(
                PromoteToDataMember(origin),
                respond,
                "the leader changed during the promotion",
                refused=lambda: self._not_promoted(origin),
            )

    def _revive(self, respond: Respond) -> None:
        unavailable = self.consensus.state.unavailable_partitions()
        if not unavailable:
            respond(ADMIN_FAILED, "no partition is unavailable")
            return

        def done(applied: bool) -> None:
            if not applied:
                respond(ADMIN_UNAVAILABLE, "the leader changed before the partitions were revived")
                return
            shown = ", ".join(map(str, unavailable[:20])) + (" ..." if len(unavailable) > 20 else "")
            respond(ADMIN_OK, f"{len(unavailable)} partitions reported lost and given new, empty replicas: {shown}")

        if not self.consensus.propose(ReviveUnavailable(), done):
            respond(ADMIN_UNAVAILABLE, NOT_LEADER)

    def _propose(self, command: object, respond: Respond, lost: str, refused: Callable[[], str] | None = None) -> None:
        """``refused``: why the log did not take the command when it applied it ('' when it did)."""

        def done(applied: bool) -> None:
            reason = refused() if applied and refused is not None else ""
            if not applied:
                respond(ADMIN_UNAVAILABLE, lost)
            elif reason:
                respond(ADMIN_FAILED, reason)
            else:
                respond(ADMIN_OK, "")

        if not self.consensus.propose(command, done):
            respond(ADMIN_UNAVAILABLE, NOT_LEADER)

    def _not_promoted(self, member: MemberId) -> str:
        """Why an applied promotion left ``member`` lite: its leave (or its removal) came first."""
        record = self.consensus.state.record_of(member)
        return f"{member} was not promoted: it is leaving, or gone" if record is None or record.lite else ""

    def _try_state_changes(self) -> None:
        if not self._state_changes:
            return
        if not self.consensus.leader_ready:
            self._fail_state_changes("the leader changed before the state change")
            return
        waiting: list[StateChange] = []
        for change in self._state_changes:
            problem = "" if change.then_shutdown else self.consensus.state.state_change_problem(change.state)
            why = self._unconfirmed(change.confirm_index) if change.confirm_index else self._tables_differ()
            if problem:
                change.respond(ADMIN_FAILED, problem)  # a leave recorded while the tables were compared
            elif not why:
                if change.confirm_index:
                    self._propose(StopAllMembers(), change.respond, "the leader changed during the shutdown")
                else:
                    self._commit_state_change(change)
            elif self.ctx.now_ms >= change.deadline_ms:
                if change.confirm_index:
                    change.respond(ADMIN_FAILED, f"the cluster stays PASSIVE: {why}")
                else:
                    change.respond(ADMIN_FAILED, f"the members' partition tables did not agree in time: {why}")
            else:
                waiting.append(change)
        self._state_changes = waiting

    def _commit_state_change(self, change: StateChange) -> None:
        def after_state(applied: bool) -> None:
            if not applied:
                change.respond(ADMIN_UNAVAILABLE, "the leader changed before the state change was committed")
            elif self.consensus.state.cluster_state is not change.state:
                # Refused when applied: a leave that came first in the log forbids it.
                problem = self.consensus.state.state_change_problem(change.state)
                now = self.consensus.state.cluster_state.value
                change.respond(ADMIN_FAILED, problem or f"another state change was applied with it: the state is {now}")
            elif change.then_shutdown:
                # Every member must hold PASSIVE before anyone stops: one that cannot be reached
                # would otherwise run on, alone, in a cluster that no longer exists.
                change.confirm_index = self.consensus.applied_index
                change.deadline_ms = self.ctx.now_ms + self.ctx.config.admin_timeout_ms
                self._state_changes.append(change)
            else:
                change.respond(ADMIN_OK, "")

        command = SetClusterState(change.state, for_shutdown=change.then_shutdown)
        if not self.consensus.propose(command, after_state):
            change.respond(ADMIN_UNAVAILABLE, NOT_LEADER)

    def _tables_differ(self) -> str:
        """'' when every member reported, lately, the leader's partition table stamp."""
        state = self.consensus.state
        if state.table is None:
            return ""
        stamp = state.table.stamp
        for member in state.member_ids:
            report = self._fresh_report(member)
            if isinstance(report, str):
                return report
            if report is not None and report.table_stamp != stamp:
                return f"{member} holds another partition table"
        return ""

    def _unconfirmed(self, index: int) -> str:
        """'' when every member reported having applied the log up to ``index``."""
        for member in self.consensus.state.member_ids:
            report = self._fresh_report(member)
            if isinstance(report, str):
                return report
            if report is not None and report.applied_index < index:
                return f"{member} has not confirmed it applied the PASSIVE state"
        return ""

    def _fresh_report(self, member: MemberId) -> object:
        """The member's recent report (None for the leader itself), or why there is none."""
        if member == self.ctx.identity:
            return None
        report = self.leases.reports.get(member)
        if report is None or self.ctx.now_ms - report.at_ms > 2 * self.ctx.config.lease_renew_interval_ms:
            return f"{member} has not reported its table recently"
        return report

    def _fail_state_changes(self, reason: str) -> None:
        changes, self._state_changes = self._state_changes, []
        for change in changes:
            change.respond(ADMIN_UNAVAILABLE, reason)

    def on_leadership_lost(self) -> None:
        self._fail_state_changes("the leader changed before the state change")

    def on_leader_changed(self) -> None:
        """Requests passed to the previous leader will not be answered by it: say so now."""
        forwarded, self._forwarded = self._forwarded, {}
        for request_id in sorted(forwarded):
            forwarded[request_id].respond(ADMIN_UNAVAILABLE, "the leader changed before it answered; ask again")

    # --- time --------------------------------------------------------------------------------------

    def tick(self) -> None:
        self._try_state_changes()
        for request_id in sorted(self._forwarded):
            forwarded = self._forwarded[request_id]
            if self.ctx.now_ms >= forwarded.deadline_ms:
                del self._forwarded[request_id]
                forwarded.respond(ADMIN_UNAVAILABLE, "the leader did not answer in time")
