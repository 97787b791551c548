"""What every benchmark ends with: its targets, checked one way; the report printed as JSON; with
``--record`` the run kept as a results file in ``benchmarks/results/``, one per run, from which the
manual's benchmarks page is generated; and exit code 1 when a target is missed."""

from __future__ import annotations

import json
import operator
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

RESULTS_DIR = Path("benchmarks") / "results"
COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """One figure a benchmark must reach: ``measured`` ``comparison`` ``wanted``."""

    name: str  # a stable key: the figure's name in the report
    figure: str  # what it is, for a reader
    measured: float | int | bool
    comparison: str
    wanted: float | int | bool

    @property
    def met(self) -> bool:
        return COMPARISONS[self.comparison](self.measured, self.wanted)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "figure": self.figure,
            "measured": self.measured,
            "comparison": self.comparison,
            "target": self.wanted,
            "met": self.met,
        }


def with_targets(report: dict[str, Any], targets: Sequence[Target]) -> dict[str, Any]:
    """``report`` with its targets, each checked, and whether all were met."""
    report["targets"] = [target.as_json() for target in targets]
    report["all_met"] = all(target.met for target in targets)
    return report


def target_named(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(target for target in report["targets"] if target["name"] == name)


def _commit() -> tuple[str, bool]:
    """The checkout's commit and whether it has uncommitted changes ('unknown' outside git)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
        return commit.strip(), bool(dirty.stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


def record(bench: str, report: dict[str, Any], figures: dict[str, Any], directory: Path = RESULTS_DIR) -> Path:
    """Write the run to ``directory`` as ``<UTC time>-<bench>.json`` and return its path."""
    now = datetime.now(UTC)
    commit, dirty = _commit()
    document = {
        "bench": bench,
        "recorded_at": now.strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "dirty": dirty,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "system": f"{platform.system()} {platform.machine()}",
        },
        "command": "shardgrid " + " ".join(sys.argv[1:]),
        "exit_code": 0 if report["all_met"] else 1,
        "targets": report["targets"],
        "figures": figures,
        "report": report,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{now.strftime('%Y%m%dT%H%M%SZ')}-{bench}.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path


def conclude(bench: str, report: dict[str, Any], figures: dict[str, Any], keep: bool) -> None:
    """Print the report; with ``keep``, record the run; exit 1, naming them, when targets were missed."""
    click.echo(json.dumps(report, indent=2))
    if keep:
        click.echo(f"recorded in {record(bench, report, figures)}", err=True)
    if not report["all_met"]:
        missed = [target["name"] for target in report["targets"] if not target["met"]]
        click.echo(f"targets missed: {', '.join(missed)}", err=True)
        sys.exit(1)
