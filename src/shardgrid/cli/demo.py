"""``shardgrid demo``: the README's main job, on real member processes on 127.0.0.1 and local Spark.

Three members form a cluster. Spark writes a Parquet file of generated rows; the pipeline's data
source loads it into a map while one member is SIGKILLed, and the cluster repairs itself; an export
through the data source reads the map back and its count and checksum must equal the file's; a new
member joins and the cluster rebalances; the client checks every entry again; every member is
SIGKILLed at once (a power cut) and restarted on its data directory, and every entry is checked
again; the cluster shuts down gracefully. Whatever happens (a failed step, Ctrl-C), every process
it started is ended by its PID before it returns. It exits 1 when an entry is lost or a step does not finish in time.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from shardgrid.cli.local_cluster import (
    LocalMember,
    alive,
    end,
    loopback_addresses,
    read_state,
    start_member,
    wait_until_formed,
    write_state,
)
from shardgrid.cli.watch import ProgressBaseline, WatchResult, watch_until_safe
from shardgrid.client import Client
from shardgrid.client.errors import ShardgridClientError
from shardgrid.spark.jobs import failure_reason, fingerprint, read_map, read_path, rows_missing, write_to_map
from shardgrid.spark.session import start_session_or_end_jvm

MAP = "users"
COLUMNS = ("id", "payload")
SCHEMA = "id long, payload string"
PAYLOAD_FILL = 90  # with the 10-digit id in front, a 100-byte payload
BATCH_ENTRIES = 10_000
STEP_TIMEOUT_S = 180.0
KILL_AT_SHARE = 0.3  # the member is killed once this share of the rows is in the map
POLL_S = 0.05


class DemoError(Exception):
    """A step that could not be done; the message says which and why."""


@contextmanager
def _spark_step(what: str) -> Iterator[None]:
    """Turns a Spark failure (a JVM trace around the data source's message) into one line."""
    try:
        yield
    except (DemoError, ShardgridClientError, click.ClickException):
        raise
    except Exception as error:
        raise DemoError(f"{what}: {failure_reason(error)}") from error


@dataclass(kw_only=True)
class DemoReport:
    entries: int = 0
    load_s: float = 0.0
    killed_at_entries: int = 0  # entries in the map when the member was killed
    steps: list[tuple[str, WatchResult]] = field(default_factory=list)
    lost: dict[str, int] = field(default_factory=dict)  # per verification
    export_matches: bool | None = None  # the export's count and checksum equal the file's

    @property
    def ok(self) -> bool:
        return (
            all(result.safe for _, result in self.steps) and not any(self.lost.values()) and self.export_matches is True
        )


def payload(i: int) -> str:
    """The payload the Spark job generates for row ``i`` (``_generate``'s expression, in Python)."""
    return f"{i:010d}" + "x" * PAYLOAD_FILL


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}[/bold]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=console,
    )


def _generate(spark: Any, entries: int, path: Path, console: Console) -> None:
    started = time.monotonic()
    spark.range(entries).selectExpr(
        "id", f"concat(lpad(cast(id as string), 10, '0'), repeat('x', {PAYLOAD_FILL})) as payload"
    ).write.mode("overwrite").parquet(str(path))
    console.print(f"Spark wrote {entries:,} generated rows to {path} in {time.monotonic() - started:.1f} s")


