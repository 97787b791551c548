"""Backups of a running cluster's data, and restores of them into a cluster (a new one, say).

A backup is a directory: ``manifest.json`` (what it holds, and a SHA-256 of each file) and one
file per map of checksummed records (the disk records members write their own files with), each
a page of one partition's records as its owner holds them: keys, values and each record's
metadata (times, expiry, hits, version). Each partition of each map is copied at one point of its
writes (its pages are read again when it changed between them); with ``pause_writes`` the cluster
serves reads only while the copy runs (PASSIVE), so every partition is at the same point: every
write acknowledged before the backup began is in it, and none acknowledged after it. The
directory appears only once whole: it is written beside its place and renamed into it.

A restore checks the whole backup first (its manifest, every file's checksum, every record's
shape) and writes nothing from a damaged one. It writes each record with the time it had left
to live (an expired one is not written); its other metadata starts afresh, as for any write. The
cluster restored into may have another partition count: keys are hashed again as they are put.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import struct
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import msgspec

from shardgrid._engine import METADATA_FIELDS
from shardgrid.client.aio import METADATA_RECORD_BYTES, AsyncClient, PackedEntries
from shardgrid.client.errors import ShardgridClientError
from shardgrid.core import messages as m
from shardgrid.core.disk_records import RecordKind, encode_record, scan_records
from shardgrid.core.limits import MAX_COUNTER, MAX_MAP_NAME_CHARS, MAX_PARTITION_COUNT, MAX_STATUS_MAPS, MAX_TTL_MS
from shardgrid.core.metadata.cluster_state import ClusterState
from shardgrid.core.store import unpacked_lengths
from shardgrid.core.wire import Record

FORMAT = "shardgrid-backup"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
PAGE_RECORDS = 10_000  # records in one stored page, at most
PAGE_BYTES = 4 * 1024 * 1024  # their keys' and values' bytes, at most (one record alone may pass it)
SCAN_PAGE_ENTRIES = 10_000  # records a member sends in one scan page
PARALLEL_PARTITIONS = 8  # partitions read at once (ahead of the one being written)
RESTORE_BATCH_ENTRIES = 5_000  # records put in one call of a restore
PROGRESS_EVERY_S = 1.0
_EXPIRE_AT = METADATA_FIELDS.index("expire_at_ms")
_U64 = struct.Struct("<Q")


class BackupError(ShardgridClientError):
    """A backup could not be taken or restored: the directory, the backup's files, or the cluster
    restored into (a map there holds entries already)."""


class BackupPage(Record, kw_only=True):
    """Some records of one partition of one map, as its owner holds them."""

    map_name: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_MAP_NAME_CHARS)]
    partition_id: Annotated[int, msgspec.Meta(ge=0, lt=MAX_PARTITION_COUNT)]
    keys: bytes
    key_lengths: bytes
    values: bytes
    value_lengths: bytes
    metadata: bytes  # METADATA_FIELDS per record, unsigned 64-bit little-endian numbers


_PAGE_ENCODER = msgspec.msgpack.Encoder()
_PAGE_DECODER = msgspec.msgpack.Decoder(BackupPage)


@dataclass(slots=True, kw_only=True)
class MapCopy:
    """One map in a backup: its file and what it holds."""

    name: str
    file: str
    records: int = 0
    data_bytes: int = 0  # keys and values
    file_bytes: int = 0
    sha256: str = ""


@dataclass(slots=True, kw_only=True)
class Manifest:
    cluster_name: str
    partition_count: int
    taken_at_ms: int
    finished_at_ms: int = 0
    writes_paused: bool = False
    maps: list[MapCopy] = field(default_factory=list)

    def document(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "cluster_name": self.cluster_name,
            "partition_count": self.partition_count,
            "taken_at_ms": self.taken_at_ms,
            "finished_at_ms": self.finished_at_ms,
            "writes_paused": self.writes_paused,
            "maps": [
                {
                    "name": c.name,
                    "file": c.file,
                    "records": c.records,
                    "data_bytes": c.data_bytes,
                    "file_bytes": c.file_bytes,
                    "sha256": c.sha256,
                }
                for c in self.maps
            ],
        }


@dataclass(slots=True, kw_only=True)
class RestoreReport:
    maps: dict[str, int]  # records written, per map
    expired: int  # records left out: their time to live had run out
    seconds: float


Progress = Callable[[str], None]


# --- taking a backup ---------------------------------------------------------------------------------


async def take_backup(
    client: AsyncClient,
    directory: Path,
    *,
    maps: Sequence[str] | None = None,
    pause_writes: bool = False,
    progress: Progress | None = None,
) -> Manifest:
    """Copy every map (or ``maps``) of the cluster into ``directory``, which must not exist or be
    empty; returns the manifest written. Raises BackupError for a directory it cannot use, and
    what the client raises for a cluster it cannot read."""
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise BackupError(f"{directory} exists and is not an empty directory: a backup goes to a new one")
    names = sorted(set(maps)) if maps else await _map_names(client)
    for name in names:
        if not 0 < len(name) <= MAX_MAP_NAME_CHARS:
            raise BackupError(f"a map name is 1 to {MAX_MAP_NAME_CHARS} characters: {name!r}")
    partial = directory.parent / f".{directory.name}.partial-{uuid.uuid4().hex[:8]}"
    partial.mkdir(parents=True, mode=0o700)
    manifest = Manifest(
        cluster_name=client.cluster_name,
        partition_count=await client.partition_count(),
        taken_at_ms=int(time.time() * 1000),
        writes_paused=pause_writes,
    )
    try:
        async with _writes_paused(client, pause_writes):
            for number, name in enumerate(names, 1):
                copy = MapCopy(name=name, file=f"map-{number:04d}.records")
                await _copy_map(client, partial / copy.file, copy, manifest.partition_count, progress)
                manifest.maps.append(copy)
        manifest.finished_at_ms = int(time.time() * 1000)
        _write_synced(partial / MANIFEST, json.dumps(manifest.document(), indent=2).encode())
        _sync_directory(partial)
        if directory.exists():
            directory.rmdir()  # empty, as checked (an empty directory is not replaced by a rename)
        partial.rename(directory)
        _sync_directory(directory.parent)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return manifest


async def _map_names(client: AsyncClient) -> list[str]:
    """Every map some member holds entries of. A member names at most MAX_STATUS_MAPS: one that
    names that many may hold more, and the backup is refused rather than leave some out (found by
    an outside tester: 1,100 maps backed up as 1,000)."""
    status = await client.cluster_status()
    if len(status.replies) < len(status.members):
        missing = sorted(set(status.members) - set(status.replies))
        raise BackupError(f"members did not answer, so their maps are not known: {', '.join(missing)}")
    full = [reply.address for reply in status.replies.values() if len(reply.maps) >= MAX_STATUS_MAPS]
    if full:
        raise BackupError(
            f"{full[0]} holds {MAX_STATUS_MAPS} maps or more, more than a member's status names: name the maps "
            "to back up (--map, again for each)"
        )
    return sorted({usage.map_name for reply in status.replies.values() for usage in reply.maps})


@contextlib.asynccontextmanager
async def _writes_paused(client: AsyncClient, pause: bool) -> Any:
    """PASSIVE (reads only) while the copy runs, then the state the cluster had."""
    if not pause:
        yield
        return
    before = await client.get_cluster_state()
    if before is not ClusterState.PASSIVE:
        await client.change_cluster_state(ClusterState.PASSIVE)
    try:
        yield
    finally:
        if before is not ClusterState.PASSIVE:
            await client.change_cluster_state(before)


async def _copy_map(
    client: AsyncClient, path: Path, copy: MapCopy, partition_count: int, progress: Progress | None
) -> None:
    """Every partition of one map into its file, in partition order, a window of them read at once."""
    digest = hashlib.sha256()

    async def read(pid: int) -> PackedEntries:
        return await client.scan_partition_packed(copy.name, pid, SCAN_PAGE_ENTRIES, with_metadata=True)

    reported_s = time.monotonic()
    with path.open("wb") as out:
        # A window of partitions read ahead, written in order: what waits to be written is bounded.
        tasks: deque[asyncio.Task[PackedEntries]] = deque()
        try:
            for pid in range(partition_count):
                while len(tasks) < PARALLEL_PARTITIONS and pid + len(tasks) < partition_count:
                    tasks.append(asyncio.ensure_future(read(pid + len(tasks))))
                entries = await tasks.popleft()
                for page in _pages(copy.name, pid, entries):
                    data = encode_record(RecordKind.BACKUP_PAGE, _PAGE_ENCODER.encode(page))
                    out.write(data)
                    digest.update(data)
                    copy.records += len(page.key_lengths) // 4
                    copy.data_bytes += len(page.keys) + len(page.values)
                if progress is not None and time.monotonic() - reported_s >= PROGRESS_EVERY_S:
                    reported_s = time.monotonic()
                    progress(f"{copy.name}: {pid + 1}/{partition_count} partitions, {copy.records:,} records")
        finally:
            for task in tasks:
                task.cancel()
        out.flush()
        os.fsync(out.fileno())
    copy.sha256 = digest.hexdigest()
    copy.file_bytes = path.stat().st_size
    if progress is not None:
        progress(f"{copy.name}: {partition_count} partitions, {copy.records:,} records, {copy.data_bytes:,} bytes")


def _pages(map_name: str, pid: int, entries: PackedEntries) -> Iterator[BackupPage]:
    """One partition's records cut into pages of at most PAGE_RECORDS and about PAGE_BYTES."""
    key_lengths = unpacked_lengths(entries.key_lengths)
    value_lengths = unpacked_lengths(entries.value_lengths)
    first = key_at = value_at = 0
    size = 0
    for index, (key_length, value_length) in enumerate(zip(key_lengths, value_lengths, strict=True)):
        record_bytes = key_length + value_length
        if index > first and (index - first >= PAGE_RECORDS or size + record_bytes > PAGE_BYTES):
            yield _page(map_name, pid, entries, first, index, key_at, value_at, key_lengths, value_lengths)
            key_at += sum(key_lengths[first:index])
            value_at += sum(value_lengths[first:index])
            first, size = index, 0
        size += record_bytes
    if first < len(key_lengths):
        yield _page(map_name, pid, entries, first, len(key_lengths), key_at, value_at, key_lengths, value_lengths)


