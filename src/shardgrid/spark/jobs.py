"""The Spark jobs the commands run through the data source: rows into a map, a map as rows, and a
fingerprint that tells two sets of rows apart.

``pipeline load`` / ``export`` and the demo share these so that the demo exercises exactly the path
a user's command takes. Spark is imported by the caller (a session exists before any of these run).
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardgrid.spark.options import MAX_READ_TASKS


@dataclass(frozen=True, slots=True)
class WriteSummary:
    rows: int
    data_bytes: int  # keys and values as stored, what the writer's commit counted
    seconds: float


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """A row count and an order-free checksum (the sum of each row's 64-bit hash): two sets of rows
    with the same fingerprint hold the same rows, short of a hash collision."""

    rows: int
    checksum: int


def write_to_map(
    frame: Any,
    options: Mapping[str, str],
    map_name: str,
    key_column: str,
    mode: str = "put",
    ttl_seconds: int | None = None,
) -> WriteSummary:
    """Appends ``frame`` to the map; raises Spark's error (carrying the source's message) on failure.

    The rows and bytes come from the writer's commit, which runs in another process on the driver:
    it hands them over through ``write.report.file``. ``ttl_seconds``: how long the entries live
    (None: the map's time_to_live_seconds; 0: until removed)."""
    if ttl_seconds is not None:
        options = {**options, "write.ttl.seconds": str(ttl_seconds)}
    with tempfile.TemporaryDirectory(prefix="shardgrid-write-") as scratch:
        report = Path(scratch) / "report.json"
        started = time.monotonic()
        (
            frame.write.format("shardgrid")
            .options(**options)
            .option("map", map_name)
            .option("key.column", key_column)
            .option("write.mode", mode)
            .option("write.report.file", str(report))
            .mode("append")
            .save()
        )
        seconds = time.monotonic() - started
        summary = json.loads(report.read_text())
    return WriteSummary(rows=int(summary["rows"]), data_bytes=int(summary["bytes"]), seconds=seconds)


def read_path(path: Path | str) -> str:
    """A local path as Spark's readers take it: they read a path as a glob pattern, so a folder named
    ``in[1]`` was "not found" (found by an outside tester); its pattern characters are escaped."""
    return re.sub(r"([\\{}\[\]*?])", r"\\\1", str(path))


def read_map(
    spark: Any,
    options: Mapping[str, str],
    map_name: str,
    key_column: str,
    key_type: str = "string",
    schema_ddl: str | None = None,
) -> Any:
    """The map as a DataFrame (lazy: nothing is read until an action), with the given schema or one
    inferred from a sample of entries; read by one task per core Spark has, unless the options say
    otherwise (a read task's cost is its own decoding; one task per member, the data source's
    default, leaves cores idle when members and cores differ in number)."""
    tasks = min(MAX_READ_TASKS, max(1, int(spark.sparkContext.defaultParallelism)))
    reader = spark.read.format("shardgrid").option("read.tasks", str(tasks)).options(**options)
    reader = reader.option("map", map_name)
    reader = reader.option("key.column", key_column).option("key.type", key_type)
    return (reader.schema(schema_ddl) if schema_ddl else reader).load()


def fingerprint(frame: Any, columns: Sequence[str]) -> Fingerprint:
    from pyspark.sql import functions as F

    # decimal(38,0): the sum of up to 10^19 signed 64-bit hashes never overflows (a long sum would).
    row = frame.select(
        F.count(F.lit(1)).alias("rows"), F.sum(F.xxhash64(*columns).cast("decimal(38,0)")).alias("checksum")
    ).first()
    return Fingerprint(rows=int(row["rows"]), checksum=int(row["checksum"] or 0))


def rows_missing(expected: Any, actual: Any, columns: Sequence[str]) -> int:
    """Rows of ``expected`` with no equal row (on ``columns``) in ``actual``."""
    return int(expected.join(actual, list(columns), "left_anti").count())


# "SomeError: message", also as a JVM trace quotes it (": org.x.SomeException: ..." and
# "Caused by: org.x.SomeException: ...", the root cause last).
ERROR_LINE = re.compile(r"^\s*(?::\s*|Caused by:\s*)?(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.+)$")


# What Spark says of a file it could not read, beside the reason: which file, and for a CSV header
# that differs from the schema, which column it expected where.
FILE_LINE = re.compile(r"(?:Encountered error while reading file|CSV file:) (\S+?)\.?(?:\s|$)")
EXPECTED_LINE = re.compile(r"^\s*(Expected: .+ but found: .+)$", re.MULTILINE)


def failure_reason(error: Exception) -> str:
    """The line that says what went wrong, out of Spark's error (a JVM trace around a Python
    traceback): the last ``SomethingError: message`` line, one of the data source's when there is
    one (its messages start "shardgrid:"); source lines quoted in tracebacks are not taken. The
    file Spark was reading, and what a CSV header lacked, follow it when Spark names them."""
    try:
        text = str(error)
    except Exception:  # a Py4J error asks the JVM for its text, and the JVM may be gone
        return f"{type(error).__name__} (the JVM ended before it said why)"
    found = [match.group(2) for match in map(ERROR_LINE.match, text.splitlines()) if match]
    ours = [message for message in found if message.startswith("shardgrid:")]
    if ours:
        return ours[-1]
    if found:
        reason = found[-1].strip()
        details = [f"file {match.group(1)}" for match in FILE_LINE.finditer(text)][:1]
        details += [match.group(1).strip() for match in EXPECTED_LINE.finditer(text)][:1]
        return f"{reason} ({'; '.join(details)})" if details else reason
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
