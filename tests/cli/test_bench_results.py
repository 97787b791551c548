"""A benchmark's targets are checked one way, and a recorded run is the file the manual reads."""

from __future__ import annotations

import json

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
