"""``shardgrid bench cluster`` runs on member processes and reports what it measured (a small run:
the figures are the benchmark's business, not this test's)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_a_small_cluster_bench_reports_a_rebalance(tmp_path):
    samples = tmp_path / "samples.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "shardgrid", "bench", "cluster", "--entries", "5000",
         "--scenario", "scale-up-backup-0", "--samples", str(samples)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: a target missed, said on stderr
    report = json.loads(done.stdout)
    scale_up = report["scale-up-backup-0"]
    assert scale_up["migrations"] > 0
    assert scale_up["entries_moved"] > 0
    assert scale_up["seconds_to_safe"] > 0
    assert isinstance(scale_up["chunks_resent"], int)  # the duplicates are reported
    assert scale_up["steady"]["get"]["count"] > 0
    assert report["client"]["put_all_entries_per_s"] > 0
    assert (done.returncode == 0) == report["all_met"]
    kinds = {json.loads(line)["kind"] for line in samples.read_text().splitlines()}
    assert kinds == {"sample", "migration"}
