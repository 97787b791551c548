"""The PNG figures of ``shardgrid bench report``, seed 003's benchmark plots at this machine's scale.

Per scenario: latency over time (p50, p99 and p99.9 per second, GET above SET as the seed plots
them separately, on a log scale because a migration's p99.9 can be hundreds of times the steady
p50) with migration periods shaded; and migrations completed over time, cumulative. matplotlib's
Agg backend is chosen before pyplot is imported, so no display is needed or touched.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # after the backend is chosen
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from shardgrid.spark.bench_report import COMPLETION_BUCKET_S, BenchFigures, MigrationPeriod

SHADE = {"color": "tab:orange", "alpha": 0.25, "linewidth": 0}
LINES = (("p50_ms", "p50", "tab:green"), ("p99_ms", "p99", "tab:blue"), ("p999_ms", "p99.9", "tab:red"))
DPI = 100


def _shade(axes: Axes, periods: list[MigrationPeriod]) -> None:
    for index, period in enumerate(periods):
        # A period shorter than a pixel would vanish: it is drawn at least 0.05 s wide.
        end_s = max(period.end_s, period.start_s + 0.05)
        axes.axvspan(period.start_s, end_s, label="migrating" if index == 0 else None, **SHADE)


def _file_name(scenario: str, what: str) -> str:
    """The scenario's name when it is a safe, short file name; otherwise a safe prefix and a hash of
    the whole name (found by an outside tester: "a b", "a/b" and "a_b" all wrote a_b-latency.png, and
    a long name overflowed the file system's limit after the whole job)."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_" for c in scenario)
    if safe != scenario or len(safe) > 64:
        safe = f"{safe[:48]}-{hashlib.sha256(scenario.encode()).hexdigest()[:10]}"
    return f"{safe}-{what}.png"


def latency_plot(figures: BenchFigures, scenario: str, out: Path) -> Path:
    """p50/p99/p99.9 per second for GET and SET, the second's value drawn across the second."""
    periods = [p for p in figures.periods if p.scenario == scenario]
    figure, axes = plt.subplots(2, 1, sharex=True, figsize=(10, 6.5))
    try:
        for ax, op in zip(axes, ("get", "set"), strict=True):
            rows = [r for r in figures.seconds if r.scenario == scenario and r.op == op]
            _shade(ax, periods)
            seconds = [r.second for r in rows]
            for field, label, color in LINES:
                values = [getattr(r, field) for r in rows]
                # steps-post over one extra point so the last second is drawn across too
                ax.plot([*seconds, seconds[-1] + 1] if rows else [], [*values, values[-1]] if rows else [],
                        drawstyle="steps-post", color=color, label=label)  # fmt: skip
            ax.set_yscale("log")
            ax.set_ylabel(f"{op.upper()} latency (ms)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(loc="upper left", fontsize="small")
        axes[-1].set_xlabel("seconds since the first sample")
        figure.suptitle(f"{scenario}: latency per second, migration periods shaded")
        return _save(figure, out / _file_name(scenario, "latency"))
    finally:
        plt.close(figure)


def migrations_plot(figures: BenchFigures, scenario: str, out: Path) -> Path:
    """Migrations finished so far, by completion bucket, across the whole run (flat where none)."""
    periods = [p for p in figures.periods if p.scenario == scenario]
    buckets = [b for b in figures.completions if b.scenario == scenario]
    figure, ax = plt.subplots(figsize=(10, 3.5))
    try:
        _shade(ax, periods)
        times_s, totals = [0.0], [0]
        for bucket in buckets:  # counted at the bucket's end: finished by then
            times_s.append(bucket.start_s + COMPLETION_BUCKET_S)
            totals.append(totals[-1] + bucket.finished)
        times_s.append(max(figures.span_s.get(scenario, 0.0), times_s[-1]))
        totals.append(totals[-1])
        ax.plot(times_s, totals, drawstyle="steps-post", color="tab:purple", label="finished")
        ax.set_xlabel("seconds since the first sample")
        ax.set_ylabel("migrations finished")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", fontsize="small")
        ax.set_title(f"{scenario}: migrations completed over time")
        return _save(figure, out / _file_name(scenario, "migrations"))
    finally:
        plt.close(figure)


def _save(figure: Figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    return path


def write_plots(figures: BenchFigures, scenarios: list[str], out: Path) -> list[Path]:
    written: list[Path] = []
    for scenario in scenarios:
        written.append(latency_plot(figures, scenario, out))
        written.append(migrations_plot(figures, scenario, out))
    return written
