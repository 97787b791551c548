"""A status request for any member goes on to the next when the one asked is silent."""

from __future__ import annotations

import signal

from shardgrid.client import Client

from .local_cluster import LocalCluster


def test_any_members_status_is_answered_while_a_connected_member_is_stopped(tmp_path):
    """Found through test_unavailable_partitions: with a SIGSTOPped member among its open
    connections, ``member_status()`` asked that one (connections are taken in turn) and raised
    ClusterUnavailableError after the attempt timeout, and so did ``cluster_status()``, though
    every other member would have answered."""
    with LocalCluster(tmp_path, 3) as running:
        running.wait_formed()
        with Client(running.addresses, attempt_timeout_ms=1_000) as client:
            client.wait_until_safe(60)  # a status from every member: a connection to each is open
            stopped = running.addresses[1]
            running.processes[stopped].send_signal(signal.SIGSTOP)
            try:
                answered = [client.member_status().address for _ in range(2 * len(running.addresses))]
                status = client.cluster_status()
            finally:
                running.processes[stopped].send_signal(signal.SIGCONT)
    assert stopped not in answered
    assert set(status.members) == set(running.addresses)
    assert stopped in status.unreachable
