"""What every benchmark ends with: its targets, checked one way; the report printed as JSON; with
``--record`` the run kept as a results file in the checkout's ``benchmarks/results/``, one per
run, from which the manual's benchmarks page is generated; and exit code 1 when a target is missed.

The results directory is the repository's, wherever the command runs: run from another folder,
``--record`` wrote ``./benchmarks/results`` there, stamped with that folder's git commit (found by
an outside tester). Outside a checkout (an installed package) it refuses, saying so."""

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

RESULTS_DIR = Path("benchmarks") / "results"  # under the repository's root
# The checkout this module runs from: src/shardgrid/cli/bench_results.py -> the repository.
_CHECKOUT = Path(__file__).resolve().parents[3]
MAX_SAME_NAME_RUNS = 1_000  # runs recorded in one microsecond, at most (a bound, never reached)
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


def repository_root() -> Path | None:
    """The shardgrid checkout this code runs from, or None when it is installed outside one."""
    root = _CHECKOUT
    is_checkout = (root / "pyproject.toml").is_file() and (root / "src" / "shardgrid").is_dir()
    return root if is_checkout else None


def results_directory() -> Path:
    """The checkout's ``benchmarks/results``; a ``ClickException`` outside a checkout."""
    root = repository_root()
    if root is None:
        raise click.ClickException(
            f"--record keeps runs in the shardgrid checkout's {RESULTS_DIR}/, and this shardgrid is not run "
            f"from a checkout ({_CHECKOUT}): run it from one (PYTHONPATH=CHECKOUT/src, or an editable install)"
        )
    return root / RESULTS_DIR


def _commit(root: Path) -> tuple[str, bool]:
    """``root``'s commit and whether it has uncommitted changes ('unknown' outside git): asked in
    ``root``, not the current folder, which may be another repository."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=root
        ).stdout
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, cwd=root
        )
        return commit.strip(), bool(dirty.stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


def record(bench: str, report: dict[str, Any], figures: dict[str, Any], directory: Path | None = None) -> Path:
    """Write the run to ``directory`` (the checkout's results directory unless given) as
    ``<UTC time to the microsecond>-<bench>.json``, never over another run's file (two runs in one
    second overwrote each other: found by an outside tester), and return its path. The file also
    says when, to the microsecond (``recorded_at_utc``): the page takes the latest by that, not by
    a file name someone may have changed."""
    directory = directory if directory is not None else results_directory()
    now = datetime.now(UTC)
    commit, dirty = _commit(_CHECKOUT)  # the code measured, wherever the command runs
    document = {
        "bench": bench,
        "recorded_at": now.strftime("%Y-%m-%d %H:%M UTC"),
        "recorded_at_utc": now.isoformat(),
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
    stem = f"{now.strftime('%Y%m%dT%H%M%S.%fZ')}-{bench}"
    text = json.dumps(document, indent=2) + "\n"
    for attempt in range(MAX_SAME_NAME_RUNS):
        path = directory / (f"{stem}.json" if attempt == 0 else f"{stem}-{attempt + 1}.json")
        try:
            with path.open("x") as file:  # never another run's file
                file.write(text)
        except FileExistsError:
            continue
        return path
    raise click.ClickException(f"{MAX_SAME_NAME_RUNS} runs named {stem} already in {directory}")


def conclude(bench: str, report: dict[str, Any], figures: dict[str, Any], keep: bool) -> None:
    """Print the report; with ``keep``, record the run; exit 1, naming them, when targets were missed."""
    click.echo(json.dumps(report, indent=2))
    if keep:
        click.echo(f"recorded in {record(bench, report, figures)}", err=True)
    if not report["all_met"]:
        missed = [target["name"] for target in report["targets"] if not target["met"]]
        click.echo(f"targets missed: {', '.join(missed)}", err=True)
        sys.exit(1)
