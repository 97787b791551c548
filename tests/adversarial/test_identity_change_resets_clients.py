"""Found by an outside tester in network namespaces: a member kept a client's connection through
its own removal and rejoin under a new identity, then applied a request that had waited on it
since before. A member that takes a new identity now resets its client connections, so no request
outlives the incarnation it was sent to."""

from __future__ import annotations

import signal
import time

from shardgrid.client import Client
from tests.runtime.local_cluster import LocalCluster, leader_of

from .raw import Ending, Raw


def test_a_member_that_rejoins_under_a_new_identity_resets_its_client_connections(tmp_path):
    with LocalCluster(tmp_path, 3) as running:
        running.wait_formed()
        with Client(running.addresses, operation_call_timeout_ms=30_000) as client:
            leader = leader_of(client)
        victim = next(a for a in running.addresses if a != leader)
        raw = Raw(victim)
        raw.handshake()
        process = running.processes[victim]
        process.send_signal(signal.SIGSTOP)
        time.sleep(8)  # past failure_timeout_ms (5 s) and the lease: the leader removes it
        process.send_signal(signal.SIGCONT)
        running.wait_for_log(victim, "member-new-identity", timeout_s=30)
        ending, _ = raw.read_to_end(timeout_s=5)
        raw.close()
        assert ending is Ending.RESET
