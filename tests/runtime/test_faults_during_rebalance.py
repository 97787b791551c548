"""A client keeps working through a rebalance, and the leader SIGKILLed while migrations run loses
no acknowledged write (backup count 1), on real processes."""

from __future__ import annotations

import threading
import time

from shardgrid.client import Client

from .local_cluster import LocalCluster, leader_of

CALL_TIMEOUT_MS = 90_000


def test_writes_go_on_through_a_join_and_a_leader_crash_mid_migration(tmp_path):
    with LocalCluster(tmp_path, 3) as running:
        running.wait_formed()
        with Client(running.addresses, operation_call_timeout_ms=CALL_TIMEOUT_MS) as client:
            data = client.get_map("data")
            acknowledged: dict[str, int] = {}
            data.put_all({f"base-{i}": i for i in range(30_000)})
            acknowledged.update({f"base-{i}": i for i in range(30_000)})
            stop = threading.Event()
            errors: list[BaseException] = []

            def writer() -> None:
                round_ = 0
                try:
                    while not stop.is_set() and round_ < 2_000:
                        batch = {f"w-{round_}-{i}": round_ for i in range(50)}
                        data.put_all(batch)
                        acknowledged.update(batch)
                        round_ += 1
                except BaseException as error:  # reported below: the test fails on any
                    errors.append(error)

            thread = threading.Thread(target=writer, daemon=True)
            thread.start()
            joiner = running.start(join=running.addresses)
            leader = leader_of(client)
            deadline = time.monotonic() + 60
            while client.member_status(leader).migrations_in_log == 0 and time.monotonic() < deadline:
                time.sleep(0.05)  # until the rebalance toward the joiner is under way
            running.kill(leader)
            survivors = [a for a in [*running.addresses, joiner] if a != leader]
            running.wait_for_log(survivors[0], f"member-removed member={leader}", timeout_s=90)
            client.wait_until_safe(120)
            stop.set()
            thread.join(timeout=CALL_TIMEOUT_MS / 1000 + 10)
            assert not thread.is_alive()
            assert errors == []
            client.wait_until_safe(120)
            found = data.get_all(list(acknowledged))
            lost = [key for key, value in acknowledged.items() if found.get(key) != value]
            assert lost == []
            assert client.cluster_status().replies[joiner].owned_partitions > 0
