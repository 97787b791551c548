"""The cluster commands on a real cluster: exit codes and what is left running (checked by PID).

``shardgrid shutdown ADDRESS --timeout 15`` while rebalancing is paused (``rebalance pause``,
NO_MIGRATION): the member accepts the leave, marks itself leaving and then waits for migrations
that the cluster state forbids, up to graceful_shutdown_timeout_ms (600 s), without refusing; the
command meanwhile ignores its own ``--timeout`` (cluster_commands.py ``shutdown`` raises it to at
least 600 s), so it hangs for ten minutes with no output. Expected: the command ends within its
``--timeout`` (exit 1, saying why), or the member refuses a leave that cannot progress in
NO_MIGRATION. (After ``rebalance resume`` the leave completes.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from shardgrid.client import Client
from tests.runtime.local_cluster import LocalCluster, leader_of

from .test_local_up_named_cluster import SRC, run_cli

FAST = ("--partition-count", "31", "--set", "failure_timeout_ms=3000")


def _loaded(running: LocalCluster) -> tuple[str, str]:
    """The cluster formed, 2,000 entries in, safe: its members as --members, and its leader."""
    running.wait_formed()
    with Client(running.addresses) as client:
        client.get_map("m").put_all({f"k{i}": i for i in range(2_000)})
        client.wait_until_safe(60)
        return ",".join(running.addresses), leader_of(client)


def test_shutdown_while_paused_ends_within_its_timeout(tmp_path):
    with LocalCluster(tmp_path, 4, *FAST) as running:
        members, leader = _loaded(running)
        assert run_cli("rebalance", "pause", "--members", members).returncode == 0
        leaver = next(a for a in running.addresses if a != leader)
        command = [sys.executable, "-m", "shardgrid", "shutdown", leaver, "--members", members, "--timeout", "15"]
        shut = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": SRC}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)  # fmt: skip
        try:
            try:
                code = shut.wait(timeout=40)
            except subprocess.TimeoutExpired:
                code = None
            assert code is not None, "shutdown --timeout 15 still running after 40 s (paused cluster)"
            output = shut.stdout.read().decode() if shut.stdout is not None else ""
            assert code == 1, output
            assert "no-migration" in output, output  # refused at once, saying why
        finally:
            if shut.poll() is None:
                shut.send_signal(signal.SIGKILL)
                shut.wait(timeout=10)
            run_cli("rebalance", "resume", "--members", leader)


def test_pause_resume_safe_status_and_a_kill(tmp_path):
    with LocalCluster(tmp_path, 3, *FAST) as running:
        members, leader = _loaded(running)
        assert run_cli("safe", "--members", members, "--wait", "30").returncode == 0
        assert run_cli("rebalance", "pause", "--members", members).returncode == 0
        victim = next(a for a in running.addresses if a != leader)
        running.kill(victim)
        now = run_cli("safe", "--members", leader)
        assert now.returncode == 1, f"safe right after a SIGKILL: {now.stdout}"
        status = run_cli("status", "--members", leader, "--json")
        assert status.returncode == 0
        assert victim in status.stdout
        time.sleep(6)  # removed, backups promoted; nothing refilled while paused
        paused = run_cli("safe", "--members", leader)
        assert paused.returncode == 1, f"safe while paused with replicas missing: {paused.stdout}"
        with Client([leader]) as client:
            assert len(client.get_map("m").get_all([f"k{i}" for i in range(2_000)])) == 2_000
        assert run_cli("rebalance", "resume", "--members", leader).returncode == 0
        safe = run_cli("safe", "--members", leader, "--wait", "60", timeout=90)
        assert safe.returncode == 0, safe.stdout + safe.stderr
        document = json.loads(run_cli("status", "--members", leader, "--json").stdout)
        assert document["safe"]
        assert len(document["members"]) == 2
