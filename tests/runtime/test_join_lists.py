"""Join lists on real processes (found trying shardgrid as a new user would): three members each
started with --join naming only the two others, as Consul, Cassandra and Hazelcast's member lists
allow, never formed a cluster and logged nothing about why. Whether a member's own address is in
its list must not matter, and a member that cannot form a cluster says why in its log."""

from __future__ import annotations

from shardgrid.client import Client

from .local_cluster import LocalCluster

OTHERS_ONLY = [[1, 2], [0, 2], [0, 1]]


def test_three_members_that_each_list_only_the_two_others_form_one_cluster(tmp_path):
    with LocalCluster(tmp_path, 3, joins=OTHERS_ONLY) as running:
        running.wait_formed(timeout_s=30)
        with Client(running.addresses, operation_call_timeout_ms=30_000) as client:
            status = client.cluster_status()
            assert sorted(status.members) == sorted(running.addresses)
            client.get_map("m").put("k", 1)
            assert client.get_map("m").get("k") == 1


def test_members_that_cannot_form_a_cluster_say_why_in_their_log(tmp_path):
    """Two of the three started: each logs, at a bounded rate (every 20 join retries: 2 s with the
    tests' 100 ms), how many processes it found and which seed never answered."""
    with LocalCluster(tmp_path, 3, joins=OTHERS_ONLY, started=2) as running:
        silent = running.addresses[2]
        for address in running.addresses[:2]:
            running.wait_for_log(address, "cluster-not-formed", timeout_s=30)
            running.wait_for_log(address, "found 2 of the 3 processes initial_cluster_size needs", timeout_s=30)
            line = next(x for x in running.log_text(address).splitlines() if "cluster-not-formed" in x)
            assert f'seeds_silent=["{silent}"]' in line, line
            assert "missing=1" in line, line
