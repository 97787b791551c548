"""Rebalancing controls on real processes: the migration throughput cap, and pause/resume."""

from __future__ import annotations

import time

from shardgrid.client import Client

from .local_cluster import LocalCluster

CAP_BYTES_PER_S = 400_000


def test_the_throughput_cap_holds_a_rebalance_to_its_rate(tmp_path):
    cap = ("--set", f"max_migration_bytes_per_s={CAP_BYTES_PER_S}")
    with LocalCluster(tmp_path, 2, *cap) as running:
        running.wait_formed()
        with Client(running.addresses, operation_call_timeout_ms=60_000) as client:
            data = client.get_map("data")
            entries = {f"k{i}": "v" * 100 for i in range(20_000)}
            data.put_all(entries)
            client.wait_until_safe(60)
            migrations = []
            listener = client.add_migration_listener(migrations.append)
            members = []
            client.add_event_listener(members.append, kinds=("member-added",))
            deadline = time.monotonic() + 10
            while not listener.subscribed.is_set() and time.monotonic() < deadline:
                time.sleep(0.05)
            client.change_cluster_state("no-migration")  # pause: the joiner gets nothing yet
            joiner = running.start(join=running.addresses, initial=2)
            running.wait_for_log(joiner, "member-added", timeout_s=60)
            time.sleep(1.0)
            before = client.cluster_status()
            assert before.replies[joiner].owned_partitions == 0
            moved_before = sum(reply.bytes_migrated for reply in before.replies.values())
            started = time.monotonic()
            client.change_cluster_state("active")  # resume
            after = client.wait_until_safe(120)
            elapsed = time.monotonic() - started
            moved = sum(reply.bytes_migrated for reply in after.replies.values()) - moved_before
            assert after.replies[joiner].owned_partitions > 0
            assert moved > 1_000_000
            # Two sources, each capped, each with at most a second's burst.
            assert elapsed >= (moved - 2 * CAP_BYTES_PER_S) / (2 * CAP_BYTES_PER_S) * 0.9
            assert data.get_all(list(entries)) == entries
            finished = [n for n in migrations if n.phase == "finished"]
            assert finished
            assert all(n.kind == "migration" for n in migrations)
            assert {n.destination for n in finished} >= {joiner}
            assert [n.member for n in members] == [joiner]
