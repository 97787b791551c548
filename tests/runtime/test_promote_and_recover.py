"""``shardgrid promote`` and ``shardgrid recover`` as an operator runs them, on member processes:
a lite member promoted takes partitions; a cluster whose majority of voters was SIGKILLed is led
again by the survivor named, and serves."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from shardgrid.client import Client

from .local_cluster import LocalCluster

FAILURE_TIMEOUT = ("--set", "failure_timeout_ms=3000")


def _shardgrid(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardgrid", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_a_promoted_lite_member_takes_partitions(tmp_path):
    with LocalCluster(tmp_path, 3) as running:
        running.wait_formed()
        lite = running.start(None, running.addresses, 3, "--lite")
        members = ",".join([*running.addresses, lite])
        with Client(running.addresses) as client:
            deadline = time.monotonic() + 60
            while lite not in client.cluster_status().members:
                assert time.monotonic() < deadline, "the lite member never joined"
                time.sleep(0.2)
            client.wait_until_safe(60)
            assert client.cluster_status().replies[lite].owned_partitions == 0
            promoted = _shardgrid("promote", lite, "--members", members)
            assert promoted.returncode == 0, promoted.stderr
            client.wait_until_safe(120)
            assert client.cluster_status().replies[lite].owned_partitions > 0


def test_recover_after_a_lost_majority_makes_the_survivor_lead_and_serve(tmp_path):
    with LocalCluster(tmp_path, 3, *FAILURE_TIMEOUT) as running:
        running.wait_formed()
        survivor, *lost = running.addresses
        with Client(running.addresses) as client:
            client.wait_until_safe(60)
            client.get_map("kept").put("before", 1)
        for address in lost:
            running.kill(address)
        deadline = time.monotonic() + 60
        while True:
            recovered = _shardgrid("recover", survivor, "--yes")  # refused while it heard a leader lately
            if recovered.returncode == 0:
                break
            assert time.monotonic() < deadline, recovered.stderr
            time.sleep(1)
        with Client([survivor], operation_call_timeout_ms=60_000) as client:
            status = client.wait_until_safe(120)
            assert status.leader == survivor
            assert status.members == (survivor,)
            data = client.get_map("kept")
            data.put("after", 2)
            assert data.get("after") == 2
        status = json.loads(_shardgrid("status", "--members", survivor, "--json").stdout)
        assert status["leader"] == survivor
