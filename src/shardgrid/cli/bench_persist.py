"""``shardgrid bench persist``: what a data directory costs and what it keeps, on member processes.

Three parts, each on fresh member processes on 127.0.0.1 with one sync backup:

- **Write rate.** One client's batched put_all (``BATCH`` entries of 100 bytes, ``IN_FLIGHT``
  batches in flight), first on members keeping everything in memory, then on members with a data
  directory, every write synced before it is acknowledged (owner and backup), then with
  ``fsync = every_ms`` (synced each second, acknowledged before): each persistent rate as a share of
  the in-memory one (targets: at least 30% and 70%).
- **A power cut.** While the client writes, every member is SIGKILLed at once and started again on
  its directory; every write acknowledged before the kill is read back (target: none lost).
- **Restart.** One member (no backup) holding ``restart_entries`` entries of 100 bytes is
  SIGKILLed and started again on its directory: the seconds from its start until it answers a
  read with the data (target: at most 3 s for 1,000,000).
- **Rolling restart.** Three members holding ``rolling_entries`` entries are each SIGKILLed and
  started again on their directories in turn, the next once the cluster is safe again: the records
  moved (migrations and replica syncs), as a share of what re-replicating each restarted member's
  copies whole would move (target: under 5%).
- **Compaction.** One member (no backup, ``compaction_min_bytes`` of 16 MiB) takes the same
  ``COMPACTION_KEYS`` keys written over ``COMPACTION_ROUNDS`` times: the most its files took, as a
  multiple of what its data takes compacted (target: at most ``MAX_DISK_MULTIPLE``), the times its
  file shrank (compactions ended), and the slowest batch against the median (a compaction runs a
  bounded share a step beside the writes: it never stalls them for a rewrite of everything).
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

from shardgrid.cli.bench_results import Target, with_targets
from shardgrid.cli.local_cluster import LocalMember, alive, end, loopback_addresses, start_member, wait_until_formed
from shardgrid.client import AsyncClient, Client
from shardgrid.client.errors import ShardgridClientError

BENCH_FIRST_PORT = 6101  # apart from `local up` (5701), `bench cluster` (5801), pipeline (5901), memory (6001)
MEMBERS = 3
PARTITIONS = 271
VALUE = b"v" * 100
BATCH = 1_000
IN_FLIGHT = 8
CALL_TIMEOUT_MS = 60_000
RESTART_TIMEOUT_S = 120.0
MIN_RATE_SHARE = 0.30
MIN_EVERY_SECOND_SHARE = 0.70
EVERY_SECOND = ("--set", "fsync=every_ms", "--set", "fsync_interval_ms=1000")
MAX_RESTART_S = 3.0
MAX_ROLLING_MOVED_SHARE = 0.05
COUNT_SETTLE_S = 1.0
COMPACTION_KEYS = 100_000
COMPACTION_ROUNDS = 8
COMPACTION_MIN_BYTES = 16 * 1024 * 1024
COMPACTION_POLL_EVERY_BATCHES = 5
MAX_DISK_MULTIPLE = 6.0  # four times its data before a compaction, the next file beside it, and slack
IMAGE_RECORD_BYTES = 56  # two lengths and the metadata an image gives each record (DUMP_RECORD_BYTES)


def _start(directory: Path, addresses: list[str], persistent: bool, *extra: str) -> list[LocalMember]:
    members = []
    for address in addresses:
        port = int(address.rpartition(":")[2])
        data = ("--data-dir", str(directory / f"data-{port}")) if persistent else ()
        settings = ("--partition-count", str(PARTITIONS), *extra, *data)
        members.append(start_member(directory, port, addresses, len(addresses), settings))
    return members


async def _write(
    addresses: list[str], batches: int, acknowledged: list[int] | None = None, stop: asyncio.Event | None = None
) -> float:
    """Batched put_all, ``IN_FLIGHT`` at once: entries per second. ``acknowledged`` gets each batch
    number once its put_all answered; a batch whose call fails ends the writing (a power cut)."""
    async with AsyncClient(addresses, operation_call_timeout_ms=CALL_TIMEOUT_MS) as client:
        data = client.get_map("data")
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(number: int) -> None:
            async with gate:
                if stop is not None and stop.is_set():
                    return
                try:
                    await data.put_all({f"k{number}-{i}": VALUE for i in range(BATCH)})
                except ShardgridClientError:
                    if stop is None:
                        raise
                    stop.set()
                    return
                if acknowledged is not None:
                    acknowledged.append(number)

        started = time.perf_counter()
        await asyncio.gather(*(one(number) for number in range(batches)))
        return batches * BATCH / (time.perf_counter() - started)


def _rate(directory: Path, addresses: list[str], persistent: bool, batches: int, *extra: str) -> float:
    members = _start(directory, addresses, persistent, *extra)
    try:
        wait_until_formed(members, 60, directory)
        with Client(addresses) as client:
            client.wait_until_safe(60)
        return asyncio.run(_write(addresses, batches))
    finally:
        end([m.pid for m in members if alive(m.pid)], grace_s=5)


def _power_cut(directory: Path, addresses: list[str], batches: int) -> dict[str, Any]:
    members = _start(directory, addresses, True)
    try:
        wait_until_formed(members, 60, directory)
        with Client(addresses) as client:
            client.wait_until_safe(60)
        acknowledged: list[int] = []

        async def load_and_cut() -> None:
            stop = asyncio.Event()
            writing = asyncio.create_task(_write(addresses, batches, acknowledged, stop))
            while len(acknowledged) < batches // 2 and not writing.done():
                await asyncio.sleep(0.01)
            for member in members:
                os.kill(member.pid, signal.SIGKILL)
            stop.set()
            await asyncio.wait_for(writing, CALL_TIMEOUT_MS / 1000 + 10)

        asyncio.run(load_and_cut())
        taken = sorted(acknowledged)  # what the client was told before the cut
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(alive(m.pid) for m in members):
            time.sleep(0.05)
        started = time.monotonic()
        members = _start(directory, addresses, True)
        wait_until_formed(members, RESTART_TIMEOUT_S, directory)
        with Client(addresses, operation_call_timeout_ms=CALL_TIMEOUT_MS) as client:
            client.wait_until_safe(RESTART_TIMEOUT_S)
            safe_s = time.monotonic() - started
            data = client.get_map("data")
            lost = 0
            for number in taken:
                keys = [f"k{number}-{i}" for i in range(BATCH)]
                held = data.get_all(keys)
                lost += sum(1 for key in keys if held.get(key) != VALUE)
        return {"batches_acknowledged": len(taken), "seconds_to_safe": round(safe_s, 2), "lost": lost}
    finally:
        end([m.pid for m in members if alive(m.pid)], grace_s=5)


def _restart(directory: Path, address: str, entries: int) -> dict[str, Any]:
    """One member, no backup: loaded, SIGKILLed, started again; seconds until it serves."""
    members = _start(directory, [address], True, "--backup-count", "0")
    try:
        wait_until_formed(members, 60, directory)
        with Client([address]) as client:
            client.wait_until_safe(60)
        batches = entries // BATCH
        asyncio.run(_write([address], batches))
        os.kill(members[0].pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and alive(members[0].pid):
            time.sleep(0.05)
        disk_bytes = sum(f.stat().st_size for f in (directory / f"data-{address.rpartition(':')[2]}").iterdir())
        started = time.monotonic()
        members = _start(directory, [address], True, "--backup-count", "0")
        last_key = f"k{batches - 1}-{BATCH - 1}"
        served_s = None
        while time.monotonic() - started < RESTART_TIMEOUT_S:
            try:
                with Client([address], connect_timeout_ms=1_000, operation_call_timeout_ms=2_000) as client:
                    if client.get_map("data").get(last_key) == VALUE:
                        served_s = time.monotonic() - started
                        break
            except ShardgridClientError:
                pass
            time.sleep(0.02)
        with Client([address]) as client:
            size = client.get_map("data").size()
        return {
            "entries": batches * BATCH,
            "disk_bytes": disk_bytes,
            "seconds_to_serve": round(served_s, 2) if served_s is not None else None,
            "entries_after": size,
        }
    finally:
        end([m.pid for m in members if alive(m.pid)], grace_s=5)


def _moved(client: Client, addresses: list[str]) -> dict[str, int]:
    """Per member, the records it sent since it started (migrations and replica syncs)."""
    moved = {}
    for address in addresses:
        status = client.member_status(address)
        moved[address] = status.entries_migrated + status.entries_synced
    return moved


def _rolling_restart(directory: Path, addresses: list[str], entries: int) -> dict[str, Any]:
    """Three members loaded with ``entries``, each SIGKILLed and started again on its directory in
    turn, the next once the cluster is safe with all three again: the records moved (migrations
    and replica syncs) against what a full re-replication of each restarted member would move
    (every copy it held)."""
    members = _start(directory, addresses, True)
    try:
        wait_until_formed(members, 60, directory)
        with Client(addresses) as client:
            client.wait_until_safe(60)
        asyncio.run(_write(addresses, entries // BATCH))
        moved = full = 0
        seconds: list[float] = []
        for position, address in enumerate(addresses):
            with Client(addresses, operation_call_timeout_ms=CALL_TIMEOUT_MS) as client:
                client.wait_until_safe(RESTART_TIMEOUT_S, members=len(addresses))
                time.sleep(COUNT_SETTLE_S)  # a member counts its records once a tick
                full += client.member_status(address).entries
                before = _moved(client, addresses)
            os.kill(members[position].pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and alive(members[position].pid):
                time.sleep(0.05)
            started = time.monotonic()
            port = int(address.rpartition(":")[2])
            settings = ("--partition-count", str(PARTITIONS), "--data-dir", str(directory / f"data-{port}"))
            members[position] = start_member(directory, port, addresses, len(addresses), settings)
            with Client(addresses, operation_call_timeout_ms=CALL_TIMEOUT_MS) as client:
                client.wait_until_safe(RESTART_TIMEOUT_S, members=len(addresses))
                seconds.append(round(time.monotonic() - started, 2))
                after = _moved(client, addresses)
            # The restarted member counts from its start; the others from theirs, before and after.
            moved += after[address] + sum(after[a] - before[a] for a in addresses if a != address)
        with Client(addresses) as client:
            size = client.get_map("data").size()
        return {
            "entries": entries // BATCH * BATCH,
            "entries_after": size,
            "entries_moved": moved,
            "entries_a_full_re_replication_moves": full,
            "moved_share": round(moved / full, 4) if full else None,
            "seconds_to_safe": seconds,
        }
    finally:
        end([m.pid for m in members if alive(m.pid)], grace_s=5)


def _compaction(directory: Path, address: str) -> dict[str, Any]:
    """One member, no backup: the same keys written over and over, its disk use polled."""
    settings = ("--backup-count", "0", "--set", f"compaction_min_bytes={COMPACTION_MIN_BYTES}")
    members = _start(directory, [address], True, *settings)
    try:
        wait_until_formed(members, 60, directory)
        with Client([address]) as client:
            client.wait_until_safe(60)
        return asyncio.run(_overwrite(address))
    finally:
        end([m.pid for m in members if alive(m.pid)], grace_s=5)


async def _overwrite(address: str) -> dict[str, Any]:
    batches = COMPACTION_KEYS // BATCH
    latencies_ms: list[float] = []
    sizes: list[int] = []
    async with AsyncClient([address], operation_call_timeout_ms=CALL_TIMEOUT_MS) as client:
        data = client.get_map("data")
        for _ in range(COMPACTION_ROUNDS):
            for number in range(batches):
                started = time.perf_counter()
                await data.put_all({f"k{number}-{i}": VALUE for i in range(BATCH)})
                latencies_ms.append((time.perf_counter() - started) * 1000)
                if number % COMPACTION_POLL_EVERY_BATCHES == 0:
                    sizes.append((await client.member_status(address)).disk_bytes)
        sizes.append((await client.member_status(address)).disk_bytes)
    key_bytes = sum(len(f"k{n}-{i}") for n in range(batches) for i in range(BATCH))
    data_bytes = key_bytes + COMPACTION_KEYS * (len(VALUE) + IMAGE_RECORD_BYTES)
    latencies_ms.sort()
    return {
        "keys": COMPACTION_KEYS,
        "rounds": COMPACTION_ROUNDS,
        "data_bytes": data_bytes,
        "peak_disk_bytes": max(sizes),
        "peak_over_data": round(max(sizes) / data_bytes, 2),
        "final_disk_bytes": sizes[-1],
        "shrank": sum(1 for before, after in pairwise(sizes) if after < before),
        "median_batch_ms": round(latencies_ms[len(latencies_ms) // 2], 1),
        "slowest_batch_ms": round(latencies_ms[-1], 1),
    }


def run_persist_bench(batches: int, restart_entries: int, rolling_entries: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="shardgrid-bench-persist-") as folder:
        directory = Path(folder)
        addresses = loopback_addresses(BENCH_FIRST_PORT, MEMBERS + 1)
        founders = addresses[:MEMBERS]
        for part in ("memory", "synced", "every", "cut", "restart", "rolling", "compaction"):
            (directory / part).mkdir()
        memory_rate = _rate(directory / "memory", founders, False, batches)
        always_rate = _rate(directory / "synced", founders, True, batches)
        every_rate = _rate(directory / "every", founders, True, batches, *EVERY_SECOND)
        cut = _power_cut(directory / "cut", founders, 2 * batches)
        restart = _restart(directory / "restart", addresses[MEMBERS], restart_entries)
        rolling = _rolling_restart(directory / "rolling", founders, rolling_entries)
        compaction = _compaction(directory / "compaction", addresses[MEMBERS])
    share = always_rate / memory_rate if memory_rate else 0.0
    every_share = every_rate / memory_rate if memory_rate else 0.0
    seconds = restart["seconds_to_serve"]
    report: dict[str, Any] = {
        "cluster": f"{MEMBERS} members, {PARTITIONS} partitions, 1 sync backup, values of {len(VALUE)} bytes",
        "load": f"{batches} put_all of {BATCH} entries, {IN_FLIGHT} in flight, one client",
        "in_memory_entries_per_s": round(memory_rate),
        "synced_entries_per_s": round(always_rate),
        "synced_share_of_in_memory": round(share, 3),
        "every_second_entries_per_s": round(every_rate),
        "every_second_share_of_in_memory": round(every_share, 3),
        "power_cut": cut,
        "restart": restart,
        "rolling_restart": rolling,
        "compaction": compaction,
    }
    return with_targets(
        report,
        [
            Target(
                name="synced_share_of_in_memory",
                figure="batched put_all with every write synced on owner and backup, over the in-memory rate",
                measured=round(share, 3),
                comparison=">=",
                wanted=MIN_RATE_SHARE,
            ),
            Target(
                name="every_second_share_of_in_memory",
                figure="batched put_all with fsync = every_ms (1,000 ms), over the in-memory rate",
                measured=round(every_share, 3),
                comparison=">=",
                wanted=MIN_EVERY_SECOND_SHARE,
            ),
            Target(
                name="power_cut_lost",
                figure="writes acknowledged before every member was SIGKILLed that did not read back after the restart",
                measured=cut["lost"],
                comparison="==",
                wanted=0,
            ),
            Target(
                name="restart_seconds_to_serve",
                figure=f"seconds from a restart until a member holding {restart['entries']:,} entries serves them",
                measured=seconds if seconds is not None else RESTART_TIMEOUT_S,
                comparison="<=",
                wanted=MAX_RESTART_S,
            ),
            Target(
                name="rolling_restart_moved_share",
                figure="records moved by a rolling restart of the three members (each SIGKILLed and restarted on "
                "its directory in turn), over what a full re-replication of each would move",
                measured=rolling["moved_share"] if rolling["moved_share"] is not None else 1.0,
                comparison="<",
                wanted=MAX_ROLLING_MOVED_SHARE,
            ),
            Target(
                name="compaction_peak_over_data",
                figure=f"the most a member's files took while its {COMPACTION_KEYS:,} keys were written over "
                f"{COMPACTION_ROUNDS} times, over what its data takes compacted",
                measured=compaction["peak_over_data"],
                comparison="<=",
                wanted=MAX_DISK_MULTIPLE,
            ),
        ],
    )


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """The figures the manual's benchmarks page shows."""
    return {
        "synced_share_of_in_memory": report["synced_share_of_in_memory"],
        "every_second_share_of_in_memory": report["every_second_share_of_in_memory"],
        "power_cut_lost": report["power_cut"]["lost"],
        "restart_seconds_to_serve": report["restart"]["seconds_to_serve"],
        "rolling_restart_moved_share": report["rolling_restart"]["moved_share"],
        "compaction_peak_over_data": report["compaction"]["peak_over_data"],
    }
