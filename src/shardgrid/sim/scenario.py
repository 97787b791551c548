"""A cluster started and brought to safe, for measurements that then play one fault by hand.

The named fault scenarios are schedule files (``scenarios/``, run by ``schedule.py``); this is what
the benchmarks use to set a cluster up and time what follows.
"""

from __future__ import annotations

from collections.abc import Callable

from shardgrid.core.member import Member
from shardgrid.sim.checkers import unsafe_reason
from shardgrid.sim.vopr import SimParams

SLICE_MS = 100


class Scenario:
    def __init__(self, seed: int, params: SimParams) -> None:
        self.params = params
        self.sim = params.simulation(seed)

    def start(self, members: int | None = None) -> list[str]:
        """Start the members, have the partitions assigned, and wait until the cluster is safe."""
        count = members if members is not None else self.params.members
        addresses = self.sim.reserve_addresses(count)
        for i, address in enumerate(addresses):
            self.sim.at(self.sim.now_ms + 300 * i, lambda address=address: self.sim.start_member(address))
        self.run_until(lambda: len(self.sim.member_addresses()) == count and not unsafe_reason(self.sim))
        self.sim.request_assignment()
        self.run_until(lambda: self.sim.leader() is not None and self.sim.leader().consensus.state.table is not None)
        self.wait_safe()
        return addresses

    def run_until(self, condition: Callable[[], bool], limit_ms: int = 60_000) -> None:
        deadline = self.sim.now_ms + limit_ms
        while not condition():
            if self.sim.now_ms >= deadline:
                raise AssertionError(f"condition not reached in {limit_ms} ms; {unsafe_reason(self.sim)}")
            self.sim.run_until(self.sim.now_ms + SLICE_MS)

    def wait_safe(self, limit_ms: int = 120_000) -> int:
        """Run until the cluster is safe; returns how long that took."""
        started = self.sim.now_ms
        self.run_until(lambda: not unsafe_reason(self.sim), limit_ms)
        return self.sim.now_ms - started

    @property
    def leader(self) -> Member:
        leader = self.sim.leader()
        if leader is None:
            raise AssertionError(f"no leader: {unsafe_reason(self.sim)}")
        return leader
