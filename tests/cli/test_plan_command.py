"""``shardgrid plan`` and ``shardgrid bench plan`` as a user runs them."""

from __future__ import annotations

import json

from click.testing import CliRunner

from shardgrid.cli.main import cli


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_plan_prints_what_a_join_does() -> None:
    code, out = run("plan", "--members", "3", "--add", "1", "--partitions", "271", "--backups", "1")
    assert code == 0, out
    for words in ("migrations", "move", "balance per replica index", "rounds", "added", "time:"):
        assert words in out


def test_plan_json_counts_add_up() -> None:
    code, out = run("plan", "--members", "4", "--crash", "1", "--partitions", "271", "--backups", "1", "--json")
    assert code == 0, out
    summary = json.loads(out)
    migrations = summary["migrations"]
    assert migrations["total"] == sum(migrations["by_kind"].values()) > 0
    assert summary["repair"]["lost_partitions"] == []
    assert summary["repair"]["promotions"] > 0
    assert summary["balance"]["max_deviation_pct"] <= 10
    after = [m for m in summary["members"] if m["status"] != "crashed"]
    assert sum(m["after"]["primaries"] for m in after) == 271
    crashed = [m for m in summary["members"] if m["status"] == "crashed"]
    assert len(crashed) == 1
    assert crashed[0]["after"] == {"primaries": 0, "backups": 0}
    assert summary["schedule"]["rounds"] >= 1


def test_plan_is_reproducible_from_its_seed() -> None:
    args = ("plan", "--members", "5", "--add", "2", "--remove", "1", "--seed", "9", "--json")
    first, second = json.loads(run(*args)[1]), json.loads(run(*args)[1])
    first.pop("timings_ms"), second.pop("timings_ms")
    assert first == second


def test_crashing_more_members_than_backups_reports_lost_partitions() -> None:
    code, out = run("plan", "--members", "5", "--crash", "2", "--backups", "1", "--json")
    assert code == 0
    assert len(json.loads(out)["repair"]["lost_partitions"]) > 0


def test_bad_arguments_are_refused_with_a_clear_message() -> None:
    code, out = run("plan", "--members", "2", "--remove", "3")
    assert code == 2
    assert "cannot remove or crash more members than there are" in out
    code, out = run("plan", "--backups", "9")
    assert code == 2
    assert "--backups" in out


def test_bench_plan_prints_json_and_its_target(monkeypatch) -> None:
    from shardgrid.cli import bench_plan

    monkeypatch.setattr(bench_plan, "SCALES", ((271, 3), (1000, 20)))
    monkeypatch.setattr(bench_plan, "TARGET_SCALE", (1000, 20))
    code, out = run("bench", "plan", "--repeats", "1")
    report = json.loads(out)
    assert code == 0
    assert len(report["cases"]) == 6
    assert report["all_met"] is True
    monkeypatch.setattr(bench_plan, "TARGET_MS", 0.0)
    code, out = run("bench", "plan", "--repeats", "1")
    assert code == 1
    assert "targets missed: worst_best_total_ms" in out
