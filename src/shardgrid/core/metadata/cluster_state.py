"""The cluster states of seed 002, with the two permissions Hazelcast derives everything from."""

from __future__ import annotations

import enum


class ClusterState(enum.Enum):
    ACTIVE = "active"
    NO_MIGRATION = "no-migration"
    FROZEN = "frozen"
    PASSIVE = "passive"

    @property
    def join_allowed(self) -> bool:
        return self in (ClusterState.ACTIVE, ClusterState.NO_MIGRATION)

    @property
    def migration_allowed(self) -> bool:
        """Rebalancing and refilling missing backups (a crashed owner's backup is promoted anyway)."""
        return self is ClusterState.ACTIVE

    @property
    def writes_allowed(self) -> bool:
        """PASSIVE, the state a cluster shuts down from, serves reads only."""
        return self is not ClusterState.PASSIVE

    @classmethod
    def parse(cls, text: str) -> ClusterState:
        normalized = text.strip().lower().replace("_", "-")
        for state in cls:
            if state.value == normalized:
                return state
        choices = ", ".join(s.value for s in cls)
        raise ValueError(f"unknown cluster state {text!r}; choose from {choices}")
