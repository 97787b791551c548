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

import pytest

from shardgrid.core import events
from shardgrid.core.member.lifecycle import Lifecycle
from shardgrid.sim.schedule import parse_schedule
from shardgrid.sim.vopr import Run, params_of

SEEDS = range(int(os.environ.get("SHARDGRID_LEAVE_SEEDS", "100")))
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
