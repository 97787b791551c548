"""The commands that talk to a running cluster through the client: status, safe, state, promote,
shutdown, map. Each exits non-zero when what it was asked cannot be done: 1 when the cluster said
no or did not answer in time, 2 on bad arguments, 3 when no member could be reached."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from shardgrid.cli.demo import demo
from shardgrid.cli.local_cluster import local
from shardgrid.cli.watch import WatchResult, watch_until_safe
from shardgrid.client import Client
from shardgrid.client.errors import (
    AuthenticationError,
    ClusterUnavailableError,
    OperationTimeoutError,
    ShardgridClientError,
)
from shardgrid.client.status import ClusterStatus
from shardgrid.core import messages as m
from shardgrid.core.limits import MAX_MEMBER_COUNT, MAX_TTL_SECONDS
from shardgrid.runtime.settings import is_address

T = TypeVar("T")
MEMBERS_ENV = "SHARDGRID_MEMBERS"
EXIT_REFUSED = 1
EXIT_UNREACHABLE = 3
MAX_TIMEOUT_S = 7 * 24 * 3600.0
SHUTDOWN_TIMEOUT_S = 600.0  # shutdown ADDRESS without --timeout


def client_options(function: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option(
            "--members",
            envvar=MEMBERS_ENV,
            default="127.0.0.1:5701",
            show_default=True,
            help=f"Addresses of members to ask, host:port,... (or ${MEMBERS_ENV}).",
        ),
        click.option(
            "--cluster-name",
            envvar="SHARDGRID_CLUSTER_NAME",
            default="shardgrid",
            show_default=True,
            help="The cluster's name (or $SHARDGRID_CLUSTER_NAME).",
        ),
        click.option(
            "--cluster-secret",
            envvar="SHARDGRID_CLUSTER_SECRET",
            default=None,
            help="The cluster's secret (better: $SHARDGRID_CLUSTER_SECRET, kept out of the process list).",
        ),
        click.option(
            "--tls-ca-file",
            type=click.Path(dir_okay=False),
            default=None,
            help="Speak TLS, trusting members whose certificate this CA signed (PEM).",
        ),
        click.option(
            "--tls-cert-file",
            type=click.Path(dir_okay=False),
            default=None,
            help="This client's certificate (PEM), for members that require one.",
        ),
        click.option(
            "--tls-key-file", type=click.Path(dir_okay=False), default=None, help="The private key of --tls-cert-file."
        ),
        click.option(
            "--timeout", "timeout_s", type=float, default=30.0, show_default=True, help="Seconds for the whole command."
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def parse_members(text: str) -> list[str]:
    members = [address.strip() for address in text.split(",") if address.strip()]
    if not members:
        raise click.UsageError("--members: give at least one member as host:port")
    for address in members:
        if not is_address(address):
            raise click.UsageError(f"--members: expected host:port with a port 1..65535, got {address!r}")
    return members


def with_client(options: dict[str, Any], action: Callable[[Client], T]) -> T:
    members = parse_members(str(options["members"]))
    timeout_s = options["timeout_s"]
    if not (math.isfinite(timeout_s) and 0 < timeout_s <= MAX_TIMEOUT_S):
        raise click.UsageError(
            f"--timeout: expected seconds, more than 0 and at most {MAX_TIMEOUT_S:g}, got {timeout_s}"
        )
    timeout_ms = max(1, int(timeout_s * 1000))
    try:
        with Client(
            members,
            options["cluster_name"],
            cluster_secret=options["cluster_secret"],
            tls_ca_file=options["tls_ca_file"],
            tls_cert_file=options["tls_cert_file"],
            tls_key_file=options["tls_key_file"],
            operation_call_timeout_ms=timeout_ms,
            attempt_timeout_ms=min(timeout_ms, 10_000),
            connect_timeout_ms=min(timeout_ms, 5_000),
        ) as client:
            return action(client)
    except AuthenticationError as error:
        click.echo(f"refused: {error}", err=True)
        sys.exit(EXIT_UNREACHABLE)
    except ClusterUnavailableError as error:
        click.echo(f"unreachable: {error}", err=True)
        sys.exit(EXIT_UNREACHABLE)
    except (ShardgridClientError, ValueError) as error:
        click.echo(f"failed: {error}", err=True)
        sys.exit(EXIT_REFUSED)


def status_document(status: ClusterStatus) -> dict[str, Any]:
    members = []
    for address in status.members:
        reply = status.replies.get(address)
        if reply is None:
            members.append({"address": address, "reachable": False, "error": status.unreachable.get(address, "")})
            continue
        members.append(
            {
                "address": address,
                "reachable": True,
                "uuid": reply.uuid,
                "role": "leader" if address == status.leader else ("lite" if reply.lite else "member"),
                "lifecycle": reply.lifecycle,
                "leaving": address in reply.leaving_members,
                "owned_partitions": reply.owned_partitions,
                "backup_replicas": reply.backup_replicas,
                "migrations_here": reply.migrations_here,
                "syncs_in_flight": reply.syncs_in_flight,
                "writes_awaiting_backups": reply.writes_awaiting_backups,
                "entries": reply.entries,
                "memory_bytes": reply.memory_bytes,
                "max_memory_bytes": reply.max_memory_bytes,
                "entries_evicted": reply.entries_evicted,
                "entries_migrated": reply.entries_migrated,
                "entries_synced": reply.entries_synced,
                "maps": {u.map_name: {"entries": u.entries, "memory_bytes": u.memory_bytes} for u in reply.maps},
                "applied_index": reply.applied_index,
                "quiet": reply.quiet,
                "persistent": reply.persistent,
                "disk_bytes": reply.disk_bytes,
                "disk_free_bytes": reply.disk_free_bytes if reply.disk_free_bytes >= 0 else None,
                "unsynced_writes": reply.unsynced_writes,
                "sync_lag_ms": reply.sync_lag_ms,
                "disk_full": reply.disk_full,
            }
        )
    leader = status.replies.get(status.leader)
    return {
        "leader": status.leader or None,
        "cluster_state": leader.cluster_state.value if leader else None,
        "partition_count": leader.partition_count if leader else None,
        "migrations_planned": leader.migrations_planned if leader else None,
        "migrations_running": leader.migrations_in_log if leader else None,
        "migrations_finished": leader.migrations_finished if leader else None,
        "missing_replicas": leader.missing_replicas if leader else None,
        "unavailable_partitions": leader.unavailable_partitions if leader else None,
        "unreachable_members": list(leader.unreachable_members) if leader else [],
        "awaited_members": list(leader.awaited_members) if leader else [],
        "safe": status.safe,
        "unsafe_reason": status.unsafe_reason or None,
        "members": members,
    }


STATUS_COLUMNS = (
    "member",
    "role",
    "lifecycle",
    "owned partitions",
    "backup replicas",
    "migrating",
    "syncing",
    "awaiting acks",
    "entries",
    "memory",
    "evicted",
)


def _render_maps(console: Console, members: list[dict[str, Any]]) -> None:
    """Each map's entries and memory over the members that answered (every replica counted)."""
    totals: dict[str, list[int]] = {}
    for member in members:
        for name, usage in member.get("maps", {}).items():
            total = totals.setdefault(name, [0, 0, 0])
            total[0] += usage["entries"]
            total[1] += usage["memory_bytes"]
            total[2] += 1
    if not totals:
        return
    table = Table(show_edge=False)
    for column in ("map", "entries (every copy)", "memory", "members"):
        table.add_column(column, justify="left" if column == "map" else "right")
    for name in sorted(totals):
        entries, memory, holders = totals[name]
        table.add_row(name, str(entries), f"{memory / 2**20:.1f} MiB", str(holders))
    console.print(table)


