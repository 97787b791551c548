"""``shardgrid backup`` and ``shardgrid restore``: a copy of a running cluster's data in a
directory, and that copy written into a cluster (see ``client.backup``)."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import click

from shardgrid.cli.cluster_commands import EXIT_REFUSED, client_options, with_client
from shardgrid.client.backup import BackupError, check_backup


def _progress(line: str) -> None:
    click.echo(line, err=True)


def _interrupted(_signal: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _refused(error: BackupError) -> None:
    click.echo(f"refused: {error}", err=True)
    sys.exit(EXIT_REFUSED)


@click.command()
@click.option("--to", "directory", type=click.Path(path_type=Path), required=True, help="A new directory.")
@click.option("--map", "maps", multiple=True, help="Copy this map only (again for more; default: every map).")
@click.option(
    "--pause-writes",
    is_flag=True,
    help="Serve reads only (PASSIVE) while the copy runs, so that every partition is copied at one point.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
@client_options
def backup(directory: Path, maps: tuple[str, ...], pause_writes: bool, as_json: bool, **options: Any) -> None:
    """Copy the cluster's data into a new directory, while it runs: each partition of each map at
    one point of its writes (with --pause-writes, all at one point). The directory appears only once
    the copy is whole; `shardgrid restore --from` writes it into a cluster. Progress goes to stderr."""

    # SIGTERM as Ctrl-C: the backup is cancelled, the cluster given its state back and the
    # unfinished directory removed before the command ends (exit 1).
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        manifest = with_client(
            options, lambda client: client.backup(directory, maps=maps, pause_writes=pause_writes, progress=_progress)
        )
    except BackupError as error:
        _refused(error)
        return
    except KeyboardInterrupt:
        click.echo("interrupted: the backup was given up (the cluster has its state back)", err=True)
        sys.exit(EXIT_REFUSED)
    document = manifest.document()
    if as_json:
        click.echo(json.dumps(document, indent=2))
        return
    records = sum(copy.records for copy in manifest.maps)
    click.echo(
        f"backed up {len(manifest.maps)} maps, {records:,} records of {manifest.partition_count} partitions to "
        f"{directory} in {(manifest.finished_at_ms - manifest.taken_at_ms) / 1000:.1f} s"
    )


@click.command()
@click.option(
    "--from",
    "directory",
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    required=True,
    help="A backup's directory.",
)
@click.option("--map", "maps", multiple=True, help="Restore this map only (again for more; default: every map).")
@click.option("--merge", is_flag=True, help="Write into maps that hold entries already (the backup's win).")
@click.option("--check", "check_only", is_flag=True, help="Only check the backup whole; write nothing.")
@client_options
def restore(directory: Path, maps: tuple[str, ...], merge: bool, check_only: bool, **options: Any) -> None:
    """Write a backup into the cluster (a new one, say; its partition count may differ): every
    file is checked first, and nothing is written from a damaged backup. Each record keeps the time
    it had left to live; an expired one is left out. Without --merge, a map that holds entries
    already is refused. Exits 1 when refused."""
    if check_only:
        try:
            manifest = check_backup(directory, maps)
        except BackupError as error:
            _refused(error)
            return
        records = sum(copy.records for copy in manifest.maps)
        click.echo(f"{directory}: a whole backup of {len(manifest.maps)} maps, {records:,} records")
        return

    try:
        report = with_client(
            options, lambda client: client.restore(directory, maps=maps, merge=merge, progress=_progress)
        )
    except BackupError as error:
        _refused(error)
        return
    written = sum(report.maps.values())
    click.echo(
        f"restored {len(report.maps)} maps, {written:,} records in {report.seconds:.1f} s "
        f"({report.expired:,} expired, left out)"
    )


COMMANDS = (backup, restore)
