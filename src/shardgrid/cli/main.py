"""Entry point of the ``shardgrid`` command."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from shardgrid import __version__
from shardgrid.cli.backup_commands import COMMANDS as BACKUP_COMMANDS
from shardgrid.cli.bench_cluster import headline as cluster_headline
from shardgrid.cli.bench_cluster import run_cluster_bench
from shardgrid.cli.bench_member import headline as member_headline
from shardgrid.cli.bench_member import run_member_bench
from shardgrid.cli.bench_plan import headline as plan_headline
from shardgrid.cli.bench_plan import run_plan_bench
from shardgrid.cli.bench_results import conclude
from shardgrid.cli.bench_sim import headline as sim_headline
from shardgrid.cli.bench_sim import run_sim_bench
from shardgrid.cli.cluster_commands import COMMANDS as CLUSTER_COMMANDS
from shardgrid.cli.config_report import render_json, render_text
from shardgrid.cli.member_command import assigned_keys, flags_of, member, settings_options
from shardgrid.cli.pipeline import checked_spark_master, pipeline
from shardgrid.cli.plan_report import render, summarize
from shardgrid.cli.scenario import ScenarioSpec, run_scenario
from shardgrid.cli.sim_report import render as render_sim
from shardgrid.cli.sim_report import seeds_summary
from shardgrid.core.errors import ConfigError
from shardgrid.core.limits import DEFAULT_MAX_PARALLEL_MIGRATIONS, DEFAULT_PARTITION_COUNT
from shardgrid.runtime.settings import SettingsError, load_settings
from shardgrid.sim.schedule import check_schedule, load_schedule
from shardgrid.sim.vopr import FAULTS, SimParams, params_of, run_seed


@click.group()
@click.version_option(__version__, prog_name="shardgrid")
def cli() -> None:
    """shardgrid: a distributed in-memory data grid with safe partition migrations."""


@cli.command()
@click.option(
    "--members", type=int, default=3, show_default=True, help="How many data members before the change (a count)."
)
@click.option("--add", type=int, default=0, show_default=True, help="Members that join.")
@click.option("--remove", type=int, default=0, show_default=True, help="Members that leave gracefully.")
@click.option("--crash", type=int, default=0, show_default=True, help="Members that crash.")
@click.option(
    "--partitions", type=int, default=DEFAULT_PARTITION_COUNT, show_default=True, help="Partitions in the table."
)
@click.option("--backups", type=int, default=1, show_default=True, help="Backup replicas per partition.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for identities and placement.")
@click.option(
    "--max-parallel-migrations",
    type=int,
    default=DEFAULT_MAX_PARALLEL_MIGRATIONS,
    show_default=True,
    help="Migrations one member takes part in at once, for the schedule.",
)
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
    """Show what the leader would do after a membership change: migrations, balance, schedule."""
    spec = ScenarioSpec(
        members=members,
        add=add,
        remove=remove,
        crash=crash,
        partitions=partitions,
        backups=backups,
        seed=seed,
        max_parallel_migrations=max_parallel_migrations,
    )
    try:
        summary = summarize(run_scenario(spec))
    except ConfigError as error:
        raise click.UsageError(str(error)) from error
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        render(summary, Console())


@cli.command()
@click.option("--seed", type=int, default=None, help="The run's seed; the same seed replays it.  [default: 1]")
@click.option(
    "--seeds",
    type=click.IntRange(1, 100_000),
    default=1,
    show_default=True,
    help="Run this many seeds, from --seed on, and summarize.",
)
@click.option(
    "--members", type=click.IntRange(1, 50), default=None, help="How many members at the start (a count).  [default: 5]"
)
@click.option(
    "--partitions", type=click.IntRange(1, 100_000), default=None, help=f"[default: {DEFAULT_PARTITION_COUNT}]"
)
@click.option("--backups", type=click.IntRange(0, 6), default=None, help="[default: 1]")
@click.option(
    "--async-backups",
    type=click.IntRange(0, 6),
    default=None,
    help="Half the keys go to a map with these async backups after the sync ones.  [default: 0]",
)
@click.option(
    "--at-least-once",
    is_flag=True,
    default=None,
    help="Clients retry a write whose outcome is unknown instead of ending it as indeterminate.",
)
@click.option(
    "--no-fragments",
    is_flag=True,
    default=None,
    help="Migrations and syncs send a partition at once instead of a window of chunks at a time.",
)
@click.option(
    "--tight-transfers",
    is_flag=True,
    default=None,
    help="One record per chunk, one chunk in flight, tiny held-run bounds, anti-entropy every 2 s.",
)
@click.option("--ops", type=click.IntRange(0, 10_000_000), default=None, help="[default: 2000]")
@click.option(
    "--faults",
    default=None,
    help=f"Comma-separated random faults, from: {', '.join(FAULTS)} (empty for none).  "
    "[default: crash,leader-crash,join,split; none with --schedule]",
)
@click.option(
    "--schedule",
    "schedule_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="A TOML or JSON fault schedule (see the README); --faults adds random faults on top.",
)
@click.option("--max-parallel-migrations", type=click.IntRange(1, 1000), default=None, help="[default: 10]")
@click.option("--max-voters", type=click.IntRange(1, 9), default=None, help="[default: 5]")
@click.option("--drop-rate", type=click.FloatRange(0, 0.5), default=None, help="[default: 0.01]")
@click.option("--duplicate-rate", type=click.FloatRange(0, 0.5), default=None, help="[default: 0.01]")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def sim(
    seed: int | None,
    seeds: int,
    members: int | None,
    partitions: int | None,
    backups: int | None,
    async_backups: int | None,
    at_least_once: bool | None,
    no_fragments: bool | None,
    tight_transfers: bool | None,
    ops: int | None,
    faults: str | None,
    schedule_path: str | None,
    max_parallel_migrations: int | None,
    max_voters: int | None,
    drop_rate: float | None,
    duplicate_rate: float | None,
    as_json: bool,
) -> None:
    """Run the deterministic simulator: a cluster, a workload, faults; exits 1 on a FAIL verdict."""
    schedule = None
    base = SimParams()
    if schedule_path is not None:
        try:
            schedule = load_schedule(schedule_path)
            schedule_seed, base = params_of(schedule)
        except ConfigError as error:
            raise click.UsageError(str(error)) from error
        seed = seed if seed is not None else schedule_seed
    chosen = base.faults if faults is None else tuple(f.strip() for f in faults.split(",") if f.strip())
    unknown = [f for f in chosen if f not in FAULTS]
    if unknown:
        raise click.UsageError(f"unknown fault(s) {', '.join(unknown)}; choose from {', '.join(FAULTS)}")
    overrides = {
        "members": members,
        "partitions": partitions,
        "backups": backups,
        "async_backups": async_backups,
        "fail_on_indeterminate": False if at_least_once else None,
        "fragments": False if no_fragments else None,
        "tight_transfers": True if tight_transfers else None,
        "ops": ops,
        "max_parallel_migrations": max_parallel_migrations,
        "max_voters": max_voters,
        "drop_rate": drop_rate,
        "duplicate_rate": duplicate_rate,
    }
    params = replace(base, faults=chosen, **{k: v for k, v in overrides.items() if v is not None})
    if schedule is not None:
        # The schedule against the run as given here (--members may differ from the file's):
        # a bad one is a usage error (exit 2) before anything runs, not a traceback.
        try:
            check_schedule(
                schedule, members=params.members, partitions=params.partitions, random_joins="join" in params.faults
            )
        except ConfigError as error:
            given = f" (--members {members} given)" if members is not None else ""
            raise click.UsageError(f"{error}{given}") from error
    first = seed if seed is not None else 1
    results = []
    console = Console(soft_wrap=True)
    for run in range(seeds):
        result = run_seed(first + run, params, schedule)
        results.append(result)
        if as_json and seeds == 1:
            click.echo(json.dumps(result.summary(), indent=2))
        elif seeds == 1:
            render_sim(result, console, schedule_path)
        else:
            status = "PASS" if result.passed else "FAIL " + "; ".join(result.problems[:2])
            click.echo(f"seed {result.seed}: {status}")
    if seeds > 1:
        click.echo(json.dumps(seeds_summary(results), indent=2))
    if not all(r.passed for r in results):
        sys.exit(1)


record_option = click.option(
    "--record",
    is_flag=True,
    help="Also keep the run in benchmarks/results/ (the manual's benchmarks page shows the latest).",
)


@cli.group()
def bench() -> None:
    """Benchmarks that print JSON figures and exit non-zero when a target is missed."""


@bench.command("plan")
@click.option(
    "--repeats", type=click.IntRange(1, 20), default=3, show_default=True, help="Runs of each case; the best counts."
)
@record_option
def bench_plan(repeats: int, record: bool) -> None:
    """Time repartition + plan + schedule at 271/3, 20,000/10 and 20,000/200 (partitions/members)."""
    report = run_plan_bench(repeats)
    conclude("plan", report, plan_headline(report), record)


@bench.command("sim")
@click.option(
    "--partitions",
    type=click.IntRange(1, 100_000),
    default=20_000,
    show_default=True,
    help="Partitions of the crash-repair and leader-crash runs.",
)
@click.option(
    "--members",
    type=click.IntRange(2, 50),
    default=10,
    show_default=True,
    help="How many members those runs have (a count).",
)
@click.option("--parallel", default="1,5,10,20", show_default=True, help="max_parallel_migrations values.")
@record_option
def bench_sim(partitions: int, members: int, parallel: str, record: bool) -> None:
    """Simulator events/s, and simulated time to safe after a crash at seed 003's scale."""
    values = tuple(int(v) for v in parallel.split(",") if v.strip())
    report = run_sim_bench(partitions, members, values)
    conclude("sim", report, sim_headline(report), record)


