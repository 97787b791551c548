"""Leaves and cluster state changes in any order, drawn from seeds: the class of the defect
``a-pause-during-a-leave-is-refused`` reproduces (found by an outside tester on real processes:
``rebalance pause`` was taken while a member was leaving, which then waited, holding its replicas,
until the state came back or graceful_shutdown_timeout_ms passed).

A leave and a state that forbids migration exclude each other whichever reaches the log first
(and a lite member asked to leave and to be promoted at once is not promoted once its leave is in):
no member ever applies an entry that leaves a data member leaving in NO_MIGRATION or FROZEN
(checked here at every applied entry, apart from the core's own invariant); a refused leave or
state change says why; nobody is still leaving at the end; and every acknowledged write is kept
(the full verdict)."""

from __future__ import annotations

import os
import random
from typing import Any

import pytest

from shardgrid.core import events
from shardgrid.core import messages as m
from shardgrid.core.member import consensus
from shardgrid.core.member.lifecycle import Lifecycle
from shardgrid.core.metadata import ClusterState, MetadataState, apply_commands
from shardgrid.sim.schedule import parse_schedule
from shardgrid.sim.vopr import Run, params_of

SEEDS = range(int(os.environ.get("SHARDGRID_LEAVE_STATE_SEEDS", "20")))
ACTIVE_AGAIN_AFTER_MS = 5_000  # the last step sets the state back to active this long after the rest
LEAVE_ENDS_WITHIN_MS = 60_000  # 271 partitions one migration at a time: 20-45 s (a promotion adds more)
STATES = ("no-migration", "frozen", "passive", "active")
LEAVE_REFUSALS = ("nothing migrates", "last data member")
PROMOTE_REFUSALS = ("not promoted", "not a known member", "already a data member")
STATE_REFUSALS = ("is leaving", "did not agree in time", "another state")


def _schedule(seed: int) -> dict:
    rng = random.Random(seed)
    data_members = rng.randint(3, 5)
    lite = rng.random() < 0.4  # the last member, m<data_members + 1>: asked to leave and promoted
    members = data_members + lite
    leavers = rng.sample(range(1, data_members + 1), rng.randint(1, 2))
    steps: list[dict] = []
    for n in leavers:
        step = {"action": "shutdown", "target": f"m{n}"}
        if rng.random() < 0.5:
            step["signal"] = True
        steps.append(step)
    for _ in range(rng.randint(1, 3)):
        target = f"m{rng.choice([n for n in range(1, data_members + 1) if n not in leavers])}"
        steps.append({"action": "state", "state": rng.choice(STATES), "target": target})
    if lite:
        steps.append({"action": "promote", "target": f"m{members}"})
        if rng.random() < 0.7:
            steps.append({"action": "shutdown", "target": f"m{members}", "signal": rng.random() < 0.5})
    rng.shuffle(steps)
    for i, step in enumerate(steps):
        step["after_ms"] = 1500 if i == 0 else rng.choice([0, 0, 5, 20, 40, 150, 500])
    steps.append({"action": "state", "state": "active", "target": "leader", "after_ms": ACTIVE_AGAIN_AFTER_MS})
    steps.append({"action": "wait", "after_ms": LEAVE_ENDS_WITHIN_MS})
    return {
        "run": {
            "seed": seed,
            "members": members,
            "lite_members": int(lite),
            "backups": rng.randint(1, 2),
            "partitions": rng.choice([31, 71, 271]),
            "ops": 200,
            "drop_rate": 0.0,
            "max_parallel_migrations": rng.choice([1, 2, 10]),  # 1: leaves that last a while
        },
        "step": steps,
    }


def _paused_with_a_leave(state: MetadataState) -> str:
    paused = state.cluster_state in (ClusterState.NO_MIGRATION, ClusterState.FROZEN)
    leaving = [r.id.address for r in state.members if r.leaving and not r.lite]
    return f"{leaving} leaving in {state.cluster_state.value}" if paused and leaving and not state.parting else ""


@pytest.mark.parametrize("seed", SEEDS)
def test_a_leave_and_a_state_that_forbids_migration_exclude_each_other(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    def checked_apply(state: MetadataState, commands: tuple[object, ...]) -> Any:
        after, changes = apply_commands(state, commands)
        problem = _paused_with_a_leave(after)
        if problem and not seen:
            seen.append(problem)
        return after, changes

    monkeypatch.setattr(consensus, "apply_commands", checked_apply)
    raw = _schedule(seed)
    schedule = parse_schedule(raw, f"leaves-and-states-{seed}")
    run_seed, params = params_of(schedule)
    run = Run(run_seed, params, schedule)
    asked_at: dict[int, tuple[int, str, str]] = {}  # call id -> (time, kind, address)
    admin, signal_stop = run.sim.admin, run.sim.signal_stop

    def recording_admin(address: str, command: Any) -> int:
        call = admin(address, command)
        kind = {m.ShutdownMember: "leave", m.PromoteMember: "promote"}.get(type(command), "state")
        asked_at[call] = (run.sim.now_ms, kind, address)
        return call

    def recording_signal(address: str) -> int:
        call = signal_stop(address)
        asked_at[call] = (run.sim.now_ms, "leave", address)
        return call

    run.sim.admin = recording_admin  # type: ignore[method-assign]
    run.sim.signal_stop = recording_signal  # type: ignore[method-assign]
    result = run.run()
    assert not seen, f"seed {seed}: {seen[0]}; {run.faults}"
    assert result.passed, f"seed {seed}: {result.problems[:5]}; {run.faults}"
    stopped_at = {a: t for t, a, e in run.sim.events if isinstance(e, events.MemberStopped)}
    running = run.sim.member_addresses()
    leaving = [a for a in running if run.sim.nodes[a].member.lifecycle is Lifecycle.LEAVING]
    assert not leaving, f"seed {seed}: still leaving at the end: {leaving}; {run.faults}"
    for call, (at_ms, kind, address) in sorted(asked_at.items()):
        reply = run.sim.admin_replies.get(call)
        if kind == "leave" and address in stopped_at:
            assert stopped_at[address] - at_ms < LEAVE_ENDS_WITHIN_MS, f"seed {seed}: {address}; {run.faults}"
        elif kind == "leave":
            assert reply is not None, f"seed {seed}: {address} runs on and its leave has no answer; {run.faults}"
            assert reply.result == m.ADMIN_FAILED
            assert any(r in reply.reason for r in LEAVE_REFUSALS), f"seed {seed}: {reply.reason}"
        elif kind == "promote" and reply is not None and reply.result == m.ADMIN_FAILED:
            assert any(r in reply.reason for r in PROMOTE_REFUSALS), f"seed {seed}: {reply.reason}"
        elif reply is not None and reply.result == m.ADMIN_FAILED:  # unavailable: no leader, ask again
            assert any(r in reply.reason for r in STATE_REFUSALS), f"seed {seed}: {reply.reason}"
