"""Member processes on 127.0.0.1 for tests: started, killed and always cleaned up by their PIDs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from shardgrid.cli.local_cluster import member_command
from shardgrid.client import Client

FAST_SETTINGS = (
    "--set",
    "bootstrap_after_ms=300",
    "--set",
    "join_retry_ms=100",
)


def leader_of(client: Client, timeout_s: float = 30.0) -> str:
    """The current leader, waiting out an election (on a loaded, slow machine the status may
    name none for a moment, even after the cluster formed)."""
    deadline = time.monotonic() + timeout_s
    while not (leader := client.cluster_status().leader):
        if time.monotonic() > deadline:
            raise AssertionError(f"no leader elected within {timeout_s:g} s")
        time.sleep(0.2)
    return leader


def free_ports(count: int) -> list[int]:
    """Ports the system handed out just now (closed again: a small race, fine on loopback)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class LocalCluster:
    """``size`` founding members (more with ``start``); ``close()`` SIGKILLs whatever is left."""

    def __init__(
        self,
        workdir: Path,
        size: int,
        *extra: str,
        env: dict[str, str] | None = None,
        joins: list[list[int]] | None = None,
        started: int | None = None,
    ) -> None:
        """``joins``: each founder's --join as indexes of the founders (default: every founder);
        ``started``: how many of the ``size`` founders start (default: all)."""
        self.workdir = workdir
        self.extra = extra
        self.env = {**os.environ, **(env or {})}
        self.ports = free_ports(size)
        self.addresses = [f"127.0.0.1:{port}" for port in self.ports]
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}
        for i, address in enumerate(self.addresses[:started]):
            join = self.addresses if joins is None else [self.addresses[j] for j in joins[i]]
            self.start(address, join=join, initial=size)

    def start(self, address: str | None = None, join: list[str] | None = None, initial: int = 3, *more: str) -> str:
        if address is None:
            address = f"127.0.0.1:{free_ports(1)[0]}"
        port = address.rpartition(":")[2]
        log = self.workdir / f"member-{port}-{len(self.logs)}.log"
        command = member_command(int(port), join or self.addresses, initial, (*FAST_SETTINGS, *self.extra, *more))
        with log.open("wb") as out:
            self.processes[address] = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        self.logs[address] = log
        return address

    def log_text(self, address: str) -> str:
        return self.logs[address].read_text(errors="replace")

    def wait_for_log(self, address: str, needle: str, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if needle in self.log_text(address):
                return
            if self.processes[address].poll() is not None:
                raise AssertionError(f"{address} exited:\n{self.log_text(address)[-3000:]}")
            time.sleep(0.05)
        raise AssertionError(f"{address}: no {needle!r} within {timeout_s} s:\n{self.log_text(address)[-3000:]}")

    def wait_formed(self, timeout_s: float = 30) -> LocalCluster:
        """Until every founder has seen a leader (the cluster formed)."""
        for address in self.addresses:
            self.wait_for_log(address, "leader-changed", timeout_s)
        return self

    def kill(self, address: str) -> None:
        process = self.processes[address]
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)

    def terminate(self, address: str, timeout_s: float = 60) -> int:
        process = self.processes[address]
        process.send_signal(signal.SIGTERM)
        return process.wait(timeout=timeout_s)

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
        for process in self.processes.values():
            process.wait(timeout=10)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
