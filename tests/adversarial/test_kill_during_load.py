"""SIGKILL members of a real cluster while clients write: no acknowledged write may be lost.

Writes are acknowledged only once every sync backup confirmed them (the client retries writes of
unknown outcome: at-least-once), so with backup count b, losing b members loses none.
"""

from __future__ import annotations

import time

from shardgrid.client import Client
from tests.runtime.local_cluster import LocalCluster, leader_of

from .load_harness import Load, lost_writes

FAST = ("--partition-count", "71", "--set", "failure_timeout_ms=3000")


def non_leader(client: Client, addresses: list[str]) -> list[str]:
    leader = leader_of(client)
    return [a for a in addresses if a != leader]


def run_kills(running: LocalCluster, victims_of, settle_s: float = 3.0, after_s: float = 8.0, backups: int = 1):
    with Client(running.addresses, operation_call_timeout_ms=60_000) as client:
        client.wait_until_safe(60)
        load = Load(client, "ledger").start()
        time.sleep(settle_s)
        victims = victims_of(client)
        for victim in victims:
            running.kill(victim)
        time.sleep(after_s)
        ledger = load.finish()
        client.wait_until_safe(90)
        lost = lost_writes(client, "ledger", ledger)
        assert ledger.acks > 500, f"too little load: {ledger.acks} acks, errors {ledger.errors[:3]}"
        assert not lost, f"{len(lost)} acknowledged writes lost after killing {victims}: {list(lost.items())[:5]}"
        return ledger


def test_sigkill_a_backup_holder_during_load(tmp_path):
    with LocalCluster(tmp_path, 3, *FAST) as running:
        running.wait_formed()
        run_kills(running, lambda client: non_leader(client, running.addresses)[:1])


def test_sigkill_the_leader_during_load(tmp_path):
    with LocalCluster(tmp_path, 3, *FAST) as running:
        running.wait_formed()
        run_kills(running, lambda client: [leader_of(client)])


def test_sigkill_two_members_with_two_backups(tmp_path):
    # Five members: five voters, so two lost leave a majority (four would have three voters).
    with LocalCluster(tmp_path, 5, *FAST, "--backup-count", "2") as running:
        running.wait_formed()
        run_kills(running, lambda client: [leader_of(client), non_leader(client, running.addresses)[0]])


def test_sigkill_a_source_during_a_rebalance(tmp_path):
    with LocalCluster(tmp_path, 3, *FAST) as running:
        running.wait_formed()
        with Client(running.addresses, operation_call_timeout_ms=60_000) as client:
            client.get_map("bulk").put_all({f"b{i}": "x" * 500 for i in range(20_000)})  # migrations take a while
            client.wait_until_safe(60)
            load = Load(client, "ledger").start()
            time.sleep(2)
            joiner = running.start(join=running.addresses, initial=3)
            running.wait_for_log(joiner, "member-added", timeout_s=60)
            time.sleep(1.0)  # migrations to the joiner under way
            victim = non_leader(client, running.addresses)[0]
            running.kill(victim)
            time.sleep(8)
            ledger = load.finish()
            client.wait_until_safe(90)
            lost = lost_writes(client, "ledger", ledger)
            assert not lost, f"{len(lost)} acknowledged writes lost: {list(lost.items())[:5]}"
            bulk = client.get_map("bulk").get_all([f"b{i}" for i in range(20_000)])
            assert len(bulk) == 20_000