def _memory_cell(used_bytes: int, limit_bytes: int) -> str:
    """Records' memory, and its share of the member's limit when it has one."""
    used = f"{used_bytes / 2**20:.1f} MiB"
    if not limit_bytes:
        return used
    return f"{used} of {limit_bytes / 2**20:.0f} MiB ({100 * used_bytes / limit_bytes:.0f}%)"


def _disk_cell(member: dict[str, Any]) -> str:
    """A persistent member's data directory: its files' size, FULL while the member refuses
    writes for want of room, and the sync lag while a write waits ('-' when not persistent)."""
    if not member.get("persistent"):
        return "-"
    cell = f"{member['disk_bytes'] / 2**20:.1f} MiB"
    if member["disk_full"]:
        cell += " FULL"
    if member["unsynced_writes"]:
        cell += f", lag {member['sync_lag_ms']} ms"
    return cell


def render_status(document: dict[str, Any]) -> None:
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # piped or captured: no terminal width to fit
    table = Table(title=None, show_edge=False)
    # The words of the JSON and the glossary: owned partitions (an owner's), lifecycle (a text
    # said "primaries" and "state" for them: found by an outside tester).
    persistent = any(member.get("persistent") for member in document["members"])
    columns = (*STATUS_COLUMNS, "disk") if persistent else STATUS_COLUMNS
    for column in columns:
        table.add_column(column, justify="right" if column not in ("member", "role", "lifecycle") else "left")
    for member in document["members"]:
        if not member["reachable"]:
            table.add_row(member["address"], "?", f"unreachable: {member['error'][:60]}", *[""] * (len(columns) - 3))
            continue
        lifecycle = member["lifecycle"] + (" (leaving)" if member["leaving"] else "")
        table.add_row(
            member["address"],
            member["role"],
            lifecycle,
            str(member["owned_partitions"]),
            str(member["backup_replicas"]),
            str(member["migrations_here"]),
            str(member["syncs_in_flight"]),
            str(member["writes_awaiting_backups"]),
            str(member["entries"]),
            _memory_cell(member["memory_bytes"], member["max_memory_bytes"]),
            str(member["entries_evicted"]),
            *((_disk_cell(member),) if persistent else ()),
        )
    if document["members"]:
        console.print(table)
    _render_maps(console, document["members"])
    if document["leader"] is None:
        # Nothing to say of the cluster state or the partitions without a leader ("state None
        # partitions None" was printed for a cluster that had not formed).
        console.print("no leader: the cluster has not formed yet, or is electing one")
    else:
        console.print(
            f"leader {document['leader']}  cluster state {document['cluster_state']}  "
            f"partitions {document['partition_count']}  migrations: {document['migrations_planned']} planned, "
            f"{document['migrations_running']} running  missing replicas {document['missing_replicas']}"
        )
    if document["unavailable_partitions"]:
        console.print(
            f"[red]{document['unavailable_partitions']} partitions unavailable[/red]: every replica on members that "
            f"stopped answering ({', '.join(document['unreachable_members'])})"
        )
    if document["awaited_members"]:
        console.print(
            f"[yellow]hot restart[/yellow]: the leader came back from its disk and waits for "
            f"{', '.join(document['awaited_members'])} (their partitions wait too)"
        )
    full = [
        f"{member['address']} ({(member['disk_free_bytes'] or 0) / 2**20:.0f} MiB free)"
        for member in document["members"]
        if member.get("disk_full")
    ]
    if full:
        console.print(
            f"[red]writes refused (DISK_FULL)[/red] by {', '.join(full)}: free space under disk_reserve_bytes plus "
            "room to rewrite what it holds; reads and removes go on"
        )
    if document["safe"]:
        console.print("[green]safe[/green]: every replica in sync, nothing migrating")
    else:
        console.print(f"[yellow]not safe[/yellow]: {document['unsafe_reason']}")


