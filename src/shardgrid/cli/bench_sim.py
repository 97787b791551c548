"""``shardgrid bench sim``: the simulator's speed, and how fast a large cluster repairs a crash.

Seed 003's benchmark shape, simulated: 20,000 partitions on 10 members with one backup (assigned
on first use, after all ten joined, so the cluster starts balanced); one member crashes, and the
figure is the simulated time until the cluster is safe again (failure detection included), for
``max_parallel_migrations`` 1, 5, 10 and 20. The partitions carry no data here, so the figure
measures the migration protocol's round trips, its log commits and scheduling, not data transfer.

It also reports what the metadata log costs: how long after the leader crashes a new one leads and
the cluster is safe, how many entries the log holds and how large its snapshot is, and how many
migration outcomes one log entry carries when many migrations end together.
"""

from __future__ import annotations

import platform
import statistics
import time
from typing import Any

from shardgrid.cli.bench_results import Target, with_targets
from shardgrid.core import codec
from shardgrid.core.metadata.commands import FinishMigrations, StartMigrations
from shardgrid.core.raft.messages import AppendEntries, InstallSnapshot
from shardgrid.sim.checkers import LogChecker
from shardgrid.sim.scenario import Scenario
from shardgrid.sim.vopr import SimParams, run_seed

THROUGHPUT_PARAMS = SimParams(ops=2000, faults=("crash", "leader-crash", "join", "split"))


def _scenario(partitions: int, members: int, max_parallel: int, seed: int) -> Scenario:
    params = SimParams(
        members=members,
        partitions=partitions,
        backups=1,
        drop_rate=0.0,
        duplicate_rate=0.0,
        max_parallel_migrations=max_parallel,
        assign_on_first_use=True,  # the cluster forms first, balanced, as a Hazelcast cluster does
    )
    return Scenario(seed, params)


def _entries_since(scenario: Scenario, index: int) -> list[tuple[int, Any]]:
    checker = next(c for c in scenario.sim.checks if isinstance(c, LogChecker))
    return [(i, command) for i, (_, command) in sorted(checker.applied.items()) if i > index]


def _outcomes_per_entry(entries: list[tuple[int, Any]]) -> dict[str, Any]:
    counts = [
        sum(len(c.records) for c in command if isinstance(c, FinishMigrations))
        for _, command in entries
        if command and any(isinstance(c, FinishMigrations) for c in command)
    ]
    starts = [
        sum(len(c.records) for c in command if isinstance(c, StartMigrations))
        for _, command in entries
        if command and any(isinstance(c, StartMigrations) for c in command)
    ]
    if not counts:
        return {}
    return {
        "entries_with_outcomes": len(counts),
        "outcomes_per_entry_mean": round(statistics.mean(counts), 2),
        "outcomes_per_entry_max": max(counts),
        "starts_per_entry_mean": round(statistics.mean(starts), 2) if starts else 0,
        "starts_per_entry_max": max(starts) if starts else 0,
    }


