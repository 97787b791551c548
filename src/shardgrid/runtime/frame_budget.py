"""The bytes of part-read frames a member process lets its client connections hold at once.

A frame is held whole until its last byte arrives, so each client session could hold one frame of
up to ``max_frame_bytes`` (16 MiB) while it trickles in: a client that starts such frames on many
connections and never ends them held that much per connection (found by an outside tester: 6
sessions took a member from 39 to 123 MiB; ``MAX_CLIENT_CONNECTIONS`` allow 4,096). Here a stream
claims a part-read frame's declared size from one process-wide budget before it reads on; a claim
that does not fit waits, first come first served, with its connection's reading paused, and is
granted as frames complete. The process closes a connection whose claimed frame is not whole
``frame_timeout_ms`` after its grant, or gets no byte for ``frame_stall_timeout_ms`` while it is
read, so claims cannot be held forever, nor long by a connection that sends nothing.

Every frame fits the budget on its own (the settings check that it is at least ``max_frame_bytes``),
so a claim waits only for others to finish, never for ever.
"""

from __future__ import annotations

from typing import Protocol

from shardgrid.core.errors import invariant

# A part-read frame this small is held without a claim: at most this much per client connection
# (64 MiB over MAX_CLIENT_CONNECTIONS), where most frames arrive whole in one read anyway.
UNBUDGETED_FRAME_BYTES = 16 * 1024


class Claimant(Protocol):
    def budget_granted(self, frame_bytes: int) -> None:
        """Its claim of ``frame_bytes`` has been granted after waiting: it may read on."""


class FrameBudget:
    """Owns the count of bytes claimed; streams ask (``claim``) and give back (``release``)."""

    def __init__(self, capacity_bytes: int) -> None:
        invariant(capacity_bytes > 0, "a frame budget holds at least one byte")
        self.capacity_bytes = capacity_bytes
        self.claimed_bytes = 0
        self._claims: dict[Claimant, int] = {}
        self._waiting: dict[Claimant, int] = {}  # in the order they came: granted in that order

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def claim(self, claimant: Claimant, frame_bytes: int) -> bool:
        """True when ``frame_bytes`` are now the claimant's; False when it waits its turn (told by
        ``budget_granted``). A claimant holds one claim at most: it releases one before the next."""
        invariant(0 < frame_bytes <= self.capacity_bytes, "a claimed frame fits the budget")
        invariant(claimant not in self._claims, "one claim per claimant")
        invariant(claimant not in self._waiting, "a waiting claimant does not claim again")
        if not self._waiting and self.claimed_bytes + frame_bytes <= self.capacity_bytes:
            self._grant(claimant, frame_bytes)
            return True
        self._waiting[claimant] = frame_bytes
        return False

    def release(self, claimant: Claimant) -> None:
        """Gives back the claimant's bytes (or its place in the queue), and grants what now fits."""
        self._waiting.pop(claimant, None)
        self.claimed_bytes -= self._claims.pop(claimant, 0)
        invariant(self.claimed_bytes >= 0, "no more bytes given back than claimed")
        while self._waiting:
            first, wanted = next(iter(self._waiting.items()))
            if self.claimed_bytes + wanted > self.capacity_bytes:
                break
            del self._waiting[first]
            self._grant(first, wanted)
            first.budget_granted(wanted)

    def _grant(self, claimant: Claimant, frame_bytes: int) -> None:
        self._claims[claimant] = frame_bytes
        self.claimed_bytes += frame_bytes
        invariant(self.claimed_bytes <= self.capacity_bytes, "claims stay within the budget")
