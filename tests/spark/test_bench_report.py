"""``shardgrid bench report``: known latencies in, known percentiles, migration seconds and plots out;
bad samples files refused by line; and a real ``bench cluster`` run reported on."""

from __future__ import annotations

import csv
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardgrid.cli.bench_samples import SamplesError, check_samples
from shardgrid.cli.main import cli

pytest.importorskip("matplotlib")

from shardgrid.cli.bench_report import run_bench_report  # after the skip: needs matplotlib
from shardgrid.spark.bench_report import analyze

T0 = 1000.0  # any monotonic start: the report counts from the first sample
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def sample(scenario: str, at_s: float, op: str, seconds: float) -> dict:
    return {"kind": "sample", "scenario": scenario, "t": T0 + at_s, "op": op, "s": seconds}


def migration(scenario: str, at_s: float, phase: str, partition: int) -> dict:
    """Shaped as bench_cluster writes a migration notice."""
    return {
        "kind": "migration", "scenario": scenario, "phase": phase, "partition_id": partition,
        "source": "127.0.0.1:5801", "destination": "127.0.0.1:5804", "t": T0 + at_s,
    }  # fmt: skip


def write_lines(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def steady_then_migrating() -> list[dict]:
    """'known': 100 GETs and 100 SETs a second; seconds 0-2 steady (GET 1 ms, SET 2 ms, one 50 ms
    GET in second 1), seconds 3-4 inside a migration period [3.0, 4.9] (GET 10 ms, SET 20 ms).
    'periods': 6 steady seconds and migrations that make four periods (overlapping ones merged, a
    failed one, an end without a start, a start without an end)."""
    lines = []
    for second in range(5):
        for i in range(100):
            at_s = second + i / 100
            get_s = 0.010 if second >= 3 else 0.001
            if second == 1 and i == 42:
                get_s = 0.050
            lines.append(sample("known", at_s, "get", get_s))
            lines.append(sample("known", at_s + 0.001, "set", get_s * 2 if get_s != 0.050 else 0.002))
    lines += [
        migration("known", 3.0, "started", 1),
        migration("known", 3.2, "started", 2),
        migration("known", 4.5, "finished", 1),
        migration("known", 4.9, "finished", 2),
    ]
    lines += [sample("periods", s + i / 10, op, 0.001) for s in range(6) for i in range(10) for op in ("get", "set")]
    lines += [
        migration("periods", 1.2, "started", 7),
        migration("periods", 1.3, "started", 8),
        migration("periods", 1.4, "finished", 7),
        migration("periods", 1.5, "finished", 8),
        migration("periods", 3.1, "started", 7),  # the same partition again: paired with its own end
        migration("periods", 3.3, "failed", 7),
        migration("periods", 4.0, "finished", 9),  # its start came before the listener
        migration("periods", 4.5, "started", 10),  # never ended: runs to the last sample
    ]
    return lines


@pytest.fixture(scope="module")
def known_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_lines(tmp_path_factory.mktemp("known") / "samples.jsonl", steady_then_migrating())


@pytest.fixture(scope="module")
def figures(spark, known_file):
    return analyze(spark, str(known_file))


def test_each_second_has_its_count_and_percentiles_and_migration_seconds_are_marked(figures):
    rows = {(r.second, r.op): r for r in figures.seconds if r.scenario == "known"}
    assert sorted(rows) == [(s, op) for s in range(5) for op in ("get", "set")]
    for (second, op), row in rows.items():
        assert row.count == 100
        assert row.migrating == (second >= 3), (second, op)
        expected_ms = (10.0 if second >= 3 else 1.0) * (2 if op == "set" else 1)
        assert row.p50_ms == pytest.approx(expected_ms)
        assert row.p99_ms == pytest.approx(expected_ms)
    # one slow GET in 100: nearest rank puts it at p99.9 (rank 100), not at p99 (rank 99)
    assert rows[(1, "get")].p999_ms == pytest.approx(50.0)
    assert rows[(0, "get")].p999_ms == pytest.approx(1.0)


def test_steady_and_migration_phases_are_summarized_apart(figures):
    phases = {(p.op, p.phase): p for p in figures.phases if p.scenario == "known"}
    assert phases[("get", "steady")].count == 300
    assert phases[("get", "steady")].p50_ms == pytest.approx(1.0)
    assert phases[("get", "steady")].p99_ms == pytest.approx(1.0)
    assert phases[("get", "steady")].p999_ms == pytest.approx(50.0)
    assert phases[("get", "migration")].count == 200
    assert phases[("get", "migration")].p99_ms == pytest.approx(10.0)
    assert phases[("set", "steady")].p99_ms == pytest.approx(2.0)
    assert phases[("set", "migration")].p999_ms == pytest.approx(20.0)


def test_migration_periods_are_merged_paired_and_counted(figures):
    known = [p for p in figures.periods if p.scenario == "known"]
    assert [(round(p.start_s, 6), round(p.end_s, 6), p.finished) for p in known] == [(3.0, 4.9, 2)]
    assert known[0].duration_s == pytest.approx(1.9)
    periods = [p for p in figures.periods if p.scenario == "periods"]
    last_s = figures.span_s["periods"]
    assert last_s == pytest.approx(5.9)
    shape = [(round(p.start_s, 6), round(p.end_s, 6), p.finished, p.failed, p.unfinished) for p in periods]
    assert shape == [(1.2, 1.5, 2, 0, 0), (3.1, 3.3, 0, 1, 0), (4.0, 4.0, 1, 0, 0), (4.5, round(last_s, 6), 0, 0, 1)]
    marked = sorted({r.second for r in figures.seconds if r.scenario == "periods" and r.migrating})
    assert marked == [1, 3, 4, 5]
    finished = {(b.scenario, round(b.start_s, 6)): b.finished for b in figures.completions}
    assert finished == {("known", 4.5): 1, ("known", 4.9): 1, ("periods", 1.4): 1, ("periods", 1.5): 1,
                        ("periods", 4.0): 1}  # fmt: skip


def test_percentiles_are_the_nearest_rank_samples_of_random_latencies(spark, tmp_path):
    rng = random.Random(3)
    latencies_s = [rng.lognormvariate(-7, 1.0) for _ in range(2_500)]
    path = write_lines(
        tmp_path / "random.jsonl", [sample("r", i / 10_000, "get", s) for i, s in enumerate(latencies_s)]
    )
    (row,) = analyze(spark, str(path)).seconds
    ordered = sorted(latencies_s)
    for q, got_ms in ((0.5, row.p50_ms), (0.99, row.p99_ms), (0.999, row.p999_ms)):
        assert got_ms == pytest.approx(ordered[math.ceil(q * len(ordered)) - 1] * 1000, rel=1e-9), q


def is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == PNG_MAGIC and path.stat().st_size > 10_000


def test_the_report_writes_its_summary_csv_and_plots(spark, known_file, tmp_path):
    summary, files = run_bench_report(spark, known_file, check_samples(known_file), tmp_path)
    names = sorted(p.name for p in files)
    assert names == sorted([
        "summary.json", "per_second.csv", "migrations_completed.csv", "known-latency.png", "known-migrations.png",
        "periods-latency.png", "periods-migrations.png",
    ])  # fmt: skip
    for path in files:
        assert path.parent == tmp_path
        if path.suffix == ".png":
            assert is_png(path), path
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    known = summary["scenarios"]["known"]
    assert known["migration_periods"] == [
        {"start_s": 3.0, "end_s": 4.9, "duration_s": 1.9, "finished": 2, "failed": 0, "unfinished": 0}
    ]
    assert (known["steady_seconds"], known["migration_seconds"], known["migrations_finished"]) == (3, 2, 2)
    assert known["get"]["steady"] == {"count": 300, "p50_ms": 1.0, "p99_ms": 1.0, "p999_ms": 50.0}
    assert known["get"]["migration"] == {"count": 200, "p50_ms": 10.0, "p99_ms": 10.0, "p999_ms": 10.0}
    assert known["get"]["p99_migration_over_steady"] == 10.0
    assert summary["scenarios"]["periods"]["migrations_failed"] == 1
    rows = list(csv.DictReader((tmp_path / "per_second.csv").open()))
    assert len(rows) == 10 + 12
    assert {r["migrating"] for r in rows if r["scenario"] == "known" and int(r["second"]) >= 3} == {"true"}


def test_the_command_prints_the_summary_and_names_the_files(commands_on_test_session, tmp_path):
    lines = [sample("quiet", i / 100, op, 0.001) for i in range(300) for op in ("get", "set")]
    path = write_lines(tmp_path / "quiet.jsonl", lines)
    out = tmp_path / "report"
    result = CliRunner().invoke(cli, ["bench", "report", "--samples", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    quiet = summary["scenarios"]["quiet"]
    assert quiet["migration_periods"] == []
    assert quiet["migration_seconds"] == 0
    assert quiet["get"]["migration"] is None
    assert quiet["get"]["steady"]["count"] == 300
    assert "no migration events" in result.stderr
    for name in ("summary.json", "per_second.csv", "quiet-latency.png", "quiet-migrations.png"):
        assert f"wrote {out / name}" in result.stderr
    assert is_png(out / "quiet-latency.png")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "no such file"),
        ("", "is empty"),
        ("\n\n", "is empty"),
        ('{"kind": "sample", "scenario": "a", "t": 1.0, "op": "get", "s": 0.001}\n{"kind": "sample", "scen\n',
         "line 2: JSON is malformed"),
        ('{"kind": "sample", "scenario": "a", "t": 1.0, "op": "get", "s": 0.001}\n\n'
         '{"kind": "sample", "scenario": "a", "t": 1.0, "op": "delete", "s": 0.001}\n', "line 3: Invalid enum value"),
        ('{"kind": "sample", "scenario": "a", "t": "soon", "op": "get", "s": 0.001}\n', "line 1: Expected `float`"),
        ('{"kind": "sample", "scenario": "a", "t": 1.0, "op": "get", "s": -1}\n', "line 1: Expected `float` >= 0.0"),
        ('{"kind": "tick", "scenario": "a", "t": 1.0}\n', "line 1: Invalid value 'tick'"),
        ('{"kind": "migration", "scenario": "a", "t": 1.0, "phase": "started", "partition_id": 1}\n',
         "migration events but no latency samples"),
        ('{"kind": "sample", "scenario": "a", "t": 1.0, "op": "get", "s": 0.001}\n'
         '{"kind": "migration", "scenario": "b", "t": 1.0, "phase": "started", "partition_id": 1}\n',
         "without latency samples for scenario(s) b"),
    ],
)  # fmt: skip
def test_a_bad_samples_file_is_refused_with_its_reason_and_exit_1(tmp_path, content, reason):
    """Refused before any Spark starts (none would here: the check comes first)."""
    path = tmp_path / "samples.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SamplesError, match=None) as raised:
        check_samples(path)
    assert reason in str(raised.value)
    result = CliRunner().invoke(cli, ["bench", "report", "--samples", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert reason in result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_a_real_cluster_bench_run_is_reported(spark, tmp_path):
    """The cheapest scenario at 10,000 entries (about 20 s of member processes), then the report."""
    samples = tmp_path / "samples.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "shardgrid", "bench", "cluster", "--entries", "10000", "--scenario",
         "scale-up-backup-0", "--samples", str(samples)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: a target missed
    bench = json.loads(done.stdout)["scale-up-backup-0"]
    check = check_samples(samples)
    summary, files = run_bench_report(spark, samples, check, tmp_path / "report")
    report = summary["scenarios"]["scale-up-backup-0"]
    assert report["migrations_finished"] == bench["finished_notices"] > 0
    assert report["migration_periods"]
    assert report["migration_seconds"] >= 1
    assert report["seconds_migrating"] == pytest.approx(bench["seconds_migrating"], abs=0.01)
    for op in ("get", "set"):
        assert report[op]["steady"]["count"] > 0
        assert report[op]["migration"]["count"] > 0
        assert report[op]["steady"]["count"] + report[op]["migration"]["count"] == sum(
            1 for line in samples.open() if json.loads(line).get("op") == op
        )
    assert all(is_png(path) for path in files if path.suffix == ".png")


def test_odd_scenario_names_and_a_late_start_are_reported_apart_and_never_negative(spark, tmp_path):
    """Found by an outside tester: scenarios "a b" and "a/b" wrote the same PNG, and a migration
    that started after the last sample had a negative duration."""
    lines = [sample(name, i / 10, op, 0.001) for name in ("a b", "a/b") for i in range(20) for op in ("get", "set")]
    lines.append(migration("a b", 9.0, "started", 7))  # after the last sample (1.9 s)
    path = write_lines(tmp_path / "odd.jsonl", lines)
    summary, files = run_bench_report(spark, path, check_samples(path), tmp_path / "out")
    pngs = [p for p in files if p.suffix == ".png"]
    assert len(pngs) == len({p.name for p in pngs}) == 4
    late = summary["scenarios"]["a b"]
    assert late["migration_periods"][0]["duration_s"] == 0
    assert late["seconds_migrating"] == 0
    assert late["migrations_unfinished"] == 1
