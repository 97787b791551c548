"""``shardgrid bench plan``: how long repartition + plan + schedule take at seed 003's scales.

Each case builds a settled cluster (not timed), applies one membership change, and times the
leader's work for it: repair (for a crash), repartition, planning with cycle elimination and
prioritization, and the parallel schedule. The best of a few repeats is reported, as the least
disturbed by whatever else the machine runs.
"""

from __future__ import annotations

import platform
import statistics
from typing import Any

from shardgrid.cli.bench_results import Target, with_targets
from shardgrid.cli.scenario import ScenarioSpec, run_scenario

SCALES: tuple[tuple[int, int], ...] = ((271, 3), (20_000, 10), (20_000, 200))
CHANGES: tuple[str, ...] = ("add", "remove", "crash")
TARGET_MS = 1000.0
TARGET_SCALE = (20_000, 200)


def run_plan_bench(repeats: int = 3, seed: int = 1) -> dict[str, Any]:
    cases = []
    for partitions, members in SCALES:
        for change in CHANGES:
            spec = ScenarioSpec(members=members, partitions=partitions, backups=1, seed=seed, **{change: 1})
            results = [run_scenario(spec) for _ in range(max(1, repeats))]
            result = results[-1]
            plans = [r.plan_ms for r in results]
            schedules = [r.schedule_ms for r in results]
            totals = [r.plan_ms + r.schedule_ms for r in results]
            cases.append(
                {
                    "partitions": partitions,
                    "members": members,
                    "backups": 1,
                    "change": change,
                    "migrations": result.plan.migration_count,
                    "rounds": len(result.rounds),
                    "best_total_ms": round(min(totals), 2),
                    "median_total_ms": round(statistics.median(totals), 2),
                    "best_plan_ms": round(min(plans), 2),
                    "best_schedule_ms": round(min(schedules), 2),
                }
            )
    at_target = [c for c in cases if (c["partitions"], c["members"]) == TARGET_SCALE]
    worst = max(c["best_total_ms"] for c in at_target)
    report = {
        "benchmark": "plan",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "repeats": repeats,
        "cases": cases,
    }
    target = Target(
        name="worst_best_total_ms",
        figure=f"repartition + plan + schedule at {TARGET_SCALE[0]:,} partitions / {TARGET_SCALE[1]} members, "
        "the slowest change, ms",
        measured=worst,
        comparison="<",
        wanted=TARGET_MS,
    )
    return with_targets(report, [target])


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """Each case's best time, for the manual's table."""
    return {
        f"{case['change']} at {case['partitions']:,} / {case['members']}: ms (migrations)": (
            f"{case['best_total_ms']} ({case['migrations']:,})"
        )
        for case in report["cases"]
    }
