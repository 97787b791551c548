"""The commands a user runs against a cluster, as a user runs them: ``local up``, ``status``,
``safe``, ``state``, ``map``, ``shutdown``, ``local down``, each a process with its exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from shardgrid.cli.local_cluster import alive, port_is_free


def _shardgrid(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardgrid", *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def _base_port() -> int:
    base = 21_000 + (os.getpid() % 500) * 20
    while not all(port_is_free(port) for port in range(base, base + 4)):
        base += 4
    return base


def test_a_local_cluster_from_up_to_down(tmp_path):
    base = _base_port()
    directory = tmp_path / "local"
    up = _shardgrid(
        "local", "up", "--members", "3", "--base-port", str(base), "--dir", str(directory),
        "--set", "bootstrap_after_ms=300",
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    pids = [member["pid"] for member in json.loads((directory / "cluster.json").read_text())["members"]]
    members = ",".join(f"127.0.0.1:{port}" for port in range(base, base + 3))
    joiner: subprocess.Popen[bytes] | None = None
    try:
        assert _shardgrid("safe", "--members", members, "--wait", "60").returncode == 0
        watched = _shardgrid("watch", "--members", members, "--until-safe", "30")
        assert watched.returncode == 0
        assert "safe after" in watched.stdout
        assert "no migrations" in watched.stdout  # not "1/1 migrations" (found by an outside tester)
        waited = _shardgrid("watch", "--members", members, "--until-members", "4", "--until-safe", "2")
        assert waited.returncode == 1
        assert "not safe after 2 s: 3 members, not 4 yet" in waited.stdout
        # A rolling restart's gate: safe with the restarted member back, not only without it.
        short = _shardgrid("safe", "--members", members, "--until-members", "4", "--wait", "1")
        assert short.returncode == 1
        assert "3 members, not 4 yet" in short.stdout
        assert _shardgrid("safe", "--members", members, "--until-members", "3").returncode == 0
        status = json.loads(_shardgrid("status", "--members", members, "--json").stdout)
        assert len(status["members"]) == 3
        assert status["safe"] is True
        assert sum(member["owned_partitions"] for member in status["members"]) == 271
        listed = json.loads(_shardgrid("partitions", "list", "--members", members, "--json").stdout)
        assert [row["partition_id"] for row in listed] == list(range(271))
        addresses = {member["address"] for member in status["members"]}
        for row in listed:  # one backup on another member, none unavailable
            assert row["owner"] in addresses
            assert len(row["backups"]) == 1
            assert row["backups"][0] != row["owner"]
            assert row["backups"][0] in addresses
            assert not row["unavailable"]
        owned = {address: sum(row["owner"] == address for row in listed) for address in addresses}
        assert owned == {member["address"]: member["owned_partitions"] for member in status["members"]}
        assert _shardgrid("map", "put", "users", "ada", '{"born": 1815}', "--members", members).returncode == 0
        got = _shardgrid("map", "get", "users", "ada", "--members", members)
        assert json.loads(got.stdout) == {"born": 1815}
        missing = _shardgrid("map", "get", "users", "nobody", "--members", members)
        assert missing.returncode == 1
        assert "no key" in missing.stderr
        assert _shardgrid("map", "size", "users", "--members", members).stdout.strip() == "1"
        # Conditional writes and entry views from the shell.
        assert _shardgrid("map", "replace", "users", "bob", "x", "--members", members).returncode == 1
        swapped = _shardgrid(
            "map", "replace", "users", "ada", "2", "--if-value", '{"born": 1815}', "--members", members
        )
        assert swapped.returncode == 0, swapped.stderr
        stale = _shardgrid("map", "replace", "users", "ada", "3", "--if-value", '{"born": 1815}', "--members", members)
        assert stale.returncode == 1
        assert "does not hold" in stale.stderr
        entry = json.loads(_shardgrid("map", "entry", "users", "ada", "--members", members).stdout)
        assert (entry["value"], entry["version"], entry["expire_at_ms"]) == (2, 2, 0)
        assert _shardgrid("map", "set-ttl", "users", "ada", "600", "--members", members).returncode == 0
        renewed = json.loads(_shardgrid("map", "entry", "users", "ada", "--members", members).stdout)
        assert renewed["value"] == 2
        assert renewed["expire_at_ms"] >= renewed["updated_ms"] + 600_000
        assert _shardgrid("map", "set-ttl", "users", "nobody", "1", "--members", members).returncode == 1
        assert _shardgrid("map", "remove", "users", "ada", "--if-value", "3", "--members", members).returncode == 1
        assert _shardgrid("map", "remove", "users", "ada", "--if-value", "2", "--members", members).returncode == 0
        assert (
            _shardgrid("map", "put", "users", "ada", '{"born": 1815}', "--ttl", "0", "--members", members).returncode
            == 0
        )
        assert _shardgrid("state", "set", "no-migration", "--members", members).returncode == 0
        assert _shardgrid("state", "get", "--members", members).stdout.strip() == "no-migration"
        assert _shardgrid("state", "set", "active", "--members", members).returncode == 0
        leaving = f"127.0.0.1:{base + 2}"
        assert _shardgrid("shutdown", leaving, "--members", members).returncode == 0
        status = json.loads(_shardgrid("status", "--members", members, "--json").stdout)
        assert [member["address"] for member in status["members"]] == members.split(",")[:2]
        assert json.loads(_shardgrid("map", "get", "users", "ada", "--members", members).stdout) == {"born": 1815}
        # The README's tour: a member started in the background, then watched until it is in and its
        # rebalance is done (without --until-members the watch ended at once: "0 migrations").
        joiner = subprocess.Popen(
            [sys.executable, "-m", "shardgrid", "member", "start", "--port", str(base + 3), "--join", members],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        watched = _shardgrid("watch", "--members", members, "--until-members", "3", "--until-safe", "60")
        assert watched.returncode == 0, watched.stdout
        assert "safe after" in watched.stdout
        # The watch ended only once the joiner was in and its rebalance done. (Whether it saw
        # migrations depends on the race between the two processes' starts: a rebalance of a few
        # entries can end before the watch's first look, and it then rightly says 0 migrations.)
        joined = json.loads(_shardgrid("status", "--members", members, "--json").stdout)
        assert len(joined["members"]) == 3
        joiner_status = next(m for m in joined["members"] if m["address"] == f"127.0.0.1:{base + 3}")
        assert joiner_status["owned_partitions"] > 0, joined
        unreachable = _shardgrid("status", "--members", "127.0.0.1:1", "--timeout", "2")
        assert unreachable.returncode == 3
    finally:
        if joiner is not None:
            joiner.kill()
            joiner.wait(timeout=30)
        down = _shardgrid("local", "down", "--dir", str(directory))
    assert down.returncode == 0, down.stderr
    assert not any(alive(pid) for pid in pids)
    assert not (directory / "cluster.json").exists()
