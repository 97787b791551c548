"""The default max_memory_bytes: half of the smallest of the cgroup's limit and the machine's
memory, whichever of them the process can read."""

from __future__ import annotations

from pathlib import Path

from shardgrid.runtime.machine_memory import usable_memory_bytes
from shardgrid.runtime.settings import load_settings

MEMINFO = "MemTotal:       16384000 kB\nMemFree:        1000 kB\n"


def files(tmp_path: Path, v2: str | None, v1: str | None) -> tuple[Path, Path, Path]:
    tmp_path.mkdir()
    paths = (tmp_path / "v2", tmp_path / "v1", tmp_path / "meminfo")
    for path, text in zip(paths, (v2, v1, MEMINFO), strict=True):
        if text is not None:
            path.write_text(text)
    return paths


def test_the_smallest_readable_limit_wins(tmp_path: Path) -> None:
    machine = 16384000 * 1024
    assert usable_memory_bytes(*files(tmp_path / "a", None, None)) == machine
    assert usable_memory_bytes(*files(tmp_path / "b", "max\n", None)) == machine  # v2 without a limit
    assert usable_memory_bytes(*files(tmp_path / "c", "1073741824\n", None)) == 1 << 30
    assert usable_memory_bytes(*files(tmp_path / "d", None, "9223372036854771712\n")) == machine  # v1: none
    assert usable_memory_bytes(*files(tmp_path / "e", None, "536870912\n")) == 1 << 29
    assert usable_memory_bytes(tmp_path / "x", tmp_path / "y", tmp_path / "z") is None


def test_the_settings_default_is_half_the_usable_memory_and_a_setting_overrides_it() -> None:
    settings = load_settings(None, {}, {})
    usable = usable_memory_bytes()
    assert settings.member_config.max_memory_bytes == (usable // 2 if usable else 0)
    assert settings.sources[("cluster", "max_memory_bytes")] == "default"
    chosen = load_settings(None, {"SHARDGRID_MAX_MEMORY_BYTES": "0"}, {})
    assert chosen.member_config.max_memory_bytes == 0
