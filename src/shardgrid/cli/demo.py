"""``shardgrid demo``: the README's main job, on real member processes on 127.0.0.1.

Three members form a cluster; 200,000 entries are loaded through the client; one member is
SIGKILLed and the cluster repairs itself; every entry is checked; a new member joins and the
cluster rebalances; every entry is checked again; the cluster shuts down gracefully. Whatever
happens (a failed step, Ctrl-C), every process it started is ended by its PID before it returns.
It exits 1 when an entry is lost or a step does not finish in time.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from shardgrid.cli.local_cluster import (
    LocalMember,
    alive,
    end,
    free_port_base,
    start_member,
    wait_until_formed,
    write_state,
)
from shardgrid.cli.watch import WatchResult, watch_until_safe
from shardgrid.client import Client
from shardgrid.client.errors import ShardgridClientError

BATCH_ENTRIES = 10_000
PAYLOAD = "x" * 80  # with the id and msgpack's framing, about 100 bytes a value
STEP_TIMEOUT_S = 180.0


@dataclass
class DemoReport:
    entries: int = 0
    load_s: float = 0.0
    steps: list[tuple[str, WatchResult]] = field(default_factory=list)
    lost: dict[str, int] = field(default_factory=dict)  # per verification

    @property
    def ok(self) -> bool:
        return all(result.safe for _, result in self.steps) and not any(self.lost.values())


def _value(i: int) -> dict[str, object]:
    return {"id": i, "payload": PAYLOAD}


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}[/bold]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=console,
    )


def _load(client: Client, entries: int, console: Console) -> float:
    users = client.get_map("users")
    started = time.monotonic()
    with _progress(console) as progress:
        task = progress.add_task("loading", total=entries, rate="")
        for first in range(0, entries, BATCH_ENTRIES):
            last = min(first + BATCH_ENTRIES, entries)
            users.put_all({f"user-{i}": _value(i) for i in range(first, last)})
            rate = last / max(time.monotonic() - started, 1e-3)
            progress.update(task, completed=last, rate=f"{rate:,.0f} entries/s")
    return time.monotonic() - started


def _verify(client: Client, entries: int, console: Console, title: str) -> int:
    """Entries missing or wrong."""
    users = client.get_map("users")
    lost = 0
    started = time.monotonic()
    with _progress(console) as progress:
        task = progress.add_task(title, total=entries, rate="")
        for first in range(0, entries, BATCH_ENTRIES):
            last = min(first + BATCH_ENTRIES, entries)
            keys = [f"user-{i}" for i in range(first, last)]
            found = users.get_all(keys)
            lost += sum(1 for i, key in zip(range(first, last), keys, strict=True) if found.get(key) != _value(i))
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


def run_demo(entries: int, console: Console, workdir: Path | None = None) -> DemoReport:
    directory = Path(workdir or tempfile.mkdtemp(prefix="shardgrid-demo-"))
    directory.mkdir(parents=True, exist_ok=True)
    base = free_port_base(5701, 4)
    addresses = [f"127.0.0.1:{port}" for port in range(base, base + 4)]
    founders = addresses[:3]
    started: list[LocalMember] = []
    report = DemoReport(entries=entries)
    try:
        console.print(f"[bold]starting 3 members[/bold] on {', '.join(founders)} (logs in {directory})")
        for address in founders:
            started.append(start_member(directory, int(address.rpartition(":")[2]), founders, 3, ()))
        write_state(directory, started)  # which processes it started, for anyone checking after it
        wait_until_formed(started, 60, directory)
        with Client(founders, operation_call_timeout_ms=120_000) as client:
            client.wait_until_safe(60)
            report.load_s = _load(client, entries, console)
            report.steps.append(
                ("loaded, backups in sync", watch_until_safe(client, STEP_TIMEOUT_S, console, "syncing"))
            )
            victim = started[1]
            console.print(f"[bold red]SIGKILL[/bold red] {victim.address} (pid {victim.pid})")
            os.kill(victim.pid, signal.SIGKILL)
            report.steps.append(("after the crash", watch_until_safe(client, STEP_TIMEOUT_S, console, "repairing")))
            report.lost["after the crash"] = _verify(client, entries, console, "verifying")
            joiner = addresses[3]
            console.print(f"[bold]a new member joins[/bold] at {joiner}")
            started.append(start_member(directory, int(joiner.rpartition(":")[2]), founders, 3, ()))
            write_state(directory, started)
            _wait_for_member(client, joiner, STEP_TIMEOUT_S)
            report.steps.append(("after the join", watch_until_safe(client, STEP_TIMEOUT_S, console, "rebalancing")))
            report.lost["after the join"] = _verify(client, entries, console, "verifying")
            console.print("[bold]shutting the cluster down[/bold]")
            client.shutdown_cluster()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(alive(member.pid) for member in started):
            time.sleep(0.1)
        return report
    finally:
        end([member.pid for member in started if alive(member.pid)], grace_s=2)


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
    loaded = f"{report.entries:,} entries loaded in {report.load_s:.1f} s ({rate:,.0f} entries/s)"
    console.print(f"{loaded}; entries lost: {total_lost}")


@click.command()
@click.option("--entries", type=click.IntRange(1, 10_000_000), default=200_000, show_default=True)
@click.option("--dir", "workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the members' logs go (a new temporary directory by default).")  # fmt: skip
def demo(entries: int, workdir: Path | None) -> None:
    """A 3-member cluster on 127.0.0.1: load, SIGKILL a member, repair, verify, a member joins,
    rebalance, verify, shut down; exits 1 if an entry is lost or a step does not finish."""
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
    except ShardgridClientError as error:
        console.print(f"[red]demo failed[/red]: {type(error).__name__}: {error} (every member it started was ended)")
        raise SystemExit(1) from None
    render_report(report, console)
    if not report.ok:
        raise SystemExit(1)
