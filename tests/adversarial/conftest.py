from __future__ import annotations

import pytest

from tests.runtime.local_cluster import LocalCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(tmp_path_factory.mktemp("adv"), 3) as running:
        running.wait_formed()
        yield running


def rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    return 0


def peak_rss_mb_while(pid: int, send: object, seconds: float) -> int:
    """``send()`` (bytes to a member that is never read back), then the member's peak resident
    memory over ``seconds``."""
    import time

    peak = rss_mb(pid)
    send()  # type: ignore[operator]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        peak = max(peak, rss_mb(pid))
        time.sleep(0.2)
    return peak