@bench.command("member")
@click.option(
    "--migration-entries",
    type=click.IntRange(1_000, 1_000_000),
    default=100_000,
    show_default=True,
    help="Entries of the partition the migration figure moves.",
)
@click.option(
    "--handle-partitions",
    type=click.IntRange(271, 100_000),
    default=20_000,
    show_default=True,
    help="Partitions of the cluster whose slowest handle() is timed.",
)
@record_option
def bench_member(migration_entries: int, handle_partitions: int, record: bool) -> None:
    """The data path through the real codec: put_all, get_all, single put, migration, slowest handle()."""
    report = run_member_bench(migration_entries=migration_entries, handle_partitions=handle_partitions)
    conclude("member", report, member_headline(report), record)


@bench.command("engine")
@record_option
def bench_engine(record: bool) -> None:
    """The storage engine alone against today's dicts: one boundary call, put and get of 1,000 x 100-byte values
    (store only, and through the codec), memory per entry."""
    from shardgrid.cli.bench_engine import headline, run_engine_bench

    report = run_engine_bench()
    conclude("engine", report, headline(report), record)


@bench.command("disk")
@click.option(
    "--entries",
    type=click.IntRange(1_000, 10_000_000),
    default=1_000_000,
    show_default=True,
    help="Entries written as a snapshot and loaded back into the engine.",
)
@record_option
def bench_disk(entries: int, record: bool) -> None:
    """The two shapes of a member's disk on this machine: our own log of checksummed records against SQLite
    (appends with and without a sync per batch, one synced write, bytes per entry, a snapshot loaded back into
    the engine). Exits 1 when loading 1,000,000 entries would take over 3 s."""
    from shardgrid.cli.bench_disk import headline, run_disk_bench

    report = run_disk_bench(entries)
    conclude("disk", report, headline(report), record)


