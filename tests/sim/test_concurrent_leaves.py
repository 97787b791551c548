"""Members asked to leave at nearly the same time, drawn from seeds: the class of the defect that
``every-member-asked-to-leave-at-once`` reproduces (the leader checked each leave against the log
before the others were in it; all were recorded leaving and waited for each other for
graceful_shutdown_timeout_ms).

Whatever the order and the mix of signals (``StopSignalled``, as a process given SIGTERM) and
plain leaves: nobody is still leaving long after; a cluster with a member left
keeps every acknowledged write (the full verdict); and the whole cluster stops only when every
member was asked to leave and one of them by a signal (Hazelcast lets all go once all asked)."""

from __future__ import annotations

import os
import random
from typing import Any

import pytest

from shardgrid.core import events
from shardgrid.core.member.lifecycle import Lifecycle
from shardgrid.sim.schedule import parse_schedule
from shardgrid.sim.vopr import Run, params_of

SEEDS = range(int(os.environ.get("SHARDGRID_LEAVE_SEEDS", "35")))
STILL_LEAVING_AFTER_MS = 15_000  # a leave ends (handed over, refused, or all gone) well within this


def _schedule(seed: int) -> tuple[dict, set[str], set[str]]:
    rng = random.Random(seed)
    members = rng.randint(2, 6)
    everyone_signalled = rng.random() < 0.4  # as a service manager stops every host's process
    asked = sorted(rng.sample(range(1, members + 1), members if everyone_signalled else rng.randint(2, members)))
    rng.shuffle(asked)
    signalled = {f"m{n}" for n in asked if everyone_signalled or rng.random() < 0.5}
    steps = []
    for i, n in enumerate(asked):
        gap_ms = rng.choice([0, 0, 5, 40, 300, 800])
        step = {"action": "shutdown", "target": f"m{n}", "after_ms": 1500 if i == 0 else gap_ms}
        if f"m{n}" in signalled:
            step["signal"] = True
        steps.append(step)
    steps.append({"action": "wait", "after_ms": STILL_LEAVING_AFTER_MS})
    # No drops: the simulation's operator does not ask again when its request is lost (the CLI does).
    raw = {
        "run": {
            "seed": seed,
            "members": members,
            "backups": rng.randint(0, 2),
            "partitions": rng.choice([31, 71, 271]),
            "ops": 200,
            "drop_rate": 0.0,
        },
        "step": steps,
    }
    return raw, {f"m{n}" for n in asked}, signalled


@pytest.mark.parametrize("seed", SEEDS)
def test_members_asked_to_leave_together_end_their_leave(seed: int) -> None:
    raw, asked, signalled = _schedule(seed)
    schedule = parse_schedule(raw, f"concurrent-leaves-{seed}")
    run_seed, params = params_of(schedule)
    run = Run(run_seed, params, schedule)
    result = run.run()
    addresses = run.sim.started_addresses
    names = {f"m{i + 1}": a for i, a in enumerate(addresses)}
    everyone_asked = len(asked) == len(addresses)
    stopped_at = {a: t for t, a, e in run.sim.events if isinstance(e, events.MemberStopped)}
    running = run.sim.member_addresses()
    leaving = [a for a in running if run.sim.nodes[a].member.lifecycle is Lifecycle.LEAVING]
    assert not leaving, f"seed {seed}: still leaving at the end: {leaving}; {run.faults[-8:]}"
    if running:
        assert result.passed, f"seed {seed}: {result.problems[:5]}; {run.faults[-8:]}"
        # A member nobody asked to leave is still there.
        assert {names[n] for n in names if n not in asked} <= set(running)
    else:
        assert everyone_asked, f"seed {seed}: every member stopped, not every one asked: {raw['step']}"
        assert signalled, f"seed {seed}: every member stopped, none of them signalled: {raw['step']}"
    for name in signalled:
        # A signalled process stops: once it handed its replicas over, or with every data member.
        assert names[name] in stopped_at, f"seed {seed}: {name} was signalled and still runs"


CRASH_SEEDS = range(int(os.environ.get("SHARDGRID_LEAVE_CRASH_SEEDS", "28")))
JOIN_AFTER_CRASH_MS = 8_000  # the crashed member is removed by then (failure_timeout_ms and lease)


