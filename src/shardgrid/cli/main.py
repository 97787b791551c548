"""Entry point of the ``shardgrid`` command."""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console

from shardgrid import __version__
from shardgrid.cli.bench_plan import run_plan_bench
from shardgrid.cli.plan_report import render, summarize
from shardgrid.cli.scenario import ScenarioSpec, run_scenario
from shardgrid.core.errors import ConfigError
from shardgrid.core.limits import DEFAULT_MAX_PARALLEL_MIGRATIONS, DEFAULT_PARTITION_COUNT


@click.group()
@click.version_option(__version__, prog_name="shardgrid")
def cli() -> None:
    """shardgrid: a distributed in-memory data grid with safe partition migrations."""


@cli.command()
@click.option("--members", type=int, default=3, show_default=True, help="Data members before the change.")
@click.option("--add", type=int, default=0, show_default=True, help="Members that join.")
@click.option("--remove", type=int, default=0, show_default=True, help="Members that leave gracefully.")
@click.option("--crash", type=int, default=0, show_default=True, help="Members that crash.")
@click.option("--partitions", type=int, default=DEFAULT_PARTITION_COUNT, show_default=True)
@click.option("--backups", type=int, default=1, show_default=True, help="Backup replicas per partition.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for identities and placement.")
@click.option("--max-parallel-migrations", type=int, default=DEFAULT_MAX_PARALLEL_MIGRATIONS, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def plan(
    members: int,
    add: int,
    remove: int,
    crash: int,
    partitions: int,
    backups: int,
    seed: int,
    max_parallel_migrations: int,
    as_json: bool,
) -> None:
    """Show what the master would do after a membership change: migrations, balance, schedule."""
    spec = ScenarioSpec(members, add, remove, crash, partitions, backups, seed, max_parallel_migrations)
    try:
        summary = summarize(run_scenario(spec))
    except ConfigError as error:
        raise click.UsageError(str(error)) from error
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        render(summary, Console())


@cli.group()
def bench() -> None:
    """Benchmarks that print JSON figures and exit non-zero when a target is missed."""


@bench.command("plan")
@click.option("--repeats", type=click.IntRange(1, 20), default=3, show_default=True)
def bench_plan(repeats: int) -> None:
    """Time repartition + plan + schedule at 271/3, 20,000/10 and 20,000/200 (partitions/members)."""
    report = run_plan_bench(repeats)
    click.echo(json.dumps(report, indent=2))
    if not report["target"]["met"]:
        click.echo(f"target missed: {report['target']['what']}", err=True)
        sys.exit(1)


def main() -> None:
    cli()
