"""``shardgrid bench disk`` measures both shapes of a member's disk, prints them as JSON, and
exits 1 exactly when its target is missed (speed itself is the benchmark's own run's to show)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from shardgrid.cli import bench_disk
from shardgrid.cli.main import cli


@pytest.fixture(autouse=True)
def small_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_disk, "SYNCED_BATCHES", 5)
    monkeypatch.setattr(bench_disk, "SINGLE_WRITES", 5)


def test_bench_disk_reports_both_shapes_and_its_target() -> None:
    done = CliRunner().invoke(cli, ["bench", "disk", "--entries", "5000"])
    report = json.loads(done.stdout)
    assert done.exit_code == (0 if report["all_met"] else 1), done.stderr
    for shape in ("own_log", "sqlite"):
        figures = report[shape]
        for name in ("synced_batch_entries_per_second", "unsynced_entries_per_second", "synced_single_write_ms"):
            assert figures[name] > 0, (shape, name)
        assert figures["load_seconds"] > 0
        assert figures["bytes_per_entry"] >= 110  # at least the key and value of each entry
    assert [target["name"] for target in report["targets"]] == ["own_log_load_seconds_per_million_entries"]


def test_a_missed_load_target_exits_1_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_disk, "LOAD_TARGET_S", 1e-9)
    done = CliRunner().invoke(cli, ["bench", "disk", "--entries", "2000"])
    assert done.exit_code == 1
    assert "targets missed: own_log_load_seconds_per_million_entries" in done.stderr
