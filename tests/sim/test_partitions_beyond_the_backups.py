"""A seeded search of network splits that cut off more members than the backups cover (the class
of the outside tester's third finding: the majority side reported the partitions whose every
replica was cut off lost, and served them empty, although their members were alive). Every run's
verdict requires that no acknowledged write is lost and no read of a written key comes back
empty: such partitions are unavailable while their members are away and come back whole.

``SHARDGRID_BEYOND_BACKUP_SEEDS`` sets how many seeds run (30 by default)."""

from __future__ import annotations

import os
import random

import pytest

from shardgrid.sim.schedule import parse_schedule
from shardgrid.sim.vopr import Run, params_of

SEEDS = int(os.environ.get("SHARDGRID_BEYOND_BACKUP_SEEDS", "14"))


def schedule_for(seed: int, partition_lost_timeout_ms: int = 600_000) -> dict:
    rng = random.Random(seed)
    members = rng.choice([4, 5, 6])
    backups = rng.choice([1, 2]) if members >= 5 else 1
    run = {
        "seed": seed,
        "members": members,
        "partitions": rng.choice([7, 31, 71]),
        "backups": backups,
        "ops": rng.choice([800, 1600]),
        "clients": rng.choice([2, 3]),
        "keys_per_client": rng.choice([5, 20]),
        "fail_on_indeterminate": rng.random() < 0.5,
        "drop_rate": rng.choice([0.0, 0.02]),
        "duplicate_rate": 0.0,
        "partition_lost_timeout_ms": partition_lost_timeout_ms,
    }
    steps = []
    minority = (members - 1) // 2  # a majority of the voters stays together
    for i in range(rng.randint(2, 5)):
        count = rng.randint(backups + 1, max(backups + 1, minority))
        cut_off = sorted(rng.sample([f"m{n}" for n in range(1, members + 1)], count))
        if rng.random() < 0.3:
            cut_off.append(f"client-{rng.randint(1, run['clients'])}")
        steps.append(
            {
                "action": "split",
                "after_ms": 1_000 if i == 0 else rng.randint(8_000, 20_000),
                "groups": [cut_off, ["rest"]],
                "duration_ms": rng.randint(6_000, 20_000),
            }
        )
    return {"run": run, "step": steps}


@pytest.mark.parametrize("seed", range(1, SEEDS + 1))
def test_a_split_past_the_backups_loses_nothing(seed: int) -> None:
    schedule = parse_schedule(schedule_for(seed), f"beyond-backups-{seed}")
    run_seed, params = params_of(schedule)
    result = Run(run_seed, params, schedule).run()
    assert result.passed, f"seed {seed}: {result.problems[:3]}; faults {result.faults_injected}"
