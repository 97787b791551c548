"""``shardgrid local up|down``: a cluster of member processes on 127.0.0.1, in the background.

``up`` starts the members in their own sessions (so a Ctrl-C in the shell that started them does
not reach them), writes their PIDs and addresses to ``<dir>/cluster.json`` and waits until they
formed the cluster; if they do not, it ends what it started and exits 1. ``down`` shuts the cluster
down through a member, then ends any process of the file still alive by its PID (never by name),
after checking that the PID still runs a shardgrid member, and removes the file.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import click

STATE_FILE = "cluster.json"


@dataclass
class LocalMember:
    address: str
    pid: int
    log: str


def port_is_free(port: int) -> bool:
    """Whether a member could listen on ``port`` now (connections it closed lately, in TIME_WAIT,
    do not count: members listen with SO_REUSEADDR)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def member_command(port: int, join: list[str], initial: int, extra: tuple[str, ...], lite: bool = False) -> list[str]:
    """The command line of one member process on 127.0.0.1, with this Python."""
    return [
        sys.executable,
        "-m",
        "shardgrid",
        "member",
        "start",
        "--port",
        str(port),
        "--join",
        ",".join(join),
        "--initial-cluster-size",
        str(initial),
        *(["--lite"] if lite else []),
        *extra,
    ]


def free_port_base(first: int, count: int) -> int:
    """The first port from ``first`` on with ``count`` free ports in a row on 127.0.0.1."""
    base = first
    while not all(port_is_free(port) for port in range(base, base + count)):
        base += count
    return base


def loopback_addresses(first_port: int, count: int) -> list[str]:
    """``count`` addresses on 127.0.0.1 whose ports are free now, from ``first_port`` on."""
    base = free_port_base(first_port, count)
    return [f"127.0.0.1:{port}" for port in range(base, base + count)]


def start_member(
    directory: Path, port: int, join: list[str], initial: int, extra: tuple[str, ...], lite: bool = False
) -> LocalMember:
    log = directory / f"member-{port}.log"
    command = member_command(port, join, initial, extra, lite)
    with log.open("ab") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    return LocalMember(f"127.0.0.1:{port}", process.pid, str(log))


