"""``shardgrid bench cluster``: a local cluster of member processes, measured as seed 003 does.

First the client's throughput and latency on a steady 3-member cluster: put, get, put_all and
get_all from one blocking-style caller, then the async client with many calls in flight. Then seed
003's shape at this machine's scale, each on a fresh cluster loaded with ``entries`` entries of
100 bytes: scale up 3 -> 4 (backup count 1, and again with 0), scale down 4 -> 3 gracefully, and
crash one of 4. For each: migrations, time until safe, entries and MB moved per second, and GET
and SET latency percentiles while migrating next to the steady state just before. Every sample
and migration event goes to ``--samples`` (JSON lines) for the Spark analysis. It prints one JSON
document and exits 1 when a target is missed.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from shardgrid.cli.bench_results import Target, with_targets
from shardgrid.cli.local_cluster import LocalMember, alive, end, loopback_addresses, start_member, wait_until_formed
from shardgrid.cli.watch import ProgressBaseline
from shardgrid.client.aio import AsyncClient, AsyncMap
from shardgrid.client.serialization import BytesSerializer

BENCH_FIRST_PORT = 5801  # apart from the members `local up` and the demo start from 5701
VALUE = b"v" * 100
BATCH = 1_000
STEADY_S = 3.0
SAMPLER_CONCURRENCY = 4  # calls the latency sampler keeps in flight (half GET, half SET)

TARGETS = {
    "rebalance_entries_per_s": 2_000_000,  # between two members on loopback
    "scale_up_backup0_s": 2.0,
    "batched_entries_per_s": 300_000,
    "p99_during_migration_ratio": 2.0,
    "single_get_p50_ms": 0.150,  # from AsyncClient, and from the blocking Client
}


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _latency_summary(samples: list[float]) -> dict[str, float]:
    return {
        "count": len(samples),
        "p50_ms": round(_percentile(samples, 0.50) * 1000, 3),
        "p99_ms": round(_percentile(samples, 0.99) * 1000, 3),
        "p999_ms": round(_percentile(samples, 0.999) * 1000, 3),
    }


@dataclass
class Cluster:
    directory: Path
    members: list[LocalMember] = field(default_factory=list)
    addresses: list[str] = field(default_factory=list)

    def start(self, address: str, join: list[str], initial: int, backups: int) -> None:
        extra = ("--backup-count", str(backups), "--set", "bootstrap_after_ms=500")
        port = int(address.rpartition(":")[2])
        self.members.append(start_member(self.directory, port, join, initial, extra))
        self.addresses.append(address)

    def member_at(self, address: str) -> LocalMember:
        return next(m for m in self.members if m.address == address)

    def end_all(self) -> None:
        end([m.pid for m in self.members if alive(m.pid)], grace_s=2)


async def _load(data: AsyncMap, entries: int) -> float:
    started = time.monotonic()
    for first in range(0, entries, BATCH * 10):
        keys = [f"key-{i}" for i in range(first, min(first + BATCH * 10, entries))]
        await data.put_all({key: VALUE for key in keys})
    return time.monotonic() - started


class Sampler:
    """GETs and SETs of random loaded keys, a few in flight, each timed; stops when told."""

    def __init__(self, data: AsyncMap, entries: int, out: TextIO | None, scenario: str) -> None:
        self.data = data
        self.entries = entries
        self.out = out
        self.scenario = scenario
        self.samples: list[tuple[float, str, float]] = []  # (start, op, seconds)
        self.errors = 0
        self._stop = asyncio.Event()
        self._rng = random.Random(7)

    async def _worker(self, op: str) -> None:
        while not self._stop.is_set():
            key = f"key-{self._rng.randrange(self.entries)}"
            started = time.monotonic()
            try:
                if op == "get":
                    await self.data.get(key)
                else:
                    await self.data.set(key, VALUE)
            except Exception:
                self.errors += 1
                continue
            elapsed = time.monotonic() - started
            self.samples.append((started, op, elapsed))
            if self.out is not None:
                self.out.write(
                    json.dumps({"kind": "sample", "scenario": self.scenario, "t": started, "op": op, "s": elapsed})
                    + "\n"
                )

    async def run(self) -> None:
        ops = ["get", "set"] * (SAMPLER_CONCURRENCY // 2)
        await asyncio.gather(*(self._worker(op) for op in ops))

    def stop(self) -> None:
        self._stop.set()

    def between(self, start: float, end: float, op: str) -> list[float]:
        return [s for t, o, s in self.samples if start <= t < end and o == op]


async def _client_figures(addresses: list[str], entries: int) -> dict[str, Any]:
    async with AsyncClient(addresses, operation_call_timeout_ms=120_000) as client:
        await client.wait_until_safe(60)
        data = client.get_map("client-bench", value_serializer=BytesSerializer())
        keys = [f"c-{i}" for i in range(entries)]
        started = time.monotonic()
        for first in range(0, entries, BATCH):
            await data.put_all({key: VALUE for key in keys[first : first + BATCH]})
        put_all_s = time.monotonic() - started
        started = time.monotonic()
        for first in range(0, entries, BATCH):
            await data.get_all(keys[first : first + BATCH])
        get_all_s = time.monotonic() - started
        singles: dict[str, list[float]] = {"put": [], "get": []}
        for i in range(2_000):
            started = time.monotonic()
            await data.set(keys[i], VALUE)
            singles["put"].append(time.monotonic() - started)
            started = time.monotonic()
            await data.get(keys[i])
            singles["get"].append(time.monotonic() - started)
        in_flight = 64
        started = time.monotonic()
        count = 20_000

        async def worker(offset: int) -> None:
            for i in range(offset, count, in_flight):
                await data.get(keys[i % entries])

        await asyncio.gather(*(worker(o) for o in range(in_flight)))
        async_s = time.monotonic() - started
    blocking_gets = await asyncio.to_thread(_blocking_gets, addresses, keys[:2_000])
    return {
        "put_all_entries_per_s": round(entries / put_all_s),
        "get_all_entries_per_s": round(entries / get_all_s),
        "put": {**_latency_summary(singles["put"]), "ops_per_s": round(len(singles["put"]) / sum(singles["put"]))},
        "get": {**_latency_summary(singles["get"]), "ops_per_s": round(len(singles["get"]) / sum(singles["get"]))},
        "async_get_in_flight_64_ops_per_s": round(count / async_s),
        "blocking_get": _latency_summary(blocking_gets),
    }


def _blocking_gets(addresses: list[str], keys: list[str]) -> list[float]:
    """A single get's time from the blocking ``Client`` (its hop to its event-loop thread
    included), for each key."""
    from shardgrid.client import Client

    times = []
    with Client(addresses, operation_call_timeout_ms=120_000) as client:
        data = client.get_map("client-bench", value_serializer=BytesSerializer())
        for key in keys:
            started = time.monotonic()
            data.get(key)
            times.append(time.monotonic() - started)
    return times


async def _scenario(name: str, entries: int, backups: int, samples_out: TextIO | None, workdir: Path) -> dict[str, Any]:
    """One fresh cluster, loaded, then the change named by ``name``; figures of the change."""
    start_size = 3 if name in ("scale-up", "scale-up-backup-0") else 4
    directory = workdir / name
    directory.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(directory)
    addresses = loopback_addresses(BENCH_FIRST_PORT, start_size + 1)
    founders = addresses[:start_size]
    try:
        for address in founders:
            cluster.start(address, founders, start_size, backups)
        await asyncio.to_thread(wait_until_formed, cluster.members, 60, directory)
        async with AsyncClient(founders, operation_call_timeout_ms=120_000) as client:
            await client.wait_until_safe(60)
            data = client.get_map("bench", value_serializer=BytesSerializer())
            load_s = await _load(data, entries)
            await client.wait_until_safe(300)
            events: list[tuple[float, Any]] = []  # (when it arrived, notice)
            listener = client.add_migration_listener(lambda notice: events.append((time.monotonic(), notice)))
            sampler = Sampler(data, entries, samples_out, name)
            sampling = asyncio.get_running_loop().create_task(sampler.run())
            await asyncio.sleep(STEADY_S)
            baseline = ProgressBaseline()
            baseline.progress(await client.cluster_status())
            changed = time.monotonic()
            if name.startswith("scale-up"):
                cluster.start(addresses[start_size], founders, start_size, backups)
            elif name == "scale-down":
                await client.shutdown_member(founders[-1])
            else:  # crash
                os.kill(cluster.member_at(founders[-1]).pid, signal.SIGKILL)
            if name.startswith("scale-up"):
                while addresses[start_size] not in (await client.cluster_status()).members:
                    await asyncio.sleep(0.1)
            await client.wait_until_safe(600)
            safe_at = time.monotonic()
            final_status = await client.cluster_status()
            migrations, _, moved_entries, moved_bytes = baseline.progress(final_status)
            resent = baseline.resent(final_status)
            await asyncio.sleep(1.0)
            sampler.stop()
            await sampling
            listener.remove()
            if samples_out is not None:
                for when, notice in events:
                    samples_out.write(
                        json.dumps(
                            {
                                "kind": "migration",
                                "scenario": name,
                                "phase": notice.phase,
                                "partition_id": notice.partition_id,
                                "source": notice.source,
                                "destination": notice.destination,
                                "t": when,
                            }
                        )
                        + "\n"
                    )
            took = safe_at - changed
            # The migrations' own period: from the first start to the last end the leader reported.
            times = [when for when, _ in events]
            migrating_s = (max(times) - min(times)) if len(times) >= 2 else took
            steady = {op: _latency_summary(sampler.between(changed - STEADY_S, changed, op)) for op in ("get", "set")}
            during = {op: _latency_summary(sampler.between(changed, safe_at, op)) for op in ("get", "set")}
            return {
                "entries": entries,
                "backup_count": backups,
                "load_entries_per_s": round(entries / load_s),
                "migrations": migrations,
                "finished_notices": sum(1 for _, n in events if n.phase == "finished"),
                "seconds_migrating": round(migrating_s, 2),
                "seconds_to_safe": round(took, 2),
                "entries_moved": moved_entries,
                # Duplicates the rebalance sent: migration chunks sent again (no timely
                # acknowledgement, or a connection that came back), by the members still up.
                "chunks_resent": resent,
                "entries_moved_per_s": round(moved_entries / migrating_s) if migrating_s > 0 else 0,
                "mb_moved_per_s": round(moved_bytes / migrating_s / 1e6, 2) if migrating_s > 0 else 0,
                "steady": steady,
                "during_migration": during,
                "sampler_errors": sampler.errors,
            }
    finally:
        cluster.end_all()


def run_cluster_bench(entries: int, scenarios: list[str], samples: Path | None) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="shardgrid-bench-"))
    report: dict[str, Any] = {"entries": entries, "logs": str(workdir)}
    out = samples.open("w") if samples is not None else None
    try:
        client_dir = workdir / "client"
        client_dir.mkdir()
        cluster = Cluster(client_dir)
        addresses = loopback_addresses(BENCH_FIRST_PORT, 3)
        try:
            for address in addresses:
                cluster.start(address, addresses, 3, 1)
            wait_until_formed(cluster.members, 60, client_dir)
            report["client"] = asyncio.run(_client_figures(addresses, min(entries, 100_000)))
        finally:
            cluster.end_all()
        for name in scenarios:
            backups = 0 if name == "scale-up-backup-0" else 1
            report[name] = asyncio.run(_scenario(name, entries, backups, out, workdir))
    finally:
        if out is not None:
            out.close()
    return with_targets(report, _targets(report))


def _targets(report: dict[str, Any]) -> list[Target]:
    client = report.get("client", {})
    batched = min(client.get("put_all_entries_per_s", 0), client.get("get_all_entries_per_s", 0))
    single_gets = [client.get(kind, {}) for kind in ("get", "blocking_get")]
    # A figure not measured (no sample) is a target missed, not one met at 0 ms.
    single_get_ms = max(g["p50_ms"] if g.get("count") else 10.0**9 for g in single_gets)
    targets = [
        Target(
            name="single_get_p50_ms",
            figure="a single get's p50 from AsyncClient and from the blocking Client (the slower): ms",
            measured=single_get_ms,
            comparison="<=",
            wanted=TARGETS["single_get_p50_ms"],
        ),
        Target(
            name="batched_entries_per_s",
            figure="one client's batched put_all and get_all (the slower): entries/s",
            measured=batched,
            comparison=">=",
            wanted=TARGETS["batched_entries_per_s"],
        ),
    ]
    moves = [report[n]["entries_moved_per_s"] for n in ("scale-up", "scale-up-backup-0") if n in report]
    if moves:
        targets.append(
            Target(
                name="rebalance_entries_per_s",
                figure="a rebalance (scale-up, the faster): entries moved/s",
                measured=max(moves),
                comparison=">=",
                wanted=TARGETS["rebalance_entries_per_s"],
            )
        )
    if "scale-up-backup-0" in report:
        targets.append(
            Target(
                name="scale_up_backup0_s",
                figure="scale-up 3->4 with backup count 0: seconds until safe",
                measured=report["scale-up-backup-0"]["seconds_to_safe"],
                comparison="<",
                wanted=TARGETS["scale_up_backup0_s"],
            )
        )
    ratios = []
    for name in ("scale-up", "scale-down", "crash", "scale-up-backup-0"):
        if name in report:
            for op in ("get", "set"):
                steady = report[name]["steady"][op]["p99_ms"]
                during = report[name]["during_migration"][op]["p99_ms"]
                if steady > 0:
                    ratios.append(during / steady)
    if ratios:
        targets.append(
            Target(
                name="p99_during_migration_ratio",
                figure="GET/SET p99 while migrating over steady (the worst)",
                measured=round(max(ratios), 2),
                comparison="<=",
                wanted=TARGETS["p99_during_migration_ratio"],
            )
        )
    return targets


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """Per scenario: time until safe, entries moved per second, p99 steady and while migrating."""
    figures: dict[str, Any] = {}
    client = report.get("client", {})
    for key, value in client.items():
        if isinstance(value, int | float):
            figures[f"client: {key}"] = value
    for name in ("scale-up", "scale-up-backup-0", "scale-down", "crash"):
        if name not in report:
            continue
        run = report[name]
        figures[f"{name}: seconds until safe"] = run["seconds_to_safe"]
        figures[f"{name}: entries moved/s"] = run["entries_moved_per_s"]
        for op in ("get", "set"):
            figures[f"{name}: {op.upper()} p99 ms, steady / migrating"] = (
                f"{run['steady'][op]['p99_ms']} / {run['during_migration'][op]['p99_ms']}"
            )
    return figures