def _page(
    map_name: str,
    pid: int,
    entries: PackedEntries,
    first: int,
    end: int,
    key_at: int,
    value_at: int,
    key_lengths: list[int],
    value_lengths: list[int],
) -> BackupPage:
    key_bytes = sum(key_lengths[first:end])
    value_bytes = sum(value_lengths[first:end])
    return BackupPage(
        map_name=map_name,
        partition_id=pid,
        keys=entries.keys[key_at : key_at + key_bytes],
        key_lengths=entries.key_lengths[4 * first : 4 * end],
        values=entries.values[value_at : value_at + value_bytes],
        value_lengths=entries.value_lengths[4 * first : 4 * end],
        metadata=entries.metadata[METADATA_RECORD_BYTES * first : METADATA_RECORD_BYTES * end],
    )


def _write_synced(path: Path, data: bytes) -> None:
    with path.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def _sync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


# --- reading one back ---------------------------------------------------------------------------------


def read_manifest(directory: Path) -> Manifest:
    """The manifest of the backup in ``directory``, checked (BackupError naming what is wrong);
    ``check_backup`` checks the files it lists too."""
    path = directory / MANIFEST
    try:
        raw = path.read_bytes() if path.stat().st_size <= MAX_MANIFEST_BYTES else b""
    except OSError as error:
        raise BackupError(f"{directory} is not a backup: {path.name}: {error.strerror or error}") from None
    try:
        document = json.loads(raw)
        if document.get("format") != FORMAT:
            raise BackupError(f"{path} is not a shardgrid backup's manifest")
        if document.get("format_version") != FORMAT_VERSION:
            version = document.get("format_version")
            raise BackupError(f"{path} is of format version {version}; this shardgrid reads {FORMAT_VERSION}")
        manifest = Manifest(
            cluster_name=str(document["cluster_name"]),
            partition_count=int(document["partition_count"]),
            taken_at_ms=int(document["taken_at_ms"]),
            finished_at_ms=int(document["finished_at_ms"]),
            writes_paused=bool(document["writes_paused"]),
            maps=[
                MapCopy(
                    name=str(c["name"]),
                    file=str(c["file"]),
                    records=int(c["records"]),
                    data_bytes=int(c["data_bytes"]),
                    file_bytes=int(c["file_bytes"]),
                    sha256=str(c["sha256"]),
                )
                for c in document["maps"]
            ],
        )
    except BackupError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as error:
        # (RecursionError: json nests without a bound; an outside tester's 200 KB of brackets)
        raise BackupError(f"{path} is damaged: {type(error).__name__}: {str(error)[:200]}") from None
    if not 1 <= manifest.partition_count <= MAX_PARTITION_COUNT:
        raise BackupError(f"{path} names {manifest.partition_count} partitions")
    for copy in manifest.maps:
        if not 0 < len(copy.name) <= MAX_MAP_NAME_CHARS or Path(copy.file).name != copy.file or copy.file == MANIFEST:
            raise BackupError(f"{path} names a map or a file no backup writes: {copy.name!r}, {copy.file!r}")
    for what, names in (("map", [c.name for c in manifest.maps]), ("file", [c.file for c in manifest.maps])):
        if len(set(names)) != len(names):
            raise BackupError(f"{path} names a {what} twice")
    return manifest


