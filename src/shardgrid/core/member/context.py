"""What every concern of a member shares: who it is, its settings, the clock and the outbox.

Concerns never hold each other's state; they reach what they need through the concern that owns
it. The context holds only what is the member's as a whole.
"""

from __future__ import annotations

import random
from typing import Any

from shardgrid.core.config import MemberConfig
from shardgrid.core.effects import Effect, Emit, ReplyToClient, Send, SendToAddress, SetTimer
from shardgrid.core.identity import MemberId


class Context:
    __slots__ = ("config", "identity", "lite", "now_ms", "out", "rng", "seed_addresses")

    def __init__(
        self, identity: MemberId, config: MemberConfig, seed_addresses: tuple[str, ...], rng: random.Random, lite: bool
    ) -> None:
        self.identity = identity
        self.config = config
        self.seed_addresses = seed_addresses
        self.rng = rng
        self.lite = lite
        self.now_ms = 0
        self.out: list[Effect] = []

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
