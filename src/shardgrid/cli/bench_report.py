"""``shardgrid bench report``: the files of one report, out of the figures the Spark job computed.

The summary compares, per scenario and operation, the latency of the seconds that overlap a
migration period with that of every other second. ``bench cluster``'s own "steady" is only the
3 s before the change and its "during" runs until the cluster is safe; this report's phases come
from the migration notices instead, so the two sets of numbers differ by design.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from shardgrid.cli.bench_plots import write_plots
from shardgrid.cli.bench_samples import SamplesCheck
from shardgrid.spark.bench_report import (
    COMPLETION_BUCKET_S,
    PERCENTILE_ACCURACY,
    BenchFigures,
    PhaseLatency,
    analyze,
)

OPS = ("get", "set")


def _latency(phase: PhaseLatency | None) -> dict[str, Any] | None:
    if phase is None:
        return None
    return {
        "count": phase.count,
        "p50_ms": round(phase.p50_ms, 3),
        "p99_ms": round(phase.p99_ms, 3),
        "p999_ms": round(phase.p999_ms, 3),
    }


def _ratio(during: PhaseLatency | None, steady: PhaseLatency | None) -> float | None:
    if during is None or steady is None or steady.p99_ms <= 0:
        return None
    return round(during.p99_ms / steady.p99_ms, 2)


def scenario_summary(figures: BenchFigures, scenario: str) -> dict[str, Any]:
    """One scenario's figures: its migration periods and, per operation, steady against migrating."""
    periods = [p for p in figures.periods if p.scenario == scenario]
    seconds = {(r.second, r.migrating) for r in figures.seconds if r.scenario == scenario}
    summary: dict[str, Any] = {
        "seconds_sampled": round(figures.span_s[scenario], 2),
        "migration_periods": [
            {
                "start_s": round(p.start_s, 3),
                "end_s": round(p.end_s, 3),
                "duration_s": round(p.duration_s, 3),
                "finished": p.finished,
                "failed": p.failed,
                "unfinished": p.unfinished,
            }
            for p in periods
        ],
        "seconds_migrating": round(sum(p.duration_s for p in periods), 3),
        "migrations_finished": sum(p.finished for p in periods),
        "migrations_failed": sum(p.failed for p in periods),
        "migrations_unfinished": sum(p.unfinished for p in periods),
        "steady_seconds": sum(1 for _, migrating in seconds if not migrating),
        "migration_seconds": sum(1 for _, migrating in seconds if migrating),
    }
    for op in OPS:
        phases = {p.phase: p for p in figures.phases if p.scenario == scenario and p.op == op}
        summary[op] = {
            "steady": _latency(phases.get("steady")),
            "migration": _latency(phases.get("migration")),
            "p99_migration_over_steady": _ratio(phases.get("migration"), phases.get("steady")),
        }
    return summary


def _write_per_second(figures: BenchFigures, path: Path) -> Path:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["scenario", "second", "op", "count", "p50_ms", "p99_ms", "p999_ms", "migrating"])
        for r in figures.seconds:
            writer.writerow(
                [r.scenario, r.second, r.op, r.count, f"{r.p50_ms:.4f}", f"{r.p99_ms:.4f}", f"{r.p999_ms:.4f}",
                 str(r.migrating).lower()]
            )  # fmt: skip
    return path


def _write_completions(figures: BenchFigures, path: Path) -> Path:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["scenario", "bucket_start_s", "bucket_s", "finished", "finished_so_far"])
        totals: dict[str, int] = {}
        for b in figures.completions:
            totals[b.scenario] = totals.get(b.scenario, 0) + b.finished
            writer.writerow([b.scenario, f"{b.start_s:.3f}", COMPLETION_BUCKET_S, b.finished, totals[b.scenario]])
    return path


def run_bench_report(
    spark: SparkSession, samples: Path, check: SamplesCheck, out: Path
) -> tuple[dict[str, Any], list[Path]]:
    """The summary and the files written into ``out``: summary.json, per_second.csv,
    migrations_completed.csv and two PNGs per scenario."""
    out.mkdir(parents=True, exist_ok=True)
    figures = analyze(spark, str(samples.resolve()))
    summary: dict[str, Any] = {
        "samples_file": str(samples),
        "lines": check.lines,
        "samples": check.samples,
        "migration_events": check.migrations,
        "percentiles": f"Spark percentile_approx, accuracy {PERCENTILE_ACCURACY:,} (a sample within a rank or so "
        "of the nearest-rank value)",
        "scenarios": {scenario: scenario_summary(figures, scenario) for scenario in check.scenarios},
    }
    files = [
        _write_per_second(figures, out / "per_second.csv"),
        _write_completions(figures, out / "migrations_completed.csv"),
        *write_plots(figures, check.scenarios, out),
    ]
    summary_path = out / "summary.json"
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    return summary, [summary_path, *files]
