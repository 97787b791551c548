"""`shardgrid shutdown` of every member of a cluster at the same time: the leader checked each
leave before the others were in the log, and all three were recorded leaving (and waited for each
other for graceful_shutdown_timeout_ms). The leave that would leave no data member is now refused
when it is applied: two members leave, the last one refuses and keeps every entry."""

from __future__ import annotations

import subprocess
import sys

from shardgrid.client import Client
from tests.runtime.local_cluster import LocalCluster


def test_every_member_asked_to_shut_down_at_once_keeps_one_with_every_entry(tmp_path):
    with LocalCluster(tmp_path, 3) as running:
        running.wait_formed()
        entries = {f"k{i}": i for i in range(2_000)}
        with Client(running.addresses, operation_call_timeout_ms=60_000) as client:
            client.get_map("data").put_all(entries)
            client.wait_until_safe(60)
        members = ",".join(running.addresses)
        commands = [
            [sys.executable, "-m", "shardgrid", "shutdown", address, "--members", members, "--timeout", "60"]
            for address in running.addresses
        ]
        asked = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for c in commands]
        outcomes = [(process.wait(timeout=90), process.stdout.read()) for process in asked]
        assert sorted(code == 0 for code, _ in outcomes) == [False, True, True], outcomes
        refused = next(output for code, output in outcomes if code != 0)
        assert "last data member" in refused
        staying = [a for a in running.addresses if running.processes[a].poll() is None]
        left = [a for a in running.addresses if a not in staying]
        assert len(staying) == 1, outcomes
        for address in left:
            assert running.processes[address].wait(timeout=30) == 0
        with Client(staying, operation_call_timeout_ms=60_000) as client:
            assert client.get_map("data").get_all(list(entries)) == entries