@click.command()
@client_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def status(as_json: bool, **options: Any) -> None:
    """Members, leader, cluster state, partitions and replicas per member, migrations, safe or not."""
    document = status_document(with_client(options, lambda client: client.cluster_status()))
    if as_json:
        click.echo(json.dumps(document, indent=2))
    else:
        render_status(document)


@click.command()
@client_options
@click.option("--wait", "wait_s", type=float, default=0.0, help="Wait up to this many seconds for it to be safe.")
@click.option(
    "--until-members",
    "until_members",
    type=click.IntRange(1, MAX_MEMBER_COUNT),
    default=None,
    help="Safe only once the cluster has this many members (a count): a member restarted in a rolling "
    "restart has joined again, not only the others settled without it.",
)
def safe(wait_s: float, until_members: int | None, **options: Any) -> None:
    """Exit 0 when the cluster is safe now (every replica in sync, nothing migrating; with
    --until-members, that many members), else 1 with the reason; with --wait, wait for it first."""

    if not (math.isfinite(wait_s) and 0 <= wait_s <= MAX_TIMEOUT_S):
        raise click.UsageError(f"--wait: expected seconds, 0 to {MAX_TIMEOUT_S:g}, got {wait_s}")

    def check(client: Client) -> str:
        # Found by an outside tester: a rolling restart that waited on safe alone went on before
        # the restarted member had joined (the others were safe without it), and a crash of the
        # leader then left two of three voters, one of them not yet caught up.
        members = until_members or 0
        if wait_s > 0:
            try:
                client.wait_until_safe(wait_s, members=members)
            except OperationTimeoutError as error:
                return str(error)
            return ""
        status = client.cluster_status()
        return status.unsafe_reason or status.too_few_reason(members)

    options["timeout_s"] = max(options["timeout_s"], wait_s + 10)
    reason = with_client(options, check)
    if reason:
        click.echo(f"not safe: {reason}")
        sys.exit(EXIT_REFUSED)
    click.echo("safe")