def check_backup(directory: Path, maps: Sequence[str] | None = None) -> Manifest:
    """The backup's manifest once every file it lists (or those of ``maps``) was read whole and
    found as it was written: its checksum, every record intact, every page's columns whole, as
    many records as the manifest says. BackupError names the first thing wrong."""
    manifest = read_manifest(directory)
    for copy in _chosen(manifest, maps):
        records = sum(len(page.key_lengths) // 4 for page in _read_pages(directory, copy, manifest))
        if records != copy.records:
            raise BackupError(f"{directory / copy.file} holds {records} records, its manifest says {copy.records}")
    return manifest


def _chosen(manifest: Manifest, maps: Sequence[str] | None) -> list[MapCopy]:
    if not maps:
        return list(manifest.maps)
    held = {copy.name: copy for copy in manifest.maps}
    missing = sorted(set(maps) - set(held))
    if missing:
        raise BackupError(f"the backup holds no map {', '.join(map(repr, missing))} (it holds {sorted(held)})")
    return [held[name] for name in sorted(set(maps))]


def _read_pages(directory: Path, copy: MapCopy, manifest: Manifest) -> Iterator[BackupPage]:
    path = directory / copy.file
    try:
        # A regular file of the size the manifest says, before it is read (found by an outside
        # tester: a link to /dev/zero was read until memory ran out).
        if path.is_symlink() or not path.is_file():
            raise BackupError(f"{path} is not a regular file")
        if path.stat().st_size != copy.file_bytes:
            raise BackupError(f"{path} holds {path.stat().st_size} bytes, its manifest says {copy.file_bytes}")
        data = path.read_bytes()
    except OSError as error:
        raise BackupError(f"{path}: {error.strerror or error}") from None
    if hashlib.sha256(data).hexdigest() != copy.sha256:
        raise BackupError(f"{path} is not the file the backup wrote (its SHA-256 differs from the manifest's)")
    scan = scan_records(data)
    if scan.corrupt or scan.torn_bytes:
        raise BackupError(f"{path} is damaged at byte {scan.valid_bytes}: {scan.corrupt or 'cut short'}")
    for kind, payload in scan.records:
        if kind != RecordKind.BACKUP_PAGE:
            raise BackupError(f"{path} holds a record of kind {kind}, not a backup page")
        try:
            page = _PAGE_DECODER.decode(payload)
        except msgspec.MsgspecError as error:
            raise BackupError(f"{path} holds a page no backup writes: {error}") from None
        problem = _page_problem(page, manifest.partition_count)
        if not problem and page.map_name != copy.name:
            problem = f"is of map {page.map_name!r}, not {copy.name!r}"
        if problem:
            raise BackupError(f"{path}: a page of partition {page.partition_id} {problem}")
        yield page


def _page_problem(page: BackupPage, partition_count: int) -> str:
    if page.partition_id >= partition_count:
        return f"is past the backup's {partition_count} partitions"
    try:
        key_lengths = unpacked_lengths(page.key_lengths)
        value_lengths = unpacked_lengths(page.value_lengths)
    except ValueError as error:
        return str(error)
    if len(key_lengths) != len(value_lengths) or len(page.metadata) != METADATA_RECORD_BYTES * len(key_lengths):
        return "has columns of different lengths"
    if sum(key_lengths) != len(page.keys) or sum(value_lengths) != len(page.values):
        return "has lengths that do not add up to its columns"
    if any(length == 0 for length in key_lengths):
        return "holds an empty key"
    for index in range(len(key_lengths)):
        expire_at_ms = _U64.unpack_from(page.metadata, index * METADATA_RECORD_BYTES + 8 * _EXPIRE_AT)[0]
        if expire_at_ms > MAX_COUNTER:
            return f"holds an expiry time past {MAX_COUNTER}"
    return ""


# --- restoring ----------------------------------------------------------------------------------------


async def restore_backup(
    client: AsyncClient,
    directory: Path,
    *,
    maps: Sequence[str] | None = None,
    merge: bool = False,
    progress: Progress | None = None,
) -> RestoreReport:
    """Write the backup in ``directory`` (every map, or ``maps``) into the cluster, once it was
    checked whole. Without ``merge``, a map that holds entries in the cluster already is refused
    before anything is written."""
    started = time.monotonic()
    manifest = check_backup(directory, maps)
    chosen = _chosen(manifest, maps)
    if not merge:
        for copy in chosen:
            held = await client.get_map(copy.name).size()
            if held:
                raise BackupError(
                    f"map {copy.name!r} holds {held} entries in this cluster: a restore writes into empty maps "
                    "(or merges with --merge, the backup's entries written over these)"
                )
    written: dict[str, int] = {}
    expired = 0
    for copy in chosen:
        count = 0
        reported_s = time.monotonic()
        batch: tuple[list[bytes], list[bytes], bytearray] = ([], [], bytearray())
        for page in _read_pages(directory, copy, manifest):
            now_ms = int(time.time() * 1000)
            for key, value, ttl_ms in _records(page, now_ms):
                if ttl_ms < 0:
                    expired += 1
                    continue
                batch[0].append(key)
                batch[1].append(value)
                batch[2].extend(_U64.pack(ttl_ms))
                if len(batch[0]) >= RESTORE_BATCH_ENTRIES:
                    count += await _put(client, copy.name, batch)
                    batch = ([], [], bytearray())
            if progress is not None and time.monotonic() - reported_s >= PROGRESS_EVERY_S:
                reported_s = time.monotonic()
                progress(f"{copy.name}: {count:,} of {copy.records:,} records written")
        count += await _put(client, copy.name, batch)
        written[copy.name] = count
        if progress is not None:
            progress(f"{copy.name}: {count:,} records written")
    return RestoreReport(maps=written, expired=expired, seconds=time.monotonic() - started)


def _records(page: BackupPage, now_ms: int) -> Iterator[tuple[bytes, bytes, int]]:
    """Each record's key, value and time left to live (0: until removed; -1: expired)."""
    key_lengths = unpacked_lengths(page.key_lengths)
    value_lengths = unpacked_lengths(page.value_lengths)
    key_at = value_at = 0
    for index, (key_length, value_length) in enumerate(zip(key_lengths, value_lengths, strict=True)):
        key = page.keys[key_at : key_at + key_length]
        value = page.values[value_at : value_at + value_length]
        key_at += key_length
        value_at += value_length
        expire_at_ms = _U64.unpack_from(page.metadata, index * METADATA_RECORD_BYTES + 8 * _EXPIRE_AT)[0]
        if expire_at_ms == 0:
            yield key, value, 0
        else:
            # (A time left past what a put takes is the longest a put takes: the clock of the
            # members that wrote it ran ahead of this one.)
            yield key, value, min(expire_at_ms - now_ms, MAX_TTL_MS) if expire_at_ms > now_ms else -1


async def _put(client: AsyncClient, map_name: str, batch: tuple[list[bytes], list[bytes], bytearray]) -> int:
    keys, values, ttls = batch
    if keys:
        await client.map_call(m.PUT, map_name, keys, values, ttls_ms=bytes(ttls))
    return len(keys)
