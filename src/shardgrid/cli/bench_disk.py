"""``shardgrid bench disk``: the two shapes issue 35 weighs for a member's disk, measured on this
machine with the data path's own batches (1,000 entries of 10-byte keys and 100-byte values).

- **Our own log** (``runtime.record_file``): a write run is one checksummed record holding its
  packed columns as they came off the wire, appended, then synced once for the batch; a
  partition's snapshot is the engine's ``dump`` pages, one record each, loaded back with ``load``.
- **An embedded store**: SQLite from Python's standard library (WAL journal; ``synchronous``
  FULL for a sync per batch, OFF for none), a row per entry with its metadata, a transaction per
  batch, read back row by row and packed for the engine.

For each: entries per second appended with a sync per batch and with none, the time one synced
single-entry write takes, bytes on disk per entry, and the time to load ``--entries`` entries back
into the engine, which a restarted member must do before it serves. The one target is issue 35's
restart budget for our own shape: 1,000,000 entries loaded within 3 s (the member's start must
fit its other work in what is left).
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import struct
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shardgrid._engine import MAX_ENTRIES_PER_CHUNK, RecordStore
from shardgrid.cli.bench_results import Target, with_targets
from shardgrid.core.disk_records import encode_record
from shardgrid.core.errors import invariant
from shardgrid.core.store import packed_lengths
from shardgrid.runtime.record_file import RecordFile

BATCH_ENTRIES = 1_000
KEY_BYTES = 10
VALUE_BYTES = 100
SYNCED_BATCHES = 200  # batches appended with a sync each (a sync takes milliseconds)
SINGLE_WRITES = 200  # synced one-entry writes timed
MAP_NAME = "bench"
NOW_MS = 1_000
LOAD_TARGET_S = 3.0
METADATA_BYTES = 48  # an SQLite row's metadata, as the engine keeps it: times, expiry, hits, version
RUN_KIND, PAGE_KIND = 1, 2  # a write run's record, a snapshot page's


def _batch(first: int) -> tuple[bytes, bytes, bytes, bytes]:
    keys = b"".join(f"{n:0{KEY_BYTES}d}".encode() for n in range(first, first + BATCH_ENTRIES))
    values = bytes(range(VALUE_BYTES)) * BATCH_ENTRIES
    lengths = packed_lengths([KEY_BYTES] * BATCH_ENTRIES)
    return keys, lengths, values, packed_lengths([VALUE_BYTES] * BATCH_ENTRIES)


def _parts_record(kind: int, parts: tuple[bytes, ...]) -> bytes:
    """A record of columns end to end, their lengths in front."""
    return encode_record(kind, struct.pack(f"<{len(parts)}I", *map(len, parts)) + b"".join(parts))


def _parts_of(payload: bytes, count: int) -> list[bytes]:
    position = 4 * count
    parts = []
    for size in struct.unpack_from(f"<{count}I", payload):
        parts.append(payload[position : position + size])
        position += size
    return parts


def _batches(entries: int) -> Iterator[tuple[bytes, bytes, bytes, bytes]]:
    for first in range(0, entries, BATCH_ENTRIES):
        yield _batch(first)


def _own_appends(directory: Path, batches: int, sync_each: bool) -> float:
    file, _ = RecordFile.open(directory / f"runs-{sync_each}")
    records = [_parts_record(RUN_KIND, _batch(i * BATCH_ENTRIES)) for i in range(min(batches, 50))]
    started = time.perf_counter()
    for i in range(batches):
        file.append(records[i % len(records)])
        if sync_each:
            file.sync()
    file.sync()
    seconds = time.perf_counter() - started
    file.close()
    return batches * BATCH_ENTRIES / seconds


def _own_single_write_ms(directory: Path) -> float:
    file, _ = RecordFile.open(directory / "single")
    columns = (b"k" * KEY_BYTES, packed_lengths([KEY_BYTES]), b"v" * VALUE_BYTES, packed_lengths([VALUE_BYTES]))
    record = _parts_record(RUN_KIND, columns)
    times = []
    for _ in range(SINGLE_WRITES):
        started = time.perf_counter()
        file.append(record)
        file.sync()
        times.append(time.perf_counter() - started)
    file.close()
    return statistics.median(times) * 1000


def _own_snapshot_and_load(directory: Path, entries: int) -> dict[str, float]:
    """Write ``entries`` as dump pages, then open and load them into a fresh store."""
    store = RecordStore(7)
    for columns in _batches(entries):
        store.put(MAP_NAME, *columns, NOW_MS)
    path = directory / "snapshot"
    file, _ = RecordFile.open(path)
    offset = 0
    while offset < entries:
        keys, key_lengths, values, value_lengths, metadata, offset = store.dump(
            MAP_NAME, offset, MAX_ENTRIES_PER_CHUNK, 1 << 24
        )
        file.append(_parts_record(PAGE_KIND, (keys, key_lengths, values, value_lengths, metadata)))
    file.sync()
    file.close()
    del store
    started = time.perf_counter()
    file, scan = RecordFile.open(path)
    fresh = RecordStore(7)
    for _, payload in scan.records:
        fresh.load(MAP_NAME, *_parts_of(payload, 5))
    load_s = time.perf_counter() - started
    file.close()
    invariant(fresh.entry_count(MAP_NAME) == entries, "every entry was loaded back")
    return {"load_seconds": load_s, "bytes_per_entry": path.stat().st_size / entries}


def _sqlite(path: Path, synchronous: str) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("pragma journal_mode=wal")
    connection.execute(f"pragma synchronous={synchronous}")
    connection.execute("create table if not exists entries (key blob primary key, value blob, metadata blob)")
    return connection


def _rows(first: int) -> list[tuple[bytes, bytes, bytes]]:
    value = bytes(range(VALUE_BYTES))
    metadata = bytes(METADATA_BYTES)
    return [(f"{n:0{KEY_BYTES}d}".encode(), value, metadata) for n in range(first, first + BATCH_ENTRIES)]


def _sqlite_appends(directory: Path, batches: int, synchronous: str) -> float:
    connection = _sqlite(directory / f"appends-{synchronous}.db", synchronous)
    rows = [_rows(i * BATCH_ENTRIES) for i in range(min(batches, 50))]
    started = time.perf_counter()
    for i in range(batches):
        connection.execute("begin")
        connection.executemany("insert or replace into entries values (?, ?, ?)", rows[i % len(rows)])
        connection.execute("commit")
    seconds = time.perf_counter() - started
    connection.close()
    return batches * BATCH_ENTRIES / seconds


def _sqlite_single_write_ms(directory: Path) -> float:
    connection = _sqlite(directory / "single.db", "full")
    times = []
    for n in range(SINGLE_WRITES):
        started = time.perf_counter()
        row = (f"{n:0{KEY_BYTES}d}".encode(), b"v" * VALUE_BYTES, bytes(METADATA_BYTES))
        connection.execute("insert or replace into entries values (?, ?, ?)", row)
        times.append(time.perf_counter() - started)
    connection.close()
    return statistics.median(times) * 1000


def _sqlite_snapshot_and_load(directory: Path, entries: int) -> dict[str, float]:
    path = directory / "snapshot.db"
    connection = _sqlite(path, "off")
    connection.execute("begin")
    for first in range(0, entries, BATCH_ENTRIES):
        connection.executemany("insert into entries values (?, ?, ?)", _rows(first))
    connection.execute("commit")
    connection.execute("pragma wal_checkpoint(truncate)")
    connection.close()
    started = time.perf_counter()
    connection = _sqlite(path, "off")
    fresh = RecordStore(7)
    cursor = connection.execute("select key, value from entries")
    while rows := cursor.fetchmany(BATCH_ENTRIES):
        keys = b"".join(row[0] for row in rows)
        values = b"".join(row[1] for row in rows)
        key_lengths = packed_lengths([len(row[0]) for row in rows])
        value_lengths = packed_lengths([len(row[1]) for row in rows])
        fresh.put(MAP_NAME, keys, key_lengths, values, value_lengths, NOW_MS)
    load_s = time.perf_counter() - started
    connection.close()
    invariant(fresh.entry_count(MAP_NAME) == entries, "every entry was loaded back")
    return {"load_seconds": load_s, "bytes_per_entry": path.stat().st_size / entries}


def _file_system_of(path: Path) -> str:
    """The type of the file system ``path`` is on, from the kernel's mount table ('' when unknown)."""
    best, kind = "", ""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return ""
    resolved = str(path.resolve())
    for line in lines:
        fields = line.split()
        if len(fields) < 3 or len(fields[1]) < len(best):
            continue
        if resolved == fields[1] or resolved.startswith(fields[1].rstrip("/") + "/"):
            best, kind = fields[1], fields[2]
    return kind