@click.command()
@client_options
@click.option("--until-safe", "limit_s", type=float, default=600.0, show_default=True, help="Give up after this long.")
@click.option(
    "--until-members",
    "until_members",
    type=click.IntRange(1, MAX_MEMBER_COUNT),
    default=None,
    help="Also wait until the cluster has this many members (a count): watch a member that is still joining.",
)
def watch(limit_s: float, until_members: int | None, **options: Any) -> None:
    """Show migration progress live (planned, finished, entries and bytes moved, rate, ETA) until
    the cluster is safe, and with --until-members has that many members; exits 1 if it is not
    within --until-safe seconds."""
    options["timeout_s"] = max(options["timeout_s"], limit_s + 10)

    def follow(client: Client) -> WatchResult:
        return watch_until_safe(client, limit_s, Console(), "migrations", until_members=until_members or 0)

    result = with_client(options, follow)
    if not result.safe:
        click.echo(f"not safe after {result.seconds:.0f} s: {result.reason}")
        sys.exit(EXIT_REFUSED)
    click.echo(
        f"safe after {result.seconds:.1f} s: {result.migrations} migrations, {result.entries_moved:,} entries moved"
    )


@click.group()
def state() -> None:
    """The cluster state: active, no-migration (rebalancing paused), frozen, passive."""


@state.command("get")
@client_options
def state_get(**options: Any) -> None:
    """Print the cluster state: active, no-migration, frozen or passive."""
    click.echo(with_client(options, lambda client: client.get_cluster_state()).value)


@state.command("set")
@click.argument("new_state", type=click.Choice(["active", "no-migration", "frozen", "passive"], case_sensitive=False))
@client_options
def state_set(new_state: str, **options: Any) -> None:
    """Change the cluster state (no-migration pauses rebalancing; active resumes it)."""
    with_client(options, lambda client: client.change_cluster_state(new_state))
    click.echo(f"cluster state: {new_state.lower()}")


@click.command()
@click.argument("address")
@client_options
def promote(address: str, **options: Any) -> None:
    """Make the lite member at ADDRESS a data member."""
    with_client(options, lambda client: client.promote(address))
    click.echo(f"{address} is a data member")


@click.command()
@click.argument("address", required=False)
@click.option(
    "--cluster",
    "whole_cluster",
    is_flag=True,
    help="Shut the whole cluster down: PASSIVE first, then every member stops; the data is dropped, unless the "
    "members are persistent (a restart on their data directories brings the cluster back).",
)
@client_options
def shutdown(address: str | None, whole_cluster: bool, **options: Any) -> None:
    """Shut down the member at ADDRESS gracefully: it hands its replicas over, is removed and stops;
    the command waits up to 600 s for that unless --timeout says otherwise. Refused for the last
    data member, and while the cluster shuts down. With --cluster every member stops instead, once
    the leader has seen each hold the PASSIVE state; one that cannot be reached keeps the cluster
    PASSIVE and the command fails."""
    if address is None:
        if not whole_cluster:
            raise click.UsageError("give either a member's ADDRESS or --cluster")
        with_client(options, lambda client: client.shutdown_cluster())
        click.echo("the cluster shut down")
        return
    if whole_cluster:
        raise click.UsageError("give either a member's ADDRESS or --cluster, not both")
    if click.get_current_context().get_parameter_source("timeout_s") is click.core.ParameterSource.DEFAULT:
        options["timeout_s"] = SHUTDOWN_TIMEOUT_S  # handing replicas over takes its time, unless told otherwise
    with_client(options, lambda client: client.shutdown_member(address))
    click.echo(f"{address} left the cluster")


@click.group()
def rebalance() -> None:
    """Pause or resume rebalancing (the NO_MIGRATION cluster state: data is served, nothing moves)."""


