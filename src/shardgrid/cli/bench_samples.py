"""The lines ``shardgrid bench cluster --samples`` writes, checked on the driver before Spark reads them.

Spark's JSON reader can count corrupt records but cannot say which line holds one, and a report
built over a file with a bad line would be quietly wrong; so every line is decoded here first (one
pass, streamed, a few microseconds a line) and the first bad one is named by its number. Fields
beyond these are ignored, so a newer writer's extra fields do not break an older report. Blank
lines are skipped, as Spark's reader skips them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import msgspec

# A call that took longer than a day is no latency sample (and 1e306 s in ms is infinite in JSON).
Latency = Annotated[float, msgspec.Meta(ge=0, le=86_400)]
PartitionId = Annotated[int, msgspec.Meta(ge=0, lt=2**31)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class SampleLine(msgspec.Struct, tag_field="kind", tag="sample"):
    """One timed call: ``t`` its start on the monotonic clock (s), ``s`` how long it took (s)."""

    scenario: Name
    t: float
    op: Literal["get", "set"]
    s: Latency


class MigrationLine(msgspec.Struct, tag_field="kind", tag="migration", kw_only=True):
    """One migration notice as the client received it, at ``t`` on the same clock as the samples."""

    scenario: Name
    t: float
    phase: Literal["started", "finished", "failed"]
    partition_id: PartitionId
    source: str = ""
    destination: str = ""


class SamplesError(Exception):
    """The samples file cannot be reported on; the message says why (and which line)."""


@dataclass
class SamplesCheck:
    """What the file holds, counted while checking it (so the report can say it without Spark)."""

    lines: int = 0
    samples: int = 0
    migrations: int = 0
    scenarios: list[str] = field(default_factory=list)  # in the order they first appear


_decoder = msgspec.json.Decoder(SampleLine | MigrationLine)


def check_samples(path: Path) -> SamplesCheck:
    """Every line decoded and typed; raises ``SamplesError`` for a missing, empty or malformed file
    (naming the first bad line), or one whose migration events belong to a scenario without samples
    (there is no first sample to measure their times from)."""
    if not path.exists():
        raise SamplesError(f"{path}: no such file (write one with `shardgrid bench cluster --samples {path}`)")
    if not path.is_file():
        raise SamplesError(f"{path}: not a file")
    check = SamplesCheck()
    sampled: set[str] = set()
    migrating: set[str] = set()
    with path.open("rb") as lines:
        for number, line in enumerate(lines, start=1):
            check.lines = number
            if not line.strip():
                continue
            try:
                decoded = _decoder.decode(line)
            except msgspec.DecodeError as error:
                raise SamplesError(f"{path}: line {number}: {error}") from None
            if decoded.scenario not in sampled and decoded.scenario not in migrating:
                check.scenarios.append(decoded.scenario)
            if isinstance(decoded, SampleLine):
                check.samples += 1
                sampled.add(decoded.scenario)
            else:
                check.migrations += 1
                migrating.add(decoded.scenario)
    if check.samples == 0:
        what = "is empty" if check.migrations == 0 else "has migration events but no latency samples"
        raise SamplesError(f"{path} {what}: nothing to report")
    orphans = sorted(migrating - sampled)
    if orphans:
        raise SamplesError(f"{path}: migration events without latency samples for scenario(s) {', '.join(orphans)}")
    return check
