"""A benchmark's targets are checked one way, and a recorded run is the file the manual reads."""

from __future__ import annotations

import json
import subprocess

import click
import pytest

from shardgrid.cli import reference
from shardgrid.cli.bench_results import Target, conclude, record, with_targets


def test_a_target_is_met_by_its_own_comparison():
    assert Target(name="r", figure="rate", measured=10, comparison=">=", wanted=10).met
    assert not Target(name="t", figure="time", measured=10.5, comparison="<=", wanted=10).met
    assert not Target(name="v", figure="verdict", measured=False, comparison="==", wanted=True).met


def test_a_recorded_run_is_what_the_benchmarks_page_shows(tmp_path):
    targets = [
        Target(name="fast", figure="entries/s", measured=2_000_000, comparison=">=", wanted=1_000_000),
        Target(name="small", figure="bytes", measured=5, comparison="<=", wanted=4),
    ]
    report = with_targets({"benchmark": "member"}, targets)
    assert report["all_met"] is False
    path = record("member", report, {"slowest handle() was handling": "AppendEntries"}, tmp_path / "results")
    document = json.loads(path.read_text())
    assert (document["bench"], document["exit_code"], len(document["targets"])) == ("member", 1, 2)
    assert document["machine"]["cpus"] >= 1
    assert len(document["commit"]) >= 7

    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "results").rename(tmp_path / "benchmarks" / "results")
    page = reference.benchmark_markdown(tmp_path, "member")
    assert "| bytes | 5 | <= 4 | **no** |" in page
    assert "| entries/s | 2,000,000 | >= 1,000,000 | yes |" in page
    assert "AppendEntries" in page
    assert "No run recorded yet" in reference.benchmark_markdown(tmp_path, "plan")


def test_a_missed_target_exits_1_and_names_it(capsys):
    report = with_targets({}, [Target(name="slow", figure="ms", measured=2, comparison="<", wanted=1)])
    with pytest.raises(SystemExit) as exited:
        conclude("plan", report, {}, keep=False)
    assert exited.value.code == 1
    assert "targets missed: slow" in capsys.readouterr().err


def _run(bench: str, **changes: object) -> dict:
    report = with_targets({}, [Target(name="t", figure="ms", measured=1, comparison="<", wanted=2)])
    document = {
        "bench": bench,
        "recorded_at": "2026-11-27 19:21 UTC",
        "commit": "0123456789abcdef",
        "dirty": False,
        "machine": {"cpus": 2, "python": "3.11.7", "system": "Linux x86_64"},
        "command": f"shardgrid bench {bench}",
        "exit_code": 0,
        "targets": report["targets"],
        "figures": {},
        "report": report,
    }
    document.update(changes)
    return document


def _results(tmp_path, files: dict[str, object]):
    directory = tmp_path / "benchmarks" / "results"
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (directory / name).write_text(content if isinstance(content, str) else json.dumps(content))
    return tmp_path


def test_a_bad_results_file_is_left_out_and_named_not_a_traceback(tmp_path):
    """Found by an outside tester: a truncated file, or one without bench or machine keys, failed
    the manual's build with a KeyError."""
    good = _run("plan")
    no_machine = {k: v for k, v in _run("plan").items() if k != "machine"}
    root = _results(
        tmp_path,
        {
            "20261127T192137Z-plan.json": good,
            "20270101T000000Z-plan.json": json.dumps(good)[:100],
            "20270102T000000Z-plan.json": no_machine,
            "20270103T000000Z-plan.json": {k: v for k, v in good.items() if k != "bench"},
            "20270104T000000Z-plan.json": _run("plan", commit=None),
            "20270105T000000Z-plan.json": [1, 2],
            "20270106T000000Z-plann.json": _run("plann"),
        },
    )
    results = reference.result_files(root)
    assert [run["file"] for run in results.runs] == ["20261127T192137Z-plan.json"]
    problems = "\n".join(results.problems)
    assert len(results.problems) == 6, problems
    assert "benchmarks/results/20270101T000000Z-plan.json: not a readable JSON file" in problems
    assert "20270102T000000Z-plan.json: the run lacks machine (missing)" in problems
    assert "20270103T000000Z-plan.json: the run lacks bench (missing)" in problems
    assert "20270104T000000Z-plan.json: the run lacks commit (NoneType)" in problems
    assert "20270105T000000Z-plan.json: not a JSON object but a list" in problems
    assert "20270106T000000Z-plann.json: bench 'plann' is none of shardgrid bench" in problems
    page = reference.benchmark_markdown(root, "plan")
    assert "`20261127T192137Z-plan.json`" in page


def test_the_latest_run_is_the_latest_recorded_whatever_its_file_is_called(tmp_path):
    """Found by an outside tester: a file name that is not a time sorted last and was shown as
    the latest run."""
    root = _results(
        tmp_path,
        {
            "20261127T200506Z-plan.json": _run("plan", recorded_at="2026-11-27 20:05 UTC"),
            "my-run-plan.json": _run("plan", recorded_at="2025-01-01 10:00 UTC"),
        },
    )
    assert "Latest recorded run (2 kept): `20261127T200506Z-plan.json`" in reference.benchmark_markdown(root, "plan")


def test_a_run_without_targets_says_so_instead_of_an_empty_table(tmp_path):
    root = _results(tmp_path, {"20270101T000000Z-plan.json": _run("plan", targets=[])})
    page = reference.benchmark_markdown(root, "plan")
    assert "No targets" in page
    assert "| target | measured |" not in page


def test_runs_recorded_in_the_same_second_keep_a_file_each_in_the_checkout(tmp_path, monkeypatch):
    """Found by an outside tester: two records in one second overwrote each other, and --record
    run from another folder wrote ./benchmarks/results there, with that folder's git commit."""
    from shardgrid.cli import bench_results

    root = bench_results.repository_root()
    assert root is not None
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=root).stdout.strip()
    monkeypatch.chdir(tmp_path)  # another folder, not a checkout
    report = with_targets({}, [])
    paths = {record("plan", report, {}, tmp_path / "results") for _ in range(5)}
    assert len(paths) == 5
    documents = [json.loads(path.read_text()) for path in paths]
    assert all(document["recorded_at_utc"] for document in documents)
    assert {document["commit"] for document in documents} == {head}  # the checkout's, not the folder's
    assert bench_results.results_directory() == root / "benchmarks" / "results"
    monkeypatch.setattr(bench_results, "_CHECKOUT", tmp_path)
    with pytest.raises(click.ClickException, match="not run from a checkout"):
        bench_results.results_directory()
