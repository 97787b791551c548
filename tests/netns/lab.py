"""Hosts in network namespaces on one bridge, for tests that need a real network partition: on
loopback one member cannot be cut off from some peers and not others. Each host is a namespace
with one address; a cut drops every packet between two groups with nftables in each host (both
ways, silently, as a Jepsen partition does: nothing is refused, the kernel retransmits until it
gives up), and a heal lets them through again. Everything a lab made (processes, by PID, and
namespaces) is gone when it closes; namespaces left by a test run that died are removed at the
next start."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

PREFIX = "sglab"
SUBNET = "10.51.0"
NFT_RULESET = """
table inet lab {
    set cut { type ipv4_addr; }
    chain input { type filter hook input priority 0; policy accept; ip saddr @cut drop; }
    chain output { type filter hook output priority 0; policy accept; ip daddr @cut drop; }
}
"""
COMMAND_TIMEOUT_S = 20  # one ip or nft command


def unavailable_reason() -> str | None:
    """Why this machine cannot run the lab, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "nft") if shutil.which(tool) is None]
    if missing:
        return f"missing {', '.join(missing)} (scripts/netlab.sh installs them)"
    return None


def _run(*argv: str, input_text: str | None = None) -> None:
    result = subprocess.run(argv, input=input_text, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")


def _remove_stale_namespaces() -> None:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    for line in listed.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        match = re.match(rf"{PREFIX}(\d+)-", name)
        if match and not Path(f"/proc/{match.group(1)}").exists():
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=COMMAND_TIMEOUT_S)


class Lab:
    """``hosts`` named namespaces (``m1``, ``a``, ...), each with its own address on one bridge."""

    _count = 0

    def __init__(self, workdir: Path, hosts: list[str]) -> None:
        _remove_stale_namespaces()
        Lab._count += 1
        self.workdir = workdir
        self.tag = f"{PREFIX}{os.getpid()}-{Lab._count}"
        self.bridge = f"{self.tag}-br"
        self.addresses = {host: f"{SUBNET}.{i + 1}" for i, host in enumerate(hosts)}
        self.namespaces: list[str] = []
        self.processes: dict[str, subprocess.Popen[Any]] = {}
        try:
            self._add_namespace(self.bridge)
            _run("ip", "-n", self.bridge, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", self.bridge, "link", "set", "br0", "up")
            for i, host in enumerate(hosts):
                namespace = self.namespace(host)
                self._add_namespace(namespace)
                port = f"v{i}"
                veth = ("type", "veth", "peer", "name", "eth0", "netns", namespace)
                _run("ip", "-n", self.bridge, "link", "add", port, *veth)
                _run("ip", "-n", self.bridge, "link", "set", port, "master", "br0", "up")
                _run("ip", "-n", namespace, "addr", "add", f"{self.addresses[host]}/24", "dev", "eth0")
                _run("ip", "-n", namespace, "link", "set", "eth0", "up")
                _run("ip", "netns", "exec", namespace, "nft", "-f", "-", input_text=NFT_RULESET)
        except BaseException:
            self.close()
            raise

    def _add_namespace(self, name: str) -> None:
        _run("ip", "netns", "add", name)
        self.namespaces.append(name)
        _run("ip", "-n", name, "link", "set", "lo", "up")

    def namespace(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def start(self, name: str, host: str, argv: list[str], **options: Any) -> subprocess.Popen[Any]:
        """``argv`` in ``host``'s namespace, its output in ``name``.log (or piped, with options)."""
        if "stdout" not in options:
            log = (self.workdir / f"{name}.log").open("wb")
            options.update(stdout=log, stderr=subprocess.STDOUT)
        process = subprocess.Popen(["ip", "netns", "exec", self.namespace(host), *argv], **options)
        self.processes[name] = process
        return process

    def cut(self, side: list[str], other: list[str]) -> None:
        """Drop every packet between each host of ``side`` and each of ``other``, both ways."""
        for hosts, away in ((side, other), (other, side)):
            elements = ", ".join(self.addresses[h] for h in away)
            for host in hosts:
                nft = ("nft", "add", "element", "inet", "lab", "cut", f"{{ {elements} }}")
                _run("ip", "netns", "exec", self.namespace(host), *nft)

    def heal(self) -> None:
        for host in self.addresses:
            _run("ip", "netns", "exec", self.namespace(host), "nft", "flush", "set", "inet", "lab", "cut")

    def signal(self, name: str, signum: int) -> None:
        self.processes[name].send_signal(signum)

    def log_text(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGKILL)
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        for name in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=COMMAND_TIMEOUT_S)
        self.namespaces = []

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class Actor:
    """A client process in a host's namespace (tests/netns/actor.py), driven over its pipes."""

    def __init__(self, lab: Lab, name: str, host: str, members: list[str], **settings: int) -> None:
        argv = [sys.executable, str(Path(__file__).with_name("actor.py")), "--members", ",".join(members)]
        for setting, value in settings.items():
            argv += [f"--{setting.replace('_', '-')}", str(value)]
        stderr = (lab.workdir / f"{name}.log").open("wb")
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": stderr, "text": True}
        self.process = lab.start(name, host, argv, **pipes)
        self.answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self.pending: dict[int, dict[str, Any]] = {}
        self.next_id = 1
        threading.Thread(target=self._read, daemon=True).start()
        self.wait(0, timeout_s=60)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.answers.put(json.loads(line))

    def send(self, op: str, **fields: Any) -> int:
        assert self.process.stdin is not None
        command_id = self.next_id
        self.next_id += 1
        self.process.stdin.write(json.dumps({"id": command_id, "op": op, **fields}) + "\n")
        self.process.stdin.flush()
        return command_id

    def wait(self, command_id: int, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while command_id not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0 or self.process.poll() is not None:
                raise AssertionError(f"no answer to command {command_id} within {timeout_s} s")
            with contextlib.suppress(queue.Empty):
                answer = self.answers.get(timeout=min(left, 0.5))
                self.pending[answer["id"]] = answer
        return self.pending.pop(command_id)

    def call(self, op: str, timeout_s: float = 60, **fields: Any) -> dict[str, Any]:
        return self.wait(self.send(op, **fields), timeout_s)