@rebalance.command("pause")
@client_options
def rebalance_pause(**options: Any) -> None:
    """Pause rebalancing (the no-migration state): data is served and a crashed owner's backup is
    promoted, but nothing else moves until `rebalance resume`."""
    with_client(options, lambda client: client.change_cluster_state("no-migration"))
    click.echo("rebalancing paused (cluster state no-migration)")


@rebalance.command("resume")
@client_options
def rebalance_resume(**options: Any) -> None:
    """Resume rebalancing (the active state): missing backups are refilled and the cluster
    rebalanced."""
    with_client(options, lambda client: client.change_cluster_state("active"))
    click.echo("rebalancing resumed (cluster state active)")


@click.command()
@click.argument("address")
@click.option("--yes", is_flag=True, help="Confirm: the lost voters will never come back.")
@client_options
def recover(address: str, yes: bool, **options: Any) -> None:
    """Recover from a lost majority of voters: the member at ADDRESS (the survivor with the most
    complete log) becomes the only voter and leads; members that do not answer are then removed
    and their partitions repaired. Writes the lost voters acknowledged but the survivor never
    received are lost. The member refuses while it has heard from a leader lately."""
    if not yes:
        raise click.UsageError("recovery discards the lost voters for good: run it again with --yes")
    options["members"] = address
    answer = with_client(options, lambda client: client.admin(m.RecoverLostMajority(), address))
    click.echo(answer)


@click.command()
@click.argument("address")
@client_options
def remove(address: str, **options: Any) -> None:
    """Remove the member at ADDRESS for good, now: one that has been silent for the failure timeout
    and holds the last replicas of some partitions is otherwise kept, unreachable, for
    partition_lost_timeout_ms in case it comes back. Those partitions are reported lost and
    restart empty. A member that answers is refused: ask it to leave with shutdown."""
    click.echo(with_client(options, lambda client: client.admin(m.RemoveMember(address))))


@click.group()
def partitions() -> None:
    """Where the partitions are, and the ones the cluster cannot serve now."""


@partitions.command("list")
@client_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per partition, in a list.")
def partitions_list(as_json: bool, **options: Any) -> None:
    """Each partition's version, owner and backups, as a member's table holds them now, and
    whether it is unavailable (every replica on members that stopped answering)."""
    found = with_client(options, lambda client: client.partitions())
    if as_json:
        rows = [
            {
                "partition_id": p.partition_id,
                "version": p.version,
                "owner": p.owner,
                "backups": list(p.replicas[1:]),
                "unavailable": p.unavailable,
            }
            for p in found
        ]
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table(show_edge=False)
    for heading in ("partition", "version", "owner", "backups", ""):
        table.add_column(heading)
    for p in found:
        marked = "[red]unavailable[/red]" if p.unavailable else ""
        table.add_row(str(p.partition_id), str(p.version), p.owner or "-", " ".join(p.replicas[1:]), marked)
    Console().print(table)


@partitions.command("revive")
@click.option("--yes", is_flag=True, help="Confirm that the data of the unavailable partitions is given up.")
@client_options
def partitions_revive(yes: bool, **options: Any) -> None:
    """Accept the loss of every unavailable partition (each replica on members that stopped
    answering): each is reported lost and given new, empty replicas, and the members holding it
    drop it if they come back. Without this, an unavailable partition is served whole again when
    one of its members answers."""
    if not yes:
        raise click.UsageError("reviving gives up the data of the unavailable partitions: run it again with --yes")
    click.echo(with_client(options, lambda client: client.admin(m.RevivePartitions())))


@click.group("map")
def map_group() -> None:
    """Read and write a map from the shell (str keys, JSON values)."""


def _map_name(_context: click.Context, _parameter: click.Parameter, name: str) -> str:
    if not 0 < len(name) <= m.MAX_MAP_NAME_CHARS:
        raise click.BadParameter(f"a map name is 1 to {m.MAX_MAP_NAME_CHARS} characters")
    return name


def _json_or_word(value: str) -> Any:
    """A JSON value, or a plain word taken as a string."""
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


_TTL_OPTION = click.option(
    "--ttl",
    type=click.FloatRange(0, MAX_TTL_SECONDS),
    default=None,
    help="Seconds the entry lives (0: until removed; default: the map's time_to_live_seconds).",
)


@map_group.command("put")
@click.argument("map_name", callback=_map_name)
@click.argument("key")
@click.argument("value")
@_TTL_OPTION
@client_options
def map_put(map_name: str, key: str, value: str, ttl: float | None, **options: Any) -> None:
    """Store VALUE (JSON; a plain word is taken as a string) under KEY."""
    with_client(options, lambda client: client.get_map(map_name).set(key, _json_or_word(value), ttl))


