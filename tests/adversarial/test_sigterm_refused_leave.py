"""Found by a third outside tester: SIGTERM while rebalancing is paused stopped the member at once
(the cluster refuses the leave, and the process took any refusal as "the last data member"): a
crash to the cluster, with nothing rebuilt while paused. It now goes on serving until the leave
can happen."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from shardgrid.client import Client
from tests.runtime.local_cluster import LocalCluster, leader_of


def _shardgrid(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "shardgrid", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)


def test_sigterm_while_rebalancing_is_paused_keeps_the_member_serving(tmp_path):
    with LocalCluster(tmp_path, 3) as running:
        running.wait_formed()
        members = ",".join(running.addresses)
        entries = {f"k{i}": i for i in range(500)}
        with Client(running.addresses, operation_call_timeout_ms=60_000) as client:
            client.get_map("data").put_all(entries)
            client.wait_until_safe(60)
            leader = leader_of(client)
        assert _shardgrid("rebalance", "pause", "--members", members).returncode == 0
        victim = next(a for a in running.addresses if a != leader)
        process = running.processes[victim]
        process.send_signal(signal.SIGTERM)
        running.wait_for_log(victim, "member-cannot-leave-now", timeout_s=30)
        time.sleep(1.0)
        assert process.poll() is None, running.log_text(victim)[-1500:]
        assert _shardgrid("rebalance", "resume", "--members", members).returncode == 0
        assert _shardgrid("shutdown", victim, "--members", members, "--timeout", "60").returncode == 0
        assert process.wait(timeout=30) == 0
        survivors = [a for a in running.addresses if a != victim]
        with Client(survivors, operation_call_timeout_ms=60_000) as client:
            assert client.get_map("data").get_all(list(entries)) == entries