@bench.command("persist")
@click.option(
    "--batches",
    type=click.IntRange(10, 100_000),
    default=200,
    show_default=True,
    help="put_all batches of 1,000 entries in each write-rate run (twice as many through the power cut).",
)
@click.option(
    "--restart-entries",
    type=click.IntRange(1_000, 10_000_000),
    default=1_000_000,
    show_default=True,
    help="Entries of 100 bytes the restarted member holds.",
)
@click.option(
    "--rolling-entries",
    type=click.IntRange(1_000, 10_000_000),
    default=300_000,
    show_default=True,
    help="Entries of 100 bytes the three members of the rolling restart hold.",
)
@record_option
def bench_persist(batches: int, restart_entries: int, rolling_entries: int, record: bool) -> None:
    """Members with a data directory: batched put_all with every write synced against the in-memory rate,
    every member SIGKILLed during a load and restarted (acknowledged writes lost), the seconds until a
    restarted member serves its entries, and the records a rolling restart moves. Exits 1 below 30% of the
    in-memory rate (70% with fsync = every_ms), on a loss, when a member of 1,000,000 entries takes over 3 s
    to serve again, or when the rolling restart moves 5% or more of what re-replicating the members would."""
    from shardgrid.cli.bench_persist import headline, run_persist_bench

    report = run_persist_bench(batches, restart_entries, rolling_entries)
    conclude("persist", report, headline(report), record)


@bench.command("memory")
@click.option(
    "--limit-mb",
    type=click.IntRange(16, 4_096),
    default=48,
    show_default=True,
    help="Each member's max_memory_bytes, in MiB.",
)
@record_option
def bench_memory(limit_mb: int, record: bool) -> None:
    """Member processes with a small max_memory_bytes written past it: an LRU map evicts, a NONE map
    refuses, then a member is SIGKILLed while full and two join; refused writes, evictions, peak RSS
    against the limit, acknowledged writes lost. Exits 1 on a loss, a member that died, or no recovery."""
    from shardgrid.cli.bench_memory import headline, run_memory_bench

    report = run_memory_bench(limit_mb)
    conclude("memory", report, headline(report), record)


SCENARIOS = ("scale-up", "scale-up-backup-0", "scale-down", "crash")


