"""A member's way out has one owner, ``Leaving``: signals, a refused leave and every stop end in
one ``Stop`` effect whose reason and exit code the process carries out without deciding."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from shardgrid.core import messages as m
from shardgrid.core.effects import Stop
from shardgrid.core.errors import InvariantViolation
from shardgrid.core.events import LeaveRefused
from shardgrid.core.inputs import Receive, Start, StopSignalled, TimerFired
from shardgrid.core.member import Member
from shardgrid.core.member.leaving import EXIT_ABANDONED, EXIT_STOPPED, NO_LEADER_TO_LEAVE, TRANSITIONS, LeaveStage
from shardgrid.core.member.lifecycle import Lifecycle
from shardgrid.core.metadata import MemberRecord, MetadataState
from shardgrid.core.raft import Membership, Snapshot
from shardgrid.core.raft.messages import Heartbeat, InstallSnapshot
from tests.core.test_member import A_OWNS_B_BACKS as TABLE
from tests.core.test_member import CONFIG, SEEDS, A, B, C, following, replies, run_ticks, sent


def stops(effects: list) -> list[Stop]:
    return [e for e in effects if isinstance(e, Stop)]


def test_every_stage_but_stopped_may_stop_and_nothing_leaves_stopped():
    assert all(LeaveStage.STOPPED in TRANSITIONS[stage] for stage in LeaveStage if stage is not LeaveStage.STOPPED)
    assert TRANSITIONS[LeaveStage.STOPPED] == frozenset()
    assert LeaveStage.STAYING not in TRANSITIONS[LeaveStage.HANDING_OVER]  # a recorded leave is not undone


def test_a_signal_before_joining_stops_the_process_with_exit_0():
    member = Member(A, CONFIG, SEEDS, random.Random(1))
    member.handle(0, Start())
    effects = member.handle(10, StopSignalled("local", 7))
    assert [(r.call_id, r.result) for r in replies(effects)] == [(7, m.ADMIN_FAILED)]
    assert stops(effects) == [Stop(reason="stopped by a signal before it joined a cluster", exit_code=EXIT_STOPPED)]
    assert member.lifecycle is Lifecycle.STOPPED
    assert member.handle(20, StopSignalled("local", 8)) == []  # stopped: it handles nothing more


def test_the_first_signal_asks_the_leader_and_a_second_abandons_the_cluster_with_exit_1():
    member, now = following(B, TABLE)
    first = member.handle(now, StopSignalled("local", 0))
    assert [r.command for r in sent(first, m.LeaderRequest)] == [m.ShutdownMember(even_if_last=True)]
    assert stops(first) == []
    assert member.leaving.stage is LeaveStage.ASKED
    second = member.handle(now + 1, StopSignalled("local", 0))
    assert stops(second) == [Stop(reason="stopped by a signal before leaving the cluster", exit_code=EXIT_ABANDONED)]
    assert member.lifecycle is Lifecycle.STOPPED


def test_a_signalled_leave_refused_while_others_stay_keeps_the_member_serving():
    member, now = following(B, TABLE)
    effects = member.handle(now, StopSignalled("local", 0))
    (request,) = sent(effects, m.LeaderRequest)
    refusal = m.LeaderReply(request_id=request.request_id, result=m.ADMIN_FAILED, reason="rebalancing is paused")
    effects = member.handle(now + 1, Receive(A.address, A, B.uuid, refusal))
    assert stops(effects) == []
    assert [e.event for e in effects if isinstance(getattr(e, "event", None), LeaveRefused)] == [
        LeaveRefused(member=B, reason="rebalancing is paused")
    ]
    assert member.leaving.stage is LeaveStage.STAYING
    assert member.lifecycle is Lifecycle.ACTIVE


def test_a_signalled_leave_refused_with_nobody_else_staying_stops_with_exit_0():
    member = Member(B, CONFIG, SEEDS, random.Random(2))
    member.handle(0, Start())
    records = (MemberRecord(A, leaving=True), MemberRecord(B), MemberRecord(C, lite=True))
    snapshot = Snapshot(7, 1, Membership.of([A], [B, C]), MetadataState(CONFIG.partition_count, records, TABLE))
    member.handle(10, Receive(A.address, A, B.uuid, InstallSnapshot(1, snapshot, 10)))
    (request,) = sent(member.handle(20, StopSignalled("local", 0)), m.LeaderRequest)
    refusal = m.LeaderReply(request_id=request.request_id, result=m.ADMIN_FAILED, reason="no leader took it")
    effects = member.handle(30, Receive(A.address, A, B.uuid, refusal))
    assert stops(effects) == [
        Stop(reason="stopped without handing replicas over: no leader took it", exit_code=EXIT_STOPPED)
    ]


def test_a_clients_leave_that_times_out_is_answered_failed_and_the_member_stays():
    member, now = following(B, TABLE)
    member.handle(now, Receive("client:1", None, None, m.AdminRequest(call_id=3, command=m.ShutdownMember())))
    effects, now = run_ticks(member, now, now + CONFIG.graceful_shutdown_timeout_ms + 1_000)
    answers = [r for r in replies(effects) if isinstance(r, m.AdminReply)]
    assert [(r.call_id, r.result) for r in answers] == [(3, m.ADMIN_FAILED)]
    assert stops(effects) == []
    assert member.leaving.stage is LeaveStage.STAYING


def test_a_clients_leave_is_answered_failed_when_a_second_signal_stops_the_member():
    """Found by an outside tester: ``shardgrid shutdown HOST`` printed 'left the cluster' and
    exited 0 while a second SIGTERM had stopped the member before it left (exit 1)."""
    member, now = following(B, TABLE)
    member.handle(now, Receive("client:1", None, None, m.AdminRequest(call_id=3, command=m.ShutdownMember())))
    member.handle(now + 1, StopSignalled("local", 0))
    effects = member.handle(now + 2, StopSignalled("local", 0))
    assert stops(effects) == [Stop(reason="stopped by a signal before leaving the cluster", exit_code=EXIT_ABANDONED)]
    answers = {r.call_id: r for r in replies(effects) if isinstance(r, m.AdminReply)}
    assert answers[3].result == m.ADMIN_FAILED
    assert answers[3].reason == "stopped by a signal before leaving the cluster"


def test_a_leave_still_asked_when_the_cluster_shuts_down_is_answered_failed():
    member, now = following(B, TABLE)
    member.handle(now, Receive("client:1", None, None, m.AdminRequest(call_id=3, command=m.ShutdownMember())))
    member.leaving.on_cluster_shut_down(99)  # a follower stops at once
    (answer,) = [r for r in member.leaving.ctx.out if isinstance(getattr(r, "message", None), m.AdminReply)][-1:]
    assert (answer.message.result, answer.message.reason) == (
        m.ADMIN_FAILED,
        "stopped before leaving the cluster: the cluster shut down",
    )


def test_a_removed_leaver_answers_its_leave_ok_and_a_lite_one_says_it_held_nothing():
    """Found by an outside tester: a lite member exited saying it 'left the cluster after handing
    its replicas over'; it holds none."""
    lite_left = "left the cluster (a lite member holds no replicas to hand over)"
    for lite, reason in ((False, "left the cluster after handing its replicas over"), (True, lite_left)):
        member, now = following(C, TABLE, lite=lite)
        member.handle(now, Receive("client:1", None, None, m.AdminRequest(call_id=3, command=m.ShutdownMember())))
        effects = member.handle(now + 1, Receive(A.address, A, C.uuid, m.NotAMember(commit_index=1_000)))
        assert stops(effects) == [Stop(reason=reason, exit_code=EXIT_STOPPED)]
        assert [(r.result, r.reason) for r in replies(effects) if isinstance(r, m.AdminReply)] == [(m.ADMIN_OK, reason)]


