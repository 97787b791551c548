"""A write whose call timed out is not applied later (found by an outside tester in network
namespaces, where the kernel delivered a request 12 to 53 s late, after the heal). Here the owner
is stopped (SIGSTOP) with the request in its socket: the call times out, the owner resumes, reads
the request past its deadline and refuses it, applying nothing."""

from __future__ import annotations

import signal
import time

import pytest

from shardgrid.client import Client, OperationTimeoutError
from shardgrid.core.hashing import partition_id_of_serialized, serialize_key

from .local_cluster import LocalCluster

# A lease long enough to outlast the stop: the owner resumes still serving, so only the deadline
# keeps it from applying what it finds in its socket.
LONG_LEASE = ("--set", "lease_ms=10000", "--set", "lease_renew_interval_ms=1000", "--set", "failure_timeout_ms=20000")


def test_a_write_read_by_its_owner_after_its_call_timed_out_is_not_applied(tmp_path):
    with LocalCluster(tmp_path, 3, *LONG_LEASE) as running:
        running.wait_formed()
        with Client(running.addresses, operation_call_timeout_ms=30_000) as client:
            users = client.get_map("users")
            users.put("k", "before")
            pid = partition_id_of_serialized(serialize_key("k"), client.async_client.table.partition_count)
            owner = client.async_client.table.owners[pid]
        process = running.processes[owner]
        with Client(running.addresses, operation_call_timeout_ms=1_000) as hasty:
            hasty.get_map("users").get("k")  # connected to the owner, table known
            process.send_signal(signal.SIGSTOP)
            try:
                with pytest.raises(OperationTimeoutError):
                    hasty.get_map("users").put("k", "late")
                time.sleep(2)
            finally:
                process.send_signal(signal.SIGCONT)
            running.wait_for_log(owner, "leader-changed")  # still running
            time.sleep(1)  # it reads what waited in its socket
        with Client(running.addresses, operation_call_timeout_ms=30_000) as client:
            assert client.get_map("users").get("k") == "before"
