"""How much memory this process may use: the smallest of the cgroup's limit (v2, then v1) and the
machine's memory, read once when the settings are loaded. ``max_memory_bytes`` defaults to a share
of it, so that a member refuses writes well before the kernel's OOM killer would end it (the
member's own Python objects, pending writes, transfers and the kernel's buffers take the rest)."""

from __future__ import annotations

from pathlib import Path

# The share of the memory a process may use that its records may take by default.
DEFAULT_RECORDS_SHARE = 0.5
# A cgroup v1 limit at or above this means "no limit" (the kernel writes a page-rounded 2**63 - 1).
NO_CGROUP_LIMIT_BYTES = 1 << 60

CGROUP_V2_LIMIT = Path("/sys/fs/cgroup/memory.max")
CGROUP_V1_LIMIT = Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")
MEMINFO = Path("/proc/meminfo")


def usable_memory_bytes(
    v2_limit: Path = CGROUP_V2_LIMIT, v1_limit: Path = CGROUP_V1_LIMIT, meminfo: Path = MEMINFO
) -> int | None:
    """The memory this process may use, in bytes; None when nothing says (not Linux)."""
    limits = [limit for limit in (_cgroup_limit(v2_limit), _cgroup_limit(v1_limit), _total(meminfo)) if limit]
    return min(limits) if limits else None


def default_max_memory_bytes() -> int:
    """``max_memory_bytes`` when the settings do not give it: half the usable memory (0, no limit,
    when it cannot be read)."""
    usable = usable_memory_bytes()
    return int(usable * DEFAULT_RECORDS_SHARE) if usable else 0


def _cgroup_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit():
        return None  # "max": no limit
    limit = int(text)
    return limit if 0 < limit < NO_CGROUP_LIMIT_BYTES else None


def _total(path: Path) -> int | None:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if name == "MemTotal" and parts and parts[0].isdigit():
            return int(parts[0]) * 1024
    return None
