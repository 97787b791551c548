"""A member's lifecycle as an explicit state with its allowed transitions."""

from __future__ import annotations

import enum

from shardgrid.core.errors import invariant


class Lifecycle(enum.Enum):
    DISCOVERING = "discovering"  # looking for its cluster (or for the peers to form the first one with)
    ACTIVE = "active"  # in the member list it applied from the log
    LEAVING = "leaving"  # shutting down gracefully: handing its replicas over
    STOPPED = "stopped"  # shut down: it handles nothing more


TRANSITIONS: dict[Lifecycle, frozenset[Lifecycle]] = {
    Lifecycle.DISCOVERING: frozenset({Lifecycle.ACTIVE, Lifecycle.STOPPED}),
    # Removed while away: it joins again as a new member (DISCOVERING with a new identity).
    Lifecycle.ACTIVE: frozenset({Lifecycle.LEAVING, Lifecycle.DISCOVERING, Lifecycle.STOPPED}),
    Lifecycle.LEAVING: frozenset({Lifecycle.STOPPED}),
    Lifecycle.STOPPED: frozenset(),
}


def check_transition(current: Lifecycle, new: Lifecycle) -> None:
    invariant(new in TRANSITIONS[current], lambda: f"member lifecycle {current.value} -> {new.value}")