def run_disk_bench(entries: int, directory: Path | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="shardgrid-bench-disk-", dir=directory) as name:
        here = Path(name)
        unsynced_batches = max(1, min(entries // BATCH_ENTRIES, 1_000))
        own = {
            "synced_batch_entries_per_second": _own_appends(here, SYNCED_BATCHES, sync_each=True),
            "unsynced_entries_per_second": _own_appends(here, unsynced_batches, sync_each=False),
            "synced_single_write_ms": _own_single_write_ms(here),
            **_own_snapshot_and_load(here, entries),
        }
        embedded = {
            "synced_batch_entries_per_second": _sqlite_appends(here, SYNCED_BATCHES, "full"),
            "unsynced_entries_per_second": _sqlite_appends(here, unsynced_batches, "off"),
            "synced_single_write_ms": _sqlite_single_write_ms(here),
            **_sqlite_snapshot_and_load(here, entries),
        }
        block_bytes = os.statvfs(here).f_bsize
        file_system = _file_system_of(here)
    report: dict[str, Any] = {
        "entries": entries,
        "batch_entries": BATCH_ENTRIES,
        "value_bytes": VALUE_BYTES,
        "directory": str(here.parent),
        "file_system": file_system,  # a sync on tmpfs costs nothing and proves nothing
        "directory_block_bytes": block_bytes,
        "own_log": own,
        "sqlite": embedded,
        "sqlite_version": sqlite3.sqlite_version,
    }
    scaled_s = own["load_seconds"] * 1_000_000 / entries
    targets = [
        Target(
            name="own_log_load_seconds_per_million_entries",
            figure="our own log: 1,000,000 entries of 100 bytes read and loaded into the engine, seconds",
            measured=round(scaled_s, 3),
            comparison="<=",
            wanted=LOAD_TARGET_S,
        )
    ]
    return with_targets(report, targets)


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """Both shapes' figures side by side, for the results file."""
    return {f"{shape}_{name}": value for shape in ("own_log", "sqlite") for name, value in report[shape].items()}
