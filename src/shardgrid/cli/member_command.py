"""``shardgrid member start``: one member process in the foreground, until it stops.

The flags here are settings like any other (``runtime/settings.py``): a flag wins over a
``SHARDGRID_*`` variable, which wins over the TOML file. ``--set key=value`` reaches every setting
that has no flag of its own, by the name the file uses.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from shardgrid.core.errors import CorruptDisk
from shardgrid.runtime import event_loops, logs
from shardgrid.runtime.allocator import keep_freed_memory
from shardgrid.runtime.process import MemberProcess
from shardgrid.runtime.record_file import DiskFailed
from shardgrid.runtime.settings import CONFIG_PATH_ENV, Settings, SettingsError, load_settings

GC_YOUNG_ALLOCATIONS = 50_000  # objects allocated (net) between young collections; CPython says 700

# Flags of their own (the rest go through --set); None means "not given" to the loader.
_FLAG_OPTIONS: list[Callable[[Any], Any]] = [
    click.option("--host", default=None, help="Address to listen on [default: 127.0.0.1]."),
    click.option("--port", type=int, default=None, help="Port to listen on; 0 picks a free one [default: 5701]."),
    click.option("--join", default=None, help="host:port,... of members to join (or to form the cluster with)."),
    click.option("--cluster-name", default=None, help="Only members and clients of this cluster are let in."),
    click.option("--lite", is_flag=True, default=None, help="A lite member: it holds no partitions."),
    click.option(
        "--data-dir", default=None, help="Keep the member's state here; restarted on it, it comes back as itself."
    ),
    click.option("--log-format", type=click.Choice(["text", "json"]), default=None, help="Log lines as text or JSON."),
    click.option("--metrics-port", type=int, default=None, help="Serve Prometheus metrics on this port."),
    click.option("--partition-count", type=int, default=None, help="Partitions of the cluster [default: 271]."),
    click.option("--backup-count", type=int, default=None, help="Sync backups per partition [default: 1]."),
    click.option("--initial-cluster-size", type=int, default=None, help="Members that form a new cluster [3]."),
]


def settings_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """The flags every command that reads a member's settings takes."""
    function = click.option(
        "--set",
        "assignments",
        multiple=True,
        metavar="KEY=VALUE",
        help="Any other setting by its file name, e.g. --set max_parallel_migrations=4.",
    )(function)
    for option in reversed(_FLAG_OPTIONS):
        function = option(function)
    return click.option(
        "--config",
        "config_path",
        type=click.Path(path_type=Path),
        envvar=CONFIG_PATH_ENV,
        default=None,
        help=f"The TOML settings file (or ${CONFIG_PATH_ENV}).",
    )(function)


def assigned_keys(options: dict[str, Any]) -> set[str]:
    """The settings given as ``--set KEY=VALUE``: an error about one says ``--set KEY``."""
    return {assignment.partition("=")[0].strip().replace("-", "_") for assignment in options.get("assignments") or ()}


def flags_of(options: dict[str, Any]) -> dict[str, object]:
    """The loader's flags from the parsed options: by setting name, None where not given."""
    flags: dict[str, object] = {}
    for key, value in options.items():
        if key in ("config_path", "assignments"):
            continue
        flags[key] = value
    for assignment in options.get("assignments") or ():
        key, equals, value = assignment.partition("=")
        key = key.strip().replace("-", "_")
        if not equals or not key:
            raise SettingsError(f"--set {assignment}: expected KEY=VALUE, e.g. --set backup_count=2")
        if key in flags and flags[key] is not None:
            raise SettingsError(f"--set {key}: given twice (once as --{key.replace('_', '-')})", key)
        flags[key] = value  # one that is not a setting: the loader names it and suggests the closest
    return flags


@click.group()
def member() -> None:
    """Run a member process."""


@member.command("start")
@settings_options
def member_start(config_path: Path | None, **options: Any) -> None:
    """Start a member in the foreground; SIGTERM or Ctrl-C leaves the cluster gracefully (the
    member hands its replicas over first), a second one stops at once. Exits 0 once it left (or the
    cluster shut down), 1 when stopped before leaving, unable to listen or refused its data_dir, 2
    on a bad setting, 74 when its data_dir refused a write or a sync, 70 on an internal error (see
    the manual's Leaving page)."""
    try:
        settings = load_settings(config_path, os.environ, flags_of(options), assigned_keys(options))
    except SettingsError as error:
        click.echo(f"shardgrid member start: {error}", err=True)
        sys.exit(2)
    logger = logs.configure(settings.process.log_format)
    try:
        code = event_loops.run(_run(settings, logger))
    except (CorruptDisk, DiskFailed) as error:  # a data directory it cannot trust or use
        click.echo(f"shardgrid member start: data_dir: {error}", err=True)
        sys.exit(1)
    except OSError as error:  # the port is taken, the host is not ours
        click.echo(
            f"shardgrid member start: cannot listen on {settings.process.host}:{settings.process.port}: "
            f"{error.strerror or error}",
            err=True,
        )
        sys.exit(1)
    sys.exit(code)


async def _run(settings: Settings, logger: logging.Logger) -> int:
    tune_garbage_collector()
    keep_freed_memory()
    process = MemberProcess(settings, logger)
    # Before start(), which logs member-listening and sets the member going: a signal from then on
    # is the member's to decide (found by an outside tester: a SIGTERM just after member-listening
    # killed the process with no member-exit line, as Python's default handler does).
    process.install_signal_handlers()
    await process.start()
    return await process.run()


def tune_garbage_collector() -> None:
    """A member allocates a few container objects per entry it serves (message structs, columns,
    runs), none of them in cycles, and CPython's default young collection every 700 allocations
    showed as 4.5% of a loaded member's profile (py-spy, during a Spark-shaped put_all load).
    Young collections every ``GC_YOUNG_ALLOCATIONS`` instead, and what start-up made (modules,
    settings) frozen out of them. Measured against the default in alternating runs, the members'
    CPU per entry fell 2-6%, about this machine's noise."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_ALLOCATIONS, middle, old)
