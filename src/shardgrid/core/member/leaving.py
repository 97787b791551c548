"""How a member leaves and stops: the one owner of a member's way out.

A leave (Hazelcast's graceful shutdown) is asked by a client (``ShutdownMember``) or by the
member's own process (``StopSignalled``: SIGTERM). The member asks its leader to record it as
leaving; once the log does, the leader plans without it, its replicas move to others by ordinary
migrations, and the leader removes it once it holds nothing: then it stops. Besides a leave, the
log can end the cluster for everyone (a cluster shutdown, or every data member leaving at once:
nobody is left to take the replicas), and a leader that applies such an entry stays until its
followers hold it, or they might never learn that it committed.

Every way a member stops goes through ``stop``, which emits a ``Stop`` effect with the reason and
the process's exit code: the runtime carries it out and decides nothing. The leader's side of a
leave (whether to record it, and proposing it) is here too; which members vote while others leave,
and removing a leaver once it holds nothing, stay with ``MembershipLeader``, and the log's own rules
for a leave (``MetadataState.leave_problem``, ``parting``) with the metadata it guards.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from shardgrid.core.effects import Stop
from shardgrid.core.errors import invariant
from shardgrid.core.events import LeaveRefused, MemberStopped
from shardgrid.core.identity import MemberId
from shardgrid.core.inputs import StopSignalled
from shardgrid.core.limits import NEVER_MS
from shardgrid.core.member.admin import LEAVE_LOST, NOT_LEADER, Respond
from shardgrid.core.member.consensus import Consensus
from shardgrid.core.member.context import Context
from shardgrid.core.member.lifecycle import Lifecycle
from shardgrid.core.messages import ADMIN_FAILED, ADMIN_OK, ADMIN_UNAVAILABLE, AdminReply, AdminResult, ShutdownMember
from shardgrid.core.metadata.commands import MarkLeaving

# The process's exit code for each way a member stops.
EXIT_STOPPED = 0  # it left, the cluster shut down, or a signal stopped it before it joined one
EXIT_ABANDONED = 1  # a signal stopped it before it left (a second one, or no leader to take the leave): a crash

NOT_IN_A_CLUSTER = "this member is not in a cluster"
LEFT = "left the cluster after handing its replicas over"
LITE_LEFT = "left the cluster (a lite member holds no replicas to hand over)"
SIGNAL_BEFORE_LEAVING = "stopped by a signal before leaving the cluster"
STOPPED_BEFORE_LEAVING = "stopped before leaving the cluster"  # how a leave it asked and did not finish is answered
NO_LEADER_TO_LEAVE = (
    f"{SIGNAL_BEFORE_LEAVING}: graceful_shutdown_timeout_ms passed and no leader has answered for "
    "failure_timeout_ms (no majority of voters is left to take its leave); what only it held is lost"
)


class LeaveStage(enum.Enum):
    """Where this member's way out stands; ``TRANSITIONS`` lists every step it may take."""

    STAYING = "staying"  # no leave asked
    ASKED = "asked"  # a leave was asked; the leader has not recorded it (asked again every retry_interval_ms)
    HANDING_OVER = "handing-over"  # the log records it leaving: its replicas move, then it is removed
    AWAITING_FOLLOWERS = "awaiting-followers"  # a leader whose log ended the cluster, until followers hold that
    STOPPED = "stopped"