class _LoadWatch:
    """While the load runs (Spark holds the calling thread): shows how full the map is, and
    SIGKILLs the victim once ``KILL_AT_SHARE`` of the rows are in, noting the counters and time
    the repair is measured from."""

    def __init__(self, client: Client, victim: LocalMember, entries: int, console: Console) -> None:
        self.client, self.victim, self.entries, self.console = client, victim, entries, console
        self.stop = threading.Event()
        self.killed: tuple[ProgressBaseline, float] | None = None
        self.killed_at_entries = 0
        self.error: Exception | None = None
        self.thread = threading.Thread(target=self._run, name="demo-load-watch", daemon=True)

    def kill(self, in_map: int) -> tuple[ProgressBaseline, float]:
        baseline = ProgressBaseline()
        baseline.progress(self.client.cluster_status())
        os.kill(self.victim.pid, signal.SIGKILL)
        self.killed, self.killed_at_entries = (baseline, time.monotonic()), in_map
        self.console.print(
            f"[bold red]SIGKILL[/bold red] {self.victim.address} (pid {self.victim.pid}) "
            f"with {in_map:,} of {self.entries:,} rows in the map"
        )
        return self.killed

    def _run(self) -> None:
        users = self.client.get_map(MAP)
        started = time.monotonic()
        try:
            with _progress(self.console) as progress:
                task = progress.add_task("loading through Spark", total=self.entries, rate="")
                while not self.stop.wait(POLL_S):
                    in_map = users.size()
                    if self.killed is None and in_map >= self.entries * KILL_AT_SHARE:
                        self.kill(in_map)
                    rate = in_map / max(time.monotonic() - started, 1e-3)
                    progress.update(task, completed=in_map, rate=f"{rate:,.0f} rows/s")
                progress.update(task, completed=users.size())
        except Exception as error:  # shown by the caller, after the load
            self.error = error


def _load_while_killing(
    spark: Any, client: Client, options: dict[str, str], source: Path, victim: LocalMember, report: DemoReport,
    console: Console,
) -> tuple[ProgressBaseline, float]:  # fmt: skip
    watch = _LoadWatch(client, victim, report.entries, console)
    watch.thread.start()
    try:
        with _spark_step("the load through the data source failed"):
            written = write_to_map(spark.read.parquet(read_path(source)), options, MAP, "id")
    finally:
        watch.stop.set()
        watch.thread.join()
    if watch.error is not None:
        raise DemoError(f"watching the load: {type(watch.error).__name__}: {watch.error}")
    report.load_s = written.seconds
    console.print(
        f"loaded {written.rows:,} rows, {written.data_bytes / 1e6:,.1f} MB through the data source "
        f"in {written.seconds:.1f} s ({written.rows / max(written.seconds, 1e-3):,.0f} rows/s)"
    )
    killed = watch.killed
    if killed is None:  # a load too quick for the watch to see: the crash comes after it
        console.print("the load finished before the kill: the member is killed now")
        killed = watch.kill(client.get_map(MAP).size())
    report.killed_at_entries = watch.killed_at_entries
    return killed


@dataclass(frozen=True, slots=True)
class ExportCheck:
    missing: int  # rows of the loaded file with no equal row in the export: lost entries
    matches: bool  # count and checksum equal the file's (false too when the export has rows too many)


def _export_and_compare(spark: Any, options: dict[str, str], source: Path, out: Path, console: Console) -> ExportCheck:
    """Exports the map to Parquet through the data source and compares it with the loaded file."""
    started = time.monotonic()
    with console.status("exporting the map through the data source"), _spark_step("the export failed"):
        read_map(spark, options, MAP, "id", "long", SCHEMA).write.mode("overwrite").parquet(str(out))
        seconds = time.monotonic() - started
        expected = spark.read.parquet(read_path(source))
        exported = spark.read.parquet(read_path(out))
        want, got = fingerprint(expected, COLUMNS), fingerprint(exported, COLUMNS)
        missing = rows_missing(expected, exported, COLUMNS)
    console.print(
        f"exported {got.rows:,} rows to {out} in {seconds:.1f} s; count and checksum: "
        f"file {want.rows:,} / {want.checksum:#x}, export {got.rows:,} / {got.checksum:#x}: "
        + ("[green]equal[/green]" if want == got else f"[red]different[/red], {missing:,} rows missing")
    )
    return ExportCheck(missing=missing, matches=want == got)


def _verify(client: Client, entries: int, console: Console, title: str) -> int:
    """Entries missing or wrong, read through the client (keys and values as the data source wrote them)."""
    users = client.get_map(MAP, key_type=int)  # the data source wrote the long column's values as int keys
    lost = 0
    started = time.monotonic()
    with _progress(console) as progress:
        task = progress.add_task(title, total=entries, rate="")
        for first in range(0, entries, BATCH_ENTRIES):
            last = min(first + BATCH_ENTRIES, entries)
            found = users.get_all(list(range(first, last)))
            lost += sum(1 for i in range(first, last) if found.get(i) != {"payload": payload(i)})
            rate = last / max(time.monotonic() - started, 1e-3)
            progress.update(task, completed=last, rate=f"{rate:,.0f} entries/s, {lost} lost")
    return lost


