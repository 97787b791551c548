"""One file of checksummed records (``core/disk_records``) on a member's disk: appended to, synced
once for all that was appended since the last sync (group commit), and replaced whole, atomically.

Opening a file locks it (a second process opening it is refused: two members on one data
directory would write over each other) and reads it through: a torn tail (the process stopped
mid-write) is cut off, and the file is synced before anything in it counts, since after a crash
the page cache may still hold records that never reached the disk, and a restarted member must
not acknowledge them as durable (found by an outside tester). Corruption is ``CorruptDisk``
naming the file and the byte where it starts, and nothing is changed. A write the disk refuses
(full, or the file at its size limit) is ``DiskFull``: the file is cut back to where the write
began, so it still ends at a whole record and holds everything synced before. A failed sync is
the end of the file's use (``DiskFailed`` from then on): Linux drops the pages it could not write,
so a second sync would report success for data that is gone ("fsyncgate").
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from pathlib import Path
from typing import NoReturn

from shardgrid.core.disk_records import Scan, refuse_corrupt, scan_records, sync_marker
from shardgrid.core.errors import ShardgridError, invariant

TEMPORARY_SUFFIX = ".new"  # a replacement being written: never read, removed at open


class DiskFull(ShardgridError):
    """The disk (or the file's size limit) refused a write; what the file held is intact."""


class DiskFailed(ShardgridError):
    """The file cannot be trusted to hold what was written to it: a sync failed, or another process
    holds it. The member must stop writing to it (and, for a sync, restart from what is on disk)."""


_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


class RecordFile:
    """An open file of records. One owner: the member process's disk writer."""

    def __init__(self, path: Path, fd: int, size_bytes: int) -> None:
        self.path = path
        self._fd = fd
        self.size_bytes = size_bytes
        self._unsynced = False
        # The file being written anew beside this one (a compaction's next file, at TEMPORARY_SUFFIX):
        # never read; it takes this file's place whole (``adopt_next``), or is removed.
        self._next_fd = -1
        self.next_bytes = 0
        self._failed = ""  # why the file may no longer be written ('' while it may)
        self._accepted = True  # taken as read (``accept``): it may be written

    @classmethod
    def open(cls, path: Path, *, accept: bool = True) -> tuple[RecordFile, Scan]:
        """Open ``path`` (made when missing), lock it and read what it holds, then ``accept`` it
        (unless told not to: nothing of it is then changed until ``accept`` is called, so that a
        directory refused after reading, another cluster's or another address's, is left as it
        was found). A second process on a busy file is refused before it touches anything (found
        by an outside tester: it deleted the first one's replacement in progress)."""
        if path.is_dir():
            raise DiskFailed(f"{path} is a directory, not a file of records")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as error:
                raise DiskFailed(f"{path} is open in another process (two members on one data directory?)") from error
            scan = scan_records(_read_all(fd))
            refuse_corrupt(scan, path)
        except BaseException:
            os.close(fd)
            raise
        record_file = cls(path, fd, scan.valid_bytes)
        record_file._accepted = False
        if accept:
            try:
                record_file.accept()
            except BaseException:
                os.close(fd)
                raise
        return record_file, scan

    def accept(self) -> None:
        """Take the file as read, to write on: a torn tail is cut off, a replacement a crash cut
        short is removed, and the file is synced before anything in it counts (after a crash the
        page cache may still hold records that never reached the disk, and a restarted member
        must not acknowledge them as durable)."""
        if self._accepted:
            return
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            os.unlink(self.path.with_name(self.path.name + TEMPORARY_SUFFIX))
        if os.fstat(self._fd).st_size != self.size_bytes:
            os.ftruncate(self._fd, self.size_bytes)
        os.fsync(self._fd)
        os.lseek(self._fd, self.size_bytes, os.SEEK_SET)
        _sync_directory(self.path.parent)  # the file's own name is durable before anything in it counts
        self._accepted = True
        self._mark_synced()

    def append(self, data: bytes) -> None:
        """Write ``data`` (whole records) after what the file holds; durable at the next ``sync``."""
        self._check_usable()
        start = self.size_bytes
        try:
            _write_all(self._fd, data)
        except OSError as error:
            self._cut_back(start)
            _refused(error, f"{self.path}: the disk refused {len(data)} bytes")
        self.size_bytes = start + len(data)
        self._unsynced = True

    def begin_next(self, data: bytes) -> None:
        """Begin the file's next one with ``data`` (one begun before is discarded)."""
        self._check_usable()
        self.discard_next()
        temporary = self.path.with_name(self.path.name + TEMPORARY_SUFFIX)
        fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
        self._next_fd = fd
        self.next_bytes = 0
        self.append_next(data)

    def append_next(self, data: bytes) -> None:
        """Write ``data`` after what the next file holds (synced only when it is adopted)."""
        self._check_usable()
        invariant(self._next_fd >= 0, lambda: f"{self.path}: no next file to append to")
        try:
            _write_all(self._next_fd, data)
        except OSError as error:
            self.discard_next()  # what it held is of no use now; the file itself is whole
            _refused(error, f"{self.path}: the disk refused {len(data)} bytes of its compaction")
        self.next_bytes += len(data)

    def adopt_next(self) -> None:
        """The next file, synced, becomes this file, atomically: a crash leaves one or the other."""
        self._check_usable()
        invariant(self._next_fd >= 0, lambda: f"{self.path}: no next file to adopt")
        temporary = self.path.with_name(self.path.name + TEMPORARY_SUFFIX)
        try:
            os.fsync(self._next_fd)
            os.replace(temporary, self.path)
        except OSError as error:
            self.discard_next()
            _refused(error, f"{self.path}: no room to take its compaction")
        _sync_directory(self.path.parent)
        os.close(self._fd)
        self._fd, self._next_fd = self._next_fd, -1
        self.size_bytes, self.next_bytes = self.next_bytes, 0
        self._unsynced = False
        self._mark_synced()

    def discard_next(self) -> None:
        """Remove the next file (a compaction given up), if there is one."""
        if self._next_fd < 0:
            return
        os.close(self._next_fd)
        self._next_fd = -1
        self.next_bytes = 0
        with contextlib.suppress(OSError):
            os.unlink(self.path.with_name(self.path.name + TEMPORARY_SUFFIX))

    def sync(self) -> float:
        """Make every append durable; the seconds it took (0 when nothing was appended)."""
        self._check_usable()
        if not self._unsynced:
            return 0.0
        started = time.perf_counter()
        try:
            os.fdatasync(self._fd)
        except OSError as error:
            self._failed = f"a sync failed ({error.strerror}): what it held may be lost"
            raise DiskFailed(f"{self.path}: {self._failed}") from error
        self._unsynced = False
        took = time.perf_counter() - started
        self._mark_synced()
        return took

    def replace(self, data: bytes) -> None:
        """Make ``data`` the whole file, atomically: a crash leaves the old file or the new one."""
        self._check_usable()
        self.discard_next()  # (written at the same temporary name)
        temporary = self.path.with_name(self.path.name + TEMPORARY_SUFFIX)
        fd = -1
        try:
            fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _write_all(fd, data)
            os.fsync(fd)
            os.replace(temporary, self.path)
        except OSError as error:
            if fd >= 0:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
            _refused(error, f"{self.path}: no room to rewrite it")
        _sync_directory(self.path.parent)
        os.close(self._fd)
        self._fd = fd  # the new file, positioned at its end
        self.size_bytes = len(data)
        self._unsynced = False
        self._mark_synced()

    def truncate(self, size_bytes: int) -> None:
        """Cut the file back to ``size_bytes`` (records a reader found no whole use for), durably."""
        self._check_usable()
        if size_bytes >= self.size_bytes:
            return
        os.ftruncate(self._fd, size_bytes)
        os.lseek(self._fd, size_bytes, os.SEEK_SET)
        os.fsync(self._fd)
        self.size_bytes = size_bytes
        self._mark_synced()

    def _mark_synced(self) -> None:
        """Append a sync marker: everything the file holds is durable (see ``disk_records``). It
        is not synced itself (the next sync carries it), and a disk that refuses it loses nothing:
        the marker is cut off again and the next write meets the refusal."""
        start = self.size_bytes
        marker = sync_marker(start)
        try:
            _write_all(self._fd, marker)
        except OSError:
            self._cut_back(start)
            return
        self.size_bytes = start + len(marker)

    def _check_usable(self) -> None:
        invariant(self._accepted, lambda: f"{self.path} is written before it was accepted")
        if self._failed:
            raise DiskFailed(f"{self.path}: {self._failed}")

    def close(self) -> None:
        if self._next_fd >= 0:
            os.close(self._next_fd)
            self._next_fd = -1
        os.close(self._fd)

    def _cut_back(self, size_bytes: int) -> None:
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, size_bytes)
            os.lseek(self._fd, size_bytes, os.SEEK_SET)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _refused(error: OSError, full: str) -> NoReturn:
    """Raise for a write the disk refused: ``DiskFull`` (saying ``full``) when it is out of room,
    the error itself otherwise."""
    if error.errno in _FULL:
        raise DiskFull(f"{full} ({error.strerror})") from error
    raise error


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks = []
    offset = 0
    while offset < size:
        chunk = os.pread(fd, min(size - offset, 1 << 24), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
