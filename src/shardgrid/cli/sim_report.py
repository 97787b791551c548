"""What ``shardgrid sim`` prints: the seed and parameters to replay it, a summary, the verdict."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from shardgrid.sim.vopr import SimResult


def replay_command(result: SimResult, schedule_path: str | None = None) -> str:
    """The command that replays this run exactly: every parameter that shapes it, on one line."""
    p = result.params
    parts = ["shardgrid sim", f"--seed {result.seed}"]
    if schedule_path is not None:
        parts.append(f"--schedule {schedule_path}")
    parts += [
        f"--members {p.members}",
        f"--partitions {p.partitions}",
        f"--backups {p.backups}",
        f"--async-backups {p.async_backups}",
        *([] if p.fail_on_indeterminate else ["--at-least-once"]),
        *([] if p.fragments else ["--no-fragments"]),
        *(["--tight-transfers"] if p.tight_transfers else []),
        f"--ops {p.ops}",
        f"--faults '{','.join(p.faults)}'",
        f"--max-parallel-migrations {p.max_parallel_migrations}",
        f"--max-voters {p.max_voters}",
        f"--drop-rate {p.drop_rate}",
        f"--duplicate-rate {p.duplicate_rate}",
    ]
    return " ".join(parts)


def render(result: SimResult, console: Console, schedule_path: str | None = None) -> None:
    s = result.summary()
    console.print(replay_command(result, schedule_path), markup=False, highlight=False, soft_wrap=True)
    writes = s["writes"]
    console.print(
        f"simulated {s['simulated_ms'] / 1000:.1f} s in {s['wall_seconds']} s wall: {s['events']} events "
        f"({s['events_per_second']}/s), {s['messages_sent']} messages ({s['messages_dropped']} lost)"
    )
    console.print(
        f"writes: {writes['acked']} acknowledged, {writes['maybe']} indeterminate, {writes['failed']} refused; "
        f"{s['reads_checked']} reads checked"
    )
    console.print(
        f"migrations: {s['migrations_finished']} finished, {s['migrations_failed']} rolled back; "
        f"time to safe after faults (ms): {s['time_to_safe_ms'] or '-'}"
    )
    for fault in s["faults"]:
        console.print(f"  fault at {fault}")
    console.print(f"trace {s['trace_hash'][:16]}")
    if result.passed:
        console.print("[green]verdict: PASS[/green]")
    else:
        console.print("[red]verdict: FAIL[/red]")
        for problem in s["problems"]:
            console.print(f"  {problem}")


def seeds_summary(results: list[SimResult]) -> dict[str, Any]:
    failed = [r.seed for r in results if not r.passed]
    return {
        "seeds": len(results),
        "passed": len(results) - len(failed),
        "failed_seeds": failed,
        "events": sum(r.events for r in results),
        "wall_seconds": round(sum(r.wall_seconds for r in results), 2),
    }
