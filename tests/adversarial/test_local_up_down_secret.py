"""`shardgrid local up/down` with a cluster name and secret: up waits for a leader, down shuts it down itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.runtime.local_cluster import free_ports

SECRET = {"SHARDGRID_CLUSTER_SECRET": "s3cret-s3cret-s3cret"}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args: str, env: dict[str, str], timeout: float = 90) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"), **env}
    return subprocess.run(
        [sys.executable, "-m", "shardgrid", *args], capture_output=True, text=True, timeout=timeout, env=full
    )


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("secret_via", ["env", "set"])
def test_local_up_down_named_secret(tmp_path, secret_via):
    """Found by a third outside tester: with the secret given by --set, `local down` could not reach
    the cluster (the state file never holds the secret). `up` now refuses it there, at once."""
    base = free_ports(1)[0]
    env = {"SHARDGRID_CLUSTER_SECRET": "s3cret-s3cret-s3cret"} if secret_via == "env" else {}
    extra = ("--set", "cluster_secret=s3cret-s3cret-s3cret") if secret_via == "set" else ()
    directory = tmp_path / "local"
    pids: list[int] = []
    try:
        up = cli(
            "local",
            "up",
            "--members",
            "3",
            "--base-port",
            str(base),
            "--dir",
            str(directory),
            "--set",
            "cluster_name=adv3",
            "--set",
            "bootstrap_after_ms=300",
            *extra,
            "--timeout",
            "60",
            env=env,
        )
        state = json.loads((directory / "cluster.json").read_text()) if (directory / "cluster.json").exists() else None
        if state is None:
            files = list(directory.glob("*.json"))
            state = json.loads(files[0].read_text()) if files else {"members": []}
        pids = [m["pid"] for m in state["members"]]
        if secret_via == "set":
            assert up.returncode == 2, up.stderr + up.stdout
            assert "SHARDGRID_CLUSTER_SECRET" in up.stderr
            assert pids == []  # refused before starting anything
            return
        assert up.returncode == 0, up.stderr + up.stdout
        members = ",".join(m["address"] for m in state["members"])
        status = cli(
            "status",
            "--members",
            members,
            "--cluster-name",
            "adv3",
            env={"SHARDGRID_CLUSTER_SECRET": "s3cret-s3cret-s3cret"},
        )
        assert status.returncode == 0, status.stderr
        started = time.monotonic()
        down = cli("local", "down", "--dir", str(directory), "--timeout", "20", env=env)
        took = time.monotonic() - started
        assert down.returncode == 0, down.stderr
        assert not [p for p in pids if alive(p)]
        assert "did not shut down by itself" not in down.stderr, (down.stderr, took)
    finally:
        for pid in pids:
            if alive(pid):
                os.kill(pid, 9)
