"""``shardgrid bench sim``: the simulator's speed, and how fast a large cluster repairs a crash.

Seed 003's benchmark shape, simulated: 20,000 partitions on 10 members with one backup (assigned
on first use, after all ten joined, so the cluster starts balanced); one member crashes, and the
figure is the simulated time until the cluster is safe again (failure detection included), for
``max_parallel_migrations`` 1, 5, 10 and 20. The partitions carry no data here, so the figure
measures the migration protocol's round trips and scheduling, not data transfer.
"""

from __future__ import annotations

import platform
import time
from typing import Any

from shardgrid.sim.scenario import Scenario
from shardgrid.sim.vopr import SimParams, run_seed

THROUGHPUT_PARAMS = SimParams(ops=2000, faults=("crash", "master-crash", "join", "split"))


def crash_repair(partitions: int, members: int, max_parallel: int, seed: int = 1) -> dict[str, Any]:
    params = SimParams(
        members=members,
        partitions=partitions,
        backups=1,
        drop_rate=0.0,
        duplicate_rate=0.0,
        max_parallel_migrations=max_parallel,
        assign_on_first_use=True,  # the cluster forms first, balanced, as a Hazelcast cluster does
    )
    scenario = Scenario(seed, params)
    addresses = scenario.start(members)
    victim = next(a for a in addresses if a != scenario.master.identity.address)
    events, migrations = scenario.sim.stats.events, scenario.sim.stats.migrations_finished
    started = time.perf_counter()
    scenario.sim.crash(victim)
    safe_after_ms = scenario.wait_safe(3_600_000)
    wall = time.perf_counter() - started
    detection_ms = params.member_config().failure_timeout_ms
    return {
        "partitions": partitions,
        "members": members,
        "max_parallel_migrations": max_parallel,
        "simulated_ms_to_safe": safe_after_ms,
        "simulated_ms_after_detection": safe_after_ms - detection_ms,
        "migrations": scenario.sim.stats.migrations_finished - migrations,
        "events": scenario.sim.stats.events - events,
        "wall_seconds": round(wall, 2),
    }


def run_sim_bench(partitions: int = 20_000, members: int = 10, parallel: tuple[int, ...] = (1, 5, 10, 20)) -> dict:
    throughput = run_seed(1, THROUGHPUT_PARAMS)
    return {
        "benchmark": "sim",
        "python": platform.python_version(),
        "throughput": {
            "run": "seed 1, 5 members, 271 partitions, 1 backup, 2000 ops, faults crash,master-crash,join,split",
            "verdict": "PASS" if throughput.passed else "FAIL",
            "events": throughput.events,
            "wall_seconds": round(throughput.wall_seconds, 3),
            "events_per_second": round(throughput.events / throughput.wall_seconds),
            "simulated_seconds": throughput.simulated_ms / 1000,
        },
        "crash_repair": [crash_repair(partitions, members, p) for p in parallel],
        "target": {"what": "the throughput run passes its verdict", "met": throughput.passed},
    }
