"""The simulated network: latency, reordering, loss, duplication and splits, all from a seeded rng."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(slots=True)
class NetworkConfig:
    min_latency_ms: int = 1
    max_latency_ms: int = 5  # latency is uniform in between, so messages overtake each other
    drop_rate: float = 0.0
    duplicate_rate: float = 0.0


@dataclass(slots=True)
class Network:
    config: NetworkConfig
    rng: random.Random
    groups: dict[str, int] = field(default_factory=dict)  # address -> side of a split
    # A split that holds a client's messages across it instead of dropping them, as a client's
    # kernel retransmits a request it could not deliver: they arrive after the heal, up to this
    # much later (0: dropped).
    hold_ms: int = 0

    def cut(self, source: str, target: str) -> bool:
        """Whether a split separates the two (a client a split does not name reaches both sides)."""
        groups = self.groups
        return source in groups and target in groups and groups[source] != groups[target]

    def deliveries(self, source: str, target: str) -> list[int]:
        """The latencies of the copies of one message that arrive (none when dropped or split)."""
        if self.cut(source, target):
            return []
        if self.rng.random() < self.config.drop_rate:
            return []
        copies = 2 if self.rng.random() < self.config.duplicate_rate else 1
        return [self.rng.randint(self.config.min_latency_ms, self.config.max_latency_ms) for _ in range(copies)]

    def split(self, sides: list[list[str]]) -> None:
        self.groups = {address: side for side, addresses in enumerate(sides) for address in addresses}

    def heal(self) -> None:
        self.groups = {}
        self.hold_ms = 0