def _wait_for_member(client: Client, address: str, timeout_s: float) -> None:
    """Until the cluster lists ``address`` (a joiner is admitted a moment after it starts)."""
    deadline = time.monotonic() + timeout_s
    while address not in client.cluster_status().members:
        if time.monotonic() > deadline:
            raise click.ClickException(f"{address} did not join within {timeout_s:g} s")
        time.sleep(0.2)


def _data_dir(directory: Path, address: str) -> tuple[str, ...]:
    """The flags that give the member at ``address`` its data directory (its state on disk)."""
    return ("--data-dir", str(directory / f"data-{address.rpartition(':')[2]}"))


def _start_members(directory: Path, founders: list[str], started: list[LocalMember]) -> None:
    """Starts the founders and waits until they formed a cluster; ``started`` gets each process as
    soon as it exists, so that the caller ends it whatever happens."""
    for address in founders:
        port = int(address.rpartition(":")[2])
        started.append(start_member(directory, port, founders, 3, _data_dir(directory, address)))
    write_state(directory, started)  # which processes it started, for anyone checking after it
    wait_until_formed(started, 60, directory)


def _power_cut(
    directory: Path, running: list[LocalMember], addresses: list[str], started: list[LocalMember], console: Console
) -> None:
    """Every running member SIGKILLed at once, then each started again on its data directory: it
    comes back as itself with what it held (nothing it acknowledged was only in memory)."""
    console.print(
        f"[bold red]SIGKILL[/bold red] every member at once ({', '.join(m.address for m in running)}), "
        "then each restarted from its data directory"
    )
    for member in running:
        os.kill(member.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(member.pid) for member in running):
        time.sleep(0.05)
    restarted = []
    for member in running:
        port = int(member.address.rpartition(":")[2])
        restarted.append(start_member(directory, port, addresses, 3, _data_dir(directory, member.address)))
    started.extend(restarted)
    write_state(directory, started)
    wait_until_formed(restarted, STEP_TIMEOUT_S, directory)


def run_demo(entries: int, console: Console, workdir: Path | None = None) -> DemoReport:
    directory = Path(workdir or tempfile.mkdtemp(prefix="shardgrid-demo-"))
    directory.mkdir(parents=True, exist_ok=True)
    if any(alive(member.pid) for member in read_state(directory)):
        # Found by an outside tester: the demo overwrote a running cluster's file, and `local down`
        # then stopped none of its members.
        raise click.ClickException(f"--dir {directory} holds a running cluster (`local down --dir` ends it)")
    addresses = loopback_addresses(5701, 4)
    founders = addresses[:3]
    started: list[LocalMember] = []
    report = DemoReport(entries=entries)
    spark: Any = None
    try:
        console.print(f"[bold]starting 3 members[/bold] on {', '.join(founders)} (logs in {directory})")
        # A JVM takes seconds to start: the members form meanwhile. Spark stays on this thread,
        # because it finds a Python data source through the calling thread's active session.
        with ThreadPoolExecutor(1, thread_name_prefix="demo-members") as starter:
            formed = starter.submit(_start_members, directory, founders, started)
            with console.status("starting Spark (local[2])"), _spark_step("Spark did not start"):
                spark = start_session_or_end_jvm(app_name="shardgrid demo")
            formed.result()
        with Client(founders, operation_call_timeout_ms=120_000) as client:
            client.wait_until_safe(60)
            options = {"cluster.members": ",".join(founders)}
            source = directory / "rows.parquet"
            with _spark_step("writing the generated rows failed"):
                _generate(spark, entries, source, console)
            killed = _load_while_killing(spark, client, options, source, started[1], report, console)
            report.steps.append(
                ("after the crash", watch_until_safe(client, STEP_TIMEOUT_S, console, "repairing", since=killed))
            )
            check = _export_and_compare(spark, options, source, directory / "export.parquet", console)
            report.lost["after the crash"], report.export_matches = check.missing, check.matches
            joiner = addresses[3]
            console.print(f"[bold]a new member joins[/bold] at {joiner}")
            started.append(
                start_member(directory, int(joiner.rpartition(":")[2]), founders, 3, _data_dir(directory, joiner))
            )
            write_state(directory, started)
            _wait_for_member(client, joiner, STEP_TIMEOUT_S)
            report.steps.append(("after the join", watch_until_safe(client, STEP_TIMEOUT_S, console, "rebalancing")))
            report.lost["after the join"] = _verify(client, entries, console, "verifying")
        _power_cut(directory, [member for member in started if alive(member.pid)], addresses, started, console)
        with Client(addresses, operation_call_timeout_ms=120_000) as client:
            report.steps.append(
                ("after the power cut", watch_until_safe(client, STEP_TIMEOUT_S, console, "restarting"))
            )
            report.lost["after the power cut"] = _verify(client, entries, console, "verifying")
            console.print("[bold]shutting the cluster down[/bold]")
            client.shutdown_cluster()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(alive(member.pid) for member in started):
            time.sleep(0.1)
        return report
    finally:
        end([member.pid for member in started if alive(member.pid)], grace_s=2)
        if spark is not None:
            spark.stop()


