"""The data source's options, checked on the driver before any task runs.

Spark hands a Python data source its options with the keys lower-cased and every value a string;
this module turns them into typed settings or a ``SparkOptionError`` that names the option, what was
expected and what was given, so a typo never turns into a job that silently writes somewhere else.
It imports nothing of Spark: the checks are plain functions, tested without a session.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from difflib import get_close_matches
from typing import TypeVar

from shardgrid.core.limits import MAX_MAP_NAME_CHARS, MAX_OPERATIONS_PER_REQUEST, MAX_TTL_SECONDS

MAX_WRITE_CONCURRENCY = 64  # put_all batches one task keeps in flight
MAX_READ_TASKS = 1_024
MAX_SAMPLE_ROWS = 10_000
TRUE_WORDS = frozenset({"true", "1", "yes"})
FALSE_WORDS = frozenset({"false", "0", "no"})


E = TypeVar("E", bound=enum.StrEnum)


class SparkOptionError(ValueError):
    """An option the job cannot run with; the message says which, and what it takes."""


class WriteMode(enum.StrEnum):
    PUT = "put"  # every row's key takes the row's value
    PUT_IF_ABSENT = "put_if_absent"  # a key that has a value keeps it


class KeyType(enum.StrEnum):
    """How keys are stored: the form ``core.hashing`` gives str, int and bytes keys."""

    STRING = "string"
    LONG = "long"
    BINARY = "binary"


CONNECTION_OPTIONS = {
    "cluster.members": "comma-separated host:port of members to connect through (default 127.0.0.1:5701)",
    "cluster.name": "the cluster's name (default shardgrid)",
    "cluster.secret": "the cluster's shared secret, when it has one",
    "tls.ca.file": "CA certificate the members' certificates are checked against (turns TLS on)",
    "tls.cert.file": "this client's certificate, for members that require one",
    "tls.key.file": "its private key",
    "operation.timeout.ms": "how long one batch may be retried through migrations and crashes (default 120000)",
    "map": "the map to write to or read from (required)",
    "key.column": "the column holding the key (required to write; the key column's name when reading, default key)",
    "key.type": "string, long or binary: the keys' type when reading without a schema (default string)",
    "value.column": "one column stored as the value as it is (binary or string); default: the other columns, "
    "as a msgpack map",
}
WRITE_OPTIONS = {
    "write.batch.size": f"rows per put_all batch (default 1000, at most {MAX_OPERATIONS_PER_REQUEST})",
    "write.concurrency": f"batches one task keeps in flight (default 8, at most {MAX_WRITE_CONCURRENCY})",
    "write.mode": "put (default) or put_if_absent",
    "write.ttl.seconds": "seconds the written entries live (0: until removed; unset: the map's time_to_live_seconds)",
    "ttl.column": "a column of seconds each row's entry lives (integer or floating, no nulls; 0: until removed); "
    "it sets the expiry and is not stored in the value; not with write.ttl.seconds",
    "confirm.truncate": "true lets save mode overwrite clear the map first",
    "write.report.file": "a file the driver writes the write's summary to as JSON (rows, bytes, tasks) at commit",
}
READ_OPTIONS = {
    "read.batch.size": f"entries per scan request to a member (default 10000, at most {MAX_OPERATIONS_PER_REQUEST})",
    "read.tasks": f"Spark tasks to read with (default: one per member holding data, at most {MAX_READ_TASKS})",
    "read.pushdown": "true: key filters (key = v, key IN (...)) are read with get_all; needs the session's "
    "spark.sql.python.filterPushdown.enabled=true (default false)",
    "infer.sample.size": f"entries read to infer a schema when none is given (default 100, at most {MAX_SAMPLE_ROWS})",
}
ALL_OPTIONS = {**CONNECTION_OPTIONS, **WRITE_OPTIONS, **READ_OPTIONS}
SPARK_OWN_OPTIONS = frozenset({"checkpointlocation", "queryname"})  # Spark's, passed on to every sink


@dataclass(frozen=True, slots=True, kw_only=True)
class Connection:
    members: tuple[str, ...]
    cluster_name: str
    cluster_secret: str | None
    tls_ca_file: str | None
    tls_cert_file: str | None
    tls_key_file: str | None
    operation_timeout_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceOptions:
    connection: Connection
    map_name: str
    key_column: str | None
    key_type: KeyType
    value_column: str | None
    write_batch_size: int
    write_concurrency: int
    write_mode: WriteMode
    write_ttl_ms: int  # -1: the map's own
    ttl_column: str | None  # each row's own TTL, in seconds
    confirm_truncate: bool
    write_report_file: str | None
    read_batch_size: int
    read_tasks: int | None
    read_pushdown: bool
    infer_sample_size: int


def _fail(key: str, expected: str, raw: str) -> SparkOptionError:
    return SparkOptionError(f"shardgrid: option '{key}': expected {expected}, got {raw!r}")


def _int(options: Mapping[str, str], key: str, default: int, low: int, high: int) -> int:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise _fail(key, f"an integer from {low} to {high}", raw) from None
    if not low <= value <= high:
        raise _fail(key, f"an integer from {low} to {high}", raw)
    return value


def _bool(options: Mapping[str, str], key: str) -> bool:
    raw = options.get(key)
    if raw is None:
        return False
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise _fail(key, "true or false", raw)


def _choice(options: Mapping[str, str], key: str, kind: type[E], default: E) -> E:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        return kind(raw.strip().lower())
    except ValueError:
        raise _fail(key, " or ".join(member.value for member in kind), raw) from None


def _members(raw: str) -> tuple[str, ...]:
    members = tuple(part.strip() for part in raw.split(",") if part.strip())
    for member in members:
        host, _, port = member.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65_536:
            raise _fail("cluster.members", "host:port[,host:port...]", raw)
    if not members:
        raise _fail("cluster.members", "host:port[,host:port...]", raw)
    return members


def _text(options: Mapping[str, str], key: str) -> str | None:
    raw = options.get(key)
    if raw is None:
        return None
    if not raw.strip():
        raise _fail(key, "a non-empty value", raw)
    return raw.strip()


def parse(options: Mapping[str, str], *, writing: bool) -> SourceOptions:
    """The options of one read or write; raises SparkOptionError for the first problem found."""
    lowered = {key.lower(): value for key, value in options.items() if key.lower() not in SPARK_OWN_OPTIONS}
    for key in lowered:
        if key not in ALL_OPTIONS:
            close = get_close_matches(key, ALL_OPTIONS, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; the options are: {', '.join(sorted(ALL_OPTIONS))}"
            if key == "path":
                hint = "; name the map with .option('map', ...) instead of a path"
            raise SparkOptionError(f"shardgrid: unknown option '{key}'{hint}")
    map_name = _text(lowered, "map")
    if map_name is None:
        raise SparkOptionError("shardgrid: option 'map' is required: the map to write to or read from")
    if len(map_name) > MAX_MAP_NAME_CHARS:
        raise _fail("map", f"a name of at most {MAX_MAP_NAME_CHARS} characters", map_name)
    key_column = _text(lowered, "key.column")
    if writing and key_column is None:
        raise SparkOptionError("shardgrid: option 'key.column' is required to write: the column holding the keys")
    connection = Connection(
        members=_members(lowered.get("cluster.members", "127.0.0.1:5701")),
        cluster_name=_text(lowered, "cluster.name") or "shardgrid",
        cluster_secret=lowered.get("cluster.secret") or None,
        tls_ca_file=_text(lowered, "tls.ca.file"),
        tls_cert_file=_text(lowered, "tls.cert.file"),
        tls_key_file=_text(lowered, "tls.key.file"),
        operation_timeout_ms=_int(lowered, "operation.timeout.ms", 120_000, 1_000, 3_600_000),
    )
    if (connection.tls_cert_file is None) != (connection.tls_key_file is None):
        raise SparkOptionError("shardgrid: options 'tls.cert.file' and 'tls.key.file' go together")
    read_tasks = lowered.get("read.tasks")
    ttl_column = _text(lowered, "ttl.column")
    if ttl_column is not None and "write.ttl.seconds" in lowered:
        raise SparkOptionError(
            "shardgrid: options 'ttl.column' and 'write.ttl.seconds' exclude each other: each row's TTL comes "
            "from the column, or every row gets the option's"
        )
    return SourceOptions(
        connection=connection,
        map_name=map_name,
        key_column=key_column,
        key_type=_choice(lowered, "key.type", KeyType, KeyType.STRING),
        value_column=_text(lowered, "value.column"),
        write_batch_size=_int(lowered, "write.batch.size", 1_000, 1, MAX_OPERATIONS_PER_REQUEST),
        write_concurrency=_int(lowered, "write.concurrency", 8, 1, MAX_WRITE_CONCURRENCY),
        write_mode=_choice(lowered, "write.mode", WriteMode, WriteMode.PUT),
        write_ttl_ms=(
            -1
            if "write.ttl.seconds" not in lowered
            else 1000 * _int(lowered, "write.ttl.seconds", 0, 0, MAX_TTL_SECONDS)
        ),
        ttl_column=ttl_column,
        confirm_truncate=_bool(lowered, "confirm.truncate"),
        write_report_file=_text(lowered, "write.report.file"),
        # A member walks a partition's map to each page's offset: pages of 10,000 keep that walk
        # short for large partitions (1,000-entry pages would walk a 40,000-entry one 20 times over).
        read_batch_size=_int(lowered, "read.batch.size", 10_000, 1, MAX_OPERATIONS_PER_REQUEST),
        read_tasks=None if read_tasks is None else _int(lowered, "read.tasks", 1, 1, MAX_READ_TASKS),
        read_pushdown=_bool(lowered, "read.pushdown"),
        infer_sample_size=_int(lowered, "infer.sample.size", 100, 1, MAX_SAMPLE_ROWS),
    )
