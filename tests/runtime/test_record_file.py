"""A file of records on a real disk: what was synced survives a SIGKILL of the writer at any
moment (the page cache outlives a SIGKILL, so this proves the framing and the reopen, not the
fsync: the simulator's disk, which loses what was not synced, covers that); a torn tail is cut at
open and the file goes on after the last whole record; corruption is refused with the file and
the byte; a replacement is atomic; a full disk (here, the writer's file size limit) is refused
and leaves the file whole."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from shardgrid.core.disk_records import SECTOR_BYTES, encode_record, scan_records, sync_marker
from shardgrid.core.errors import CorruptDisk
from shardgrid.runtime.record_file import TEMPORARY_SUFFIX, DiskFailed, RecordFile


def record(number: int) -> bytes:
    return encode_record(1, number.to_bytes(4, "big") * 25)  # a hundred bytes of payload


def numbers_in(path: Path) -> list[int]:
    file, scan = RecordFile.open(path)
    file.close()
    return [int.from_bytes(payload[:4], "big") for _, payload in scan.records]


def test_appends_read_back_after_a_sync_and_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "log"
    file, scan = RecordFile.open(path)
    assert scan.records == ()
    for number in range(10):
        file.append(record(number))
    assert file.sync() > 0
    assert file.sync() == 0.0  # nothing new
    file.close()
    assert numbers_in(path) == list(range(10))


def test_a_torn_tail_is_cut_at_open_and_the_next_record_follows_the_last_whole_one(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(record(1) + record(2) + record(3)[:50])
    file, scan = RecordFile.open(path)
    assert (len(scan.records), scan.torn_bytes) == (2, 50)
    assert path.stat().st_size == 2 * len(record(1)) + len(sync_marker(0))  # cut, synced, marked
    file.append(record(4))
    file.sync()
    file.close()
    assert numbers_in(path) == [1, 2, 4]


def test_a_file_opened_but_not_accepted_is_left_as_found_and_a_busy_one_untouched(tmp_path: Path) -> None:
    """Found by an outside tester: a directory refused after it was read (another address's) had
    its torn tails cut and its replacements in progress removed, and a second process on a busy
    directory deleted the first one's replacement before it learned the lock was taken."""
    path = tmp_path / "log"
    torn = record(1) + record(2)[:50]
    path.write_bytes(torn)
    replacement = path.with_name(path.name + TEMPORARY_SUFFIX)
    replacement.write_bytes(b"in progress")
    file, scan = RecordFile.open(path, accept=False)
    assert scan.torn_bytes == 50
    assert path.read_bytes() == torn
    assert replacement.exists()
    with pytest.raises(DiskFailed, match="open in another process"):
        RecordFile.open(path)
    assert replacement.exists()  # the second opener touched nothing
    file.accept()
    assert path.read_bytes() == record(1) + sync_marker(len(record(1)))
    assert not replacement.exists()
    file.append(record(3))
    file.sync()
    file.close()
    assert numbers_in(path) == [1, 3]


def test_corruption_names_the_file_and_the_byte_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "log"
    damaged = bytearray(record(1) + record(2) + record(3))
    damaged[len(record(1)) + 20] ^= 0x10
    path.write_bytes(bytes(damaged))
    with pytest.raises(CorruptDisk, match=rf"{path} is corrupt at byte {len(record(1))}"):
        RecordFile.open(path)
    assert path.read_bytes() == bytes(damaged)


def test_a_synced_record_holding_zeros_and_damaged_is_refused_not_cut_off_as_torn(tmp_path: Path) -> None:
    """An outside tester's finding: a record whose value holds a sector of zeros, damaged by one
    flipped bit, was read as a torn tail, and the synced records after it were cut off at open."""
    path = tmp_path / "log"
    file, _ = RecordFile.open(path)
    zeros = encode_record(2, b"v" * 100 + bytes(3 * SECTOR_BYTES) + b"w" * 100)
    file.append(record(1) + zeros)
    file.sync()
    for number in range(2, 6):
        file.append(record(number))
        file.sync()
    file.close()
    damaged = bytearray(path.read_bytes())
    start = damaged.index(zeros)
    damaged[start + 40] ^= 0x04  # in the record's own bytes, before its zeros
    path.write_bytes(bytes(damaged))
    with pytest.raises(CorruptDisk, match=rf"corrupt at byte {start}: .*synced"):
        RecordFile.open(path)
    assert path.read_bytes() == bytes(damaged)


def test_a_replacement_is_whole_and_a_half_written_one_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "log"
    file, _ = RecordFile.open(path)
    for number in range(5):
        file.append(record(number))
    file.sync()
    file.replace(record(7))
    file.append(record(8))
    file.sync()
    file.close()
    assert numbers_in(path) == [7, 8]
    (tmp_path / ("log" + TEMPORARY_SUFFIX)).write_bytes(record(99)[:10])  # a crash mid-replacement
    assert numbers_in(path) == [7, 8]
    assert not (tmp_path / ("log" + TEMPORARY_SUFFIX)).exists()


def test_a_next_file_takes_the_files_place_whole_and_one_left_unfinished_is_removed(tmp_path: Path) -> None:
    """A compaction: the next file is written beside the file (which is written on meanwhile),
    then synced and renamed into its place; one a crash left unfinished is removed at the next
    open, the file itself whole, and one given up is deleted."""
    path = tmp_path / "log"
    following = tmp_path / ("log" + TEMPORARY_SUFFIX)
    file, _ = RecordFile.open(path)
    for number in range(5):
        file.append(record(number))
    file.begin_next(record(10))
    file.append(record(5))  # the file goes on meanwhile
    file.append_next(record(11))
    file.sync()
    assert numbers_in_open(path) == [0, 1, 2, 3, 4, 5]
    assert following.exists()
    assert file.next_bytes == 2 * len(record(0))
    file.adopt_next()
    assert (file.size_bytes, file.next_bytes) == (2 * len(record(0)) + len(sync_marker(0)), 0)
    file.append(record(12))
    file.sync()
    file.begin_next(record(20))
    file.discard_next()
    assert not following.exists()
    file.begin_next(record(30))  # unfinished when the process stops
    file.close()
    assert numbers_in(path) == [10, 11, 12]
    assert not following.exists()


def numbers_in_open(path: Path) -> list[int]:
    """The records of a file another RecordFile holds open (read without taking its lock)."""
    return [int.from_bytes(payload[:4], "big") for _, payload in scan_records(path.read_bytes()).records]


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from shardgrid.core.disk_records import encode_record
    from shardgrid.runtime.record_file import RecordFile

    file, scan = RecordFile.open(Path(sys.argv[1]))
    number = len(scan.records)
    while True:
        for _ in range(int(sys.argv[2])):
            file.append(encode_record(1, number.to_bytes(4, "big") * 25))
            number += 1
        file.sync()
        print(number, flush=True)  # every record before it is durable
    """
)


@pytest.mark.parametrize("batch", [1, 50])
def test_every_synced_record_survives_a_sigkill_of_the_writer(tmp_path: Path, batch: int) -> None:
    path = tmp_path / "log"
    synced = 0
    for round_number in range(3):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(batch)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert writer.stdout is not None
            deadline = time.monotonic() + 20
            for _ in range(5 + round_number * 7):
                line = writer.stdout.readline()
                assert line, "the writer stopped"
                synced = int(line)
                assert time.monotonic() < deadline
        finally:
            os.kill(writer.pid, signal.SIGKILL)
            writer.wait(timeout=10)
        held = numbers_in(path)
        assert len(held) >= synced
        assert held == list(range(len(held)))  # in order, none lost, none made up


FULL_WRITER = textwrap.dedent(
    """
    import resource, signal, sys
    from pathlib import Path
    from shardgrid.core.disk_records import encode_record
    from shardgrid.runtime.record_file import DiskFull, RecordFile

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    file, _ = RecordFile.open(Path(sys.argv[1]))
    number = 0
    try:
        while True:
            file.append(encode_record(1, number.to_bytes(4, "big") * 25))
            file.sync()
            number += 1
    except DiskFull as error:
        print(number, error, flush=True)
    """
)


def test_a_full_disk_is_refused_and_the_file_still_ends_at_a_whole_record(tmp_path: Path) -> None:
    path = tmp_path / "log"
    done = subprocess.run(
        [sys.executable, "-c", FULL_WRITER, str(path)], capture_output=True, text=True, timeout=60, check=True
    )
    written, _, reason = done.stdout.strip().partition(" ")
    assert "the disk refused" in reason
    left = path.read_bytes()
    assert len(left) <= 4096
    scan = scan_records(left)  # whole records and sync markers, nothing torn
    assert (scan.valid_bytes, scan.torn_bytes, scan.corrupt) == (len(left), 0, "")
    assert numbers_in(path) == list(range(int(written)))


def test_a_file_open_in_another_process_is_refused(tmp_path: Path) -> None:
    """Two members on one data directory would write over each other (found by an outside
    tester: both synced, and the file held the second's records over the first's)."""
    path = tmp_path / "log"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "open"
        with pytest.raises(DiskFailed, match="open in another process"):
            RecordFile.open(path)
    finally:
        holder.kill()
        holder.wait(timeout=10)
    file, _ = RecordFile.open(path)  # free again once its holder is gone
    file.close()


HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from shardgrid.runtime.record_file import RecordFile

    file, _ = RecordFile.open(Path(sys.argv[1]))
    print("open", flush=True)
    sys.stdin.read()
    """
)


def test_a_failed_sync_ends_the_files_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Linux drops the pages it could not write: a second sync would report success for data that
    is gone, so the file refuses every later write and sync."""
    file, _ = RecordFile.open(tmp_path / "log")
    file.append(record(1))

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(DiskFailed, match="a sync failed"):
        file.sync()
    monkeypatch.undo()
    with pytest.raises(DiskFailed, match="a sync failed"):
        file.sync()
    with pytest.raises(DiskFailed):
        file.append(record(2))
    file.close()


def test_a_directory_where_the_file_belongs_is_refused(tmp_path: Path) -> None:
    (tmp_path / "log").mkdir()
    with pytest.raises(DiskFailed, match="is a directory"):
        RecordFile.open(tmp_path / "log")
