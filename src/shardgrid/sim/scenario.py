"""A scripted run: the building blocks named fault scenarios are written with.

Where ``vopr`` injects random faults, a scenario places each fault at an exact step (for example
"the destination crashes right after applying the commit, before its acknowledgement leaves"),
using the simulator's delivery hooks, and then checks the same end state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shardgrid.core.member import Member
from shardgrid.sim.checkers import final_violations, unsafe_reason
from shardgrid.sim.vopr import SimParams
from shardgrid.sim.workload import SimClient

SLICE_MS = 100


class Scenario:
    def __init__(self, seed: int, params: SimParams) -> None:
        self.params = params
        self.sim = params.simulation(seed)
        self.clients: list[SimClient] = []

    # --- running -------------------------------------------------------------------------------

    def start(self, members: int | None = None) -> list[str]:
        count = members if members is not None else self.params.members
        addresses = self.sim.reserve_addresses(count)
        for i, address in enumerate(addresses):
            self.sim.at(self.sim.now_ms + 300 * i, lambda address=address: self.sim.start_member(address))
        self.run_until(lambda: len(self.sim.member_addresses()) == count and not unsafe_reason(self.sim))
        self.sim.request_assignment()
        self.run_until(lambda: self.sim.master() is not None and self.sim.master().consensus.state.table is not None)
        self.wait_safe()
        return addresses

    def run_for(self, duration_ms: int) -> None:
        self.sim.run_until(self.sim.now_ms + duration_ms)

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

    def load(self, operations: int, clients: int = 3) -> None:
        """Start clients working through ``operations`` in all (they run while the test goes on)."""
        for i in range(clients):
            client = self.sim.add_client()
            client.give(operations // clients + (1 if i < operations % clients else 0))
            self.clients.append(client)

    def finish_load(self, limit_ms: int = 300_000) -> None:
        self.run_until(lambda: all(c.idle for c in self.clients), limit_ms)

    def verdict(self) -> list[str]:
        """Everything a finished run must satisfy: safe, nothing lost, replicas equal owners."""
        self.finish_load()
        self.sim.heal()
        for address, node in sorted(self.sim.nodes.items()):
            if node.alive and node.paused:
                self.sim.resume(address)
        self.wait_safe()
        return final_violations(self.sim)

    # --- looking ---------------------------------------------------------------------------------

    @property
    def master(self) -> Member:
        master = self.sim.master()
        assert master is not None, unsafe_reason(self.sim)
        return master

    def member_at(self, address: str) -> Member:
        return self.sim.nodes[address].member

    def address_of_owner_of_most(self) -> str:
        table = self.master.consensus.state.table
        assert table is not None
        counts: dict[str, int] = {}
        for slots in table.replicas:
            if slots[0] is not None:
                counts[slots[0].address] = counts.get(slots[0].address, 0) + 1
        return max(sorted(counts), key=lambda a: counts[a])

    # --- faults at exact steps -------------------------------------------------------------------

    def once_delivered(
        self, message_type: type, action: Callable[[str, Any], None], where: Callable[[str, Any], bool] | None = None
    ) -> list[Any]:
        """Run ``action(address, message)`` right after the first matching delivery is handled."""
        fired: list[Any] = []

        def hook(address: str, _sender: str, message: Any) -> None:
            if fired or not isinstance(message, message_type) or (where is not None and not where(address, message)):
                return
            fired.append((address, message))
            self.sim.after_delivery.remove(hook)
            action(address, message)

        self.sim.after_delivery.append(hook)
        return fired