def crash_repair(partitions: int, members: int, max_parallel: int, seed: int = 1) -> dict[str, Any]:
    scenario = _scenario(partitions, members, max_parallel, seed)
    addresses = scenario.start(members)
    victim = next(a for a in addresses if a != scenario.leader.identity.address)
    events, migrations = scenario.sim.stats.events, scenario.sim.stats.migrations_finished
    index_before = scenario.leader.consensus.applied_index
    started = time.perf_counter()
    scenario.sim.crash(victim)
    safe_after_ms = scenario.wait_safe(3_600_000)
    wall = time.perf_counter() - started
    detection_ms = scenario.params.member_config().failure_timeout_ms
    leader = scenario.leader
    raft = leader.consensus.raft
    snapshot = raft.log.snapshot
    snapshot_bytes = len(codec.encode(InstallSnapshot(raft.term, snapshot, 0))) if snapshot is not None else 0
    entries = tuple(raft.log.entries)
    log_bytes = (
        len(
            codec.encode(AppendEntries(term=raft.term, prev_index=0, prev_term=0, entries=entries, commit=0, sent_ms=0))
        )
        if entries
        else 0
    )
    return {
        "partitions": partitions,
        "members": members,
        "max_parallel_migrations": max_parallel,
        "simulated_ms_to_safe": safe_after_ms,
        "simulated_ms_after_detection": safe_after_ms - detection_ms,
        "migrations": scenario.sim.stats.migrations_finished - migrations,
        "log_entries_for_the_repair": leader.consensus.applied_index - index_before,
        **_outcomes_per_entry(_entries_since(scenario, index_before)),
        "log": {
            "entries_held": len(raft.log.entries),
            "entries_bytes": log_bytes,
            "snapshot_index": raft.log.snapshot_index,
            "snapshot_bytes": snapshot_bytes,
            "applied_index": leader.consensus.applied_index,
        },
        "events": scenario.sim.stats.events - events,
        "wall_seconds": round(wall, 2),
    }


def leader_crash(partitions: int, members: int, seed: int = 1) -> dict[str, Any]:
    """The leader crashes: how long until another leads, and until the cluster is safe again."""
    scenario = _scenario(partitions, members, 10, seed)
    scenario.start(members)
    old = scenario.leader
    old_term = old.consensus.term
    crashed_ms = scenario.sim.now_ms
    scenario.sim.crash(old.identity.address)
    scenario.run_until(lambda: scenario.sim.leader() is not None and scenario.sim.leader().consensus.term > old_term)
    new_leader_ms = scenario.sim.now_ms - crashed_ms
    safe_ms = new_leader_ms + scenario.wait_safe(3_600_000)
    return {
        "partitions": partitions,
        "members": members,
        "simulated_ms_to_new_leader": new_leader_ms,
        "simulated_ms_to_safe": safe_ms,
        "migrations": scenario.sim.stats.migrations_finished,
    }


def run_sim_bench(partitions: int = 20_000, members: int = 10, parallel: tuple[int, ...] = (1, 5, 10, 20)) -> dict:
    throughput = run_seed(1, THROUGHPUT_PARAMS)
    report = {
        "benchmark": "sim",
        "python": platform.python_version(),
        "throughput": {
            "run": "seed 1, 5 members, 271 partitions, 1 backup, 2000 ops, faults crash,leader-crash,join,split",
            "verdict": "PASS" if throughput.passed else "FAIL",
            "events": throughput.events,
            "wall_seconds": round(throughput.wall_seconds, 3),
            "events_per_second": round(throughput.events / throughput.wall_seconds),
            "simulated_seconds": throughput.simulated_ms / 1000,
        },
        "crash_repair": [crash_repair(partitions, members, p) for p in parallel],
        "leader_crash": [leader_crash(271, min(members, 5)), leader_crash(partitions, members)],
    }
    verdict = Target(
        name="throughput_passed",
        figure="the faulty throughput run passes its verdict",
        measured=throughput.passed,
        comparison="==",
        wanted=True,
    )
    return with_targets(report, [verdict])


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """Events per second, and the simulated repairs, for the manual's table."""
    figures: dict[str, Any] = {"simulator events per second (faulty run)": report["throughput"]["events_per_second"]}
    for run in report["crash_repair"]:
        figures[
            f"safe after a crash at {run['partitions']:,} / {run['members']}, max_parallel_migrations "
            f"{run['max_parallel_migrations']}: simulated s after detection (log entries)"
        ] = f"{run['simulated_ms_after_detection'] / 1000:.1f} ({run['log_entries_for_the_repair']:,})"
    for run in report["leader_crash"]:
        figures[f"leader crash at {run['partitions']:,} / {run['members']}: new leader, safe (simulated s)"] = (
            f"{run['simulated_ms_to_new_leader'] / 1000:.1f}, {run['simulated_ms_to_safe'] / 1000:.1f}"
        )
    return figures
