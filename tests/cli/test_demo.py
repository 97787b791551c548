"""``shardgrid demo`` (the README's main job) end to end, smaller: it must lose nothing and leave
no member process behind."""

from __future__ import annotations

import subprocess
import sys

from shardgrid.cli.local_cluster import alive, read_state


def test_the_demo_loses_nothing_and_leaves_nothing_behind(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "shardgrid", "demo", "--entries", "20000", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "entries lost: 0" in done.stdout
    assert "after the crash" in done.stdout
    assert "after the join" in done.stdout
    members = read_state(tmp_path)
    assert len(members) == 4
    assert not [member for member in members if alive(member.pid)]
