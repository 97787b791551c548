"""Seeded random runs: start a cluster, run a workload, inject faults within the backup budget.

The budget is the promise under test: with backup count b, at most b members may be lost (crashed,
cut off or paused past the failure timeout) between two moments the cluster is safe. Within it,
every acknowledged write must survive. Each run reports the seed, its parameters, a summary and a
verdict, and replays exactly from the seed.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from shardgrid.core.config import MemberConfig
from shardgrid.sim.checkers import SimulationFailure, check_step, final_violations, unsafe_reason
from shardgrid.sim.cluster import Simulation
from shardgrid.sim.network import NetworkConfig

FAULTS = ("crash", "master-crash", "join", "split", "pause", "restart")
SLICE_MS = 200


@dataclass(frozen=True, slots=True)
class SimParams:
    members: int = 5
    partitions: int = 271
    backups: int = 1
    ops: int = 2000
    faults: tuple[str, ...] = ("crash", "master-crash", "join", "split")
    clients: int = 3
    max_parallel_migrations: int = 10
    drop_rate: float = 0.01
    duplicate_rate: float = 0.01
    fault_gap_ms: tuple[int, int] = (1_500, 5_000)
    max_time_ms: int = 600_000
    settle_ms: int = 120_000  # after the workload: how long the cluster has to become safe
    encode_messages: bool = False
    split_brain_protection: bool = True
    assign_on_first_use: bool = False

    def simulation(self, seed: int) -> Simulation:
        """A simulator for these parameters, checking the per-step invariants."""
        sim = Simulation(
            seed,
            self.member_config(),
            NetworkConfig(drop_rate=self.drop_rate, duplicate_rate=self.duplicate_rate),
            encode_messages=self.encode_messages,
        )
        sim.checks.append(check_step)
        return sim

    def member_config(self) -> MemberConfig:
        return MemberConfig(
            partition_count=self.partitions,
            backup_count=self.backups,
            max_parallel_migrations=self.max_parallel_migrations,
            split_brain_protection=self.split_brain_protection,
            assign_partitions_on_first_use=self.assign_on_first_use,
        )


@dataclass(slots=True)
class SimResult:
    seed: int
    params: SimParams
    passed: bool
    problems: list[str]
    trace_hash: str
    simulated_ms: int
    wall_seconds: float
    events: int
    writes: dict[str, int]
    reads_checked: int
    faults_injected: list[str] = field(default_factory=list)
    time_to_safe_ms: list[int] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "params": asdict(self.params),
            "verdict": "PASS" if self.passed else "FAIL",
            "problems": self.problems[:20],
            "simulated_ms": self.simulated_ms,
            "wall_seconds": round(self.wall_seconds, 3),
            "events": self.events,
            "events_per_second": round(self.events / self.wall_seconds) if self.wall_seconds else None,
            "writes": self.writes,
            "reads_checked": self.reads_checked,
            "faults": self.faults_injected,
            "time_to_safe_ms": self.time_to_safe_ms,
            "trace_hash": self.trace_hash,
            **self.stats,
        }


class Run:
    def __init__(self, seed: int, params: SimParams) -> None:
        for fault in params.faults:
            if fault not in FAULTS:
                raise ValueError(f"unknown fault {fault!r}; choose from {', '.join(FAULTS)}")
        self.params = params
        self.sim = params.simulation(seed)
        self.rng = self.sim.rng
        self.losses = 0  # members lost since the cluster was last safe
        self.budget = 0  # members that may be lost before the next safe point
        self.crashed: list[str] = []
        self.faults: list[str] = []
        self.fault_started_ms: int | None = None
        self.time_to_safe: list[int] = []
        self.max_members = params.members + 3

    def start_cluster(self) -> None:
        sim = self.sim
        addresses = sim.reserve_addresses(self.params.members)
        for i, address in enumerate(addresses):
            sim.at(300 * i, lambda address=address: sim.start_member(address))

    def wait_safe(self, limit_ms: int) -> bool:
        deadline = self.sim.now_ms + limit_ms
        while self.sim.now_ms < deadline:
            self.sim.run_until(self.sim.now_ms + SLICE_MS)
            if not unsafe_reason(self.sim):
                self._on_safe()
                return True
        return False

    def _on_safe(self) -> None:
        self.losses = 0
        # At a safe point every partition has min(backups + 1, data members) replicas: that many
        # minus one members may be lost before the next safe point.
        members = len(self.sim.live_members())
        self.budget = min(self.params.backups, members - 1)
        if self.params.split_brain_protection and members > 2:
            self.budget = min(self.budget, (members - 1) // 2)  # the survivors must be a majority
        if self.fault_started_ms is not None:
            self.time_to_safe.append(self.sim.now_ms - self.fault_started_ms)
            self.fault_started_ms = None

    def run(self) -> SimResult:
        started = time.perf_counter()
        problems: list[str] = []
        try:
            self.start_cluster()
            if not self.wait_safe(60_000):
                problems.append(f"the cluster never became safe after starting: {unsafe_reason(self.sim)}")
            else:
                self._workload()
                self._settle()
                reason = unsafe_reason(self.sim)
                if reason:
                    problems.append(f"not safe {self.params.settle_ms} ms after the workload: {reason}")
                else:
                    problems.extend(final_violations(self.sim))
        except SimulationFailure as failure:
            problems.append(str(failure))
        lost = sorted(self.sim.stats.partitions_lost)
        if lost:
            problems.append(f"partitions lost within the backup budget: {lost[:10]}")
        stats = self.sim.stats
        return SimResult(
            seed=self.sim.seed,
            params=self.params,
            passed=not problems,
            problems=problems,
            trace_hash=self.sim.trace_hash(),
            simulated_ms=self.sim.now_ms,
            wall_seconds=time.perf_counter() - started,
            events=stats.events,
            writes=self.sim.ledger.counts(),
            reads_checked=self.sim.ledger.reads_checked,
            faults_injected=self.faults,
            time_to_safe_ms=self.time_to_safe,
            stats={
                "migrations_finished": stats.migrations_finished,
                "migrations_failed": stats.migrations_failed,
                "messages_sent": stats.messages_sent,
                "messages_dropped": stats.messages_dropped,
            },
        )

    def _workload(self) -> None:
        sim, params = self.sim, self.params
        clients = [sim.add_client() for _ in range(params.clients)]
        for i, client in enumerate(clients):
            client.give(params.ops // params.clients + (1 if i < params.ops % params.clients else 0))
        next_fault = sim.now_ms + self.rng.randint(*params.fault_gap_ms)
        while not all(c.idle for c in clients) and sim.now_ms < params.max_time_ms:
            sim.run_until(sim.now_ms + SLICE_MS)
            if not unsafe_reason(sim):
                self._on_safe()
            if params.faults and sim.now_ms >= next_fault:
                self._inject()
                next_fault = sim.now_ms + self.rng.randint(*params.fault_gap_ms)

    def _settle(self) -> None:
        sim = self.sim
        sim.heal()
        for address, node in sorted(sim.nodes.items()):
            if node.alive and node.paused:
                sim.resume(address)
        self.wait_safe(self.params.settle_ms)

    # --- faults ----------------------------------------------------------------------------------

    def _inject(self) -> None:
        sim = self.sim
        fault = self.rng.choice(self.params.faults)
        if fault == "split" and not self.params.split_brain_protection:
            fault = "crash"  # a split without protection may lose writes by design: not under test
        alive = sorted(a for a, n in sim.nodes.items() if n.alive and not n.paused)
        master = sim.master()
        can_lose = self.losses < self.budget and not sim.network.groups
        if fault == "crash" and can_lose:
            victims = [a for a in alive if master is None or a != master.identity.address]
            if victims:
                self._lose(self.rng.choice(victims), "crash")
        elif fault == "master-crash" and can_lose and master is not None:
            self._lose(master.identity.address, "master-crash")
        elif fault == "restart" and self.crashed:
            address = self.crashed.pop(0)
            self.faults.append(f"{sim.now_ms}: restart {address}")
            sim.restart(address)
        elif fault == "join" and len(alive) < self.max_members:
            address = sim.start_member()
            sim.stats.joins += 1
            self.faults.append(f"{sim.now_ms}: join {address}")
        elif fault == "split" and can_lose and len(alive) >= 3:
            victim = self.rng.choice(alive)
            self.losses += 1
            self._mark_fault()
            others = [a for a in alive if a != victim]
            sim.split([others, [victim]])
            duration = sim.config.failure_timeout_ms + self.rng.randint(1_000, 4_000)
            sim.at(sim.now_ms + duration, sim.heal)
            self.faults.append(f"{sim.now_ms}: split {victim} off for {duration} ms")
        elif fault == "pause" and can_lose:
            victim = self.rng.choice(alive)
            duration = self.rng.choice([1_000, sim.config.failure_timeout_ms + 2_000])
            self.losses += 1
            self._mark_fault()
            sim.pause(victim)
            sim.at(sim.now_ms + duration, lambda: sim.resume(victim))
            self.faults.append(f"{sim.now_ms}: pause {victim} for {duration} ms")

    def _lose(self, address: str, what: str) -> None:
        self.losses += 1
        self._mark_fault()
        self.sim.crash(address)
        self.crashed.append(address)
        self.faults.append(f"{self.sim.now_ms}: {what} {address}")
        if "restart" not in self.params.faults:
            return

    def _mark_fault(self) -> None:
        if self.fault_started_ms is None:
            self.fault_started_ms = self.sim.now_ms


def run_seed(seed: int, params: SimParams) -> SimResult:
    return Run(seed, params).run()