def render_report(report: DemoReport, console: Console) -> None:
    table = Table(title="shardgrid demo", show_edge=False)
    table.add_column("step")
    table.add_column("safe", justify="right")
    table.add_column("time to safe", justify="right")
    table.add_column("migrations", justify="right")
    table.add_column("entries moved", justify="right")
    table.add_column("chunks resent", justify="right")
    table.add_column("entries lost", justify="right")
    for step, result in report.steps:
        lost = report.lost.get(step)
        table.add_row(
            step,
            "yes" if result.safe else f"no: {result.reason}",
            f"{result.seconds:.1f} s",
            str(result.migrations),
            f"{result.entries_moved:,}",
            str(result.chunks_resent),
            "" if lost is None else str(lost),
        )
    console.print(table)
    rate = report.entries / report.load_s if report.load_s else 0
    total_lost = sum(report.lost.values())
    console.print(
        f"{report.entries:,} rows loaded through the Spark data source in {report.load_s:.1f} s "
        f"({rate:,.0f} rows/s), a member SIGKILLed with {report.killed_at_entries:,} in the map; "
        f"the export's count and checksum {'equal' if report.export_matches else 'DIFFER from'} the file's; "
        "every member SIGKILLed at once and restarted from its data directory"
    )
    console.print(f"entries lost: {total_lost}")


@click.command()
@click.option(
    "--entries",
    type=click.IntRange(1, 10_000_000),
    default=200_000,
    show_default=True,
    help="Rows Spark generates and loads.",
)
@click.option("--dir", "workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the members' logs go (a new temporary directory by default).")  # fmt: skip
def demo(entries: int, workdir: Path | None) -> None:
    """A 3-member cluster on 127.0.0.1 and local Spark: Spark writes generated rows to Parquet, the
    data source loads them while a member is SIGKILLed, the cluster repairs, an export is compared
    with the file, a member joins, rebalance, verify; then every member is SIGKILLed at once and
    restarted from its data directory, verify, shut down; exits 1 if an entry is lost or a step
    does not finish."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=120)  # piped or captured: no terminal width to fit
    try:
        report = run_demo(entries, console, workdir)
    except KeyboardInterrupt:
        console.print("interrupted: every member it started was ended")
        raise SystemExit(130) from None
    except click.ClickException as error:
        console.print(f"[red]demo failed[/red]: {error.format_message()} (every member it started was ended)")
        raise SystemExit(1) from None
    except DemoError as error:
        console.print(f"[red]demo failed[/red]: {error} (every process it started was ended)")
        raise SystemExit(1) from None
    except ShardgridClientError as error:
        console.print(f"[red]demo failed[/red]: {type(error).__name__}: {error} (every member it started was ended)")
        raise SystemExit(1) from None
    render_report(report, console)
    if not report.ok:
        raise SystemExit(1)
