"""A backup's files read back: what a backup writes is taken whole, and anything else (a file
changed, cut short or swapped, a manifest that lies or names a path outside, a page whose columns
do not add up though its checksums hold) is refused before a restore writes anything."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import msgspec
import pytest

from shardgrid._engine import pack
from shardgrid.client.aio import PackedEntries
from shardgrid.client.backup import (
    MANIFEST,
    BackupError,
    BackupPage,
    Manifest,
    MapCopy,
    _pages,
    _records,
    check_backup,
)
from shardgrid.core.disk_records import RecordKind, encode_record


def _metadata(expire_at_ms: list[int]) -> bytes:
    return b"".join(struct.pack("<6Q", 1, 1, 1, expire, 0, 1) for expire in expire_at_ms)


def _entries(count: int, expire_at_ms: int = 0) -> PackedEntries:
    keys = [b"k%d" % i for i in range(count)]
    values = [b"v" * (i % 7) for i in range(count)]
    (key_data, key_lengths), (value_data, value_lengths) = pack(keys), pack(values)
    return PackedEntries(key_data, key_lengths, value_data, value_lengths, _metadata([expire_at_ms] * count))


def _write(directory: Path, pages: list[BackupPage], records: int | None = None, partition_count: int = 4) -> Path:
    directory.mkdir()
    data = b"".join(encode_record(RecordKind.BACKUP_PAGE, msgspec.msgpack.encode(page)) for page in pages)
    (directory / "map-0001.records").write_bytes(data)
    count = sum(len(page.key_lengths) // 4 for page in pages) if records is None else records
    manifest = Manifest(cluster_name="shardgrid", partition_count=partition_count, taken_at_ms=1)
    manifest.maps.append(
        MapCopy(
            name="m",
            file="map-0001.records",
            records=count,
            file_bytes=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
        )
    )
    (directory / MANIFEST).write_text(json.dumps(manifest.document()))
    return directory


def test_what_a_backup_writes_reads_back_whole(tmp_path: Path) -> None:
    pages = [*_pages("m", 0, _entries(25_000)), *_pages("m", 3, _entries(10))]
    assert len(pages) == 4  # 10,000 records a page at most
    manifest = check_backup(_write(tmp_path / "b", pages))
    assert manifest.maps[0].records == 25_010
    assert [key for page in pages[:1] for key, _, _ in _records(page, 0)][:2] == [b"k0", b"k1"]


def test_a_record_keeps_the_time_it_had_left_and_an_expired_one_is_marked() -> None:
    (page,) = _pages("m", 0, _entries(2, expire_at_ms=10_000))
    assert [ttl for _, _, ttl in _records(page, 4_000)] == [6_000, 6_000]
    assert [ttl for _, _, ttl in _records(page, 10_000)] == [-1, -1]
    (forever,) = _pages("m", 0, _entries(1))
    assert [ttl for _, _, ttl in _records(forever, 10**12)] == [0]


@pytest.mark.parametrize(
    "damage",
    [
        "flipped",
        "cut-short",
        "record-count",
        "partition-past-the-end",
        "lengths",
        "metadata",
        "path",
        "format",
        "another-maps-page",
        "expiry",
        "size",
        "a-link",
        "twice",
    ],
)
def test_a_damaged_backup_is_refused_naming_what_is_wrong(tmp_path: Path, damage: str) -> None:
    pages = list(_pages("m", 1, _entries(100)))
    if damage == "partition-past-the-end":
        pages = [msgspec.structs.replace(pages[0], partition_id=4)]
    elif damage == "lengths":
        pages = [msgspec.structs.replace(pages[0], keys=pages[0].keys[:-1])]
    elif damage == "metadata":
        pages = [msgspec.structs.replace(pages[0], metadata=pages[0].metadata[:-48])]
    elif damage == "another-maps-page":  # a file swapped with another map's, checksums and all
        pages = [msgspec.structs.replace(pages[0], map_name="other")]
    elif damage == "expiry":
        pages = [msgspec.structs.replace(pages[0], metadata=_metadata([2**63] * 100))]
    directory = _write(tmp_path / "b", pages, records=99 if damage == "record-count" else None)
    data_file = directory / "map-0001.records"
    manifest = json.loads((directory / MANIFEST).read_text())
    if damage in ("flipped", "cut-short"):
        data = bytearray(data_file.read_bytes())
        if damage == "flipped":
            data[len(data) // 2] ^= 0x10
        else:
            del data[-5:]
        data_file.write_bytes(bytes(data))
        manifest["maps"][0]["sha256"] = hashlib.sha256(data).hexdigest()  # only the records' checksums tell
        manifest["maps"][0]["file_bytes"] = len(data)
    elif damage == "size":
        data_file.write_bytes(data_file.read_bytes() + b"x")
    elif damage == "a-link":
        data_file.unlink()
        data_file.symlink_to("/dev/zero")
    elif damage == "twice":
        manifest["maps"].append(dict(manifest["maps"][0]))
    elif damage == "path":
        manifest["maps"][0]["file"] = "../elsewhere"
    elif damage == "format":
        manifest["format_version"] = 99
    (directory / MANIFEST).write_text(json.dumps(manifest))
    expected = {
        "flipped": "damaged at byte",
        "cut-short": "cut short",
        "record-count": "its manifest says 99",
        "partition-past-the-end": "past the backup's 4 partitions",
        "lengths": "do not add up",
        "metadata": "columns of different lengths",
        "path": "names a map or a file no backup writes",
        "format": "format version 99",
        "another-maps-page": "is of map 'other', not 'm'",
        "expiry": "an expiry time past",
        "size": "its manifest says",
        "a-link": "is not a regular file",
        "twice": "names a map twice",
    }[damage]
    with pytest.raises(BackupError, match=expected):
        check_backup(directory)


def test_a_directory_without_a_manifest_is_no_backup(tmp_path: Path) -> None:
    with pytest.raises(BackupError, match="is not a backup"):
        check_backup(tmp_path)
    (tmp_path / MANIFEST).write_text("{not json")
    with pytest.raises(BackupError, match="is damaged"):
        check_backup(tmp_path)
    # Nested past the interpreter's recursion limit, within the manifest's size (an outside
    # tester's: a traceback instead of a refusal).
    (tmp_path / MANIFEST).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BackupError, match="is damaged: RecursionError"):
        check_backup(tmp_path)
