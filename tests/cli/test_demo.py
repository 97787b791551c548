"""``shardgrid demo`` (the README's main job) end to end, smaller: a Spark-written Parquet file
loaded through the data source while a member is SIGKILLed, the export compared with it, a join;
it must lose nothing and leave no member process behind."""

from __future__ import annotations

import subprocess
import sys

import pytest

from shardgrid.cli.local_cluster import alive, read_state

pytest.importorskip("pyspark")  # installed by the test command (the spark extra)


def test_the_demo_loses_nothing_and_leaves_nothing_behind(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "shardgrid", "demo", "--entries", "20000", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = " ".join(done.stdout.split())  # lines wrapped at the console's width, joined again
    assert "entries lost: 0" in done.stdout
    assert "after the crash" in done.stdout
    assert "after the power cut" in done.stdout
    assert "SIGKILL" in said
    assert "loaded 20,000 rows" in said
    assert "the export's count and checksum equal the file's" in said
    assert "after the join" in done.stdout
    members = read_state(tmp_path)
    assert len(members) == 7  # three founders and a joiner, then the three running restarted
    restored = [log for log in tmp_path.glob("member-*.log") if "member-restored" in log.read_text()]
    assert len(restored) == 3
    assert not [member for member in members if alive(member.pid)]