GRACEFUL_MS = 5_000
QUICK = replace(CONFIG, graceful_shutdown_timeout_ms=GRACEFUL_MS)


def test_a_signalled_member_no_leader_can_take_stops_after_the_graceful_timeout_with_exit_1():
    """Found by an outside tester: SIGTERM one member of three and SIGKILL the other two; after
    graceful_shutdown_timeout_ms it said it could not leave now and then ran, leaving, for good."""
    member, now = following(B, TABLE, config=QUICK)
    member.handle(now, StopSignalled("local", 0))  # asked; A, the leader, never answers again
    effects, now = run_ticks(member, now, now + GRACEFUL_MS + 100)
    assert stops(effects) == [Stop(reason=NO_LEADER_TO_LEAVE, exit_code=EXIT_ABANDONED)]
    assert "no leader has answered" in NO_LEADER_TO_LEAVE
    assert member.lifecycle is Lifecycle.STOPPED


def test_a_signalled_member_waits_past_the_graceful_timeout_while_a_leader_answers():
    """A leader that still answers may yet take the leave (or finish it): the member goes on, says
    so, and stops only once no leader has been heard for the failure timeout."""
    member, now = following(B, TABLE, config=QUICK)
    member.handle(now, StopSignalled("local", 0))
    effects: list = []
    while now < 10 + GRACEFUL_MS + 3_000:
        now += QUICK.tick_ms
        if now % 500 == 10:  # A heartbeats every half second
            effects += member.handle(now, Receive(A.address, A, B.uuid, Heartbeat(term=1, commit=7, sent_ms=now)))
        effects += member.handle(now, TimerFired("tick"))
    assert stops(effects) == []
    assert [e.event.reason for e in effects if isinstance(getattr(e, "event", None), LeaveRefused)] == [
        "still handing replicas over after graceful_shutdown_timeout_ms; nothing was lost"
    ]
    silent_from = now
    effects, now = run_ticks(member, now, now + QUICK.failure_timeout_ms + 200)
    (stop,) = stops(effects)
    assert stop == Stop(reason=NO_LEADER_TO_LEAVE, exit_code=EXIT_ABANDONED)
    assert member.consensus.raft.leader_silent_ms() >= QUICK.failure_timeout_ms
    assert now - silent_from >= QUICK.failure_timeout_ms


def test_a_stage_the_table_does_not_allow_is_an_invariant_violation():
    member, _ = following(B, TABLE)
    member.leaving.stop("test", EXIT_STOPPED)
    with pytest.raises(InvariantViolation):
        member.leaving._set_stage(LeaveStage.ASKED)
