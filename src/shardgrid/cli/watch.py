"""``shardgrid watch``: a rebalance's progress, live, until the cluster is safe (and, if asked,
has a given number of members).

Read from the members' status twice a second: migrations planned and running (the leader's),
finished (since the watch began), entries and bytes the sources sent, the rate and an ETA from
the migrations finished so far. The demo uses the same loop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from shardgrid.client import Client
from shardgrid.client.errors import ClusterUnavailableError
from shardgrid.client.status import ClusterStatus

POLL_S = 0.5


@dataclass(kw_only=True)
class WatchResult:
    safe: bool
    seconds: float
    migrations: int  # finished while watched
    entries_moved: int
    bytes_moved: int
    reason: str  # why it is not safe (when it is not)
    chunks_resent: int = 0  # duplicates: chunks sources sent again while watched


class ProgressBaseline:
    """Counters as first seen per member, so that the watch shows what moved while it watched
    (every member counts the migrations it applied from the log, and what it sent, since it started)."""

    def __init__(self) -> None:
        self.first: dict[str, tuple[int, int, int, int]] = {}

    def progress(self, status: ClusterStatus) -> tuple[int, int, int, int]:
        """(finished, remaining, entries sent, bytes sent) since the watch began."""
        for address, reply in status.replies.items():
            counters = (reply.migrations_finished, reply.entries_migrated, reply.bytes_migrated, reply.chunks_resent)
            self.first.setdefault(address, counters)
        leader = status.replies.get(status.leader)
        finished = remaining = 0
        if leader is not None:
            finished = leader.migrations_finished - self.first[leader.address][0]
            remaining = leader.migrations_planned + leader.migrations_in_log
        entries = sum(reply.entries_migrated - self.first[a][1] for a, reply in status.replies.items())
        moved = sum(reply.bytes_migrated - self.first[a][2] for a, reply in status.replies.items())
        return finished, remaining, entries, moved

    def resent(self, status: ClusterStatus) -> int:
        return sum(reply.chunks_resent - self.first[a][3] for a, reply in status.replies.items() if a in self.first)


def migrations_text(finished: int, total: int) -> str:
    """The progress bar's count: 'no migrations' rather than a made-up '1/1' when there were none
    (found by an outside tester)."""
    return f"{finished}/{total} migrations" if total else "no migrations"


def watch_until_safe(
    client: Client,
    timeout_s: float,
    console: Console,
    title: str = "rebalancing",
    since: tuple[ProgressBaseline, float] | None = None,
    until_members: int = 0,
) -> WatchResult:
    """Until the cluster is safe or ``timeout_s`` passed. ``since``: counters taken and the
    monotonic time noted when what is watched began (a crash during a load), when that was before
    the watch: the result then counts from there. ``until_members``: not done before the member
    list has that many members, so that a watch started with a member that is still joining waits
    for its rebalance instead of finding the cluster safe without it (found by an outside tester:
    the README's 'add a member and watch' said 'safe after 0.0 s: 0 migrations')."""
    baseline, started = since or (ProgressBaseline(), time.monotonic())
    deadline = time.monotonic() + timeout_s
    reason = "not asked yet"
    columns = (
        TextColumn(f"[bold]{title}[/bold]"),
        BarColumn(),
        TextColumn("{task.fields[count]}"),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(title, total=1, detail="", count=migrations_text(0, 0))
        while True:
            try:
                status = client.cluster_status()
            except ClusterUnavailableError as error:
                status, reason = None, str(error)
            if status is not None:
                finished, remaining, entries, moved = baseline.progress(status)
                elapsed = max(time.monotonic() - started, 1e-3)
                rate = finished / elapsed
                eta = f"ETA {remaining / rate:.0f} s" if rate > 0 and remaining else ""
                detail = f"{entries:,} entries, {moved / 1e6:.1f} MB, {entries / elapsed:,.0f} entries/s {eta}"
                members = len(status.members)
                if members < until_members:
                    detail = f"waiting for {until_members} members ({members} so far)"
                total = finished + remaining
                count = migrations_text(finished, total)
                progress.update(task, total=max(total, 1), completed=finished, detail=detail, count=count)
                if members >= until_members and status.safe:
                    progress.update(task, total=max(finished, 1), completed=max(finished, 1))
                    resent = baseline.resent(status)
                    return WatchResult(
                        safe=True,
                        seconds=time.monotonic() - started,
                        migrations=finished,
                        entries_moved=entries,
                        bytes_moved=moved,
                        reason="",
                        chunks_resent=resent,
                    )
                reason = status.unsafe_reason or status.too_few_reason(until_members)
            if time.monotonic() > deadline:
                return WatchResult(
                    safe=False,
                    seconds=time.monotonic() - started,
                    migrations=0,
                    entries_moved=0,
                    bytes_moved=0,
                    reason=reason,
                )
            time.sleep(POLL_S)