@bench.command("cluster")
@click.option(
    "--entries",
    type=click.IntRange(1_000, 10_000_000),
    default=1_000_000,
    show_default=True,
    help="Entries of 100 bytes loaded before each scenario.",
)
@click.option(
    "--scenario",
    "scenarios",
    type=click.Choice(SCENARIOS),
    multiple=True,
    help="Run only these (repeatable); all four by default.",
)
@click.option(
    "--samples",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("bench-cluster-samples.jsonl"),
    show_default=True,
    help="Every latency sample and migration event, as JSON lines (for bench report).",
)
@record_option
def bench_cluster(entries: int, scenarios: tuple[str, ...], samples: Path, record: bool) -> None:
    """Member processes on 127.0.0.1: client throughput and latency, then scale up 3->4 (backups 1
    and 0), scale down 4->3 and a crash of one of 4 with ENTRIES loaded; exits 1 when a target is
    missed."""
    report = run_cluster_bench(entries, list(scenarios or SCENARIOS), samples)
    conclude("cluster", report, cluster_headline(report), record)


@bench.command("pipeline")
@click.option(
    "--rows",
    type=click.IntRange(1_000, 100_000_000),
    default=1_000_000,
    show_default=True,
    help="Rows written, loaded and exported per round.",
)
@record_option
def bench_pipeline(rows: int, record: bool) -> None:
    """Spark: load and export ROWS rows through the data source beside Parquet write and read and a
    sink that discards rows; JSON; exits 1 when a target is missed."""
    from shardgrid.cli.bench_pipeline import headline, run_pipeline_bench

    report = run_pipeline_bench(rows)
    conclude("pipeline", report, headline(report), record)


@bench.command("report")
@click.option(
    "--samples",
    type=click.Path(path_type=Path),
    default=Path("bench-cluster-samples.jsonl"),
    show_default=True,
    help="The samples file `bench cluster --samples` wrote.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench-report"),
    show_default=True,
    help="Folder for summary.json, per_second.csv, migrations_completed.csv and the PNGs.",
)
@click.option(
    "--spark-master", default=None, callback=checked_spark_master, help="A Spark master URL (default: local[2])."
)
def bench_report(samples: Path, out: Path, spark_master: str | None) -> None:
    """Spark over a `bench cluster` samples file: GET and SET p50/p99/p99.9 per second, migration
    periods marked, steady against migrating; prints the JSON summary, writes it, a CSV per second
    and PNG plots into OUT, and names the files on stderr. Exits 1 on a missing, empty or malformed
    file (naming the line)."""
    from shardgrid.cli.bench_samples import SamplesError, check_samples

    try:
        check = check_samples(samples)
    except SamplesError as error:
        click.echo(f"bench report: {error}", err=True)
        sys.exit(1)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        click.echo(f"bench report: --out {out}: {error.strerror or error}", err=True)
        sys.exit(1)
    try:
        from shardgrid.cli.bench_report import run_bench_report
        from shardgrid.spark.session import start_session_or_end_jvm
    except ImportError as error:
        click.echo(f"bench report needs the spark extra (pip install 'shardgrid[spark]'): {error}", err=True)
        sys.exit(1)
    from shardgrid.spark.jobs import failure_reason
    from shardgrid.spark.session import SparkUnavailableError

    try:
        spark = start_session_or_end_jvm(spark_master, "shardgrid bench report")
    except SparkUnavailableError as error:
        click.echo(f"bench report: {error}", err=True)
        sys.exit(1)
    except Exception as error:  # the JVM did not start, or the master could not be reached
        click.echo(f"bench report: Spark did not start: {failure_reason(error)}", err=True)
        sys.exit(1)
    try:
        summary, files = run_bench_report(spark, samples, check, out)
    except Exception as error:  # Spark's, a JVM trace around the reason
        click.echo(f"bench report failed: {failure_reason(error)}", err=True)
        sys.exit(1)
    finally:
        spark.stop()
    click.echo(json.dumps(summary, indent=2))
    if check.migrations == 0:
        click.echo("bench report: no migration events in the file: every second counted as steady", err=True)
    for path in files:
        click.echo(f"wrote {path}", err=True)


@cli.group()
def config() -> None:
    """A member's settings: defaults, a TOML file, SHARDGRID_* environment variables, flags."""


@config.command("show")
@settings_options
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="A table, or one JSON object.",
)
def config_show(config_path: Path | None, output_format: str, **options: Any) -> None:
    """Print the effective settings (with the flags ``member start`` takes) and where each came
    from; exits 2 on a bad setting."""
    try:
        settings = load_settings(config_path, os.environ, flags_of(options), assigned_keys(options))
    except SettingsError as error:
        click.echo(str(error), err=True)
        sys.exit(2)
    click.echo(render_json(settings) if output_format == "json" else render_text(settings))


cli.add_command(member)
cli.add_command(pipeline)
for command in (*CLUSTER_COMMANDS, *BACKUP_COMMANDS):
    cli.add_command(command)


def main() -> None:
    cli()