@map_group.command("replace")
@click.argument("map_name", callback=_map_name)
@click.argument("key")
@click.argument("value")
@click.option("--if-value", "if_value", default=None, help="Replace only if KEY holds this value (JSON or a word).")
@_TTL_OPTION
@client_options
def map_replace(map_name: str, key: str, value: str, if_value: str | None, ttl: float | None, **options: Any) -> None:
    """Store VALUE under KEY only if KEY has a value (with --if-value, only if it is that one);
    exit 1 when nothing was stored."""

    def run(client: Any) -> bool:
        held = client.get_map(map_name)
        if if_value is None:
            return held.replace(key, _json_or_word(value), ttl) is not None
        return held.replace_if_same(key, _json_or_word(if_value), _json_or_word(value), ttl)

    if not with_client(options, run):
        condition = "has no value" if if_value is None else f"does not hold {if_value}"
        click.echo(f"{map_name}: {key!r} {condition}: nothing stored", err=True)
        sys.exit(EXIT_REFUSED)


@map_group.command("remove")
@click.argument("map_name", callback=_map_name)
@click.argument("key")
@click.option("--if-value", "if_value", default=None, help="Remove only if KEY holds this value (JSON or a word).")
@client_options
def map_remove(map_name: str, key: str, if_value: str | None, **options: Any) -> None:
    """Remove KEY (with --if-value, only if it holds that value); exit 1 when nothing was removed."""

    def run(client: Any) -> bool:
        held = client.get_map(map_name)
        if if_value is None:
            return held.remove(key) is not None
        return held.remove_if_same(key, _json_or_word(if_value))

    if not with_client(options, run):
        click.echo(f"{map_name}: {key!r} was not removed (no such key, or another value)", err=True)
        sys.exit(EXIT_REFUSED)


@map_group.command("set-ttl")
@click.argument("map_name", callback=_map_name)
@click.argument("key")
@click.argument("seconds", type=click.FloatRange(0, MAX_TTL_SECONDS))
@client_options
def map_set_ttl(map_name: str, key: str, seconds: float, **options: Any) -> None:
    """Make KEY's entry live SECONDS from now (0: until removed), its value unchanged; exit 1 when
    the map has no such key."""
    if not with_client(options, lambda client: client.get_map(map_name).set_ttl(key, seconds)):
        click.echo(f"{map_name} has no key {key!r}: no TTL set", err=True)
        sys.exit(EXIT_REFUSED)


@map_group.command("entry")
@click.argument("map_name", callback=_map_name)
@click.argument("key")
@client_options
def map_entry(map_name: str, key: str, **options: Any) -> None:
    """Print KEY's entry view as JSON (value, times in ms since the epoch, expiry, hits, version);
    exit 1 when the map has no such key. It counts no read."""
    view = with_client(options, lambda client: client.get_map(map_name).get_entry_view(key))
    if view is None:
        click.echo(f"{map_name} has no key {key!r}", err=True)
        sys.exit(EXIT_REFUSED)
    fields = ("created_ms", "updated_ms", "accessed_ms", "expire_at_ms", "hits", "version")
    click.echo(json.dumps({"value": view.value, **{f: getattr(view, f) for f in fields}}, default=repr))


@map_group.command("get")
@click.argument("map_name", callback=_map_name)
@click.argument("key")
@client_options
def map_get(map_name: str, key: str, **options: Any) -> None:
    """Print KEY's value as JSON; exit 1 when the map has no such key."""
    missing = object()
    value = with_client(options, lambda client: client.get_map(map_name).get(key, missing))
    if value is missing:
        click.echo(f"{map_name} has no key {key!r}", err=True)
        sys.exit(EXIT_REFUSED)
    click.echo(json.dumps(value, default=repr))


@map_group.command("size")
@click.argument("map_name", callback=_map_name)
@client_options
def map_size(map_name: str, **options: Any) -> None:
    """Print how many entries the map holds (each owner counts its partitions)."""
    click.echo(with_client(options, lambda client: client.get_map(map_name).size()))


COMMANDS = (
    demo,
    status,
    safe,
    watch,
    state,
    rebalance,
    promote,
    shutdown,
    recover,
    remove,
    partitions,
    map_group,
    local,
)