TRANSITIONS: dict[LeaveStage, frozenset[LeaveStage]] = {
    LeaveStage.STAYING: frozenset(
        {LeaveStage.ASKED, LeaveStage.HANDING_OVER, LeaveStage.AWAITING_FOLLOWERS, LeaveStage.STOPPED}
    ),
    # Back to STAYING: refused for good (the last data member), or still unrecorded after
    # graceful_shutdown_timeout_ms. Any stage but STOPPED may stop: a second signal, or a signal's
    # leave that no leader can take (``_signal_tick``).
    LeaveStage.ASKED: frozenset(
        {LeaveStage.STAYING, LeaveStage.HANDING_OVER, LeaveStage.AWAITING_FOLLOWERS, LeaveStage.STOPPED}
    ),
    LeaveStage.HANDING_OVER: frozenset({LeaveStage.AWAITING_FOLLOWERS, LeaveStage.STOPPED}),
    LeaveStage.AWAITING_FOLLOWERS: frozenset({LeaveStage.STOPPED}),
    LeaveStage.STOPPED: frozenset(),
}


class Leaving:
    def __init__(
        self,
        ctx: Context,
        consensus: Consensus,
        forward: Callable[[ShutdownMember, Respond], None],
        lifecycle: Callable[[], Lifecycle],
        mark_leaving: Callable[[], None],
        halt: Callable[[bool], None],
    ) -> None:
        """``forward`` asks the leader (``Admin.forward``); the member owns its lifecycle:
        ``lifecycle`` reads it, ``mark_leaving`` sets it to LEAVING, and ``halt`` to STOPPED,
        dropping every replica. A member removed while away joins again with new concerns, but its
        process is the same one (signals counted, a signal's leave even_if_last): ``attach``
        gives this concern the new consensus."""
        self.ctx = ctx
        self.consensus = consensus
        self._forward = forward
        self._lifecycle = lifecycle
        self._mark_leaving = mark_leaving
        self._halt = halt
        self.stage = LeaveStage.STAYING
        self.stop_reason = ""
        self._answers: list[tuple[str, int]] = []  # (client, call id) of every leave asked and not answered
        self._asked_since_ms = 0
        self._even_if_last = False  # a signal asked: recorded even when no other data member stays
        self._signals = 0
        self._signal_answers: list[tuple[str, int]] = []  # the answers of the leaves signals asked
        self._signalled_since_ms: int | None = None  # the first signal, once joined: the process is to stop
        self._last_request_ms = NEVER_MS
        self._final_index = 0  # AWAITING_FOLLOWERS: the log entry that ended the cluster
        self._final_since_ms = 0
        self._final_reason = ""
        self._everyone_since_ms: int | None = None  # when the last follower held that entry

    def attach(self, consensus: Consensus) -> None:
        self.consensus = consensus

    def _set_stage(self, new: LeaveStage) -> None:
        invariant(new in TRANSITIONS[self.stage], lambda: f"leave stage {self.stage.value} -> {new.value}")
        self.stage = new

    @property
    def asked(self) -> bool:
        """Leaving by the log, or asked to and not yet told it is: a lite member is removed at
        once, and news of its removal can come before its own leave entry does (a lite member
        signalled to stop must not join again under a new identity)."""
        return self._lifecycle() is Lifecycle.LEAVING or bool(self._answers)

    # --- asked to leave ----------------------------------------------------------------------------

    def on_signal(self, signal: StopSignalled, joined: bool) -> None:
        """SIGTERM: the first leaves as ``shardgrid shutdown`` asks, but is recorded even when no
        other data member stays (a process told to stop stops); a second stops at once, which to
        the cluster is a crash. Before it has joined a cluster, a member has nothing to hand over."""
        self._signals += 1
        if self._signals > 1:
            self.stop(SIGNAL_BEFORE_LEAVING, EXIT_ABANDONED if joined else EXIT_STOPPED)
        elif not joined:
            refusal = AdminReply(call_id=signal.call_id, result=ADMIN_FAILED, reason=NOT_IN_A_CLUSTER)
            self.ctx.reply(signal.reply_to, refusal)
            self.stop("stopped by a signal before it joined a cluster", EXIT_STOPPED)
        else:
            self._signalled_since_ms = self.ctx.now_ms
            self._signal_answers.append((signal.reply_to, signal.call_id))
            self.begin(signal.reply_to, signal.call_id, even_if_last=True)

    def begin(self, client: str, call_id: int, even_if_last: bool = False) -> None:
        """Ask the leader to record this member leaving; the answer waits until it has left. It
        stays ACTIVE until the log says it is leaving: a refusal changes nothing."""
        if not self._answers:
            self._asked_since_ms = self.ctx.now_ms
        if self.stage is LeaveStage.STAYING:
            self._set_stage(LeaveStage.ASKED)
        self._answers.append((client, call_id))
        self._even_if_last = self._even_if_last or even_if_last
        if self._lifecycle() is Lifecycle.ACTIVE:
            self._ask_leader()

    def _ask_leader(self) -> None:
        self._last_request_ms = self.ctx.now_ms
        self._forward(ShutdownMember(self._even_if_last), self._on_leader_answer)

    def _on_leader_answer(self, result: AdminResult, reason: str) -> None:
        if result == ADMIN_FAILED:  # refused for good (the last data member): it stays
            self._refused(reason)
        # ok: the log now marks it leaving; unavailable: it asks again on a later tick

    def _refused(self, reason: str) -> None:
        """The leave will not happen: answer everyone who asked, and back to STAYING. A leave a
        signal asked for stops the process all the same when nobody else stays to take the
        replicas (a signal's leave is recorded even then, so this is one that ran out of time);
        otherwise (rebalancing paused, say) stopping would be a crash to the cluster, so the
        member goes on serving and says so."""
        answers, self._answers = self._answers, []
        for client, call_id in answers:
            self.ctx.reply(client, AdminReply(call_id=call_id, result=ADMIN_FAILED, reason=reason))
        signalled = bool(self._signal_answers)
        self._signal_answers = []
        if self.stage is LeaveStage.ASKED:
            self._set_stage(LeaveStage.STAYING)
        if signalled:
            if not self.consensus.state.others_stay(self.ctx.identity):
                self.stop(f"stopped without handing replicas over: {reason}", EXIT_STOPPED)
            else:
                self.ctx.emit(LeaveRefused(member=self.ctx.identity, reason=reason))

    # --- what the log says -----------------------------------------------------------------------

    def on_marked_leaving(self) -> None:
        """The applied log records this member leaving (asked here, or in a state it loaded)."""
        if self._lifecycle() is not Lifecycle.ACTIVE:
            return
        self._mark_leaving()
        if self.stage in (LeaveStage.STAYING, LeaveStage.ASKED):
            self._set_stage(LeaveStage.HANDING_OVER)

    def on_removed(self) -> bool:
        """This member was removed from the cluster: when it asked to leave, it has left (True)."""
        if self.asked:
            self.stop(LITE_LEFT if self.ctx.lite else LEFT, EXIT_STOPPED, left=True)
            return True
        return False

    def on_cluster_shut_down(self, index: int) -> None:
        self._stop_when_followers_know(index, "the cluster shut down")

    def after_applied(self, index: int) -> None:
        """Every data member asked to leave (``MetadataState.parting``): nobody is left to take
        the replicas (Hazelcast lets all go once every data member asked to), so a leaving member
        stops, and so does a lite member, which would otherwise run on without a leader and answer
        processes looking for a cluster that one exists. Waiting would only keep each until
        graceful_shutdown_timeout_ms; what they hold is dropped, as a cluster shutdown drops it."""
        state = self.consensus.state
        if not state.parting or self.stage is LeaveStage.STOPPED:
            return
        record = state.record_of(self.ctx.identity)
        lifecycle = self._lifecycle()
        if lifecycle is Lifecycle.LEAVING:
            self._stop_when_followers_know(index, "every data member is leaving: nobody is left to take its replicas")
        elif record is not None and record.lite and lifecycle is Lifecycle.ACTIVE:
            self.stop("every data member left the cluster: a lite member has nothing to serve", EXIT_STOPPED)

    def _stop_when_followers_know(self, index: int, reason: str) -> None:
        """Stop for what the log entry at ``index`` says; a leader first stays until its followers
        hold it (``_final_tick``), or they might never learn that it committed."""
        if not self.consensus.is_leader:
            self.stop(reason, EXIT_STOPPED)
        elif self.stage is not LeaveStage.AWAITING_FOLLOWERS:
            self._set_stage(LeaveStage.AWAITING_FOLLOWERS)
            self._final_index = index
            self._final_since_ms = self.ctx.now_ms
            self._final_reason = reason

    # --- the leader: a member asks to leave ------------------------------------------------------

    def execute(self, origin: MemberId, command: ShutdownMember, respond: Respond) -> None:
        """The leader decides whether to record ``origin`` leaving (the admin checked the request
        and that this member leads)."""
        state = self.consensus.state
        record = state.record_of(origin)
        if record is None:
            respond(ADMIN_FAILED, f"{origin} is not a known member")
        elif record.leaving:
            respond(ADMIN_OK, "")
        elif not record.lite and state.table is not None and not state.others_stay(origin) and command.even_if_last:
            # It stops anyway: recorded as leaving, it tells the others leaving with it that nobody
            # stays to take their replicas either.
            self._propose(MarkLeaving(origin, even_if_last=True), respond)
        elif not record.lite and (problem := state.leave_problem(origin)):
            # A leave in a state that forbids migration would wait for migrations until
            # graceful_shutdown_timeout_ms: refused at once.
            respond(ADMIN_FAILED, problem)
        else:
            self._propose(MarkLeaving(origin), respond)

    def _propose(self, command: MarkLeaving, respond: Respond) -> None:
        """The leave is answered ok only once the log records it. One refused when applied (a
        pause, or the others' leaves, came first in the log) is answered 'ask again': the member
        does, and ``execute`` decides on the state as it is then (a signalled member that became
        the last one then leaves even_if_last; a pause is refused for good)."""

        def done(applied: bool) -> None:
            record = self.consensus.state.record_of(command.member)
            if not applied:
                respond(ADMIN_UNAVAILABLE, LEAVE_LOST)
            elif record is None:  # removed (a crash suspected) first: it learns so and stops
                respond(ADMIN_UNAVAILABLE, "the member was removed before its leave was recorded")
            elif record.leaving:
                respond(ADMIN_OK, "")
            else:
                respond(ADMIN_UNAVAILABLE, "another entry came first in the log and the leave was refused; ask again")

        if not self.consensus.propose(command, done):
            respond(ADMIN_UNAVAILABLE, NOT_LEADER)

    # --- time --------------------------------------------------------------------------------------

    def tick(self) -> None:
        if self._answers:
            self._asked_tick()
        if self.stage is LeaveStage.AWAITING_FOLLOWERS:
            self._final_tick()
        if self._signalled_since_ms is not None and self.stage is not LeaveStage.STOPPED:
            self._signal_tick()

    def _no_leader_can_take_it(self) -> bool:
        """No leader has been heard for the failure timeout (this member leads none either): no
        majority of voters is left to record a leave or to move a replica, so a leave cannot go on
        (found by an outside tester: a signalled member whose staying members were killed stayed
        leaving for good). A leader elected since resets it: an election is not a lost majority."""
        consensus = self.consensus
        return not consensus.is_leader and consensus.raft.leader_silent_ms() >= self.ctx.config.failure_timeout_ms

    def _signal_tick(self) -> None:
        """A signal is the operator's wish that the process stop. While a leader can take the
        member's leave it waits for it, past graceful_shutdown_timeout_ms too (a leave under way
        may still finish and lose nothing); once that has passed with no leader to take it, the
        member stops, as a crash would to the cluster."""
        since_ms = self._signalled_since_ms
        if since_ms is None or self.ctx.now_ms - since_ms <= self.ctx.config.graceful_shutdown_timeout_ms:
            return
        if self._no_leader_can_take_it():
            self.stop(NO_LEADER_TO_LEAVE, EXIT_ABANDONED)

    def _asked_tick(self) -> None:
        config = self.ctx.config
        record = self.consensus.state.record_of(self.ctx.identity)
        due = self.ctx.now_ms - self._last_request_ms >= config.retry_interval_ms
        if self._lifecycle() is Lifecycle.ACTIVE and record is not None and not record.leaving and due:
            self._ask_leader()
        waited_ms = self.ctx.now_ms - self._asked_since_ms
        if record is not None and record.lite and waited_ms > config.failure_timeout_ms:
            # It holds nothing to hand over: waiting for a leader to record its leave (there may be
            # none left: every data member gone) only kept it running for good on a signal.
            self.stop("a lite member holds no data: it stops without its leave recorded", EXIT_STOPPED)
            return
        if waited_ms > config.graceful_shutdown_timeout_ms:
            if self._signal_answers and self._no_leader_can_take_it():
                self.stop(NO_LEADER_TO_LEAVE, EXIT_ABANDONED)  # what _signal_tick would do a tick later
                return
            self._refused("still handing replicas over after graceful_shutdown_timeout_ms; nothing was lost")

    def _final_tick(self) -> None:
        raft = self.consensus.raft
        others = [r for r in self.consensus.state.member_ids if r != self.ctx.identity]
        everyone_has_it = all(raft.match_index(r) >= self._final_index for r in others)
        now = self.ctx.now_ms
        heartbeats_ms = 2 * self.ctx.config.raft_heartbeat_interval_ms
        if everyone_has_it and self._everyone_since_ms is None:
            self._everyone_since_ms = now
        # A follower stops when it learns the entry committed, which the leader's next append
        # tells it: the leader stays two heartbeats past the moment the last of them held the
        # entry (one that matched late never heard it was committed, and ran on alone). One it
        # cannot reach, it gives up on after the failure timeout.
        everyone_knows = self._everyone_since_ms is not None and now - self._everyone_since_ms >= heartbeats_ms
        if everyone_knows or now - self._final_since_ms > self.ctx.config.failure_timeout_ms + heartbeats_ms:
            self.stop(self._final_reason, EXIT_STOPPED)

    # --- stopping ----------------------------------------------------------------------------------

    def stop(self, reason: str, exit_code: int, *, left: bool = False) -> None:
        """The one way a member stops: it drops what it holds (a persistent member that has not
        ``left`` keeps it on its disk: started again there, it comes back with it, whether the
        cluster shut down, every member was signalled, or a second signal stopped it as a crash
        would), says so to listeners and to those who asked it to leave, and tells its process
        how to exit. A leave asked and not answered
        yet is answered ok only when the member ``left`` (removed once it held nothing); stopped
        any other way (a second signal, the cluster shut down, nobody left to take its replicas),
        it failed: ``shardgrid shutdown HOST`` must not report a leave that handed nothing over
        (found by an outside tester: it printed 'left the cluster' and exited 0 while the member
        was stopped by a second signal and exited 1)."""
        if self.stage is LeaveStage.STOPPED:
            return
        self._set_stage(LeaveStage.STOPPED)
        self.stop_reason = reason
        self._halt(not left)  # a persistent member that did not hand its replicas over keeps them
        self.ctx.emit(MemberStopped(self.ctx.identity, reason))
        answers, self._answers = self._answers, []
        result, answer = ADMIN_OK, reason
        if not left:
            result = ADMIN_FAILED
            answer = reason if reason.startswith(SIGNAL_BEFORE_LEAVING) else f"{STOPPED_BEFORE_LEAVING}: {reason}"
        for client, call_id in answers:
            self.ctx.reply(client, AdminReply(call_id=call_id, result=result, reason=answer))
        self.ctx.out.append(Stop(reason=reason, exit_code=exit_code))