def is_our_member(pid: int) -> bool:
    """Whether ``pid`` still runs a shardgrid member (a PID can be reused once its process ended)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"shardgrid" in command and b"member" in command and b"start" in command


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A child of ours that exited stays a zombie until reaped; it is not alive.
    try:
        status = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (OSError, IndexError):
        return True
    return status != "Z"


def end(pids: list[int], grace_s: float) -> None:
    """SIGTERM, then SIGKILL what is still running after ``grace_s``; only our members."""
    ours = [pid for pid in pids if is_our_member(pid)]
    for pid in ours:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(pid) for pid in ours):
        time.sleep(0.1)
    for pid in ours:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def read_state(directory: Path) -> list[LocalMember]:
    path = directory / STATE_FILE
    try:
        document = json.loads(path.read_text())
        return [LocalMember(**item) for item in document["members"]]
    except FileNotFoundError:
        return []
    except (ValueError, KeyError, TypeError) as error:
        raise click.ClickException(f"{path} is not a shardgrid local cluster file ({error})") from None


def write_state(directory: Path, members: list[LocalMember], cluster_name: str = "shardgrid") -> None:
    """PIDs, addresses and the cluster name (never the secret: ``down`` reads it from the
    environment, as ``up`` did)."""
    path = directory / STATE_FILE
    document = {"cluster_name": cluster_name, "members": [asdict(member) for member in members]}
    path.write_text(json.dumps(document, indent=2))


def read_cluster_name(directory: Path) -> str:
    try:
        return str(json.loads((directory / STATE_FILE).read_text()).get("cluster_name", "shardgrid"))
    except (OSError, ValueError, AttributeError):
        return "shardgrid"


@dataclass(frozen=True)
class Access:
    """How a client gets into the local cluster: its name and secret, as the members have them."""

    cluster_name: str = "shardgrid"
    cluster_secret: str | None = None

    @classmethod
    def of(cls, assignments: tuple[str, ...]) -> Access:
        """From the same sources the members read (``--set`` and ``SHARDGRID_*``); exits 2 on a bad one."""
        from shardgrid.cli.member_command import assigned_keys, flags_of
        from shardgrid.runtime.settings import SettingsError, load_settings

        options = {"assignments": assignments}
        try:
            settings = load_settings(None, os.environ, flags_of(options), assigned_keys(options))
        except SettingsError as error:
            raise click.UsageError(str(error)) from None
        return cls(settings.process.cluster_name, settings.process.cluster_secret)


@click.group()
def local() -> None:
    """A cluster of member processes on 127.0.0.1 in the background."""


@local.command("up")
@click.option(
    "--members",
    "count",
    type=click.IntRange(1, 32),
    default=3,
    show_default=True,
    help="How many member processes to start (a count).",
)
@click.option(
    "--base-port",
    type=click.IntRange(1024, 65000),
    default=5701,
    show_default=True,
    help="The first member's port; the others take the ports after it.",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".shardgrid/local"),
    help="Where the members' logs, pids and settings go.  [default: .shardgrid/local]",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds to wait for the cluster to form.",
)
@click.option(
    "--persist",
    is_flag=True,
    help="Each member keeps its state in DIR/data-PORT: `local up --persist` again after a crash or "
    "`local down --kill` brings the same members back with their data.",
)
@click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE", help="A setting for every member.")
def local_up(
    count: int, base_port: int, directory: Path, timeout_s: float, persist: bool, assignments: tuple[str, ...]
) -> None:
    """Start COUNT members and wait until they formed the cluster; prints their addresses."""
    from shardgrid.client.errors import ShardgridClientError

    if any(assignment.partition("=")[0].strip().replace("-", "_") == "cluster_secret" for assignment in assignments):
        # Found by an outside tester: `down` could not shut such a cluster down (the secret is
        # never written to the state file), and flags show in every process list.
        raise click.UsageError("give the secret in $SHARDGRID_CLUSTER_SECRET, not --set: `local down` reads it there")
    access = Access.of(assignments)
    directory.mkdir(parents=True, exist_ok=True)
    running = [member for member in read_state(directory) if alive(member.pid) and is_our_member(member.pid)]
    if running:
        raise click.ClickException(
            f"a local cluster already runs from {directory} ({', '.join(m.address for m in running)}): "
            "`shardgrid local down` first"
        )
    ports = list(range(base_port, base_port + count))
    taken = [port for port in ports if not port_is_free(port)]
    if taken:
        raise click.ClickException(f"ports {taken} are taken on 127.0.0.1: choose another --base-port")
    addresses = [f"127.0.0.1:{port}" for port in ports]
    extra = tuple(item for assignment in assignments for item in ("--set", assignment))

    def data_dir(port: int) -> tuple[str, ...]:
        return ("--data-dir", str(directory / f"data-{port}")) if persist else ()

    members = [start_member(directory, port, addresses, count, (*extra, *data_dir(port))) for port in ports]
    write_state(directory, members, access.cluster_name)
    try:
        wait_until_formed(members, timeout_s, directory, access)
    except (ShardgridClientError, click.ClickException) as error:
        end([m.pid for m in members], grace_s=2)
        (directory / STATE_FILE).unlink(missing_ok=True)
        message = error.format_message() if isinstance(error, click.ClickException) else str(error)
        raise click.ClickException(f"{message}; stopped the members it started") from None
    click.echo(f"{count} members up: {','.join(addresses)} (logs in {directory})")
    click.echo(f"export SHARDGRID_MEMBERS={','.join(addresses)}")


def wait_until_formed(
    members: list[LocalMember], timeout_s: float, directory: Path, access: Access | None = None
) -> None:
    """Until every member is active in one cluster with a leader (members take a moment to
    listen, then ``bootstrap_after_ms`` to form it, then an election)."""
    from shardgrid.client import Client
    from shardgrid.client.errors import ClusterUnavailableError

    access = access or Access()
    addresses = [m.address for m in members]
    deadline = time.monotonic() + timeout_s
    reason = "not asked yet"
    while time.monotonic() < deadline:
        exited = [m.address for m in members if not alive(m.pid)]
        if exited:
            raise click.ClickException(f"{', '.join(exited)} exited; see the logs in {directory}")
        try:
            with Client(
                addresses,
                access.cluster_name,
                cluster_secret=access.cluster_secret,
                connect_timeout_ms=1_000,
                operation_call_timeout_ms=5_000,
            ) as client:
                status = client.cluster_status()
                replies = status.replies.values()
                formed = len(status.members) == len(members) and all(r.lifecycle == "active" for r in replies)
                if formed and status.leader:  # and it elected its leader: it takes commands
                    return
                reason = f"{len(status.members)} of {len(members)} members in the cluster"
        except ClusterUnavailableError as error:
            reason = str(error)
        time.sleep(0.3)
    raise click.ClickException(f"the members did not form a cluster within {timeout_s:g} s ({reason})")


@local.command("down")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".shardgrid/local"),
    help="The folder `local up` used.  [default: .shardgrid/local]",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds to wait for the members to stop.",
)
def local_down(directory: Path, timeout_s: float) -> None:
    """Shut the local cluster down and end its processes."""
    from shardgrid.client import Client
    from shardgrid.client.errors import ShardgridClientError

    members = read_state(directory)
    if not members:
        click.echo(f"no local cluster in {directory}")
        return
    live = [m for m in members if alive(m.pid) and is_our_member(m.pid)]
    if live:
        try:
            with Client(
                [m.address for m in live],
                read_cluster_name(directory),
                cluster_secret=Access.of(()).cluster_secret,
                connect_timeout_ms=2_000,
                operation_call_timeout_ms=10_000,
            ) as client:
                client.shutdown_cluster()
        except ShardgridClientError as error:
            click.echo(f"the cluster did not shut down by itself ({error}); ending its processes", err=True)
    end([m.pid for m in members], grace_s=timeout_s)
    (directory / STATE_FILE).unlink(missing_ok=True)
    click.echo(f"stopped {len(live)} members")
