"""Conditional writes on real members: clients racing to increment one counter by
compare-and-set (``replace_if_same``) lose no increment, the entry view counts every write, and
after the owner is killed (SIGKILL) its backup, promoted, holds the counter as acknowledged (the
owner replicated each conditional write as a plain put)."""

from __future__ import annotations

import threading

from shardgrid.client import Client
from shardgrid.core.hashing import partition_ids_of_serialized, serialize_key
from tests.runtime.local_cluster import LocalCluster

CALL_TIMEOUT_MS = 30_000
INCREMENTS = 40


def increment(addresses: list[str], times: int, failures: list[BaseException]) -> None:
    try:
        with Client(addresses, operation_call_timeout_ms=CALL_TIMEOUT_MS) as client:
            counter = client.get_map("counters")
            done = 0
            while done < times:
                current = counter.get("c")
                if counter.replace_if_same("c", current, current + 1):
                    done += 1
    except BaseException as error:  # reported by the test
        failures.append(error)


def test_racing_compare_and_sets_lose_no_increment_even_past_a_sigkill(tmp_path):
    with LocalCluster(tmp_path, 3) as running:
        running.wait_formed()
        with Client(running.addresses, operation_call_timeout_ms=CALL_TIMEOUT_MS) as client:
            client.wait_until_safe(60)
            counter = client.get_map("counters")
            assert counter.replace("c", 1) is None  # no value yet: nothing stored
            counter.set("c", 0)
            failures: list[BaseException] = []
            racers = [
                threading.Thread(target=increment, args=(running.addresses, INCREMENTS, failures)) for _ in range(3)
            ]
            for racer in racers:
                racer.start()
            for racer in racers:
                racer.join(120)
            assert not failures, failures
            assert counter.get("c") == 3 * INCREMENTS
            view = counter.get_entry_view("c")
            assert view is not None
            assert view.value == 3 * INCREMENTS
            assert view.version == 1 + 3 * INCREMENTS  # the set, then each successful increment
            assert not counter.remove_if_same("c", 0)
            assert counter.set_ttl("c", 3600)  # the value stays, with an expiry now
            assert not counter.set_ttl("no-such-key", 5)
            expire_at_ms = counter.get_entry_view("c").expire_at_ms
            assert expire_at_ms > view.updated_ms + 3_000_000
            table = client.async_client.table
            (pid,) = partition_ids_of_serialized([serialize_key("c")], table.partition_count)
            owner = table.owners[pid]
            assert owner is not None
            running.kill(owner)
            survivor = next(address for address in running.addresses if address != owner)
            running.wait_for_log(survivor, f"member-removed member={owner}", timeout_s=60)
            assert counter.get("c") == 3 * INCREMENTS
            assert counter.get_entry_view("c").expire_at_ms == expire_at_ms  # the backup held the new TTL
            assert counter.replace_if_same("c", 3 * INCREMENTS, -1)
            assert counter.remove_if_same("c", -1)
            assert counter.get("c") is None
