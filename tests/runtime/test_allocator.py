"""The allocator kept from unmapping what a process frees: buffers made again and again cost no
fresh pages (each in a process of its own, so that no test changes another's malloc)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

from shardgrid.runtime.allocator import keep_freed_memory

# Six buffers of 1.1 MB held at once (a member's scan pages in flight), then dropped, 100 times.
# With glibc's defaults the freed heap top is over the trim threshold (twice the largest block
# freed so far) and goes back to the kernel, so the next round faults its pages in again.
FAULTS_OF_BUFFERS = """
import json, resource, sys
from shardgrid.runtime.allocator import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
def pages_in_flight():
    return [bytes(1_100_000) for _ in range(6)]
for _ in range(3):
    pages_in_flight()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    pages_in_flight()
print(json.dumps({"kept": kept, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def _faults(mode: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", FAULTS_OF_BUFFERS, mode], capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(done.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the tuning is glibc's")
def test_buffers_made_again_reuse_their_pages() -> None:
    kept = _faults("keep")
    assert kept["kept"] is True
    default = _faults("default")
    assert default["faults"] >= 5_000  # the test's premise: glibc's defaults fault them in again
    assert kept["faults"] < 500


@pytest.mark.parametrize("retain_bytes", [-1, 2**31, 2**32])
def test_a_retention_mallopt_cannot_take_is_refused(retain_bytes: int) -> None:
    """Found by an outside tester: 2**32 wrapped to a trim threshold of 0, the opposite asked."""
    with pytest.raises(ValueError, match="0 to 2147483647"):
        keep_freed_memory(retain_bytes)
