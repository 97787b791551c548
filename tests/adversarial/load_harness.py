"""A ledger of acknowledged writes, written by a few threads while faults strike."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from shardgrid.client import Client


@dataclass
class Ledger:
    acked: dict[str, int] = field(default_factory=dict)  # key -> last acknowledged version
    tried: dict[str, int] = field(default_factory=dict)  # key -> last version attempted
    errors: list[str] = field(default_factory=list)
    acks: int = 0


class Load:
    """``threads`` writers, each its own keys, each key rewritten with rising versions."""

    def __init__(self, client: Client, map_name: str, threads: int = 4, keys_per_thread: int = 300) -> None:
        self.client = client
        self.map = client.get_map(map_name)
        self.ledger = Ledger()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._run, args=(t, keys_per_thread), daemon=True) for t in range(threads)
        ]

    def _run(self, t: int, count: int) -> None:
        version = 0
        while not self.stop.is_set():
            version += 1
            for i in range(count):
                if self.stop.is_set():
                    return
                key = f"t{t}-k{i}"
                with self.lock:
                    self.ledger.tried[key] = version
                try:
                    self.map.set(key, version)
                except Exception as error:
                    with self.lock:
                        self.ledger.errors.append(f"{type(error).__name__}: {error}"[:200])
                    continue
                with self.lock:
                    self.ledger.acked[key] = version
                    self.ledger.acks += 1

    def start(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def finish(self) -> Ledger:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=150)
        return self.ledger


def lost_writes(client: Client, map_name: str, ledger: Ledger) -> dict[str, tuple[int, object]]:
    """Keys whose value is older than their last acknowledged write: {key: (acked, found)}."""
    keys = list(ledger.acked)
    found = client.get_map(map_name).get_all(keys)
    lost = {}
    for key in keys:
        value = found.get(key)
        if value is None or value < ledger.acked[key] or value > ledger.tried[key]:
            lost[key] = (ledger.acked[key], value)
    return lost


def wait_safe(client: Client, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    client.wait_until_safe(max(1.0, deadline - time.monotonic()))
