"""A seeded search of writes delivered late and more than once (the class of the outside tester's
"applied late", "stale" and "resurrected" findings): clients cut off from some or all members for
a moment or for long, the network holding their requests and delivering them after the heal in
any order, calls that retry (at-least-once) or end on the first unanswered attempt, short and long
call timeouts, few keys per client so that a late write would land on a newer one. The verdict
flags any read, or any final value, older than a key's last acknowledged write.

``SHARDGRID_LATE_WRITE_SEEDS`` sets how many seeds run (40 by default)."""

from __future__ import annotations

import os
import random

import pytest

from shardgrid.sim.schedule import parse_schedule
from shardgrid.sim.vopr import Run, params_of

SEEDS = int(os.environ.get("SHARDGRID_LATE_WRITE_SEEDS", "18"))


def schedule_for(seed: int) -> dict:
    rng = random.Random(seed)
    clients = rng.choice([1, 2, 3])
    members = rng.choice([3, 4, 5])
    run = {
        "seed": seed,
        "members": members,
        "partitions": rng.choice([7, 31]),
        "backups": rng.choice([1, 2]) if members >= 4 else 1,
        "ops": rng.choice([600, 1200]),
        "clients": clients,
        "keys_per_client": rng.choice([1, 2, 5]),
        "fail_on_indeterminate": rng.random() < 0.4,
        "operation_call_timeout_ms": rng.choice([3_000, 10_000, 30_000]),
        "drop_rate": rng.choice([0.0, 0.02]),
        "duplicate_rate": rng.choice([0.0, 0.02]),
    }
    steps = []
    for i in range(rng.randint(3, 12)):
        client = f"client-{rng.randint(1, clients)}"
        cut_off = [client]
        if rng.random() < 0.5:
            cut_off.append(f"m{rng.randint(1, members)}")  # with a member, as the tester's were
        long = rng.random() < 0.3
        steps.append(
            {
                "action": "split",
                "after_ms": 1_000 if i == 0 else rng.randint(100, 4_000),
                "groups": [cut_off, ["rest"]],
                "duration_ms": rng.randint(6_000, 12_000) if long else rng.randint(10, 1_500),
                "hold_ms": rng.randint(300, 1_500) if rng.random() < 0.5 else rng.randint(1_500, 30_000),
            }
        )
    return {"run": run, "step": steps}


@pytest.mark.parametrize("seed", range(1, SEEDS + 1))
def test_no_write_lands_late_or_twice_over_a_newer_one(seed: int) -> None:
    schedule = parse_schedule(schedule_for(seed), f"late-writes-{seed}")
    run_seed, params = params_of(schedule)
    result = Run(run_seed, params, schedule).run()
    assert result.passed, f"seed {seed}: {result.problems[:3]}; faults {result.faults_injected}"


OWNER_CUT_SEEDS = int(os.environ.get("SHARDGRID_OWNER_CUT_SEEDS", "18"))


def owner_cut_schedule_for(seed: int) -> dict:
    """An owner cut off from the other members (its backups among them) while the clients still
    reach it, with attempts shorter than the backup acknowledgement timeout: a retry reaches the
    owner while the first attempt still waits for a backup that will never answer."""
    rng = random.Random(seed)
    partitions = 7
    run = {
        "seed": seed,
        "members": 5,
        "partitions": partitions,
        "backups": 1,
        "ops": 1_500,
        "clients": 3,
        "keys_per_client": rng.choice([2, 4]),
        "fail_on_indeterminate": False,
        "operation_call_timeout_ms": rng.choice([3_000, 10_000]),
        "attempt_timeout_ms": rng.choice([500, 1_000]),
        "drop_rate": 0.0,
        "duplicate_rate": 0.0,
    }
    steps = [
        {
            "action": "split",
            "after_ms": 1_000 if i == 0 else rng.randint(3_000, 12_000),
            "groups": [[f"owner:{rng.randrange(partitions)}"], ["rest"]],
            "duration_ms": rng.randint(500, 8_000),
        }
        for i in range(rng.randint(2, 5))
    ]
    return {"run": run, "step": steps}


@pytest.mark.parametrize("seed", sorted({*range(1, OWNER_CUT_SEEDS + 1), 37}))  # 37: the seed that found it
def test_a_retry_while_the_first_attempt_waits_for_a_cut_off_backup_is_never_acknowledged_early(seed: int) -> None:
    """Found by an outside tester in network namespaces: a retry of a put that asked for no
    previous value was answered OK while its first attempt still waited for the backup (cut off),
    and the write was lost when that backup took over. Seed 37 failed before the fix."""
    schedule = parse_schedule(owner_cut_schedule_for(seed), f"owner-cut-{seed}")
    run_seed, params = params_of(schedule)
    result = Run(run_seed, params, schedule).run()
    assert result.passed, f"seed {seed}: {result.problems[:3]}; faults {result.faults_injected}"
