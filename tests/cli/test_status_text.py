"""``shardgrid status`` as text says what its JSON says, in the glossary's words."""

from __future__ import annotations

import pytest

from shardgrid.cli.cluster_commands import render_status, status_document
from shardgrid.client.status import ClusterStatus


def test_an_unformed_cluster_says_it_has_no_leader(capsys: pytest.CaptureFixture[str]) -> None:
    """Found by an outside tester: it printed 'state None partitions None ...'."""
    render_status(status_document(ClusterStatus(members=())))
    out = capsys.readouterr().out
    assert "None" not in out
    assert "no leader: the cluster has not formed yet, or is electing one" in out
    assert "not safe" in out


def test_the_columns_use_the_words_of_the_json(capsys: pytest.CaptureFixture[str]) -> None:
    """Found by an outside tester: the text said 'primaries' and 'state' where the JSON says
    owned_partitions and lifecycle (and the glossary, owner)."""
    render_status(
        {
            **status_document(ClusterStatus(members=())),
            "members": [{"address": "127.0.0.1:1", "reachable": False, "error": "refused"}],
        }
    )
    header = capsys.readouterr().out.splitlines()[0]
    assert "lifecycle" in header
    assert "owned partitions" in header
    assert "primaries" not in header
    assert " state " not in header


def test_each_maps_records_are_summed_over_the_members(capsys: pytest.CaptureFixture[str]) -> None:
    member = {
        "reachable": True, "role": "member", "lifecycle": "active", "leaving": False, "owned_partitions": 1,
        "backup_replicas": 1, "migrations_here": 0, "syncs_in_flight": 0, "writes_awaiting_backups": 0,
        "entries": 3, "memory_bytes": 3 * 2**20, "max_memory_bytes": 0, "entries_evicted": 0,
    }  # fmt: skip
    render_status(
        {
            **status_document(ClusterStatus(members=())),
            "members": [
                {**member, "address": "127.0.0.1:1", "maps": {"users": {"entries": 2, "memory_bytes": 2 * 2**20}}},
                {**member, "address": "127.0.0.1:2", "maps": {"users": {"entries": 2, "memory_bytes": 2**20}}},
            ],
        }
    )
    row = next(line for line in capsys.readouterr().out.splitlines() if line.lstrip().startswith("users"))
    assert row.split() == ["users", "│", "4", "│", "3.0", "MiB", "│", "2"]


def test_a_persistent_members_disk_is_shown_and_a_full_one_named(capsys: pytest.CaptureFixture[str]) -> None:
    member = {
        "reachable": True, "role": "member", "lifecycle": "active", "leaving": False, "owned_partitions": 1,
        "backup_replicas": 1, "migrations_here": 0, "syncs_in_flight": 0, "writes_awaiting_backups": 0,
        "entries": 3, "memory_bytes": 2**20, "max_memory_bytes": 0, "entries_evicted": 0, "maps": {},
        "persistent": True, "disk_bytes": 5 * 2**20, "disk_free_bytes": 2**30, "unsynced_writes": 0,
        "sync_lag_ms": 0, "disk_full": False,
    }  # fmt: skip
    full = {**member, "address": "127.0.0.1:2", "disk_full": True, "disk_free_bytes": 3 * 2**20}
    lagging = {**member, "address": "127.0.0.1:3", "unsynced_writes": 2, "sync_lag_ms": 40}
    render_status(
        {**status_document(ClusterStatus(members=())), "members": [{**member, "address": "127.0.0.1:1"}, full, lagging]}
    )
    out = capsys.readouterr().out
    assert "disk" in out.splitlines()[0]
    assert "5.0 MiB FULL" in out
    assert "5.0 MiB, lag 40 ms" in out
    assert "writes refused (DISK_FULL) by 127.0.0.1:2 (3 MiB free)" in out


def test_a_hot_restart_says_whom_the_leader_waits_for(capsys: pytest.CaptureFixture[str]) -> None:
    render_status({**status_document(ClusterStatus(members=())), "awaited_members": ["127.0.0.1:3"]})
    out = capsys.readouterr().out
    assert "hot restart" in out
    assert "waits for 127.0.0.1:3" in out