def _schedule_with_a_crash(seed: int) -> dict:
    """Some members leave (signalled or asked), and one member that was not asked crashes (the
    leader, or the last to stay) at some point of the leaves; a new member joins later."""
    rng = random.Random(seed)
    members = rng.randint(3, 5)
    leavers = rng.sample(range(1, members + 1), rng.randint(1, members - 1))
    stayers = [n for n in range(1, members + 1) if n not in leavers]
    steps: list[dict] = []
    for i, n in enumerate(leavers):
        step = {"action": "shutdown", "target": f"m{n}", "after_ms": 1500 if i == 0 else rng.choice([0, 5, 40])}
        if rng.random() < 0.7:
            step["signal"] = True
        steps.append(step)
    victim = "leader" if rng.random() < 0.5 else f"m{rng.choice(stayers)}"
    steps.append({"action": "crash", "target": victim, "after_ms": rng.choice([0, 20, 100, 300, 1000])})
    steps.append({"action": "wait", "after_ms": JOIN_AFTER_CRASH_MS})
    steps.append({"action": "join"})
    steps.append({"action": "wait", "after_ms": STILL_LEAVING_AFTER_MS})
    raw = {
        "run": {
            "seed": seed,
            "members": members,
            "backups": rng.randint(1, 2),
            "partitions": rng.choice([31, 71]),
            "ops": 200,
            "drop_rate": 0.0,
            "max_parallel_migrations": rng.choice([1, 2, 10]),  # 1: leaves that last a while
            # A crashed member that held the last replicas of some partitions is given up soon
            # after the failure timeout, before the join, as it was before partitions were kept
            # unavailable for it (tests/sim/test_partitions_beyond_the_backups.py covers that).
            "partition_lost_timeout_ms": 6_000,
        },
        "step": steps,
        # One crash while replicas move off leaving members may lose partitions whose only other
        # copy had already gone (the verdict still checks every write to the others).
        "expect": {"partitions_lost": True},
    }
    return raw


@pytest.mark.parametrize("seed", CRASH_SEEDS)
def test_leaves_and_one_crash_end_with_a_leader_and_lose_no_held_data(seed: int) -> None:
    """Found by an outside tester: with three members, a leave and a crash of the leader left no
    majority although two members lived (the leaving voter had been demoted at once); and members
    leaving when the one that stayed crashed dropped everything they held, as if all had been
    asked to go. Whatever leaves and whoever crashes: a leader at the end, nobody still leaving
    once a member joined to take the replicas, and the verdict's every acknowledged write."""
    raw = _schedule_with_a_crash(seed)
    schedule = parse_schedule(raw, f"leaves-and-a-crash-{seed}")
    run_seed, params = params_of(schedule)
    run = Run(run_seed, params, schedule)
    members_at_crash: list[int] = []
    crashed_at_ms: list[int] = []
    only_there: set[int] = set()  # partitions whose every copy was on the crashed member
    crash = run.sim.crash

    def counting_crash(address: str, **options: Any) -> None:
        leader = run.sim.leader()
        membership = leader.consensus.raft.membership if leader is not None else None
        members_at_crash.append(len(membership.voters) + len(membership.learners) if membership else 0)
        crashed_at_ms.append(run.sim.now_ms)
        table = leader.consensus.state.table if leader is not None else None
        # CLEARs the leader proposed count as done: a majority may hold them, committed, already.
        proposed = leader.migration_leader._proposed_starts.items() if leader is not None else ()
        cleared = {(pid, r.migration.source) for pid, r in proposed if r.migration.destination is None}
        for pid, slots in enumerate(table.replicas if table is not None else ()):
            if {r.address for r in slots if r is not None and (pid, r) not in cleared} <= {address}:
                only_there.add(pid)
        crash(address, **options)

    run.sim.crash = counting_crash  # type: ignore[method-assign]
    result = run.run()
    if members_at_crash and members_at_crash[0] < 3:
        # Fewer than three members in the configuration when one crashed (the leaves were over):
        # no majority of voters survives a crash of the one that leads, whatever leaves
        # (two voters, or one; `shardgrid recover` is the way out).
        return
    if _only_a_change_made_unaware_of_the_crash(result.problems, crashed_at_ms, run):
        return
    running = run.sim.member_addresses()
    assert running, f"seed {seed}: nobody runs at the end; {run.faults}"
    leaders = {run.sim.nodes[a].member.consensus.leader for a in running}
    assert None not in leaders, f"seed {seed}: no leader at the end; {run.faults}"
    leaving = [a for a in running if run.sim.nodes[a].member.lifecycle is Lifecycle.LEAVING]
    assert not leaving, f"seed {seed}: still leaving at the end: {leaving}; {run.faults}"
    assert result.passed, f"seed {seed}: {result.problems[:5]}; {run.faults}"
    # A leaving member's copy stays a backup while replicas move (its slot is emptied last, once
    # the others answer): only a partition held by the crashed member alone may be lost (the one
    # member that stays, crashed after everything was handed over to it).
    lost = run.sim.stats.partitions_lost - only_there
    assert not lost, f"seed {seed}: {len(lost)} partitions lost that another member held; {run.faults}"
    parted = [e for _, _, e in run.sim.events if isinstance(e, events.MemberStopped) and "every data" in e.reason]
    assert not parted, f"seed {seed}: members stopped as if every one had been asked to leave: {parted[:2]}"


def _only_a_change_made_unaware_of_the_crash(problems: list[str], crashed_at_ms: list[int], run: Run) -> bool:
    """The leader removed a leaving voter that held nothing less than its answer window after a
    voter crashed (it could not know yet): two voters left, one dead. Any removal has that window
    (a crash a moment before it); the search covers what happens outside it."""
    window_ms = 3 * run.sim.config.raft_heartbeat_interval_ms
    made_at = [int(p.split(":", 1)[0].removeprefix("t=")) for p in problems if "voters alive" in p]
    return (
        bool(problems)
        and len(made_at) == len(problems)
        and all(0 <= t - crashed_at_ms[0] <= window_ms for t in made_at)
    )
