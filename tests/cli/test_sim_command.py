"""``shardgrid sim`` and ``shardgrid bench sim`` as a user runs them."""

from __future__ import annotations

import json

from click.testing import CliRunner

from shardgrid.cli.main import cli
from shardgrid.sim.vopr import SimResult


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_sim_prints_the_replay_command_the_summary_and_the_verdict() -> None:
    code, out = run("sim", "--seed", "5", "--ops", "150", "--faults", "crash,join", "--duplicate-rate", "0.02")
    assert code == 0, out
    replay = out.splitlines()[0]
    assert replay.startswith("shardgrid sim --seed 5 ")
    assert "--duplicate-rate 0.02" in replay
    assert "--faults 'crash,join'" in replay
    assert len(replay) > 80  # one line, whatever the terminal width: it must paste whole
    assert "acknowledged" in out
    assert "verdict: PASS" in out


def test_the_replay_line_replays_the_same_run() -> None:
    import shlex

    code, out = run("sim", "--seed", "8", "--ops", "120", "--faults", "crash", "--drop-rate", "0.02", "--json")
    assert code == 0
    first = json.loads(out)
    code, out = run("sim", "--seed", "8", "--ops", "120", "--faults", "crash", "--drop-rate", "0.02")
    replay = shlex.split(out.splitlines()[0])[1:]
    code, again = run(*replay, "--json")
    assert code == 0
    assert json.loads(again)["trace_hash"] == first["trace_hash"]


def test_a_schedule_file_runs_its_steps_and_reports_them(tmp_path) -> None:
    schedule = tmp_path / "crash.toml"
    schedule.write_text(
        "[run]\nseed = 3\nmembers = 4\nops = 150\n"
        '[[step]]\naction = "crash"\nafter_ms = 500\ntarget = "owner-of-most"\n'
        '[[step]]\naction = "join"\nafter_ms = 200\n'
    )
    code, out = run("sim", "--schedule", str(schedule))
    assert code == 0, out
    assert "--schedule" in out.splitlines()[0]
    assert "step 1: crash" in out
    assert "step 2: join" in out
    assert "verdict: PASS" in out


def test_a_bad_schedule_is_refused_with_what_is_wrong(tmp_path) -> None:
    schedule = tmp_path / "bad.toml"
    schedule.write_text('[[step]]\naction = "explode"\n')
    code, out = run("sim", "--schedule", str(schedule))
    assert code == 2
    assert "step 1" in out
    assert "action must be one of" in out
    schedule.write_text('[[step]]\naction = "crash"\nwhen = { message = "Nonsense" }\ntarget = "m1"\n')
    code, out = run("sim", "--schedule", str(schedule))
    assert code == 2
    assert "unknown message type" in out


def test_join_lists_that_do_not_fit_the_member_count_given_are_a_usage_error(tmp_path) -> None:
    """Found by an outside tester: a file's three join lists run with --members 4 (or 2) crashed
    with an IndexError traceback and exit 1."""
    schedule = tmp_path / "joins.toml"
    schedule.write_text('[run]\nmembers = 3\nops = 50\njoin = [["m2", "m2", "m3"], ["m3", "m1"], ["m2"]]\n')
    for members in ("4", "2"):
        code, out = run("sim", "--schedule", str(schedule), "--members", members)
        assert code == 2, out
        assert f"one list per member: {members} members, 3 lists (--members {members} given)" in out
        assert "Traceback" not in out


def test_a_reference_to_no_member_is_a_usage_error_before_the_run(tmp_path) -> None:
    """Found by an outside tester: a target "master", or a split naming "leadr", ran until the step
    fired and crashed with a ConfigError traceback (exit 1)."""
    schedule = tmp_path / "refs.toml"
    for step, expected in (
        (
            'action = "crash"\ntarget = "master"',
            "step 1: unknown member reference 'master'",
        ),
        (
            'action = "split"\ngroups = [["leadr"], ["rest"]]',
            "step 1: unknown member reference 'leadr'",
        ),
        (
            'action = "crash"\ntarget = "m9"',
            "step 1: m9 is never started (3 members and 0 join or move step(s): m1..m3)",
        ),
        (
            'action = "crash"\ntarget = "owner:500"',
            "step 1: owner:500: there are 271 partitions",
        ),
    ):
        schedule.write_text(f"[run]\nmembers = 3\nops = 10\n[[step]]\n{step}\n")
        code, out = run("sim", "--schedule", str(schedule))
        assert code == 2, out
        assert expected in " ".join(out.split()), out
        assert "Traceback" not in out


def test_sim_json_is_the_run_summary_and_replays() -> None:
    args = ("sim", "--seed", "6", "--ops", "150", "--faults", "crash,leader-crash", "--json")
    first, second = json.loads(run(*args)[1]), json.loads(run(*args)[1])
    assert first["verdict"] == "PASS"
    assert first["writes"]["acked"] > 0
    assert first["trace_hash"] == second["trace_hash"]


def test_sim_over_many_seeds_summarizes() -> None:
    code, out = run("sim", "--seed", "1", "--seeds", "3", "--ops", "100", "--faults", "crash")
    assert code == 0
    summary = json.loads(out[out.index("{") :])
    assert summary["seeds"] == 3
    assert summary["passed"] == 3


def test_a_failing_verdict_exits_non_zero(monkeypatch) -> None:
    from shardgrid.cli import main

    real = main.run_seed

    def failing(seed: int, params: object, schedule: object = None) -> SimResult:
        result = real(seed, params, schedule)  # type: ignore[arg-type]
        result.passed = False
        result.problems = ["injected failure"]
        return result

    monkeypatch.setattr(main, "run_seed", failing)
    code, out = run("sim", "--seed", "1", "--ops", "50", "--faults", "")
    assert code == 1
    assert "verdict: FAIL" in out
    assert "injected failure" in out


def test_unknown_faults_are_refused() -> None:
    code, out = run("sim", "--faults", "crash,meteor")
    assert code == 2
    assert "meteor" in out


def test_bench_sim_reports_throughput_and_crash_repair() -> None:
    code, out = run("bench", "sim", "--partitions", "300", "--members", "4", "--parallel", "1,10")
    assert code == 0, out
    report = json.loads(out)
    assert report["throughput"]["verdict"] == "PASS"
    assert report["throughput"]["events_per_second"] > 0
    assert [r["partitions"] for r in report["leader_crash"]] == [271, 300]
    assert all(0 < r["simulated_ms_to_new_leader"] <= r["simulated_ms_to_safe"] for r in report["leader_crash"])
    repairs = report["crash_repair"]
    assert [r["max_parallel_migrations"] for r in repairs] == [1, 10]
    assert all(r["migrations"] > 0 for r in repairs)
    assert repairs[0]["simulated_ms_to_safe"] >= repairs[1]["simulated_ms_to_safe"]
