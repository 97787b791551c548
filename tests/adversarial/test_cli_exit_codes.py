"""Exit codes of the cluster commands: 0 done, 1 refused/timeout, 2 bad arguments, 3 unreachable."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _shardgrid(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardgrid", *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    "args",
    [
        ("status", "--members", ""),  # observed: 1 ("failed: give at least one member address")
        ("status", "--members", "garbage"),  # observed: 3 ("unreachable: ... is not host:port")
        ("status", "--members", "127.0.0.1:notaport"),  # observed: 3
        ("status", "--members", "127.0.0.1:5701", "--timeout", "nan"),  # observed: 1 with a traceback
        ("status", "--members", "127.0.0.1:5701", "--timeout", "inf"),  # observed: 1 with a traceback
    ],
)
def test_bad_arguments_exit_2_without_a_traceback(args):
    done = _shardgrid(*args)
    assert "Traceback" not in done.stderr, done.stderr[-800:]
    assert done.returncode == 2, f"exit {done.returncode}: {done.stderr.strip()[-300:]}"


@pytest.mark.parametrize(
    "args",
    [
        ("status", "--timeout", "-5"),  # observed: 3, "unreachable: ... no connection within 0.0 s"
        ("status", "--timeout", "0"),  # observed: 3, plus "Future exception was never retrieved" on stderr
        ("map", "size", ""),  # observed: 1, "failed: a map name is 1 to 256 characters"
    ],
)
def test_bad_arguments_against_a_reachable_cluster_exit_2(cluster, args):
    done = _shardgrid(*args, "--members", ",".join(cluster.addresses))
    assert "Traceback" not in done.stderr, done.stderr[-800:]
    assert "never retrieved" not in done.stderr, done.stderr[-800:]
    assert done.returncode == 2, f"exit {done.returncode}: {done.stderr.strip()[-300:]}"
