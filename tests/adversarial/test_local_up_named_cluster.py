"""``shardgrid local up`` cannot start a cluster with another name or a secret.

``local up --set cluster_name=NAME`` (or ``--set cluster_secret=...``, or with
``$SHARDGRID_CLUSTER_SECRET`` exported, which the README recommends for the cluster commands and
which the members read as their own setting) starts the members fine, but
``wait_until_formed`` (cli/local_cluster.py) asks them through a ``Client`` with the default
cluster name and no secret: the handshake is refused, ``AuthenticationError`` is not the
``ClusterUnavailableError`` the loop retries, and ``local up`` kills the healthy cluster it just
started and exits 1 ("refused the handshake ... stopped the members it started"). ``local down``
has the same blind spot (its shutdown_cluster is refused; it falls back to signals).

Expected: ``local up`` exits 0 with the cluster formed (it knows the name and secret it passed).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.runtime.local_cluster import free_ports

SRC = str(Path(__file__).resolve().parents[2] / "src")


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": SRC, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "shardgrid", *args], capture_output=True, text=True, env=full_env, timeout=timeout
    )


def kill_left_behind(directory: Path) -> None:
    try:
        members = json.loads((directory / "cluster.json").read_text())["members"]
    except (OSError, ValueError):
        return
    for member in members:
        try:
            cmdline = Path(f"/proc/{member['pid']}/cmdline").read_bytes()
        except OSError:
            continue
        if b"shardgrid" in cmdline:
            os.kill(member["pid"], signal.SIGKILL)


@pytest.mark.parametrize(
    ("extra", "env"),
    [
        (("--set", "cluster_name=orders"), {}),
        ((), {"SHARDGRID_CLUSTER_SECRET": "a-long-enough-secret-1234"}),
    ],
    ids=["cluster_name", "secret-from-env"],
)
def test_local_up_forms_a_cluster_with_a_name_or_secret(tmp_path, extra, env):
    directory = tmp_path / "local"
    port = free_ports(1)[0]
    try:
        up = run_cli(
            "local",
            "up",
            "--members",
            "1",
            "--base-port",
            str(port),
            "--dir",
            str(directory),
            "--timeout",
            "20",
            *extra,
            env=env,
        )
        assert up.returncode == 0, f"local up exited {up.returncode}: {up.stderr.strip()[-400:]}"
    finally:
        down = run_cli("local", "down", "--dir", str(directory), "--timeout", "5", env=env)
        kill_left_behind(directory)
        time.sleep(0.2)
    assert down.returncode == 0
