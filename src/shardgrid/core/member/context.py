"""What every concern of a member shares: who it is, its settings, the clock and the outbox.

Concerns never hold each other's state; they reach what they need through the concern that owns
it. The context holds only what is the member's as a whole.
"""

from __future__ import annotations

import random
from typing import Any

from shardgrid.core.config import MemberConfig
from shardgrid.core.disk_usage import DiskUsage
from shardgrid.core.effects import (
    DiskFile,
    Effect,
    Emit,
    Persist,
    ReplyToClient,
    Send,
    SendToAddress,
    SetTimer,
    WriteMode,
)
from shardgrid.core.identity import MemberId


class Context:
    __slots__ = (
        "clock_offset_ms",
        "config",
        "disk",
        "hash_seed",
        "identity",
        "lite",
        "now_ms",
        "out",
        "rng",
        "seed_addresses",
    )

    def __init__(
        self,
        identity: MemberId,
        config: MemberConfig,
        seed_addresses: tuple[str, ...],
        rng: random.Random,
        lite: bool,
        *,
        hash_seed: int = 0,
        clock_offset_ms: int = 0,
    ) -> None:
        self.identity = identity
        self.config = config
        self.seed_addresses = seed_addresses
        self.rng = rng
        self.lite = lite
        self.now_ms = 0
        self.out: list[Effect] = []
        self.disk = DiskUsage()  # what a persistent member wrote, and what its runtime says of it
        # Keys the storage engine's hash tables (from the runtime's randomness or the simulator's
        # seed): a client that does not know it cannot choose keys that collide.
        self.hash_seed = hash_seed
        # ``now_ms`` counts from the member's start; records carry times every member reads alike
        # (an expiry set on one owner holds on the next), so they are on the record clock: the
        # wall clock when the member started, advanced by ``now_ms`` (never back, whatever the
        # wall clock does later).
        self.clock_offset_ms = clock_offset_ms

    @property
    def records_ms(self) -> int:
        """The record clock: the time records are written, read and expire at."""
        return self.now_ms + self.clock_offset_ms

    def send(self, target: MemberId, message: Any) -> None:
        self.out.append(Send(target, message))

    def send_to_address(self, address: str, message: Any) -> None:
        self.out.append(SendToAddress(address, message))

    def reply(self, client_address: str, message: Any) -> None:
        self.out.append(ReplyToClient(client_address, message))

    def emit(self, event: Any) -> None:
        self.out.append(Emit(event))

    def set_timer(self, name: str, at_ms: int) -> None:
        self.out.append(SetTimer(name, at_ms))

    def persist(
        self, file: DiskFile, data: bytes, *, mode: WriteMode = WriteMode.APPEND, hold_sends: bool = True
    ) -> int:
        """Emit a write; its number among the member's writes (``Synced`` counts them)."""
        self.out.append(Persist(file=file, data=data, mode=mode, hold_sends=hold_sends))
        return self.disk.wrote(file, len(data), mode=mode, now_ms=self.now_ms)
